"""A progress watchdog for the training payload: a start that stops making progress ends itself, says where it stood
and leaves every thread's Python stack in its rank log, so that a hung start is a recorded failure of its class
instead of a process that holds the GPUs until something outside kills it (seen on 2 x H200, 2026-11-29: a UCCL-EP
deepep start wrote nothing and hung until the window's outer timeout).

Stages, in order; each one reached prints, on every rank, ``MBRIDGE_STAGE stage=<s> rank=<r> t_s=<since start>``
(a log that stops can still be classified by its last one, metrics/signals.py)::

    init            the payload started (config read); imports, process groups and the model build follow
    model_built     the model exists (Bridge's on_train_start; mcore: after the build)
    first_dispatch  the first MoE token dispatch was entered (the dispatcher's token_dispatch, dispatch_timing.py)
    iteration_<N>   iteration N ended (only the first is printed as a stage line; later ones count as progress)

Each stage and each finished iteration is progress. When none comes for ``hang_timeout_s`` seconds (the config key;
0 = off), the watchdog thread writes every thread's Python stack to the rank's stderr
(``faulthandler.dump_traceback(all_threads=True)``), prints::

    MBRIDGE_HANG class=<init|first_dispatch|later> stage=<last stage> after_s=<n> rank=<r>

(class ``init``: before the first dispatch; ``first_dispatch``: inside the first iteration, after its first dispatch
was entered; ``later``: after iteration 1 ended) and ends the process with ``os._exit(EXIT_HANG)``: a thread stuck in
a NCCL or CUDA call never returns, so neither an exception nor ``sys.exit`` would end it. SIGUSR1 dumps the same
stacks without ending the process (the local launcher sends it before it ends a start at its timeout). Pure stdlib.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from .dispatch_timing import moe_dispatchers

EXIT_HANG = 124  # as coreutils' timeout: "timed out"; payload/train/__main__.py lists the exit codes
DEFAULT_HANG_TIMEOUT_S = 1200
CLASSES = ("init", "first_dispatch", "later")


def hang_class(stage: str) -> str:
    """The class of a hang whose last stage was ``stage``."""
    if stage.startswith("iteration_"):
        return "later"
    return "first_dispatch" if stage == "first_dispatch" else "init"


class Watchdog:
    """Tracks the last stage and the time of the last progress; a daemon thread acts when progress stops."""

    def __init__(self, timeout_s: float, rank: int = 0, *, out: TextIO | None = None, err: TextIO | None = None,
                 exit_fn: Callable[[int], Any] = os._exit, clock: Callable[[], float] = time.monotonic,
                 poll_s: float | None = None) -> None:
        self.timeout_s = float(timeout_s)
        self.rank = rank
        self._out = out
        self._err = err
        self._exit = exit_fn
        self._clock = clock
        self._started = clock()
        self._last = self._started
        self.stage = "init"
        self.iteration = 0
        self._poll_s = poll_s if poll_s is not None else min(5.0, max(0.05, self.timeout_s / 20))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    @property
    def out(self) -> TextIO:
        return self._out or sys.stdout

    @property
    def err(self) -> TextIO:
        return self._err or sys.stderr

    # --- progress ---------------------------------------------------------------------------------------------------
    def _stage_line(self, stage: str) -> None:
        print(f"MBRIDGE_STAGE stage={stage} rank={self.rank} t_s={self._clock() - self._started:.1f}", file=self.out,
              flush=True)

    def reach(self, stage: str) -> None:
        """A stage was reached: progress, and a stage line the first time."""
        self._last = self._clock()
        if stage != self.stage:
            self.stage = stage
            self._stage_line(stage)

    def dispatch_entered(self) -> None:
        """A token dispatch was entered: the first one before any iteration ended is a stage."""
        if self.stage == "model_built" or (self.stage == "init" and self.iteration == 0):
            self.reach("first_dispatch")

    def iteration_done(self, iteration: int) -> None:
        """Iteration ``iteration`` ended: progress; the first one is a stage line."""
        self.iteration = iteration
        self._last = self._clock()
        if not self.stage.startswith("iteration_"):
            self.reach(f"iteration_{iteration}")
        else:
            self.stage = f"iteration_{iteration}"

    # --- the thread -------------------------------------------------------------------------------------------------
    def start(self) -> Watchdog:
        self._stage_line(self.stage)
        if hasattr(faulthandler, "register") and hasattr(signal, "SIGUSR1"):
            # a launcher that gives up on the start first asks for the stacks (payload/refit/local.py launch)
            # (a stream without a file descriptor cannot take them)
            with contextlib.suppress(AttributeError, ValueError, OSError, RuntimeError):
                faulthandler.register(signal.SIGUSR1, file=self.err, all_threads=True)
        if self.timeout_s > 0:
            self._thread = threading.Thread(target=self._watch, name="mbridge-watchdog", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def stalled_s(self) -> float:
        return self._clock() - self._last

    def check(self) -> bool:
        """Fire when progress stopped for timeout_s (True then); the thread calls it every poll."""
        if self.timeout_s > 0 and not self.fired and self.stalled_s() >= self.timeout_s:
            self.fire()
            return True
        return False

    def _watch(self) -> None:
        while not self._stop.wait(self._poll_s):
            if self.check():
                return

    def fire(self) -> None:
        """Stacks of every thread, the MBRIDGE_HANG line, then the process ends with EXIT_HANG."""
        self.fired = True
        after = self.stalled_s()
        err = self.err
        print(f"MBRIDGE_HANG_STACKS rank={self.rank}: no progress for {after:.0f} s in stage {self.stage}; the "
              "Python stack of every thread follows", file=err, flush=True)
        try:
            faulthandler.dump_traceback(file=err, all_threads=True)
        except (AttributeError, ValueError, OSError):  # a stream without a file descriptor
            print("(stacks not available: the log stream has no file descriptor)", file=err, flush=True)
        err.flush()
        print(f"MBRIDGE_HANG class={hang_class(self.stage)} stage={self.stage} after_s={after:.0f} rank={self.rank} "
              f"timeout_s={self.timeout_s:g}", file=self.out, flush=True)
        self._exit(EXIT_HANG)


_ACTIVE: Watchdog | None = None


def start(timeout_s: float, rank: int) -> Watchdog:
    """The process's watchdog (one per process; a second call replaces the first)."""
    global _ACTIVE
    if _ACTIVE is not None:
        _ACTIVE.stop()
    _ACTIVE = Watchdog(timeout_s, rank).start()
    return _ACTIVE


