"""Training run logs -> per-iteration records, steady-state statistics, validity and failure.

Line formats (from the sources, not from memory):

- Megatron-LM ``training_log`` (``megatron/training/training.py``), printed by ``print_rank_last``::

    [2026-06-04 08:41:07.123456] iteration        5/      24 | consumed samples:         1280 |
    elapsed time per iteration (ms): 5793.1 | throughput per GPU (TFLOP/s/GPU): 178.6 | learning rate: 1.000000E-05 |
    global batch size:   256 | lm loss: 1.189735E+01 | load_balancing_loss: 1.020033E+00 | loss scale: 1.0 |
    grad norm: 3.214 | number of skipped iterations:   0 | number of nan iterations:   0 |

  (one line). Losses are ``' {key}: {avg:.6E} |'`` and only printed when ``avg >= 0.0`` (``> 0.0`` in older
  releases): a NaN loss is *not printed*, so a loss that disappears from an otherwise complete line is NaN
  evidence. MoE aux losses come in the same form (``load_balancing_loss``, ``seq_load_balancing_loss``, ``z_loss``,
  ``mtp_1 loss``; newer Megatron-LM formats its MoE tracker values as ``{v:.2f}``). ``grad norm`` is ``{:.3f}``, so
  a non-finite one reads ``nan``/``inf``.
- Megatron-Bridge ``training_log`` (``src/megatron/bridge/training/utils/train_utils.py``): the same fields with a
  seconds-only timestamp, plus on rank 0 ``Step Time : 5.79s GPU utilization: 178.6MODEL_TFLOP/s/GPU``.
- Memory: Megatron-LM ``[Rank 0] (after 2 iterations) memory (MB) | allocated: ... | max allocated: ... |
  reserved: ... | max reserved: ...`` (MiB); Bridge ``[Rank 0] (after 2 iterations) memory (GB) |
  mem-allocated-gigabytes: ... | mem-max-allocated-gigabytes: ...`` (10^9 bytes).

The one rule that keeps numbers honest: a field's value is taken only when the ``|`` that closes it was written,
so a line cut by a kill, or spliced with another rank's output, never yields a shortened number.
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import math
import operator
import re
import struct
import sys
from array import array
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, overload

from . import signals
from .frames import csv_chunks_of, csv_text_of, frame
from .layout import RunLayout, dp_rank0_ranks, load_layout
from .loss import loss_problem, vocab_of
from .routing import RoutingFold, routing_tables
from .scan import FileScan, LogLine, Marker, Routed, RunScan, fold_job_logs, job_fold, scan_run
from .spill import Arena, SpilledArray
from .stats import STALL_FACTOR, Stats, iteration_time_problem, steady_state

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_WARMUP = 4

ITERATION = Marker("iteration", (b"elapsed time per iteration",))
STEP_TIME = Marker("step_time", (b"Step Time",))
MEMORY = Marker("memory", (b") memory (",))

# The literal first: a pattern that starts with an optional timestamp is tried at every position of the line.
# Counts are at most 18 digits (int64): a longer run of digits is damage (and int() refuses more than 4300 digits).
_HEAD_RE = re.compile(r"\biteration\s+(?P<it>\d{1,18})\s*/\s*(?P<total>\d{1,18})\s*\|")
_TIMESTAMP_BEFORE_RE = re.compile(r"\[(?P<ts>\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?)\]\s*(?:==>\s*)?$")
_INT_RE = re.compile(r"\d{1,18}")
# A field counts only when the "|" that closes it was written; the text after the last "|" is never parsed.
_FIELD_RE = re.compile(r"([^:|]+):([^|]*)\|")
_STEP_RE = re.compile(
    r"Step Time\s*:\s*(?P<t>\d+(?:\.\d+)?)\s*s\b.*?GPU utilization:\s*(?P<tf>\d+(?:\.\d+)?)\s*(?:MODEL_)?TFLOP/s/GPU"
)
_MEM_HEAD_RE = re.compile(
    r"\[Rank (?P<rank>\d{1,18})\] \(after (?P<it>\d{1,18}) iterations\) memory \((?P<unit>MB|GB)\)"
)
_MEM_FIELD_RE = re.compile(
    r"\|\s*(?P<key>[^:|\[\]]+?):\s*(?P<value>[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)(?=\s*(?:\||\[Rank |$))"
)

_FLOAT_FIELDS = {
    "elapsed time per iteration (ms)": "elapsed_ms",
    "throughput per GPU (TFLOP/s/GPU)": "tflops_per_gpu",
    "learning rate": "learning_rate",
    "loss scale": "loss_scale",
    "grad norm": "grad_norm",
}
_INT_FIELDS = {
    "consumed samples": "consumed_samples",
    "global batch size": "global_batch_size",
    "number of skipped iterations": "skipped_iterations",
    "number of nan iterations": "nan_iterations",
}
_MEM_KEYS = {
    "allocated": "allocated",
    "max allocated": "max_allocated",
    "reserved": "reserved",
    "max reserved": "max_reserved",
    "mem-allocated-gigabytes": "allocated",
    "mem-max-allocated-gigabytes": "max_allocated",
    "mem-reserved-gigabytes": "reserved",
    "mem-max-reserved-gigabytes": "max_reserved",
}
_MEM_UNIT_BYTES = {"MB": float(1 << 20), "GB": 1e9}

STATUS_ORDER = (
    "no_logs",
    "failed",
    "bad_iteration_time",
    "inconsistent_log",
    "no_iterations",
    "no_steady_state",
    "missing_rank_log",
    "truncated",
    "incomplete",
    "unreadable_log",
    "missing_config",
    "invalid_config",
)


# --- records ---------------------------------------------------------------------------------------------------------
# One record per logged iteration (10^6 in a long run): slots, the field names interned and one shared empty mapping
# where a line has no extra losses or fields keep a record near 0.4 KiB (benchmarks/log_parse_scale.py).
_NONE: Mapping[str, Any] = MappingProxyType({})
@dataclass(frozen=True, slots=True)
class IterationRecord:
    """One ``iteration N/M | ...`` line; a field is None when the line did not carry a complete value for it."""

    iteration: int
    train_iters: int
    elapsed_ms: float | None = None
    tflops_per_gpu: float | None = None
    lm_loss: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None
    loss_scale: float | None = None
    global_batch_size: int | None = None
    consumed_samples: int | None = None
    skipped_iterations: int | None = None
    nan_iterations: int | None = None
    losses: Mapping[str, float] = field(default_factory=lambda: _NONE)
    extras: Mapping[str, str] = field(default_factory=lambda: _NONE)
    timestamp: str | None = None
    complete: bool = True
    source: str = ""
    # (field, raw text) of the numbers the line carried but that do not read as one (damaged bytes): such a value is
    # never silently treated as absent
    damaged: tuple[tuple[str, str], ...] = ()


# One logged iteration as columns: 10^6 records as objects held ~0.9 KiB each (a 10^6-iteration log parsed in +945 MiB),
# as columns ~0.15 KiB. A record is built again, equal field for field, each time one is read.
_FLOAT_COLUMNS = ("elapsed_ms", "tflops_per_gpu", "lm_loss", "grad_norm", "learning_rate", "loss_scale")
_INT_COLUMNS = ("global_batch_size", "consumed_samples", "skipped_iterations", "nan_iterations")
_NO_FLOATS, _NO_INTS = (0.0,) * len(_FLOAT_COLUMNS), (0,) * len(_INT_COLUMNS)


def _int64(value: Any) -> bool:
    return type(value) is int and -(1 << 63) <= value < 1 << 63


_PACK_DOUBLE = struct.Struct("d").pack
_FITS = {"q": _int64, "I": lambda v: type(v) is int and 0 <= v < 1 << 32, "d": lambda v: type(v) is float}


class _Column:
    """An ``array`` column that holds no values while they are an arithmetic progression (``'d'``: one value, bit for
    bit): a long log's iteration numbers, totals, batch sizes, counters and offsets cost nothing per iteration. The
    first value that breaks the progression turns it into the ``array`` it stands for; the values read back are the
    same either way."""

    __slots__ = ("_arena", "_data", "_first", "_fits", "_n", "_step", "typecode")

    def __init__(self, typecode: str, values: Iterable[Any] = (), arena: Arena | None = None) -> None:
        self.typecode = typecode
        self._fits = _FITS[typecode]
        self._arena = arena
        self._data: SpilledArray | array | None = None  # past spill.BLOCK values, the file holds the older ones
        self._first: Any = None
        self._step = 0
        self._n = 0
        for v in values:
            self.append(v)

    def append(self, v: Any) -> None:
        data = self._data
        if data is not None:
            data.append(v)
            return
        n = self._n
        if self._fits(v):
            if n == 0:
                self._first, self._n = v, 1
                return
            if self.typecode == "d":
                first = self._first
                if (v == first and (v != 0.0 or _PACK_DOUBLE(v) == _PACK_DOUBLE(first))) or (
                        v != v and _PACK_DOUBLE(v) == _PACK_DOUBLE(first)):
                    self._n = n + 1
                    return
            elif n == 1:
                self._step, self._n = v - self._first, 2
                return
            elif v == self._first + n * self._step:
                self._n = n + 1
                return
        data = self._data = SpilledArray(self.typecode, self._progression(), arena=self._arena)
        data.append(v)  # raises as the array does for a value it cannot hold

    def _progression(self) -> Iterator[Any]:
        if self._n == 0:
            return iter(())
        if self.typecode == "d" or self._step == 0:
            return itertools.repeat(self._first, self._n)
        return iter(range(self._first, self._first + self._n * self._step, self._step))

    def __len__(self) -> int:
        return self._n if self._data is None else len(self._data)

    def __iter__(self) -> Iterator[Any]:
        return self._progression() if self._data is None else iter(self._data)

    def __getitem__(self, index: int | slice) -> Any:
        if self._data is None and type(index) is int and 0 <= index < self._n:  # the common read, first
            return self._first + index * self._step if self.typecode != "d" else self._first
        if self._data is not None:
            if isinstance(index, slice):
                part = _Column(self.typecode)
                part._data = self._data[index]
                return part
            return self._data[index]
        positions = range(self._n)[index]  # IndexError as a sequence's
        if isinstance(index, slice):
            part = _Column(self.typecode)
            if len(positions):
                part._first = self._first + positions.start * self._step if self.typecode != "d" else self._first
                part._step, part._n = self._step * positions.step if self.typecode != "d" else 0, len(positions)
            return part
        return self._first + positions * self._step if self.typecode != "d" else self._first

    def holds(self, value: int) -> bool:
        """``value in column`` for an int column, in constant time while it is a progression."""
        if self._data is not None or self.typecode == "d" or self._n < 2 or self._step == 0:
            return value in (self._data if self._data is not None else self._progression())
        offset, rest = divmod(value - self._first, self._step)
        return rest == 0 and 0 <= offset < self._n

    def increasing(self) -> bool:
        """Every value above the one before."""
        if self._data is None:
            return self._n < 2 or (self.typecode != "d" and self._step > 0)
        return all(a < b for a, b in itertools.pairwise(self._data))


_R = TypeVar("_R")


class _Records(Sequence[_R]):
    """A sequence of frozen records held as columns, each record built when read: equal to the tuple of the same
    records (or another of its kind), hashed as that tuple, shown as its list."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self) | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"


