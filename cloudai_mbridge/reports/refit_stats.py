"""The refit statistics that a GPU host needs without CloudAI: the two-path comparison of executor "both"
(Megatron-Core's service vs ours, each against the same run's exchange ceiling) and the bootstrap interval of a ratio
of medians. ``benchmarks/gpu_refit_nccl.py`` derives its verdict line from here on a host where only the payload's
stack is installed; the refit page (``refit_table``, which needs CloudAI) reads the same functions."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

MIN_N = 3  # timed refits per mapping below which no comparison is ranked
RESAMPLES = 2000
SEED = 20261129
NOT_DISTINGUISHABLE = "not distinguishable"
OURS_FASTER = "ours faster"
MEGATRON_FASTER = "Megatron-Core's faster"


def _finite_times(values: Any) -> list[float]:
    if not isinstance(values, list):
        return []
    return [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0]


def compare_paths(compare: Any) -> dict[str, Any]:
    """Executor "both" (REFIT_RESULT["compare"] of a verified run): Megatron-Core's service and ours side by side,
    each as % of the same run's exchange ceiling (ceiling median / path median x 100: the same bytes), with n, and
    the speed-up median(Megatron-Core's) / median(ours) with its 95 % bootstrap interval (:func:`ratio_interval`);
    "not distinguishable" when the interval holds 1 or a side has fewer than ``MIN_N`` timed refits. Empty for
    other runs."""
    if not isinstance(compare, Mapping):
        return {}
    theirs = _finite_times((compare.get("megatron") or {}).get("times_ms"))
    ours = _finite_times((compare.get("ours") or {}).get("times_ms"))
    ceiling = compare.get("ceiling") if isinstance(compare.get("ceiling"), Mapping) else {}
    ceil = _finite_times([ceiling.get("median_ms")])
    out: dict[str, Any] = {"megatron_median_ms": _median(theirs) if theirs else None, "megatron_n": len(theirs),
                           "ours_median_ms": _median(ours) if ours else None, "ours_n": len(ours),
                           "ceiling_median_ms": ceil[0] if ceil else None,
                           "ceiling_n": len(_finite_times(ceiling.get("times_ms")))}
    for path in ("megatron", "ours"):
        med = out[f"{path}_median_ms"]
        out[f"{path}_pct_of_ceiling"] = ceil[0] / med * 100 if ceil and med else None
    got = ratio_interval(ours, theirs)
    if got is None:
        out.update(speedup=None, speedup_ci95=None, speedup_verdict=NOT_DISTINGUISHABLE)
        return out
    change, lo, hi = (1 + x / 100 for x in got)
    if lo <= 1.0 <= hi or min(len(ours), len(theirs)) < MIN_N:
        verdict = NOT_DISTINGUISHABLE
    else:
        verdict = OURS_FASTER if lo > 1.0 else MEGATRON_FASTER
    out.update(speedup=change, speedup_ci95=(lo, hi), speedup_verdict=verdict)
    return out


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def ratio_interval(fast: Sequence[float], slow: Sequence[float], resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float, float] | None:
    """(change %, 2.5th, 97.5th percentile) of (median(slow) / median(fast) - 1) x 100 under a bootstrap of each
    side's values (drawn with replacement, independently); None when a side has no finite positive value."""
    a = [v for v in fast if math.isfinite(v) and v > 0]
    b = [v for v in slow if math.isfinite(v) and v > 0]
    if not a or not b:
        return None
    rng = random.Random(seed)
    draws = sorted(
        (_median([b[rng.randrange(len(b))] for _ in b]) / _median([a[rng.randrange(len(a))] for _ in a]) - 1.0) * 100
        for _ in range(resamples)
    )
    lo, hi = draws[int(0.025 * (resamples - 1))], draws[math.ceil(0.975 * (resamples - 1))]
    return (_median(b) / _median(a) - 1.0) * 100.0, lo, hi
