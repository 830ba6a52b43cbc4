"""The payload's ``MBRIDGE_ROUTING`` lines (payload/train/routing.py), by (rank, iteration), in bounded memory.

Every rank prints one such line an iteration: the fingerprint of its routers' expert choices, and (payload/train/
dispatch_timing.py) the time inside the MoE token dispatcher. A 10^6-iteration run has 10^6 of them in rank 0's log
and as many in the last rank's, and a job log of every rank interleaved world_size x 10^6. :class:`RoutingFold` reads
them as the scan finds them (scan.Marker.fold of the contract marker) into five spilled columns (metrics/spill.py:
past 2^16 values they go to an unnamed temporary file), and keeps every other ``MBRIDGE_`` line for its readers (the
dispatcher contract, the engine line, the failure search). :func:`routing_tables` sorts the entries once and gives
the two maps the report uses, each a :class:`Table`: a read-only mapping over sorted spilled columns that equals the
dict it stands for. The rule is that of a dict built line by line: a (rank, iteration) seen twice with two different
values keeps neither (a log of two runs proves nothing), the same value twice is one entry.

Memory while :func:`routing_tables` sorts: numpy's sort of the keys and one value column at a time, about 24 B an entry
(24 MiB for 10^6), then given back; the tables themselves hold at most a block of each column.
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping
from typing import Any

from .scan import LogLine
from .spill import BLOCK, Arena, SpilledArray

TAG = "MBRIDGE_ROUTING"
_MS = r"\d{1,9}(?:\.\d{1,6})?"
ROUTING_RE = re.compile(
    r"MBRIDGE_ROUTING rank=(?P<rank>\d{1,6}) iteration=(?P<it>\d{1,9}) calls=\d{1,9} "
    r"hash=(?P<hash>[0-9a-f]{16}|none)"
    # optional (payload/train/dispatch_timing.py): time inside the token dispatcher this step; older logs lack them
    rf"(?: dispatch_ms=(?P<dispatch>{_MS}) combine_ms=(?P<combine>{_MS}) dispatcher_calls=\d{{1,9}})?\s*$"
)
_SHIFT = 32  # key = rank << 32 | iteration (an iteration has at most 9 digits, a rank 6)
_NO_HASH = 1  # flags: the line said hash=none (no router ran)
_TIMED = 2  # flags: the line carried dispatch_ms / combine_ms


class RoutingFold:
    """A log's routing lines as entries (key, hash, flags, dispatch ms, combine ms), and its other lines as they are
    (``rest()``: what the contract readers and the failure search get)."""

    __slots__ = ("arena", "columns", "kept")

    def __init__(self) -> None:
        self.arena = Arena()
        self.columns = tuple(SpilledArray(code, arena=self.arena) for code in "qQBdd")
        self.kept: list[LogLine] = []

    def add(self, line: LogLine) -> None:
        text = line.text
        match = ROUTING_RE.search(text) if line.terminated and TAG in text else None
        if match is None:
            self.kept.append(line)
            return
        if text[: match.start()].strip():  # something before the tag (interleaved output): its own readers see it
            self.kept.append(line)
        keys, hashes, flags, dispatch, combine = self.columns
        keys.append(int(match.group("rank")) << _SHIFT | int(match.group("it")))
        digest = match.group("hash")
        hashes.append(0 if digest == "none" else int(digest, 16))
        timed = match.group("dispatch") is not None
        flags.append((_NO_HASH if digest == "none" else 0) | (_TIMED if timed else 0))
        dispatch.append(float(match.group("dispatch")) if timed else 0.0)
        combine.append(float(match.group("combine")) if timed else 0.0)

    def rest(self) -> list[LogLine]:
        return self.kept


class _Items(ItemsView):
    def __iter__(self) -> Iterator[tuple[tuple[int, int], Any]]:
        return self._mapping.read_items()  # type: ignore[attr-defined]


class Table(Mapping):
    """(rank, iteration) -> value over sorted unique keys in spilled columns: ``kind`` "routing" (the hash as 16 hex
    digits, or "none") or "dispatcher" ((dispatch ms, combine ms)). Equal to the dict of the same items."""

    __slots__ = ("_a", "_b", "_keys", "kind")

    def __init__(self, kind: str, keys: Iterable[int] = (), a: Iterable[Any] = (), b: Iterable[Any] = (),
                 arena: Arena | None = None) -> None:
        arena = arena if arena is not None else Arena()
        self.kind = kind
        self._keys = _spilled("q", keys, arena)
        self._a = _spilled("Q" if kind == "routing" else "d", a, arena)
        self._b = _spilled("B" if kind == "routing" else "d", b, arena)

    def _value(self, a: Any, b: Any) -> Any:
        if self.kind == "routing":
            return "none" if b & _NO_HASH else f"{a:016x}"
        return (a, b)

    def __getitem__(self, key: Any) -> Any:
        try:
            rank, it = key
            k = int(rank) << _SHIFT | int(it)
        except (TypeError, ValueError):
            raise KeyError(key) from None
        i = bisect.bisect_left(self._keys, k)
        if i == len(self._keys) or self._keys[i] != k:
            raise KeyError(key)
        return self._value(self._a[i], self._b[i])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        mask = (1 << _SHIFT) - 1
        return ((k >> _SHIFT, k & mask) for k in self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def items(self) -> ItemsView:
        return _Items(self)

    def read_items(self) -> Iterator[tuple[tuple[int, int], Any]]:
        """The items in key order, the columns read in step (no lookup per key)."""
        mask, value = (1 << _SHIFT) - 1, self._value
        return (((k >> _SHIFT, k & mask), value(a, b)) for k, a, b in zip(self._keys, self._a, self._b, strict=True))

    def __reduce__(self) -> tuple:
        return (Table, (self.kind, list(self._keys), list(self._a), list(self._b)))

    def __repr__(self) -> str:
        return f"Table({self.kind!r}, {len(self):,} entries)"


def _spilled(typecode: str, values: Any, arena: Arena) -> SpilledArray:
    """A SpilledArray of ``values`` (a numpy array is copied a block at a time, never as Python numbers)."""
    if hasattr(values, "tobytes") and hasattr(values, "dtype"):
        out = SpilledArray(typecode, arena=arena)
        for start in range(0, len(values), BLOCK):
            out.extend(array(typecode, values[start:start + BLOCK].tobytes()))
        return out
    return SpilledArray(typecode, values, arena)


def routing_tables(folds: Iterable[Any]) -> tuple[Table, Table]:
    """(routing hashes, dispatcher times) of the folds' entries together (what is not a RoutingFold is left out: a
    log that could not be read)."""
    import numpy as np

    folds = [f for f in {id(f): f for f in folds}.values()  # a log read twice (rank 0 = the last rank) counts once
             if isinstance(f, RoutingFold) and len(f.columns[0])]
    if _in_order(np, folds):  # one rank a log, each in iteration order (the payload's logs): read once, in step
        return _streamed(folds)

    def column(j: int, dtype: Any) -> Any:
        parts = [np.frombuffer(chunk, dtype=dtype) for f in folds for chunk in f.columns[j].chunks() if len(chunk)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=dtype)

    keys = column(0, np.int64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    flags = column(2, np.uint8)[order]
    arena = Arena()
    routing = _unique("routing", keys, column(1, np.uint64)[order], flags & _NO_HASH, np.ones(len(keys), bool), arena)
    timed = (flags & _TIMED) != 0
    dispatcher = _unique("dispatcher", keys, column(3, np.float64)[order], column(4, np.float64)[order], timed, arena)
    return routing, dispatcher


def _in_order(np: Any, folds: list[RoutingFold]) -> bool:
    """Whether the folds' keys, one after the other, never go down (each chunk checked with numpy)."""
    last = None
    for fold in folds:
        for chunk in fold.columns[0].chunks():
            if not len(chunk):
                continue
            keys = np.frombuffer(chunk, dtype=np.int64)
            if (last is not None and keys[0] < last) or bool((keys[1:] < keys[:-1]).any()):
                return False
            last = int(keys[-1])
    return True


