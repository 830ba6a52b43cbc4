"""The command line: cloudai-mbridge's entry point (app.py: CloudAI's commands with the plugin loaded, plus
preflight), its commands (commands.py), the CloudAI internals it replaces for one command (session.py, the only
place that does), the checks of the files it is given (config_files.py, inputs.py), and preflight (preflight.py);
signals are the package's interrupts.py (atomic writes hold them too)."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> None:
    """The console script (``cloudai-mbridge``; ``argv`` defaults to the process's arguments); imported on call so
    that the package's modules can import from this folder without loading CloudAI's CLI."""
    from . import startup
    from .exits import EXIT_ENVIRONMENT

    # a locale that is not UTF-8: this process starts again in Python's UTF-8 mode (startup.py), before anything else
    problem = startup.ensure_utf8(argv)
    startup.forget_reexec_marker()
    startup.reopen_closed_streams()  # >&-: no file the command opens may take descriptor 1 or 2
    from .. import interrupts

    interrupts.install()  # before anything heavy is imported: a signal then is one line, not a traceback
    # every statement from here to the command's own handling is inside this try: a signal can land on any of them
    try:
        problem = problem or startup.memory_limit_problem()
        if problem:
            startup.print_error(problem)
            raise SystemExit(EXIT_ENVIRONMENT)
        startup.load_numeric_libraries()  # under ulimit -v: OpenBLAS with one thread, or a MemoryError caught here
        from .. import redact  # noqa: F401  (app.main's first line: loaded here, where a signal is one line)
        from .app import main as _main

        interrupts.raise_swallowed()  # a signal the import machinery swallowed still stops the command here
        _main(argv)  # always ends in SystemExit
    except (interrupts.Interrupted, KeyboardInterrupt, Exception) as exc:
        code = interrupts.stop_code(exc)  # a signal, also one Python wrapped into another exception
        if code is None and startup.is_memory_error(exc):
            startup.print_error(startup.memory_problem("cloudai-mbridge while it started"))
            code = EXIT_ENVIRONMENT
        if code is None:
            raise
        raise SystemExit(code) from None
