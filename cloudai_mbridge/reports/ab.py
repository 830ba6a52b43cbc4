"""Scenario report: pair training runs that differ only in one field (the dispatcher by default) and compare them.

Per cell (the other fields that vary across the sweep): both arms' steady-state iteration time, the delta with its
95 % interval, the winner, TFLOP/s, stalls, validity gates, and work-equivalence from the per-iteration loss of both
arms. A cell whose arms did different work, or whose gates fail, is flagged and never gets a winner; neither does one
whose delta interval contains 0 ("within noise").

Steady state: the iterations after the first ``warmup``. Where a run logged Megatron-Bridge's manual garbage
collection (``MBRIDGE_GC``), the iterations that carry one are left out in a cell run more than once (as the
bootstrap over starts has always done) and kept in a cell run once (as Welch's interval has always done); every
number of a run or a cell on the page (tables, verdict lines, plots) uses its cell's choice, and the page says which
beside it (the *manual-GC iterations* column, the verdict line). Every time on the page is in ms.

The interval of a verdict comes from one of two methods, named on its line and in its row (``interval_method``):

- **Welch over iterations** (:data:`WELCH`), a cell where each arm ran once: Welch's interval for the difference of
  the two steady-state means, over the per-iteration times, as a share of the baseline mean. It treats iterations
  as independent and sees one start per arm, so it covers the noise within a run, not between job starts or
  machines: a delta outside it is necessary for a winner, not sufficient. Work: max relative lm-loss difference
  over the first K iterations (seed 000 saw <= 4.1e-4 in bf16).
- **bootstrap over starts** (:data:`BOOTSTRAP`, reports/ab_starts.py), a cell with repeated starts: the two-level
  bootstrap over starts, then iterations within each start; with one start on a side (:data:`BOOTSTRAP_ONE`) that
  side's start-to-start noise is not in the interval. Work: the baseline starts' loss envelope; routing: the
  routers' hashes.
"""

from __future__ import annotations

import html
import json
import logging
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cloudai.core import Reporter
from cloudai.models.scenario import ReportConfig
from pydantic import Field, field_validator

from ..atomic import write_atomic
from ..metrics import Stats, TrainingRunMetrics, loss_equivalence, parse_training_run
from ..metrics.signals import HANG_KINDS
from ..metrics.stats import STALL_FACTOR
from ..metrics.training import config_int, members
from ..plots import ChangeRow, Panel, RangeRow, change_figure, inline_png, range_figure, save, series_plot, time_panel
from ..redact import redact_report
from . import ab_starts
from .common import (
    TolerantLoading,
    config_label,
    holds,
    html_page,
    html_table,
    run_title,
    runs_of,
    scenario_facts,
    skipped_points,
    skipped_section,
)
from .dispatch_bench import attach_training, dispatch_rows
from .dispatch_bench import section as dispatch_section
from .page import headline, verdict_badge
from .provenance import RunSource, collect, recorded_versions

# Cells that get a per-iteration plot on the page (the first ones by label); the tables hold every cell.
CELL_PLOTS = 12
# Rows of the page's two summary figures (comparisons; half as many cells in the times figure).
FIGURE_ROWS = 40

# The interval methods (a row's ``interval_method``) and what each interval covers, as the verdict line says it.
WELCH = "Welch over iterations"
BOOTSTRAP = "bootstrap over starts"
BOOTSTRAP_ONE = "bootstrap, one start on a side"
COVERS = {
    WELCH: "noise between iterations of one run, not between job starts",
    BOOTSTRAP: "noise between starts and between iterations, on one machine",
    BOOTSTRAP_ONE: "noise between iterations, and between starts only of the arm that ran more than once",
}


def steady_text(warmup: int, gc_out: set[bool]) -> str:
    """The page's steady state in words; ``gc_out``: the choices of the page's cells that have manual-GC
    iterations (True: left out, a cell run more than once; False: kept, a cell run once)."""
    text = f"the iterations after the first {warmup}"
    if gc_out == {True}:
        return text + ", without those that carry Megatron-Bridge's manual garbage collection"
    if gc_out == {False}:
        return text + ", those that carry Megatron-Bridge's manual garbage collection included"
    if gc_out:
        return (text + "; the iterations that carry Megatron-Bridge's manual garbage collection are left out in "
                "cells run more than once and kept in cells run once (the column manual-GC iterations says which, "
                "row by row)")
    return text


# Keys that describe where/when a run happened or what we predicted, not the work it did (hang_timeout_s: when the
# payload's watchdog would give up on a stalled start, payload/train/watchdog.py).
VOLATILE_KEYS = frozenset({"output_dir", "memory_estimate_bytes", "memory", "hang_timeout_s"})


def ab_fields() -> tuple[str, ...]:
    """What an A/B can pair runs by: the single-valued settings every training run records in mbridge_config.json
    (payload/train/config.py's keys and the job's), not what only describes the run (VOLATILE_KEYS) nor tables."""
    from ..payload.train.config import OPTIONAL_KEYS, REQUIRED_KEYS

    recorded = {*REQUIRED_KEYS, *OPTIONAL_KEYS, "gpu", "num_nodes", "gpus_per_node", "network", "dp"}
    return tuple(sorted(recorded - VOLATILE_KEYS - {"model", "echo"}))


class ABReportConfig(ReportConfig):
    enable: bool = True
    field: str = "dispatcher"
    baseline: str | None = Field(default="alltoall", description="arm the others are compared with")
    warmup: int = Field(default=4, ge=0, description="iterations dropped before the statistics")
    loss_first_k: int = Field(default=10, ge=1, description="iterations whose loss must agree")
    loss_rtol: float = Field(default=1e-3, gt=0, description="max relative loss difference for equal work")

    @field_validator("field")
    @classmethod
    def _recorded_field(cls, v: str) -> str:
        if v not in ab_fields():
            raise ValueError(f"[reports.mbridge_ab] field = {v!r} is not a setting training runs record, so no two "
                             f"runs could be paired by it. Fix: one of {', '.join(ab_fields())}")
        return v


@dataclass
class Arm:
    value: str
    run_dir: Path
    config: dict[str, Any]
    metrics: TrainingRunMetrics

    def gates(self) -> list[str]:
        """Reasons this arm's numbers cannot be used (empty = valid)."""
        m, problems = self.metrics, []
        if not m.ok:
            explained = m.failure.first or m.time_errors or m.inconsistencies
            problems.append(f"status {m.status}" + (f" ({failure_text(m)})" if explained else ""))
        d = m.validity.dispatcher
        if d.downgraded:
            problems.append(f"dispatcher downgraded ({d.wanted} -> {d.built})")
        elif self.config.get("dispatcher") in ("deepep", "hybridep", "ncclep") and d.downgraded is None:
            problems.append("dispatcher not proven (no MBRIDGE_DISPATCHER line)")
        multinode_efa = self.config.get("network") == "efa" and self.config.get("num_nodes", 1) > 1
        if multinode_efa and not m.validity.efa_on_all_ranks:
            problems.append("EFA not proven on every rank")
        if m.validity.nan_iterations or m.validity.nonfinite_grad_norm_iterations:
            problems.append("NaN/Inf loss or grad norm")
        if m.validity.skipped_iterations:
            problems.append(f"{m.validity.skipped_iterations} skipped iterations")
        missing = missing_iterations(m)
        if missing:
            problems.append(f"log holds {missing[1] - missing[0]} of {missing[1]} iterations (lines missing or "
                            "unreadable: the steady state is not what ran)")
        elif m.iteration_time_ms.n_invalid:
            problems.append(f"{m.iteration_time_ms.n_invalid} steady-state iterations carry no readable time")
        elif m.ok and m.iteration_time_ms.n < MIN_STEADY:
            problems.append(f"{m.iteration_time_ms.n} steady-state iterations (< {MIN_STEADY}: no interval worth "
                            "a verdict)")
        return problems


