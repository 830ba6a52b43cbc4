"""``cloudai-mbridge preflight``: every point of a scenario's sweeps checked in seconds, without generating a job.

A point is what CloudAI's grid search would run: the product of a test's list-valued cmd_args (and list-valued
extra_env_vars / num_nodes), in CloudAI's order (``TestRun.param_space``), so point N here is DSE step N there. Each
point is checked with the plugin's own ``violations`` (the rules ``constraint_check`` runs at dry-run / run time) and
estimated with plan/memory.py; nothing is rendered, staged or written except the table under ``--output-dir``.

GPU-hours: the upper bound is GPUs x the test's time limit (what the scheduler may hold); with ``--result-dir`` (an
earlier run of the same scenario) a point whose run logged iteration times gets train_iters x its measured mean
iteration time instead.
"""

from __future__ import annotations

import html
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..atomic import Staged, write_atomic, write_together
from ..plan.memory import GIB
from ..rules.sweep import (
    REPORT_CSV,
    PointResult,
    PreflightReport,
    _fmt,
    _LineWriter,
    blocking_problems,
    preflight,
    row,
    sweep_limit_problem,
)

REPORT_HTML = "preflight.html"


def summary_lines(report: PreflightReport) -> list[str]:
    n, acc = report.total, report.n_accepted
    best, bound, measured = report.sweep_hours()
    expected = report.n_expected
    lines = [f"preflight {report.scenario} on {report.system}: {acc} of {n} point(s) accepted, {n - acc} rejected"
             + (f" ({expected} as the test declares in expected_rejections)" if expected else "")]
    if acc:
        hours = f"estimated {best:.1f} GPU-hours for the accepted points"
        if measured:
            hours += f" ({measured} from measured iteration times, the rest at their time limit"
            hours += f"; {bound:.1f} at the time limits)" if bound is not None else ")"
        elif bound is not None:
            hours += " (upper bound: GPUs x time limit; pass --result-dir for measured step times)"
        else:
            hours = "GPU-hours unknown (no time_limit in the scenario)"
        lines.append(hours)
    if report.n_tight:
        lines.append(f"{report.n_tight} accepted point(s) within the memory estimate's error band of the GPU or above "
                     "it under memory_check: they run, with a warning")
    if not acc:
        lines.append("every point is rejected: nothing of this scenario would run")
    if report.rejected_unswept:
        lines.append(f"rejected test(s) without a sweep: {', '.join(sorted(report.rejected_unswept))} (dry-run and "
                     "run stop there)")
    if any(p.bridge is not None for p in report.points):
        from ..plan.bridge_estimate import trust_note

        lines.append(trust_note())
    return lines


def render_text(report: PreflightReport) -> str:
    shown = report.shown()
    table = [{**row(p), "refit_predicted_s": p.refit_cell} for p in shown]
    cols: tuple[str, ...] = ("test", "point", "varies", "verdict", "gpus", "memory_gib_per_gpu", "memory_band_pct",
                             "memory_verdict", "bridge_estimate_gib", "largest_term_gib", "gpu_hours")
    if any(r["refit_predicted_s"] for r in table):  # refit tests: the predicted seconds of one refit beside the rest
        cols += ("refit_predicted_s", "refit_recv_gb_per_gpu")
    heads = {"test": "test", "point": "#", "varies": "values that vary", "verdict": "verdict", "gpus": "GPUs",
             "memory_gib_per_gpu": "mem/GPU GiB", "memory_band_pct": "+/-%", "memory_verdict": "memory",
             "bridge_estimate_gib": "Bridge est. GiB", "largest_term_gib": "largest term", "gpu_hours": "GPU-h",
             "refit_predicted_s": "refit s (predicted)", "refit_recv_gb_per_gpu": "refit GB in/GPU"}
    width = {c: max([len(heads[c]), *(len(r[c]) for r in table)]) for c in cols}
    buf = io.StringIO()
    buf.write("  ".join(heads[c].ljust(width[c]) for c in cols).rstrip() + "\n")
    for r, p in zip(table, shown, strict=True):
        buf.write("  ".join(r[c].ljust(width[c]) for c in cols).rstrip() + "\n")
        if p.error:
            buf.write(f"    invalid point: {p.error}\n")
        for v in p.violations:
            buf.write(f"    {v}\n")
    if not report.complete:
        buf.write(report.shown_note() + "\n")
    bases = sorted({r["refit_predicted_basis"] for r in table if r["refit_predicted_s"] and r["refit_predicted_basis"]})
    if bases:
        buf.write("refit s (predicted): one refit's seconds from the bytes each GPU receives (refit GB in/GPU) at "
                  + "; ".join(bases) + "\n")
    for line in summary_lines(report):
        buf.write(line + "\n")
    return buf.getvalue()


