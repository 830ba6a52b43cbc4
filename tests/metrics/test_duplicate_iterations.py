"""Held-out finding: a training log that logs one iteration twice with different values (a restarted rank, logs
concatenated) was parsed silently, the last copy kept. One run does not log two times for one iteration: the run is
``inconsistent_log``, no number comes out of it (the metric extractor, the A/B row, the job status), and the message
names the log file, the iteration and both values. An exact duplicate line (the same text) is tolerated.

A copy of a real recorded GPU run (tests/fixtures/logs/gpu) is edited in tmp_path."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from cloudai.core import METRIC_ERROR

from cloudai_mbridge.metrics import parse_training_run
from cloudai_mbridge.reports.ab import failure_text, run_row
from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport, run_status

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "gpu"
RUN = "ab_mbs1_overlap-off_deepep"


def _duplicate(folder: Path, iteration: int, edit: tuple[str, str] | None) -> tuple[str, str]:
    """Writes iteration ``iteration``'s line a second time, right after the log's last iteration line, with ``edit``
    (old, new) applied to its text; the line and the copy."""
    log = folder / "logs" / "rank-1.log"
    lines = log.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if re.search(rf"\biteration\s+{iteration}/", ln))
    copy = lines[at] if edit is None else lines[at].replace(*edit)
    assert edit is None or copy != lines[at]
    last = max(i for i, ln in enumerate(lines) if "elapsed time per iteration" in ln)
    lines.insert(last + 1, copy)
    log.write_text("".join(lines))
    return lines[at], copy


def _metric(run: Path, name: str = "iteration-time") -> object:
    report = object.__new__(MBridgeTrainingReport)
    report.test_run = SimpleNamespace(output_path=run)
    return report.get_metric(name)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return shutil.copytree(GPU / RUN, tmp_path / "run")


def test_the_recorded_run_gives_a_number(run: Path) -> None:
    m = parse_training_run(run)
    assert m.ok, m.problems
    assert isinstance(_metric(run), float)


@pytest.mark.parametrize(("edit", "words", "values"), [
    (("elapsed time per iteration (ms): 379.2", "elapsed time per iteration (ms): 512.7"),
     "elapsed time per iteration (ms)", ("379.2", "512.7")),
    (("lm loss: 1.046559E+01", "lm loss: 9.000000E+00"), "lm loss", ("10.46559", "9.0")),
])
def test_an_iteration_logged_twice_with_other_values_gives_no_number(run: Path, edit, words, values) -> None:
    _duplicate(run, 12, edit)
    m = parse_training_run(run)
    assert m.status == "inconsistent_log" and not m.ok
    assert len(m.inconsistencies) == 1
    text = m.inconsistencies[0]
    assert "rank-1.log" in text and str(run) in text and "iteration 12 " in text and words in text
    assert all(v in text for v in values), text
    # the metric extractor, the A/B row and the job status: no number, the reason said
    assert _metric(run) is METRIC_ERROR and _metric(run, "tokens-per-second") is METRIC_ERROR
    row = run_row("p", SimpleNamespace(output_path=run, test=None), m)
    assert row["iter_ms"] is None and row["tflops_per_gpu"] is None and row["gpu_hours"] is None
    assert "iteration 12" in row["failure"] and values[1] in row["failure"]
    assert "iteration 12" in failure_text(m)
    status = run_status(run)
    assert not status.is_successful
    assert "inconsistent log" in status.error_message and "iteration 12" in status.error_message
    assert m.summary()["inconsistencies"] == text


def test_an_exact_duplicate_line_is_tolerated(run: Path) -> None:
    before = parse_training_run(run)
    _duplicate(run, 12, None)
    m = parse_training_run(run)
    assert m.ok and m.inconsistencies == ()
    assert "duplicate_iterations" in m.problems
    assert [r.iteration for r in m.iterations] == [r.iteration for r in before.iterations]
    assert m.iteration_time_ms.mean == before.iteration_time_ms.mean
    assert isinstance(_metric(run), float)


def test_a_duplicate_that_differs_only_in_its_timestamp_is_tolerated(run: Path) -> None:
    line, _ = _duplicate(run, 12, None)
    stamp = re.search(r"\[(\d{4}-\d\d-\d\d [\d:.]+)\]", line)
    assert stamp
    log = run / "logs" / "rank-1.log"
    text = log.read_text()
    first = text.index(line) + len(line)
    log.write_text(text[:first] + text[first:].replace(stamp.group(1), "2026-11-22 16:00:00.000000", 1))
    m = parse_training_run(run)
    assert m.ok and m.inconsistencies == (), m.inconsistencies
