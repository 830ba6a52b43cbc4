"""Issue 44, item 3: what a verdict line on the A/B and refit pages carries (its n, its method, what its interval
covers), one definition of steady state and one time unit per page, a definition for every column, no ranking
without an interval on the difference.

The A/B cells are real: benchmarks/results/bridge_ab_4gpu/dsv3_mbs1_cloudai_h7 (3 + 3 starts through `cloudai run`,
Megatron-Bridge 0.6.2, 4 x H200, 2026-11-28) and the 1 + 1-start mcore runs of tests/fixtures/logs/gpu (2 x H200,
2026-11-22)."""

from __future__ import annotations

import html
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CLOUDAI_CELL = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1_cloudai_h7"
MCORE_RUNS = [ROOT / "tests" / "fixtures" / "logs" / "gpu" / f"ab_mbs1_overlap-off_{arm}" for arm in ("alltoall",
                                                                                                      "deepep")]


def _ab_page(tmp_path: Path, runs: list[Path], monkeypatch: pytest.MonkeyPatch | None = None,
             figures: list | None = None) -> tuple[str, list[dict]]:
    pytest.importorskip("cloudai")
    from cloudai_mbridge.reports import ab
    from cloudai_mbridge.reports.folders import ab_report

    if monkeypatch is not None and figures is not None:
        from cloudai_mbridge import plots

        original = plots.save

        def keep(fig, path):  # the figure's texts, read before it is closed
            suptitle = fig._suptitle.get_text() if fig._suptitle is not None else ""
            figures.append([(suptitle or a.get_title(), a.get_xlabel(), a.get_ylabel(), a.get_xlim())
                            for a in fig.axes])
            return original(fig, path)

        monkeypatch.setattr(ab, "save", keep)
        monkeypatch.setattr(plots, "save", keep)  # series_plot's
    copies = [shutil.copytree(run, tmp_path / "runs" / "_".join(run.relative_to(run.parents[2]).parts))
              for run in runs]
    out = tmp_path / "out"
    rows = ab_report(copies, out, warmup=4)
    return (out / "mbridge_ab.html").read_text(), rows


def _cloudai_runs() -> list[Path]:
    return sorted(p.parent for p in CLOUDAI_CELL.glob("start*/0/*/mbridge_config.json"))


def _headline_items(page: str) -> list[str]:
    box = re.search(r"<div class='headline'>(.*?)</div>", page, re.S).group(1)
    return [html.unescape(re.sub(r"<[^>]+>", "", li)) for li in re.findall(r"<li>(.*?)</li>", box, re.S)]


def _findings(page: str) -> list[str]:
    """The refit headline's items, one per source layout (each holds a list of its comparisons)."""
    box = re.search(r"<div class='headline'>(.*?)</div>", page, re.S).group(1)
    items = re.split(r"<li>(?=From <b>)", box)[1:]
    return [html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"</?(li|ul|br)>", " ", item))) for item in items]


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _tables(page: str) -> list[tuple[list[str], list[tuple[str, str]]]]:
    """Every table with column headers: (its headers, the legend under it as (name, definition))."""
    out = []
    for m in re.finditer(r"<table><thead><tr>(.*?)</tr></thead>.*?</table>(<ul class='legend'>(.*?)</ul>)?", page,
                         re.S):
        headers = [html.unescape(h) for h in re.findall(r"<th>(.*?)</th>", m.group(1))]
        legend = [(html.unescape(n), html.unescape(d)) for n, d in re.findall(r"<li><b>(.*?)</b>: (.*?)</li>",
                                                                              m.group(3) or "")]
        out.append((headers, legend))
    return out


# --- (1) a 3 + 3-start cell: its verdict says its starts and its one method ----------------------------------------
def test_a_three_plus_three_start_verdict_says_its_starts_and_names_its_method_once(tmp_path: Path) -> None:
    page, rows = _ab_page(tmp_path, _cloudai_runs())
    (row,) = [r for r in rows if r.get("arm")]
    assert (row["base_starts"], row["arm_starts"], row["interval_method"]) == (3, 3, "bootstrap over starts")
    (verdict, finished) = _headline_items(page)
    assert "n = 3 + 3 starts, 24 + 24 steady-state iterations" in verdict
    assert verdict.count("bootstrap") == 1 and "Welch" not in verdict
    assert "covering noise between starts and between iterations, on one machine" in verdict
    assert "all 6 runs finished" in finished
    # the page's text describes the method that made this verdict and no other
    assert "Welch" not in page and "two-level bootstrap" in page


