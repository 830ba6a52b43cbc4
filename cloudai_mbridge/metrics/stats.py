"""Steady-state statistics and the loss-curve work-equivalence check; plain numbers in, plain numbers out."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

STALL_FACTOR = 3.0
# No training or refit iteration takes 11.6 days: a larger logged time is a damaged line, not a measurement.
MAX_ITERATION_MS = 1e9


def iteration_time_problem(ms: float) -> str | None:
    """Why a logged iteration time (ms) is not a measurement, or None when it is one."""
    if math.isnan(ms):
        return "not a number"
    if math.isinf(ms):
        return "infinite"
    if ms < 0.0:
        return "negative"
    if ms == 0.0:
        return "zero"
    if ms > MAX_ITERATION_MS:
        return f"above {MAX_ITERATION_MS:.0e} ms"
    return None


@dataclass(frozen=True)
class Stats:
    """Summary of a steady-state series.

    ``n`` counts the finite values kept after the warm-up; ``n_warmup`` those dropped as warm-up and ``n_invalid``
    the non-finite ones (NaN/inf) found after the warm-up, which never enter a statistic. A stall is a value above
    ``stall_factor`` times the median; stalls stay in the mean (they are real time spent) and are reported apart.
    """

    n: int
    n_warmup: int = 0
    n_invalid: int = 0
    mean: float | None = None
    median: float | None = None
    p10: float | None = None
    p90: float | None = None
    min: float | None = None
    max: float | None = None
    stdev: float | None = None
    stall_threshold: float | None = None
    stall_positions: tuple[int, ...] = ()
    # 1: every kept value is in every statistic. k > 1 (a series longer than SAMPLE_CAP): n, mean, min, max and stdev
    # are still of every value (streamed), median, p10, p90 and the stalls of a 1-in-k systematic sample of them
    # (``n_sampled`` values; ``stall_positions`` are positions in the whole series).
    sample_stride: int = 1
    n_sampled: int | None = None

    @property
    def n_stalls(self) -> int:
        return len(self.stall_positions)

    @property
    def sampled(self) -> bool:
        return self.sample_stride > 1

    @property
    def sample_note(self) -> str | None:
        """What a reader of a sampled statistic must be told (None when nothing was sampled)."""
        if not self.sampled:
            return None
        return (f"median, p10, p90 and stalls from a 1-in-{self.sample_stride} sample ({self.n_sampled:,} values) of "
                f"{self.n:,}; n, mean, min, max and stdev of all {self.n:,}")

    @property
    def spread(self) -> float | None:
        """(p90 - p10) / median: a unit-free width of the distribution."""
        if self.median in (None, 0.0) or self.p10 is None or self.p90 is None:
            return None
        return (self.p90 - self.p10) / self.median


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method); ``sorted_values`` must be sorted."""
    if not sorted_values:
        raise ValueError("percentile of an empty series")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside [0, 100]")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# Up to this many values sort as Python floats; more sort in place in a copy of the array with numpy's stable sort
# (the same order, -0.0 and 0.0 included: both keep equal values as they came), 8 B a value instead of 32.
SORT_IN_PYTHON = 1 << 16


def _sorted(values: array) -> Sequence[float]:
    if len(values) <= SORT_IN_PYTHON:
        return sorted(values)
    import numpy

    ordered = array("d", values)
    view = numpy.frombuffer(ordered, dtype=numpy.float64)
    view.sort(kind="stable")
    del view  # the array can be let go (or grown) again
    return ordered


# A series with no cap (the training parse's: its stall flags must be of every iteration) longer than this is kept in a
# spilled array, and its median, p10, p90, min and max are selected exactly from it in four passes (:class:`_Selected`)
# instead of sorted in a copy: 16 B a value in memory while the statistics run -> a few blocks whatever the length.
SPILL_AT = 1 << 16


