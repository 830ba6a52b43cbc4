"""Run the refit payload as N local processes (the way torchrun would) and read its output back.

For the CPU tests and the CPU benchmark; jobs use torchrun/srun instead. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

_KV = re.compile(r"(\w+)=(\S+)")


@dataclass
class LocalRun:
    returncodes: list[int]
    stdout: list[str]
    stderr: list[str]
    parsed: dict = field(default_factory=dict)
    timed_out: bool = False  # launch's deadline ended the ranks still running

    @property
    def out(self) -> str:
        """Rank 0's stdout, where the payload writes its results."""
        return self.stdout[0]

    def failed_ranks(self) -> list[int]:
        return [r for r, code in enumerate(self.returncodes) if code != 0]

    def describe(self) -> str:
        parts = [f"return codes {self.returncodes}"]
        for rank, (out, err) in enumerate(zip(self.stdout, self.stderr, strict=True)):
            parts.append(f"--- rank {rank} stdout ---\n{out[-3000:]}\n--- rank {rank} stderr ---\n{err[-3000:]}")
        return "\n".join(parts)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def parse(stdout: str) -> dict:
    """The machine-readable lines of rank 0's output."""
    parsed: dict = {"iters": [], "summary": {}}
    for line in stdout.splitlines():
        if line.startswith(("REFIT_CONFIG ", "REFIT_RESULT ")):
            key, _, payload = line.partition(" ")
            parsed[key.lower()] = json.loads(payload)
        elif line.startswith("REFIT_ITER "):
            parsed["iters"].append(float(dict(_KV.findall(line))["time_ms"]))
        elif line.startswith(("REFIT_STATS ", "REFIT_VERIFY ", "REFIT_ERROR ")):
            key = line.split(" ", 1)[0].lower()
            parsed[key] = dict(_KV.findall(line))
        elif line.endswith((" ms", " GB/s")) and ":" in line:
            label, _, value = line.partition(":")
            parsed["summary"][label.strip()] = value.split()[0]
    return parsed


def config_text(config: dict) -> str:
    """The exact text `launch` hands the ranks. A run folder that keeps the config must write this text: the payload
    logs the sha256 of the file it read, and the metrics call any other bytes an edit after the run."""
    return json.dumps(config)


LAUNCH_TIMEOUT = "MBRIDGE_LAUNCH_TIMEOUT"  # the line a rank's log gets when the timeout ended it (metrics/signals.py)
TERM_GRACE_S = 5.0  # SIGTERM to a rank's process group, then SIGKILL after this
TERM_ON_SIGNAL_S = 2.0  # the same when this process gets SIGTERM: coreutils timeout -k 10 kills it 10 s later
KILL_WAIT_S = 10.0  # after SIGKILL: a rank still there (stuck in the GPU driver) is left behind, and said so