def render_csv(report: PreflightReport) -> str:
    """preflight.csv of a report that holds every point (see :func:`preflight`'s sink for one that does not)."""
    line = _LineWriter()
    return line.header() + "".join(line(p) for p in report.points)


def render_html(report: PreflightReport, folder: Path, argv: list[str] | None = None) -> str:
    """The page a person reads: a verdict box, then one table with the tests as group rows; per point its verdict in
    colour, a headroom bar (the memory estimate against the GPU's capacity, with the estimate's error band and
    Megatron-Bridge's own estimate as a marker), GPU-hours only for points that would run, and rule and fix in place
    of the memory for a rejected point. Headers are words with units (the CSV keeps machine names)."""
    from ..reports.page import html_page
    from ..reports.provenance import collect

    prov = collect(folder, [], system=report.system, scenario=report.scenario, argv=argv)
    sections = [_headline_html(report), _table_html(report)]
    return html_page(f"Preflight: {report.scenario} on {report.system}", sections, prov, kind="preflight")


def write_html(report: PreflightReport, path: Path, argv: list[str] | None = None) -> Path:
    return write_atomic(path, render_html(report, path.parent, argv))


def write_reports(report: PreflightReport, output_dir: Path, staged_csv: Staged | None = None) -> tuple[Path, Path]:
    """preflight.csv and preflight.html in ``output_dir``, both or neither (an earlier pair stays as it was when
    they cannot be written: atomic.write_together). ``staged_csv``: the CSV already written as the points came."""
    csv_path, html_path = output_dir / REPORT_CSV, output_dir / REPORT_HTML
    write_together({csv_path: staged_csv if staged_csv is not None else render_csv(report),
                    html_path: render_html(report, output_dir)})
    return csv_path, html_path


# Verdict of a point as the page shows it: (words, colour level).
def point_verdict(p: PointResult) -> tuple[str, str]:
    if not p.checked:
        return "not checked (not a plugin test)", "none"
    if not p.ok:
        return ("invalid point" if p.error and not p.violations else "rejected"), "bad"
    if p.memory is None:
        return "would run", "ok"
    verdict = p.memory.verdict
    if verdict == "fits":
        return "would run", "ok"
    if verdict == "tight":
        return "would run: memory tight", "warn"
    return "would run under memory_check: does not fit", "warn"


def _headline_html(report: PreflightReport) -> str:
    from collections import Counter

    from ..reports.page import headline, verdict_badge

    e = html.escape
    n, acc = report.total, report.n_accepted
    items = []
    counts = f"{acc} of {n} point{'s' if n != 1 else ''} would run"
    items.append(verdict_badge(counts, "ok" if acc == n else "warn" if acc else "bad")
                 + ("" if acc == n else " " + verdict_badge(f"{n - acc} rejected", "bad")))
    if report.n_tight:
        items.append(verdict_badge(f"{report.n_tight} within the memory estimate's error band or above it", "warn")
                     + ": they run with a warning (tight), or only because memory_check lets them (does not fit)")
    best, _bound, measured = report.sweep_hours()
    if acc and report.any_hours:
        basis = (f"{measured} from measured iteration times, the rest at their time limit" if measured
                 else "upper bound: GPUs x time limit; pass --result-dir for measured step times")
        items.append(f"<b>{best:,.1f} GPU-hours</b> for the points that would run ({e(basis)})")
    elif acc:
        items.append("GPU-hours unknown: the scenario sets no time_limit")
    rules = Counter(report.rules)
    if rules:
        items.append("rejected by rule: " + ", ".join(f"<b>{e(r)}</b> ({c} point{'s' if c != 1 else ''})"
                                                      for r, c in rules.most_common()))
    bad = sorted(report.rejected_unswept)
    if not report.complete:
        items.append(e(report.shown_note()))
    if bad:
        items.append(verdict_badge("dry-run and run stop", "bad") + " rejected test(s) without a sweep: "
                     + e(", ".join(bad)))
    if not acc:
        items.append(verdict_badge("every point is rejected: nothing of this scenario would run", "bad"))
    return headline("Would it run?", items)