class _Selected:
    """The few positions of a sorted series that :func:`steady_state` reads (min, max and the two neighbours of each
    percentile), each the value numpy's stable sort would put there, selected by a radix select over the values' order
    keys, 16 bits a pass, every chunk counted with numpy: the same numbers as :func:`_sorted`, -0.0 and 0.0 included
    (equal in the order; the one at a position is the one that came first, as a stable sort leaves them)."""

    QUANTILES = (10.0, 50.0, 90.0)

    def __init__(self, values: Any) -> None:
        self.values, self.n = values, len(values)
        wanted = {0, self.n - 1}
        for q in self.QUANTILES:
            lo = math.floor((self.n - 1) * q / 100.0)
            wanted |= {lo, min(lo + 1, self.n - 1)}
        self.at = self._select(sorted(wanted))

    def __len__(self) -> int:
        return self.n

    def __bool__(self) -> bool:
        return self.n > 0

    def __getitem__(self, index: int) -> float:
        return self.at[index % self.n]

    @staticmethod
    def _keys(np: Any, chunk: Any) -> Any:
        """Unsigned keys in the values' order (-0.0 made 0.0 first: equal, as the sort compares them)."""
        u = (np.frombuffer(chunk, dtype=np.float64) + 0.0).view(np.uint64)
        return np.where(u >> np.uint64(63), ~u, u | np.uint64(1 << 63))

    def _select(self, ranks: list[int]) -> dict[int, float]:
        import numpy as np

        state = {r: (0, 0) for r in ranks}  # rank -> (the key's bits chosen so far, how many values are below them)
        for level in range(4):
            shift = np.uint64(48 - 16 * level)
            hist: dict[int, Any] = {prefix: np.zeros(1 << 16, np.int64) for prefix, _ in state.values()}
            for chunk in self.values.chunks():
                if not len(chunk):
                    continue
                keys = self._keys(np, chunk)
                top = keys >> np.uint64(64 - 16 * level) if level else None
                for prefix, counts in hist.items():
                    part = keys if top is None else keys[top == np.uint64(prefix)]
                    counts += np.bincount(((part >> shift) & np.uint64(0xFFFF)).astype(np.int64), minlength=1 << 16)
            for r, (prefix, below) in state.items():
                cumulative = np.cumsum(hist[prefix])
                digit = int(np.searchsorted(cumulative, r - below, side="right"))
                state[r] = ((prefix << 16) | digit, below + (int(cumulative[digit - 1]) if digit else 0))
        out = {}
        for r, (key, below) in state.items():
            bits = key & ~(1 << 63) if key >> 63 else ~key & ((1 << 64) - 1)
            value = float(np.array([bits], dtype=np.uint64).view(np.float64)[0])
            out[r] = self._zero(r - below) if value == 0.0 else value
        return out

    def _zero(self, k: int) -> float:
        """The ``k``-th zero of the series in its order (0.0 or -0.0: what a stable sort puts at that position)."""
        for v in self.values:
            if v == 0.0:
                if k == 0:
                    return v
                k -= 1
        return 0.0


# The most values of one series an order statistic (median, percentiles, stalls) or a plot is computed from: 2^16.
# Up to it a log's numbers are exactly what they were before logs were sampled (every value kept, 8-16 B each: at most
# ~1 MiB a series); a longer series keeps a 1-in-2^k systematic sample of at most this many (:class:`SystematicSample`)
# and streams its count, sum, min, max and stdev exactly, so memory no longer grows with the log. 2^16 covers any
# normal run's log (Bridge logs every iteration: 65,536 iterations are 18 h at 1 s each; the refit benchmark times
# 10-1000 refits), and a median from 2^15..2^16 systematic values is within ~0.5 % of sigma of the whole series'.
SAMPLE_CAP = 1 << 16


class SystematicSample:
    """Every ``stride``-th row of a stream (positions 0, stride, 2 x stride, ...), at most ``cap`` rows: when the cap
    is reached, every other kept row is dropped and the stride doubles (1-in-2^k, deterministic: the same log gives
    the same sample). Each row is one value per column (``typecodes``: the ``array`` types)."""

    __slots__ = ("cap", "columns", "seen", "stride")

    def __init__(self, typecodes: str = "d", cap: int = SAMPLE_CAP) -> None:
        if cap < 2 or cap % 2:
            raise ValueError(f"cap={cap} must be an even number >= 2")
        self.cap, self.stride, self.seen = cap, 1, 0
        self.columns = tuple(array(t) for t in typecodes)

    def add(self, *row: Any) -> None:
        seen = self.seen
        self.seen = seen + 1
        if seen % self.stride:
            return
        if len(self.columns[0]) >= self.cap:
            self.columns = tuple(column[::2] for column in self.columns)
            self.stride *= 2
            if seen % self.stride:
                return
        for column, value in zip(self.columns, row, strict=True):
            column.append(value)

    def __len__(self) -> int:
        return len(self.columns[0])


