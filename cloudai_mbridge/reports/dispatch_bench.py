"""The dispatch microbenchmark's runs in a results folder, as rows for the A/B page: per (model, tokens per rank,
ranks, backend) the dispatch and combine latency per call and bandwidth, and the training delta of the same model,
micro-batch size and dispatcher from the A/B beside them. Only runs whose log parses whole give numbers
(metrics/dispatch_bench.py); the others are rows with their status and no number."""

from __future__ import annotations

import html
from typing import Any

from ..metrics.dispatch_bench import parse_dispatch_run
from .page import html_table

COLUMNS = ("model", "tokens_per_rank", "ranks", "backend", "status", "dispatch_median_us", "dispatch_p10_p90_us",
           "combine_median_us", "combine_p10_p90_us", "dispatch_algbw_gbps", "combine_algbw_gbps", "calls",
           "vs_alltoall_pct", "training_delta_pct", "training_verdict")
HEADERS = {
    "model": "model", "tokens_per_rank": "tokens per rank", "ranks": "ranks (ep)", "backend": "dispatcher",
    "status": "run", "dispatch_median_us": "dispatch median (µs)", "dispatch_p10_p90_us": "dispatch p10..p90 (µs)",
    "combine_median_us": "combine median (µs)", "combine_p10_p90_us": "combine p10..p90 (µs)",
    "dispatch_algbw_gbps": "dispatch algbw (GB/s)", "combine_algbw_gbps": "combine algbw (GB/s)",
    "calls": "timed calls", "vs_alltoall_pct": "dispatch + combine vs alltoall (%)",
    "training_delta_pct": "training delta vs alltoall (%)", "training_verdict": "training verdict",
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


def section(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    note = (
        "<h2>Dispatch / combine microbenchmark</h2><p class='note'>Megatron-Core's token dispatcher alone, built as "
        "the MoE layer builds it, at the training runs' shapes (hidden, top-k, experts; tokens per rank = "
        "seq_length x mbs), balanced routing, identity experts. Per call: dispatch = preprocess + dispatch + "
        "postprocess, combine likewise, each between CUDA events, the slowest rank's time; median and p10..p90 over "
        "the timed calls after warm-up. algbw = tokens x top-k x hidden x bytes per element (what a rank hands the "
        "dispatcher, the same for every backend) / median. A run whose log is damaged or cut short shows its status "
        "and no number. The training delta is the A/B's for the same model, mbs and dispatcher against "
        "alltoall.</p>"
    )
    classes = ["" if r["status"] == "ok" else "bad" for r in rows]
    table = html_table(COLUMNS, ([r.get(c) for c in COLUMNS] for r in rows), classes, HEADERS)
    errors = [f"<li>{html.escape(str(r['model']))} {html.escape(str(r['backend']))}: {html.escape(str(r['status']))}"
              f" ({html.escape(str(r['error']))})</li>" for r in rows if r["status"] != "ok" and r.get("error")]
    return note + table + (f"<ul>{''.join(errors)}</ul>" if errors else "")
