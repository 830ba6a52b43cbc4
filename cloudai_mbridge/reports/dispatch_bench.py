"""The dispatch microbenchmark's runs in a results folder, as rows for the A/B page: per (model, tokens per rank,
ranks, backend) the dispatch and combine latency per call and bandwidth, and the training delta of the same model,
micro-batch size and dispatcher from the A/B beside them. Only runs whose log parses whole give numbers
(metrics/dispatch_bench.py); the others are rows with their status and no number."""

from __future__ import annotations

import html
from typing import Any

from ..metrics.dispatch_bench import parse_dispatch_run
from .page import html_table

# The page's columns: times in ms like the rest of the A/B page (the CSV keeps the log's µs, *_us).
COLUMNS = ("model", "tokens_per_rank", "ranks", "backend", "status", "dispatch_median_ms", "dispatch_p10_p90_ms",
           "combine_median_ms", "combine_p10_p90_ms", "dispatch_algbw_gbps", "combine_algbw_gbps", "calls",
           "vs_alltoall_pct", "training_delta_pct", "training_verdict")
HEADERS = {
    "model": "model", "tokens_per_rank": "tokens per rank", "ranks": "ranks (ep)", "backend": "dispatcher",
    "status": "run", "dispatch_median_ms": "dispatch median (ms)", "dispatch_p10_p90_ms": "dispatch p10..p90 (ms)",
    "combine_median_ms": "combine median (ms)", "combine_p10_p90_ms": "combine p10..p90 (ms)",
    "dispatch_algbw_gbps": "dispatch algbw (GB/s)", "combine_algbw_gbps": "combine algbw (GB/s)",
    "calls": "timed calls", "vs_alltoall_pct": "dispatch + combine vs alltoall, medians (%)",
    "training_delta_pct": "training delta vs alltoall (%)", "training_verdict": "training verdict",
}
DEFINITIONS = {
    "model": "the model whose MoE layer shapes the benchmark used",
    "tokens_per_rank": "seq_length x mbs of the training runs",
    "ranks": "ranks of the expert-parallel group",
    "backend": "the token dispatcher timed",
    "status": "ok, or why the run's log gives no number",
    "dispatch_median_ms": "median over the timed calls of one dispatch (preprocess + dispatch + postprocess, the "
                          "slowest rank)",
    "dispatch_p10_p90_ms": "10th and 90th percentile of the same calls",
    "combine_median_ms": "median over the timed calls of one combine, likewise",
    "combine_p10_p90_ms": "10th and 90th percentile of the same calls",
    "dispatch_algbw_gbps": "tokens x top-k x hidden x bytes per element / dispatch median (GB = 1e9 bytes)",
    "combine_algbw_gbps": "the same bytes / combine median",
    "calls": "timed calls after the warm-up",
    "vs_alltoall_pct": "(dispatch + combine median) / alltoall's - 1, in %: a difference of medians with no "
                       "interval (the log keeps medians and percentiles, not each call), so not a ranking",
    "training_delta_pct": "the A/B's change in time per iteration for the same model, mbs and dispatcher",
    "training_verdict": "the A/B's verdict for that pair",
}


def dispatch_rows(reporter: Any) -> list[dict[str, Any]]:
    from ..workloads.dispatch_bench import MBridgeDispatchBenchTestDefinition
    from .common import runs_of

    rows = []
    for tr, config in runs_of(reporter, MBridgeDispatchBenchTestDefinition):
        backend = config.get("dispatcher")
        m = parse_dispatch_run(tr.output_path, backend if isinstance(backend, str) else None)
        try:
            tokens = int(config["seq_length"]) * int(config["mbs"])
        except (KeyError, TypeError, ValueError):
            tokens = None
        row: dict[str, Any] = {"model": config.get("model"), "mbs": config.get("mbs"), "tokens_per_rank": tokens,
                               "ranks": config.get("world_size"), "backend": backend, "status": m.status,
                               "error": m.error}
        if m.status == "ok":
            d, c = m.phases["dispatch"], m.phases["combine"]
            row.update(dispatch_median_us=d.median_us, dispatch_p10_p90_us=f"{d.p10_us:.1f}..{d.p90_us:.1f}",
                       combine_median_us=c.median_us, combine_p10_p90_us=f"{c.p10_us:.1f}..{c.p90_us:.1f}",
                       dispatch_algbw_gbps=d.algbw_gbps, combine_algbw_gbps=c.algbw_gbps, calls=d.calls,
                       dispatch_busbw_gbps=d.busbw_gbps, combine_busbw_gbps=c.busbw_gbps,
                       logical_bytes=m.bytes.get("logical_bytes"), bytes_rule=m.bytes_rule)
        rows.append(row)
    _vs_alltoall(rows)
    return sorted(rows, key=lambda r: (str(r["model"]), r["tokens_per_rank"] or 0, r["ranks"] or 0,
                                       str(r["backend"])))