def active() -> Watchdog | None:
    return _ACTIVE


def reach(stage: str) -> None:
    if _ACTIVE is not None:
        _ACTIVE.reach(stage)


def iteration_done(iteration: int) -> None:
    if _ACTIVE is not None:
        _ACTIVE.iteration_done(iteration)


def dispatch_entered() -> None:
    if _ACTIVE is not None:
        _ACTIVE.dispatch_entered()


_MARKED = "_mbridge_watchdog_mark"


def watch_dispatch(model_chunks: list[Any]) -> int:
    """Wrap ``token_dispatch`` of every MoE layer's dispatcher so that entering it tells the watchdog (the first
    dispatch is a stage); the method's result is passed through untouched. Returns how many dispatchers."""
    dispatchers = moe_dispatchers(model_chunks)
    for dispatcher in dispatchers:
        method = getattr(dispatcher, "token_dispatch", None)
        if method is None or getattr(method, _MARKED, False):
            continue
        dispatcher.token_dispatch = _marked(method)
    return len(dispatchers)


def _marked(method: Any) -> Any:
    def token_dispatch(*args: Any, **kwargs: Any) -> Any:
        dispatch_entered()
        return method(*args, **kwargs)

    setattr(token_dispatch, _MARKED, True)
    return token_dispatch
