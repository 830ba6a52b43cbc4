"""Run many command lines of ``cloudai-mbridge`` fast: import once, then fork one child per command line.

Usage: ``python forkrun.py JOBS.json RESULTS.json WORKERS``; JOBS is a list of {argv, cwd, env, log}. Each child is
a fresh process as far as the command is concerned (its own cwd, environment, stdout/stderr, exit status, logging
configuration and CloudAI registry): the same ``cloudai_mbridge.cli.main`` the console script calls, with the imports
(about 1.5 s of every start) done once in the parent before the fork. An exception that escapes ``main`` is printed
as the interpreter would print it (a traceback) and exits 1, so the suite sees exactly what a user would.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback


def _child(job: dict) -> int:
    os.chdir(job["cwd"])
    os.environ.clear()
    os.environ.update(job["env"])
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, errors="backslashreplace", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, errors="backslashreplace", closefd=False)
    sys.argv = ["cloudai-mbridge", *job["argv"]]
    from cloudai_mbridge.cli import main

    try:
        main(job["argv"])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    return code


def main() -> None:
    jobs_path, results_path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with open(jobs_path) as f:
        jobs = json.load(f)
    import cloudai.cli
    import cloudai.core  # noqa: F401

    import cloudai_mbridge.cli.app
    import cloudai_mbridge.cli.commands
    import cloudai_mbridge.registration  # noqa: F401

    # and what the commands import on first use: with PYTHONDONTWRITEBYTECODE (or a read-only checkout) each child
    # compiled these from source again, 0.1 s of its 0.25 s
    for name in ("tomllib", "resource", "cloudai_mbridge.cli.config_files", "cloudai_mbridge.cli.field_check",
                 "cloudai_mbridge.cli.friendly", "cloudai_mbridge.cli.inputs", "cloudai_mbridge.cli.preflight",
                 "cloudai_mbridge.cli.session", "cloudai_mbridge.catalog.refit_models", "cloudai_mbridge.rules.sweep",
                 "cloudai_mbridge.payload.refit.coalesce", "cloudai_mbridge.plan.bridge_estimate",
                 "cloudai_mbridge.plan.refit_bytes"):
        importlib.import_module(name)

    codes: dict[int, int] = {}
    running: dict[int, int] = {}
    pending = list(enumerate(jobs))
    while pending or running:
        while pending and len(running) < workers:
            index, job = pending.pop(0)
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(job)
                finally:
                    os._exit(code if 0 <= code < 256 else 1)
            running[pid] = index
        pid, status = os.wait()
        codes[running.pop(pid)] = os.waitstatus_to_exitcode(status)
    with open(results_path, "w") as f:
        json.dump([codes[i] for i in range(len(jobs))], f)


if __name__ == "__main__":
    main()
