"""``python3 -m cloudai_mbridge.reports.demo``: the A/B and refit pages from the recorded GPU runs, no GPU, one command,
everything under --output-dir; the page says what benchmarks/results/gpu_dispatcher_ab.json recorded."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = json.loads((ROOT / "benchmarks" / "results" / "gpu_dispatcher_ab.json").read_text())


def test_demo_writes_the_recorded_ab_and_refit_pages_into_its_folder_only(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "cloudai_mbridge.reports.demo", "--output-dir", "demo"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["demo"]
    out = tmp_path / "demo"
    assert {p.name for p in out.iterdir()} >= {"mbridge_ab.html", "mbridge_ab.csv", "mbridge_refit.html",
                                                "mbridge_refit.csv", "runs"}
    page = (out / "mbridge_ab.html").read_text()
    # What won, by how much, how sure: the recorded rows (tests/metrics/test_gpu_ab_fixtures.py holds them too).
    for row in RECORD["ab"]["rows"]:
        line = (f"no winner: within noise</span> deepep vs alltoall: {row['delta_pct']:+.1f} % time per iteration "
                f"(95 % interval {row['delta_ci95_pct']} %, n = 26 + 26 iterations)")
        assert line in page, line
    assert "all 4 runs finished" in page
    # Provenance: the logs' engine, the device command's record, the command that wrote the page, live log links.
    prov = RECORD["provenance"]
    assert "Megatron-Bridge not used (engine mcore)" in page
    assert f"<th>Megatron-Core</th><td>{prov['megatron_core']}</td>" in page and "2 x NVIDIA H200" in page
    assert "2026-11-22 15:47:38 to 15:50:20 (UTC as logged)" in page
    assert "python3 -m cloudai_mbridge.reports.demo --output-dir demo" in page
    links = re.findall(r"href='([^'#]+)'", page)
    assert "runs/ab_mbs1_overlap-off_deepep/logs/rank-1.log" in links
    assert all((out / href).exists() for href in links)
    assert "<script" not in page and not re.search(r"(?:src|href)=['\"]?(?:https?:)?//", page)
    refit = (out / "mbridge_refit.html").read_text()
    assert "From <b>TP1·EP2</b> (kimi-k2-shaped-2layer, 2 layers): fastest <b>→ TP2·EP1</b>" in refit
    assert "gpu_refit_nccl.json" in refit and "2026-11-22T14:06:14+00:00" in refit