class IterationRecords(_Records[IterationRecord]):
    """A read-only sequence of :class:`IterationRecord`, stored as ``array`` columns.

    Numbers sit in ``array('d')`` / ``array('q')`` columns (a field's absence in a per-record shape, so a NaN that was
    logged stays a NaN); the field names, source and completeness in a small table of shapes shared by the records;
    the timestamp and extra fields' text in one byte buffer. A record that does not fit (damaged bytes, a number
    outside int64, text with ``|``) is kept whole. Indexing and iteration build each record on demand."""

    __slots__ = ("_fields", "_floats", "_ints", "_it", "_num", "_num_at", "_shape", "_shape_ids", "_shapes", "_text",
                 "_text_at", "_total", "_whole")

    def __init__(self, records: Iterable[IterationRecord] = ()) -> None:
        arena = Arena()  # past spill.BLOCK records, the columns' older values are in one temporary file
        self._it, self._total = _Column("q", arena=arena), _Column("q", arena=arena)
        self._floats = tuple(_Column("d", arena=arena) for _ in _FLOAT_COLUMNS)
        self._ints = tuple(_Column("q", arena=arena) for _ in _INT_COLUMNS)
        self._shape = _Column("I", arena=arena)
        self._shapes: list[tuple[int, tuple[str, ...], tuple[str, ...], str, bool, bool]] = []
        self._shape_ids: dict[tuple, int] = {}
        self._fields: list[tuple[tuple[str, _Column], ...]] = []  # per shape: the (field, column) pairs present
        self._num, self._num_at = SpilledArray("d", arena=arena), _Column("q", [0], arena=arena)
        self._text, self._text_at = SpilledArray("B", arena=arena), _Column("q", [0], arena=arena)
        self._whole: dict[int, IterationRecord] = {}
        self.extend(records)

    def extend(self, records: Iterable[IterationRecord]) -> None:
        for record in records:
            self.append(record)

    def append(self, r: IterationRecord) -> None:
        compact = self._compact(r)
        n = len(self._it)
        if compact is None:  # kept whole; its place in the columns holds zeros
            self._whole[n] = r
            shape, floats, ints, nums, text = 0, _NO_FLOATS, _NO_INTS, (), b""
            it, total = (r.iteration, r.train_iters) if _int64(r.iteration) and _int64(r.train_iters) else (-1, -1)
        else:
            shape, floats, ints, nums, text = compact
            it, total = r.iteration, r.train_iters
        self._it.append(it)
        self._total.append(total)
        for column, value in zip(self._floats, floats, strict=True):
            column.append(value)
        for column, value in zip(self._ints, ints, strict=True):
            column.append(value)
        self._shape.append(shape)
        if nums:
            self._num.extend(nums)
        self._num_at.append(len(self._num))
        if text:
            self._text += text
        self._text_at.append(len(self._text))

    def _compact(self, r: IterationRecord) -> tuple | None:
        """(shape, floats, ints, loss values, text) of a record the columns hold exactly; None for one they cannot."""
        if r.damaged or not (_int64(r.iteration) and _int64(r.train_iters)) or type(r.source) is not str:
            return None
        mask, bit = 0, 1
        floats = [r.elapsed_ms, r.tflops_per_gpu, r.lm_loss, r.grad_norm, r.learning_rate, r.loss_scale]
        for k, value in enumerate(floats):
            if value is None:
                floats[k] = 0.0
            elif type(value) is float:
                mask |= bit
            else:
                return None
            bit <<= 1
        ints = [r.global_batch_size, r.consumed_samples, r.skipped_iterations, r.nan_iterations]
        for k, value in enumerate(ints):
            if value is None:
                ints[k] = 0
            elif _int64(value):
                mask |= bit
            else:
                return None
            bit <<= 1
        losses, extras = r.losses, r.extras
        if not (losses is _NONE or (type(losses) is dict and losses)) or any(
            type(k) is not str or type(v) is not float for k, v in losses.items()
        ):
            return None
        if not (extras is _NONE or (type(extras) is dict and extras)) or any(
            type(k) is not str or type(v) is not str or "|" in v for k, v in extras.items()
        ):
            return None
        timestamp = r.timestamp
        if timestamp is not None and (type(timestamp) is not str or "|" in timestamp):
            return None
        if type(r.complete) is not bool:
            return None
        key = (mask, tuple(losses), tuple(extras), r.source, r.complete, timestamp is not None)
        shape = self._shape_ids.get(key)
        if shape is None:
            shape = self._shape_ids[key] = len(self._shapes)
            self._shapes.append(key)
            columns = (*zip(_FLOAT_COLUMNS, self._floats, strict=True), *zip(_INT_COLUMNS, self._ints, strict=True))
            self._fields.append(tuple(nc for b, nc in enumerate(columns) if mask >> b & 1))
        texts = [timestamp, *extras.values()] if timestamp is not None else list(extras.values())
        text = "|".join(texts).encode("utf-8", "surrogatepass") if texts else b""
        return shape, floats, ints, tuple(losses.values()), text

    def __len__(self) -> int:
        return len(self._it)

    @overload
    def __getitem__(self, index: int) -> IterationRecord: ...
    @overload
    def __getitem__(self, index: slice) -> IterationRecords: ...
    def __getitem__(self, index: int | slice) -> IterationRecord | IterationRecords:
        if isinstance(index, slice):
            return IterationRecords(self._record(i) for i in range(*index.indices(len(self))))
        n = len(self._it)
        i = operator.index(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("iteration record index out of range")
        return self._record(i)

    def _record(self, i: int) -> IterationRecord:
        if self._whole:
            whole = self._whole.get(i)
            if whole is not None:
                return whole
        shape = self._shape[i]
        _mask, loss_keys, extra_keys, source, complete, has_timestamp = self._shapes[shape]
        values = {name: column[i] for name, column in self._fields[shape]}
        losses: Mapping[str, float] = _NONE
        if loss_keys:
            losses = dict(zip(loss_keys, self._num[self._num_at[i] : self._num_at[i + 1]], strict=True))
        timestamp, extras = None, _NONE
        if has_timestamp or extra_keys:
            texts = self._text[self._text_at[i] : self._text_at[i + 1]].decode("utf-8", "surrogatepass").split("|")
            if has_timestamp:
                timestamp = texts.pop(0)
            if extra_keys:
                extras = dict(zip(extra_keys, texts, strict=True))
        return IterationRecord(self._it[i], self._total[i], losses=losses, extras=extras, timestamp=timestamp,
                               complete=complete, source=source, **values)

    def __iter__(self) -> Iterator[IterationRecord]:
        if self._whole:
            record = self._record
            for i in range(len(self._it)):
                yield record(i)
            return
        # the columns read in step (as _record builds one record: the same records, without an index per field)
        names = (*_FLOAT_COLUMNS, *_INT_COLUMNS)
        present = [tuple(k for k in range(len(names)) if key[0] >> k & 1) for key in self._shapes]
        shapes, num, text = self._shapes, self._num.reader(), self._text.reader()
        num_at, text_at = iter(self._num_at), iter(self._text_at)
        num0, text0 = next(num_at, 0), next(text_at, 0)
        for it, total, shape, num1, text1, *values in zip(self._it, self._total, self._shape, num_at, text_at,
                                                           *self._floats, *self._ints, strict=True):
            _mask, loss_keys, extra_keys, source, complete, has_timestamp = shapes[shape]
            losses: Mapping[str, float] = _NONE
            if loss_keys:  # a record holds values there exactly when it has losses (text: a timestamp or extras)
                losses = dict(zip(loss_keys, num.take(num1 - num0), strict=True))
            timestamp, extras = None, _NONE
            if has_timestamp or extra_keys:
                texts = text.take(text1 - text0).decode("utf-8", "surrogatepass").split("|")
                if has_timestamp:
                    timestamp = texts.pop(0)
                if extra_keys:
                    extras = dict(zip(extra_keys, texts, strict=True))
            num0, text0 = num1, text1
            yield IterationRecord(it, total, losses=losses, extras=extras, timestamp=timestamp, complete=complete,
                                  source=source, **{names[k]: values[k] for k in present[shape]})

    def column(self, name: str) -> list[Any]:
        """One field of every record, in order (None where absent), without building the records."""
        return list(self.values(name))

    def values(self, name: str) -> Iterator[Any]:
        """:meth:`column` one value at a time (no list of 10^6 numbers)."""
        if name in ("iteration", "train_iters"):
            values: Iterator[Any] = iter(self._it if name == "iteration" else self._total)
        elif name in _FLOAT_COLUMNS or name in _INT_COLUMNS:
            floats = name in _FLOAT_COLUMNS
            bit = _FLOAT_COLUMNS.index(name) if floats else len(_FLOAT_COLUMNS) + _INT_COLUMNS.index(name)
            data = self._floats[_FLOAT_COLUMNS.index(name)] if floats else self._ints[_INT_COLUMNS.index(name)]
            present = [shape[0] >> bit & 1 for shape in self._shapes] or [0]
            values = (v if present[s] else None for v, s in zip(data, self._shape, strict=True))
        elif name in ("complete", "source"):
            at = 4 if name == "complete" else 3
            of_shape = [shape[at] for shape in self._shapes] or [None]
            values = (of_shape[s] for s in self._shape)
        else:
            values = (getattr(r, name) for r in self)
        if not self._whole:
            return values
        whole = self._whole
        return (getattr(whole[i], name) if i in whole else v for i, v in enumerate(values))

    def set_source(self, source: str) -> None:
        """Name the file every record came from (records read before the run's folder was known had none)."""
        self._shapes = [(*key[:3], source, *key[4:]) for key in self._shapes]
        self._shape_ids = {key: i for i, key in enumerate(self._shapes)}
        self._whole = {i: dataclasses.replace(r, source=source) for i, r in self._whole.items()}

    def iteration_numbers(self) -> IterationNumbers:
        """Every record's iteration number (:meth:`values`), as compact as the column holds them."""
        return IterationNumbers(self._it[:] if not self._whole else self.values("iteration"))

    def whole_positions(self) -> set[int]:
        """The positions of the records kept whole (damaged bytes, numbers or text the columns cannot hold)."""
        return set(self._whole)


class IterationNumbers(Sequence[int]):
    """Iteration numbers in an ``array('q')`` (8 B each; a tuple of 10^6 int objects held 36 MB): equal to a tuple or
    list of the same numbers, ``in`` by bisection when they are sorted (a run's steady iterations are)."""

    __slots__ = ("_numbers", "_sorted")

    def __init__(self, numbers: Iterable[int] = ()) -> None:
        if isinstance(numbers, _Column) and numbers.typecode == "q":
            self._numbers: Sequence[int] = numbers
        else:
            numbers = tuple(numbers) if not isinstance(numbers, Sequence) else numbers
            try:
                self._numbers = _Column("q", numbers)
            except (OverflowError, TypeError):  # not int64 (never from a log: a count is at most 18 digits)
                self._numbers = tuple(numbers)
        self._sorted = (self._numbers.increasing() if isinstance(self._numbers, _Column)
                        else all(a < b for a, b in itertools.pairwise(self._numbers)))

    def __len__(self) -> int:
        return len(self._numbers)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> IterationNumbers: ...
    def __getitem__(self, index: int | slice) -> int | IterationNumbers:
        if isinstance(index, slice):
            return IterationNumbers(self._numbers[index])
        return self._numbers[index]

    def __iter__(self) -> Iterator[int]:
        return iter(self._numbers)

    def __contains__(self, value: object) -> bool:
        if not self._sorted or type(value) is not int:
            return value in self._numbers
        if isinstance(self._numbers, _Column) and self._numbers._data is None:
            return self._numbers.holds(value)
        at = bisect.bisect_left(self._numbers, value)
        return at < len(self._numbers) and self._numbers[at] == value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IterationNumbers | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._numbers))

    def __repr__(self) -> str:
        return repr(tuple(self._numbers))


