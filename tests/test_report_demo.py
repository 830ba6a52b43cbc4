"""``python3 -m cloudai_mbridge.reports.demo``: the A/B and refit pages from recorded GPU runs, no GPU, one command,
everything under --output-dir. The A/B page shows the best recorded cell (benchmarks/results/bridge_ab_4gpu/
dsv3_mbs1_hybridep_2gpu_h10: 3 + 3 starts of the bridge engine through `cloudai run`, both gates passed, with where the
time went) and says where its
runs come from; the refit page says what benchmarks/results/gpu_refit_nccl.json recorded."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CELL = "benchmarks/results/bridge_ab_4gpu/dsv3_mbs1_hybridep_2gpu_h10"
with (ROOT / CELL / "mbridge_ab.csv").open(newline="") as _f:
    (RECORDED,) = list(csv.DictReader(_f))  # the report cloudai run wrote on the GPU host


def test_demo_writes_the_best_recorded_ab_cell_and_the_refit_page_into_its_folder_only(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "cloudai_mbridge.reports.demo", "--output-dir", "demo"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"A/B from {CELL}:" in proc.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]
    out = tmp_path / "demo"
    assert {p.name for p in out.iterdir()} >= {"mbridge_ab.html", "mbridge_ab.csv", "mbridge_refit.html",
                                                "mbridge_refit.csv", "runs"}
    page = (out / "mbridge_ab.html").read_text()
    # What won, by how much, how sure, over how many starts, by which method: the recorded cell's numbers.
    line = (f"no winner: within noise</span> hybridep vs alltoall: {float(RECORDED['delta_pct']):+.1f} % time per "
            f"iteration (95 % interval {RECORDED['delta_ci95_pct']} %; n = 3 + 3 starts, 24 + 24 steady-state "
            "iterations (manual-GC iterations 6 11 left out); bootstrap over starts, covering noise between starts "
            "and between iterations, on one machine)")
    assert line in page, line
    assert "all 6 runs finished" in page
    with (out / "mbridge_ab.csv").open(newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["base_starts"], row["arm_starts"], row["verdict"]) == ("3", "3", "within noise")
    assert row["routing"].startswith("same routing in 6 runs") and row["work"].startswith("lm loss inside")
    # Where the runs come from: the record's folder, how they ran, engine, versions, GPUs, dates.
    where = re.search(r"<b>Where the runs come from</b>: (.*?)</p>", page).group(1)
    for words in (f"the recorded cell {CELL}/", "3 + 3 starts, run by cloudai run", "engine bridge",
                  "Megatron-Bridge 0.6.2", "Megatron-Core 0.19.2", "2 x H200", "2026-11-29"):
        assert words in where, words
    assert f"<th>record</th><td>{CELL}/</td>" in page
    assert "cloudai run, test scenario bridge_ab_2gpu_dsv3_hybridep on system standalone-4gpu" in page
    assert "one machine: gpus-4f4776038934ee8e" in page
    assert "2026-11-29 17:32:16 to 17:39:23 (UTC as logged)" in page
    assert "engine mcore" not in page and "<td class='text short'>bridge</td>" in page
    assert "python3 -m cloudai_mbridge.reports.demo --output-dir demo" in page
    links = re.findall(r"href='([^'#]+)'", page)
    assert "runs/dsv3_mbs1_hybridep_2gpu_h10/start3/0/2/logs/rank-1.log" in links
    assert all((out / href).exists() for href in links)
    assert "dispatcher=hybridep (start 3 of 3)" in page
    # where the time went: the recorded split, not "not recorded"
    assert "1 of 1 comparisons carry dispatcher times" in page and row["time_split"] == "recorded"
    assert "<script" not in page and not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", page)
    refit = (out / "mbridge_refit.html").read_text()
    assert "From <b>TP1·EP2</b> (kimi-k2-shaped-2layer, 2 layers): one verified mapping <b>→ TP2·EP1</b>" in refit
    assert "gpu_refit_nccl.json" in refit and "2026-11-22T14:06:14+00:00" in refit