def _add_partial(partials: list[float], x: float) -> None:
    """Shewchuk's exact running sum (the partials ``math.fsum`` keeps): ``math.fsum(partials)`` is the correctly
    rounded sum of every value added, as ``math.fsum`` of them all would be."""
    i = 0
    for y in partials:
        if abs(x) < abs(y):
            x, y = y, x
        hi = x + y
        lo = y - (hi - x)
        if lo:
            partials[i] = lo
            i += 1
        x = hi
    partials[i:] = [x]


class StreamedSeries:
    """A series summarised as it comes, in memory that does not grow with it: exact count, sum (Shewchuk partials,
    so the mean is ``math.fsum``'s), min and max, Welford's stdev, and a :class:`SystematicSample` of at most ``cap``
    rows for the order statistics. A row is the value and, optionally, more columns (``typecodes[1:]``: e.g. the
    iteration each value belongs to)."""

    __slots__ = ("count", "hi", "lo", "m2", "partials", "running", "sample")

    def __init__(self, typecodes: str = "d", cap: int = SAMPLE_CAP) -> None:
        self.sample = SystematicSample(typecodes, cap)
        self.partials: list[float] = []
        self.count, self.running, self.m2 = 0, 0.0, 0.0
        self.lo = self.hi = math.nan

    def add(self, v: float, *more: Any) -> None:
        """A finite value (and its row's other columns)."""
        self.sample.add(v, *more)
        _add_partial(self.partials, v)
        self.count = count = self.count + 1
        delta = v - self.running
        self.running += delta / count
        self.m2 += delta * (v - self.running)
        if count == 1:
            self.lo = self.hi = v
        elif v < self.lo:
            self.lo = v
        elif v > self.hi:
            self.hi = v

    @property
    def mean(self) -> float:
        """The mean of every value added (``math.fsum``'s sum over the count; at least one value)."""
        try:
            return math.fsum(self.partials) / self.count
        except OverflowError:  # values near float max: Welford's running mean stays finite
            return self.running

    def stats(self, n_warmup: int = 0, n_invalid: int = 0, stall_factor: float = STALL_FACTOR) -> Stats:
        """The :class:`Stats` of the values added (sampled order statistics once more than ``cap`` came)."""
        if not self.count:
            return Stats(n=0, n_warmup=n_warmup, n_invalid=n_invalid)
        kept = self.sample.columns[0]
        ordered = _sorted(kept)
        median = percentile(ordered, 50.0)
        threshold = stall_factor * median
        mean = self.mean
        stdev = 0.0
        if self.count > 1:
            stdev = math.sqrt(self.m2 / (self.count - 1)) if math.isfinite(self.m2) else math.inf
        stride = self.sample.stride
        return Stats(
            n=self.count,
            n_warmup=n_warmup,
            n_invalid=n_invalid,
            mean=mean,
            median=median,
            p10=percentile(ordered, 10.0),
            p90=percentile(ordered, 90.0),
            min=self.lo,
            max=self.hi,
            stdev=stdev,
            stall_threshold=threshold,
            stall_positions=tuple(i * stride for i, v in enumerate(kept) if v > threshold),
            sample_stride=stride,
            n_sampled=len(kept) if stride > 1 else None,
        )


