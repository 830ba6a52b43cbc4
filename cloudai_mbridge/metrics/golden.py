"""Golden values: compare a training run with a recorded reference run, as Megatron-Bridge's performance CI does.

The anchor is Megatron-Bridge ``scripts/performance/utils/evaluate.py`` (``validate_convergence``,
``validate_performance``, ``validate_memory``, ``calc_convergence_and_performance``). Its file format is kept, so a
golden file written by Bridge's scripts can be read here and the other way round::

    {"0": {"lm loss": 10.43, "elapsed time per iteration (ms)": 11827.7, "GPU utilization": 3.8},
     "1": {...}, ..., "alloc": 9.509, "max_alloc": 9.509}

Steps are 0-based (``iteration N`` announces that step N-1 finished); ``alloc`` / ``max_alloc`` are Bridge's first
``mem-allocated-gigabytes`` / ``mem-max-allocated-gigabytes`` (GB, 10^9 bytes). We add ``peak_max_alloc`` (the
largest ``max allocated`` of the run, GB), which Bridge's reader ignores.

The checks, with Bridge's defaults (:class:`GoldenThresholds`):

- loss curve: Pearson correlation >= 0.95; per-step relative difference within 10 % where the golden loss is
  above 2.0, 5 % above 0.5, else 2 %, with at most 10 % of the steps outside; final loss within 3 %; at most 10 %
  of the residuals beyond 3 standard deviations (population) of their mean;
- step time: mean over the steps after the first 10 % (at least one step skipped) within 5 % of the golden mean.
  Bridge fails on either side; we say which: slower is a *regression*, faster an *unexpected improvement* (a
  changed workload, a broken timer, or a real win that needs a new golden file);
- TFLOP/s per GPU: the same test on the logged throughput (Bridge records it as "GPU utilization" but does not
  check it);
- memory: ``alloc``, ``max_alloc`` and ``peak_max_alloc`` each within 5 % (skipped when either side lacks it).

Two departures from Bridge, both stricter: a golden step the run did not log is a breach (Bridge compares it as
NaN, and a NaN correlation passes its ``<`` test), and a non-finite loss fails the loss check.

A golden file is read whole or refused (``read_golden_file``): a regular file of at most MAX_GOLDEN_BYTES, JSON in
Bridge's shape (an object of steps holding objects of numbers, plus numbers) with at most MAX_GOLDEN_STEPS steps and
a per-step ``lm loss``. dry-run refuses a test whose golden file is missing or fails these (``golden_file_problem``),
so a run never finds out at its end.
"""

from __future__ import annotations

import json
import math
import re
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..atomic import write_atomic

LOSS_KEY = "lm loss"
TIME_KEY = "elapsed time per iteration (ms)"
TFLOPS_KEY = "GPU utilization"
ALLOC_KEY = "alloc"
MAX_ALLOC_KEY = "max_alloc"
PEAK_KEY = "peak_max_alloc"
SCALAR_KEYS = (ALLOC_KEY, MAX_ALLOC_KEY, PEAK_KEY)
GOLDEN_FILE = "golden_values.json"
# Bridge's golden files hold some 100 steps of three numbers (~10 KB); 16 MiB is a 100,000-step run with room to spare.
MAX_GOLDEN_BYTES = 16 * 1024 * 1024
MAX_GOLDEN_STEPS = 200_000


class GoldenFileError(ValueError):
    """A golden-values file that cannot be used; the message says why (the caller names the file)."""


