"""Raw log bytes -> the few lines that matter, without reading every line in Python.

A run's rank logs are mostly noise (NCCL INFO, warnings). Each file is read with plain reads into a reused,
page-aligned anonymous buffer (:class:`_Buffer`): whole up to :data:`WINDOW` (32 MiB), a larger one a window at a time
that ends at a line's end, so memory does not grow with the log (:func:`_scan_windows`); and searched for byte markers
at C speed (libc's ``memmem`` on the buffer's address, ``mmap.find`` where there is none; a short needle such as
``rror`` first goes through a numpy filter that rules out whole blocks, see :class:`_PairFilter`); only the line
around each hit is cut out, decoded with errors="replace", stripped of ANSI colour codes and of a launcher's rank
label, and handed to the regexes of the layer above. benchmarks/parse_logs.py measures it against grep.

Why a read and not a memory map of the file: a log can change while it is scanned (a job still writing, a rotated or
truncated file). A mapped file that shrinks under the reader kills the process with SIGBUS (no message, no cleanup);
a read returns the bytes the file holds at that moment, and the scan works on that copy. The copy goes into an
*anonymous* mapping (no file behind it, so nothing can shrink under it) that the thread keeps for its next file: the
kernel copies into a page-aligned, cache-warm buffer 2-3x faster than into a fresh ``bytes`` object, and the search
then reads the bytes from cache instead of memory.

What a line can be, and how it is kept honest:

- A progress bar rewrites its line with carriage returns; the text between the last ``\\r`` before the hit and the
  next one is the segment the hit belongs to (a CRLF line ending is just a segment ending in ``\\r``).
- A file that does not end in a newline was cut inside its last line (a killed job, a full disk). That line is
  returned with ``terminated=False``; parsers must not trust a value that ends where the file ends.
- A segment longer than :data:`MAX_SEGMENT` (a binary dump, a runaway line) is cut to a window around the hit and
  also marked ``terminated=False``.
- Interleaved output from several ranks keeps its labels: ``srun --label`` (``3: ``), torchrun's ``[rank3]:`` and
  ``mpirun --tag-output`` (``[1,3]<stdout>:``) are removed from the text and reported as ``label_rank``.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import mmap
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any, BinaryIO

from ..safe_read import InputFileError
from .layout import RunLayout

MAX_SEGMENT = 1 << 20
WINDOW_BEFORE = 4096
WINDOW_AFTER = 65536

_ANSI_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# A rank is at most 9 digits: a longer run of digits is no label (and int() refuses more than 4300 digits).
_LABEL_RE = re.compile(
    r"^\s*(?:\[1,(?P<mpi>\d{1,9})\]<std(?:out|err)>:|(?P<srun>\d{1,9}):(?=\s))?"
    r"\s*(?:\[rank(?P<torch>\d{1,9})\]:)?[ \t]?"
)


@dataclass(frozen=True)
class Marker:
    """Byte strings whose lines one parser wants.

    ``first_only`` stops at the first hit (presence checks on lines printed once at start-up, so the search ends
    early on a healthy log). ``keep`` drops hits whose decoded line does not match it. ``requires`` /
    ``requires_absent`` name markers searched earlier in the same plan: the marker is only searched when that one
    kept hits / had none, which keeps rarely needed full passes off the common path.

    ``fold`` (not ``first_only``, no condition): a callable whose result is handed each line as the scan finds it
    (``add(line)``) and kept in :attr:`FileScan.folded` instead of the lines: a 10^6-iteration log's lines are read
    into compact records a window at a time and never all held. ``hits`` holds none of them, or, when the fold has a
    ``rest()`` method, the lines it returns (those that other readers, such as the failure search, still need). The
    lines come in file order for each needle; a fold of several needles gets them needle by needle within each 32 MiB
    window of a larger log (:func:`_scan_windows`), so it must not depend on the order across needles.
    """

    name: str
    needles: tuple[bytes, ...]
    first_only: bool = False
    keep: re.Pattern[str] | None = None
    requires: str | None = None
    requires_absent: str | None = None
    fold: Callable[[], Any] | None = None


@dataclass(frozen=True, slots=True)
class LogLine:
    offset: int
    text: str
    label_rank: int | None = None
    terminated: bool = True


@dataclass(frozen=True)
class FileScan:
    """What one file gave; ``status`` is ok, empty, missing or unreadable, ``truncated`` means no final newline."""

    path: Path
    size: int
    status: str
    truncated: bool = False
    hits: Mapping[str, tuple[LogLine, ...]] = field(default_factory=dict)
    searched: frozenset[str] = frozenset()
    error: str | None = None
    folded: Mapping[str, Any] = field(default_factory=dict)  # a ``fold`` marker's folder, by marker name

    def lines(self, marker: str) -> tuple[LogLine, ...]:
        return self.hits.get(marker, ())

    def take(self, marker: str) -> list[LogLine]:
        """The marker's lines, handed over to their one reader: the scan keeps them no longer, so the reader can let
        each line go once it has read it (a 10^6-iteration log's lines are never all held beside their records)."""
        hits = self.hits
        taken = hits.pop(marker, ()) if isinstance(hits, dict) else hits.get(marker, ())
        return list(taken)

    def give_back(self, marker: str, lines: Sequence[LogLine]) -> None:
        """After :meth:`take`: the lines a later reader (the failure search) still needs."""
        if isinstance(self.hits, dict):
            self.hits[marker] = tuple(lines)


def clean_text(raw: bytes) -> tuple[str, int | None]:
    """Decode, strip ANSI codes and a leading rank label; returns (text, label_rank)."""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI_RE.sub("", text)
    match = _LABEL_RE.match(text)  # every part is optional: it always matches, possibly empty
    label = (match.group("torch") or match.group("srun") or match.group("mpi")) if match else None
    if match is None or label is None:
        return text.rstrip("\r\n"), None
    return text[match.end() :].rstrip("\r\n"), int(label)


def _cut(buf: mmap.mmap, size: int, pos: int) -> tuple[int, LogLine]:
    """The line segment around ``pos`` and the offset where the next search should start (the segment's end, so
    two carriage-return segments of one line are two lines)."""
    start = buf.rfind(b"\n", 0, pos) + 1
    end = buf.find(b"\n", pos, size)  # bounded: a reused buffer holds an older file's bytes after ``size``
    terminated = end != -1
    if not terminated:
        end = size
    cr = buf.rfind(b"\r", start, pos)
    seg_start = cr + 1 if cr != -1 else start
    cr = buf.find(b"\r", pos, end)
    seg_end = cr if cr != -1 else end
    if seg_end - seg_start > MAX_SEGMENT:
        seg_start = max(seg_start, pos - WINDOW_BEFORE)
        seg_end = min(seg_end, pos + WINDOW_AFTER)
        terminated = False
    text, rank = clean_text(buf[seg_start:seg_end])
    return seg_end + 1, LogLine(offset=seg_start, text=text, label_rank=rank, terminated=terminated)


def _load_memmem() -> Callable[..., int | None] | None:
    """libc's ``memmem``, where the platform has one (glibc, musl, macOS, BSD): 1.3-2x faster than ``bytes.find`` on
    the short needles of a failure search (measured on NCCL-heavy logs, see benchmarks/parse_logs.py). None
    elsewhere (Windows): ``mmap.find`` then, with the same results."""
    try:
        memmem = ctypes.CDLL(None).memmem  # the running process's own C library, no search for a file
    except (OSError, AttributeError, TypeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return memmem


_MEMMEM = _load_memmem()


# --- reading ---------------------------------------------------------------------------------------------------------
KEEP_BUFFER = 64 << 20  # a thread keeps a buffer up to this size for its next file; a bigger one is unmapped after use
_LOCAL = threading.local()


class _Buffer:
    """A page-aligned anonymous mapping and its address (what ``memmem`` searches)."""

    __slots__ = ("_anchor", "address", "capacity", "map")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.map = mmap.mmap(-1, capacity)
        self._anchor = ctypes.c_char.from_buffer(self.map)  # an export: the mapping cannot be closed or moved under it
        self.address = ctypes.addressof(self._anchor)


def _capacity(size: int) -> int:
    """Room for ``size`` bytes, one more (the read that meets the end of the file) and 1/8 for a log that grows, in
    whole MiB."""
    need = size + size // 8 + 1
    return -(-need // (1 << 20)) * (1 << 20)


def _read(fh: BinaryIO) -> tuple[_Buffer, int]:
    """Everything the open file holds now (until a read returns nothing, like ``read()``), in the thread's buffer or a
    bigger one."""
    buf: _Buffer | None = getattr(_LOCAL, "buffer", None)
    size = os.fstat(fh.fileno()).st_size
    if buf is None or buf.capacity <= size:
        buf = _Buffer(_capacity(size))
        if buf.capacity <= KEEP_BUFFER:
            _LOCAL.buffer = buf
    n = 0
    while True:
        if n == buf.capacity:  # the file grew while it was read
            from ..safe_read import MAX_LOG_BYTES, mode_problem

            if n > MAX_LOG_BYTES:
                raise InputFileError(mode_problem(getattr(fh, "name", "?"), 0o100644, n, MAX_LOG_BYTES, "a log")
                                     or "too large")
            bigger = _Buffer(_capacity(2 * n))
            bigger.map[:n] = buf.map[:n]
            buf = bigger
        got = fh.readinto(memoryview(buf.map)[n:])
        if not got:
            return buf, n
        n += got


# --- searching -------------------------------------------------------------------------------------------------------
BLOCK = 1 << 19
_FILTER_NEEDLE = range(2, 8)  # needle lengths that go through the pair filter (memmem skips len - 1 bytes a step)
_NUMPY: list[Any] = []


def _numpy() -> Any:
    """numpy (pandas' dependency, so always installed with this package), imported on first use; None without it."""
    if not _NUMPY:
        try:
            import numpy
        except ImportError:  # pragma: no cover - numpy comes with pandas
            numpy = None
        _NUMPY.append(numpy)
    return _NUMPY[0]


class _PairFilter:
    """``find`` for one short needle that skips the :data:`BLOCK`-byte blocks where two of its adjacent bytes never
    stand side by side, and runs ``memmem`` only on the others.

    glibc's ``memmem`` moves at most ``len(needle) - 1`` bytes a step, so a 4-byte needle such as ``rror`` (the
    failure search every file gets) runs at about 1.5 GB/s; two numpy compares and an AND over a block that sits in
    cache run 3-5x faster, and a pair such as ``rr`` is rare in NCCL / PyTorch output. The pair is the needle's rarest
    in the file's first 8 KiB. When most blocks hold the pair anyway (a log full of errors) the filter turns itself
    off and ``memmem`` runs alone: the results are the same either way, only the speed differs."""

    def __init__(self, np: Any, buf: _Buffer, size: int, needle: bytes, plain: Callable[..., int]) -> None:
        self.np, self.size, self.needle, self.plain = np, size, needle, plain
        sample = buf.map[: min(size, 1 << 13)]
        i = min(range(len(needle) - 1), key=lambda k: sample.count(needle[k : k + 2]))
        self.first, self.second = needle[i], needle[i + 1]
        self.data = np.frombuffer(buf.map, dtype=np.uint8, count=size)
        scratch = getattr(_LOCAL, "scratch", None)
        if scratch is None or len(scratch[0]) < BLOCK + _FILTER_NEEDLE.stop:
            scratch = _LOCAL.scratch = [np.empty(BLOCK + _FILTER_NEEDLE.stop, dtype=bool) for _ in range(3)]
        self.scratch = scratch
        self.block, self.maybe = -1, True  # the last block judged and its verdict
        self.judged = self.positive = 0
        self.off = False

    def _judge(self, start: int, stop: int) -> bool:
        np, n = self.np, stop - start
        block = self.data[start:stop]
        first = np.equal(block, self.first, out=self.scratch[0][:n])
        second = first if self.second == self.first else np.equal(block, self.second, out=self.scratch[1][:n])
        return bool(np.logical_and(first[:-1], second[1:], out=self.scratch[2][: n - 1]).any())

    def find(self, pos: int) -> int:
        length, size = len(self.needle), self.size
        block = pos // BLOCK
        while block * BLOCK < size:
            if self.off:
                return self.plain(self.needle, pos)
            start = block * BLOCK
            stop = min(size, start + BLOCK + length - 1)  # every needle that starts in the block
            if block != self.block:
                self.block, self.maybe = block, self._judge(start, stop)
                self.judged += 1
                self.positive += self.maybe
                self.off = self.judged >= 8 and 2 * self.positive > self.judged
            if self.maybe:
                hit = self.plain(self.needle, max(pos, start), stop)
                if hit != -1:
                    return hit
            block += 1
        return -1


def _finder(buf: _Buffer, size: int) -> Callable[[bytes, int], int]:
    """``find(needle, pos)`` over the first ``size`` bytes of ``buf``: the offset of the next ``needle`` at or after
    ``pos``, -1 if none."""
    memmem = _MEMMEM
    if memmem is None:
        find_in = buf.map.find
        return lambda needle, pos: find_in(needle, pos, size)
    base = buf.address

    def plain(needle: bytes, pos: int, end: int = size) -> int:
        if pos >= end:
            return -1
        hit = memmem(base + pos, end - pos, needle, len(needle))
        return hit - base if hit else -1

    np = _numpy() if size >= 4 * BLOCK else None
    if np is None:
        return plain
    filters: dict[bytes, _PairFilter] = {}

    def find(needle: bytes, pos: int) -> int:
        if len(needle) not in _FILTER_NEEDLE:
            return plain(needle, pos)
        pair = filters.get(needle)
        if pair is None:
            pair = filters[needle] = _PairFilter(np, buf, size, needle, plain)
        return pair.find(pos)

    return find


def _needle_lines(data: mmap.mmap, size: int, marker: Marker, k: int, find: Callable[[bytes, int], int],
                  seen: set[int]) -> Iterator[LogLine]:
    """The lines of the marker's ``k``-th needle that it keeps, each line once over the marker's needles.

    A whole line that holds an earlier needle was found by that needle's search (it searched the same bytes), so it is
    passed over here; nothing per line is remembered for that, so a marker that hits 10^6 lines holds no 10^6 offsets
    (issue 46). Only a line cut short (the end of the file, a runaway line: its text depends on where it was hit) is
    remembered by offset in ``seen``, and not for the last needle (one needle never finds a line twice)."""
    needle, earlier, last = marker.needles[k], marker.needles[:k], k == len(marker.needles) - 1
    pos = find(needle, 0)
    while pos != -1:
        resume, line = _cut(data, size, pos)
        if line.terminated:
            again = any(data.find(e, line.offset, resume - 1) != -1 for e in earlier)
        else:
            again = line.offset in seen
            if not last:
                seen.add(line.offset)
        if not again and (marker.keep is None or marker.keep.search(line.text)):
            yield line
        pos = find(needle, resume) if resume < size else -1


def _find_lines(data: mmap.mmap, size: int, marker: Marker, find: Callable[[bytes, int], int]) -> Iterator[LogLine]:
    seen: set[int] = set()
    for k in range(len(marker.needles)):
        for line in _needle_lines(data, size, marker, k, find, seen):
            yield line
            if marker.first_only:
                return


def _open_log(path: Path) -> BinaryIO:
    """``path`` opened for an unbuffered read when it is a regular file within MAX_LOG_BYTES: opened without blocking
    (a FIFO would wait for a writer forever), checked on the descriptor (a device is never read); InputFileError."""
    from ..safe_read import MAX_LOG_BYTES, mode_problem

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        problem = mode_problem(path, st.st_mode, st.st_size, MAX_LOG_BYTES, "a log")
        if problem:
            raise InputFileError(problem)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)  # type: ignore[return-value]
    except BaseException:
        os.close(fd)
        raise


# A log larger than this is read a window at a time, each window ending at a line's end (:func:`_scan_windows`):
# memory stays WINDOW whatever the log's size (a 10^6-iteration rank log is about 290 MB).
WINDOW = 32 << 20


def _lines_by_needle(data: mmap.mmap, size: int, marker: Marker, find: Callable[[bytes, int], int],
                     base: int) -> list[list[LogLine]]:
    """:func:`_find_lines` of one window, by needle, offsets made absolute (``base``: the window's offset)."""
    seen: set[int] = set()
    return [[LogLine(line.offset + base, line.text, line.label_rank, line.terminated)
             for line in itertools.islice(_needle_lines(data, size, marker, k, find, seen),
                                          1 if marker.first_only else None)]
            for k in range(len(marker.needles))]


def _wanted(marker: Marker, state: Mapping[str, bool]) -> bool:
    """Whether ``scan_file`` searches ``marker`` given the markers searched so far (``state``: name -> had a line)."""
    if marker.requires is not None and state.get(marker.requires) is not True:
        return False
    return marker.requires_absent is None or state.get(marker.requires_absent) is False


def _windows(fh: BinaryIO) -> Iterator[tuple[_Buffer, int, int, bool]]:
    """(buffer, bytes of whole lines in it, their offset in the file, whether the file ended) per window: every
    read until a read returns nothing, as :func:`_read`; a line longer than the window is cut at the window's end."""
    buf: _Buffer | None = getattr(_LOCAL, "window", None)
    if buf is None or buf.capacity != WINDOW:
        buf = _LOCAL.window = _Buffer(WINDOW)
    held = base = 0
    while True:
        eof = False
        while held < buf.capacity:
            got = fh.readinto(memoryview(buf.map)[held:])
            if not got:
                eof = True
                break
            held += got
        if eof:
            yield buf, held, base, True
            return
        cut = buf.map.rfind(b"\n", 0, held) + 1 or held
        yield buf, cut, base, False
        buf.map.move(0, cut, held - cut)
        held, base = held - cut, base + cut


def _scan_windows(fh: BinaryIO, plan: Sequence[Marker], folded: dict[str, Any] | None = None
                  ) -> tuple[dict[str, tuple[LogLine, ...]], int, bool]:
    """:func:`scan_file`'s search a window at a time, with the same hits in the same order: each marker's lines by
    needle, then needle by needle; ``first_only`` keeps the first line of the first needle that has one; a marker
    that ``requires`` (or ``requires_absent``) another is decided on the other's hits in the whole file, and searched
    again in a second pass where a window skipped it before the other's first line."""
    found: dict[str, list[list[LogLine]]] = {}
    size, truncated = 0, False
    markers, partial = list(plan), set()
    for again in (False, True):
        if again:
            state: dict[str, bool] = {}
            rescan = []
            for m in plan:  # in plan order: each condition on the hits of the whole file
                if not _wanted(m, state):
                    found.pop(m.name, None)
                    continue
                if m.name in partial:
                    rescan.append(m)
                    found[m.name] = [[] for _ in m.needles]
                state[m.name] = m.name in partial or any(found.get(m.name, ()))
            if not rescan:
                break
            markers, partial = rescan, set()
            fh.seek(0)
        for buf, n, base, eof in _windows(fh):
            if not n:
                continue
            data = buf.map
            if eof and not again:
                size, truncated = base + n, data[n - 1] != 0x0A
            find = _finder(buf, n)
            now = {name: any(lines) for name, lines in found.items()}
            for m in markers:
                if not again and not _wanted(m, now):
                    partial.add(m.name)  # its condition may still come true further on
                    continue
                lines = found.setdefault(m.name, [[] for _ in m.needles])
                if folded is not None and m.name in folded:  # each line read into the fold as it is found
                    for line in _find_lines(data, n, m, find):
                        folded[m.name].add(LogLine(line.offset + base, line.text, line.label_rank, line.terminated))
                elif not (m.first_only and lines[0]):  # the first needle's first line is what first_only keeps
                    for kept, more in zip(lines, _lines_by_needle(data, n, m, find, base), strict=True):
                        kept += more[: 1 if m.first_only else None]
                now[m.name] = any(lines)
    hits = {}
    for m in plan:
        if m.name in found:
            lines = found[m.name]
            hits[m.name] = (tuple(next((ls[:1] for ls in lines if ls), [])) if m.first_only
                            else tuple(line for ls in lines for line in ls))
    return hits, size, truncated


def scan_file(path: Path | str, markers: Sequence[Marker]) -> FileScan:
    """Search one file for every marker of the plan (in order, honouring ``requires``)."""
    path = Path(path)
    try:
        with _open_log(path) as fh:  # unbuffered: the reads go straight into the buffer
            folded = {m.name: m.fold() for m in markers if _folds(m)}
            if os.fstat(fh.fileno()).st_size > WINDOW:  # a window at a time: memory does not grow with the log
                hits, size, truncated = _scan_windows(fh, markers, folded)
                _rest(markers, folded, hits)
                if size == 0:
                    return FileScan(path=path, size=0, status="empty")
                return FileScan(path=path, size=size, status="ok", truncated=truncated, hits=hits,
                                searched=frozenset(hits), folded=folded)
            buf, size = _read(fh)  # what the file holds now, even if it shrinks or grows meanwhile (no SIGBUS)
        if size == 0:
            return FileScan(path=path, size=0, status="empty")
        data = buf.map
        truncated = data[size - 1] != 0x0A
        find = _finder(buf, size)
        hits: dict[str, tuple[LogLine, ...]] = {}
        for marker in markers:
            if marker.requires is not None and not hits.get(marker.requires):
                continue
            if marker.requires_absent is not None and hits.get(marker.requires_absent) != ():
                continue
            if marker.name in folded:
                for line in _find_lines(data, size, marker, find):
                    folded[marker.name].add(line)
                hits[marker.name] = ()
            else:
                hits[marker.name] = tuple(_find_lines(data, size, marker, find))
        _rest(markers, folded, hits)
    except FileNotFoundError:
        return FileScan(path=path, size=0, status="missing")
    except InputFileError as exc:  # a FIFO, a device, a log above the limit: never read (issue 32)
        return FileScan(path=path, size=0, status="unreadable", error=str(exc))
    except (OSError, ValueError) as exc:
        return FileScan(path=path, size=0, status="unreadable", error=f"{type(exc).__name__}: {exc}")
    return FileScan(path=path, size=size, status="ok", truncated=truncated, hits=hits, searched=frozenset(hits),
                    folded=folded)


def _folds(marker: Marker) -> bool:
    """Whether a marker's lines go to its ``fold`` (every line of it, so no ``first_only`` and no condition)."""
    return (marker.fold is not None and not marker.first_only
            and marker.requires is None and marker.requires_absent is None)


def in_scan_order(marker: Marker, lines: Iterable[LogLine]) -> list[LogLine]:
    """``lines`` of ``marker`` in the order an unfolded scan gives them: by the needle that found each (the first of
    the marker's needles its text holds), then by place in the file."""
    needles = [needle.decode("utf-8", "replace") for needle in marker.needles]
    return sorted(lines, key=lambda line: (next((k for k, n in enumerate(needles) if n in line.text), len(needles)),
                                           line.offset))


def _rest(markers: Sequence[Marker], folded: Mapping[str, Any], hits: dict[str, tuple[LogLine, ...]]) -> None:
    """A fold's ``rest()`` lines back into ``hits``, in the order an unfolded scan gives them."""
    for marker in markers:
        rest = getattr(folded.get(marker.name), "rest", None)
        if rest is not None and marker.name in hits:
            hits[marker.name] = tuple(in_scan_order(marker, rest()))


class Routed:
    """A job-level log's fold: the lines labelled one of ``ranks`` (None: unlabelled) are handed to ``into`` (a fold
    that may be shared by a run's job logs, which :func:`scan_run` then scans one after another, in order; None: no
    reader wants them); whatever the label, a line that ``keep`` accepts is kept as a hit of this file (the failure
    search's lines). A job log that holds every rank's 10^6 iteration lines holds none of them after its scan."""

    __slots__ = ("into", "keep", "kept", "ranks")

    def __init__(self, into: Any, ranks: Sequence[int | None], keep: Callable[[LogLine], bool] | None = None) -> None:
        self.into, self.ranks, self.keep = into, frozenset(ranks), keep
        self.kept: list[LogLine] = []

    def add(self, line: LogLine) -> None:
        if self.into is not None and line.label_rank in self.ranks:
            self.into.add(line)
        if self.keep is not None and self.keep(line):
            self.kept.append(line)

    def rest(self) -> list[LogLine]:
        return self.kept


def scan_files(plans: Sequence[tuple[Path, Sequence[Marker]]], workers: int = 1) -> list[FileScan]:
    """Scan many files, in order; ``workers > 1`` spreads whole files over that many threads (``memmem`` and the read
    run without the GIL) or, without ``memmem``, processes."""
    if workers <= 1 or len(plans) < 2:
        return [scan_file(path, markers) for path, markers in plans]
    if _MEMMEM is not None:
        with ThreadPoolExecutor(max_workers=min(workers, len(plans))) as threads:
            return list(threads.map(scan_file, [p for p, _ in plans], [m for _, m in plans]))
    # spawn, not fork: the caller may have threads (pytest, a report server) that fork would copy mid-flight.
    with ProcessPoolExecutor(max_workers=min(workers, len(plans)), mp_context=get_context("spawn")) as pool:
        return list(pool.map(scan_file, [p for p, _ in plans], [m for _, m in plans], chunksize=4))


@dataclass(frozen=True)
class RunScan:
    layout: RunLayout
    ranks: Mapping[int, FileScan]
    jobs: tuple[FileScan, ...]

    def source(self, scan: FileScan) -> str:
        try:
            return str(scan.path.relative_to(self.layout.run_dir))
        except ValueError:
            return str(scan.path)

    def labelled(self, marker: str, ranks: Sequence[int | None]) -> list[LogLine]:
        """Job-log lines of a marker whose label is one of ``ranks`` (None: unlabelled)."""
        return [line for job in self.jobs for line in job.lines(marker) if line.label_rank in ranks]


def scan_run(
    layout: RunLayout, rank_plan: Callable[[int], Sequence[Marker]], job_plan: Sequence[Marker], workers: int = 1
) -> RunScan:
    """Every rank log with its own plan, every job-level log with ``job_plan``. The job logs are scanned one after
    another, in order, on this thread: a fold that they share (:class:`Routed`) gets their lines as one log's."""
    plans = [(path, rank_plan(rank)) for rank, path in layout.rank_logs.items()]
    ranks = dict(zip(layout.rank_logs, scan_files(plans, workers=workers), strict=True))
    return RunScan(layout=layout, ranks=ranks, jobs=tuple(scan_file(path, job_plan) for path in layout.job_logs))


def fold_job_logs(layout: RunLayout, marker: Marker, into: Any, ranks: Sequence[int | None]) -> Any:
    """``into`` handed the ``marker`` lines labelled one of ``ranks`` of every job log, in order (a second read of the
    job logs, for a run whose rank log turned out to hold none of them); returns ``into``."""
    plan = [replace(marker, fold=functools.partial(Routed, into, ranks), first_only=False, requires=None,
                    requires_absent=None)]
    for path in layout.job_logs:
        scan_file(path, plan)
    return into


def job_fold(run: RunScan, marker: str) -> Any:
    """The fold the job logs' :class:`Routed` lines of ``marker`` went into during the scan, None if none."""
    for job in run.jobs:
        routed = job.folded.get(marker)
        if isinstance(routed, Routed) and routed.into is not None:
            return routed.into
    return None
