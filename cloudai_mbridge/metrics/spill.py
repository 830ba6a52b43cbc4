"""An ``array`` whose values past the first block live in an unnamed temporary file, not in memory: the per-iteration
columns of a training log (metrics/training.py) cost a bounded amount of memory whatever the log's length.

Up to :data:`BLOCK` values a :class:`SpilledArray` is the plain ``array`` it wraps, nothing else (no file, the same
speed): a log of fewer iterations reads as before. Past that, every full block is written to a temporary file of the
array's :class:`Arena` and dropped from memory; reads of a position there come through a small cache of one read
block. The file has no name (``tempfile.TemporaryFile``: ``O_TMPFILE`` on Linux, in ``$TMPDIR``): nothing appears in
any folder, and the space is the system's again when the arena is collected or the process ends, killed or not.
"""

from __future__ import annotations

import itertools
import os
import tempfile
import weakref
from array import array
from collections.abc import Iterable, Iterator
from typing import Any

BLOCK = 1 << 16  # values kept in memory before a block is written out (512 KiB of doubles)
_WARNED: list[bool] = []  # the warning that the file could not be written is given once a process
_READ = 1 << 12  # values read back at once for a position in the file (32 KiB of doubles)


class Arena:
    """One unnamed temporary file that many arrays append their blocks to (one descriptor per parsed log, not one
    per column); created at the first block written.

    When the file cannot be made or written (no usable ``$TMPDIR``, a full disk, a file size limit), ``failed`` holds
    why and the arrays keep their values in memory from then on, as they did before there was a file: the parse and
    its numbers are the same, only its memory grows with the log. That is said once, as a warning naming the fix."""

    __slots__ = ("__weakref__", "_end", "_file", "failed")

    def __init__(self) -> None:
        self._file: Any = None
        self._end = 0
        self.failed: str | None = None

    def fail(self, exc: OSError) -> None:
        self.failed = f"{type(exc).__name__}: {exc}"
        if not _WARNED:
            _WARNED.append(True)
            import logging

            logging.getLogger(__name__).warning(
                "a long log's parsed values stay in memory: the temporary folder could not take them (%s); "
                "free space there, or point TMPDIR at a folder with room", self.failed)

    def write(self, data: bytes) -> int:
        """Append ``data``; its offset in the file."""
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="cloudai-mbridge-columns.")  # noqa: SIM115  (the arena owns it)
            weakref.finalize(self, self._file.close)  # closed (its space freed) with the arena
        offset, view = self._end, memoryview(data)
        while view:
            written = os.pwrite(self._file.fileno(), view, self._end)
            view, self._end = view[written:], self._end + written
        return offset

    def read(self, offset: int, size: int) -> bytes:
        parts, done = [], 0
        while done < size:
            part = os.pread(self._file.fileno(), size - done, offset + done)
            if not part:
                raise OSError(f"the temporary column file ended {size - done} bytes early")
            parts.append(part)
            done += len(part)
        return b"".join(parts)