def members(numbers: Iterable[int]) -> Container[int]:
    """What ``i in ...`` is asked of for every iteration of a run: the :class:`IterationNumbers` themselves (no set of
    10^6 ints), a set of any other numbers."""
    return numbers if isinstance(numbers, IterationNumbers) and numbers._sorted else set(numbers)


@dataclass(frozen=True, slots=True)
class StepTimeRecord:
    step_time_s: float
    tflops_per_gpu: float


class StepTimes(_Records[StepTimeRecord]):
    """Bridge's Step Time lines (one an iteration) as two float columns of :mod:`spill` arrays: a long log's step
    times cost no object each, and past a block no memory each. Indexing and iteration build each record on demand;
    equal to the tuple of the same records."""

    __slots__ = ("_t", "_tf")

    def __init__(self, records: Iterable[StepTimeRecord] = ()) -> None:
        arena = Arena()
        self._t, self._tf = SpilledArray("d", arena=arena), SpilledArray("d", arena=arena)
        for r in records:
            self.append(r)

    def append(self, r: StepTimeRecord) -> None:
        self._t.append(r.step_time_s)
        self._tf.append(r.tflops_per_gpu)

    def __len__(self) -> int:
        return len(self._t)

    @overload
    def __getitem__(self, index: int) -> StepTimeRecord: ...
    @overload
    def __getitem__(self, index: slice) -> StepTimes: ...
    def __getitem__(self, index: int | slice) -> StepTimeRecord | StepTimes:
        if isinstance(index, slice):
            return StepTimes(self[i] for i in range(*index.indices(len(self))))
        return StepTimeRecord(self._t[index], self._tf[index])

    def __iter__(self) -> Iterator[StepTimeRecord]:
        return itertools.starmap(StepTimeRecord, zip(self._t, self._tf, strict=True))

    def values(self, name: str) -> Iterator[float]:
        """One field of every record, in order, without building the records."""
        return iter({"step_time_s": self._t, "tflops_per_gpu": self._tf}[name])


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """Bytes, whatever the unit printed (Megatron-LM: MiB, Megatron-Bridge: 10^9)."""

    rank: int
    after_iterations: int
    allocated_bytes: float | None = None
    max_allocated_bytes: float | None = None
    reserved_bytes: float | None = None
    max_reserved_bytes: float | None = None
    alloc_retries: int | None = None
    unit: str = "MB"