def _legend_html() -> str:
    from ..plan.bridge_estimate import trust_note

    return ("<p class='note'>Memory per GPU: the bar is the plugin's estimate for the most-loaded GPU (plan/memory.py)"
            " coloured by its verdict (<span class='sw fits'></span> fits, <span class='sw tight'></span> tight: "
            "within the error band of the capacity, <span class='sw nofit'></span> does not fit), "
            "<span class='sw band'></span> its error band, <span class='sw cap'></span> the GPU's usable memory, "
            "<span class='sw br'></span> Megatron-Bridge's own estimate (estimate_training_memory). GiB = 2<sup>30"
            "</sup> bytes. GPU-hours only for the points that would run.</p>"
            f"<p class='note'>{html.escape(trust_note())}</p>")


def _refit_note_html() -> str:
    from ..plan.refit_bytes import ASSUMED_COPY_GBPS, ASSUMED_NIC_GBPS, MEASURED_CEILING_GBPS, bandwidths

    rates = {b.name: b for b in bandwidths()}
    m, c, r, pw = rates["measured"], rates["coalesced"], rates["replay"], rates["replay-pairwise"]
    return ("<p class='note'>Predicted refit seconds are a <b>prediction, not a measurement</b>: the point's byte "
            "plan (plan/refit_bytes.py, after megatron-core's resharding planner) priced at the refit rate measured "
            f"on 2 x H200 (benchmarks/results/gpu_refit_nccl.json): {m.nvlink_gbps:.2f} GB/s per GPU of remote "
            f"bytes inside a node with megatron-core's NCCL service ({c.nvlink_gbps:.2f} GB/s with coalesce_mib "
            f"&gt; 0), {100 * m.nvlink_gbps / MEASURED_CEILING_GBPS:.0f} % of that run's NCCL ceiling; with "
            f"executor = \"replay\" {r.nvlink_gbps:.2f} GB/s ({pw.nvlink_gbps:.2f} GB/s with coalesce_schedule = "
            "\"pairwise\"), measured on 4 x H200 (benchmarks/results/refit_4gpu/h200/, h200b/). "
            f"Assumed, not measured: between nodes the same fraction of a 400 Gb/s NIC ({ASSUMED_NIC_GBPS:.0f} "
            f"GB/s per GPU, so {m.nic_gbps:.2f} GB/s; {r.nic_gbps:.2f} GB/s with replay), local copies at "
            f"{ASSUMED_COPY_GBPS:.0f} GB/s, no per-message "
            "latency, no overlap of the three; the transport (NVSHMEM, NIXL) is not modelled; the refit takes the "
            "slowest GPU's time. GB = 10<sup>9</sup> bytes; received per GPU counts local copies.</p>")