@dataclass(frozen=True)
class GoldenThresholds:
    """Megatron-Bridge's defaults (evaluate.py); the high/medium loss boundaries are its literals 2.0 and 0.5."""

    correlation_threshold: float = 0.95
    high_loss_tolerance: float = 0.10
    medium_loss_tolerance: float = 0.05
    low_loss_tolerance: float = 0.02
    high_loss_above: float = 2.0
    medium_loss_above: float = 0.5
    final_loss_tolerance: float = 0.03
    max_outlier_ratio: float = 0.1
    outlier_threshold: float = 3.0
    skip_first_percent_loss: float = 0.0
    skip_first_percent_time: float = 0.1
    timing_threshold: float = 0.05
    tflops_threshold: float = 0.05
    memory_threshold: float = 0.05

    def loss_tolerance(self, golden: float) -> float:
        if golden > self.high_loss_above:
            return self.high_loss_tolerance
        if golden > self.medium_loss_above:
            return self.medium_loss_tolerance
        return self.low_loss_tolerance


@dataclass(frozen=True)
class GoldenCheck:
    """One comparison: ``value`` against ``threshold`` (``value >= threshold`` passes for the correlation, ``<=``
    for every other check); ``direction`` says which way a timing/throughput/memory breach went."""

    name: str
    passed: bool
    value: float | None
    threshold: float
    detail: str
    direction: str | None = None