def test_a_one_plus_one_start_verdict_names_welch_and_no_bootstrap(tmp_path: Path) -> None:
    page, rows = _ab_page(tmp_path, MCORE_RUNS)
    (row,) = [r for r in rows if r.get("arm")]
    assert row["interval_method"] == "Welch over iterations"
    (verdict, _) = _headline_items(page)
    assert "n = 1 + 1 starts, 26 + 26 steady-state iterations; Welch over iterations, covering noise between " \
           "iterations of one run, not between job starts" in verdict
    assert "bootstrap" not in page.lower()


def test_a_page_with_both_kinds_of_cell_says_per_row_which_method_and_which_steady_state(tmp_path: Path) -> None:
    """The 3 + 3-start cell beside a 1 + 1-start cell of the same plugin (4 x H100, Megatron-Bridge 0.6.2, 20
    iterations, manual GC every 5): each verdict line names its own method once, the text names both, each row
    says whether its manual-GC iterations are left out or kept, and the runs table follows its cell."""
    h100 = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1" / "runs"
    page, rows = _ab_page(tmp_path, [*_cloudai_runs(), h100 / "w1_alltoall_s0", h100 / "w1_deepep_s0"])
    by_method = {r["interval_method"]: r for r in rows if r.get("arm")}
    assert set(by_method) == {"bootstrap over starts", "Welch over iterations"}
    welch = by_method["Welch over iterations"]
    assert welch["manual_gc"] == "6 11 16 kept" and by_method["bootstrap over starts"]["manual_gc"] == "6 11 left out"
    verdicts = [v for v in _headline_items(page) if " vs alltoall" in v]
    assert len(verdicts) == 2
    for v in verdicts:
        assert ("Welch" in v) != ("bootstrap" in v) and v.count("Welch") + v.count("bootstrap") == 1
    (one,) = [v for v in verdicts if "Welch" in v]
    assert "n = 1 + 1 starts, 16 + 16 steady-state iterations (manual-GC iterations 6 11 16 kept)" in one
    note = page[page.index("<h2>A/B by dispatcher</h2>"):page.index("<table>", page.index("<h2>A/B by dispatcher"))]
    assert "Each row names the method of its interval" in note and "Welch" in note and "bootstrap" in note
    assert "left out in cells run more than once and kept in cells run once" in note
    # the runs of the 1 + 1 cell: their time per iteration is the Welch row's (garbage collections in)
    runs = re.search(r"<h2>Runs</h2>.*?<tbody>(.*?)</tbody>", page, re.S).group(1)
    kept = [float(re.findall(r"<td[^>]*>(.*?)</td>", tr)[5].replace(",", ""))
            for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", runs, re.S) if "6 11 16 kept" in tr]
    assert sorted(kept) == pytest.approx(sorted([welch["base_time_s"] * 1000, welch["arm_time_s"] * 1000]),
                                         abs=0.01)


# --- (2) one steady state, one time unit, every column defined -----------------------------------------------------
def test_the_ab_page_uses_one_steady_state_one_time_unit_and_defines_every_column(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    figures: list = []
    page, rows = _ab_page(tmp_path, _cloudai_runs(), monkeypatch, figures)
    # every table's every column has a definition in the legend under it
    tables = _tables(page)
    assert len(tables) >= 2  # the runs and the A/B
    for headers, legend in tables:
        assert [name for name, _ in legend] == headers
        assert all(len(text) > 10 for _, text in legend), legend
    a_b = next(legend for headers, legend in tables if "compared arm" in headers)
    assert "baseline stalls" in dict(a_b) and "3 x their run's median" in dict(a_b)["baseline stalls"]
    # one unit: every time header in ms, no seconds anywhere in the page's text
    headers = [h for hs, _ in tables for h in hs]
    assert not [h for h in headers if "(s)" in h or "(µs)" in h], headers
    assert [h for h in headers if "time per iteration" in h] == ["time per iteration (ms)",
                                                                  "baseline time per iteration (ms)",
                                                                  "arm time per iteration (ms)"]
    text = _text(page.split("id='provenance'")[0])
    assert not re.search(r"\d (s|sec|seconds|µs|us)\b", text), re.findall(r".{30}\d (?:s|µs|us)\b.{10}", text)
    # plots: time axes in ms, the times plot starts near the data and says so, every plot titled
    labels = [label for fig in figures for (_, label, _, _) in fig] + [y for fig in figures for (_, _, y, _) in fig]
    assert not [lab for lab in labels if "(s)" in lab]
    times = next(fig for fig in figures if fig[0][1].startswith("time per iteration (ms)"))
    assert "the axis starts at" in times[0][1] and times[0][3][0] > 0
    assert len(figures) == 3 and all(any(title for (title, _, _, _) in fig) for fig in figures)
    # one definition of steady state: the runs table's per-start times average to the A/B table's arm times
    (row,) = [r for r in rows if r.get("arm")]
    runs = re.search(r"<h2>Runs</h2>.*?<tbody>(.*?)</tbody>", page, re.S).group(1)
    by_arm: dict[str, list[float]] = {}
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", runs, re.S):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tr)]
        by_arm.setdefault(cells[0], []).append(float(cells[5].replace(",", "")))
    assert {k: len(v) for k, v in by_arm.items()} == {"dispatcher=alltoall": 3, "dispatcher=ncclep": 3}
    assert sum(by_arm["dispatcher=alltoall"]) / 3 == pytest.approx(row["base_time_s"] * 1000, abs=0.01)
    assert sum(by_arm["dispatcher=ncclep"]) / 3 == pytest.approx(row["arm_time_s"] * 1000, abs=0.01)
    assert "<th>manual-GC iterations</th>" in page and page.count(">6 11 left out<") == 7  # 6 runs + the cell


def test_the_dispatch_section_and_the_refit_page_speak_ms_and_define_their_columns(tmp_path: Path) -> None:
    from cloudai_mbridge.reports.dispatch_bench import section

    rows = [{"model": "m", "mbs": 1, "tokens_per_rank": 4096, "ranks": 4, "backend": "alltoall", "status": "ok",
             "dispatch_median_us": 410.2, "dispatch_p10_p90_us": "400.0..420.5", "combine_median_us": 520.0,
             "combine_p10_p90_us": "510.0..530.0", "dispatch_algbw_gbps": 1.0, "combine_algbw_gbps": 1.0,
             "calls": 50}]
    page = section(rows)
    ((headers, legend),) = _tables(page)
    assert [n for n, _ in legend] == headers and not [h for h in headers if "µs" in h]
    assert ">0.4102<" in page and ">0.4000..0.4205<" in page
    refit = _refit_page(tmp_path)
    ((headers, legend),) = _tables(refit)
    assert [n for n, _ in legend] == headers and all(text for _, text in legend)
    assert not re.search(r"\d (s|µs)\b", _text(refit.split("id='provenance'")[0]))


# --- (3) the refit ranking: an interval on every difference -------------------------------------------------------
def _refit_page(tmp_path: Path) -> str:
    from test_report_readability import _refit_row

    from cloudai_mbridge.reports.provenance import collect
    from cloudai_mbridge.reports.refit_table import write_refit_report

    rows = [
        # the new user's page: medians 61.8 / 82.3 / 95.9 ms whose p10-p90 spreads overlap (were "+33 / +55 %")
        _refit_row("TP2·EP2", "TP1·EP4", [35.7, 50.0, 61.8, 70.0, 79.5]),
        _refit_row("TP2·EP2", "TP4·EP1", [60.0, 75.0, 82.3, 90.0, 100.0]),
        _refit_row("TP2·EP2", "TP1·EP1", [58.3, 80.0, 95.9, 110.0, 118.1]),
        # a clearly separated pair, 8 timed refits each
        _refit_row("TP8·EP8", "TP8·EP4", [10.0, 10.1, 10.2, 10.3, 10.4, 10.5, 10.6, 10.7]),
        _refit_row("TP8·EP8", "TP16·EP4", [12.0, 12.2, 12.4, 12.6, 12.8, 13.0, 13.2, 13.4]),
    ]
    write_refit_report(tmp_path, "Refit: t", rows, collect(tmp_path, []))
    return (tmp_path / "mbridge_refit.html").read_text()


def test_refit_mappings_with_overlapping_spreads_are_not_distinguishable_and_a_separated_pair_is_ranked(
        tmp_path: Path) -> None:
    import csv

    page = _refit_page(tmp_path)
    overlapping, separated = (re.sub(r"\s+", " ", f) for f in _findings(page))
    assert "lowest median → TP1·EP4, 61.8 ms median" in overlapping and "fastest →" not in overlapping
    assert "no fastest: not distinguishable from → TP4·EP1, → TP1·EP1" in overlapping
    for dst, median in (("TP4·EP1", 82.3), ("TP1·EP1", 95.9)):
        line = re.search(rf"→ {dst}: {median} ms median, \+[\d.]+ % \(95 % interval (-[\d.]+)\.\.\+[\d.]+ %, "
                         r"n = 5 \+ 5 timed refits\) not distinguishable: the interval holds 0", overlapping)
        assert line, overlapping
    assert "refit-to-refit noise within a run, not run-to-run noise" in overlapping
    assert "fastest → TP8·EP4, 10.4 ms median" in separated and "ranked: every other mapping is slower" in separated
    line = re.search(r"→ TP16·EP4: 12\.7 ms median, \+22\.7 % \(95 % interval \+([\d.]+)\.\.\+([\d.]+) %, n = 8 \+ 8 "
                     r"timed refits\) slower", separated)
    assert line and 0.0 < float(line.group(1)) < 22.7 < float(line.group(2)), separated
    with (tmp_path / "mbridge_refit.csv").open() as f:
        table = {r["dst_layout"]: r for r in csv.DictReader(f)}
    assert table["TP4·EP1"]["vs_fastest_verdict"] == table["TP1·EP1"]["vs_fastest_verdict"] == "not distinguishable"
    assert table["TP16·EP4"]["vs_fastest_verdict"] == "slower"
    lo, hi = map(float, table["TP16·EP4"]["vs_fastest_ci95_pct"].split(".."))
    assert 0.0 < lo < hi


def test_the_ratio_interval_is_a_repeatable_bootstrap_that_widens_with_noise() -> None:
    from cloudai_mbridge.reports.refit_table import ratio_interval

    steady = ratio_interval([10.0, 10.1, 9.9, 10.0, 10.05], [12.0, 12.1, 11.9, 12.0, 12.05])
    noisy = ratio_interval([10.0, 6.0, 14.0, 9.0, 11.0], [12.0, 8.0, 16.0, 11.0, 13.0])
    assert steady == ratio_interval([10.0, 10.1, 9.9, 10.0, 10.05], [12.0, 12.1, 11.9, 12.0, 12.05])
    assert steady[0] == pytest.approx(20.0) and 0.0 < steady[1] < 20.0 < steady[2]
    assert noisy[1] < 0.0 < noisy[2]
    assert ratio_interval([], [1.0]) is None


# --- (4) the demo: the best recorded cell, with its provenance ----------------------------------------------------
def test_the_demo_picks_the_best_recorded_cell_by_the_projects_rule(tmp_path: Path) -> None:
    from cloudai_mbridge.reports.demo import RecordedCell, best_cell, recorded_cells

    cells = recorded_cells()
    best = best_cell(cells)
    assert best is not None and best.folder == CLOUDAI_CELL.parent / "dsv3_mbs1_hybridep_2gpu_h10"
    assert best.counts and best.engines == {"bridge"} and best.starts == 3 and best.via_cloudai and best.time_split
    # of two cells with as many starts, both through cloudai run, the one that recorded where the time went wins
    h7 = next(c for c in cells if c.folder == CLOUDAI_CELL)
    assert h7.counts and h7.via_cloudai and not h7.time_split and best_cell([h7, best]) is best
    assert len(best.runs) == 6
    assert all(not c.counts for c in cells if c.starts < 3)
    # more starts win over a cloudai run; a cell that does not count or ran another engine is never shown
    row = {"baseline": "alltoall", "arm": "ncclep", "base_starts": "5", "arm_starts": "5"}

    def cell(name: str, counts: bool = True, engines: frozenset = frozenset({"bridge"}), starts: int = 5,
             cloudai: bool = False) -> RecordedCell:
        rows = [{**row, "base_starts": str(starts), "arm_starts": str(starts)}]
        return RecordedCell(tmp_path / name, [], rows, counts, None if counts else "x", set(engines), cloudai)

    assert best_cell([best, cell("five")]).folder.name == "five"
    assert best_cell([best, cell("mcore", engines=frozenset({"mcore"})), cell("no", counts=False)]) is best
    assert best_cell([cell("no", counts=False)]) is None
    split = cell("a_split", cloudai=True)
    split.rows = [{**r, "time_split": "recorded"} for r in split.rows]
    assert split.time_split and best_cell([split, cell("z_no_split", cloudai=True)]) is split
