"""Size without bound (issue 46): a sweep of 10^6..10^9 points is counted, never enumerated, and refused in one line
naming the test file, the count, the limit and how to raise it; a long sweep under the limit shows progress; a
10^5-iteration log is parsed within a memory bound.

Own inputs (not the issue's): three or four swept fields of a real conf/ test, one of them a list of 1,000 values."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import pytest
from helpers import CONF, run_cli

from cloudai_mbridge.rules import sweep

SYSTEM = CONF / "system" / "slurm_b300_ib.toml"


def _values(n: int, start: int) -> str:
    return "[" + ", ".join(str(start + i) for i in range(n)) + "]"


def _conf(root: Path, mbs: int = 1000, gbs: int = 1000, seq: int = 1000) -> tuple[Path, Path, Path]:
    """conf/'s Kimi-K2 SFT trio with mbs x gbs x seq_length swept (10^9 points by default)."""
    for sub in ("system", "test", "test_scenario"):
        (root / sub).mkdir(parents=True)
    shutil.copy(SYSTEM, root / "system")
    shutil.copy(CONF / "test_scenario" / "kimi_k2_sft.toml", root / "test_scenario")
    text = (CONF / "test" / "kimi_k2_sft.toml").read_text()
    for old, new in (("mbs = 1", f"mbs = {_values(mbs, 1)}"), ("gbs = 128", f"gbs = {_values(gbs, 128)}"),
                     ("seq_length = 4096", f"seq_length = {_values(seq, 4096)}")):
        assert old in text
        text = text.replace(old, new)
    (root / "test" / "kimi_k2_sft.toml").write_text(text)
    return root / "system" / SYSTEM.name, root / "test_scenario" / "kimi_k2_sft.toml", root / "test"


def _parse(system: Path, scenario: Path, tests: Path):
    from cloudai.core import Parser
    from cloudai.parser import HOOK_ROOT

    return Parser(system, HOOK_ROOT).parse(tests, scenario)


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("huge")
    files = _conf(root)
    system, _tests, scenario = _parse(*files)
    return files, system, scenario


def test_a_billion_point_sweep_is_counted_not_enumerated(huge, monkeypatch: pytest.MonkeyPatch) -> None:
    (_s, scenario_file, tests), _system, scenario = huge
    monkeypatch.delenv(sweep.MAX_POINTS_ENV, raising=False)
    monkeypatch.setattr(sweep, "sweep_point", lambda *a, **k: pytest.fail("a point was enumerated"))
    start = time.perf_counter()
    line = sweep.sweep_limit_problem(scenario, {"kimi_k2_sft": str(tests / "kimi_k2_sft.toml")}, str(scenario_file))
    assert time.perf_counter() - start < 1.0
    assert line is not None and "\n" not in line
    for said in (str(tests / "kimi_k2_sft.toml"), "1,000,000,000 points", f"limit of {sweep.DEFAULT_MAX_POINTS:,}",
                 f"{sweep.MAX_POINTS_ENV}=1000000000", "Fix:"):
        assert said in line


def test_the_limit_is_raised_by_the_environment_and_a_bad_value_is_named(huge, monkeypatch) -> None:
    _files, _system, scenario = huge
    monkeypatch.setenv(sweep.MAX_POINTS_ENV, "1_000_000_000")
    assert sweep.sweep_limit_problem(scenario) is None
    monkeypatch.setenv(sweep.MAX_POINTS_ENV, "999999999")
    assert "1,000,000,000 points" in (sweep.sweep_limit_problem(scenario) or "")
    for bad in ("lots", "-5", "0", "1e9", "\x1b[31m"):
        monkeypatch.setenv(sweep.MAX_POINTS_ENV, bad)
        line = sweep.sweep_limit_problem(scenario) or ""
        assert sweep.MAX_POINTS_ENV in line and "whole number" in line and "\x1b" not in line, bad


def test_dry_run_and_verify_configs_checks_refuse_before_the_first_point(huge, monkeypatch) -> None:
    """scenario_check is what dry-run / run (the checking parser), verify-configs --system-config and preflight call:
    refused with the report None and not one point checked."""
    from cloudai_mbridge.cli.preflight import scenario_check
    from cloudai_mbridge.cli.session import session

    (_s, _f, tests), system, scenario = huge
    monkeypatch.delenv(sweep.MAX_POINTS_ENV, raising=False)
    monkeypatch.setattr(sweep, "_check", lambda *a, **k: pytest.fail("a point was checked"))
    start = time.perf_counter()
    with session("dry-run"):
        problems, report = scenario_check(system, scenario, "scenario.toml", tests_dir=tests)
    assert time.perf_counter() - start < 2.0
    assert report is None and len(problems) == 1
    assert "1,000,000,000 points" in problems[0] and str(tests / "kimi_k2_sft.toml") in problems[0]
    with pytest.raises(sweep.SweepTooLargeError):  # and nothing that enumerates gets past the count either
        sweep.preflight(system, scenario)


def test_preflight_cli_refuses_in_one_line_and_writes_nothing(huge, tmp_path: Path) -> None:
    (system, scenario, tests), _sys, _scn = huge
    out = tmp_path / "out"
    start = time.perf_counter()
    proc = run_cli("preflight", "--system-config", str(system), "--test-scenario", str(scenario),
                   "--tests-dir", str(tests), "--output-dir", str(out), cwd=tmp_path, timeout=180)
    took = time.perf_counter() - start
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert "1,000,000,000 points" in lines[0] and sweep.MAX_POINTS_ENV in lines[0]
    assert str(tests / "kimi_k2_sft.toml") in lines[0]
    assert not out.exists()
    # the CLI's start (CloudAI's import) is most of it: 5 s on an idle machine, 34 s on 2 cores at load 20; checking
    # the points would take weeks (about 2 ms a point)
    assert took < 120, took


