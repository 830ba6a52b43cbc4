"""Start the refit payload's ranks the fast way, for the tests: a process that imported torch, Megatron-Core and
the payload once forks a fresh leader per run, and the leader forks one child per rank.

Each rank is a rank as ``payload/refit/local.py``'s ``launch`` starts one (``python -m cloudai_mbridge.payload.refit
--config <file>``, the same torchrun-style variables, ``OMP_NUM_THREADS=1``, the test's environment and working
folder, its own stdout and stderr files, its exit status): the same module runs as ``__main__`` with the same argv, and
the same gloo world forms between separate processes. Only the imports (about 6 s of CPU per rank, most of a small
world's cost on the CPU) are done once per test worker, before any fork: nothing has started a thread by then
(checked). The warm process never runs the payload itself; it ends when the test process does (end of its stdin).
``launch`` itself (deadlines, process groups, rank logs) keeps its own tests (tests/payload/test_launch_timeout.py
and the payload tests that still call it).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cloudai_mbridge.payload.refit.local import LocalRun, config_text, free_port, parse

MODULE = "cloudai_mbridge.payload.refit"
PRELOAD = ("torch", "torch.distributed", "megatron.core", "megatron.core.resharding", "megatron.core.models.gpt",
           "cloudai_mbridge.payload.refit.__main__", "cloudai_mbridge.payload.refit.adapter",
           "cloudai_mbridge.payload.refit.models", "cloudai_mbridge.payload.refit.verify",
           "cloudai_mbridge.payload.refit.coalesce", "cloudai_mbridge.payload.refit.replay",
           "cloudai_mbridge.payload.refit.phases")


_warm: subprocess.Popen | None = None


def _warm_process() -> subprocess.Popen:
    """This test process's warm forking process (started on first use, again if it died)."""
    global _warm
    if _warm is None or _warm.poll() is not None:
        _warm = subprocess.Popen([sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 env={**os.environ, "OMP_NUM_THREADS": "1"}, process_group=0)
        atexit.register(_warm.kill)
    return _warm


def launch_forked(config: dict, world_size: int, *, timeout: float = 900, env: dict[str, str] | None = None
                  ) -> LocalRun:
    """``local.launch(config, world_size)``'s result, with the ranks forked from a warm process. At the deadline the
    run's process group (its leader and every rank) is killed and the run reads as timed out."""
    with tempfile.TemporaryDirectory(prefix="refit-forked-") as tmp:
        cfg_path = Path(tmp) / "refit.json"
        cfg_path.write_text(config_text(config), encoding="utf-8")
        request = {"module": MODULE, "cfg": str(cfg_path), "world": world_size, "port": str(free_port()),
                   "out_dir": tmp, "cwd": os.getcwd(), "env": {**os.environ, **(env or {}), "OMP_NUM_THREADS": "1"}}
        warm = _warm_process()
        warm.stdin.write((json.dumps(request) + "\n").encode())
        warm.stdin.flush()
        leader = int(_line(warm, 600).split()[1])  # "started <pid>": after the imports, on first use
        timed_out = False
        deadline = time.monotonic() + timeout
        try:
            status = _line(warm, deadline - time.monotonic())  # "done <exit status of the leader>"
        except TimeoutError:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(leader, signal.SIGKILL)
            status = _line(warm, 60)
        codes_file = Path(tmp) / "codes.json"
        codes = json.loads(codes_file.read_text()) if codes_file.exists() else [None] * world_size
        assert timed_out or codes_file.exists(), f"the run's leader ended ({status}) and left no exit codes"
        stdout = [_read(Path(tmp) / f"rank-{r}.out") for r in range(world_size)]
        stderr = [_read(Path(tmp) / f"rank-{r}.err") for r in range(world_size)]
    run = LocalRun(codes, stdout, stderr, timed_out=timed_out)
    run.parsed = parse(run.out)
    return run


def _line(warm: subprocess.Popen, timeout: float) -> str:
    """The warm process's next line, within ``timeout`` seconds (TimeoutError), or its death (AssertionError)."""
    if not select.select([warm.stdout], [], [], max(0.0, timeout))[0]:
        raise TimeoutError
    line = warm.stdout.readline().decode()
    assert line, f"the warm forking process ended with {warm.wait()}"
    return line.strip()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _rank(module: str, cfg: str, rank: int, world: int, port: str, out_dir: str) -> int:
    """In the forked child: become rank ``rank`` and run the module as ``python -m module --config cfg`` would."""
    import runpy

    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port})
    for fd, name in ((1, f"rank-{rank}.out"), (2, f"rank-{rank}.err")):
        target = os.open(os.path.join(out_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = os.fdopen(1, "w", encoding="utf-8", closefd=False)
    sys.stderr = os.fdopen(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.argv = [module, "--config", cfg]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:  # what the interpreter makes of sys.exit(x)
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()  # as an interpreter that ends does (torch's, logging's)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _lead(request: dict) -> None:
    """In a fresh child of the warm process: the run's environment and folder, one forked child per rank, their exit
    statuses (as subprocess gives them: -N for a signal) into ``codes.json``."""
    os.setpgid(0, 0)  # the run's own group: a deadline kills it, not the warm process
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)  # the ranks read nothing (launch: stdin=DEVNULL), least of all the warm process's requests
    os.close(devnull)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    world = request["world"]
    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _rank(request["module"], request["cfg"], rank, world, request["port"], request["out_dir"])
            finally:
                os._exit(code if 0 <= code < 256 else 1)
        pids[pid] = rank
    codes: list[int | None] = [None] * world
    while pids:
        pid, status = os.wait()
        codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
    tmp = Path(request["out_dir"]) / "codes.json.tmp"
    tmp.write_text(json.dumps(codes))
    tmp.replace(Path(request["out_dir"]) / "codes.json")


def serve() -> None:
    """The warm process: import once, then for each request line on stdin fork a leader, say ``started <pid>``, wait
    for it, say ``done <status>``. Ends at the end of stdin (the test process ended)."""
    import importlib
    import threading
    import warnings

    with warnings.catch_warnings():  # Megatron's "Transformer Engine and Apex are not installed": each rank's own
        warnings.simplefilter("ignore")
        for name in PRELOAD:
            importlib.import_module(name)
    # a thread started by an import would not exist in the children (and could hold a lock they need)
    assert threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1, "a thread before the fork"
    answer = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing a leader prints before its ranks redirect can reach the answers
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                answer.close()
                _lead(request)
                code = 0
            finally:
                os._exit(code)
        answer.write(f"started {pid}\n")
        _, status = os.waitpid(pid, 0)
        answer.write(f"done {os.waitstatus_to_exitcode(status)}\n")


if __name__ == "__main__":
    serve()
