"""Helpers for tests that use the local Slurm of tests/slurm/start.sh (the session fixture is in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import pytest

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("MBRIDGE_SLURM_STATE", "/tmp/cloudai-mbridge-slurm"))

T = TypeVar("T")


@dataclass(frozen=True)
class SlurmCluster:
    """The running cluster: its config and the node names start.sh made."""

    conf: Path
    nodes: list[str]


def _ctld_running() -> bool:
    """slurmctld of this state dir runs (same test as start.sh: a live, non-zombie PID from its PID file)."""
    try:
        pid = int((STATE / "run" / "slurmctld.pid").read_text().split()[0])
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError, IndexError):
        return False
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    state = stat[stat.rindex(")") + 2 :].split()[0]
    return name == "slurmctld" and state not in ("Z", "X")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def run(*cmd: str) -> str:
    """Run a Slurm command; its stdout (fails the test on a non-zero exit)."""
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"{' '.join(cmd)} -> {proc.returncode}: {proc.stderr}"
    return proc.stdout


FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED")


def sacct_final(job_id: int, timeout: float = 60.0) -> list[tuple[str, str, str]]:
    """(JobID, State, ExitCode) of the job and its steps once sacct shows the job in a final state.

    sacct lags a moment after sbatch and after the job ends, so this polls, and waits for squeue to drop it too.
    """

    def probe() -> list[tuple[str, str, str]] | None:
        if run("squeue", "-h", "-j", str(job_id), "-o", "%i").strip():
            return None
        rows = [
            tuple(line.split("|"))
            for line in run("sacct", "-j", str(job_id), "-n", "-P", "-o", "JobID,State,ExitCode").splitlines()
        ]
        job = [r for r in rows if r[0] == str(job_id)]
        if not job or not job[0][1].startswith(FINAL_STATES):
            return None
        # The steps are recorded too; wait until none is still shown running.
        if any(not r[1].startswith(FINAL_STATES) for r in rows):
            return None
        return rows  # type: ignore[return-value]

    return wait_for(f"job {job_id} to end in sacct", probe, timeout)


def sbatch(*args: str) -> int:
    """Submit a batch job; its id."""
    return int(run("sbatch", "--parsable", *args).strip().split(";")[0])