def _total(row: dict[str, Any]) -> float | None:
    if row.get("dispatch_median_us") is None:
        return None
    return row["dispatch_median_us"] + row["combine_median_us"]


def _vs_alltoall(rows: list[dict[str, Any]]) -> None:
    base = {(r["model"], r["tokens_per_rank"], r["ranks"]): _total(r) for r in rows if r["backend"] == "alltoall"}
    for r in rows:
        ref, own = base.get((r["model"], r["tokens_per_rank"], r["ranks"])), _total(r)
        if r["backend"] != "alltoall" and ref and own is not None:
            r["vs_alltoall_pct"] = round((own / ref - 1.0) * 100.0, 1)


def attach_training(rows: list[dict[str, Any]], training: dict[tuple[str, int, str], dict[str, Any]]) -> None:
    """``training``: (model name, mbs, arm) -> the A/B row of that arm against alltoall."""
    for r in rows:
        t = training.get((r["model"], r["mbs"], r["backend"]))
        if t is not None:
            r["training_delta_pct"] = t.get("delta_pct")
            r["training_verdict"] = t.get("verdict")


def _in_ms(row: dict[str, Any]) -> dict[str, Any]:
    """The row's µs as ms for the page (4 decimals: the µs stay readable, 410.2 µs is 0.4102 ms)."""
    out = dict(row)
    for phase in ("dispatch", "combine"):
        median = row.get(f"{phase}_median_us")
        out[f"{phase}_median_ms"] = None if median is None else f"{median / 1000:.4f}"
        spread = row.get(f"{phase}_p10_p90_us")
        if isinstance(spread, str) and ".." in spread:
            lo, hi = spread.split("..", 1)
            try:
                out[f"{phase}_p10_p90_ms"] = f"{float(lo) / 1000:.4f}..{float(hi) / 1000:.4f}"
            except ValueError:
                out[f"{phase}_p10_p90_ms"] = None
    return out


def section(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    note = (
        "<h2>Dispatch / combine microbenchmark</h2><p class='note'>Megatron-Core's token dispatcher alone, built as "
        "the MoE layer builds it, at the training runs' shapes (hidden, top-k, experts; tokens per rank = "
        "seq_length x mbs), balanced routing, identity experts. Per call: dispatch = preprocess + dispatch + "
        "postprocess, combine likewise, each between CUDA events, the slowest rank's time, in ms; median and "
        "p10..p90 over the timed calls after warm-up. algbw = tokens x top-k x hidden x bytes per element (what a "
        "rank hands the dispatcher, the same for every backend) / median. A run whose log is damaged or cut short "
        "shows its status and no number. The training delta is the A/B's for the same model, mbs and dispatcher "
        "against alltoall.</p>"
    )
    classes = ["" if r["status"] == "ok" else "bad" for r in rows]
    table = html_table(COLUMNS, ([_in_ms(r).get(c) for c in COLUMNS] for r in rows), classes, HEADERS, DEFINITIONS)
    errors = [f"<li>{html.escape(str(r['model']))} {html.escape(str(r['backend']))}: {html.escape(str(r['status']))}"
              f" ({html.escape(str(r['error']))})</li>" for r in rows if r["status"] != "ok" and r.get("error")]
    return note + table + (f"<ul>{''.join(errors)}</ul>" if errors else "")
