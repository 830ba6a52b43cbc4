"""A start that hung is a failed start of its arm in the dispatcher A/B (issue 43): the cell says which start failed
and how ("hang at first dispatch", "hang after iteration 6"), and the hung start gives no iteration time, even when it
logged a few steady-state iterations before it stopped.

The cell is the recorded one (benchmarks/results/bridge_ab_4gpu/dsv3_mbs1: 4 x H100, Megatron-Bridge 0.6.2), with a
third deepep start added whose logs end in the payload watchdog's MBRIDGE_HANG line (payload/train/watchdog.py)."""

from __future__ import annotations

import csv
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CELL = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1" / "runs"
HUNG = "w1_deepep_s2"


def _cell(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(CELL, runs)
    shutil.rmtree(runs / "w3_ncclep_s0")
    shutil.rmtree(runs / "w3_alltoall_s0")
    shutil.rmtree(runs / "w3_alltoall_s1")
    shutil.rmtree(runs / "w3_alltoall_s2")
    return runs


def _hung_start(runs: Path, stop_at: int | None) -> None:
    """A copy of deepep start s0 whose ranks stop at iteration ``stop_at`` (None: at the first dispatch)."""
    src, dst = runs / "w1_deepep_s0", runs / HUNG
    (dst / "logs").mkdir(parents=True)
    shutil.copy(src / "mbridge_config.json", dst / "mbridge_config.json")
    for log in sorted((src / "logs").glob("rank-*.log")):
        rank = int(log.stem.split("-")[1])
        kept = []
        for line in log.read_text().splitlines(keepends=True):
            it = re.search(r"iteration=(\d+) |iteration\s+(\d+)/", line)
            if it and int(it.group(1) or it.group(2)) > (stop_at or 0):
                break
            kept.append(line)
        if stop_at is None:
            hang = f"MBRIDGE_HANG class=first_dispatch stage=first_dispatch after_s=120 rank={rank} timeout_s=120\n"
        else:
            hang = f"MBRIDGE_HANG class=later stage=iteration_{stop_at} after_s=120 rank={rank} timeout_s=120\n"
        (dst / "logs" / log.name).write_text("".join(kept) + hang)


def _report(tmp_path: Path, runs: Path) -> tuple[dict, dict]:
    pytest.importorskip("cloudai")
    from cloudai_mbridge.reports.folders import ab_report

    out = tmp_path / "out"
    out.mkdir()
    rows = ab_report(sorted(p for p in runs.iterdir() if (p / "mbridge_config.json").is_file()), out, warmup=4)
    with open(out / "mbridge_runs.csv", newline="") as f:
        by_run = {Path(r["run"]).name: r for r in csv.DictReader(f)}
    return {r["arm"]: r for r in rows}, by_run


@pytest.mark.parametrize(("stop_at", "words"), [(None, "hang at first dispatch"), (6, "hang after iteration 6")])
def test_a_hung_start_is_a_failed_start_of_its_arm(tmp_path, stop_at, words):
    runs = _cell(tmp_path)
    _hung_start(runs, stop_at)
    rows, by_run = _report(tmp_path, runs)
    deepep = rows["deepep"]
    assert deepep["arm_starts"] == 3
    assert deepep["verdict"].startswith("invalid:")
    assert f"deepep {HUNG}: status failed ({words} on rank 0: MBRIDGE_HANG" in deepep["verdict"]
    hung = by_run[HUNG]
    assert hung["status"] == "failed"
    assert hung["failure"].startswith(f"{words} on rank 0: MBRIDGE_HANG")
    assert hung["iter_ms"] == "" and hung["tflops_per_gpu"] == ""  # a hung start has no iteration time
    assert by_run["w1_deepep_s0"]["iter_ms"] != ""
