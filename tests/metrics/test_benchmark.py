"""benchmarks/parse_logs.py runs end to end on a tiny data set and cleans up after itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def test_parse_logs_benchmark_runs_tiny() -> None:
    args = ["--size-mb", "2", "--ranks", "64", "--repeat", "2"]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "parse_logs.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert re.fullmatch(r"RESULT parse_vs_grep=\d+\.\d+ x", lines[-1])
    # The parser really parsed the generated run: all 1000 iterations, every rank on EFA and UCCL-EP.
    check = next(ln for ln in lines if ln.startswith("check:"))
    assert "status=ok iterations=1000 steady=996 " in check
    # The generator draws each time within +-1 % of 5793.1 ms (the seed's 1F1B no-overlap NCCL arm).
    assert abs(float(re.search(r"iter_ms_mean=(\S+)", check).group(1)) - 5793.1) < 58
    assert any("efa_ranks=64 uccl_ranks=64 failure=ok" in ln for ln in lines)
    assert any(re.match(r"\s+grep: min .* MB/s", ln) for ln in lines)
    data_dir = re.search(r"MB in (\S+) \(generated", proc.stdout).group(1)
    assert not Path(data_dir).exists()
