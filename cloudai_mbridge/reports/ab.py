"""Scenario report: pair training runs that differ only in one field (the dispatcher by default) and compare them.

Per cell (the other fields that vary across the sweep): both arms' steady-state iteration time, the delta with its
95 % interval, the winner, TFLOP/s, stalls, validity gates, and work-equivalence from the per-iteration loss of both
arms (max relative difference over the first K iterations; seed 000 saw <= 4.1e-4 in bf16). A cell whose arms did
different work, or whose gates fail, is flagged and never gets a winner; neither does one whose delta interval
contains 0 ("within noise").

The interval is Welch's for the difference of the two steady-state means, over the per-iteration times, as a share
of the baseline mean. It treats iterations as independent and sees one run per arm, so it captures the noise within
a run, not between machines or job starts: a delta outside it is necessary for a winner, not sufficient.
"""

from __future__ import annotations

import html
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudai.core import Reporter
from cloudai.models.scenario import ReportConfig
from pydantic import Field, field_validator

from ..atomic import write_atomic
from ..metrics import Stats, TrainingRunMetrics, loss_equivalence, parse_training_run
from ..metrics.training import config_int
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

# Keys that describe where/when a run happened or what we predicted, not the work it did.
VOLATILE_KEYS = frozenset({"output_dir", "memory_estimate_bytes", "memory"})


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
    "base_time_s": "baseline time per iteration (s)",
    "arm_time_s": "arm time per iteration (s)",
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
    "gc_iterations_left_out": "manual-GC iterations left out",
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


def mean_time_ms(m: TrainingRunMetrics) -> float | None:
    """The steady-state mean time per iteration, or None when the log carried a damaged time or contradicts itself
    (never a number)."""
    return None if no_numbers(m) else m.iteration_time_ms.mean


def no_numbers(m: TrainingRunMetrics) -> bool:
    """The log's times are no measurement: a damaged time, or a log that contradicts itself (inconsistent_log)."""
    return bool(m.time_errors or m.inconsistencies)