# An arm with fewer steady-state iterations than this gets no verdict: its interval would rest on too few values.
MIN_STEADY = 5


def missing_iterations(m: TrainingRunMetrics) -> tuple[int, int] | None:
    """(missing, expected) when the log's iteration lines do not cover 1..N of the run's own ``N`` (the iteration
    lines' ``/ N``, else the config's train_iters); None when they do or nothing says N."""
    total = max((r.train_iters for r in m.iterations), default=None) or config_int(m.config or {}, "train_iters")
    if not total or not m.iterations:
        return None
    last = max(r.iteration for r in m.iterations)
    expected = min(total, last) if m.status != "ok" else total
    seen = len({r.iteration for r in m.iterations if 1 <= r.iteration <= expected})
    return (expected - seen, expected) if seen < expected else None


@dataclass
class Cell:
    label: str
    arms: dict[str, Arm] = field(default_factory=dict)  # the first start of each arm
    starts: dict[str, list[Arm]] = field(default_factory=dict)  # every start (repeated runs of one config)


def _repeated(cell: Cell) -> bool:
    """An arm of the cell ran more than once: its A/B is the bootstrap over starts, without the manual-GC
    iterations."""
    return any(len(runs) > 1 for runs in cell.starts.values())


def _cell_key(config: dict[str, Any], pair_field: str) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in VOLATILE_KEYS and k != pair_field}, sort_keys=True)


def _start_series(cell: Cell) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[tuple[int, float]]],
                                       dict[str, dict[str, Any]], str | None]:
    """Per-iteration time and loss series of every start of every arm of a cell, one colour per arm: the first start
    solid and named in the legend, the others lighter (matplotlib leaves names starting with "_" out of the legend),
    so the spread the work gate judges is on the plot; the loss panel's note says how many starts are drawn."""
    times: dict[str, list[tuple[int, float]]] = {}
    losses: dict[str, list[tuple[int, float]]] = {}
    styles: dict[str, dict[str, Any]] = {}
    counts = []
    for j, (value, starts) in enumerate(sorted(cell.starts.items())):
        counts.append(f"{value} {len(starts)}")
        for k, arm in enumerate(starts):
            name = value if k == 0 else f"_{value} start {k + 1}"
            times[name] = [(r.iteration, r.elapsed_ms) for r in arm.metrics.iterations if r.elapsed_ms is not None]
            losses[name] = sorted(arm.metrics.loss_curve.items())
            styles[name] = {"color": f"C{j % 10}"} | ({} if k == 0 else {"alpha": 0.45, "marker": "", "lw": 1})
    many = any(len(s) > 1 for s in cell.starts.values())
    return times, losses, styles, (f"every start drawn ({', '.join(counts)}); the first of each arm solid"
                                   if many else None)


def _label(config: dict[str, Any], varying: list[str]) -> str:
    return " ".join(f"{k}={config_label(config.get(k))}" for k in varying) or "all"


HEADERS = {
    "cell": "point (what differs)",
    "baseline": "baseline arm",
    "arm": "compared arm",
    "base_time_ms": "baseline time per iteration (ms)",
    "arm_time_ms": "arm time per iteration (ms)",
    "delta_pct": "change (%)",
    "delta_ci95_pct": "change 95 % interval (%)",
    "verdict": "verdict",
    "base_tflops_per_gpu": "baseline TFLOP/s per GPU",
    "arm_tflops_per_gpu": "arm TFLOP/s per GPU",
    "base_stalls": "baseline stalls",
    "arm_stalls": "arm stalls",
    "loss_max_rel_diff": "max relative loss difference",
    "point": "point (what differs)",
    "status": "status",
    "failure": "failure: class, rank, first error line",
    "engine": "engine",
    "iter_ms": "time per iteration (ms)",
    "tflops_per_gpu": "TFLOP/s per GPU",
    "mfu_pct": "MFU (% of dense BF16 peak)",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "gpu_hours": "GPU-hours (iterations)",
    "peak_mem_gb": "peak memory allocated (GB)",
    "golden": "golden values",
    "base_starts": "baseline starts",
    "arm_starts": "arm starts",
    "routing": "same routing (router hashes)",
    "work": "same work (loss envelope)",
    "manual_gc": "manual-GC iterations",
    "interval_method": "interval method",
    "start": "start",
}


METHOD_DEFINITIONS = {
    WELCH: "Welch's interval over the per-iteration times, one start per arm",
    BOOTSTRAP: "two-level bootstrap over starts, then iterations within each start",
    BOOTSTRAP_ONE: "the same bootstrap with one start on a side (that side's start-to-start noise is not in it)",
}


def definitions(warmup: int, loss_first_k: int, loss_rtol: float, methods: frozenset[str] = frozenset(),
                gc_out: frozenset[bool] = frozenset()) -> dict[str, str]:
    """What every column of the page's tables holds (the legend under each table); ``methods``: the interval
    methods of the page's rows, the only ones the legend names; ``gc_out``: as for :func:`steady_text`."""
    steady = "the steady state (" + steady_text(warmup, set(gc_out)) + ")"
    used = [m for m in (WELCH, BOOTSTRAP, BOOTSTRAP_ONE) if m in methods]
    return {
        "cell": "the values of the fields that differ between cells (\"all\" when only the paired field does)",
        "baseline": "the arm the others are compared with",
        "arm": "the arm compared with the baseline",
        "base_time_ms": f"baseline's mean time per iteration over {steady}; with several starts, the mean of the "
                        "starts' means",
        "arm_time_ms": "the same for the compared arm",
        "delta_pct": "(arm - baseline) / baseline x 100 of those times; negative = the arm is faster",
        "delta_ci95_pct": "95 % interval of that change, by the row's interval method",
        "interval_method": "; ".join(f"{m}: {METHOD_DEFINITIONS[m]}" for m in used) or "no interval was computed",
        "verdict": "<arm> faster when the interval excludes 0, within noise when it holds 0; invalid, different "
                   "work or work not proven: not compared",
        "base_tflops_per_gpu": f"baseline's mean logged model TFLOP/s per GPU over {steady}; with several starts, "
                               "the mean of the starts' means",
        "arm_tflops_per_gpu": "the same for the compared arm",
        "base_stalls": f"baseline's steady-state iterations slower than {STALL_FACTOR:g} x their run's median "
                       "(summed over its starts; they stay in the mean)",
        "arm_stalls": "the same for the compared arm",
        "loss_max_rel_diff": f"a cell run once: max relative lm-loss difference between its two runs over the "
                             f"first {loss_first_k} iterations; equal work up to {loss_rtol:g}",
        "base_starts": "process starts of the baseline (each a fresh run)",
        "arm_starts": "process starts of the compared arm",
        "routing": "a cell run more than once: whether the routers' per-iteration hashes agree in every run of it",
        "work": "a cell run more than once: whether every start's lm loss lies in the baseline starts' envelope up "
                "to their reproducible horizon",
        "manual_gc": "the steady-state iterations that carried Megatron-Bridge's manual garbage collection, and "
                     "whether this row's numbers leave them out (a cell run more than once) or keep them (a cell "
                     "run once)",
        "point": "the values of the fields that differ between runs",
        "start": "which start of its cell and arm the run was (a fresh process each)",
        "status": "ok, failed or incomplete, and the golden-values check where the test names one",
        "failure": "for a failed run: the failure's class, the rank and that rank's first error line",
        "engine": "the training engine the run used (bridge: Megatron-Bridge; mcore: Megatron-Core alone)",
        "iter_ms": f"mean time per iteration over {steady}",
        "tflops_per_gpu": f"mean logged model TFLOP/s per GPU over {steady}",
        "mfu_pct": "that TFLOP/s over the GPU's dense BF16 peak, in % (fp8 runs too)",
        "tokens_per_s_per_gpu": f"global batch x sequence length / iteration time, per GPU, mean over {steady}",
        "gpu_hours": "GPUs x the time of every logged iteration (warm-up and garbage collections included; start-up "
                     "and teardown not)",
        "peak_mem_gb": "the largest max allocated of any rank (GB = 1e9 bytes)",
        "golden": "whether the run met the test's golden values",
    }


