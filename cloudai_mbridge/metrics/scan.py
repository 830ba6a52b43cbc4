"""Raw log bytes -> the few lines that matter, without reading every line in Python.

A run's rank logs are mostly noise (NCCL INFO, warnings). Each file is read whole with one plain read and searched for
byte markers at C speed (libc's ``memmem`` on the bytes object's own buffer, ``bytes.find`` where there is none);
only the line around each hit is cut out, decoded with errors="replace", stripped of ANSI colour codes and of a
launcher's rank label, and handed to the regexes of the layer above. benchmarks/parse_logs.py measures it against grep.

Why a read and not a memory map: a log can change while it is scanned (a job still writing, a rotated or truncated
file). A mapped file that shrinks under the reader kills the process with SIGBUS (no message, no cleanup); a read
returns the bytes the file holds at that moment, and the scan works on that copy.

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
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

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
    """

    name: str
    needles: tuple[bytes, ...]
    first_only: bool = False
    keep: re.Pattern[str] | None = None
    requires: str | None = None
    requires_absent: str | None = None


@dataclass(frozen=True)
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

    def lines(self, marker: str) -> tuple[LogLine, ...]:
        return self.hits.get(marker, ())


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


def _cut(buf: bytes, size: int, pos: int) -> tuple[int, LogLine]:
    """The line segment around ``pos`` and the offset where the next search should start (the segment's end, so
    two carriage-return segments of one line are two lines)."""
    start = buf.rfind(b"\n", 0, pos) + 1
    end = buf.find(b"\n", pos)
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
    elsewhere (Windows): ``bytes.find`` then, with the same results."""
    try:
        memmem = ctypes.CDLL(None).memmem  # the running process's own C library, no search for a file
    except (OSError, AttributeError, TypeError):
        return None
    memmem.restype = ctypes.c_void_p
    memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    return memmem


_MEMMEM = _load_memmem()


def _finder(buf: bytes) -> Callable[[bytes, int], int]:
    """``find(needle, pos)`` over ``buf``: the offset of the next ``needle`` at or after ``pos``, -1 if none.

    With ``memmem`` the search runs on the bytes object's own buffer (``c_char_p`` takes its address, no copy; the
    closure keeps the object alive and bytes never move or change)."""
    memmem = _MEMMEM
    if memmem is None:
        return buf.find
    pointer = ctypes.c_char_p(buf)
    base = ctypes.cast(pointer, ctypes.c_void_p).value or 0
    size = len(buf)

    def find(needle: bytes, pos: int, _keep: ctypes.c_char_p = pointer) -> int:
        if pos >= size:
            return -1
        hit = memmem(base + pos, size - pos, needle, len(needle))
        return hit - base if hit else -1

    return find


def _find_lines(buf: bytes, size: int, marker: Marker, find: Callable[[bytes, int], int]) -> Iterator[LogLine]:
    seen: set[int] = set()
    for needle in marker.needles:
        pos = find(needle, 0)
        while pos != -1:
            resume, line = _cut(buf, size, pos)
            if line.offset not in seen:
                seen.add(line.offset)
                if marker.keep is None or marker.keep.search(line.text):
                    yield line
                    if marker.first_only:
                        return
            pos = find(needle, resume) if resume < size else -1


def scan_file(path: Path | str, markers: Sequence[Marker]) -> FileScan:
    """Search one file for every marker of the plan (in order, honouring ``requires``)."""
    path = Path(path)
    try:
        with open(path, "rb", buffering=0) as fh:  # unbuffered: one read straight into the result, no second copy
            buf = fh.read()  # what the file holds now, even if it shrinks or grows meanwhile (no SIGBUS)
        size = len(buf)
        if size == 0:
            return FileScan(path=path, size=0, status="empty")
        truncated = buf[size - 1] != 0x0A
        find = _finder(buf)
        hits: dict[str, tuple[LogLine, ...]] = {}
        for marker in markers:
            if marker.requires is not None and not hits.get(marker.requires):
                continue
            if marker.requires_absent is not None and hits.get(marker.requires_absent) != ():
                continue
            hits[marker.name] = tuple(_find_lines(buf, size, marker, find))
    except FileNotFoundError:
        return FileScan(path=path, size=0, status="missing")
    except (OSError, ValueError) as exc:
        return FileScan(path=path, size=0, status="unreadable", error=f"{type(exc).__name__}: {exc}")
    return FileScan(path=path, size=size, status="ok", truncated=truncated, hits=hits, searched=frozenset(hits))


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
    """Every rank log with its own plan, every job-level log with ``job_plan``."""
    plans = [(path, rank_plan(rank)) for rank, path in layout.rank_logs.items()]
    plans += [(path, job_plan) for path in layout.job_logs]
    scans = scan_files(plans, workers=workers)
    n_ranks = len(layout.rank_logs)
    ranks = dict(zip(layout.rank_logs, scans[:n_ranks], strict=True))
    return RunScan(layout=layout, ranks=ranks, jobs=tuple(scans[n_ranks:]))
