"""benchmarks/ab_work_gate.py: the same-work gate judged on the recorded 4 x H100 cells (a held-out alltoall start is
the yardstick), and an arm that really does other work (its loss off from the first iteration) is rejected every
time."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import ab_work_gate
import pytest

CELLS = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "bridge_ab_4gpu"


def _results(capsys: pytest.CaptureFixture[str], *cells: Path) -> dict[str, str]:
    assert ab_work_gate.main([str(c) for c in cells]) == 0
    out = capsys.readouterr().out
    return dict(re.findall(r"^RESULT (\w+)=(\S+)", out, flags=re.M))


def test_recorded_cells(capsys: pytest.CaptureFixture[str]) -> None:
    # k2_mbs2_h4: one of three held-out alltoall starts leaves the other two's envelope (iteration 12), as do two of
    # nine ncclep judgements; every start of both arms has the same loss to 3e-6 over iterations 1-3.
    r = _results(capsys, CELLS / "k2_mbs2_h4")
    assert r["ab_work_gate_cells"] == "1"
    assert r["ab_work_gate_baseline_rejected_pct"] == "33.3"
    assert r["ab_work_gate_ncclep_rejected_pct"] == "22.2"
    assert float(r["ab_early_loss_max_rel_diff"]) < 1e-5


def test_an_arm_with_other_work_is_rejected_every_time(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cell = shutil.copytree(CELLS / "k2_mbs2_h4" / "runs", tmp_path / "cell" / "runs")
    for log in cell.glob("*_ncclep*/logs/rank-*.log"):
        text = log.read_text()
        # 0.5 % more loss from iteration 1 on: what dropped tokens or a wrong combine weight would show
        log.write_text(re.sub(r"lm loss: ([0-9.E+-]+)", lambda m: f"lm loss: {float(m.group(1)) * 1.005:.6E}", text))
    r = _results(capsys, tmp_path / "cell")
    assert r["ab_work_gate_ncclep_rejected_pct"] == "100.0"
    assert r["ab_work_gate_baseline_rejected_pct"] == "33.3"  # the baseline is untouched
    assert float(r["ab_early_loss_max_rel_diff"]) == pytest.approx(0.005, rel=0.01)


def test_a_folder_without_runs_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ab_work_gate.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "runs/" in err and "Traceback" not in err
