"""Issue 14: a damaged iteration time (negative, zero, nan/inf, absurd) never becomes a number.

Copies of the real GPU run folders (tests/fixtures/logs/gpu) are edited in tmp_path: one time of one run is
replaced, and the run must turn invalid with the line's value in the reason, the A/B must give it no winner, and
the other runs of the scenario must keep their rows.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import parse_refit_run, parse_training_run
from cloudai_mbridge.metrics.stats import MAX_ITERATION_MS, iteration_time_problem, steady_state
from cloudai_mbridge.reports.ab import failure_text, run_row

ROOT = Path(__file__).resolve().parent.parent.parent
GPU = ROOT / "tests" / "fixtures" / "logs" / "gpu"
AB_RUNS = ["ab_mbs1_overlap-off_alltoall", "ab_mbs1_overlap-off_deepep", "ab_mbs4_overlap-off_alltoall",
           "ab_mbs4_overlap-off_deepep"]

# (value written into the log, what the reason says)
BAD_TIMES = [
    ("-5.0", "negative"),
    ("-0.0", "zero"),
    ("0.0", "zero"),
    ("nan", "not a number"),
    ("inf", "infinite"),
    ("-inf", "infinite"),
    ("1e308", "above 1e+09 ms"),
    ("2000000000.0", "above 1e+09 ms"),
]


@pytest.mark.parametrize(("value", "expected"), [*BAD_TIMES, ("1e999", "infinite"), ("1.5", None), ("1e9", None)])
def test_iteration_time_problem(value: str, expected: str | None) -> None:
    assert iteration_time_problem(float(value)) == expected


def test_huge_finite_values_never_overflow_the_statistics() -> None:
    stats = steady_state([1e308, 1e308, 1.7e308], warmup=0)
    assert stats.n == 3 and math.isfinite(stats.mean) and stats.max == 1.7e308
    assert MAX_ITERATION_MS == 1e9


def _edit_training(folder: Path, iteration: int, value: str) -> None:
    log = folder / "logs" / "rank-1.log"  # the last rank prints the iteration lines
    text = log.read_text()
    pattern = rf"(iteration\s+{iteration}/\s*\d+ \|.*?elapsed time per iteration \(ms\): )[^ |]+"
    new, n = re.subn(pattern, lambda m: m.group(1) + value, text)
    assert n == 1
    log.write_text(new)


@pytest.mark.parametrize(("value", "expected"), BAD_TIMES)
def test_damaged_training_time_makes_the_run_invalid(tmp_path: Path, value: str, expected: str) -> None:
    run = shutil.copytree(GPU / AB_RUNS[1], tmp_path / "run")
    _edit_training(run, 12, value)
    m = parse_training_run(run)
    assert m.status == "bad_iteration_time" and not m.ok
    assert len(m.time_errors) == 1
    shown = str(float(value))  # the value as read
    assert "iteration 12" in m.time_errors[0] and shown in m.time_errors[0] and expected in m.time_errors[0]
    assert 12 not in [r.iteration for r in m.iterations if r.elapsed_ms is not None]
    for stats in (m.iteration_time_ms, m.tokens_per_s, m.tflops_per_gpu):
        assert stats.mean is None or (math.isfinite(stats.mean) and stats.mean > 0)
    text = failure_text(m)
    assert text is not None and "iteration 12" in text and shown in text and expected in text
    row = run_row("p", type("TR", (), {"output_path": run, "test": None})(), m)
    assert row["iter_ms"] is None and row["tokens_per_s_per_gpu"] is None and row["gpu_hours"] is None
    assert m.summary()["bad_iteration_times"] == m.time_errors[0]


@pytest.mark.parametrize(("value", "expected"), BAD_TIMES)
def test_a_damaged_arm_never_wins_and_the_other_cell_keeps_its_row(
    tmp_path: Path, value: str, expected: str
) -> None:
    import gpu_dispatcher_ab  # benchmarks/ is on pytest's pythonpath: reports/ab.py on run folders

    folders = [shutil.copytree(GPU / name, tmp_path / "runs" / name) for name in AB_RUNS]
    _edit_training(folders[1], 20, value)  # the mbs1 deepep arm
    rows = gpu_dispatcher_ab.ab_report(folders, tmp_path / "report", warmup=4)
    by_cell = {r["cell"]: r for r in rows}
    assert len(by_cell) == 2  # one bad run never loses the other rows
    bad = next(r for r in rows if "deepep" in str(r["arm"]) and "mbs1" in r["arm_run"])
    good = next(r for r in rows if r is not bad)
    assert bad["verdict"].startswith("invalid") and "bad_iteration_time" in bad["verdict"]
    assert "iteration 20" in bad["verdict"] and expected in bad["verdict"]
    assert bad["arm_time_s"] is None and bad["delta_pct"] is None and bad["delta_ci95_pct"] is None
    assert gpu_dispatcher_ab.winner(bad["verdict"]) == "none"
    assert good["verdict"] == "within noise" and good["arm_time_s"] is not None
    runs_csv = (tmp_path / "report" / "mbridge_runs.csv").read_text()
    assert runs_csv.count("\n") == 5  # header + all four runs
    assert (tmp_path / "report" / "mbridge_ab.html").is_file()


def _edit_refit(folder: Path, iteration: int, value: str) -> None:
    log = folder / "logs" / "rank-0.log"
    text = log.read_text()
    new, n = re.subn(rf"REFIT_ITER iter={iteration} time_ms=\S+", f"REFIT_ITER iter={iteration} time_ms={value}", text)
    assert n == 1
    log.write_text(new)


@pytest.mark.parametrize(("value", "expected"), [*BAD_TIMES, ("1e999", "infinite"), ("12x", "not a number")])
def test_damaged_refit_time_makes_the_run_invalid(tmp_path: Path, value: str, expected: str) -> None:
    run = shutil.copytree(GPU / "refit_tp2-ep2_1l", tmp_path / "run")
    _edit_refit(run, 3, value)
    m = parse_refit_run(run)  # no OverflowError, whatever the value
    assert m.status == "bad_iteration_time" and not m.ok
    assert m.time_errors == (f"REFIT_ITER iter=3 time_ms={value} is {expected}",)
    assert [i for i, _ in m.iterations] == [0, 1, 2, 4]
    assert all(math.isfinite(v) for v in (m.time_ms.mean, m.time_ms.max, m.time_ms.stdev))
    assert m.summary()["bad_iteration_times"] == m.time_errors[0]

    from cloudai_mbridge.reports.refit_table import _failure
    from cloudai_mbridge.workloads.reporting import run_status

    assert value in _failure(m) and expected in _failure(m)
    status = run_status(run)
    assert not status.is_successful and f"time_ms={value}" in status.error_message


def test_a_damaged_printed_summary_does_not_raise(tmp_path: Path) -> None:
    run = shutil.copytree(GPU / "refit_tp2-ep2_1l", tmp_path / "run")
    log = run / "logs" / "rank-0.log"
    log.write_text(log.read_text().replace("Mean refit time: 163.22 ms", "Mean refit time: 1e999 ms")
                   .replace("Effective bandwidth: 265.660 GB/s", "Effective bandwidth: 1e999 GB/s"))
    m = parse_refit_run(run)
    assert m.status == "summary_mismatch" and m.bandwidth_gbps is None