@dataclass(frozen=True)
class GoldenComparison:
    golden_path: str
    checks: tuple[GoldenCheck, ...] = ()
    steps_compared: int = 0
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and all(c.passed for c in self.checks)

    @property
    def breaches(self) -> tuple[GoldenCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def reason(self) -> str | None:
        """One line for a failed status (None when the comparison passed)."""
        if self.error is not None:
            return f"golden values: {self.error}"
        if not self.breaches:
            return None
        return "golden values breached: " + "; ".join(c.detail for c in self.breaches)

    def to_json(self) -> dict[str, Any]:
        return {
            "golden_path": self.golden_path,
            "passed": self.passed,
            "reason": self.reason,
            "error": self.error,
            "steps_compared": self.steps_compared,
            "checks": [asdict(c) for c in self.checks],
        }


# --- the file ----------------------------------------------------------------------------------------------------
def golden_values(metrics: Any) -> dict[str, Any]:
    """The next golden file of a parsed training run (:class:`~.training.TrainingRunMetrics`), Bridge's format."""
    return dict(_golden_items(metrics))


def golden_values_chunks(metrics: Any) -> Iterator[str]:
    """``json.dumps(golden_values(metrics), indent=1) + "\n"`` an entry at a time, for a file written as they come:
    a 10^6-iteration run's 10^6 entries are never all held."""
    first = True
    for key, value in _golden_items(metrics):
        yield ("{\n " if first else ",\n ") + json.dumps(key) + ": " + json.dumps(value, indent=1).replace("\n", "\n ")
        first = False
    yield "{}\n" if first else "\n}\n"


def _golden_items(metrics: Any) -> Iterator[tuple[str, Any]]:
    """golden_values' entries in order (each iteration once: the records are deduplicated)."""
    for r in metrics.iterations:
        entry = {
            k: v
            for k, v in ((LOSS_KEY, r.lm_loss), (TIME_KEY, r.elapsed_ms), (TFLOPS_KEY, r.tflops_per_gpu))
            if v is not None and math.isfinite(v)
        }
        if entry:
            yield str(r.iteration - 1), entry
    values: dict[str, Any] = {}
    first = next((m for m in metrics.memory if m.allocated_bytes is not None), None)
    first_max = next((m for m in metrics.memory if m.max_allocated_bytes is not None), None)
    if first is not None:
        values[ALLOC_KEY] = first.allocated_bytes / 1e9
    if first_max is not None:
        values[MAX_ALLOC_KEY] = first_max.max_allocated_bytes / 1e9
    if metrics.peak_allocated_bytes is not None:
        values[PEAK_KEY] = metrics.peak_allocated_bytes / 1e9
    yield from values.items()


def write_golden_values(metrics: Any, path: Path) -> Path:
    return write_atomic(path, json.dumps(golden_values(metrics), indent=1, sort_keys=False) + "\n")


def read_golden_file(path: Path | str) -> dict[str, Any]:
    """The golden file's values; GoldenFileError when it is missing, not a regular file, larger than
    MAX_GOLDEN_BYTES, not UTF-8 JSON, not in Bridge's shape, longer than MAX_GOLDEN_STEPS or without a per-step
    ``lm loss``. Reads at most MAX_GOLDEN_BYTES + 1 bytes and never blocks on a FIFO or a device."""
    path = Path(path)
    try:
        st = path.stat()
    except FileNotFoundError:
        raise GoldenFileError("not found") from None
    except OSError as e:
        raise GoldenFileError(f"cannot be read ({e.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise GoldenFileError("is not a regular file")
    if st.st_size > MAX_GOLDEN_BYTES:
        raise GoldenFileError(f"is {st.st_size / 2**20:,.0f} MiB; a golden file is at most "
                              f"{MAX_GOLDEN_BYTES >> 20} MiB")
    from ..payload.hf_config import read_limited

    try:
        raw = read_limited(path, MAX_GOLDEN_BYTES)
    except OSError as e:
        raise GoldenFileError(f"cannot be read ({e.strerror})") from None
    if len(raw) > MAX_GOLDEN_BYTES:
        raise GoldenFileError(f"is larger than {MAX_GOLDEN_BYTES >> 20} MiB")
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise GoldenFileError("is nested too deeply to be a golden-values file") from None
    except UnicodeDecodeError:
        raise GoldenFileError("is not UTF-8 text") from None
    except ValueError as e:
        raise GoldenFileError(f"is not JSON ({e})") from None
    if not isinstance(data, dict):
        raise GoldenFileError("is not a JSON object of steps")
    steps = 0
    for key, value in data.items():
        if isinstance(value, Mapping):
            steps += 1
            nested = next((k for k, v in value.items() if isinstance(v, (Mapping, list))), None)
            if nested is not None:
                raise GoldenFileError(f"is not in Megatron-Bridge's golden-values format: step {key[:40]!r} holds a "
                                      f"table or list under {nested[:40]!r} (steps hold numbers)")
        elif isinstance(value, list):
            raise GoldenFileError(f"is not in Megatron-Bridge's golden-values format: {key[:40]!r} holds a list")
    if steps > MAX_GOLDEN_STEPS:
        raise GoldenFileError(f"holds {steps:,} steps; at most {MAX_GOLDEN_STEPS:,}")
    losses = step_values(data, LOSS_KEY)
    if not losses:
        raise GoldenFileError(f"has no per-step '{LOSS_KEY}'")
    from .loss import loss_problem

    absurd = next(((s, why) for s, v in sorted(losses.items()) for why in [loss_problem(v, None)] if why), None)
    if absurd:  # a reference no run could meet or should: a damaged or edited file (metrics/loss.py)
        raise GoldenFileError(f"step {absurd[0]}: {absurd[1]}")
    return data


def golden_file_problem(path: Path | str) -> str | None:
    """Why the golden file at ``path`` cannot be used (None when it can): read_golden_file's reason."""
    try:
        read_golden_file(path)
    except GoldenFileError as e:
        return str(e)
    return None


def load_golden_values(path: Path | str) -> dict[str, Any]:
    return read_golden_file(path)


_STEP = re.compile(r"^-?[0-9]{1,18}$")  # ASCII digits only ("²".isdigit() is true, int("²") raises)


def step_values(values: Mapping[str, Any], key: str) -> dict[int, float]:
    """{step: value} of a golden-values file; keys that are not plain step numbers and values that are not numbers
    are skipped (a damaged file never raises here). A NaN stays: a diverged loss must fail the comparison."""
    out = {}
    for step, entry in values.items():
        if not (isinstance(step, str) and _STEP.match(step) and isinstance(entry, Mapping)):
            continue
        value = entry.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[int(step)] = float(value)
    return out


# --- statistics --------------------------------------------------------------------------------------------------
def pearson(xs: Sequence[float], ys: Sequence[float]) -> float:
    """numpy.corrcoef(xs, ys)[0, 1]; NaN when either series is constant or shorter than 2."""
    n = len(xs)
    if n < 2 or n != len(ys):
        return math.nan
    mx, my = math.fsum(xs) / n, math.fsum(ys) / n
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    if sxx == 0.0 or syy == 0.0:
        return math.nan
    return sxy / math.sqrt(sxx * syy)


def _rel(current: float, golden: float) -> float:
    return abs(current - golden) / abs(golden) if golden != 0 else abs(current)


# --- the checks --------------------------------------------------------------------------------------------------
def compare_loss(current: Mapping[int, float], golden: Mapping[int, float], t: GoldenThresholds) -> list[GoldenCheck]:
    steps = sorted(golden)
    skip = max(0, int(len(steps) * t.skip_first_percent_loss))
    steps = steps[skip:]
    missing = [s for s in steps if s not in current]
    checks: list[GoldenCheck] = []
    if missing:
        checks.append(
            GoldenCheck(
                "loss_steps",
                False,
                float(len(missing)),
                0.0,
                f"{len(missing)} golden step(s) without a loss in this run (first: step {missing[0]})",
            )
        )
    steps = [s for s in steps if s in current]
    if not steps:
        return checks or [GoldenCheck("loss_steps", False, None, 0.0, "no loss to compare")]
    cur = [current[s] for s in steps]
    gold = [golden[s] for s in steps]
    if not all(math.isfinite(v) for v in cur):
        bad = next(s for s, v in zip(steps, cur, strict=True) if not math.isfinite(v))
        return [*checks, GoldenCheck("loss_finite", False, None, 0.0, f"non-finite loss at step {bad}")]

    corr = pearson(cur, gold)
    checks.append(
        GoldenCheck(
            "correlation",
            not corr < t.correlation_threshold,  # NaN (a flat curve on either side) cannot fail, as in Bridge
            corr,
            t.correlation_threshold,
            f"loss correlation {corr:.4f} (at least {t.correlation_threshold:g})",
        )
    )
    failures = []
    for s, c, g in zip(steps, cur, gold, strict=True):
        tol = t.loss_tolerance(g)
        rel = _rel(c, g)
        if rel > tol:
            failures.append((s, c, g, rel, tol))
    ratio = len(failures) / len(steps)
    first = failures[0] if failures else None
    checks.append(
        GoldenCheck(
            "point_wise_tolerance",
            ratio <= t.max_outlier_ratio,
            ratio,
            t.max_outlier_ratio,
            f"{len(failures)}/{len(steps)} steps outside the loss tolerance "
            f"({ratio:.0%}, at most {t.max_outlier_ratio:.0%})"
            + (f"; first: step {first[0]} {first[1]:.4f} vs {first[2]:.4f} ({first[3]:.1%} > {first[4]:.0%})"
               if first else ""),
        )
    )
    final = _rel(cur[-1], gold[-1])
    checks.append(
        GoldenCheck(
            "final_loss",
            final <= t.final_loss_tolerance,
            final,
            t.final_loss_tolerance,
            f"final loss {cur[-1]:.4f} vs golden {gold[-1]:.4f} ({final:.1%}, at most {t.final_loss_tolerance:.0%})",
        )
    )
    residuals = [c - g for c, g in zip(cur, gold, strict=True)]
    mean = math.fsum(residuals) / len(residuals)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in residuals) / len(residuals))
    outliers = sum(1 for r in residuals if abs(r - mean) > t.outlier_threshold * std)
    out_ratio = outliers / len(residuals)
    checks.append(
        GoldenCheck(
            "outliers",
            out_ratio <= t.max_outlier_ratio,
            out_ratio,
            t.max_outlier_ratio,
            f"{outliers}/{len(residuals)} loss residuals beyond {t.outlier_threshold:g} sigma "
            f"({out_ratio:.0%}, at most {t.max_outlier_ratio:.0%})",
        )
    )
    return checks


