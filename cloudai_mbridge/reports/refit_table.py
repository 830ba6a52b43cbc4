"""Scenario report: one row per refit mapping (source layout -> destination layout) with its time, spread and
bandwidth, the fastest mapping from each source layout, and what failed and why, like seed 001's table.

A mapping is named by both full layouts (``TP2·EP2 → TP4·EP1``: TP and EP always, PP and ETP where either side sets
them), so a dimension that drops to 1 stays visible. Spread is p10-p90 of the timed refits of the run, with their
count n. A run that failed verification, or whose log carries a damaged time, shows no time.

Ranking. Each mapping from a source layout is compared with the one of lowest median from the same source: the
change of the median, (median / lowest median - 1) x 100, with its 95 % interval from a bootstrap of the two runs'
timed refits (each drawn with replacement, independently; :data:`RESAMPLES` draws, fixed seed, percentile interval
of the ratio of the medians). The interval covers the refit-to-refit noise within each run, not run-to-run noise
(the median of three refits moved from 64.9 to 45.9 ms between two identical runs). A comparison is *slower* (ranked)
only when the interval excludes 0 and each side has at least ``MIN_N`` timed refits (with three, the bootstrap's
interval excludes 0 only when every refit of one mapping beats every refit of the other); otherwise it is *not
distinguishable*. A source layout has a *fastest* mapping only when every other mapping from it is ranked slower.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from typing import Any

from cloudai.core import Reporter

from ..atomic import write_atomic
from ..metrics import parse_refit_run
from ..plots import RangeRow, inline_png, range_figure, save
from ..redact import redact_report
from .common import (
    TolerantLoading,
    holds,
    html_page,
    html_table,
    runs_of,
    scenario_facts,
    skipped_points,
    skipped_section,
)
from .page import headline, verdict_badge
from .provenance import RunSource, collect
from .refit_stats import (
    MEGATRON_FASTER,
    MIN_N,
    NOT_DISTINGUISHABLE,
    OURS_FASTER,
    RESAMPLES,
    compare_paths,
    ratio_interval,
)

SLOWER = "slower"
COVERS = ("95 % intervals: bootstrap of the ratio of medians over each run's timed refits; they cover the "
          "refit-to-refit noise within a run, not run-to-run noise")

HEADERS = {
    "mapping": "mapping (training → inference layout)",
    "mode": "mode",
    "transport": "transport",
    "ranks": "ranks",
    "idle_ranks": "idle ranks",
    "layers": "layers",
    "time_ms_median": "median time (ms)",
    "spread": "spread p10-p90 (ms)",
    "range": "min-max (ms)",
    "n": "timed refits (n)",
    "vs_fastest": "median vs the lowest median from its source: change (%), 95 % interval, verdict",
    "bandwidth_gbps": "bandwidth (GB/s)",
    "verification": "verification",
    "status": "status",
    "failure": "failure: class, rank, first error line",
}
COLUMNS = ["mapping", "mode", "transport", "ranks", "idle_ranks", "layers", "time_ms_median", "spread", "range", "n",
           "vs_fastest", "bandwidth_gbps", "verification", "status", "failure"]
DEFINITIONS = {
    "mapping": "the training (source) layout and the inference (destination) layout the weights were copied between",
    "mode": "collocated (both layouts on the same GPUs) or not",
    "transport": "the library that moved the bytes, and how the copy service ran where it was not the default",
    "ranks": "processes (GPUs) of the run",
    "idle_ranks": "ranks that held neither layout (non-collocated, more ranks than both layouts take): they built "
                  "no model and only joined the refit's collectives, as in megatron-core's refit; none: every rank "
                  "held one",
    "layers": "transformer layers of the model copied",
    "time_ms_median": "median time of one refit over the run's timed refits (after its warm-up refits)",
    "spread": "10th and 90th percentile of the same refits",
    "range": "fastest and slowest of the same refits",
    "n": "timed refits of the run",
    "vs_fastest": f"(median / lowest median from the same source - 1) x 100, its 95 % bootstrap interval over both "
                  f"runs' timed refits, and the verdict: {SLOWER} when the interval excludes 0 and both runs have "
                  f"at least {MIN_N} timed refits, else {NOT_DISTINGUISHABLE}",
    "bandwidth_gbps": "bytes moved / median time (GB = 1e9 bytes)",
    "verification": "whether every destination shard matched the source bit for bit",
    "status": "ok, or why the run has no time",
    "failure": "for a failed run: the failure's class, the rank and that rank's first error line",
}


def layout_name(side: Mapping[str, Any], dims: tuple[str, ...] = ("tp", "ep")) -> str:
    """``TP2·EP1``: every dimension of ``dims`` (a 1 included), ETP only where it differs from TP."""
    parts = [f"{k.upper()}{side.get(k) or 1}" for k in dims if k != "etp"]
    etp = side.get("etp")
    if "etp" in dims and etp not in (None, side.get("tp")):
        parts.append(f"ETP{etp}")
    return "·".join(parts)


def mapping_dims(src: Mapping[str, Any], dst: Mapping[str, Any]) -> tuple[str, ...]:
    """TP and EP always; PP where either side pipelines; ETP where either side sets one apart from its TP."""
    dims = ["tp"]
    if any((s.get("pp") or 1) != 1 for s in (src, dst)):
        dims.append("pp")
    dims.append("ep")
    if any(s.get("etp") not in (None, s.get("tp")) for s in (src, dst)):
        dims.append("etp")
    return tuple(dims)


class MBridgeRefitTable(TolerantLoading, Reporter):
    """Writes ``mbridge_refit.csv`` and ``mbridge_refit.html`` into the scenario's results folder."""

    def generate(self) -> None:
        from ..workloads.refit import MBridgeRefitTestDefinition

        if not holds(self, MBridgeRefitTestDefinition):
            return
        rows, sources = [], []
        for tr, config in runs_of(self, MBridgeRefitTestDefinition):
            m = parse_refit_run(tr.output_path)
            rows.append(refit_row(tr.name, tr.step, config, m, str(tr.output_path)))
            first = m.failure.first
            sources.append(RunSource(f"{tr.name} step {tr.step}: {rows[-1]['mapping']}" if tr.step else
                                     f"{tr.name}: {rows[-1]['mapping']}", tr.output_path, engine="refit",
                                     failed_rank=first.rank if first is not None else None))
        if not rows:
            return
        prov = collect(self.results_root, sources, system=self.system.name, scenario=self.test_scenario.name)
        write_refit_report(self.results_root, f"Refit: {self.test_scenario.name}", rows, prov,
                           skipped_section(skipped_points(self, MBridgeRefitTestDefinition)))