PAGE_STYLE = (
    "table.pf .bar{width:300px;padding:4px 8px}table.pf .kv{white-space:nowrap}"
    ".hb{position:relative;height:14px;width:300px;background:#f1f1f1;"
    "border:1px solid #ccc;margin-top:2px}.hb div{position:absolute;top:0;height:100%}"
    ".hb .est.fits,.sw.fits{background:#76b900}.hb .est.tight,.sw.tight{background:#e0a000}"
    ".hb .est.nofit,.sw.nofit{background:#d33}"
    ".hb .band,.sw.band{background:repeating-linear-gradient(135deg,rgba(0,0,0,.45) 0 2px,transparent 2px 5px);"
    "top:2px;height:10px;border-left:1px solid #222;border-right:1px solid #222}"
    ".hb .cap,.sw.cap{background:#000;width:2px;top:-4px;height:22px}"
    ".hb .br{width:8px;height:8px;margin-left:-5px;top:2px;background:#1f5fbf;border:1px solid #fff;"
    "transform:rotate(45deg)}.sw.br{background:#1f5fbf;transform:rotate(45deg);width:8px;height:8px}"
    ".sw{display:inline-block;width:14px;height:10px;vertical-align:middle;border:1px solid #999}"
    ".sw.cap{width:2px;height:14px;border:0}"
    ".axis{position:relative;height:14px;width:300px;font-size:11px;font-weight:normal;color:#333;margin-top:3px}"
    ".axis span{position:absolute;transform:translateX(-50%);white-space:nowrap}"
    "table.pf tr.group th{background:#dfe8d0;text-align:left;font-size:14px;padding:5px 8px}"
    "table.pf td.why{text-align:left;color:#6d0000;max-width:none}table.pf .sub{color:#555;font-size:11px}"
)


def _table_html(report: PreflightReport) -> str:
    e = html.escape
    from ..reports.page import verdict_badge

    memory = report.any_memory  # no column of dashes for a refit-only scenario
    scale = report.memory_top * 1.04 if report.memory_top else 1.0  # one scale: bars compare across tests
    head = "<tr><th>#</th><th class='text'>values that vary</th><th class='text'>verdict</th><th>GPUs</th>"
    if memory:
        head += (f"<th class='text bar'>memory per GPU against the GPU's capacity (GiB){_axis_html(scale)}</th>"
                 "<th>estimate ± band (GiB)</th><th>Megatron-Bridge's estimate (GiB)</th>"
                 "<th class='text'>largest term (GiB)</th>")
    refit = any(p.refit is not None for p in report.shown())
    if refit:
        head += "<th>predicted refit (s)</th><th>received per GPU, most (GB)</th>"
    head += "<th>GPU-hours</th></tr>"
    width = (9 if memory else 5) + (2 if refit else 0)
    body = []
    for test, points in _by_test(report.shown()):
        tally = report.tests[test]
        single = tally.points == 1 and not points[0].swept
        if not single:  # a test without a sweep is one row that names it; a sweep gets a group row
            ok = tally.accepted
            what = f"{tally.points:,} point{'s' if tally.points != 1 else ''}, {ok:,} would run"
            if len(points) < tally.points:
                what += f" ({len(points):,} listed here, every one in {REPORT_CSV})"
            body.append(f"<tr class='group'><th colspan='{width}'>test {e(test)} <span class='sub'>· {e(what)}"
                        "</span></th></tr>")
        for p in points:
            words, level = point_verdict(p)
            cls = {"bad": "bad", "warn": "warn"}.get(level, "")
            varies = (f"<b>test {e(test)}</b><br><span class='sub'>no sweep</span>" if single else
                      " ".join(f"<span class='kv'>{e(f'{k}={_fmt(v)}')}</span>" for k, v in p.values.items()))
            cells = [f"<td>{p.point if p.swept else '—'}</td>", f"<td class='text'>{varies}</td>",
                     f"<td class='text'>{verdict_badge(words, level)}</td>",
                     f"<td>{'' if p.gpus is None else (f'{p.gpus:,}' if p.gpus else '0 (CPU)')}</td>"]
            if not p.ok:
                cells.append(f"<td class='why' colspan='{width - 4}'>{_why_html(p)}</td>")
            else:
                if memory:
                    cells += [f"<td class='bar'>{_bar_html(p, scale)}</td>", f"<td>{_estimate_text(p)}</td>",
                              f"<td>{e(p.bridge_gib) or '—'}</td>",
                              f"<td class='text short'>{e(p.largest_term) or '—'}</td>"]
                if refit:
                    cells += [f"<td>{e(p.refit_cell) or '—'}</td>", f"<td>{e(p.refit_recv_gb) or '—'}</td>"]
                cells.append(f"<td>{_hours_html(p)}</td>")
            body.append(f"<tr class='{cls}'>{''.join(cells)}</tr>")
    legend = (_legend_html() if memory else "") + (_refit_note_html() if refit else "")
    return (f"<style>{PAGE_STYLE}</style>{legend}<table class='pf'><thead>{head}</thead><tbody>{''.join(body)}"
            "</tbody></table>")


