"""Issue 32, robustness of the command line itself: a full standard output, a signal while CloudAI is imported,
a tests folder that is the whole disk, invisible characters in names, an absurd time limit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import CONF, ROOT

LOCAL = CONF / "system" / "local_slurm.toml"
SMOKE = CONF / "test_scenario" / "refit_cpu_smoke.toml"


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
def test_a_dry_run_into_a_full_standard_output_says_so_in_one_line_and_fails(tmp_path: Path) -> None:
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(tmp_path / "debug.log"), "dry-run",
             "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
            cwd=tmp_path, env=_env(), stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "Logging error" not in proc.stderr
    assert len(lines) == 1 and "could not write to standard output" in lines[0] and "[ENOSPC]" in lines[0], lines


@pytest.mark.parametrize("signum", [2, 15], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("delay", [0.3, 0.9])
def test_a_signal_while_cloudai_is_imported_is_one_line_not_a_traceback(tmp_path: Path, signum: int,
                                                                        delay: float) -> None:
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "cloudai_mbridge", "--log-file", str(tmp_path / "debug.log"), "dry-run",
         "--system-config", str(LOCAL), "--test-scenario", str(SMOKE), "--output-dir", str(tmp_path / "r")],
        cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(delay)
    proc.send_signal(signum)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signum, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert "stopped by SIG" in out
