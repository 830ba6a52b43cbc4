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

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cloudai.core import Reporter
from cloudai.models.scenario import ReportConfig
from pydantic import Field

from ..launch.payload import write_atomic
from ..metrics import Stats, TrainingRunMetrics, loss_equivalence, parse_training_run
from .common import html_page, html_table, runs_of
from .plots import bar_plot, inline_png, series_plot

# Keys that describe where/when a run happened or what we predicted, not the work it did.
VOLATILE_KEYS = frozenset({"output_dir", "memory_estimate_bytes"})


class ABReportConfig(ReportConfig):
    enable: bool = True
    field: str = "dispatcher"
    baseline: str | None = Field(default="alltoall", description="arm the others are compared with")
    warmup: int = Field(default=4, ge=0, description="iterations dropped before the statistics")
    loss_first_k: int = Field(default=10, ge=1, description="iterations whose loss must agree")
    loss_rtol: float = Field(default=1e-3, gt=0, description="max relative loss difference for equal work")


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
            problems.append(f"status {m.status}")
        d = m.validity.dispatcher
        if d.downgraded:
            problems.append(f"dispatcher downgraded ({d.wanted} -> {d.built})")
        elif self.config.get("dispatcher") in ("deepep", "hybridep") and d.downgraded is None:
            problems.append("dispatcher not proven (no MBRIDGE_DISPATCHER line)")
        multinode_efa = self.config.get("network") == "efa" and self.config.get("num_nodes", 1) > 1
        if multinode_efa and not m.validity.efa_on_all_ranks:
            problems.append("EFA not proven on every rank")
        if m.validity.nan_iterations or m.validity.nonfinite_grad_norm_iterations:
            problems.append("NaN/Inf loss or grad norm")
        if m.validity.skipped_iterations:
            problems.append(f"{m.validity.skipped_iterations} skipped iterations")
        return problems


@dataclass
class Cell:
    label: str
    arms: dict[str, Arm] = field(default_factory=dict)


def _cell_key(config: dict[str, Any], pair_field: str) -> str:
    return json.dumps({k: v for k, v in config.items() if k not in VOLATILE_KEYS and k != pair_field}, sort_keys=True)


def _label(config: dict[str, Any], varying: list[str]) -> str:
    return " ".join(f"{k}={config.get(k)}" for k in varying) or "all"


class MBridgeABReport(Reporter):
    """Writes ``mbridge_ab.csv`` and ``mbridge_ab.html`` (+ PNG plots) into the scenario's results folder."""

    config: ABReportConfig

    def generate(self) -> None:
        from ..workloads.training import MBridgeTrainingTestDefinition

        cfg = self.config
        found = runs_of(self, MBridgeTrainingTestDefinition)
        if not found:
            return
        configs = [c for _, c in found]
        keys = sorted({k for c in configs for k in c} - VOLATILE_KEYS - {cfg.field})
        varying = [k for k in keys if len({json.dumps(c.get(k), sort_keys=True) for c in configs}) > 1]
        cells: dict[str, Cell] = {}
        for tr, config in found:
            cell = cells.setdefault(_cell_key(config, cfg.field), Cell(_label(config, varying)))
            value = str(config.get(cfg.field))
            if value in cell.arms:
                logging.warning(
                    "mbridge_ab: two runs of %s=%s in cell %s; keeping the first", cfg.field, value, cell.label
                )
                continue
            metrics = parse_training_run(tr.output_path, warmup=cfg.warmup)
            cell.arms[value] = Arm(value, tr.output_path, config, metrics)
        rows = [row for cell in sorted(cells.values(), key=lambda c: c.label) for row in self._rows(cell)]
        if rows:
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
                    "base_time_s": _sec(arm.metrics.iteration_time_ms.mean),
                }
            ]
        base = cell.arms[self._baseline(cell)]
        rows = []
        for value, arm in sorted(cell.arms.items()):
            if arm is base:
                continue
            b, a = base.metrics, arm.metrics
            bt, at = _sec(b.iteration_time_ms.mean), _sec(a.iteration_time_ms.mean)
            diff, n = loss_equivalence(b.loss_curve, a.loss_curve, first_k=cfg.loss_first_k)
            equal_work = n > 0 and math.isfinite(diff) and diff <= cfg.loss_rtol
            gates = [f"{base.value}: {g}" for g in base.gates()] + [f"{value}: {g}" for g in arm.gates()]
            delta = None if bt in (None, 0.0) or at is None else (at - bt) / bt * 100.0
            interval = delta_interval(b.iteration_time_ms, a.iteration_time_ms)
            if gates:
                verdict = "invalid: " + "; ".join(gates)
            elif not equal_work:
                verdict = "different work" if n else "work not proven (no loss to compare)"
            elif interval is not None and interval[0] <= 0.0 <= interval[1]:
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

    def _write(self, rows: list[dict[str, Any]], cells: dict[str, Cell]) -> None:
        import pandas as pd

        root = self.results_root
        frame = pd.DataFrame(rows)
        write_atomic(root / "mbridge_ab.csv", frame.to_csv(index=False))
        paired = [r for r in rows if r.get("arm") is not None]
        sections = [
            f"<p>Pairs differ only in <b>{self.config.field}</b>; times are steady-state means over the "
            f"iterations after the first {self.config.warmup}. Work-equivalence: max relative lm-loss "
            f"difference over the first {self.config.loss_first_k} iterations, flagged above "
            f"{self.config.loss_rtol:g}.</p>"
        ]
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
        classes = ["bad" if str(r["verdict"]).startswith(("invalid", "different", "work not")) else "" for r in rows]
        sections.append(html_table(columns, ([r.get(c) for c in columns] for r in rows), classes))
        if paired:
            bars = root / "mbridge_ab_times.png"
            labels = [f"{r['cell']} ({r['arm']})" for r in paired]
            bar_plot(
                bars,
                "steady-state iteration time",
                "seconds",
                labels,
                {"baseline": [r["base_time_s"] for r in paired], "arm": [r["arm_time_s"] for r in paired]},
            )
            sections.append(f"<h2>Iteration time</h2><img src='{inline_png(bars)}'>")
        for i, cell in enumerate(sorted(cells.values(), key=lambda c: c.label)):
            if len(cell.arms) < 2:
                continue
            png = root / f"mbridge_ab_cell{i}.png"
            series_plot(
                png,
                cell.label,
                [
                    ("lm loss", {v: sorted(a.metrics.loss_curve.items()) for v, a in cell.arms.items()}),
                    (
                        "iteration time (ms)",
                        {
                            v: [(r.iteration, r.elapsed_ms) for r in a.metrics.iterations if r.elapsed_ms is not None]
                            for v, a in cell.arms.items()
                        },
                    ),
                ],
                "iteration",
            )
            sections.append(f"<h2>{cell.label}</h2><img src='{inline_png(png)}'>")
        write_atomic(
            root / "mbridge_ab.html", html_page(f"A/B by {self.config.field}: {self.test_scenario.name}", sections)
        )
        logging.info("mbridge_ab: %d pair(s) written to %s", len(paired), root / "mbridge_ab.html")


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


def _sec(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _range(lo: float | None, hi: float | None) -> str | None:
    return None if lo is None or hi is None else f"{lo / 1000:.3f}-{hi / 1000:.3f}"
