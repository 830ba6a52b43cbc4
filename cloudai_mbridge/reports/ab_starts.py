"""The A/B over repeated process starts: what ``reports/ab.py`` uses when an arm of a cell ran more than once.

One run per arm measures the noise inside a run; a dispatcher A/B on real hosts moves more between starts (the same
alltoall configuration gave 608-744 ms medians over six starts on one 4 x H100 host, 2026-11-27). With several starts:

- **time of an arm**: the mean over its starts of each start's steady-state mean, the iterations that carry Bridge's
  manual garbage collection left out where the run said its period (``MBRIDGE_GC``; they are reported apart);
- **delta**: (arm - baseline) / baseline x 100 of those;
- **95 % interval**: a two-level bootstrap (starts drawn with replacement within each arm, then iterations with
  replacement within each drawn start; :data:`RESAMPLES` draws, fixed seed, percentile interval). With one start on
  a side only that side's iteration noise enters: the interval is then narrower than the truth, and says so;
- **one machine**: every run of the cell recorded the same machine (``machine`` in ``MBRIDGE_VERSIONS``: a digest of
  its GPUs' UUIDs), where recorded; starts from two hosts make the cell invalid;
- **same routing**: every run of the cell (both arms, every start) carries the same ``MBRIDGE_ROUTING`` hash at every
  (rank, iteration) they share; a dispatcher must not change which expert a token goes to;
- **same work**: every start of the arm has its lm loss inside the baseline starts' envelope at every shared iteration
  up to the baseline's reproducible horizon (the envelope [min, max] over the baseline starts, widened on each side by
  its own width, at least ``rtol`` of the loss). The baseline repeated against itself is the yardstick, since bf16
  training with atomics is not bitwise repeatable: the horizon is the last iteration up to which each baseline start
  lies inside the others' envelope. Past it the baseline starts no longer reproduce one another (on 4 x H100,
  2026-11-27, three alltoall starts of the DeepSeek-V3 proxy agreed to 4 decimals up to iteration 12, then spread
  5.75-6.73 by iteration 19 as the run's grad norm grew past 30), so a gate there would reject the baseline against
  itself; the detail names the horizon.
"""

from __future__ import annotations

import math
import random
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

RESAMPLES = 2000
NOT_REPEATABLE = "do not reproduce one another"
SEED = 20261127


def start_times(iterations: Iterable[tuple[int, float | None]], steady: Container[int], gc: set[int]) -> list[float]:
    """A start's steady-state iteration times (ms) without the garbage-collection iterations."""
    return [t for i, t in iterations if i in steady and i not in gc and t is not None and math.isfinite(t)]


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def arm_time(starts: Sequence[Sequence[float]]) -> float | None:
    """Mean over starts of each start's mean (each start weighs the same)."""
    means = [_mean(s) for s in starts if s]
    return _mean(means) if means else None


def bootstrap_delta(base: Sequence[Sequence[float]], arm: Sequence[Sequence[float]], resamples: int = RESAMPLES,
                    seed: int = SEED) -> tuple[float, float, float] | None:
    """(delta %, 2.5th percentile, 97.5th percentile) of (arm - base) / base x 100 under the two-level bootstrap;
    None when a side has no iteration."""
    base = [list(s) for s in base if s]
    arm = [list(s) for s in arm if s]
    b, a = arm_time(base), arm_time(arm)
    if b is None or a is None or b == 0.0:
        return None
    rng = random.Random(seed)

    def draw(starts: list[list[float]]) -> float:
        picked = [starts[rng.randrange(len(starts))] for _ in starts]
        return _mean([_mean([s[rng.randrange(len(s))] for _ in s]) for s in picked])

    deltas = []
    for _ in range(resamples):
        bb = draw(base)
        deltas.append((draw(arm) - bb) / bb * 100.0)
    deltas.sort()
    lo = deltas[int(0.025 * (resamples - 1))]
    hi = deltas[math.ceil(0.975 * (resamples - 1))]
    return (a - b) / b * 100.0, lo, hi


SPLIT = ("dispatch", "combine", "rest")