def failure_text(m: TrainingRunMetrics) -> str | None:
    """``<class> on rank <r>: <first error line>`` for a failed run; the parser's problems for an unfinished one."""
    first = m.failure.first
    if first is not None:
        rank = f" on rank {first.rank}" if first.rank is not None else ""
        return f"{m.failure.reason()['failure_class']}{rank}: {first.detail[:160]}"
    if m.time_errors:
        return f"damaged log, no time is used: {'; '.join(m.time_errors)}"[:300]
    if m.inconsistencies:
        return f"inconsistent log, no time is used: {'; '.join(m.inconsistencies)}"[:400]
    return None if m.ok else ", ".join(m.problems)


def time_stats(m: TrainingRunMetrics, gc_out: bool = False) -> Stats:
    """The steady-state times: without the manual-GC iterations (``gc_out``: a cell run more than once) or with."""
    return m.iteration_time_ms_no_gc if gc_out else m.iteration_time_ms


def mean_time_ms(m: TrainingRunMetrics, gc_out: bool = False) -> float | None:
    """The steady-state mean time per iteration (:func:`time_stats`), or None when the log carried a damaged time or
    contradicts itself (never a number)."""
    return None if no_numbers(m) else time_stats(m, gc_out).mean


def steady_records(m: TrainingRunMetrics, gc_out: bool = False) -> Iterator[Any]:
    """The iteration records of the steady state, one at a time (a 10^6-iteration run's are never all held): after the
    warm-up, the manual-GC iterations left out with ``gc_out``."""
    steady, gc = members(m.steady_iterations), set(m.gc_iterations) if gc_out else set()
    return (r for r in m.iterations if r.iteration in steady and r.iteration not in gc)


def gc_text(iterations: Any, gc_out: bool) -> str | None:
    """``6 11 left out`` / ``6 11 kept``: the manual-GC iterations and what a row does with them (None: none)."""
    its = sorted(set(iterations))
    return f"{' '.join(map(str, its))} {'left out' if gc_out else 'kept'}" if its else None


def _finite_mean(values: Iterable[float | None]) -> float | None:
    """The mean of the finite values, read one at a time (math.fsum is exact: the same sum as over a list)."""
    count = 0

    def finite() -> Iterator[float]:
        nonlocal count
        for v in values:
            if v is not None and math.isfinite(v):
                count += 1
                yield v

    total = math.fsum(finite())
    return total / count if count else None


def steady_tflops(m: TrainingRunMetrics, gc_out: bool = False) -> float | None:
    """Mean logged TFLOP/s per GPU over the steady state (:func:`steady_records`)."""
    return None if no_numbers(m) else _finite_mean(r.tflops_per_gpu for r in steady_records(m, gc_out))


def steady_tokens_per_gpu(m: TrainingRunMetrics, gc_out: bool = False) -> float | None:
    """Mean tokens/s per GPU over the steady state (:func:`steady_records`)."""
    from ..metrics.training import tokens_per_s

    if no_numbers(m) or not m.world_size:
        return None
    config = m.config or {}
    gbs, seq = config_int(config, "gbs"), config_int(config, "seq_length")
    rate = _finite_mean(tokens_per_s(r, gbs, seq) for r in steady_records(m, gc_out))
    return None if rate is None else rate / m.world_size


def no_numbers(m: TrainingRunMetrics) -> bool:
    """The log's times are no measurement: a damaged time, a log that contradicts itself (inconsistent_log), or a
    start that hung (metrics/signals.py HANG_KINDS: a failed start of its arm, whose few iterations are no time)."""
    return bool(m.time_errors or m.inconsistencies) or any(k in HANG_KINDS for k in m.failure.kinds)


def run_row(label: str, tr: Any, m: TrainingRunMetrics, gc_out: bool = False) -> dict[str, Any]:
    """A row of the Runs table; ``gc_out``: its cell ran more than once, so its means leave the manual-GC
    iterations out, as that cell's verdict does."""
    from ..workloads.reporting import golden_comparison

    golden = golden_comparison(tr, m) if m.ok else None
    status = m.status
    if golden is not None:
        status += ", golden " + ("met" if golden.passed else "breached")
    return {
        "point": label,
        "status": status,
        "failure": failure_text(m) or (golden.reason if golden is not None and not golden.passed else None),
        "engine": m.engine,
        "iter_ms": mean_time_ms(m, gc_out),
        "tflops_per_gpu": steady_tflops(m, gc_out),
        "mfu_pct": _mfu(m, gc_out),
        "tokens_per_s_per_gpu": steady_tokens_per_gpu(m, gc_out),
        "manual_gc": gc_text(m.gc_iterations, gc_out),
        "gpu_hours": None if no_numbers(m) else m.gpu_hours,
        "peak_mem_gb": None if m.peak_allocated_bytes is None else m.peak_allocated_bytes / 1e9,
        "golden": None if golden is None else ("met" if golden.passed else "breached"),
        "title": run_title(m.config),
        "run": str(tr.output_path),
    }


def _mfu(m: TrainingRunMetrics, gc_out: bool = False) -> float | None:
    tflops, peak = steady_tflops(m, gc_out), m.gpu_peak_tflops
    return None if tflops is None or not peak else tflops / peak * 100.0


def mean_interval(stats: Stats) -> tuple[float, float] | None:
    """95 % interval of a steady-state mean (Student's t over the iterations, like :func:`delta_interval`)."""
    if stats.n < 2 or stats.mean is None or stats.stdev is None:
        return None
    half = _t975(stats.n - 1) * stats.stdev / math.sqrt(stats.n)
    return stats.mean - half, stats.mean + half


