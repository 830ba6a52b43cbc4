"""What the process needs before anything heavy is imported (cli.main, first thing): UTF-8 text whatever the locale,
standard streams that exist, and enough address space for Python, CloudAI and pandas (issue 46).

- Locale: TOML is UTF-8 by its spec, and so is every file we write; CloudAI reads and writes many files with the
  locale's encoding (``open()`` without ``encoding=``: a test TOML, test-run.toml, its reports). Under a locale that
  is not UTF-8 (``LC_ALL=C`` with ``PYTHONUTF8=0``, ISO-8859-1, EUC-JP) the console script starts itself again in
  Python's UTF-8 mode (``python -X utf8``, the same arguments as bytes, the same environment), so every such open is
  UTF-8. Where that cannot be done, one line names the locale and the fix (``LC_ALL=C.UTF-8`` or ``PYTHONUTF8=1``).
- Closed standard streams (``>&-``, ``2>&-``, ``<&-``): the descriptor is opened on /dev/null again, so a file the
  command opens never takes descriptor 1 or 2 (a child's output would land in it); what the command prints to a
  closed stream is noted (redact.RedactingStream) and said once at the end, exit status 1.
- An address-space limit (``ulimit -v``) below what the command needs to start is refused in one line naming the
  limit and the fix (exit status 3); under a higher limit OpenBLAS starts one thread (its per-thread buffers are
  what runs out first), and a MemoryError at any later point is one line too (:func:`memory_problem`).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import os
import sys

MiB = 1 << 20
# Measured (issue 46): preflight of one point starts at 230 MiB with one OpenBLAS thread; below about 100 MiB
# OpenBLAS ends the process with its own line before Python can say anything.
MIN_ADDRESS_SPACE = 256 * MiB
# ulimit -d: dry-run of one point works at 146 MiB; at 117 MiB it runs out while it starts and aborts at exit, at
# 39 MiB OpenBLAS ends the process with its own line
MIN_DATA_SEGMENT = 160 * MiB
_FIX_LOCALE = "LC_ALL=C.UTF-8 (any UTF-8 locale) or PYTHONUTF8=1"


def locale_encoding() -> str:
    import locale

    return codecs.lookup(locale.getpreferredencoding(False)).name


def _locale_name() -> str:
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        if os.environ.get(name):
            return f"{name}={os.environ[name]}"
    return "no LC_ALL, LC_CTYPE or LANG set"


def locale_problem() -> str:
    return (f"the locale's text encoding is {locale_encoding()} ({_locale_name()}), not UTF-8, and Python's UTF-8 mode "
            f"is off: CloudAI would read the UTF-8 TOML files and write its files in {locale_encoding()}. Fix: run "
            f"with {_FIX_LOCALE}")


def ensure_utf8(argv: list[str] | None) -> str | None:
    """Start this process again in UTF-8 mode when the locale's encoding is not UTF-8 (returns only when nothing
    had to be done, or with the one-line problem when it could not be). ``argv`` given (a call from Python, not the
    console script): nothing is started again."""
    if sys.flags.utf8_mode or locale_encoding() == "utf-8":
        return None
    if argv is not None:
        return None
    if os.environ.get("_CLOUDAI_MBRIDGE_REEXEC") == "1" or not sys.executable or not getattr(sys, "orig_argv", None):
        return locale_problem()
    # the arguments as the OS gave them: the file system encoding's surrogate escapes turn back into the same bytes
    args = [os.fsencode(a) for a in [sys.executable, "-X", "utf8", *sys.orig_argv[1:]]]
    env = {**os.environb, b"_CLOUDAI_MBRIDGE_REEXEC": b"1"}
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    try:
        os.execve(args[0], args, env)
    except OSError:
        return locale_problem()
    return None  # not reached


def forget_reexec_marker() -> None:
    os.environ.pop("_CLOUDAI_MBRIDGE_REEXEC", None)  # not passed on to the jobs or CloudAI's children


def reopen_closed_streams() -> list[int]:
    """Descriptors 0, 1, 2 that were closed, now each open on /dev/null (so no file the command opens takes their
    number); the Python streams stay None, redact.install() notes what is written to them."""
    closed = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError as exc:
            if exc.errno == errno.EBADF:
                closed.append(fd)
    for fd in closed:
        try:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
        except OSError:
            pass
    return closed


def _soft_limit(which: str) -> int | None:
    """The soft limit ``resource.<which>`` in bytes, None when there is none (or no ``resource`` module)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _hard = resource.getrlimit(getattr(resource, which))
    return None if soft in (resource.RLIM_INFINITY, -1) else soft