def bootstrap_split(base: Sequence[Sequence[tuple[float, float, float]]],
                    arm: Sequence[Sequence[tuple[float, float, float]]], resamples: int = RESAMPLES,
                    seed: int = SEED) -> dict[str, tuple[float, float, float]] | None:
    """Where an arm's change in iteration time went: each start a list of per-iteration (iteration ms, dispatch ms,
    combine ms); the rest = iteration - dispatch - combine. For each of dispatch, combine and the rest: (change as %
    of the baseline's iteration time, 2.5th, 97.5th percentile) under the two-level bootstrap of
    :func:`bootstrap_delta` (starts with replacement, then iterations with replacement within each start; an
    iteration's three numbers are drawn together). The three changes add up to the arm's delta. None when a side has
    no iteration."""
    def rows(starts: Sequence[Sequence[tuple[float, float, float]]]) -> list[list[tuple[float, ...]]]:
        return [[(t, d, c, t - d - c) for t, d, c in s] for s in starts if s]

    base_rows, arm_rows = rows(base), rows(arm)
    if not base_rows or not arm_rows:
        return None

    def mean_vec(starts: list[list[tuple[float, ...]]]) -> list[float]:
        per_start = [[_mean([it[k] for it in s]) for k in range(4)] for s in starts]
        return [_mean([v[k] for v in per_start]) for k in range(4)]

    b, a = mean_vec(base_rows), mean_vec(arm_rows)
    if b[0] == 0.0:
        return None
    rng = random.Random(seed)

    def draw(starts: list[list[tuple[float, ...]]]) -> list[float]:
        picked = [starts[rng.randrange(len(starts))] for _ in starts]
        return mean_vec([[s[rng.randrange(len(s))] for _ in s] for s in picked])

    draws: list[list[float]] = [[], [], []]
    for _ in range(resamples):
        bb, aa = draw(base_rows), draw(arm_rows)
        for k in range(3):
            draws[k].append((aa[k + 1] - bb[k + 1]) / bb[0] * 100.0)
    out = {}
    for k, name in enumerate(SPLIT):
        d = sorted(draws[k])
        out[name] = ((a[k + 1] - b[k + 1]) / b[0] * 100.0, d[int(0.025 * (resamples - 1))],
                     d[math.ceil(0.975 * (resamples - 1))])
    return out


def bootstrap_mean(starts: Sequence[Sequence[float]], resamples: int = RESAMPLES,
                   seed: int = SEED) -> tuple[float, float] | None:
    """95 % percentile interval of an arm's time (mean of start means) under the same two-level bootstrap."""
    starts = [list(s) for s in starts if s]
    if not starts:
        return None
    rng = random.Random(seed)
    draws = sorted(
        _mean([_mean([s[rng.randrange(len(s))] for _ in s]) for s in (starts[rng.randrange(len(starts))]
                                                                       for _ in starts)])
        for _ in range(resamples)
    )
    return draws[int(0.025 * (resamples - 1))], draws[math.ceil(0.975 * (resamples - 1))]


@dataclass(frozen=True)
class Gate:
    state: str  # "pass" | "fail" | "unknown"
    detail: str


def same_routing(runs: Sequence[tuple[str, Mapping[tuple[int, int], str]]]) -> Gate:
    """Every run's routing hashes agree on the (rank, iteration) keys they share; ``runs``: (name, hashes)."""
    recorded = [(name, h) for name, h in runs if h]
    missing = [name for name, h in runs if not h]
    if len(recorded) < 2:
        return Gate("unknown", "routing not recorded" + (f" ({', '.join(missing)})" if missing else ""))
    ref_name, ref = recorded[0]
    compared = set(ref)
    for name, hashes in recorded[1:]:
        common = set(ref) & set(hashes)
        compared &= set(hashes)
        diff = sorted(k for k in common if ref[k] != hashes[k])
        if diff:
            rank, it = diff[0]
            return Gate("fail", f"routing differs: {name} vs {ref_name} at rank {rank} iteration {it} "
                                f"({len(diff)} of {len(common)} hashes)")
    note = f"; not recorded in {', '.join(missing)}" if missing else ""
    if not compared:
        return Gate("unknown", "routing hashes share no (rank, iteration)" + note)
    return Gate("pass" if not missing else "unknown",
                f"same routing in {len(recorded)} runs ({len(compared)} (rank, iteration) hashes each){note}")


