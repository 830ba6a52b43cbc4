"""Steady-state statistics and the loss-curve work-equivalence check; plain numbers in, plain numbers out."""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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

    @property
    def n_stalls(self) -> int:
        return len(self.stall_positions)

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


def steady_state(values: Iterable[float | None], warmup: int = 4, stall_factor: float = STALL_FACTOR) -> Stats:
    """Drop the first ``warmup`` values, then summarise the rest (see :class:`Stats`)."""
    if warmup < 0:
        raise ValueError(f"warmup={warmup} must be >= 0")
    # One pass, the kept values in an array('d') (8 B each, not a list of float objects: a 10^6-iteration log's
    # series costs 8 MB, not 32).
    finite = array("d")
    n_seen = 0
    for v in values:
        n_seen += 1
        if n_seen > warmup and v is not None and math.isfinite(v):
            finite.append(v)
    n_warmup = min(n_seen, warmup)
    n_invalid = n_seen - n_warmup - len(finite)
    if not finite:
        return Stats(n=0, n_warmup=n_warmup, n_invalid=n_invalid)
    ordered = _sorted(finite)
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