def _by_test(points: list[PointResult]) -> list[tuple[str, list[PointResult]]]:
    groups: dict[str, list[PointResult]] = {}
    for p in points:
        groups.setdefault(p.test, []).append(p)
    return list(groups.items())


def _axis_html(scale: float) -> str:
    """Tick labels under the header: 0 and round steps up to the scale, in GiB."""
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10**4, 10**5)
                if scale / s <= 5)
    ticks = [i * step for i in range(int(scale // step) + 1)]
    spans = "".join(f"<span style='left:{t / scale * 100:.1f}%'>{t:,}</span>" for t in ticks)
    return f"<div class='axis'>{spans}</div>"


def _pct(gib: float, scale: float) -> str:
    return f"{max(0.0, min(gib / scale * 100, 100.0)):.2f}%"


def _bar_html(p: PointResult, scale: float) -> str:
    m = p.memory
    if m is None:
        return "<span class='sub'>no memory estimate for this workload</span>" if p.gpus == 0 or p.gpus is None \
            else "<span class='sub'>no estimate</span>"
    total, band, cap = m.total / GIB, m.band / GIB, m.capacity / GIB
    kind = {"fits": "fits", "tight": "tight"}.get(m.verdict, "nofit")
    parts = [f"<div class='est {kind}' style='width:{_pct(total, scale)}'></div>",
             f"<div class='band' style='left:{_pct(total - band, scale)};width:"
             f"{max(0.0, min(total + band, scale) - max(total - band, 0.0)) / scale * 100:.2f}%'></div>",
             f"<div class='cap' style='left:{_pct(cap, scale)}'></div>"]
    tip = f"estimate {total:.1f} ± {band:.1f} GiB of {cap:.0f} GiB"
    if p.bridge is not None:
        bridge = p.bridge.total / GIB
        parts.append(f"<div class='br' style='left:{_pct(bridge, scale)}'></div>")
        tip += f"; Megatron-Bridge's estimate {bridge:.1f} GiB"
    return f"<div class='hb' title='{html.escape(tip)}'>{''.join(parts)}</div>"


def _estimate_text(p: PointResult) -> str:
    m = p.memory
    if m is None:
        return "—"
    free = m.headroom / GIB
    room = f"{free:,.1f} GiB free" if free >= 0 else f"{-free:,.1f} GiB over"
    return (f"{m.total / GIB:,.1f} ± {m.band / GIB:,.1f} of {m.capacity / GIB:,.0f}"
            f"<br><span class='sub'>{html.escape(m.verdict)}, {room}</span>")


def _hours_html(p: PointResult) -> str:
    if p.gpu_hours is None:
        return "—"
    basis = "measured" if p.measured_hours is not None else "at the time limit"
    return f"{p.gpu_hours:,.1f}<br><span class='sub'>{basis}</span>"


def _why_html(p: PointResult) -> str:
    e = html.escape
    if p.error and not p.violations:
        return f"<b>invalid point</b>: {e(p.error)}"
    lines = []
    for v in p.violations:
        values = ", ".join(f"{k}={val!r}" for k, val in v.fields.items())
        lines.append(f"<b>{e(v.rule)}</b>: {e(v.message)} <span class='sub'>({e(values)})</span>"
                     f"<br><b>Fix</b>: {e(v.fix)}")
    if p.error:
        lines.append(f"<b>cannot be generated</b>: {e(p.error)}")
    return "<br>".join(lines)


def scenario_refusals(system: Any, scenario: Any, source: str = "") -> list[str]:
    """Everything that makes dry-run / run refuse the whole scenario before writing anything; also what
    ``verify-configs`` reports. Each message names the test (and ``source``, the scenario file) and the fix."""
    return scenario_check(system, scenario, source)[0]


def scenario_check(system: Any, scenario: Any, source: str = "", result_dir: Path | None = None,
                   sink: Callable[[str], None] | None = None,
                   keep_all: bool = True, output_dir: Path | None = None,
                   tests_dir: Path | None = None) -> tuple[list[str], PreflightReport | None]:
    """scenario_refusals and the preflight report of every point (None when the scenario fails before one);
    ``sink`` and ``keep_all`` as :func:`preflight` takes them; ``output_dir``: the command's --output-dir (None: the
    system's output_path), checked with the names as the results folders of a Slurm job."""
    from ..launch.payload import UnsafeOutputPathError, check_folder_name
    from .session import answer_gpu_directives_from_file, current

    where = f"{source}: " if source else ""
    problems = []
    too_many = sweep_limit_problem(scenario)  # counted, not enumerated: nothing below may hold the points
    if too_many:
        if tests_dir is None and (ses := current()) is not None:
            tests_dir = ses.inputs.get("tests_dir")
        return [sweep_limit_problem(scenario, test_sources(tests_dir) if tests_dir else None, source) or too_many], None
    try:
        check_folder_name("scenario name", scenario.name, "test scenario")
        for tr in scenario.test_runs:
            check_folder_name("test id", tr.name, f"test scenario {scenario.name!r}")
    except UnsafeOutputPathError as exc:
        return [f"{where}{exc}"], None
    if (ses := current()) is not None and ses.mode == "dry-run":
        answer_gpu_directives_from_file(system)  # a dry-run asks the cluster nothing (no scontrol)
    from cloudai.systems.slurm import SlurmSystem

    if isinstance(system, SlurmSystem):
        from ..launch.slurm import results_path_problems

        base = output_dir if output_dir is not None else getattr(system, "output_path", None)
        container = any(getattr(tr.test, "docker_image", None) is not None for tr in scenario.test_runs)
        bad_paths = results_path_problems(Path(base).absolute() if base is not None else Path("."),
                                          str(scenario.name), [str(tr.name) for tr in scenario.test_runs], container)
        if bad_paths:
            return [f"{where}{p}" for p in bad_paths], None
    from .inputs import input_problems

    blocked = input_problems(system, scenario)  # secrets in free text, the files the tests name (inputs.py)
    if blocked:
        return [f"{where}{p}" for p in blocked], None
    for tr in scenario.test_runs:
        space = tr.param_space if tr.is_dse_job else {}
        if "NUM_NODES" in space:
            problems.append(f"{where}test {tr.name!r}: num_nodes = {space['NUM_NODES']!r} is a list; CloudAI's sweep "
                            "cannot vary num_nodes (it sets NUM_NODES on cmd_args and fails at the first point). "
                            "Fix: one [[Tests]] entry per node count")
        if tr.time_limit is not None and not str(tr.time_limit).strip():
            problems.append(f"{where}test {tr.name!r}: time_limit = '' is empty. Fix: write HH:MM:SS (or D-HH:MM:SS), "
                            "or remove the key to use the partition's default")
    if problems:
        return problems, None
    report = preflight(system, scenario, result_dir, sink=sink, keep_all=keep_all)
    blocking = blocking_problems(report, scenario)
    if tests_dir is None and (ses := current()) is not None:
        tests_dir = ses.inputs.get("tests_dir")
    if blocking and tests_dir:  # the test files are read only to name them in a refusal
        blocking = blocking_problems(report, scenario, test_sources(tests_dir))
    return [f"{where}{p}" for p in blocking], report


def test_sources(tests_dir: Path | str) -> dict[str, str]:
    """The test TOMLs of ``tests_dir`` by the test's ``name`` (what a refusal names as the file to edit)."""
    from .config_files import named_test_files

    found: dict[str, str] = {}
    for name, path in named_test_files(tests_dir):
        if isinstance(name, str):
            found.setdefault(name, str(path))
    return found
