"""Issue 46: a log longer than SAMPLE_CAP is summarised in memory that does not grow with it, and says so where its
numbers are read. Each test would fail if the kept values grew with the log again (counts and lengths, no timing)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import parse_refit_run, refit, refit_frame, steady_state
from cloudai_mbridge.metrics.stats import SAMPLE_CAP, StreamedSeries, SystematicSample

from .conftest import make_run

CAP = 1024  # the tests' cap: the same code as SAMPLE_CAP = 2^16, on logs a test writes in milliseconds
CONFIG = {"workload": "refit", "world_size": 2, "num_nodes": 1, "gpus_per_node": 2}


def _ms(i: int) -> float:
    return round(45.0 + (i * 7919) % 97 / 100, 2)


def _refit_log(n: int, summary: bool = True, extra: str = "") -> str:
    lines = ["REFIT_CONFIG {}\n"] + [f"REFIT_ITER iter={i} time_ms={_ms(i):.2f}\n" for i in range(n)]
    lines.append(extra)
    times = [_ms(i) for i in range(n)]
    if summary:
        lines.append(f"Mean refit time: {statistics.fmean(times):.2f} ms\nMin refit time: {min(times):.2f} ms\n"
                     f"Max refit time: {max(times):.2f} ms\nMedian refit time: {statistics.median(times):.2f} ms\n")
    lines.append("REFIT_STATS bytes_remote=1073741824 bytes_local=536870912 send_ops=512 recv_ops=384\n"
                 "REFIT_VERIFY status=pass params=1234 mismatched=0 detail=bit-exact\n"
                 'REFIT_RESULT {"refit_time_ms": 45.5}\n')
    return "".join(lines)


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(refit, "SAMPLE_CAP", CAP)
    return CAP


def test_the_cap_is_a_power_of_two_that_normal_logs_stay_under() -> None:
    assert SAMPLE_CAP == 1 << 16


def test_a_systematic_sample_never_holds_more_than_its_cap() -> None:
    sample = SystematicSample("qd", cap=8)
    for i in range(1000):
        sample.add(i, float(i))
        assert len(sample) <= 8
    assert sample.stride == 128  # 1000 values: 1-in-2^7 keeps 8
    assert list(sample.columns[0]) == list(range(0, 1000, 128))
    assert list(sample.columns[1]) == [float(i) for i in range(0, 1000, 128)]


def test_a_series_up_to_the_cap_is_summarised_as_before() -> None:
    values = [float(_ms(i)) for i in range(CAP)]
    capped, whole = steady_state(values, 4, cap=CAP), steady_state(values, 4)
    assert capped == whole and not capped.sampled and capped.sample_note is None


def test_a_series_past_the_cap_keeps_a_sample_and_says_so() -> None:
    values = [float(_ms(i)) for i in range(20 * CAP)] + [None, math.nan, 900.0]
    whole, capped = steady_state(values, 4), steady_state(values, 4, cap=CAP)
    # streamed exactly: the count, the invalid values, the mean (fsum of every value), min and max
    assert (capped.n, capped.n_invalid, capped.n_warmup) == (whole.n, whole.n_invalid, whole.n_warmup)
    assert (capped.mean, capped.min, capped.max) == (whole.mean, whole.min, whole.max)
    assert capped.stdev == pytest.approx(whole.stdev, rel=1e-9)
    # the order statistics of at most CAP of them, and it says so
    assert capped.sampled and capped.sample_stride == 32 and CAP // 2 <= capped.n_sampled <= CAP
    assert capped.median == pytest.approx(whole.median, abs=0.02)
    assert "1-in-32 sample" in capped.sample_note and f"{whole.n:,}" in capped.sample_note


def test_a_streamed_series_holds_at_most_its_cap() -> None:
    series = StreamedSeries("dq", cap=CAP)
    for i in range(50 * CAP):
        series.add(_ms(i), i)
    assert len(series.sample) <= CAP and len(series.sample.columns[1]) <= CAP
    assert len(series.partials) < 64  # Shewchuk's partials: a handful, whatever the count
    assert series.stats().n == 50 * CAP


def test_a_refit_log_past_the_cap_is_read_in_bounded_memory(tmp_path: Path, small_cap: int) -> None:
    n = 10 * small_cap + 7
    m = parse_refit_run(make_run(tmp_path / "run", CONFIG, {0: _refit_log(n), 1: "ok\n"}))
    assert m.status == "ok", m.problems
    assert len(m.iterations) <= small_cap  # what is held after the parse: the sample, not n
    t = m.time_ms
    times = [_ms(i) for i in range(n)]
    assert (t.n, t.min, t.max) == (n, min(times), max(times))
    assert t.mean == math.fsum(times) / n
    assert t.sampled and t.sample_stride == 16
    assert m.iterations[:3] == ((0, _ms(0)), (16, _ms(16)), (32, _ms(32)))
    # the printed median is of every refit: a sample's median is not held against it (no summary_mismatch)
    assert "summary_mismatch" not in m.problems


def test_a_sampled_refit_says_so_in_its_summary_and_csv(tmp_path: Path, small_cap: int) -> None:
    m = parse_refit_run(make_run(tmp_path / "run", CONFIG, {0: _refit_log(4 * small_cap + 1), 1: "ok\n"}))
    summary = m.summary()
    assert summary["n"] == 4 * small_cap + 1
    assert "1-in-8 sample" in summary["sample"] and "mbridge_refit_iterations.csv" in summary["sample"]
    frame = refit_frame(m)
    assert list(frame.columns) == ["iter", "time_ms", "sample_1_in"] and set(frame.sample_1_in) == {8}


def test_a_refit_under_the_cap_says_nothing_about_samples(tmp_path: Path, small_cap: int) -> None:
    m = parse_refit_run(make_run(tmp_path / "run", CONFIG, {0: _refit_log(small_cap), 1: "ok\n"}))
    assert m.status == "ok" and not m.time_ms.sampled and len(m.iterations) == small_cap
    assert "sample" not in m.summary() and list(refit_frame(m).columns) == ["iter", "time_ms"]


def test_past_the_cap_an_iteration_out_of_order_invalidates_the_run(tmp_path: Path, small_cap: int) -> None:
    log = _refit_log(3 * small_cap, summary=False, extra="REFIT_ITER iter=5 time_ms=45.00\n")
    m = parse_refit_run(make_run(tmp_path / "run", CONFIG, {0: log, 1: "ok\n"}))
    assert m.status == "bad_iteration_time"
    assert any("iter=5 comes after" in e and "read in order" in e for e in m.time_errors)
    assert len(m.iterations) <= small_cap


def test_the_plain_iteration_lines_are_not_kept_for_the_failure_search(tmp_path: Path, small_cap: int) -> None:
    from cloudai_mbridge.metrics.layout import load_layout
    from cloudai_mbridge.metrics.scan import scan_run

    run = make_run(tmp_path / "run", CONFIG, {0: _refit_log(5 * small_cap), 1: "ok\n"})
    layout = load_layout(run)
    plan = (*refit.RANK0_PLAN[:-1], refit.dataclasses.replace(refit.RANK0_ITER, fold=refit._RefitReader))
    scan = scan_run(layout, lambda rank: plan if rank == 0 else refit.OTHER_RANK_PLAN, refit.JOB_PLAN).ranks[0]
    reader = scan.folded[refit.RANK0_ITER.name]
    assert reader.lines == 5 * small_cap and reader.kept == []  # read as found, none held
    assert reader.by_iter is None and len(reader.series.sample) <= small_cap
    assert all("REFIT_ITER" not in line.text for line in scan.lines(refit.REFIT.name))


def test_the_refit_page_says_which_run_was_sampled(tmp_path: Path, small_cap: int) -> None:
    import csv

    from cloudai_mbridge.reports.provenance import collect
    from cloudai_mbridge.reports.refit_table import refit_row, write_refit_report

    mapping = {"model": {"name": "m", "num_layers": 1}, "src": {"tp": 1, "ep": 1, "pp": 1},
               "dst": {"tp": 2, "ep": 1, "pp": 1}, "mode": "collocated", "transport": "nccl", "dtype": "bf16"}
    long = parse_refit_run(make_run(tmp_path / "long", CONFIG, {0: _refit_log(3 * small_cap), 1: "ok\n"}))
    short = parse_refit_run(make_run(tmp_path / "short", CONFIG, {0: _refit_log(100), 1: "ok\n"}))
    rows = [refit_row("long", 0, mapping, long, "long"), refit_row("short", 1, mapping, short, "short")]
    (tmp_path / "page").mkdir()
    write_refit_report(tmp_path / "page", "Refit", rows, collect(tmp_path, [], system="s", scenario="sc"))
    page = (tmp_path / "page" / "mbridge_refit.html").read_text()
    assert f"{3 * small_cap:,} (median, p10, p90 and stalls from a 1-in-4 sample" in page
    # the comparison's n says how many refits each side's times stand for (a sample of the long run's)
    n_long = len(long.iterations)
    assert n_long < 3 * small_cap
    assert (f"n = 100 + {n_long:,} (a sample of {3 * small_cap:,}) timed refits" in page
            or f"n = {n_long:,} (a sample of {3 * small_cap:,}) + 100 timed refits" in page), page
    with (tmp_path / "page" / "mbridge_refit.csv").open() as f:
        by_run = {r["run"]: r for r in csv.DictReader(f)}
    assert "1-in-4 sample" in by_run["long"]["sample"] and by_run["short"]["sample"] == ""
    assert by_run["long"]["n"] == str(3 * small_cap)


class _Count:
    def __init__(self) -> None:
        self.n = 0

    def add(self, line: object) -> None:
        self.n += 1


def test_a_scan_remembers_no_offset_per_line_of_a_one_needle_marker(tmp_path: Path) -> None:
    import tracemalloc

    from cloudai_mbridge.metrics.scan import Marker, scan_file

    n = 30_000
    log = tmp_path / "rank-0.log"
    log.write_text("".join(f"REFIT_ITER iter={i} time_ms=45.00\n" for i in range(n)))
    folded = Marker("it", (b"time_ms=",), fold=_Count)
    dropped = Marker("other", (b"REFIT_", b"refit time:"), keep=refit.RANK0_REFIT.keep)  # every hit dropped by keep
    scan_file(log, [folded, dropped])  # warm: the reused read buffer, the regexes
    tracemalloc.start()
    try:
        scan = scan_file(log, [folded, dropped])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert scan.folded["it"].n == n and scan.lines("other") == ()
    # a set of 3 x 10^4 offsets alone is ~3 MB: what the scan holds must not grow with the lines it hands on or drops
    assert peak < 1 << 20, f"{peak / 2**20:.2f} MiB traced while scanning {n:,} lines"


def test_the_per_test_refit_report_of_a_sampled_run_says_so(tmp_path: Path, small_cap: int,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import csv
    import json

    from helpers import CONF, slurm_strategy

    from cloudai_mbridge.workloads import reporting

    titles: list[str] = []
    monkeypatch.setattr(reporting, "series_plot", lambda path, title, *a, **k: titles.append(title))
    out = tmp_path / "run"
    strategy = slurm_strategy(CONF / "system" / "local_slurm.toml", CONF / "test" / "refit_cpu_smoke.toml", 2, out,
                              {"dst": {"tp": 1, "ep": 4, "etp": 1}})
    strategy.gen_exec_command()
    (out / "logs").mkdir()
    (out / "logs" / "rank-0.log").write_text(_refit_log(5 * small_cap))
    for rank in (1, 2, 3):
        (out / "logs" / f"rank-{rank}.log").write_text("ok\n")
    reporting.MBridgeRefitReport(strategy.system, strategy.test_run).generate_report()
    summary = json.loads((out / "mbridge_summary.json").read_text())
    assert summary["n"] == 5 * small_cap and "1-in-8 sample" in summary["sample"]
    with (out / "mbridge_refit_iterations.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) <= small_cap and {r["sample_1_in"] for r in rows} == {"8"}
    assert titles and f"a 1-in-8 sample of {5 * small_cap:,} refits" in titles[0]
