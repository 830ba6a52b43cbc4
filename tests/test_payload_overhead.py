"""benchmarks/payload_overhead.py (the payload against Bridge's own pretrain()): both arms get one config, and its
numbers come from the run folders through the same parser and bootstrap as the A/B. The GPU run itself is recorded
in benchmarks/results when a host ran it; here the plan and the report path."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_dry_run_prints_one_bridge_config_for_both_arms():
    out = subprocess.run([sys.executable, "benchmarks/payload_overhead.py", "--dry-run", "--starts", "2"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    first, second = out.splitlines()[:2]
    assert "2 starts x payload, plain (alternating order)" in first
    cfg = json.loads(second)
    assert (cfg["engine"], cfg["world_size"], cfg["dispatcher"], cfg["data"]) == ("bridge", 1, "alltoall", "mock")


def test_the_plain_runner_is_bridges_pretrain_without_the_payloads_additions():
    text = (ROOT / "benchmarks" / "plain_bridge.py").read_text()
    assert "pretrain(container, forward_step)" in text
    assert "callbacks" not in text.split('"""', 2)[2]
