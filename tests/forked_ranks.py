"""Start the refit payload's ranks the fast way, for the tests: one process imports torch, Megatron-Core and the
payload once, then forks one child per rank.

Each child is a rank as ``payload/refit/local.py``'s ``launch`` starts one (``python -m cloudai_mbridge.payload.refit
--config <file>``, the same torchrun-style variables, ``OMP_NUM_THREADS=1``, its own stdout and stderr files, its exit
status): the same module runs as ``__main__`` with the same argv, and the same gloo world forms between separate
processes. Only the imports (about 6 s of CPU per rank, most of a small world's cost on the CPU) are done once, before
the fork: nothing has started a thread by then (checked below). ``launch`` itself (deadlines, process groups, rank
logs) keeps its own tests (tests/payload/test_launch_timeout.py and the payload tests that still call it).

Usage as a script: ``python forked_ranks.py MODULE CONFIG WORLD PORT OUT_DIR``; writes ``OUT_DIR/codes.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from cloudai_mbridge.payload.refit.local import LocalRun, config_text, free_port, parse

MODULE = "cloudai_mbridge.payload.refit"
PRELOAD = ("torch", "torch.distributed", "megatron.core", "megatron.core.resharding", "megatron.core.models.gpt",
           "cloudai_mbridge.payload.refit.__main__", "cloudai_mbridge.payload.refit.adapter",
           "cloudai_mbridge.payload.refit.models", "cloudai_mbridge.payload.refit.verify",
           "cloudai_mbridge.payload.refit.coalesce", "cloudai_mbridge.payload.refit.replay",
           "cloudai_mbridge.payload.refit.phases")


def launch_forked(config: dict, world_size: int, *, timeout: float = 900, env: dict[str, str] | None = None
                  ) -> LocalRun:
    """``local.launch(config, world_size)``'s result, with the ranks forked from one warm process. At the deadline
    the whole process group (the forking process and every rank) is killed and the run reads as timed out."""
    with tempfile.TemporaryDirectory(prefix="refit-forked-") as tmp:
        cfg_path = Path(tmp) / "refit.json"
        cfg_path.write_text(config_text(config), encoding="utf-8")
        proc = subprocess.Popen(
            [sys.executable, __file__, MODULE, str(cfg_path), str(world_size), str(free_port()), tmp],
            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {}), "OMP_NUM_THREADS": "1"}, process_group=0)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.poll() is None or timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        codes_file = Path(tmp) / "codes.json"
        codes = json.loads(codes_file.read_text()) if codes_file.exists() else [None] * world_size
        assert timed_out or codes_file.exists(), f"the forking process ended with {proc.returncode} and no codes"
        stdout = [_read(Path(tmp) / f"rank-{r}.out") for r in range(world_size)]
        stderr = [_read(Path(tmp) / f"rank-{r}.err") for r in range(world_size)]
    run = LocalRun(codes, stdout, stderr, timed_out=timed_out)
    run.parsed = parse(run.out)
    return run


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""


def _rank(module: str, cfg: str, rank: int, world: int, port: str, out_dir: str) -> int:
    """In the forked child: become rank ``rank`` and run the module as ``python -m module --config cfg`` would."""
    import atexit
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


def main() -> None:
    module, cfg, world, port, out_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    import importlib
    import threading
    import warnings

    with warnings.catch_warnings():  # Megatron's "Transformer Engine and Apex are not installed": each rank's own
        warnings.simplefilter("ignore")
        for name in PRELOAD:
            importlib.import_module(name)
    # a thread started by an import would not exist in the children (and could hold a lock they need)
    assert threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1, "a thread before the fork"
    sys.stdout.flush()
    sys.stderr.flush()
    pids = {}
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _rank(module, cfg, rank, world, port, out_dir)
            finally:
                os._exit(code if 0 <= code < 256 else 1)
        pids[pid] = rank
    codes: list[int | None] = [None] * world
    while pids:
        pid, status = os.wait()
        codes[pids.pop(pid)] = os.waitstatus_to_exitcode(status)
    tmp = Path(out_dir) / "codes.json.tmp"
    tmp.write_text(json.dumps(codes))
    tmp.replace(Path(out_dir) / "codes.json")


if __name__ == "__main__":
    main()