class SpilledArray:
    """The part of ``array``'s interface the columns use: ``append``, ``extend``, ``len``, iteration, ``in``, an int
    or a slice index (a slice is a plain ``array``, ``bytes`` for typecode ``'B'``; a slice longer than a block is a
    SpilledArray of the same arena)."""

    __slots__ = ("_arena", "_block", "_blocks", "_cache", "_cache_at", "_read_n", "_size", "_tail", "typecode")

    def __init__(self, typecode: str, values: Iterable[Any] = (), arena: Arena | None = None) -> None:
        self.typecode = typecode
        self._block, self._read_n = BLOCK, _READ  # fixed for the array's life (the module's values may change)
        self._arena = arena if arena is not None else Arena()
        self._blocks = array("q")  # the file offset of each full block written out, in order
        self._size = array(typecode).itemsize
        self._tail = array(typecode)
        self._cache: array | None = None
        self._cache_at = -1
        self.extend(values)

    def append(self, value: Any) -> None:
        self._tail.append(value)
        if len(self._tail) >= self._block:
            self._spill()

    def extend(self, values: Iterable[Any]) -> None:
        if isinstance(values, bytes | bytearray | memoryview) and self.typecode == "B":
            self._tail.frombytes(values)
        else:
            self._tail.extend(values)
        if len(self._tail) >= self._block:
            self._spill()

    def __iadd__(self, values: Iterable[Any]) -> SpilledArray:
        self.extend(values)
        return self

    def _spill(self) -> None:
        arena = self._arena
        if arena.failed is not None:  # the file could not be written: the values stay in memory (Arena)
            return
        tail = self._tail
        full = len(tail) - len(tail) % self._block
        done = 0
        try:
            for start in range(0, full, self._block):
                self._blocks.append(arena.write(tail[start:start + self._block].tobytes()))
                done = start + self._block
        except OSError as exc:
            arena.fail(exc)
        self._tail = tail[done:]
        self._cache_at = -1  # a window read before holds only what was in the file then

    def __len__(self) -> int:
        return len(self._blocks) * self._block + len(self._tail)

    def _read(self, start: int, stop: int) -> array:
        """Values ``start:stop`` (0 <= start <= stop <= len) as an array, from the file and the tail."""
        out = array(self.typecode)
        spilled = len(self._blocks) * self._block
        at = start
        while at < min(stop, spilled):
            block, within = divmod(at, self._block)
            take = min(stop, (block + 1) * self._block) - at
            out.frombytes(self._arena.read(self._blocks[block] + within * self._size, take * self._size))
            at += take
        if stop > spilled:
            out.extend(self._tail[max(start, spilled) - spilled: stop - spilled])
        return out

    def __iter__(self) -> Iterator[Any]:
        if not self._blocks:
            return iter(self._tail)
        return itertools.chain.from_iterable(self.chunks())

    def chunks(self) -> Iterator[array]:
        """The values in order, a few thousand at a time (what :meth:`__iter__` yields one by one)."""
        n_blocks = len(self._blocks)
        for block in range(n_blocks):
            end = (block + 1) * self._block
            for start in range(block * self._block, end, self._read_n * 4):
                yield self._read(start, min(end, start + self._read_n * 4))
        if len(self._blocks) != n_blocks:
            raise RuntimeError("SpilledArray changed size during iteration")
        yield self._tail

    def reader(self) -> Reader:
        """Consecutive runs of values, first to last (a record after record read: no index per value)."""
        return Reader(self)

    def __contains__(self, value: Any) -> bool:
        return any(v == value for v in self)

    def __getitem__(self, index: int | slice) -> Any:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return array(self.typecode, (self[i] for i in range(start, stop, step))) if self.typecode != "B" \
                    else bytes(self[i] for i in range(start, stop, step))
            stop = max(start, stop)
            spilled = len(self._blocks) * self._block
            if start >= spilled:  # the values in memory (every value of an array that never reached a block)
                part = self._tail[start - spilled: stop - spilled]
                return part.tobytes() if self.typecode == "B" else part
            at = start - start % self._read_n
            if stop <= min(at + self._read_n, spilled):  # within one read window in the file: the cache
                part = self._window(at)[start - at: stop - at]
                return part.tobytes() if self.typecode == "B" else part
            if stop - start <= self._block:
                part = self._read(start, stop)
                return part.tobytes() if self.typecode == "B" else part
            whole = SpilledArray(self.typecode, arena=self._arena)
            for at in range(start, stop, self._block):
                whole.extend(self._read(at, min(stop, at + self._block)))
            return whole
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("array index out of range")
        spilled = len(self._blocks) * self._block
        if i >= spilled:
            return self._tail[i - spilled]
        at = i - i % self._read_n
        return self._window(at)[i - at]

    def _window(self, at: int) -> array:
        """The read window of the file that starts at ``at`` (a multiple of _READ), read once while it is in use:
        a record after record read costs one read a window, not one a value."""
        if at != self._cache_at:
            self._cache = self._read(at, min(at + self._read_n, len(self._blocks) * self._block))
            self._cache_at = at
        return self._cache  # type: ignore[return-value]

    def tobytes(self) -> bytes:
        return self._read(0, len(self)).tobytes()

    def __reduce__(self) -> tuple:
        """Pickled (a scan in a worker process sends its records back) as the values themselves."""
        return (_rebuilt, (self.typecode, self.tobytes()))

    def __repr__(self) -> str:
        return f"SpilledArray({self.typecode!r}, {len(self)} values, {len(self._blocks)} block(s) in a file)"


class Reader:
    """:meth:`SpilledArray.reader`: ``take(n)`` gives the next ``n`` values (an array; bytes for typecode ``'B'``)."""

    __slots__ = ("_buf", "_bytes", "_chunks", "_off")

    def __init__(self, values: SpilledArray) -> None:
        self._chunks = values.chunks()
        self._buf = array(values.typecode)
        self._off = 0
        self._bytes = values.typecode == "B"

    def take(self, n: int) -> Any:
        buf, off = self._buf, self._off
        if len(buf) - off < n:
            buf = buf[off:]
            off = 0
            while len(buf) < n:
                chunk = next(self._chunks, None)
                if chunk is None:
                    raise IndexError("read past the last value")
                buf.extend(chunk)
            self._buf = buf
        self._off = off + n
        part = buf[off: off + n]
        return part.tobytes() if self._bytes else part


def _rebuilt(typecode: str, data: bytes) -> SpilledArray:
    values = array(typecode)
    values.frombytes(data)
    return SpilledArray(typecode, values)