# --- line parsers ----------------------------------------------------------------------------------------------------
def _number(text: str) -> float | None:
    """A complete decimal number (nan/inf included) or None; float() alone would also take "1_0" and "١٢"."""
    if "_" in text or not text.isascii():
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _integer(text: str) -> int | None:
    text = text.strip()
    return int(text) if _INT_RE.fullmatch(text) and text.isascii() else None


def parse_iteration_line(line: LogLine | str, source: str = "") -> list[IterationRecord]:
    """Every iteration record in one line (several when ranks' output was spliced together)."""
    if isinstance(line, str):
        line = LogLine(offset=0, text=line)
    text = line.text
    heads = list(_HEAD_RE.finditer(text))
    stamps = [_TIMESTAMP_BEFORE_RE.search(text, max(0, h.start() - 48), h.start()) for h in heads]
    starts = [stamp.start() if stamp else head.start() for head, stamp in zip(heads, stamps, strict=True)]
    records = []
    for i, head in enumerate(heads):
        end = starts[i + 1] if i + 1 < len(heads) else len(text)
        segment = text[head.end() : end]
        values: dict[str, Any] = {}
        losses: dict[str, float] = {}
        extras: dict[str, str] = {}
        damaged: list[tuple[str, str]] = []
        for key, raw in _FIELD_RE.findall(segment):
            key = key.strip()
            if key in _FLOAT_FIELDS:
                values[_FLOAT_FIELDS[key]] = _number(raw)
                if values[_FLOAT_FIELDS[key]] is None and ("\ufffd" in raw or "\x00" in raw):
                    damaged.append((key, raw.strip()))  # bytes that were not text: damage, not a splice
            elif key in _INT_FIELDS:
                values[_INT_FIELDS[key]] = _integer(raw)
            elif key == "lm loss":
                values["lm_loss"] = _number(raw)
            elif key.endswith("loss"):
                number = _number(raw)
                if number is not None:
                    losses[sys.intern(key)] = number
            elif key:
                extras[sys.intern(key)] = raw.strip()
        tail = segment[segment.rfind("|") + 1 :]
        records.append(
            IterationRecord(
                iteration=int(head.group("it")),
                train_iters=int(head.group("total")),
                losses=losses or _NONE,
                extras=extras or _NONE,
                timestamp=stamps[i].group("ts") if stamps[i] else None,
                complete=line.terminated and i + 1 == len(heads) and tail.strip() == "",
                source=source,
                damaged=tuple(damaged),
                **values,
            )
        )
    return records


def parse_step_time_line(text: str) -> list[StepTimeRecord]:
    return [StepTimeRecord(float(m.group("t")), float(m.group("tf"))) for m in _STEP_RE.finditer(text)]


def parse_memory_line(line: LogLine | str) -> list[MemoryReport]:
    """Memory reports in one line; a line cut at the end of the file is skipped (its last value may be short)."""
    if isinstance(line, str):
        line = LogLine(offset=0, text=line)
    if not line.terminated:
        return []
    text = line.text.rstrip()
    heads = list(_MEM_HEAD_RE.finditer(text))
    reports = []
    for i, head in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        unit = head.group("unit")
        scale = _MEM_UNIT_BYTES[unit]
        values: dict[str, Any] = {}
        for match in _MEM_FIELD_RE.finditer(text[head.end() : end]):
            key = match.group("key").strip()
            if key in _MEM_KEYS:
                values[f"{_MEM_KEYS[key]}_bytes"] = float(match.group("value")) * scale
            elif key in ("mem-alloc-retires", "mem-alloc-retries") and _INT_RE.fullmatch(match.group("value")):
                values["alloc_retries"] = int(match.group("value"))
        reports.append(
            MemoryReport(rank=int(head.group("rank")), after_iterations=int(head.group("it")), unit=unit, **values)
        )
    return reports