def launch(
    config: dict,
    world_size: int,
    *,
    timeout: float = 300,
    module: str = "cloudai_mbridge.payload.refit",
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    log_dir: str | Path | None = None,
) -> LocalRun:
    """Start `world_size` ranks of the payload on this host with torchrun-style variables and wait for all.

    ``timeout`` is one deadline for all ranks. Each rank runs in a process group of its own, and its output goes to a
    file, not a pipe: at the deadline every group still running (the rank and whatever it started: compiler workers,
    proxies) gets SIGTERM, then SIGKILL after TERM_GRACE_S, and nothing can keep this call waiting on an open pipe
    (seen on 2 x H200: a hung UCCL-EP start outlived its 180 s timeout until an outer one, ~430 s). A rank that
    outlives SIGKILL by KILL_WAIT_S is left behind with return code None. First, each rank still running gets
    SIGUSR1 and STACKS_WAIT_S to answer (the training payload writes every thread's stack into its log, the answer to
    "where did it hang"). A rank ended so gets the line
    ``MBRIDGE_LAUNCH_TIMEOUT rank=<r> timeout_s=<t>`` at the end of its output. ``log_dir``: each rank's stdout and
    stderr go, as they are written, to ``<log_dir>/rank-<r>.log`` (then ``stdout`` holds that text, ``stderr`` is
    empty), so a start that is killed from outside still leaves its logs. SIGTERM to this process while it waits
    (an outer ``timeout``) ends the ranks' groups first (SIGKILL after TERM_ON_SIGNAL_S), then acts as it would have
    without launch (by default: the process ends)."""
    import signal

    with tempfile.TemporaryDirectory(prefix="refit-") as tmp:
        cfg_path = Path(tmp) / "refit.json"
        cfg_path.write_text(config_text(config), encoding="utf-8")
        port = free_port()
        procs: list[subprocess.Popen] = []
        files = []
        if log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
        previous = None
        if threading_main():
            def on_term(signum, frame):
                # end the ranks' groups, then take the signal as this process would have without us
                _end_groups(procs, grace_s=TERM_ON_SIGNAL_S)
                signal.signal(signal.SIGTERM, previous)
                os.kill(os.getpid(), signum)

            previous = signal.signal(signal.SIGTERM, on_term)
        stopped: list[bool] = []  # per rank: still running at the deadline, so ended here
        try:
            for rank in range(world_size):
                rank_env = {
                    **os.environ, **(env or {}),
                    "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                    # One thread per rank: the ranks share the machine's cores.
                    "OMP_NUM_THREADS": "1",
                }
                if log_dir is not None:
                    out = open(Path(log_dir) / f"rank-{rank}.log", "w", encoding="utf-8")  # noqa: SIM115
                    err = None
                else:
                    out = open(Path(tmp) / f"rank-{rank}.out", "w", encoding="utf-8")  # noqa: SIM115
                    err = open(Path(tmp) / f"rank-{rank}.err", "w", encoding="utf-8")  # noqa: SIM115
                files.append((out, err))
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", module, "--config", str(cfg_path), *extra_args],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=err if err is not None else subprocess.STDOUT,
                    env=rank_env, cwd=cwd, process_group=0,
                ))
            deadline = time.monotonic() + timeout  # one deadline for all ranks: a hung rank cannot wait N timeouts
            if _wait_all(procs, deadline):
                stopped = [p.poll() is None for p in procs]
                _ask_for_stacks([p for p, s in zip(procs, stopped, strict=True) if s])
                _end_groups(procs)
        except BaseException:  # Ctrl-C, a failed start: no rank is left running
            _end_groups(procs)
            raise
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            for out, err in files:
                out.close()
                if err is not None:
                    err.close()
        stdout, stderr = [], []
        for rank, (out, err) in enumerate(files):
            note = f"{LAUNCH_TIMEOUT} rank={rank} timeout_s={timeout:g}\n" if stopped and stopped[rank] else ""
            if err is None and note:
                with open(out.name, "a", encoding="utf-8") as f:
                    f.write(note)
            stdout.append(Path(out.name).read_text(encoding="utf-8", errors="replace"))
            stderr.append("" if err is None else Path(err.name).read_text(encoding="utf-8", errors="replace") + note)
        timed_out = bool(stopped)
        run = LocalRun([p.returncode for p in procs], stdout, stderr, timed_out=timed_out)
    run.parsed = parse(run.out)
    return run


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def _wait_all(procs: list[subprocess.Popen], deadline: float) -> bool:
    """Wait for every rank until the deadline; True when one was still running then."""
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            return True
    return False


STACKS_WAIT_S = 2.0


def _ask_for_stacks(procs: list[subprocess.Popen]) -> None:
    """SIGUSR1 to each rank still running: the training payload dumps every thread's stack into its log
    (payload/train/watchdog.py registers it); a payload without the handler ends, as it was about to anyway."""
    import signal

    if not procs or not hasattr(signal, "SIGUSR1"):
        return
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGUSR1)
    _wait_all(procs, time.monotonic() + STACKS_WAIT_S)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the rank's own group (process_group=0): its pid is the group id


def _end_groups(procs: list[subprocess.Popen], grace_s: float = TERM_GRACE_S, quiet: bool = False) -> None:
    """SIGTERM to every rank's process group, SIGKILL after ``grace_s``, then wait up to KILL_WAIT_S for the ranks.
    Groups whose rank already exited get them too: what the rank started may still run. ``quiet``: only the groups of
    ranks still running (the clean-up after a normal end)."""
    import signal

    targets = [p for p in procs if not quiet or p.poll() is None]
    if not targets:
        return
    for proc in targets:
        _signal_group(proc, signal.SIGTERM)
    _wait_all(targets, time.monotonic() + grace_s)
    for proc in targets:
        _signal_group(proc, signal.SIGKILL)
    _wait_all(targets, time.monotonic() + KILL_WAIT_S)