def transport_label(config: Mapping[str, Any]) -> str:
    """The transport and how the copy service ran, so that the rows of a coalesce_mib / executor /
    coalesce_schedule sweep can be told apart: "nccl (1024 MiB messages, replay, pairwise)"; defaults are left out."""
    how = []
    if config.get("executor") == "both":  # the row's time is ours; Megatron-Core's service is in the comparison
        how.append("ours: replay")
    if config.get("coalesce_mib"):
        how.append(f"{config['coalesce_mib']} MiB messages")
    if config.get("executor", "megatron") not in ("megatron", "both"):
        how.append(str(config["executor"]))
    if config.get("coalesce_schedule", "rounds") != "rounds":
        how.append(str(config["coalesce_schedule"]))
    if config.get("coalesce_edge_mib"):
        how.append(f"{config['coalesce_edge_mib']} MiB edges")
    return config["transport"] + (f" ({', '.join(how)})" if how else "")


def refit_row(test: str, step: int, config: Mapping[str, Any], m: Any, run: str) -> dict[str, Any]:
    # A damaged REFIT_ITER time makes the whole run's times unusable, and so do logs from another run, a config
    # edited after the run or a verification whose parts disagree: the row stays, without a time.
    verified = (m.verify is not None and m.verify.status == "pass" and not m.time_errors
                and not getattr(m, "invalid_reasons", ()))
    # the mapping is what ran (REFIT_CONFIG), not what the config file says now
    ran = getattr(m, "ran_config", None) or {}
    config = {**config, **{k: ran[k] for k in ("model", "src", "dst", "mode", "transport", "coalesce_mib", "dtype",
                                               "executor", "coalesce_schedule", "coalesce_edge_mib")
                                  if k in ran}}
    t = m.time_ms
    dims = mapping_dims(config["src"], config["dst"])
    src, dst = layout_name(config["src"], dims), layout_name(config["dst"], dims)
    return {
        "test": test,
        "step": step,
        "model": config["model"]["name"],
        "layers": config["model"]["num_layers"],
        "src_layout": src,
        "dst_layout": dst,
        "mapping": f"{src} → {dst}",
        "mode": config["mode"],
        "transport": transport_label(config),
        "ranks": m.world_size,
        "idle_ranks": getattr(m, "idle_ranks", None),
        "time_ms_min": t.min if verified else None,
        "time_ms_p10": t.p10 if verified else None,
        "time_ms_median": t.median if verified else None,
        "time_ms_p90": t.p90 if verified else None,
        "time_ms_max": t.max if verified else None,
        "n": t.n if verified else 0,
        "times_ms": [ms for _, ms in m.iterations] if verified else [],  # a 1-in-k sample past SAMPLE_CAP refits
        # a run of more than SAMPLE_CAP timed refits: which of its numbers are of a sample (a CSV column only then)
        **({"sample": t.sample_note} if verified and t.sampled else {}),
        "bandwidth_gbps": m.bandwidth_gbps if verified else None,
        "bytes_moved": None if m.bytes_remote is None else m.bytes_remote + (m.bytes_local or 0),
        "verification": m.verify.status if m.verify else "missing",
        "mismatched": m.verify.mismatched if m.verify else None,
        "status": m.status,
        "failure": _failure(m),
        "precision": config.get("dtype"),
        "run": run,
        **compare_paths((getattr(m, "result", None) or {}).get("compare") if verified else None),
    }


