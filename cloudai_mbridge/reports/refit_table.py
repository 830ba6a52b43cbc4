"""Scenario report: one row per refit mapping (source layout -> destination layout) with its time range, bandwidth
and verification result, like seed 001's table. A run that failed verification shows no time."""

from __future__ import annotations

import logging
from typing import Any

from cloudai.core import Reporter

from ..launch.payload import write_atomic
from ..metrics import parse_refit_run
from .common import (
    TolerantLoading,
    html_page,
    html_table,
    runs_of,
    scenario_facts,
    skipped_points,
    skipped_section,
)
from .plots import bar_plot, inline_png

HEADERS = {
    "mapping": "mapping (training → inference layout)",
    "mode": "mode",
    "transport": "transport",
    "ranks": "ranks",
    "layers": "layers",
    "time_ms_min": "min time (ms)",
    "time_ms_median": "median time (ms)",
    "time_ms_max": "max time (ms)",
    "n": "timed refits",
    "bandwidth_gbps": "bandwidth (GB/s)",
    "verification": "verification",
    "status": "status",
    "failure": "failure: class, rank, first error line",
}


def layout_name(side: dict[str, Any]) -> str:
    parts = [f"{k.upper()}{side[k]}" for k in ("tp", "pp", "ep") if side.get(k, 1) != 1]
    etp = side.get("etp")
    if etp not in (None, side.get("tp")):
        parts.append(f"ETP{etp}")
    return "x".join(parts) or "TP1"


class MBridgeRefitTable(TolerantLoading, Reporter):
    """Writes ``mbridge_refit.csv`` and ``mbridge_refit.html`` into the scenario's results folder."""

    def generate(self) -> None:
        from ..workloads.refit import MBridgeRefitTestDefinition

        rows = []
        for tr, config in runs_of(self, MBridgeRefitTestDefinition):
            m = parse_refit_run(tr.output_path)
            # A damaged REFIT_ITER time makes the whole run's times unusable: the row stays, without a time.
            verified = m.verify is not None and m.verify.status == "pass" and not m.time_errors
            t = m.time_ms
            rows.append(
                {
                    "test": tr.name,
                    "step": tr.step,
                    "model": config["model"]["name"],
                    "layers": config["model"]["num_layers"],
                    "mapping": f"{layout_name(config['src'])} → {layout_name(config['dst'])}",
                    "mode": config["mode"],
                    "transport": config["transport"] + (f" ({config['coalesce_mib']} MiB messages)"
                                                        if config.get("coalesce_mib") else ""),
                    "ranks": m.world_size,
                    "time_ms_min": t.min if verified else None,
                    "time_ms_median": t.median if verified else None,
                    "time_ms_max": t.max if verified else None,
                    "n": t.n if verified else 0,
                    "bandwidth_gbps": m.bandwidth_gbps if verified else None,
                    "bytes_moved": None if m.bytes_remote is None else m.bytes_remote + (m.bytes_local or 0),
                    "verification": m.verify.status if m.verify else "missing",
                    "mismatched": m.verify.mismatched if m.verify else None,
                    "status": m.status,
                    "failure": _failure(m),
                    "precision": config.get("dtype"),
                    "run": str(tr.output_path),
                }
            )
        if not rows:
            return
        import pandas as pd

        root = self.results_root
        write_atomic(root / "mbridge_refit.csv", pd.DataFrame(rows).to_csv(index=False))
        columns = [
            "mapping",
            "mode",
            "transport",
            "ranks",
            "layers",
            "time_ms_min",
            "time_ms_median",
            "time_ms_max",
            "n",
            "bandwidth_gbps",
            "verification",
            "status",
            "failure",
        ]
        classes = ["" if r["verification"] == "pass" and r["status"] == "ok" else "bad" for r in rows]
        sections = [
            "<p>Time per refit (megatron.core.resharding.swap_model_weights) over the timed iterations, "
            "after warm-up; bandwidth = bytes moved / median time (GB = 1e9 bytes). Rows in red failed "
            "verification or did not finish: they carry no time.</p>",
            html_table(columns, ([r[c] for c in columns] for r in rows), classes, HEADERS),
        ]
        sections.append(skipped_section(skipped_points(self, MBridgeRefitTestDefinition)))
        sections.insert(0, scenario_facts([{"model": r["model"], "precision": r["precision"]} for r in rows],
                                          ["model", "precision"]))
        good = [r for r in rows if r["time_ms_median"] is not None]
        if good:
            png = root / "mbridge_refit.png"
            bar_plot(
                png,
                "Refit time per mapping: median, error bars min to max",
                "refit time (ms)",
                [f"{r['mapping']} {r['mode']}\n{r['transport']}" for r in good],
                {"median": [r["time_ms_median"] for r in good]},
                {"median": [(r["time_ms_min"], r["time_ms_max"]) for r in good]},
                xlabel="mapping (training → inference layout), mode, transport",
            )
            sections.append(f"<img src='{inline_png(png)}' alt='refit time per mapping'>")
        write_atomic(root / "mbridge_refit.html", html_page(f"Refit: {self.test_scenario.name}", sections))
        logging.info("mbridge_refit: %d row(s) written to %s", len(rows), root / "mbridge_refit.html")


def _failure(m: Any) -> str | None:
    first = m.failure.first
    if first is None:
        return f"damaged log, no time is used: {'; '.join(m.time_errors)}"[:300] if m.time_errors else None
    rank = f" on rank {first.rank}" if first.rank is not None else ""
    return f"{m.failure.reason()['failure_class']}{rank}: {first.detail[:160]}"
