"""Issue 46 (1): a long rank log is reported within bounded memory, with the numbers of the plain computation.

Own inputs (not the issue's): logs in the benchmark's exact Megatron-Bridge format (benchmarks/log_parse_scale.py)
whose columns change pattern part-way (the log interval, the timestamp's precision, the loss scale, a signed zero),
so every compact column is first a progression and then an array; and the per-test report written from such a log,
its CSV streamed into the file in pieces."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import pytest
from helpers import CONF

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import log_parse_scale as bench


def _changing_run(root: Path, n: int) -> Path:
    """``n`` iteration lines whose log interval goes from 1 to 10 at a third, whose timestamps gain a fraction and
    whose loss scale halves at two thirds, with a learning rate of -0.0 on one line."""
    bench.write_training(root, n)
    log = root / "logs" / "rank-0.log"
    out, k = [], 0
    for line in log.read_text().splitlines(keepends=True):
        if " iteration " in line:
            k += 1
            it = k if k <= n // 3 else n // 3 + (k - n // 3) * 10
            line = re.sub(r"iteration +\d+/ *\d+", f"iteration {it:8d}/{n * 10:8d}", line)
            if k > n // 2:
                line = re.sub(r"^\[([^\]]+)\]", r"[\1.25]", line)
            if k > 2 * n // 3:
                line = line.replace("loss scale: 1.0", "loss scale: 0.5")
            if k == n // 4:
                line = line.replace("learning rate: 1.538462E-05", "learning rate: -0.000000E+00")
        out.append(line)
    log.write_text("".join(out))
    return root


def test_records_that_change_pattern_are_the_lines_parsed_one_by_one(tmp_path: Path) -> None:
    from cloudai_mbridge.metrics import parse_training_run, steady_state, warmup_count
    from cloudai_mbridge.metrics.training import parse_iteration_line

    run = _changing_run(tmp_path / "run", 1500)
    m = parse_training_run(run)
    lines = [ln for ln in (run / "logs" / "rank-0.log").read_text().splitlines() if " iteration " in ln]
    plain = [r for ln in lines for r in parse_iteration_line(ln, "logs/rank-0.log")]
    assert [repr(r) for r in m.iterations] == [repr(r) for r in plain]
    assert repr(m.iterations[1500 // 4 - 1].learning_rate) == "-0.0" and m.iterations[-1].loss_scale == 0.5
    iterations = [r.iteration for r in plain]
    warm = warmup_count(iterations, m.warmup)
    assert m.steady_iterations == tuple(iterations[warm:])
    assert all((i in m.steady_iterations) == (i in iterations[warm:]) for i in range(0, 12_000, 7))
    assert repr(m.iteration_time_ms) == repr(steady_state([r.elapsed_ms for r in plain], warm))
    step = iterations[1] - iterations[0]  # the log interval of the first two lines (GPU hours, as summary() says)
    assert m.gpu_hours == m.world_size * math.fsum(r.elapsed_ms * step for r in plain) / 3.6e6


def _report(run: Path) -> None:
    from cloudai.core import Registry, TestRun
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register
    from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport

    register()
    tdef = Registry().test_definitions_map["MBridgeTraining"].model_validate(
        {"name": "long", "description": "a long log", "test_template_name": "MBridgeTraining",
         "cmd_args": {"model": "deepseek_v3_proxy", "gpu": "h100"}})
    tr = TestRun(name="long", test=tdef, num_nodes=1, nodes=[], output_path=run)
    MBridgeTrainingReport(Parser.parse_system(CONF / "system" / "slurm_h100_ib.toml"), tr).generate_report()


def test_the_report_streams_its_csv_in_pieces_and_leaves_no_temporary_file(tmp_path, monkeypatch) -> None:
    from cloudai_mbridge.metrics import frames, golden_values, iterations_csv, parse_training_run
    from cloudai_mbridge.metrics.golden import GOLDEN_FILE

    run = _changing_run(tmp_path / "run", 1200)
    monkeypatch.setattr(frames, "CHUNK", 4096)  # the ~100 KB CSV in some 30 pieces
    _report(run)
    m = parse_training_run(run)
    assert (run / "mbridge_iterations.csv").read_text() == iterations_csv(m)
    golden = json.dumps(golden_values(m), indent=1) + "\n"  # the golden file, streamed an entry at a time too
    assert (run / GOLDEN_FILE).read_text() == golden and '"1199": {' in golden and '"peak_max_alloc": ' in golden
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]


def test_a_report_that_fails_midway_leaves_no_csv_and_no_temporary_file(tmp_path, monkeypatch) -> None:
    from cloudai_mbridge.metrics.golden import GOLDEN_FILE
    from cloudai_mbridge.workloads import reporting

    run = _changing_run(tmp_path / "run", 300)

    def broken(*_args, **_kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(reporting, "write_together", broken)
    with pytest.raises(OSError):
        _report(run)
    assert not (run / "mbridge_iterations.csv").exists() and not (run / GOLDEN_FILE).exists()
    assert not [p.name for p in run.iterdir() if p.name.endswith(".tmp")]


def test_what_a_parse_keeps_per_iteration_is_a_few_numbers(tmp_path: Path) -> None:
    """The Python memory a parse keeps, per iteration beyond the first 1,000 (tracemalloc; imports and buffers cancel
    out): under 80 B here, where the time, the loss and the timestamp vary (206 B before the compact columns)."""
    import tracemalloc

    from cloudai_mbridge.metrics import parse_training_run

    bench.write_training(tmp_path / "warm", 50)
    parse_training_run(tmp_path / "warm")  # every import done before the first measurement
    held = {}
    for n in (1000, 4000):
        run = tmp_path / str(n)
        bench.write_training(run, n)
        tracemalloc.start()
        try:
            m = parse_training_run(run)
            held[n] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(m.iterations) == n and m.status == "ok"
    per = (held[4000] - held[1000]) / 3000
    assert per < 80, f"{per:.0f} B per iteration kept"
