"""Ctrl-C (SIGINT), SIGTERM and SIGHUP: the command stops cleanly, says what it did, and exits 128 + the signal.

``install()`` (cli.main, first thing) makes these signals raise :class:`Interrupted`, a BaseException like
KeyboardInterrupt, so every ``finally`` and cleanup runs and no handler of CloudAI's swallows it. While a file is
written (atomic.py) the signal is held and delivered right after: no file is ever half-written by a signal.

A sweep (dry-run, run) registers a callback with :func:`on_first_signal` instead of CloudAI's handler (session.py):
the first signal asks the sweep to stop before its next point (CloudAI's own handler only sets a flag that its DSE
loop resets at every step), a second one stops at once.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """The command was stopped by a signal; ``code`` is the exit status a shell expects (128 + signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal_name(signum))
        self.signum = signum
        self.code = 128 + signum


def signal_name(signum: int) -> str:
    try:
        name = signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
    return f"{name} (Ctrl-C)" if signum == signal.SIGINT else name


_depth = 0
_pending: list[int] = []
_callback: Callable[[int], None] | None = None
_stopping = False


def _handler(signum: int, _frame: Any) -> None:
    global _stopping
    if _depth:
        _pending.append(signum)
        return
    if _callback is not None and not _stopping:
        _stopping = True
        _callback(signum)
        return
    raise Interrupted(signum)


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` in this process (main thread only)."""
    for sig in SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread, or a platform without the signal
            signal.signal(sig, _handler)


@contextmanager
def deferred() -> Iterator[None]:
    """Hold the signals for the duration of the block; one that came is delivered when it ends."""
    global _depth
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if not _depth and _pending:
            signum = _pending.pop(0)
            _pending.clear()
            _handler(signum, None)


@contextmanager
def on_first_signal(callback: Callable[[int], None]) -> Iterator[None]:
    """Inside the block the first signal calls ``callback(signum)`` (a sweep stops before its next point); a second
    one raises :class:`Interrupted`."""
    global _callback, _stopping
    saved = _callback, _stopping
    _callback, _stopping = callback, False
    try:
        yield
    finally:
        _callback, _stopping = saved


def stopped_before_start(exc: BaseException) -> int:
    """A signal (or KeyboardInterrupt) while the command was still starting (CloudAI being imported, nothing read or
    written yet): say so in one line on standard error; the exit status, 128 + the signal."""
    import sys

    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    with contextlib.suppress(OSError, ValueError):
        print(f"cloudai-mbridge: stopped by {signal_name(signum)} while starting, before anything was "
              "written. Run the command again to do it", file=sys.stderr, flush=True)
    return 128 + signum