class MBridgeABReport(TolerantLoading, Reporter):
    """Writes ``mbridge_ab.csv`` and ``mbridge_ab.html`` (+ PNG plots) into the scenario's results folder."""

    config: ABReportConfig
    # Software recorded outside the runs' logs (the demo: the device command's own record), shown as provenance.
    provenance_elsewhere: dict[str, str] | None = None
    provenance_source: str | None = None
    # Where the runs come from, in words (the demo: the recorded cell's folder, engine, GPUs, date): shown under the
    # title and in the provenance block.
    provenance_note: str | None = None
    # Re-check the scenario for the points a rule skipped (off for plain run folders: no scenario to check)
    list_skipped: bool = True

    def generate(self) -> None:
        from ..workloads.dispatch_bench import MBridgeDispatchBenchTestDefinition
        from ..workloads.training import MBridgeTrainingTestDefinition

        if not holds(self, MBridgeTrainingTestDefinition, MBridgeDispatchBenchTestDefinition):
            return
        cfg = self.config
        # the dispatch microbenchmark's runs in the same results folder, shown beside the training delta
        self._micro = dispatch_rows(self)
        found = []
        for tr, config in runs_of(self, MBridgeTrainingTestDefinition):
            if isinstance(config.get(cfg.field), (str, int, float)):
                found.append((tr, config))
            else:
                logging.warning("%s: its mbridge_config.json has no %s value (%r); left out of the A/B",
                                tr.output_path, cfg.field, config.get(cfg.field))
        if not found:
            return
        configs = [c for _, c in found]
        keys = sorted({k for c in configs for k in c} - VOLATILE_KEYS - {cfg.field})
        varying = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
        all_varying = sorted(
            k for k in {*keys, cfg.field} if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1
        )
        self._facts = scenario_facts(configs, ["model", "precision", "gpu", "engine"])
        self._runs: list[dict[str, Any]] = []
        self._sources: list[RunSource] = []
        cells: dict[str, Cell] = {}
        parsed = []
        for tr, config in found:
            metrics = parse_training_run(tr.output_path, warmup=cfg.warmup)
            label = _label(config, all_varying) if all_varying else run_title(config)
            parsed.append((label, tr, metrics, _cell_key(config, cfg.field)))
            stamps = [r.timestamp for r in metrics.iterations if r.timestamp]
            first = metrics.failure.first
            self._sources.append(RunSource(label, tr.output_path, engine=metrics.engine,
                                           started=stamps[0] if stamps else None,
                                           ended=stamps[-1] if stamps else None,
                                           failed_rank=first.rank if first is not None else None))
            cell = cells.setdefault(_cell_key(config, cfg.field), Cell(_label(config, varying)))
            value = str(config.get(cfg.field))
            arm = Arm(value, tr.output_path, config, metrics)
            cell.starts.setdefault(value, []).append(arm)
            cell.arms.setdefault(value, arm)
        # each run's numbers on the steady state of its cell's verdict (repeated starts: manual-GC iterations out)
        self._runs = [run_row(label, tr, metrics, _repeated(cells[key])) for label, tr, metrics, key in parsed]
        rows = [row for cell in sorted(cells.values(), key=lambda c: c.label) for row in self._rows(cell)]
        if rows or self._runs:
            self._write(rows, cells)

    def _baseline(self, cell: Cell) -> str:
        return self.config.baseline if self.config.baseline in cell.arms else sorted(cell.arms)[0]

    def _rows(self, cell: Cell) -> list[dict[str, Any]]:
        cfg = self.config
        if len(cell.arms) < 2:
            (arm,) = cell.arms.values()
            return [
                {
                    "cell": cell.label,
                    "baseline": arm.value,
                    "arm": None,
                    "verdict": "unpaired",
                    "base_time_s": _sec(mean_time_ms(arm.metrics, _repeated(cell))),
                }
            ]
        if _repeated(cell):
            return self._rows_of_starts(cell)
        base = cell.arms[self._baseline(cell)]
        rows = []
        for value, arm in sorted(cell.arms.items()):
            if arm is base:
                continue
            b, a = base.metrics, arm.metrics
            bs, as_ = b.iteration_time_ms, a.iteration_time_ms  # one start per arm: manual-GC iterations kept
            bt, at = _sec(mean_time_ms(b)), _sec(mean_time_ms(a))
            diff, n = loss_equivalence(b.loss_curve, a.loss_curve, first_k=cfg.loss_first_k)
            equal_work = n > 0 and math.isfinite(diff) and diff <= cfg.loss_rtol
            gates = [f"{base.value}: {g}" for g in base.gates()] + [f"{value}: {g}" for g in arm.gates()]
            delta = None if bt in (None, 0.0) or at is None else (at - bt) / bt * 100.0
            interval = None if bt is None or at is None else delta_interval(bs, as_)
            if gates:
                verdict = "invalid: " + "; ".join(gates)
            elif not equal_work:
                verdict = "different work" if n else "work not proven (no loss to compare)"
            elif interval is None:
                verdict = "invalid: no interval (too few steady-state iterations)"
            elif interval[0] <= 0.0 <= interval[1]:
                verdict = "within noise"
            else:
                verdict = f"{value} faster" if at < bt else f"{base.value} faster" if bt < at else "tie"
            rows.append(
                {
                    "cell": cell.label,
                    "baseline": base.value,
                    "arm": value,
                    "base_time_s": bt,
                    "arm_time_s": at,
                    "delta_pct": delta,
                    "delta_ci95_pct": None if interval is None else f"{interval[0]:+.1f}..{interval[1]:+.1f}",
                    "interval_method": WELCH,
                    "verdict": verdict,
                    "base_starts": 1,
                    "arm_starts": 1,
                    "base_tflops_per_gpu": steady_tflops(b),
                    "arm_tflops_per_gpu": steady_tflops(a),
                    "base_tokens_per_s": b.tokens_per_s.mean,
                    "arm_tokens_per_s": a.tokens_per_s.mean,
                    "base_n": bs.n,
                    "arm_n": as_.n,
                    "base_stalls": bs.n_stalls,
                    "arm_stalls": as_.n_stalls,
                    "manual_gc": gc_text({*b.gc_iterations, *a.gc_iterations}, False),
                    "base_p10_p90_s": _range(bs.p10, bs.p90),
                    "arm_p10_p90_s": _range(as_.p10, as_.p90),
                    "loss_max_rel_diff": None if n == 0 else diff,
                    "loss_iterations_compared": n,
                    "arm_deep_ep_provider": a.validity.dispatcher.deep_ep_provider,
                    "base_run": str(base.run_dir),
                    "arm_run": str(arm.run_dir),
                    **split_fields([b], [a], WELCH),
                }
            )
        return rows

    def _rows_of_starts(self, cell: Cell) -> list[dict[str, Any]]:
        """A cell whose arms ran more than once: the A/B over starts (reports/ab_starts.py)."""
        cfg = self.config
        base_value = self._baseline(cell)
        base_runs = cell.starts[base_value]
        rows = []
        for value, runs in sorted(cell.starts.items()):
            if value == base_value:
                continue
            gates = [f"{a.value} {a.run_dir.name}: {g}" for a in (*base_runs, *runs) for g in a.gates()]
            machine = ab_starts.same_machine([(f"{a.value} {a.run_dir.name}",
                                               recorded_versions(a.run_dir).get("machine"))
                                              for a in (*base_runs, *runs)])
            if machine.state == "fail":
                gates.append(machine.detail)
            base_series, arm_series = [_series(a.metrics) for a in base_runs], [_series(a.metrics) for a in runs]
            boot = None if gates else ab_starts.bootstrap_delta(base_series, arm_series)
            routing = ab_starts.same_routing([(f"{a.value} {a.run_dir.name}", a.metrics.routing)
                                              for a in (*base_runs, *runs)])
            work = ab_starts.loss_envelope([a.metrics.loss_curve for a in base_runs],
                                           [a.metrics.loss_curve for a in runs], cfg.loss_rtol)
            if work.state == "unknown" and len(base_runs) == 1:  # each arm start against it, as for a pair
                worst, n = max((loss_equivalence(base_runs[0].metrics.loss_curve, a.metrics.loss_curve,
                                                 first_k=cfg.loss_first_k) for a in runs), default=(math.nan, 0))
                ok = n > 0 and math.isfinite(worst) and worst <= cfg.loss_rtol
                work = ab_starts.Gate("pass" if ok else "fail" if n else "unknown",
                                      f"max relative loss difference {worst:.2g} over the first {n} iterations")
            if gates:
                verdict = "invalid: " + "; ".join(gates)
            elif routing.state == "fail":
                verdict = "different routing"
            elif work.state == "fail":
                verdict = "different work"
            elif work.state != "pass":
                verdict = ("work not proven (baseline not repeatable)" if ab_starts.NOT_REPEATABLE in work.detail
                           else "work not proven (no loss to compare)")
            elif boot is None:
                verdict = "invalid: no steady-state time"
            elif boot[1] <= 0.0 <= boot[2]:
                verdict = "within noise"
            else:
                verdict = f"{value} faster" if boot[0] < 0 else f"{base_value} faster" if boot[0] > 0 else "tie"
            gc = sorted({i for a in (*base_runs, *runs) for i in a.metrics.gc_iterations})
            rows.append({
                "cell": cell.label,
                "baseline": base_value,
                "arm": value,
                "base_starts": len(base_runs),
                "arm_starts": len(runs),
                "base_time_s": _sec(ab_starts.arm_time(base_series)),
                "arm_time_s": _sec(ab_starts.arm_time(arm_series)),
                "delta_pct": None if boot is None else boot[0],
                "delta_ci95_pct": None if boot is None else f"{boot[1]:+.1f}..{boot[2]:+.1f}",
                "interval_method": BOOTSTRAP if min(len(base_runs), len(runs)) > 1 else BOOTSTRAP_ONE,
                "verdict": verdict,
                "routing": routing.detail,
                "work": work.detail,
                "gc_iterations_left_out": " ".join(map(str, gc)) or None,
                "manual_gc": gc_text(gc, True),
                "base_start_means_ms": " ".join(f"{sum(x) / len(x):.1f}" for x in base_series if x),
                "arm_start_means_ms": " ".join(f"{sum(x) / len(x):.1f}" for x in arm_series if x),
                "base_n": sum(map(len, base_series)),
                "arm_n": sum(map(len, arm_series)),
                "base_tflops_per_gpu": _finite_mean([steady_tflops(a.metrics, True) for a in base_runs]),
                "arm_tflops_per_gpu": _finite_mean([steady_tflops(a.metrics, True) for a in runs]),
                "base_stalls": sum(a.metrics.iteration_time_ms_no_gc.n_stalls for a in base_runs),
                "arm_stalls": sum(a.metrics.iteration_time_ms_no_gc.n_stalls for a in runs),
                "arm_deep_ep_provider": runs[0].metrics.validity.dispatcher.deep_ep_provider,
                "base_run": str(base_runs[0].run_dir),
                "arm_run": str(runs[0].run_dir),
                **split_fields([a.metrics for a in base_runs], [a.metrics for a in runs]),
            })
        return rows

    def _write(self, rows: list[dict[str, Any]], cells: dict[str, Cell]) -> None:
        import pandas as pd

        cfg = self.config
        root = self.results_root
        write_atomic(root / "mbridge_ab.csv", redact_report(pd.DataFrame(rows).to_csv(index=False)))
        write_atomic(root / "mbridge_runs.csv", redact_report(pd.DataFrame(self._runs).to_csv(index=False)))
        paired = [r for r in rows if r.get("arm") is not None]
        ordered = sorted(cells.values(), key=lambda c: c.label)
        pairs = [c for c in ordered if len(c.arms) >= 2]
        # the cells whose runs logged manual-GC iterations: True where they are left out (repeated starts)
        self._gc_out = frozenset(_repeated(c) for c in cells.values()
                                 if any(a.metrics.gc_iterations for runs in c.starts.values() for a in runs))
        sections = [self._facts]
        if self.provenance_note:
            sections.append(f"<p class='facts'><b>Where the runs come from</b>: {html.escape(self.provenance_note)} "
                            "(<a href='#provenance'>provenance</a>)</p>")
        sections.append(self._headline(rows))
        if paired and pairs:
            # a figure of 500 cells is neither readable nor quick to draw: the first FIGURE_ROWS, the tables hold all
            shown, shown_cells = paired[:FIGURE_ROWS], pairs[:FIGURE_ROWS // 2]
            png = root / "mbridge_ab_change.png"
            save(self._change_figure(shown), png)
            sections.append(f"<img src='{inline_png(png)}' alt='change by {html.escape(cfg.field)}'>")
            png = root / "mbridge_ab_times.png"
            save(self._times_figure(shown_cells, rows), png)
            sections.append(f"<img src='{inline_png(png)}' alt='time per iteration by {html.escape(cfg.field)}'>")
            if len(shown) < len(paired) or len(shown_cells) < len(pairs):
                sections.append(f"<p class='note'>The figures show the first {len(shown)} of {len(paired)} "
                                f"comparisons and {len(shown_cells)} of {len(pairs)} cells (by label); the tables "
                                "below hold every one.</p>")
        sections += self._runs_section(cells)
        methods = frozenset(str(r["interval_method"]) for r in paired if r.get("interval_method"))
        gc_out = self._gc_out
        sections.append(f"<h2>A/B by {html.escape(cfg.field)}</h2>" + self._method_note(methods))
        columns = ["cell", "baseline", "arm", "base_starts", "arm_starts", "base_time_ms", "arm_time_ms", "delta_pct",
                   "delta_ci95_pct", "interval_method", "verdict", "base_tflops_per_gpu", "arm_tflops_per_gpu",
                   "base_stalls", "arm_stalls"]
        if WELCH in methods:
            columns.append("loss_max_rel_diff")
        if methods - {WELCH}:
            columns += ["routing", "work"]
        if any(r.get("manual_gc") for r in rows):
            columns.append("manual_gc")
        classes = ["bad" if str(r["verdict"]).startswith(("invalid", "different", "work not")) else "" for r in rows]
        shown_rows = ({**r, "base_time_ms": _ms(r.get("base_time_s")), "arm_time_ms": _ms(r.get("arm_time_s"))}
                      for r in rows)
        sections.append(html_table(columns, ([r.get(c) for c in columns] for r in shown_rows), classes, HEADERS,
                                   definitions(cfg.warmup, cfg.loss_first_k, cfg.loss_rtol, methods, gc_out)))
        if paired:
            sections.append(split_section(paired, methods))
        micro = getattr(self, "_micro", [])
        if micro:
            attach_training(micro, self._training_by_arm(rows, cells))
            sections.append(dispatch_section(micro))
            write_atomic(root / "mbridge_dispatch_bench.csv", redact_report(pd.DataFrame(micro).to_csv(index=False)))
        plotted = 0
        paired_cells = sum(len(c.arms) >= 2 for c in ordered)
        for i, cell in enumerate(ordered):
            if len(cell.arms) < 2:
                continue
            if plotted == CELL_PLOTS:  # one PNG per cell took 219 s of the report at 500 cells
                sections.append(f"<p class='note'>Per-iteration plots are drawn for the first {CELL_PLOTS} of "
                                f"{paired_cells} cells; every run's iterations are in its mbridge_iterations.csv "
                                "and the tables above hold every cell.</p>")
                break
            plotted += 1
            png = root / f"mbridge_ab_cell{i}.png"
            times, losses, styles, note = _start_series(cell)
            time = time_panel("time per iteration (ms)", times, cfg.warmup)
            time.styles = styles
            gc = sorted({i for runs in cell.starts.values() for a in runs for i in a.metrics.gc_iterations})
            if gc:
                time.note = "; ".join(filter(None, [time.note, f"manual-GC iterations {' '.join(map(str, gc))} "
                                                                "drawn, left out of the means"]))
            series_plot(
                png,
                f"{cfg.field} A/B" + ("" if cell.label == "all" else f" at {cell.label}"),
                [time, Panel("lm loss (nats)", losses, note=note, styles=styles)],
                "iteration",
            )
            name = html.escape(cell.label)
            sections.append(f"<h2>Per iteration: {name}</h2><img src='{inline_png(png)}' alt='{name}'>")
        if self.list_skipped:  # the sweep points a rule rejected, with the rule
            from ..workloads.training import MBridgeTrainingTestDefinition

            sections.append(skipped_section(skipped_points(self, MBridgeTrainingTestDefinition)))
        starts = {str(a.run_dir): (k, len(arms)) for c in cells.values() for arms in c.starts.values()
                  for k, a in enumerate(arms, 1)}
        sources = [replace(src, label=f"{src.label} (start {k} of {n})") if n > 1 else src  # which start a log is
                   for src in self._sources for k, n in [starts.get(str(src.run_dir), (1, 1))]]
        prov = collect(root, sources, system=self.system.name, scenario=self.test_scenario.name,
                       elsewhere=self.provenance_elsewhere, elsewhere_source=self.provenance_source,
                       note=self.provenance_note)
        page = html_page(f"A/B by {cfg.field}: {self.test_scenario.name}", sections, prov, kind="A/B report")
        write_atomic(root / "mbridge_ab.html", redact_report(page))
        logging.info("mbridge_ab: %d pair(s) written to %s", len(paired), root / "mbridge_ab.html")

    def _method_note(self, methods: frozenset[str]) -> str:
        """The text under "A/B by <field>": the steady state, and the interval methods of this page's rows only."""
        cfg = self.config
        e = html.escape
        text = {
            WELCH: (f"<b>{WELCH}</b> (a cell whose arms ran once each): Welch's 95 % interval for the difference of "
                    "the two steady-state means, over the per-iteration times, as a share of the baseline's mean. It "
                    "treats iterations as independent and sees one start per arm: it covers the noise within a run, "
                    "not between job starts or machines. Work: the max relative lm-loss difference over the first "
                    f"{cfg.loss_first_k} iterations must stay within {cfg.loss_rtol:g}."),
            BOOTSTRAP: (f"<b>{BOOTSTRAP}</b> (a cell run more than once, a fresh process per start): an arm's time "
                        "is the mean of its starts' means; the 95 % interval is a two-level bootstrap "
                        f"({ab_starts.RESAMPLES} draws, fixed seed, percentile interval): starts drawn with "
                        "replacement within each arm, then iterations with replacement within each drawn start. It "
                        "covers the noise between starts and between iterations on one machine (a cell pools the "
                        "starts of one machine only), not between machines."),
            BOOTSTRAP_ONE: (f"<b>{BOOTSTRAP_ONE}</b>: the same bootstrap where one arm ran once: that arm's "
                            "start-to-start noise is not in the interval, which is narrower than the truth."),
        }
        used = [m for m in (WELCH, BOOTSTRAP, BOOTSTRAP_ONE) if m in methods]
        intro = (f"<p class='note'>Pairs differ only in <b>{e(cfg.field)}</b>. Every time, TFLOP/s and tokens/s on "
                 f"this page is a mean over the steady state: {e(steady_text(cfg.warmup, set(self._gc_out)))}. All "
                 "times are in ms. A winner only when the 95 % interval of the change excludes 0.")
        if not used:
            return intro + "</p>"
        gates = ""
        if methods - {WELCH}:
            gates = ("<p class='note'>A cell run more than once passes two gates besides. Same routing: the "
                     "routers' per-step hashes agree in every run of the cell. "
                     "Same work: every start's lm loss stays inside the baseline starts' envelope up to the "
                     "baseline's reproducible horizon, the last iteration at which each baseline start is still "
                     "inside the others' envelope (the baseline against itself is the yardstick; past the horizon "
                     "the baseline's own starts drift apart)"
                     + (f"; with one baseline start, each arm start's max relative lm-loss difference against it over "
                        f"the first {cfg.loss_first_k} iterations must stay within {cfg.loss_rtol:g}"
                        if BOOTSTRAP_ONE in methods else "") + ".</p>")
        if len(used) == 1:
            return f"{intro} The interval: {text[used[0]]}</p>{gates}"
        items = "".join(f"<li>{text[m]}</li>" for m in used)
        return (f"{intro} Each row names the method of its interval (column <i>interval method</i>):</p>"
                f"<ul class='note'>{items}</ul>{gates}")

    def _training_by_arm(self, rows: list[dict[str, Any]],
                         cells: dict[str, Cell]) -> dict[tuple[str, int, str], dict[str, Any]]:
        """(model name, mbs, arm) -> that arm's A/B row against the alltoall baseline, for the microbenchmark's
        table; only for an A/B by dispatcher, and only cells whose model and mbs say which shapes they ran."""
        if self.config.field != "dispatcher":
            return {}
        out = {}
        for cell in cells.values():
            config = next(iter(cell.arms.values())).config
            model = config.get("model")
            name = model.get("name") if isinstance(model, dict) else model
            mbs = config.get("mbs")
            for r in rows:
                if r.get("cell") == cell.label and r.get("arm") and r.get("baseline") == "alltoall":
                    out[(name, mbs, r["arm"])] = r
        return out

    def _headline(self, rows: list[dict[str, Any]]) -> str:
        """What won, by how much, how sure; which runs failed and why."""
        e = html.escape
        items = []
        for r in rows:
            where = f"<b>{e(str(r['cell']))}</b>"
            verdict = str(r["verdict"])
            if r.get("arm") is None:
                badge = verdict_badge("unpaired: no comparison", "none")
                items.append(f"{where}: only {e(str(r['baseline']))} ran {badge}")
                continue
            change = ""
            if r.get("delta_pct") is not None:
                change = (f"{e(str(r['arm']))} vs {e(str(r['baseline']))}: {r['delta_pct']:+.1f} % time per "
                          f"iteration")
                if r.get("delta_ci95_pct"):
                    method = str(r.get("interval_method") or WELCH)
                    gc = f" (manual-GC iterations {r['manual_gc']})" if r.get("manual_gc") else ""
                    change += (f" (95 % interval {e(r['delta_ci95_pct'])} %; n = {r.get('base_starts', 1)} + "
                               f"{r.get('arm_starts', 1)} starts, {r['base_n']} + {r['arm_n']} steady-state "
                               f"iterations{e(gc)}; {e(method)}, covering {e(COVERS.get(method, ''))})")
            if verdict.startswith("invalid"):
                badge = verdict_badge("not compared: invalid", "bad")
                change = e(verdict.removeprefix("invalid: "))
            elif verdict == "different work" or verdict.startswith("work not proven"):
                badge = verdict_badge(f"not compared: {verdict}", "bad")
            elif verdict == "within noise":
                badge = verdict_badge("no winner: within noise", "warn")
            elif verdict == "tie":
                badge = verdict_badge("tie", "none")
            else:
                badge = verdict_badge(verdict, "ok")
            items.append(f"{where}: {badge} {change}")
        failed = [r for r in self._runs if not str(r["status"]).startswith("ok") or r.get("golden") == "breached"]
        if failed:
            why = "".join(f"<br>{e(str(r['point']))}: {e(str(r['failure'] or r['status']))}" for r in failed)
            items.append(f"{verdict_badge(f'{len(failed)} of {len(self._runs)} runs failed', 'bad')}"
                         f"<span class='note'>{why}</span>")
        else:
            items.append(verdict_badge(f"all {len(self._runs)} runs finished", "ok"))
        return headline(f"Verdict by {self.config.field}", items)

    def _change_figure(self, paired: list[dict[str, Any]]) -> Any:
        """The change of each compared arm against its baseline with the 95 % interval: what won, by how much."""
        out = []
        for r in paired:
            verdict = str(r["verdict"])
            label = f"{r['cell']}\n{r['arm']} vs {r['baseline']}"
            interval = _interval(r.get("delta_ci95_pct"))
            if verdict.startswith(("invalid", "different", "work not")) or r.get("delta_pct") is None:
                out.append(ChangeRow(label, None, note="not compared: " + verdict.removeprefix("invalid: ")))
                continue
            level = "warn" if verdict == "within noise" else "none" if verdict == "tie" else "ok"
            out.append(ChangeRow(label, r["delta_pct"], interval, level))
        return change_figure(
            f"Change in time per iteration against the baseline, by {self.config.field}\n(dot: change of the "
            "steady-state means; whisker: its 95 % interval; left of 0 = the arm is faster)",
            "change in time per iteration (%)", out)

    def _times_figure(self, pairs: list[Cell], rows: list[dict[str, Any]]) -> Any:
        """One row per arm of each pair: mean, its 95 % interval, every steady-state iteration as a dot; the winner
        green; an arm whose gates fail shows why instead of a bar (its time measures something else)."""
        cfg = self.config
        plotted = []
        repeated = False
        for c in pairs:
            verdicts = [str(r["verdict"]) for r in rows if r["cell"] == c.label]
            for value, arm in sorted(c.arms.items(), key=lambda kv: kv[0] != self._baseline(c)):
                m = arm.metrics
                label = f"{c.label}\n{cfg.field}={value}" + (" (baseline)" if value == self._baseline(c) else "")
                starts = c.starts.get(value, [arm])
                if _repeated(c):
                    repeated = True
                    gates = [g for a in starts for g in a.gates()]
                    series = [_series(a.metrics) for a in starts]
                    mean = ab_starts.arm_time(series)
                    if gates or mean is None:
                        plotted.append(RangeRow(label, None, note="not compared: " + "; ".join(gates or ["no time"]),
                                                group=c.label))
                        continue
                    iv = ab_starts.bootstrap_mean(series)
                    plotted.append(RangeRow(f"{label}\n{len(starts)} starts", mean, iv, [t for x in series for t in x],
                                            best=f"{value} faster" in verdicts, group=c.label))
                    continue
                gates = arm.gates()
                mean = mean_time_ms(m)
                if gates or mean is None:
                    plotted.append(RangeRow(label, None, note="not compared: " + "; ".join(gates or ["no time"]),
                                            group=c.label))
                    continue
                iv = mean_interval(m.iteration_time_ms)  # one start per arm: manual-GC iterations kept
                points = [r.elapsed_ms for r in steady_records(m) if r.elapsed_ms and math.isfinite(r.elapsed_ms)]
                plotted.append(RangeRow(label, mean, iv, points, best=f"{value} faster" in verdicts, group=c.label))
        gc = {_repeated(c) for c in pairs if any(a.metrics.gc_iterations for v in c.starts.values() for a in v)}
        steady = f"after {cfg.warmup} warm-up iterations" + {
            frozenset({True}): ", manual-GC iterations left out", frozenset({False}): ", manual-GC iterations kept",
            frozenset({True, False}): ", manual-GC iterations left out where a row says its starts, kept elsewhere",
        }.get(frozenset(gc), "")
        single = any(not _repeated(c) for c in pairs)
        title = (f"Steady-state time per iteration by {cfg.field}\n(dot: mean {steady};\nwhisker: 95 % interval of "
                 "the mean (Student's t over the iterations); ticks: each iteration)")
        if repeated and not single:
            title = (f"Steady-state time per iteration by {cfg.field}\n(dot: mean of the starts' means, {steady};\n"
                     "whisker: 95 % bootstrap interval over starts and iterations; ticks: each iteration of every "
                     "start)")
        elif repeated:
            title = (f"Steady-state time per iteration by {cfg.field}\n(dot: mean {steady}, of the starts' means "
                     "where a row says its starts;\nwhisker: 95 % interval of the mean, a bootstrap over starts and "
                     "iterations there, Student's t over the iterations elsewhere; ticks: each iteration)")
        return range_figure(
            title,
            "time per iteration (ms)",
            plotted,
            best_label="winner (interval of the change excludes 0)",
            spread_label="95 % interval of the mean",
            points_label="each steady-state iteration",
            other_label="no win (baseline, or no winner)",
            bars=False,
        )

    def _runs_section(self, cells: dict[str, Cell]) -> list[str]:
        runs = self._runs
        if not runs:
            return []
        cfg = self.config
        columns = ["point", "status", "failure", "engine", "iter_ms", "tflops_per_gpu", "mfu_pct",
                   "tokens_per_s_per_gpu", "gpu_hours", "peak_mem_gb"]
        starts = {str(a.run_dir): f"{k} of {len(arms)}" for c in cells.values() for arms in c.starts.values()
                  for k, a in enumerate(arms, 1)}
        if any(len(arms) > 1 for c in cells.values() for arms in c.starts.values()):
            columns.insert(1, "start")
        if any(r.get("manual_gc") for r in runs):
            columns.append("manual_gc")
        if any(r["golden"] is not None for r in runs):
            columns.append("golden")
        classes = ["" if r["status"] == "ok" or r["status"] == "ok, golden met" else "bad" for r in runs]
        shown = ({**r, "start": starts.get(r["run"])} for r in runs)
        return [
            "<h2>Runs</h2><p>One row per run. Time, TFLOP/s, MFU and tokens/s are means over the steady state of "
            "the run's cell, as its verdict: " + html.escape(steady_text(cfg.warmup, set(self._gc_out))) + ". A "
            "failed point shows the class of the failure, the rank and the first error line of that rank.</p>",
            html_table(columns, ([r.get(c) for c in columns] for r in shown), classes, HEADERS,
                       definitions(cfg.warmup, cfg.loss_first_k, cfg.loss_rtol, gc_out=self._gc_out)),
        ]


SPLIT_HEADERS = {
    "cell": "cell", "arm": "arm", "time_split": "dispatcher times",
    "base_dispatch_ms": "baseline dispatch (ms)", "arm_dispatch_ms": "arm dispatch (ms)",
    "base_combine_ms": "baseline combine (ms)", "arm_combine_ms": "arm combine (ms)",
    "dispatch_delta_pct": "dispatch change (%)", "dispatch_ci95_pct": "dispatch 95 % interval (%)",
    "combine_delta_pct": "combine change (%)", "combine_ci95_pct": "combine 95 % interval (%)",
    "rest_delta_pct": "rest change (%)", "rest_ci95_pct": "rest 95 % interval (%)",
}
def split_definitions(methods: frozenset[str]) -> dict[str, str]:
    """What every column of "Where the time went" holds; the interval's words name only the methods of the rows."""
    how = {BOOTSTRAP: "for a cell run more than once the bootstrap over starts then iterations of its verdict (an "
                      "iteration's three numbers drawn together)",
           BOOTSTRAP_ONE: "for a cell with one start on a side the same bootstrap as its verdict",
           WELCH: "for a cell run once per arm Welch's interval over the iterations, as its verdict"}
    interval = "95 % interval of that change: " + "; ".join(how[m] for m in sorted(methods) if m in how)
    part = ("the arm's {0} time minus the baseline's, as % of the baseline's iteration time (dispatch + combine + "
            "rest add up to the A/B's change)")
    return {
        "cell": "the settings both arms share (the A/B table's cell)",
        "arm": "the compared arm; its baseline is the A/B table's",
        "time_split": "\"recorded\" when every start of both arms logged the time inside the MoE token dispatcher per "
                      "iteration (payload/train/dispatch_timing.py); \"not recorded\" for runs of a payload without "
                      "it, with how many starts lack it",
        "base_dispatch_ms": "the baseline's time inside dispatch per iteration, summed over the MoE layers: the "
                            "forward dispatch_preprocess, token_dispatch and dispatch_postprocess and the backward of "
                            "token_dispatch; the mean over starts of each start's steady-state mean (rank 0 and the "
                            "last rank averaged)",
        "arm_dispatch_ms": "the same for the arm",
        "base_combine_ms": "the baseline's time inside combine per iteration: combine_preprocess, token_combine, "
                           "combine_postprocess and token_combine's backward, as dispatch",
        "arm_combine_ms": "the same for the arm",
        "dispatch_delta_pct": part.format("dispatch"),
        "dispatch_ci95_pct": interval,
        "combine_delta_pct": part.format("combine"),
        "combine_ci95_pct": interval,
        "rest_delta_pct": part.format("rest-of-iteration") + "; the rest is everything else in the iteration: "
                          "experts, attention, the optimizer, the backward of the permutations",
        "rest_ci95_pct": interval,
    }


def split_section(rows: list[dict[str, Any]], methods: frozenset[str]) -> str:
    """Where each arm's change went: dispatch, combine and the rest, each with its interval, or "not recorded"."""
    columns = list(SPLIT_HEADERS)
    recorded = sum(r.get("time_split") == "recorded" for r in rows)
    note = ("<p class='note'>Each arm's change split into the time inside the token dispatcher's dispatch and combine "
            "and the rest of the iteration, each as a share of the baseline's iteration time. "
            f"{recorded} of {len(rows)} comparisons carry dispatcher times; the others read "
            f"\"{NOT_RECORDED}\", with why: a start failed, or its payload did not time the dispatcher.</p>")
    return ("<h2>Where the time went</h2>" + note
            + html_table(columns, ([r.get(c, "" if c in SPLIT_HEADERS and r.get("time_split") != "recorded"
                                          else None) for c in columns] for r in rows),
                         None, SPLIT_HEADERS, split_definitions(methods)))


def _t975(df: float) -> float:
    """Student's t 97.5 % quantile (Cornish-Fisher expansion around the normal; 1.7 % low at df 4, < 0.2 % from
    df 10)."""
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def delta_interval(base: Stats, arm: Stats) -> tuple[float, float] | None:
    """95 % Welch interval of (arm mean - base mean) / base mean, in %; None without two values per arm."""
    if base.n < 2 or arm.n < 2 or not base.mean or base.stdev is None or arm.stdev is None:
        return None
    vb, va = base.stdev**2 / base.n, arm.stdev**2 / arm.n
    se = math.sqrt(vb + va)
    if se == 0.0:
        d = (arm.mean - base.mean) / base.mean * 100.0
        return d, d
    df = (vb + va) ** 2 / (vb**2 / (base.n - 1) + va**2 / (arm.n - 1))
    half = _t975(df) * se
    diff = arm.mean - base.mean
    return (diff - half) / base.mean * 100.0, (diff + half) / base.mean * 100.0


def _series(m: TrainingRunMetrics) -> list[float]:
    """A start's steady-state times (ms) for the A/B over starts: the manual-GC iterations left out; none when the
    log carried a damaged time or contradicts itself."""
    if no_numbers(m):
        return []
    return ab_starts.start_times(((r.iteration, r.elapsed_ms) for r in m.iterations), members(m.steady_iterations),
                                 set(m.gc_iterations))


def _split_series(m: TrainingRunMetrics, gc_out: bool = True) -> list[tuple[float, float, float]] | None:
    """A start's steady iterations (as the verdict picks them: manual-GC iterations out where starts repeat, kept in
    a cell run once) as (iteration ms, dispatch ms, combine ms), the dispatcher's times the mean over the ranks that
    logged them (rank 0 and the last rank); None when the log does not carry them for every one of those iterations
    (a payload before the timer: "not recorded")."""
    if no_numbers(m) or not m.dispatcher_ms:
        return None
    by_it: dict[int, list[tuple[float, float]]] = {}
    for (_, it), value in m.dispatcher_ms.items():
        by_it.setdefault(it, []).append(value)
    steady, gc = members(m.steady_iterations), set(m.gc_iterations) if gc_out else set()
    out = []
    for r in m.iterations:
        if r.iteration not in steady or r.iteration in gc or r.elapsed_ms is None or not math.isfinite(r.elapsed_ms):
            continue
        values = by_it.get(r.iteration)
        if not values:
            return None
        out.append((r.elapsed_ms, sum(v[0] for v in values) / len(values), sum(v[1] for v in values) / len(values)))
    return out or None


NOT_RECORDED = "not recorded"


def _welch_split(base: list[tuple[float, float, float]], arm: list[tuple[float, float, float]]
                 ) -> dict[str, tuple[float, float, float]] | None:
    """The split of a cell run once per arm, by the verdict's own method there: Welch's 95 % interval of each part's
    difference of means over the iterations, as % of the baseline's mean iteration time."""
    def part(rows: list[tuple[float, float, float]], k: int) -> list[float]:
        return [r[0] - r[1] - r[2] if k == 3 else r[k] for r in rows]

    base_t = sum(r[0] for r in base) / len(base)
    if len(base) < 2 or len(arm) < 2 or base_t == 0.0:
        return None
    out = {}
    for k, name in enumerate(ab_starts.SPLIT, 1):
        b, a = part(base, k), part(arm, k)
        mb, ma = sum(b) / len(b), sum(a) / len(a)
        vb = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / len(b)
        va = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / len(a)
        se = math.sqrt(vb + va)
        df = (vb + va) ** 2 / ((vb ** 2 / (len(b) - 1)) + (va ** 2 / (len(a) - 1))) if se > 0 else 1.0
        half = _t975(df) * se
        diff = ma - mb
        out[name] = (diff / base_t * 100.0, (diff - half) / base_t * 100.0, (diff + half) / base_t * 100.0)
    return out


def split_fields(base: list[TrainingRunMetrics], arm: list[TrainingRunMetrics], method: str = BOOTSTRAP
                 ) -> dict[str, Any]:
    """Where the arm's change went: dispatch, combine and the rest of the iteration, each as % of the baseline's
    iteration time with its 95 % interval by the verdict's own method (``method``: the bootstrap over starts,
    ab_starts.bootstrap_split, or Welch's over iterations for a cell run once); "not recorded" when a start of
    either side has no dispatcher times."""
    welch = method == WELCH
    runs = (*base, *arm)
    failed = sum(m.status in ("failed", "no_logs", "no_iterations") or no_numbers(m) for m in runs)
    if failed:  # a start that failed has no times at all: say that, not that its payload lacked the timer
        return {"time_split": f"{NOT_RECORDED} ({failed} of {len(runs)} starts failed)"}
    series = [_split_series(m, gc_out=not welch) for m in runs]
    if any(s is None for s in series):
        missing = sum(s is None for s in series)
        return {"time_split": f"{NOT_RECORDED} ({missing} of {len(series)} starts without dispatcher times)"}
    base_s, arm_s = series[:len(base)], series[len(base):]
    split = (_welch_split(base_s[0], arm_s[0]) if welch  # type: ignore[index]
             else ab_starts.bootstrap_split(base_s, arm_s))  # type: ignore[arg-type]
    if split is None:
        return {"time_split": f"{NOT_RECORDED} (no steady-state iteration)"}

    def mean_of(starts: list[Any], k: int) -> float:
        return sum(sum(it[k] for it in s) / len(s) for s in starts) / len(starts)

    out: dict[str, Any] = {"time_split": "recorded",
                           "base_dispatch_ms": mean_of(base_s, 1), "arm_dispatch_ms": mean_of(arm_s, 1),
                           "base_combine_ms": mean_of(base_s, 2), "arm_combine_ms": mean_of(arm_s, 2)}
    for name, (point, lo, hi) in split.items():
        out[f"{name}_delta_pct"] = point
        out[f"{name}_ci95_pct"] = f"{lo:+.1f}..{hi:+.1f}"
    return out


def _sec(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _ms(sec: Any) -> float | None:
    """A row's seconds (the CSV's unit) as the page's ms."""
    return sec * 1000.0 if isinstance(sec, (int, float)) and not isinstance(sec, bool) else None


def _interval(text: Any) -> tuple[float, float] | None:
    """``-4.8..+2.5`` (the table's form) back to numbers; None when absent."""
    if not isinstance(text, str) or ".." not in text:
        return None
    lo, hi = text.split("..", 1)
    try:
        return float(lo), float(hi)
    except ValueError:
        return None


def _range(lo: float | None, hi: float | None) -> str | None:
    return None if lo is None or hi is None else f"{lo / 1000:.3f}-{hi / 1000:.3f}"