# --- the run ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingRunMetrics:
    """Everything one training run's logs say; ``status`` names the first thing that makes its numbers unusable.

    ``status`` is one of ``ok`` or :data:`STATUS_ORDER`; ``problems`` lists every one found, in that order, plus
    details (``duplicate_iterations``, ``missing_seq_length``, ``iterations_from_job_logs``, ...).
    """

    run_dir: Path
    status: str
    problems: tuple[str, ...]
    config: Mapping[str, Any]
    world_size: int | None
    last_rank: int | None
    missing_ranks: tuple[int, ...]
    truncated_files: tuple[str, ...]
    iteration_source: str | None
    iterations: Sequence[IterationRecord]  # an IterationRecords: columns, each record built when read
    step_times: Sequence[StepTimeRecord]  # a StepTimes (equal to the tuple of the same records)
    memory: tuple[MemoryReport, ...]
    warmup: int
    steady_iterations: Sequence[int]  # an IterationNumbers (equal to the tuple of the same numbers)
    stall_iterations: tuple[int, ...]
    iteration_time_ms: Stats
    tflops_per_gpu: Stats
    tokens_per_s: Stats
    step_time_s: Stats
    step_tflops_per_gpu: Stats
    validity: signals.ValiditySignals
    failure: signals.FailureReport
    engine_requested: str | None = None
    engine_selected: str | None = None
    time_errors: tuple[str, ...] = ()
    # What the log says that one run cannot have logged (status inconsistent_log): an iteration logged twice with
    # different values, an iteration past its total, two totals, another global batch size. No number is used.
    inconsistencies: tuple[str, ...] = ()
    # The payload's MBRIDGE_ROUTING hashes of rank 0 and the last rank, by (rank, iteration): the A/B's routing gate.
    routing: Mapping[tuple[int, int], str] = field(default_factory=dict)
    # Time inside the MoE token dispatcher, (dispatch ms, combine ms) by (rank, iteration), from the optional fields of
    # the same line; empty for a log that does not carry them (reports/ab.py then says "not recorded").
    dispatcher_ms: Mapping[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    # Bridge's manual GC period (MBRIDGE_GC; None: not said) and the steady iterations whose time carries a collection
    # (gc.collect() runs after every step that is a multiple of the period, inside the next iteration's time).
    gc_interval: int | None = None
    gc_iterations: tuple[int, ...] = ()
    # The steady state without those iterations: what the dispatcher itself costs per step.
    iteration_time_ms_no_gc: Stats = field(default_factory=lambda: Stats(n=0))

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def engine(self) -> str | None:
        """The code path that produced the numbers: the payload's ``MBRIDGE_ENGINE selected=`` line, else the
        config's ``engine`` unless that is ``auto`` (then nobody can say)."""
        if self.engine_selected:
            return self.engine_selected
        configured = signals.config_str(self.config, "engine")
        return configured if configured not in (None, "auto") else None

    @property
    def gpu_peak_tflops(self) -> float | None:
        """Dense BF16 peak per GPU of the config's ``gpu`` (catalog/gpus.py); None for an unknown GPU."""
        from ..catalog.gpus import GPUS

        spec = GPUS.get(signals.config_str(self.config, "gpu") or "")
        return spec.bf16_dense_tflops if spec is not None and spec.bf16_dense_tflops else None

    @property
    def mfu_pct(self) -> float | None:
        """Steady-state mean TFLOP/s per GPU (Megatron's model FLOPs) over the GPU's dense BF16 peak, in %."""
        peak = self.gpu_peak_tflops
        if peak is None or self.tflops_per_gpu.mean is None:
            return None
        return self.tflops_per_gpu.mean / peak * 100.0

    @property
    def gpu_hours(self) -> float | None:
        """GPUs x the time the logged iterations took (each record's time x the iterations it averages); start-up,
        checkpointing and teardown are not in it."""
        # one column at a time (no list of 10^6 records); math.fsum is exact: the sum a list would give
        first_two = list(itertools.islice(field_values(self.iterations, "iteration"), 2))
        step = first_two[1] - first_two[0] if len(first_two) > 1 and first_two[1] > first_two[0] else 1
        if not self.world_size or not any(ms is not None and math.isfinite(ms)
                                          for ms in field_values(self.iterations, "elapsed_ms")):
            return None
        return self.world_size * math.fsum(ms * step for ms in field_values(self.iterations, "elapsed_ms")
                                           if ms is not None and math.isfinite(ms)) / 3.6e6

    @property
    def loss_curve(self) -> dict[int, float]:
        """iteration -> lm loss, for the iterations that printed one."""
        return {r.iteration: r.lm_loss for r in self.iterations if r.lm_loss is not None}

    @property
    def tokens_per_s_per_gpu(self) -> float | None:
        if self.tokens_per_s.mean is None or not self.world_size:
            return None
        return self.tokens_per_s.mean / self.world_size

    @property
    def peak_allocated_bytes(self) -> float | None:
        values = [m.max_allocated_bytes for m in self.memory if m.max_allocated_bytes is not None]
        return max(values) if values else None

    @property
    def peak_reserved_bytes(self) -> float | None:
        values = [m.max_reserved_bytes for m in self.memory if m.max_reserved_bytes is not None]
        return max(values) if values else None

    def summary(self) -> dict[str, Any]:
        """One flat, JSON-friendly row."""
        it, tf, tok = self.iteration_time_ms, self.tflops_per_gpu, self.tokens_per_s
        dispatcher = self.validity.dispatcher
        return {
            "run_dir": str(self.run_dir),
            "status": self.status,
            "problems": ",".join(self.problems),
            "failure": self.failure.primary,
            "bad_iteration_times": "; ".join(self.time_errors) or None,
            "inconsistencies": "; ".join(self.inconsistencies) or None,
            "dispatcher": dispatcher.wanted,
            "dispatcher_built": dispatcher.built,
            "dispatcher_backend": dispatcher.backend,
            "deep_ep_provider": dispatcher.deep_ep_provider,
            "dispatcher_downgraded": dispatcher.downgraded,
            "world_size": self.world_size,
            "iterations": len(self.iterations),
            "n_steady": it.n,
            "iter_ms_mean": it.mean,
            "iter_ms_median": it.median,
            "iter_ms_p10": it.p10,
            "iter_ms_p90": it.p90,
            "stalls": it.n_stalls,
            "tflops_per_gpu_mean": tf.mean,
            "tokens_per_s_mean": tok.mean,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "step_time_s_mean": self.step_time_s.mean,
            "mfu_pct": self.mfu_pct,
            "gpu_peak_bf16_tflops": self.gpu_peak_tflops,
            "gpu_hours": self.gpu_hours,
            "engine": self.engine,
            "engine_requested": self.engine_requested or signals.config_str(self.config, "engine"),
            "engine_selected": self.engine_selected,
            **self.failure.reason(),
            "peak_allocated_bytes": self.peak_allocated_bytes,
            "efa_ranks": len(self.validity.efa_ranks),
            "efa_on_all_ranks": self.validity.efa_on_all_ranks,
            "uccl_proxy_ranks": len(self.validity.uccl_proxy_ranks),
            "nan_iterations": len(self.validity.nan_iterations),
            "skipped_iterations": self.validity.skipped_iterations,
        }

    def to_dataframe(self) -> pd.DataFrame:
        return iterations_frame(self)


def config_int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _rank_plan(rank: int, last: int | None, dp0: tuple[int, ...] | None, uccl_everywhere: bool) -> list[Marker]:
    plan: list[Marker] = [*signals.FAILURE_MARKERS, signals.EFA, signals.SOCKET, signals.PROGRESS]
    if uccl_everywhere or rank == 0:
        plan += [signals.UCCL_PROXY, signals.UCCL_NIC]
    if rank == 0:
        plan += [RANK_STEP_TIME, signals.BRIDGE_SKIP]
    if rank == last:
        plan.append(RANK_ITERATION)
    if rank in (0, last):
        plan.append(RANK_CONTRACT)
    if dp0 is None or rank in dp0:
        plan.append(MEMORY)
    return plan


JOB_PLAN = signals.job_log_markers(
    (
        *signals.FAILURE_MARKERS,
        signals.EFA,
        signals.SOCKET,
        signals.UCCL_PROXY,
        signals.UCCL_NIC,
        signals.CONTRACT,
        signals.PROGRESS,
        signals.BRIDGE_SKIP,
        ITERATION,
        STEP_TIME,
        MEMORY,
    )
)


def scan_training_run(layout: RunLayout, workers: int = 1) -> RunScan:
    last = layout.last_rank
    dp0 = dp_rank0_ranks(layout.config, layout.world_size)
    requested = signals.config_str(layout.config, "dispatcher")
    uccl_everywhere = requested in (None, "deepep")
    return scan_run(layout, lambda rank: _rank_plan(rank, last, dp0, uccl_everywhere), _job_plan(layout), workers)


def _job_plan(layout: RunLayout) -> tuple[Marker, ...]:
    """JOB_PLAN whose iteration and Step Time lines are folded (scan.Routed): into records during the scan where no
    rank log holds them (the last rank's / rank 0's log is missing), else not kept at all (they are read from the
    rank log, and a job log that repeats them is read again only if that one held none): a job log of every rank's
    10^6 iteration lines holds none of them."""
    last = layout.last_rank
    iterations = None if last is not None and last in layout.rank_logs else _IterationFold()
    steps = None if 0 in layout.rank_logs else _StepFold()
    routes = {ITERATION.name: functools.partial(Routed, iterations, (None, last)),
              STEP_TIME.name: functools.partial(Routed, steps, (None, 0)), signals.CONTRACT.name: RoutingFold}
    return tuple(dataclasses.replace(m, fold=routes[m.name]) if m.name in routes else m for m in JOB_PLAN)


class _IterationFold:
    """The last rank's iteration lines read into records as the scan finds them (scan.Marker.fold): the lines of a
    10^6-iteration log are never all held, only their compact records. Their source is set once the run is known."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records = IterationRecords()

    def add(self, line: LogLine) -> None:
        _add_iteration_line(self.records, line, "")


def _add_iteration_line(records: IterationRecords, line: LogLine, source: str) -> None:
    found = parse_iteration_line(line, source)
    if not found and line.terminated and ("\ufffd" in line.text or "\x00" in line.text):
        # the line names the iteration time but its head was damaged: an iteration lost, not silently
        records.append(IterationRecord(-1, -1, source=source, damaged=(("iteration line", line.text[:120]),)))
    records.extend(found)


RANK_ITERATION = dataclasses.replace(ITERATION, fold=_IterationFold)


class _StepFold:
    """Rank 0's Step Time lines read into :class:`StepTimes` as the scan finds them (one line an iteration)."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps = StepTimes()

    def add(self, line: LogLine) -> None:
        for s in parse_step_time_line(line.text):
            self.steps.append(s)


RANK_STEP_TIME = dataclasses.replace(STEP_TIME, fold=_StepFold)
# every rank prints a MBRIDGE_ROUTING line an iteration: read into compact tables as the scan finds them
RANK_CONTRACT = dataclasses.replace(signals.CONTRACT, fold=RoutingFold)


def _collect_iterations(run: RunScan, problems: list[str]) -> tuple[IterationRecords, str | None]:
    """The last rank's iteration records (read during its scan), else those of the job logs' lines labelled with the
    last rank or with no rank (read during their scan, or now when the last rank's log held none)."""
    last = run.layout.last_rank
    if last is not None and last in run.ranks:
        scan = run.ranks[last]
        fold = scan.folded.get(ITERATION.name)
        if isinstance(fold, _IterationFold):
            fold.records.set_source(run.source(scan))
            if any(i >= 0 for i in fold.records.values("iteration")):
                return fold.records, run.source(scan)
    jobs = job_fold(run, ITERATION.name) or fold_job_logs(run.layout, ITERATION, _IterationFold(), (None, last))
    records = jobs.records
    records.set_source("job logs")
    if any(i >= 0 for i in records.values("iteration")):
        problems.append("iterations_from_job_logs")
        return records, "job logs"
    return IterationRecords(), None


# what a duplicated iteration line may not disagree on (field, words): its numbers, not its timestamp
_DUPLICATE_FIELDS = (
    ("elapsed_ms", "elapsed time per iteration (ms)"), ("lm_loss", "lm loss"), ("losses", "losses"),
    ("tflops_per_gpu", "throughput per GPU (TFLOP/s/GPU)"), ("grad_norm", "grad norm"),
    ("learning_rate", "learning rate"), ("loss_scale", "loss scale"), ("global_batch_size", "global batch size"),
    ("consumed_samples", "consumed samples"), ("train_iters", "total iterations"),
    ("skipped_iterations", "number of skipped iterations"), ("nan_iterations", "number of nan iterations"),
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return all(_same(a[k], b[k]) for k in a.keys() & b.keys())
    return a is None or b is None or a == b  # a value the line did not carry (cut short) contradicts nothing


def _dedupe(records: IterationRecords, problems: list[str], where: str = "") -> tuple[IterationRecords, list[str]]:
    """The records by iteration, sorted, and what their duplicates contradict.

    An iteration logged more than once (a restarted rank, logs concatenated, a line printed twice):

    - with the same numbers (an exact duplicate line; the timestamp may differ): tolerated, one record kept,
      ``duplicate_iterations`` in the problems as a detail;
    - with a different number (elapsed time, loss, throughput, ...): one run did not log both, so the log is no
      measurement. Each such iteration is a message naming the log (``where``), the iteration, the field and both
      values; the caller makes the run ``inconsistent_log`` (no number comes out of it). Which copy is kept does not
      matter then; the last one is.

    A value only one copy carries (a line cut short) contradicts nothing. Records with a negative iteration (lines
    too damaged to read) are left out."""
    first = next(records.values("iteration"), 0)
    if first >= 0 and all(a < b for a, b in itertools.pairwise(records.values("iteration"))):
        return records, []  # each iteration once, in order: the records as they are (no list of 10^6 numbers)
    import heapq

    import numpy as np

    # the iterations sorted (numpy, 16 B a record while it runs; not a dict of 10^6 entries), then each iteration's
    # copies in log order: only an iteration logged more than once is looked at record by record
    iterations = np.fromiter(records.values("iteration"), dtype=np.int64, count=len(records))
    order = np.argsort(iterations, kind="stable")
    order = order[iterations[order] >= 0]
    numbers = iterations[order]
    del iterations
    starts = np.flatnonzero(np.r_[True, numbers[1:] != numbers[:-1]]) if len(numbers) else np.empty(0, np.int64)
    ends = np.r_[starts[1:], len(numbers)]
    del numbers
    kept_at = order[starts]  # the position of the record kept for each iteration, in iteration order
    first: list[tuple[int, str]] = []  # the contradictions of the earliest positions (a max-heap by position)
    total = 0
    for g in np.flatnonzero(ends - starts > 1):
        if "duplicate_iterations" not in problems:
            problems.append("duplicate_iterations")
        kept = int(order[starts[g]])
        for position in order[starts[g] + 1 : ends[g]].tolist():
            before, record = records[kept], records[position]
            differ = [(words, getattr(before, name), getattr(record, name)) for name, words in _DUPLICATE_FIELDS
                      if not _same(getattr(before, name), getattr(record, name))]
            if differ:
                total += 1
                if len(first) < signals.Capped.LISTED or -first[0][0] > position:
                    source = record.source or before.source
                    at = f"{where}/{source}" if where and source and source != "job logs" else (source or where)
                    values = "; ".join(f"{words} {_shown(a)} and {_shown(b)}" for words, a, b in differ[:3])
                    entry = (-position, f"{at}: iteration {record.iteration} is logged twice with different values "
                                        f"({values})")
                    (heapq.heappush if len(first) < signals.Capped.LISTED else heapq.heapreplace)(first, entry)
            if not record.complete and before.complete:
                continue  # keep the whole line over a copy cut short
            kept = position
        kept_at[g] = kept
    contradictions = signals.Capped()  # the first 20 in log order and a count (a log of 10^6 repeated lines)
    for _, message in sorted(first, reverse=True):
        contradictions.append(message)
    contradictions.dropped = total - len(first)
    return IterationRecords(records[int(p)] for p in kept_at), list(contradictions.done())


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    return str(value)


def _contradictions(records: Sequence[IterationRecord], config: Mapping[str, Any]) -> list[str]:
    """What the iteration lines say that cannot be true of one run of this config: an iteration past the total, two
    totals, a global batch size other than the config's, a loss no language model can have (below 0 or far above
    ln(vocab): metrics/loss.py). Such a log was edited, mixed with another run's or damaged; its times are no
    measurement of this config."""
    found = []
    totals = set(field_values(records, "train_iters"))
    if len(totals) > 1:
        found.append(f"iterations of {len(totals)} different totals")
    if any(i > t for i, t in zip(field_values(records, "iteration"), field_values(records, "train_iters"),
                                 strict=True)):
        found.append("an iteration past its total")
    gbs = config_int(config, "gbs")
    logged_gbs = {b for b in field_values(records, "global_batch_size") if b is not None}
    if gbs is not None and logged_gbs and logged_gbs != {gbs}:
        found.append(f"global batch size {sorted(logged_gbs)} where the config says gbs {gbs}")
    vocab = vocab_of(config)
    absurd = [(i, why) for i, loss in zip(field_values(records, "iteration"), field_values(records, "lm_loss"),
                                          strict=True)
              if loss is not None
              for why in [loss_problem(loss, vocab)] if why]
    if absurd:  # a finite loss no language model can have (metrics/loss.py): no verdict rests on this log
        i, why = absurd[0]
        more = f" ({len(absurd)} iterations like it)" if len(absurd) > 1 else ""
        found.append(f"iteration {i}: {why}{more}")
    return found


def field_values(records: Sequence[IterationRecord], name: str) -> Iterator[Any]:
    """One field of every record, one at a time (IterationRecords reads it from its column)."""
    if isinstance(records, IterationRecords):
        return records.values(name)
    return (getattr(r, name) for r in records)


def _column(records: Sequence[IterationRecord], name: str) -> list[Any]:
    """One field of every record (IterationRecords reads it from its column, without building the records)."""
    if isinstance(records, IterationRecords):
        return records.column(name)
    return [getattr(r, name) for r in records]


def warmup_count(iterations: Sequence[int], warmup: int) -> int:
    """How many leading records overlap the first ``warmup`` iterations of the run.

    A record logged at iteration ``i`` averages the ``step`` iterations since the previous log (``log_interval``;
    taken from the first two records, 1 for a single record). The run starts at ``first - step + 1``, which also
    holds for a run resumed from a checkpoint.
    """
    if not iterations or warmup <= 0:
        return 0
    step = iterations[1] - iterations[0] if len(iterations) > 1 else 1
    start = iterations[0] - step + 1
    return sum(1 for i in iterations if i - step + 1 < start + warmup)


def _nan_evidence(records: Sequence[IterationRecord]) -> tuple[list[int], list[int], signals.Capped]:
    nan_iters: list[int] = []
    bad_grad: list[int] = []
    details = signals.Capped()  # the first 20 and a count: every iteration of a diverged run is NaN evidence
    loss_seen = False
    columns = (field_values(records, name)
               for name in ("iteration", "grad_norm", "lm_loss", "nan_iterations", "complete"))
    for iteration, grad_norm, lm_loss, nan_iterations, complete in zip(*columns, strict=True):
        reasons = []
        if grad_norm is not None and not math.isfinite(grad_norm):
            bad_grad.append(iteration)
            reasons.append(f"grad norm {grad_norm}")
        if lm_loss is not None and not math.isfinite(lm_loss):
            reasons.append(f"lm loss {lm_loss}")
        if nan_iterations:
            reasons.append(f"number of nan iterations {nan_iterations}")
        if lm_loss is None and loss_seen and complete:
            reasons.append("lm loss not printed (training_log omits a NaN loss)")
        loss_seen = loss_seen or lm_loss is not None
        if reasons:
            nan_iters.append(iteration)
            details.append(f"iteration {iteration}: " + ", ".join(reasons))
    return nan_iters, bad_grad, details


def _drop_bad_times(
    lost: Sequence[IterationRecord], records: IterationRecords, step_times: StepTimes, problems: list[str]
) -> tuple[IterationRecords, StepTimes, tuple[str, ...]]:
    """A damaged time (negative, zero, nan/inf, absurd) never enters a statistic and makes the run invalid.

    ``lost``: the iteration lines whose head was damaged (see _collect_iterations), each an error; ``records``: the
    iterations read, given back with each bad time (and its throughput) made absent."""
    errors = signals.Capped()  # the first 20 and a count: a log of 10^6 damaged times holds no 10^6 messages
    for r in lost:
        shown = r.damaged[0][1].replace("\ufffd", "?").replace("\x00", "?")
        errors.append(f"an iteration line with damaged bytes ({r.source}): {shown!r}")
    whole = records.whole_positions()  # only a record kept whole can carry damaged bytes
    replaced: dict[int, IterationRecord] = {}
    for position, elapsed_ms in enumerate(records.values("elapsed_ms")):
        if position in whole:
            r = records[position]
            damaged_time = dict(r.damaged).get("elapsed time per iteration (ms)")
            if damaged_time is not None:
                where = f"iteration {r.iteration}" + (f" ({r.source})" if r.source else "")
                shown = damaged_time.replace("\ufffd", "?").replace("\x00", "?")[:40]
                errors.append(f"{where}: elapsed time per iteration (ms) {shown!r} is not a number (damaged bytes)")
        why = None if elapsed_ms is None else iteration_time_problem(elapsed_ms)
        if why is not None:
            r = records[position]
            where = f"iteration {r.iteration}" + (f" ({r.source})" if r.source else "")
            errors.append(f"{where}: elapsed time per iteration (ms) {r.elapsed_ms} is {why}")
            replaced[position] = dataclasses.replace(r, elapsed_ms=None, tflops_per_gpu=None)
    kept = records
    if replaced:
        kept = IterationRecords(replaced.get(i) or records[i] for i in range(len(records)))
    steps = step_times
    n_errors = errors.total
    for i, t in enumerate(step_times.values("step_time_s")):
        why = iteration_time_problem(t * 1000.0)
        if why is not None:
            errors.append(f"Step Time line {i + 1}: {t} s is {why}")
    if errors.total > n_errors:  # the good ones only (a second pass: no list of the bad positions)
        steps = StepTimes(s for s in step_times if iteration_time_problem(s.step_time_s * 1000.0) is None)
    if errors:
        problems.append("bad_iteration_time")
    return kept, steps, errors.done()


def tokens_per_s(record: IterationRecord, gbs: int | None, seq: int | None) -> float | None:
    """gbs x seq_length / iteration time; the line's own global batch size wins (batch-size ramp-up)."""
    return _rate(record.global_batch_size, record.elapsed_ms, gbs, seq)


def _rate(logged_gbs: int | None, elapsed_ms: float | None, gbs: int | None, seq: int | None) -> float | None:
    batch = logged_gbs or gbs
    seconds = None if elapsed_ms is None else elapsed_ms / 1000.0
    if batch is None or seq is None or seconds is None or seconds <= 0:  # 5e-324 ms is 0.0 s: no rate
        return None
    return batch * seq / seconds


def iterations_frame(metrics: TrainingRunMetrics) -> pd.DataFrame:
    """One row per logged iteration; ``steady`` marks the rows the statistics use, ``stall`` the slow ones."""
    return frame(iteration_rows(metrics))


def iterations_csv(metrics: TrainingRunMetrics) -> str:
    """``iterations_frame(metrics).to_csv(index=False)``, the per-test report's CSV, without pandas; one row at a
    time (a 10^6-iteration run's rows are never all held)."""
    return csv_text_of(lambda: _iteration_rows(metrics))


def iterations_csv_chunks(metrics: TrainingRunMetrics) -> Iterator[str]:
    """:func:`iterations_csv` in pieces of about a MiB, for a file written as they come (workloads/reporting.py):
    neither the rows nor the text of a 10^6-iteration run's CSV are ever all held."""
    return csv_chunks_of(lambda: _iteration_rows(metrics))


def iteration_rows(metrics: TrainingRunMetrics) -> list[dict[str, Any]]:
    """The rows of :func:`iterations_frame`, one dict per logged iteration."""
    return list(_iteration_rows(metrics))


def _iteration_rows(metrics: TrainingRunMetrics) -> Iterator[dict[str, Any]]:
    gbs, seq = config_int(metrics.config, "gbs"), config_int(metrics.config, "seq_length")
    steady, stalls = members(metrics.steady_iterations), set(metrics.stall_iterations)
    for r in metrics.iterations:
        yield (
            {
                "iteration": r.iteration,
                "train_iters": r.train_iters,
                "elapsed_ms": r.elapsed_ms,
                "tflops_per_gpu": r.tflops_per_gpu,
                "tokens_per_s": tokens_per_s(r, gbs, seq),
                "lm_loss": r.lm_loss,
                "grad_norm": r.grad_norm,
                "learning_rate": r.learning_rate,
                "global_batch_size": r.global_batch_size,
                "skipped_iterations": r.skipped_iterations,
                "nan_iterations": r.nan_iterations,
                "complete": r.complete,
                "steady": r.iteration in steady,
                "stall": r.iteration in stalls,
                **dict(r.losses),
            }
        )


def _fingerprint(run_dir: Path) -> tuple | None:
    """Names, sizes and modification times of everything a parse reads; None when the folder cannot be listed."""
    try:
        files = [run_dir / "mbridge_config.json", *(run_dir / n for n in ("stdout.txt", "stderr.txt"))]
        logs = run_dir / "logs"
        if logs.is_dir():
            files += sorted(logs.iterdir())
        stats = []
        for f in files:
            try:
                st = f.stat()
            except FileNotFoundError:
                stats.append((f.name, None))
                continue
            stats.append((f.name, st.st_size, st.st_mtime_ns, st.st_ino))
        return (str(run_dir.resolve()), tuple(stats))
    except OSError:
        return None


_PARSED: dict[tuple, TrainingRunMetrics] = {}
_PARSED_MAX = 4096
# What the cache may hold, whatever the number of runs (a sweep of hundreds of long runs): the records a parsed run
# keeps in memory (up to spill.BLOCK a column) summed over the cached runs, and the runs whose records went to a
# temporary file (each holds its file open). Past either, the runs parsed first are let go (parsed again if asked for).
_PARSED_RECORDS = 1 << 20
_PARSED_SPILLED = 16


def parse_training_run(
    run_dir: Path | str, warmup: int = DEFAULT_WARMUP, stall_factor: float = STALL_FACTOR, workers: int = 1
) -> TrainingRunMetrics:
    """Parse one training run folder (see :mod:`.layout`); never raises on bad or missing logs.

    One report generation asks for each run three or four times (per-test report, status, A/B): a run whose files
    are unchanged (same names, sizes, modification times) is parsed once per process."""
    fingerprint = _fingerprint(Path(run_dir))
    key = None if fingerprint is None else (fingerprint, warmup, stall_factor)
    if key is not None and key in _PARSED:
        return _PARSED[key]
    metrics = _parse_training_run(run_dir, warmup, stall_factor, workers)
    if key is not None:
        _PARSED[key] = metrics
        _trim_parsed()
    return metrics


def _trim_parsed() -> None:
    """Let the runs parsed first go until the cache is within :data:`_PARSED_MAX` runs, :data:`_PARSED_RECORDS`
    records in memory and :data:`_PARSED_SPILLED` runs with a temporary file (the newest run always stays)."""
    from . import spill

    def held() -> tuple[int, int]:
        sizes = [len(m.iterations) for m in _PARSED.values()]
        return sum(min(n, spill.BLOCK) for n in sizes), sum(n > spill.BLOCK for n in sizes)

    records, spilled = held()
    while len(_PARSED) > 1 and (len(_PARSED) > _PARSED_MAX or records > _PARSED_RECORDS or spilled > _PARSED_SPILLED):
        n = len(_PARSED.pop(next(iter(_PARSED))).iterations)
        records, spilled = records - min(n, spill.BLOCK), spilled - (n > spill.BLOCK)


def _parse_training_run(run_dir: Path | str, warmup: int, stall_factor: float, workers: int) -> TrainingRunMetrics:
    layout = load_layout(run_dir)
    run = scan_training_run(layout, workers=workers)
    config = layout.config
    problems: list[str] = []
    if not layout.rank_logs and not layout.job_logs:
        problems.append("no_logs")
    if layout.config_status != "ok":
        problems.append("missing_config" if layout.config_status == "missing" else "invalid_config")

    raw, source = _collect_iterations(run, problems)
    # iteration lines too damaged to read: counted below
    lost = [raw[i] for i, iteration in enumerate(raw.values("iteration")) if iteration < 0]
    records, inconsistencies = _dedupe(raw, problems, str(layout.run_dir))
    del raw
    contradictions = _contradictions(records, config)
    if contradictions:
        where = f"{layout.run_dir}/{source}" if source and source != "job logs" else str(layout.run_dir)
        inconsistencies.append(f"{where}: " + "; ".join(contradictions))
    if inconsistencies:
        problems.append("inconsistent_log")
    if not any(ms is not None for ms in records.values("elapsed_ms")):
        problems.append("no_iterations")

    rank0 = run.ranks.get(0)
    folded_steps = rank0.folded.get(STEP_TIME.name) if rank0 else None
    if isinstance(folded_steps, _StepFold):  # read during the scan, the lines never held
        step_times = folded_steps.steps
    elif rank0 is not None:  # rank 0's log could not be read: no Step Time lines
        step_times = StepTimes()
    else:  # no rank 0 log: the job logs' lines of rank 0 or of no rank, read during their scan
        folded_steps = job_fold(run, STEP_TIME.name)
        step_times = folded_steps.steps if isinstance(folded_steps, _StepFold) else StepTimes()
    records, step_times, time_errors = _drop_bad_times(lost, records, step_times, problems)
    memory_lines = [line for s in (*run.ranks.values(), *run.jobs) for line in s.lines(MEMORY.name)]
    memory = sorted(
        {(m.rank, m.after_iterations): m for line in memory_lines for m in parse_memory_line(line)}.values(),
        key=lambda m: (m.rank, m.after_iterations),
    )

    contract_files = [run.ranks[r] for r in (0, layout.last_rank) if r in run.ranks]
    contract_lines = [line for s in contract_files for line in s.lines(signals.CONTRACT.name)]
    contract_lines += [line for job in run.jobs for line in job.lines(signals.CONTRACT.name)]
    bridge_lines = list(rank0.lines(signals.BRIDGE_SKIP.name)) if rank0 else []
    bridge_lines += run.labelled(signals.BRIDGE_SKIP.name, (None, 0))
    dispatcher = signals.dispatcher_report(contract_lines, bridge_lines, signals.config_str(config, "dispatcher"))
    engine = signals.engine_line(contract_lines)
    routing, dispatcher_ms = routing_tables(s.folded.get(signals.CONTRACT.name) for s in (*contract_files, *run.jobs))
    gc_every = signals.gc_interval(contract_lines)

    nan_iters, bad_grad, nan_details = _nan_evidence(records)
    skipped = sum(n or 0 for n in records.values("skipped_iterations"))
    files: list[tuple[int | None, FileScan]] = [*run.ranks.items(), *((None, j) for j in run.jobs)]
    validity = signals.validity_signals(
        files,
        dispatcher,
        world_size=layout.world_size,
        nan_iterations=nan_iters,
        nonfinite_grad_norm_iterations=bad_grad,
        skipped_iterations=skipped,
    )

    named = [(run.source(s), r, s) for r, s in files]
    findings = signals.failure_findings(named, extra_markers=(signals.CONTRACT.name, signals.PROGRESS.name))
    if nan_details:
        findings.append(
            signals.FailureFinding(
                "nan", "; ".join(nan_details)[:300], source or "", layout.last_rank, count=nan_details.total
            )
        )
    if dispatcher.downgraded:
        detail = "; ".join(dispatcher.bridge_warnings) or (
            f"requested {dispatcher.wanted}, built {dispatcher.built} backend {dispatcher.backend}"
        )
        findings.append(signals.FailureFinding("dispatcher_downgrade", detail[:300], "rank 0 / last rank", 0))
    last_iteration = records[-1] if records else None
    complete = last_iteration is not None and last_iteration.iteration >= last_iteration.train_iters
    if not findings and not complete:  # no failure line, yet unfinished: where the payload's stage lines stop
        stopped = signals.log_stops(named, last_iteration.iteration if last_iteration is not None else None)
        if stopped is not None:
            findings.append(stopped)
    failure = signals.failure_report(findings, complete=complete)
    if failure.status == "failed":
        problems.append("failed")
    if records and not complete:
        problems.append("incomplete")

    if layout.missing_ranks:
        problems.append("missing_rank_log")
    truncated = tuple(run.source(s) for s in (*run.ranks.values(), *run.jobs) if s.truncated)
    if truncated:
        problems.append("truncated")
    if any(s.status == "unreadable" for s in (*run.ranks.values(), *run.jobs)):
        problems.append("unreadable_log")
    if any(s.status == "empty" for s in run.ranks.values()):
        problems.append("empty_rank_log")

    # The statistics read the columns one at a time, each list let go before the next: no 10^6 records, and never
    # several 10^6-long lists of number objects held together.
    iterations = records.iteration_numbers()
    n_warm = warmup_count(iterations, warmup)
    steady = iterations[n_warm:]  # the steady iterations' numbers (the columns, not 10^6 records)
    del iterations
    iteration_time = steady_state(records.values("elapsed_ms"), n_warm, stall_factor)
    if iteration_time.n == 0 and "no_iterations" not in problems:
        problems.append("no_steady_state")
    elapsed_steady = itertools.islice(records.values("elapsed_ms"), n_warm, None)
    stall_at = set(iteration_time.stall_positions)
    timed = (i for i, ms in zip(steady, elapsed_steady, strict=True) if ms is not None and math.isfinite(ms))
    stalls = tuple(i for p, i in enumerate(timed) if p in stall_at)
    gc_its = tuple(i for i in steady if gc_every and i > 1 and (i - 1) % gc_every == 0)
    gc_set = set(gc_its)
    elapsed_steady = itertools.islice(records.values("elapsed_ms"), n_warm, None)
    no_gc = steady_state((ms for i, ms in zip(steady, elapsed_steady, strict=True) if i not in gc_set), 0,
                         stall_factor)
    tflops = steady_state(records.values("tflops_per_gpu"), n_warm, stall_factor)
    gbs, seq = config_int(config, "gbs"), config_int(config, "seq_length")
    if records and seq is None:
        problems.append("missing_seq_length")
    step_warm = n_warm if records else warmup

    # Without the last rank's log the iterations were never readable: that is the cause to report.
    promote = ("missing_rank_log", "no_iterations") if layout.last_rank in layout.missing_ranks else None
    status, problems_out = signals.order_problems(problems, STATUS_ORDER, promote)
    return TrainingRunMetrics(
        run_dir=layout.run_dir,
        status=status,
        problems=problems_out,
        config=config,
        world_size=layout.world_size,
        last_rank=layout.last_rank,
        missing_ranks=layout.missing_ranks,
        truncated_files=truncated,
        iteration_source=source,
        iterations=records,
        step_times=step_times,
        memory=tuple(memory),
        warmup=warmup,
        steady_iterations=steady,
        stall_iterations=stalls,
        iteration_time_ms=iteration_time,
        tflops_per_gpu=tflops,
        tokens_per_s=steady_state((_rate(b, ms, gbs, seq) for b, ms in zip(records.values("global_batch_size"),
                                                                            records.values("elapsed_ms"), strict=True)),
                                  n_warm, stall_factor),
        step_time_s=steady_state(step_times.values("step_time_s"), step_warm, stall_factor),
        step_tflops_per_gpu=steady_state(step_times.values("tflops_per_gpu"), step_warm, stall_factor),
        validity=validity,
        failure=failure,
        engine_requested=engine.get("requested"),
        engine_selected=engine.get("selected"),
        time_errors=time_errors,
        inconsistencies=tuple(inconsistencies),
        routing=routing,
        dispatcher_ms=dispatcher_ms,
        gc_interval=gc_every,
        gc_iterations=gc_its,
        iteration_time_ms_no_gc=no_gc,
    )


def run_title(config: Mapping[str, Any]) -> str:
    """What one training point is, in words: model, precision, dispatcher, parallelism, batch, GPUs."""
    model = config.get("model")
    name = model.get("name") if isinstance(model, Mapping) else model
    parallel = " ".join(
        f"{k.upper()}{config[k]}" for k in ("tp", "pp", "vp", "cp", "ep", "etp") if config.get(k) not in (None, 1)
    )
    gpus = config.get("world_size")
    parts = [
        f"{name} {config.get('precision', '')}".strip(),
        str(config.get("dispatcher") or ""),
        parallel or "no model parallelism",
        f"mbs {config.get('mbs')} gbs {config.get('gbs')} seq {config.get('seq_length')}",
        f"{gpus} x {config.get('gpu')}" if gpus else str(config.get("gpu") or ""),
    ]
    return ", ".join(p for p in parts if p)