def _streamed(folds: list[RoutingFold]) -> tuple[Table, Table]:
    """:func:`routing_tables` of entries already in key order: each key's entries are side by side, so one pass keeps
    the first of a key whose entries agree (memory: the tables' blocks, whatever the number of entries)."""
    arena = Arena()
    tables = (Table("routing", arena=arena), Table("dispatcher", arena=arena))
    held: list[list[Any]] = [[None, None, True], [None, None, True]]  # per table: key, value, entries agree

    def flush(j: int) -> None:
        key, value, agree = held[j]
        if key is not None and agree:
            table = tables[j]
            table._keys.append(key)
            table._a.append(value[0])
            table._b.append(value[1])
        held[j] = [None, None, True]

    for fold in folds:
        for key, digest, flags, dispatch, combine in zip(*fold.columns, strict=True):
            entries = ((0, (digest, flags & _NO_HASH)), (1, (dispatch, combine)) if flags & _TIMED else None)
            for entry in entries:
                if entry is None:
                    continue
                j, value = entry
                if held[j][0] != key:
                    flush(j)
                    held[j][:2] = key, value
                elif held[j][1] != value:
                    held[j][2] = False
    flush(0)
    flush(1)
    return tables


def _unique(kind: str, keys: Any, a: Any, b: Any, wanted: Any, arena: Arena) -> Table:
    """The entries (sorted by key) that ``wanted`` selects, one per key, leaving out every key whose entries differ."""
    import numpy as np

    keys, a, b = keys[wanted], a[wanted], b[wanted]
    if not len(keys):
        return Table(kind, arena=arena)
    start = np.ones(len(keys), bool)
    start[1:] = keys[1:] != keys[:-1]  # the first entry of each key
    group = np.cumsum(start) - 1
    same = np.ones(len(keys), bool)
    same[1:] = ((a[1:] == a[:-1]) & (b[1:] == b[:-1])) | start[1:]
    agree = np.ones(int(group[-1]) + 1, bool)
    agree[group[~same]] = False
    keep = start & agree[group]
    return Table(kind, keys[keep], a[keep], b[keep].astype(np.uint8 if kind == "routing" else np.float64), arena)


def routing_maps(lines: Iterable[LogLine]) -> tuple[Table, Table]:
    """:func:`routing_tables` of some lines (a test's, a caller's that holds them)."""
    fold = RoutingFold()
    for line in lines:
        fold.add(line)
    return routing_tables([fold])