def test_verify_configs_says_no_all_passed_before_refusing(huge, tmp_path: Path) -> None:
    """verify-configs of a folder with one system: CloudAI's parse passes, the sweep is then refused; nothing says
    "all passed"."""
    (system, _scenario, _tests), _sys, _scn = huge
    root = system.parent.parent
    proc = run_cli("verify-configs", str(root), cwd=tmp_path, timeout=180)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text
    assert "all passed" not in text
    assert "1,000,000,000 points" in text and sweep.MAX_POINTS_ENV in text


def test_a_long_sweep_under_the_limit_shows_progress(caplog, monkeypatch) -> None:
    now = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    progress = sweep._Progress(50_000)
    with caplog.at_level(logging.INFO):
        for done in range(0, 50_000, 1000):
            now[0] += 1.0
            progress(done)
    said = [r.getMessage() for r in caplog.records if "sweep points" in r.getMessage()]
    assert 3 <= len(said) <= 6, said  # every PROGRESS_EVERY_S (10 s) of 50 s
    assert "of 50,000 sweep points" in said[0] and "left" in said[0]
    quiet = sweep._Progress(100)  # a small sweep says nothing
    caplog.clear()
    with caplog.at_level(logging.INFO):
        now[0] += 100
        quiet(50)
    assert not caplog.records


# --- logs ---------------------------------------------------------------------------------------------------------
ITERATIONS = 3000  # tracemalloc makes a parse several times slower: small enough for seconds, large enough to measure


def _training_run(root: Path, n: int, ms: str | None = None) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import log_parse_scale as bench  # the benchmark's writer: the fixture's exact Megatron-Bridge line

    bench.write_training(root, n)
    if ms is not None:  # every iteration's time replaced (a damaged log)
        log = root / "logs" / "rank-0.log"
        lines = log.read_text().splitlines(keepends=True)
        import re

        log.write_text("".join(re.sub(r"\(ms\): [0-9.]+", f"(ms): {ms}", line) for line in lines))
    return root


def test_a_long_rank_log_is_parsed_in_bounded_memory_per_iteration(tmp_path: Path) -> None:
    """The Python objects a parse holds at its peak, per iteration of the log (tracemalloc): 1,721 B before issue 46
    (the iteration lines and their records held together, a dict per record), 842 B with the lines let go as read,
    351 B with each line read into array columns as the scan finds it (IterationRecords, 206 B an iteration kept).
    The log itself is read into an anonymous mapping tracemalloc does not see; benchmarks/log_parse_scale.py
    measures the RSS."""
    import tracemalloc

    from cloudai_mbridge.metrics import parse_training_run

    run = _training_run(tmp_path / "run", ITERATIONS)
    tracemalloc.start()
    try:
        m = parse_training_run(run)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert m.status == "ok" and len(m.iterations) == ITERATIONS
    assert peak / ITERATIONS < 500, f"{peak / ITERATIONS:.0f} B per iteration"
    assert current / ITERATIONS < 300, f"{current / ITERATIONS:.0f} B per iteration kept"


def test_a_log_of_damaged_times_gives_twenty_messages_and_a_count(tmp_path: Path) -> None:
    from cloudai_mbridge.metrics import parse_training_run

    m = parse_training_run(_training_run(tmp_path / "run", 500, ms="-1.0"))
    assert m.status == "bad_iteration_time"
    assert len(m.time_errors) == 21 and m.time_errors[-1] == "and 480 more like these", m.time_errors[-2:]


def test_a_log_larger_than_the_window_is_read_a_window_at_a_time_with_the_same_lines(monkeypatch) -> None:
    """Past scan.WINDOW bytes a log is searched a window at a time (memory does not grow with the log): with a
    4 KiB window every fixture log longer than that gives the lines, offsets, order and end-of-file verdict of the
    whole-file read, for every plan the parsers use (first_only, requires and requires_absent included)."""
    from cloudai_mbridge.metrics import refit, scan, training

    plans = [training._rank_plan(0, 0, None, True), training._rank_plan(1, 3, (0,), False), list(training.JOB_PLAN),
             list(refit.RANK0_PLAN), list(refit.OTHER_RANK_PLAN), list(refit.JOB_PLAN)]
    root = Path(__file__).resolve().parents[1] / "fixtures"
    files = [p for p in root.rglob("*") if p.is_file() and p.suffix in (".log", ".txt") and p.stat().st_size > 4096]
    assert len(files) >= 10
    for path in files:
        for plan in plans:
            monkeypatch.setattr(scan, "WINDOW", 1 << 40)
            whole = scan.scan_file(path, plan)
            monkeypatch.setattr(scan, "WINDOW", 4096)
            monkeypatch.setattr(scan._LOCAL, "window", None, raising=False)
            windows = scan.scan_file(path, plan)
            assert (windows.size, windows.truncated, windows.searched) == (whole.size, whole.truncated, whole.searched)
            assert dict(windows.hits) == dict(whole.hits), (path, [m.name for m in plan])