def steady_state(values: Iterable[float | None], warmup: int = 4, stall_factor: float = STALL_FACTOR,
                 cap: int | None = None) -> Stats:
    """Drop the first ``warmup`` values, then summarise the rest (see :class:`Stats`).

    Up to ``cap`` kept values (None: no cap), every statistic is of all of them; beyond, memory stays ``cap`` values:
    the order statistics come from a systematic sample (:attr:`Stats.sample_stride`, :attr:`Stats.sample_note`). The
    training parse passes none: it still holds every record, and its stall flags (the CSV's ``stall``) must be of
    every iteration until that path streams too (issue 46)."""
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    # One pass, the kept values in an array('d') (8 B each, not a list of float objects), at most ``cap`` of them;
    # with no cap, past SPILL_AT values they go on in a spilled array (metrics/spill.py: a block in memory, the rest
    # in a temporary file) and the order statistics are selected from it (:class:`_Selected`), not sorted in memory.
    finite: Any = array("d")
    n_seen = 0
    values = iter(values)
    for v in values:
        n_seen += 1
        if n_seen > warmup and v is not None and math.isfinite(v):
            finite.append(v)
            if cap is not None and len(finite) > cap:
                return _streamed(finite, values, n_seen, warmup, stall_factor, cap)
            if cap is None and len(finite) == SPILL_AT:
                from .spill import SpilledArray

                finite = SpilledArray("d", finite)
    n_warmup = min(n_seen, warmup)
    n_invalid = n_seen - n_warmup - len(finite)
    if not finite:
        return Stats(n=0, n_warmup=n_warmup, n_invalid=n_invalid)
    ordered = _sorted(finite) if isinstance(finite, array) else _Selected(finite)
    median = percentile(ordered, 50.0)
    try:
        mean = math.fsum(finite) / len(finite)
    except OverflowError:  # finite values near float max: divided first, the mean stays finite
        mean = math.fsum(v / len(finite) for v in finite)
    stdev = 0.0
    if len(finite) > 1:
        try:
            stdev = math.sqrt(math.fsum((v - mean) ** 2 for v in finite) / (len(finite) - 1))
        except OverflowError:
            stdev = math.inf
    threshold = stall_factor * median
    stalls = tuple(i for i, v in enumerate(finite) if v > threshold)
    return Stats(
        n=len(finite),
        n_warmup=n_warmup,
        n_invalid=n_invalid,
        mean=mean,
        median=median,
        p10=percentile(ordered, 10.0),
        p90=percentile(ordered, 90.0),
        min=ordered[0],
        max=ordered[-1],
        stdev=stdev,
        stall_threshold=threshold,
        stall_positions=stalls,
    )


def _streamed(finite: array, values: Iterator[float | None], n_seen: int, warmup: int, stall_factor: float,
              cap: int) -> Stats:
    """:func:`steady_state` of a series longer than ``cap``: its first ``cap + 1`` finite values (``finite``) and the
    rest of the series (``values``) through a :class:`StreamedSeries`."""
    series = StreamedSeries("d", cap)
    for v in finite:
        series.add(v)
    del finite[:]
    for v in values:
        n_seen += 1
        if n_seen > warmup and v is not None and math.isfinite(v):
            series.add(v)
    n_warmup = min(n_seen, warmup)
    return series.stats(n_warmup, n_seen - n_warmup - series.count, stall_factor)


def loss_equivalence(
    loss_a: Mapping[int, float] | Sequence[float],
    loss_b: Mapping[int, float] | Sequence[float],
    first_k: int | None = None,
) -> tuple[float, int]:
    """Largest relative difference |a - b| / max(|a|, |b|) over the first ``first_k`` comparable iterations.

    Mappings (iteration -> loss) are aligned on the iterations both have; sequences by position. Returns
    ``(max_rel_diff, n_compared)``; ``(nan, 0)`` when nothing is comparable and ``(inf, n)`` when a loss is not
    finite, so ``rel <= tolerance`` is only ever true for real agreement. The A/B in the seed held <= 4.1e-4.
    """
    if isinstance(loss_a, Mapping) != isinstance(loss_b, Mapping):
        raise TypeError("loss_equivalence needs two mappings (iteration -> loss) or two sequences, not one of each")
    if isinstance(loss_a, Mapping) and isinstance(loss_b, Mapping):
        common = sorted(set(loss_a) & set(loss_b))
        pairs = [(loss_a[i], loss_b[i]) for i in common]
    else:
        pairs = list(zip(loss_a, loss_b, strict=False))  # the common prefix of two runs
    if first_k is not None:
        if first_k < 1:
            raise ValueError(f"first_k={first_k} must be >= 1")
        pairs = pairs[:first_k]
    if not pairs:
        return math.nan, 0
    worst = 0.0
    for a, b in pairs:
        if not (math.isfinite(a) and math.isfinite(b)):
            return math.inf, len(pairs)
        scale = max(abs(a), abs(b))
        if scale > 0.0:
            worst = max(worst, abs(a - b) / scale)
    return worst, len(pairs)
