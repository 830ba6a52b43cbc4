"""Issue 46 (bounded memory whatever the sweep size): the parse cache (one report generation asks for each run three
or four times) holds a bounded share of many long runs: each run past spill.BLOCK records keeps its temporary file
open while it is cached, and up to a block of each column in memory. A report over hundreds of such runs held them
all (4,096 runs: as many open files, ~13 MiB each)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import spill, training

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import log_parse_scale as bench

LIMIT = 16  # long runs the cache may hold (training._PARSED_SPILLED)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_the_parse_cache_keeps_few_long_runs_and_serves_the_newest(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spill, "BLOCK", 64)  # every run below is "long": its records go to a temporary file
    monkeypatch.setattr(spill, "_READ", 16)
    monkeypatch.setattr(training, "_PARSED", {})
    runs = []
    for i in range(3 * LIMIT):
        bench.write_training(tmp_path / f"r{i}", 150)
        runs.append(tmp_path / f"r{i}")
    before = len(os.listdir("/proc/self/fd"))
    parsed = [training.parse_training_run(run) for run in runs]
    assert all(m.status == "ok" and len(m.iterations) == 150 for m in parsed)
    del parsed
    import gc

    gc.collect()
    assert len(training._PARSED) <= LIMIT
    # the cached runs' files: the records' and the Step Time lines' (two a run)
    assert len(os.listdir("/proc/self/fd")) - before <= 2 * LIMIT + 2
    newest = training.parse_training_run(runs[-1])
    assert training.parse_training_run(runs[-1]) is newest  # still parsed once
    again = training.parse_training_run(runs[0])  # let go: parsed again, the same numbers
    assert again.iteration_time_ms == training.parse_training_run(runs[1]).iteration_time_ms