def address_space_limit() -> int | None:
    """The soft address-space limit (ulimit -v) in bytes, None when there is none."""
    return _soft_limit("RLIMIT_AS")


def data_limit() -> int | None:
    """The soft data-segment limit (ulimit -d) in bytes, None when there is none."""
    return _soft_limit("RLIMIT_DATA")


def _limit_text(limit: int | None) -> str:
    data = data_limit()
    said = [f"the address-space limit (ulimit -v) is {limit // MiB} MiB"] if limit is not None else []
    said += [f"the data-segment limit (ulimit -d) is {data // MiB} MiB"] if data is not None else []
    if not said:
        return "no memory limit is set (ulimit -v and -d unlimited): the machine's memory ran out"
    return " and ".join(said)


def memory_limit_problem() -> str | None:
    """The one-line refusal when ``ulimit -v`` is below what the command needs to start (None otherwise)."""
    limit = address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        return (f"the address-space limit (ulimit -v) is {limit // MiB} MiB, below the {MIN_ADDRESS_SPACE // MiB} MiB "
                "that Python, CloudAI and pandas need to start. Fix: raise it (ulimit -v unlimited, or at least "
                f"{MIN_ADDRESS_SPACE // MiB * 1024} KiB)")
    data = data_limit()
    if data is not None and data < MIN_DATA_SEGMENT:
        return (f"the data-segment limit (ulimit -d) is {data // MiB} MiB, below the {MIN_DATA_SEGMENT // MiB} MiB "
                "that Python, CloudAI and pandas need to start. Fix: raise it (ulimit -d unlimited, or at least "
                f"{MIN_DATA_SEGMENT // MiB * 1024} KiB)")
    return None


def load_numeric_libraries() -> None:
    """Under an address-space limit, numpy (OpenBLAS) is loaded here with one BLAS thread: OpenBLAS reserves buffers
    per thread and, when that fails, ends the process with its own line. Its thread count is set for this load only
    (the jobs this command submits keep the environment they had)."""
    if (address_space_limit() is None and data_limit() is None) or "numpy" in sys.modules:
        return
    names = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")
    before = {n: os.environ.get(n) for n in names}
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        for n, v in before.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v


_MEMORY_WORDS = ("cannot allocate memory", "failed to map segment", "out of memory", "memoryerror")


def is_memory_error(exc: BaseException) -> bool:
    """A MemoryError, or an ImportError / OSError that running out of memory caused (a shared library that could
    not be mapped), anywhere in the exception's chain; under a memory limit also a SystemError (a C extension whose
    allocation failed without saying so, measured under ulimit -d 60 MiB)."""
    seen = set()
    limited = address_space_limit() is not None or data_limit() is not None
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, MemoryError):
            return True
        if isinstance(e, SystemError) and limited:  # "error return without exception set": an allocation in C failed
            return True
        if isinstance(e, (ImportError, OSError)) and (
                getattr(e, "errno", None) == errno.ENOMEM or any(w in str(e).lower() for w in _MEMORY_WORDS)):
            return True
        e = e.__cause__ or e.__context__
    return False


def memory_problem(what: str = "the command") -> str:
    limit = address_space_limit()
    fix = ("raise it (ulimit -v unlimited, ulimit -d unlimited) or run on a machine with more free memory"
           if limit is not None or data_limit() is not None
           else "free memory (close other programs) or run on a machine with more")
    return f"{what} ran out of memory: {_limit_text(limit)}; no file was left half-written. Fix: {fix}"


def print_error(line: str) -> None:
    """``line`` on standard error, if there is one to print to."""
    stream = sys.stderr if sys.stderr is not None else sys.__stderr__
    if stream is None:
        return
    with contextlib.suppress(OSError, ValueError, AttributeError, UnicodeError):
        print(f"cloudai-mbridge: {line}", file=stream, flush=True)