def compare_mean(
    name: str,
    what: str,
    unit: str,
    current: Mapping[int, float],
    golden: Mapping[int, float],
    threshold: float,
    skip_percent: float,
    higher_is_better: bool,
) -> GoldenCheck | None:
    """Bridge's validate_performance on one per-step series: means after the first ``skip_percent`` of the golden
    steps (at least one), relative difference against ``threshold``. None when the golden file lacks the series."""
    steps = sorted(golden)
    if not steps:
        return None
    skip = max(1, int(len(steps) * skip_percent))
    kept = steps[skip:]
    missing = [s for s in kept if s not in current]
    if not kept or missing:
        return GoldenCheck(
            name, False, None, threshold, f"{what}: {len(missing)} golden step(s) missing in this run"
        )
    cur = math.fsum(current[s] for s in kept) / len(kept)
    gold = math.fsum(golden[s] for s in kept) / len(kept)
    diff = _rel(cur, gold)
    better = (cur > gold) == higher_is_better
    direction = None if cur == gold else ("unexpected improvement" if better else "regression")
    return GoldenCheck(
        name,
        diff <= threshold,
        diff,
        threshold,
        f"{what}{' ' + direction if direction else ''}: {cur:.1f} vs golden {gold:.1f} {unit} "
        f"({(cur - gold) / gold if gold else diff:+.1%}, limit ±{threshold:.0%}, first {skip} step(s) skipped)",
        direction,
    )


