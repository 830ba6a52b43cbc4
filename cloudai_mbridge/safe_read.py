"""Reading an input file without hanging or running out of memory (issue 32).

A FIFO named as a config waits for a writer forever; ``/dev/zero`` (or any character device) is read until memory
runs out; a 100 GB sparse file the same. Only regular files are read, opened without blocking (O_NONBLOCK: opening
a FIFO returns at once), checked on the open descriptor (no race between the check and the read) and read up to a
size limit. Every refusal is an ``InputFileError`` whose message names the file, what it is and the fix, in one line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

MiB = 1 << 20
MAX_TOML_BYTES = 16 * MiB  # a system / scenario / test TOML, test-run.toml (conf/'s largest is a few KiB)
MAX_JSON_BYTES = 64 * MiB  # mbridge_config.json, a run's summary / golden files
MAX_LOG_BYTES = 8 << 30  # a rank log or a job log (a long run's rank log is some MiB to a few GiB)


class InputFileError(Exception):
    """A file that must not be read: not a regular file, or larger than its limit. Not an OSError / ValueError on
    purpose: the readers that turn those into "damaged" must not swallow a refusal."""


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe; reading it would wait for a writer forever)"
    if stat.S_ISCHR(mode):
        return "a character device (reading it may never end)"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n} bytes"


def mode_problem(path: Path | str, mode: int, size: int, limit: int, what: str) -> str | None:
    """Why a file of this ``mode`` and ``size`` must not be read as ``what`` (None if it may)."""
    if not stat.S_ISREG(mode):
        return (f"{path}: {what} is {_kind(mode)}, not a regular file. Fix: name (or put there) a regular file")
    if size > limit:
        return (f"{path}: {what} is too large ({_size(size)}; the limit is {_size(limit)}). Fix: name the right "
                "file, or cut it down")
    return None


def path_problem(path: Path | str, limit: int, what: str = "the file") -> str | None:
    """Why ``path`` (links followed) must not be read (None if it may, or if it cannot be stat'ed: the reader reports
    that in its own words). Never opens the file."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return mode_problem(path, st.st_mode, st.st_size, limit, what)


def _open_checked(path: Path | str, limit: int, what: str) -> tuple[int, os.stat_result]:
    """A descriptor of ``path`` opened without blocking (a FIFO does not hang the open), checked on the descriptor
    itself (InputFileError for a FIFO, a device, a socket, more than ``limit`` bytes), then set blocking for the
    reads; the caller closes it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        problem = mode_problem(path, st.st_mode, st.st_size, limit, what)
        if problem:
            raise InputFileError(problem)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_bytes(path: Path | str, limit: int, what: str = "the file") -> bytes:
    """The bytes of the regular file ``path``: InputFileError for a FIFO, a device, a socket or more than ``limit``
    bytes (also a file that grows past it while read); OSError as ``open`` raises it."""
    fd, st = _open_checked(path, limit, what)
    try:
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(MiB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise InputFileError(mode_problem(path, st.st_mode, total, limit, what) or f"{path}: too large")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: Path | str, limit: int, what: str = "the file", errors: str = "strict") -> str:
    return read_bytes(path, limit, what).decode("utf-8", errors)


# What the reports read in a results folder (metrics/layout.py, reports/*, CloudAI's test-run.toml): name -> limit.
RESULT_FILES = {"mbridge_config.json": MAX_JSON_BYTES, "mbridge_summary.json": MAX_JSON_BYTES,
                "test-run.toml": MAX_TOML_BYTES, "stdout.txt": MAX_LOG_BYTES, "stderr.txt": MAX_LOG_BYTES}


def _result_limit(rel_parts: tuple[str, ...]) -> int | None:
    name = rel_parts[-1]
    if name in RESULT_FILES:
        return RESULT_FILES[name]
    if len(rel_parts) >= 2 and rel_parts[-2] == "logs" and name.endswith(".log"):  # <run>/logs/rank-<R>.log
        return MAX_LOG_BYTES
    return None


def results_problems(root: Path | str, limit: int = 5) -> list[str]:
    """The files of the results folder ``root`` that the reports would read and must not (a FIFO, a device, a socket,
    larger than their limit): at most ``limit`` messages, each naming the file, what it is and the fix. Links are
    followed for the check (a link to /dev/zero is a device); a broken link, a loop or a folder is left to the readers,
    which call that run damaged. Nothing is opened."""
    root = Path(root)
    problems: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]):
            path = Path(folder) / name
            rel = path.relative_to(root).parts
            limit_bytes = _result_limit(rel)
            if limit_bytes is None:
                continue
            try:
                st = os.stat(path)
            except (OSError, ValueError):
                continue
            if stat.S_ISDIR(st.st_mode):
                continue
            problem = mode_problem(path, st.st_mode, st.st_size, limit_bytes, "a file the reports read")
            if problem:
                problems.append(problem)
                if len(problems) >= limit:
                    return problems
    return problems


def read_head(path: Path | str, n: int, limit: int, what: str = "the file") -> bytes:
    """The first ``n`` bytes of the regular file ``path`` (InputFileError as read_bytes says)."""
    fd, _ = _open_checked(path, limit, what)
    try:
        chunks, total = [], 0
        while total < n and (chunk := os.read(fd, n - total)):
            chunks.append(chunk)
            total += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