def same_machine(runs: Sequence[tuple[str, str | None]]) -> Gate:
    """Every run of the cell ran on the same GPUs; ``runs``: (name, the machine its rank 0 recorded, a digest of its
    GPUs' UUIDs, or None for a log from before the payload recorded it). Host to host is about 8 % on 4 x H100
    (2026-11-27): starts pooled from two hosts measure the hosts."""
    recorded = [(name, ids) for name, ids in runs if ids]
    machines: dict[str, list[str]] = {}
    for name, ids in recorded:
        machines.setdefault(ids, []).append(name)
    if len(machines) > 1:
        (first, a), (second, b) = list(machines.items())[:2]
        return Gate("fail", f"runs from {len(machines)} machines: {a[0]} on {first}, {b[0]} on {second}; a cell "
                            "pools the starts of one machine only")
    if not recorded:
        return Gate("unknown", "machine not recorded")
    missing = len(runs) - len(recorded)
    return Gate("pass" if not missing else "unknown",
                f"one machine ({len(recorded)} runs)" + (f"; not recorded in {missing}" if missing else ""))


def _inside(x: float, values: Sequence[float], rtol: float) -> tuple[bool, float, float]:
    """Whether ``x`` lies in [min, max] of ``values`` widened on each side by its own width (at least ``rtol`` of the
    loss); also the widened bounds."""
    lo, hi = min(values), max(values)
    w = max(hi - lo, rtol * max(abs(lo), abs(hi)))
    return lo - w <= x <= hi + w, lo - w, hi + w


def reproducible_horizon(base: Sequence[Mapping[int, float]], rtol: float) -> int | None:
    """The last iteration up to which the baseline reproduces itself: at it and at every earlier shared iteration, each
    baseline start lies inside the widened envelope of the other baseline starts. Past it the starts have drifted apart
    (bf16 atomics, amplified by the training's own dynamics) and the loss can no longer tell two arms apart. None when
    they disagree at the first shared iteration or share none."""
    common = sorted(set.intersection(*(set(c) for c in base))) if base else []
    horizon = None
    for it in common:
        for i, curve in enumerate(base):
            others = [o[it] for j, o in enumerate(base) if j != i]
            if not all(math.isfinite(v) for v in (curve[it], *others)) or not _inside(curve[it], others, rtol)[0]:
                return horizon
        horizon = it
    return horizon


def loss_envelope(base: Sequence[Mapping[int, float]], arm: Sequence[Mapping[int, float]], rtol: float) -> Gate:
    """Every arm start's loss inside the baseline starts' widened envelope, at every shared iteration up to the
    baseline's reproducible horizon (module docstring)."""
    base = [c for c in base if c]
    arm = [c for c in arm if c]
    if len(base) < 2 or not arm:
        return Gate("unknown", "needs two baseline starts and an arm start with losses")
    common = set.intersection(*(set(c) for c in base))
    horizon = reproducible_horizon(base, rtol)
    last = max(common, default=None)
    if horizon is None or horizon <= min(common):
        return Gate("unknown", f"the {len(base)} baseline starts {NOT_REPEATABLE} past their first "
                               "iteration: the loss cannot separate the arms")
    scope = (f"iterations {min(common)}-{horizon}" if horizon == last else
             f"iterations {min(common)}-{horizon}; past {horizon} the baseline starts drift apart themselves")
    worst: tuple[float, int, float, float, float] | None = None
    n = 0
    for curve in arm:
        for it in sorted(i for i in common & set(curve) if i <= horizon):
            values = [c[it] for c in base]
            x = curve[it]
            if not all(math.isfinite(v) for v in (*values, x)):
                return Gate("fail", f"non-finite loss at iteration {it}")
            ok, lo, hi = _inside(x, values, rtol)
            n += 1
            out = max(lo - x, x - hi, 0.0)
            if not ok and (worst is None or out > worst[0]):
                worst = (out, it, x, lo, hi)
    if n == 0:
        return Gate("unknown", "no iteration with a loss in every start")
    if worst is not None:
        _, it, x, lo, hi = worst
        return Gate("fail", f"lm loss {x:.4g} at iteration {it} is outside the baseline starts' envelope "
                            f"[{lo:.4g}, {hi:.4g}] ({scope})")
    return Gate("pass", f"lm loss inside the baseline envelope ({len(base)} starts) at all {n} compared points, "
                        f"{scope}")
