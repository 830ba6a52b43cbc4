"""The local launcher's per-run timeout ends the whole start (payload/refit/local.py launch, used by
benchmarks/gpu_dispatcher_ab.py for every A/B start): a torchrun-like rank whose child ignores SIGTERM and holds the
rank's output open is gone within the limit, the rank log says the launcher ended it, and the call returns so the
remaining starts run. Seen on 2 x H200 (2026-11-29): a hung deepep start outlived its 180 s timeout until an outer
timeout (~430 s), because the launcher killed the rank alone and then waited for its pipes to close."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from cloudai_mbridge.payload.refit import local

# A rank like torchrun's parent: it starts a worker that ignores SIGTERM (and inherits the rank's stdout), answers
# SIGUSR1 with its stacks as the training payload does, and waits for the worker forever.
FAKE_RANK = """
import faulthandler, os, signal, subprocess, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)
child = subprocess.Popen([sys.executable, "-c", "import os, signal, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                          "print('CHILD', os.getpid(), flush=True); time.sleep(300)"])
print("PARENT", os.getpid(), flush=True)
child.wait()
"""


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper that is not us counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _pids(log: Path, tag: str) -> list[int]:
    return [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith(tag + " ")]


def test_the_timeout_ends_the_rank_and_the_child_that_ignores_sigterm(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "fake_rank.py").write_text(FAKE_RANK)
    monkeypatch.setattr(local, "TERM_GRACE_S", 0.5)
    monkeypatch.setattr(local, "STACKS_WAIT_S", 0.3)
    logs = tmp_path / "logs"
    result: dict = {}

    def go() -> None:
        result["run"] = local.launch({}, 2, timeout=2, module="fake_rank", cwd=tmp_path, log_dir=logs)

    start = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(timeout=30)
    elapsed = time.monotonic() - start
    children = [pid for rank in (0, 1) if (logs / f"rank-{rank}.log").exists()
                for pid in _pids(logs / f"rank-{rank}.log", "CHILD")]
    try:
        assert not thread.is_alive(), "launch did not return: the timeout left the start running"
        run = result["run"]
        # 2 s timeout + 0.3 s for the stacks + 0.5 s SIGTERM grace + the SIGKILL: well inside 2 x the limit
        assert elapsed < 8.0, elapsed
        assert run.timed_out
        assert all(rc is not None and rc < 0 for rc in run.returncodes), run.returncodes
        assert len(children) == 2
        gone_by = time.monotonic() + 10  # a killed child is reaped by init: under load that can lag the return
        while any(_alive(pid) for pid in children) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in children), "a rank's child outlived the timeout"
        for rank in (0, 1):
            log = (logs / f"rank-{rank}.log").read_text()
            assert log == run.stdout[rank]
            assert "PARENT" in log and "CHILD" in log
            assert "Current thread" in log  # SIGUSR1: the rank's stacks before it was ended
            assert log.endswith(f"MBRIDGE_LAUNCH_TIMEOUT rank={rank} timeout_s=2\n")
    finally:
        for pid in children:  # a failed run of this test must not leave its sleepers behind
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_start_that_ends_by_itself_is_not_a_timeout(tmp_path: Path) -> None:
    (tmp_path / "quick_rank.py").write_text("import os\nprint('RANK', os.environ['RANK'])\n")
    run = local.launch({}, 2, timeout=60, module="quick_rank", cwd=tmp_path)
    assert run.returncodes == [0, 0] and not run.timed_out
    assert run.stdout == ["RANK 0\n", "RANK 1\n"] and run.stderr == ["", ""]


# A driver like benchmarks/gpu_dispatcher_ab.py that an outer `timeout` ends while a start runs.
DRIVER = """
import sys
from cloudai_mbridge.payload.refit import local
local.launch({}, 1, timeout=300, module="fake_rank", cwd=sys.argv[1], log_dir=sys.argv[1] + "/logs")
print("NOT REACHED")
"""


def test_sigterm_to_the_driver_ends_its_ranks_and_then_the_driver(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "fake_rank.py").write_text(FAKE_RANK)
    log = tmp_path / "logs" / "rank-0.log"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)], cwd=Path(__file__).resolve().parents[2],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ranks: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (log.exists() and len(_pids(log, "CHILD")) == 1):
            time.sleep(0.1)
        ranks = _pids(log, "PARENT") + _pids(log, "CHILD")
        assert len(ranks) == 2, log.read_text() if log.exists() else "no rank log"
        start = time.monotonic()
        driver.send_signal(signal.SIGTERM)
        out, _ = driver.communicate(timeout=30)
        assert time.monotonic() - start < 8.0
        assert driver.returncode == -signal.SIGTERM, out  # the driver still ends as SIGTERM would end it
        assert "NOT REACHED" not in out
        gone_by = time.monotonic() + 10  # reaped by init a moment later under load
        while any(_alive(pid) for pid in ranks) and time.monotonic() < gone_by:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in ranks), "a rank or its child outlived the driver"
    finally:
        for pid in ranks:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
