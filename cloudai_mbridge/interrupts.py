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
import sys
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
# Signals whose Interrupted was raised and has not reached the command's own handling (handled()). An exception
# raised by a signal handler lands wherever the main thread happens to be: a library's bare ``except:`` (uuid's
# getnode, fsspec's version lookup), a callback whose exceptions Python ignores (a weakref callback, a __del__, an
# atexit function) can swallow it and the command would run on as if no signal had come. Whatever is still here at
# a checkpoint (raise_swallowed, on_first_signal, swallowed_at_end) was swallowed, and is delivered there.
_swallowed: list[int] = []
_closing = False  # closing(): the command's work is done; a signal is only noted, its exit status said at the end
_saved: dict[int, Any] = {}  # the handlers install() replaced, for release()


def _handler(signum: int, _frame: Any) -> None:
    global _stopping
    if _depth or _closing:
        (_swallowed if _closing else _pending).append(signum)
        return
    if _callback is not None and not _stopping:
        _stopping = True
        _callback(signum)
        return
    _swallowed.append(signum)  # until handled(): see _swallowed
    raise Interrupted(signum)


def handled() -> None:
    """The command's own handling has the Interrupted: it stops with its exit status (nothing was swallowed)."""
    _swallowed.clear()


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` in this process (main thread only).

    A signal can arrive while Python runs a callback whose exceptions it ignores (a weakref callback of the import
    system's module locks, a ``__del__``): the Interrupted raised there never reaches the command, and Python prints
    "Exception ignored in ..." with a traceback. The unraisable hook installed here keeps that quiet and remembers
    the signal; :func:`raise_swallowed` delivers it at the next checkpoint."""
    global _closing
    _closing = False
    for sig in SIGNALS:
        with contextlib.suppress(ValueError, OSError):  # not the main thread, or a platform without the signal
            previous_handler = signal.signal(sig, _handler)
            if previous_handler is not _handler:
                _saved[sig] = previous_handler
    if not getattr(sys.unraisablehook, "_mbridge", False):
        previous = sys.unraisablehook

        def hook(unraisable: Any) -> None:
            if isinstance(unraisable.exc_value, Interrupted):
                if unraisable.exc_value.signum not in _swallowed:  # one our handler raised is noted already
                    _swallowed.append(unraisable.exc_value.signum)
                return
            previous(unraisable)

        hook._mbridge = True  # type: ignore[attr-defined]
        sys.unraisablehook = hook


def interrupted_cause(exc: BaseException) -> Interrupted | None:
    """The Interrupted behind ``exc``, when Python wrapped one into another exception (a signal while a class body is
    built becomes "RuntimeError: Error calling __set_name__ ..." caused by it), else None."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, Interrupted):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def stop_code(exc: BaseException) -> int | None:
    """For an exception that ends a command while it starts: when it is a signal (an Interrupted, Ctrl-C's
    KeyboardInterrupt, or an exception Python wrapped one into), say so in one line and give the exit status
    (:func:`stopped_before_start`); None for any other exception, which the caller re-raises."""
    signalled = exc if isinstance(exc, KeyboardInterrupt) else interrupted_cause(exc)
    if signalled is None:
        return None
    handled()
    return stopped_before_start(signalled)


def raise_swallowed() -> None:
    """Raise :class:`Interrupted` for a signal whose exception Python swallowed (see :func:`install`)."""
    if _swallowed:
        del _swallowed[1:]  # the first stays noted: this Interrupted can be swallowed as well
        raise Interrupted(_swallowed[0])


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
    if _swallowed:  # a signal Python swallowed before the sweep began: the sweep stops before its first point
        _stopping = True
        callback(_swallowed.pop(0))
        _swallowed.clear()
    try:
        yield
    finally:
        _callback, _stopping = saved


def closing() -> None:
    """The command's work is done (what is left: flushing, the exit status): from here a signal raises nothing
    (an Interrupted in the last flush would be a traceback, one in an atexit function is swallowed by Python and
    the command exited 0); it is noted, and :func:`swallowed_at_end` turns it into the exit status."""
    global _closing
    _closing = True


def swallowed_at_end() -> int | None:
    """At the end of a command: a signal swallowed on the way that no checkpoint delivered, or one that came while
    the command finished (closing()). Said in one line; the exit status 128 + the signal, so that a script sees it."""
    if not _swallowed:
        return None
    signum = _swallowed[0]
    _swallowed.clear()
    with contextlib.suppress(OSError, ValueError):
        print(f"cloudai-mbridge: {signal_name(signum)} arrived while the command was finishing; what it printed "
              "above is complete", file=sys.stderr, flush=True)
    return 128 + signum


def release(console: bool) -> int | None:
    """The last step before the process exits, after the exit status was taken: the handlers install() replaced
    are back (``console``, the command line's own process: the operating system's default instead). A signal after
    this point ends the process as that handler does (killed by the signal: the caller still sees it), never the
    silent exit 0 of an Interrupted that Python's own exit (an atexit function) swallows. Returns the exit status
    for a signal noted since the status was taken (said in one line), else None."""
    global _closing
    held = False
    with contextlib.suppress(ValueError, OSError, AttributeError):
        signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)  # one that comes now waits for the handler put back
        held = True
    try:
        late = swallowed_at_end()
        for sig in SIGNALS:
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, signal.SIG_DFL if console else _saved.get(sig, signal.SIG_DFL))
        _closing = False
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
    return late


def stopped_before_start(exc: BaseException) -> int:
    """A signal (or KeyboardInterrupt) while the command was still starting (CloudAI being imported, nothing read or
    written yet): say so in one line on standard error; the exit status, 128 + the signal."""
    import sys

    signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
    with contextlib.suppress(OSError, ValueError):
        print(f"cloudai-mbridge: stopped by {signal_name(signum)} while starting, before anything was "
              "written. Run the command again to do it", file=sys.stderr, flush=True)
    return 128 + signum