def _key(row: Mapping[str, Any]) -> tuple[str, Any, str]:
    """Mappings compete with the others from the same source layout, on the same model and depth."""
    return (str(row["model"]), row["layers"], str(row["src_layout"]))


def compare(best: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` against ``best`` (the lowest median of its source): the change with its interval and the verdict."""
    times = [t for t in row["times_ms"] if t is not None]
    base = [t for t in best["times_ms"] if t is not None]
    got = ratio_interval(base, times)
    n = (len(base), len(times))
    # what each side timed in all (past SAMPLE_CAP refits ``times_ms`` is a 1-in-k sample of them)
    n_all = (max(len(base), int(best.get("n") or 0)), max(len(times), int(row.get("n") or 0)))
    if got is None:
        return {"change": row["vs_fastest_pct"], "ci": None, "n": n, "n_all": n_all, "verdict": NOT_DISTINGUISHABLE,
                "why": "no timed refits to compare"}
    change, lo, hi = got
    if lo <= 0.0 <= hi:
        verdict, why = NOT_DISTINGUISHABLE, "the interval holds 0"
    elif min(n) < MIN_N:
        verdict, why = NOT_DISTINGUISHABLE, f"n < {MIN_N} timed refits"
    else:
        verdict, why = (SLOWER, None) if lo > 0.0 else (NOT_DISTINGUISHABLE, "the interval lies below 0")
    return {"change": change, "ci": (lo, hi), "n": n, "n_all": n_all, "verdict": verdict, "why": why}


def _n_text(c: Mapping[str, Any]) -> str:
    """"n = a + b timed refits", each side saying when its times are a sample of more refits."""
    sides = []
    for used, total in zip(c["n"], c.get("n_all") or c["n"], strict=True):
        sides.append(f"{used:,}" if used >= total else f"{used:,} (a sample of {total:,})")
    return f"n = {' + '.join(sides)} timed refits"


def rank_mappings(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per source layout: the mapping of lowest median and each other's comparison with it (:func:`compare`).
    Sets ``fastest`` (lowest median), ``vs_fastest_pct``, ``vs_fastest_ci95_pct`` and ``vs_fastest_verdict`` on the
    rows; returns one finding per source layout, in the rows' order. ``certainty``: only (one timed mapping), clear
    (every other ranked slower), not distinguishable (at least one is not), none (no timed mapping)."""
    groups: dict[tuple[str, Any, str], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(_key(row), []).append(row)
    findings = []
    for (model, layers, src), members in groups.items():
        timed = sorted((r for r in members if r["time_ms_median"] is not None), key=lambda r: r["time_ms_median"])
        failed = [r for r in members if r["time_ms_median"] is None]
        best = timed[0] if timed else None
        for r in members:
            r["fastest"] = r is best
            r["vs_fastest_pct"] = (None if best is None or r["time_ms_median"] is None
                                   else (r["time_ms_median"] - best["time_ms_median"]) / best["time_ms_median"] * 100)
            r["vs_fastest_ci95_pct"] = r["vs_fastest_verdict"] = None
        comparisons = []
        for r in timed[1:]:
            c = compare(best, r)
            r["comparison"] = c
            r["vs_fastest_ci95_pct"] = None if c["ci"] is None else f"{c['ci'][0]:+.1f}..{c['ci'][1]:+.1f}"
            r["vs_fastest_verdict"] = c["verdict"]
            comparisons.append((r, c))
        if best is None:
            certainty = "none"
        elif not comparisons:
            certainty = "only"
        elif all(c["verdict"] == SLOWER for _, c in comparisons):
            certainty = "clear"
        else:
            certainty = NOT_DISTINGUISHABLE
        findings.append({"model": model, "layers": layers, "source": src, "best": best,
                         "runner": timed[1] if len(timed) > 1 else None, "comparisons": comparisons,
                         "certainty": certainty, "failed": failed, "count": len(members)})
    return findings


def write_refit_report(root: Any, title: str, rows: list[dict[str, Any]], prov: Any,
                       skipped: str = "") -> None:
    import pandas as pd

    findings = rank_mappings(rows)
    clear = {id(f["best"]) for f in findings if f["certainty"] == "clear"}
    for r in rows:
        r["spread"] = _span(r["time_ms_p10"], r["time_ms_p90"])
        r["range"] = _span(r["time_ms_min"], r["time_ms_max"])
        r["vs_fastest"] = _vs_fastest(r, id(r) in clear)
    hidden = ("spread", "range", "vs_fastest", "times_ms", "comparison", "speedup_ci95")
    for r in rows:  # the interval as text in the CSV
        if r.get("speedup_ci95") is not None:
            r["speedup_ci95_lo"], r["speedup_ci95_hi"] = r["speedup_ci95"]
    csv_rows = [{k: v for k, v in r.items() if k not in hidden} for r in rows]
    frame = pd.DataFrame(csv_rows)
    frame["ranks"] = frame["ranks"].astype("Int64")
    write_atomic(root / "mbridge_refit.csv", redact_report(frame.to_csv(index=False)))

    sections = [scenario_facts([{"model": r["model"], "precision": r["precision"]} for r in rows],
                               ["model", "precision"])]
    sections.append(headline("Refit mappings compared per source layout", [_finding_html(f) for f in findings]))
    ordered = []  # by source layout, fastest first, the mappings without a time last
    for f in findings:
        members = [x for x in rows if _key(x) == (f["model"], f["layers"], f["source"])]
        ordered += sorted(members, key=lambda x: (x["time_ms_median"] is None, x["time_ms_median"] or 0.0))
    if any(r["time_ms_median"] is not None for r in ordered):
        png = root / "mbridge_refit.png"
        save(range_figure(
            "Refit time per mapping, grouped by source layout\n"
            "(bar: median; whisker: p10-p90; ticks: each timed refit)",
            "refit time (ms)",
            [RangeRow(f"{r['mapping']}\n{r['mode']}, {r['transport']}", r["time_ms_median"],
                      None if r["time_ms_p10"] is None else (r["time_ms_p10"], r["time_ms_p90"]),
                      r["times_ms"], id(r) in clear, None if r["time_ms_median"] is not None else
                      f"no time: {r['status']}" + (f" ({r['failure']})" if r["failure"] else ""),
                      group="|".join(map(str, _key(r))))
             for r in ordered],
            best_label="fastest from its source layout (every other ranked slower)",
            other_label="other mapping",
        ), png)
        sections.append(f"<img src='{inline_png(png)}' alt='refit time per mapping'>")
    sections.append(
        "<h2>Mappings</h2><p class='note'>Time per refit (megatron.core.resharding.swap_model_weights) over the "
        "timed iterations, after warm-up: median, p10-p90 spread and min-max over the n timed refits of the run; "
        "bandwidth = bytes moved / median time (GB = 10<sup>9</sup> bytes). All times are in ms. Each mapping is "
        "compared with the lowest median from its source layout: the change of the median with its 95 % interval, "
        f"a bootstrap of the ratio of the two medians over both runs' timed refits ({RESAMPLES} draws, fixed seed). "
        "It covers the refit-to-refit noise within each run, not run-to-run noise. A mapping is ranked slower only "
        f"when the interval excludes 0 and both runs have at least {MIN_N} timed refits; otherwise it is not "
        "distinguishable, and a source layout has a fastest mapping only when every other is ranked slower. Rows in "
        "red failed verification or did not finish: they carry no time.</p>"
    )
    classes = ["" if r["verification"] == "pass" and r["status"] == "ok" else "bad" for r in ordered]
    sections.append(html_table(COLUMNS, ([_cell(r, c) for c in COLUMNS] for r in ordered), classes, HEADERS,
                               DEFINITIONS))
    paths = [r for r in ordered if "megatron_n" in r]
    if paths:
        sections.insert(2, headline("Megatron-Core's copy service vs ours (same job, same ranks, same ceiling)",
                                    [_paths_html(r) for r in paths]))
        sections.append(
            "<h2>Megatron-Core's service vs ours</h2><p class='note'>executor = \"both\": each job timed "
            "Megatron-Core's own copy service (swap_model_weights) and then ours (its cached plan replayed over the "
            "coalescing service), on the same ranks and models, then the exchange ceiling: the plan's own bytes "
            "between every pair of ranks as one message per direction, in one batch_isend_irecv. % of ceiling = "
            "ceiling median / path median x 100 (both move the same bytes). Speed-up = Megatron-Core's median / ours, "
            f"with its 95 % interval from a bootstrap of both series ({RESAMPLES} draws, fixed seed); "
            f"{NOT_DISTINGUISHABLE} when the interval holds 1 or a side has fewer than {MIN_N} timed refits. "
            "The main table's time of these rows is ours.</p>")
        sections.append(html_table(PATH_COLUMNS, ([_path_cell(r, c) for c in PATH_COLUMNS] for r in paths), None,
                                   PATH_HEADERS, PATH_DEFINITIONS))
    if skipped:  # the sweep points a rule rejected, with the rule (after the results, before the provenance)
        sections.append(skipped)
    write_atomic(root / "mbridge_refit.html", redact_report(html_page(title, sections, prov, kind="refit report")))
    logging.info("mbridge_refit: %d row(s) written to %s", len(rows), root / "mbridge_refit.html")


def _cell(row: Mapping[str, Any], column: str) -> Any:
    """A cell of the main table: n says when the run's order statistics are of a sample (more than SAMPLE_CAP)."""
    if column == "n" and row.get("sample"):
        return f"{row['n']:,} ({row['sample']})"
    return row.get(column)


PATH_COLUMNS = ["mapping", "mode", "transport", "megatron", "ours", "ceiling", "speedup"]
PATH_HEADERS = {
    "mapping": HEADERS["mapping"], "mode": "mode", "transport": "transport",
    "megatron": "Megatron-Core's service: median ms, % of ceiling, n",
    "ours": "ours: median ms, % of ceiling, n",
    "ceiling": "exchange ceiling: median ms, n",
    "speedup": "speed-up of ours (x), 95 % interval, verdict",
}
PATH_DEFINITIONS = {
    **{k: DEFINITIONS[k] for k in ("mapping", "mode")},
    "transport": "the transport of Megatron-Core's service, and how ours ran (messages, schedule)",
    "megatron": "swap_model_weights with Megatron-Core's copy service for the transport, timed refits of the job",
    "ours": "Megatron-Core's cached plan replayed over the coalescing service (messages, schedule as in transport)",
    "ceiling": "the plan's remote bytes per pair of ranks as one message each, one batch_isend_irecv, same job",
    "speedup": f"median of Megatron-Core's / median of ours; 95 % bootstrap interval; {NOT_DISTINGUISHABLE} when it "
               f"holds 1 or n < {MIN_N}",
}


def _path_stat(r: Mapping[str, Any], path: str) -> str | None:
    med = r.get(f"{path}_median_ms")
    if med is None:
        return None
    pct = r.get(f"{path}_pct_of_ceiling")
    return f"{med:,.2f} ms, " + ("no ceiling" if pct is None else f"{pct:.1f} %") + f", n = {r[f'{path}_n']}"


def _speedup_text(r: Mapping[str, Any], verdict: bool = True) -> str:
    if r.get("speedup") is None:
        return "none: a path has no timed refit" + (f", {NOT_DISTINGUISHABLE}" if verdict else "")
    lo, hi = r["speedup_ci95"]
    return f"{r['speedup']:.2f}x [{lo:.2f}..{hi:.2f}]" + (f", {r['speedup_verdict']}" if verdict else "")


def _path_cell(r: Mapping[str, Any], column: str) -> Any:
    if column in ("megatron", "ours"):
        return _path_stat(r, column)
    if column == "ceiling":
        med = r.get("ceiling_median_ms")
        return None if med is None else f"{med:,.2f} ms, n = {r['ceiling_n']}"
    if column == "speedup":
        return _speedup_text(r)
    return r.get(column)


def _paths_html(r: Mapping[str, Any]) -> str:
    e = html.escape
    level = {OURS_FASTER: "ok", MEGATRON_FASTER: "bad"}.get(r.get("speedup_verdict"), "warn")
    return (f"<b>{e(r['mapping'])}</b> ({e(r['mode'])}, {e(r['transport'])}): Megatron-Core&#x27;s service "
            f"{e(_path_stat(r, 'megatron') or 'no time')}; ours {e(_path_stat(r, 'ours') or 'no time')}; "
            f"speed-up of ours {e(_speedup_text(r, verdict=False))} (95 % interval) "
            f"{verdict_badge(str(r.get('speedup_verdict')), level)}")


def _vs_fastest(r: Mapping[str, Any], clear: bool) -> str | None:
    """The table's cell: the lowest median, or the change with its interval and verdict."""
    if r["fastest"]:
        return "fastest" if clear else "lowest median"
    c = r.get("comparison")
    if c is None:
        return None
    interval = "" if c["ci"] is None else f" [{c['ci'][0]:+.0f}..{c['ci'][1]:+.0f}]"
    why = f" ({c['why']})" if c["why"] and c["why"] != "the interval holds 0" else ""
    return f"{c['change']:+.0f} %{interval}, {c['verdict']}{why}"


def _comparison_html(r: Mapping[str, Any], c: Mapping[str, Any]) -> str:
    e = html.escape
    interval = "no interval" if c["ci"] is None else f"95 % interval {c['ci'][0]:+.1f}..{c['ci'][1]:+.1f} %"
    n = _n_text(c)
    if c["verdict"] == SLOWER:
        return (f"→ {e(r['dst_layout'])}: {r['time_ms_median']:,.1f} ms median, {c['change']:+.1f} % ({interval}, "
                f"{n}) {verdict_badge('slower', 'ok')}")
    why = f": {c['why']}" if c["why"] else ""
    return (f"→ {e(r['dst_layout'])}: {r['time_ms_median']:,.1f} ms median, {c['change']:+.1f} % ({interval}, {n}) "
            f"{verdict_badge(f'not distinguishable{why}', 'warn')}")


def _finding_html(f: Mapping[str, Any]) -> str:
    e = html.escape
    where = f"From <b>{e(f['source'])}</b> ({e(f['model'])}, {e(str(f['layers']))} layers)"
    best = f["best"]
    failed = f["failed"]
    if best is None:
        text = f"{where}: {verdict_badge('no verified mapping', 'bad')} none of {f['count']} mapping(s) finished"
    else:
        stat = (f"{best['time_ms_median']:,.1f} ms median (p10-p90 {best['spread']} ms, n = {best['n']}), "
                f"{e(best['mode'])}, {e(best['transport'])}")
        if f["certainty"] == "only":  # nothing to rank it against
            text = (f"{where}: one verified mapping <b>→ {e(best['dst_layout'])}</b>, {stat} "
                    f"{verdict_badge('only verified mapping: no ranking', 'none')}")
        elif f["certainty"] == "clear":
            text = (f"{where}: fastest <b>→ {e(best['dst_layout'])}</b>, {stat} "
                    f"{verdict_badge('ranked: every other mapping is slower', 'ok')}")
        else:
            tied = ", ".join(f"→ {r['dst_layout']}" for r, c in f["comparisons"] if c["verdict"] != SLOWER)
            text = (f"{where}: lowest median <b>→ {e(best['dst_layout'])}</b>, {stat} "
                    f"{verdict_badge(f'no fastest: not distinguishable from {tied}', 'warn')}")
        if f["comparisons"]:
            items = "".join(f"<li>{_comparison_html(r, c)}</li>" for r, c in f["comparisons"])
            text += f"<ul>{items}</ul><span class='note'>{e(COVERS)}.</span>"
    if failed:
        why = "; ".join(f"→ {e(r['dst_layout'])}: {e(r['failure'] or r['status'].replace('_', ' '))}" for r in failed)
        text += f"<br><span class='note'>{len(failed)} without a time: {why}</span>"
    return text


def _span(lo: float | None, hi: float | None) -> str | None:
    return None if lo is None or hi is None else f"{lo:,.1f}-{hi:,.1f}"


def _failure(m: Any) -> str | None:
    first = m.failure.first
    invalid = getattr(m, "invalid_reasons", ())
    if invalid:  # the cause first: a verification recomputed to "fail" is a consequence of it
        also = "" if first is None else f"; {m.failure.reason()['failure_class']}"
        return f"invalid, no time is used: {'; '.join(invalid)}{also}"[:300]
    if first is None:
        return f"damaged log, no time is used: {'; '.join(m.time_errors)}"[:300] if m.time_errors else None
    rank = f" on rank {first.rank}" if first.rank is not None else ""
    return f"{m.failure.reason()['failure_class']}{rank}: {first.detail[:160]}"