def compare_memory(current: Mapping[str, Any], golden: Mapping[str, Any], threshold: float) -> list[GoldenCheck]:
    checks = []
    for key in SCALAR_KEYS:
        g, c = golden.get(key), current.get(key)
        if not isinstance(g, int | float) or not isinstance(c, int | float):
            continue
        diff = _rel(c, g)
        direction = None if c == g else ("regression" if c > g else "unexpected improvement")
        checks.append(
            GoldenCheck(
                key,
                diff <= threshold,
                diff,
                threshold,
                f"memory {key}{' ' + direction if direction else ''}: {c:.3f} vs golden {g:.3f} GB "
                f"({(c - g) / g if g else diff:+.1%}, limit ±{threshold:.0%})",
                direction,
            )
        )
    return checks


def compare_golden(
    metrics: Any, golden_path: Path | str, thresholds: GoldenThresholds | None = None
) -> GoldenComparison:
    """The run (:class:`~.training.TrainingRunMetrics`) against the golden file; never raises on a bad file."""
    t = thresholds or GoldenThresholds()
    path = Path(golden_path)
    try:
        golden = read_golden_file(path)
    except GoldenFileError as exc:
        if str(exc) == "not found":
            return GoldenComparison(str(path), error=f"file {path} not found (this run's values are in {GOLDEN_FILE})")
        return GoldenComparison(str(path), error=f"cannot read {path}: it {exc}")
    current = golden_values(metrics)
    g_loss = step_values(golden, LOSS_KEY)
    checks = compare_loss(step_values(current, LOSS_KEY), g_loss, t)
    for check in (
        compare_mean(
            "step_timing",
            "step time",
            "ms",
            step_values(current, TIME_KEY),
            step_values(golden, TIME_KEY),
            t.timing_threshold,
            t.skip_first_percent_time,
            higher_is_better=False,
        ),
        compare_mean(
            "tflops",
            "TFLOP/s per GPU",
            "TFLOP/s",
            step_values(current, TFLOPS_KEY),
            step_values(golden, TFLOPS_KEY),
            t.tflops_threshold,
            t.skip_first_percent_time,
            higher_is_better=True,
        ),
    ):
        if check is not None:
            checks.append(check)
    checks += compare_memory(current, golden, t.memory_threshold)
    compared = len(set(g_loss) & set(step_values(current, LOSS_KEY)))
    return GoldenComparison(str(path), checks=tuple(checks), steps_compared=compared)