def run_row(label: str, tr: Any, m: TrainingRunMetrics) -> dict[str, Any]:
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
        "iter_ms": mean_time_ms(m),
        "tflops_per_gpu": None if no_numbers(m) else m.tflops_per_gpu.mean,
        "mfu_pct": None if no_numbers(m) else m.mfu_pct,
        "tokens_per_s_per_gpu": None if no_numbers(m) else m.tokens_per_s_per_gpu,
        "gpu_hours": None if no_numbers(m) else m.gpu_hours,
        "peak_mem_gb": None if m.peak_allocated_bytes is None else m.peak_allocated_bytes / 1e9,
        "golden": None if golden is None else ("met" if golden.passed else "breached"),
        "title": run_title(m.config),
        "run": str(tr.output_path),
    }


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
        for tr, config in found:
            metrics = parse_training_run(tr.output_path, warmup=cfg.warmup)
            label = _label(config, all_varying) if all_varying else run_title(config)
            self._runs.append(run_row(label, tr, metrics))
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
                    "base_time_s": _sec(mean_time_ms(arm.metrics)),
                }
            ]
        if any(len(runs) > 1 for runs in cell.starts.values()):
            return self._rows_of_starts(cell)
        base = cell.arms[self._baseline(cell)]
        rows = []
        for value, arm in sorted(cell.arms.items()):
            if arm is base:
                continue
            b, a = base.metrics, arm.metrics
            bt, at = _sec(mean_time_ms(b)), _sec(mean_time_ms(a))
            diff, n = loss_equivalence(b.loss_curve, a.loss_curve, first_k=cfg.loss_first_k)
            equal_work = n > 0 and math.isfinite(diff) and diff <= cfg.loss_rtol
            gates = [f"{base.value}: {g}" for g in base.gates()] + [f"{value}: {g}" for g in arm.gates()]
            delta = None if bt in (None, 0.0) or at is None else (at - bt) / bt * 100.0
            interval = None if bt is None or at is None else delta_interval(b.iteration_time_ms, a.iteration_time_ms)
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
                    "verdict": verdict,
                    "base_tflops_per_gpu": b.tflops_per_gpu.mean,
                    "arm_tflops_per_gpu": a.tflops_per_gpu.mean,
                    "base_tokens_per_s": b.tokens_per_s.mean,
                    "arm_tokens_per_s": a.tokens_per_s.mean,
                    "base_n": b.iteration_time_ms.n,
                    "arm_n": a.iteration_time_ms.n,
                    "base_stalls": b.iteration_time_ms.n_stalls,
                    "arm_stalls": a.iteration_time_ms.n_stalls,
                    "base_p10_p90_s": _range(b.iteration_time_ms.p10, b.iteration_time_ms.p90),
                    "arm_p10_p90_s": _range(a.iteration_time_ms.p10, a.iteration_time_ms.p90),
                    "loss_max_rel_diff": None if n == 0 else diff,
                    "loss_iterations_compared": n,
                    "arm_deep_ep_provider": a.validity.dispatcher.deep_ep_provider,
                    "base_run": str(base.run_dir),
                    "arm_run": str(arm.run_dir),
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
                "interval_method": (f"bootstrap over starts and iterations ({ab_starts.RESAMPLES} draws)"
                                    if min(len(base_runs), len(runs)) > 1 else
                                    "bootstrap; one start on a side: its start-to-start noise is not in the interval"),
                "verdict": verdict,
                "routing": routing.detail,
                "work": work.detail,
                "gc_iterations_left_out": " ".join(map(str, gc)) or None,
                "base_start_means_ms": " ".join(f"{sum(x) / len(x):.1f}" for x in base_series if x),
                "arm_start_means_ms": " ".join(f"{sum(x) / len(x):.1f}" for x in arm_series if x),
                "base_n": sum(map(len, base_series)),
                "arm_n": sum(map(len, arm_series)),
                "base_tflops_per_gpu": base_runs[0].metrics.tflops_per_gpu.mean,
                "arm_tflops_per_gpu": runs[0].metrics.tflops_per_gpu.mean,
                "arm_deep_ep_provider": runs[0].metrics.validity.dispatcher.deep_ep_provider,
                "base_run": str(base_runs[0].run_dir),
                "arm_run": str(runs[0].run_dir),
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
        sections = [self._facts, self._headline(rows)]
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
        sections += self._runs_section()
        sections.append(
            f"<h2>A/B by {html.escape(cfg.field)}</h2>"
            f"<p class='note'>Pairs differ only in <b>{html.escape(cfg.field)}</b>; times are steady-state means over "
            f"the iterations after the first {cfg.warmup}; the change's 95 % interval is Welch's over the "
            "per-iteration times (noise within a run, not between job starts). A winner only when the interval "
            f"excludes 0. Work-equivalence: max relative lm-loss difference over the first {cfg.loss_first_k} "
            f"iterations, flagged above {cfg.loss_rtol:g}.</p>"
        )
        if any("arm_starts" in r for r in rows):
            sections.append(
                "<p class='note'>Cells run more than once (a fresh process per start): an arm's time is the mean of "
                "its starts' steady-state means, without the iterations that carry Bridge's manual garbage "
                "collection; the 95 % interval is a bootstrap over starts, then iterations within each start. Same "
                "routing: the routers' per-step hashes agree in every run of the cell. Same work: every start's lm "
                "loss stays inside the baseline starts' envelope up to the baseline's reproducible horizon, the last "
                "iteration at which each baseline start is still inside the others' envelope (the baseline against "
                "itself is the yardstick; past the horizon the baseline's own starts drift apart).</p>"
            )
        columns = [
            "cell",
            "baseline",
            "arm",
            "base_time_s",
            "arm_time_s",
            "delta_pct",
            "delta_ci95_pct",
            "verdict",
            "base_tflops_per_gpu",
            "arm_tflops_per_gpu",
            "base_stalls",
            "arm_stalls",
            "loss_max_rel_diff",
        ]
        if any("arm_starts" in r for r in rows):
            columns += ["base_starts", "arm_starts", "routing", "work", "gc_iterations_left_out"]
        classes = ["bad" if str(r["verdict"]).startswith(("invalid", "different", "work not")) else "" for r in rows]
        sections.append(html_table(columns, ([r.get(c) for c in columns] for r in rows), classes, HEADERS))
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
        prov = collect(root, self._sources, system=self.system.name, scenario=self.test_scenario.name,
                       elsewhere=self.provenance_elsewhere, elsewhere_source=self.provenance_source)
        page = html_page(f"A/B by {cfg.field}: {self.test_scenario.name}", sections, prov, kind="A/B report")
        write_atomic(root / "mbridge_ab.html", redact_report(page))
        logging.info("mbridge_ab: %d pair(s) written to %s", len(paired), root / "mbridge_ab.html")

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
                    change += (f" (95 % interval {e(r['delta_ci95_pct'])} %, n = {r['base_n']} + {r['arm_n']} "
                               "iterations)")
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
                if any(len(v) > 1 for v in c.starts.values()):
                    repeated = True
                    gates = [g for a in starts for g in a.gates()]
                    series = [_series(a.metrics) for a in starts]
                    mean = _sec(ab_starts.arm_time(series))
                    if gates or mean is None:
                        plotted.append(RangeRow(label, None, note="not compared: " + "; ".join(gates or ["no time"]),
                                                group=c.label))
                        continue
                    iv = ab_starts.bootstrap_mean(series)
                    plotted.append(RangeRow(f"{label}\n{len(starts)} starts", mean,
                                            None if iv is None else (iv[0] / 1000.0, iv[1] / 1000.0),
                                            [t / 1000.0 for x in series for t in x],
                                            best=f"{value} faster" in verdicts, group=c.label))
                    continue
                gates = arm.gates()
                mean = _sec(mean_time_ms(m))
                if gates or mean is None:
                    plotted.append(RangeRow(label, None, note="not compared: " + "; ".join(gates or ["no time"]),
                                            group=c.label))
                    continue
                iv = mean_interval(m.iteration_time_ms)
                steady = set(m.steady_iterations)
                points = [r.elapsed_ms / 1000.0 for r in m.iterations if r.iteration in steady and r.elapsed_ms]
                plotted.append(RangeRow(label, mean, None if iv is None else (iv[0] / 1000.0, iv[1] / 1000.0),
                                        points, best=f"{value} faster" in verdicts, group=c.label))
        title = (f"Steady-state time per iteration by {cfg.field}\n(bar: mean after {cfg.warmup} warm-up iterations; "
                 "whisker: its 95 % interval; ticks: each iteration)")
        if repeated:
            title = (f"Steady-state time per iteration by {cfg.field}\n(bar: mean of the starts' means, manual-GC "
                     "iterations left out;\nwhisker: 95 % bootstrap interval; ticks: each iteration of every start)")
        return range_figure(
            title,
            "time per iteration (s)",
            plotted,
            best_label="winner (interval of the change excludes 0)",
            spread_label="95 % interval of the mean",
            points_label="each steady-state iteration",
            other_label="no win (baseline, or no winner)",
        )

    def _runs_section(self) -> list[str]:
        runs = self._runs
        if not runs:
            return []
        columns = ["point", "status", "failure", "engine", "iter_ms", "tflops_per_gpu", "mfu_pct",
                   "tokens_per_s_per_gpu", "gpu_hours", "peak_mem_gb"]
        if any(r["golden"] is not None for r in runs):
            columns.append("golden")
        classes = ["" if r["status"] == "ok" or r["status"] == "ok, golden met" else "bad" for r in runs]
        return [
            "<h2>Runs</h2><p>One row per sweep point. Time, TFLOP/s and tokens/s are steady-state means (after the "
            f"first {self.config.warmup} iterations); MFU is the logged model TFLOP/s per GPU over the GPU's dense "
            "BF16 peak (fp8 runs too); GPU-hours count the logged iterations only; memory is the largest "
            "<i>max allocated</i> of any rank (GB = 10<sup>9</sup> bytes). A failed point shows the class of the "
            "failure, the rank and the first error line of that rank.</p>",
            html_table(columns, ([r.get(c) for c in columns] for r in runs), classes, HEADERS),
        ]


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
    return ab_starts.start_times([(r.iteration, r.elapsed_ms) for r in m.iterations], set(m.steady_iterations),
                                 set(m.gc_iterations))


def _sec(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


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
