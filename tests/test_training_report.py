"""CloudAI's own training_report.json beside ours, from a recorded real 4 x H100 Bridge run."""

from __future__ import annotations

import itertools
import json
import logging
import shutil
import statistics
from pathlib import Path

import pytest
from helpers import CONF

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1_h3" / "runs" / "mbs1_overlap-off_alltoall"


def _strict(name: str) -> float:
    raise ValueError(f"not strict JSON: {name}")


def _report(run: Path) -> Path:
    """Run our per-run training report on ``run`` as CloudAI would (registered strategy, MBridgeTraining test)."""
    from cloudai.core import Registry, TestRun
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register
    from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport

    register()
    data = {
        "name": "dsv3_proxy",
        "description": "training report",
        "test_template_name": "MBridgeTraining",
        "cmd_args": {"model": "deepseek_v3_proxy", "gpu": "h100"},
    }
    tdef = Registry().test_definitions_map["MBridgeTraining"].model_validate(data)
    tr = TestRun(name="dsv3_proxy", test=tdef, num_nodes=1, nodes=[], output_path=run)
    system = Parser.parse_system(CONF / "system" / "slurm_h100_ib.toml")
    assert MBridgeTrainingReport in Registry().reports_map[type(tdef)]
    rep = MBridgeTrainingReport(system, tr)
    assert rep.can_handle_directory()
    rep.generate_report()
    return run / "training_report.json"


def test_real_run_gets_cloudais_training_report(tmp_path: Path) -> None:
    from cloudai.report_generator.training.models import TrainingResults

    from cloudai_mbridge.metrics import parse_run
    from cloudai_mbridge.workloads.training_report import results_from_json

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    path = _report(run)
    assert (run / "mbridge_summary.json").is_file()
    data = json.loads(path.read_text(), parse_constant=_strict)
    results = results_from_json(data)
    assert isinstance(results, TrainingResults)

    m = parse_run(run)
    assert m.ok
    assert len(results.steps) == len(m.iterations) == 20
    assert results.steps[0].iteration == m.iterations[0].iteration
    assert results.steps[0].step_time_sec == m.iterations[0].elapsed_ms / 1000.0
    assert results.steps[-1].step_time_sec == m.iterations[-1].elapsed_ms / 1000.0
    assert results.steps[-1].loss == m.iterations[-1].lm_loss
    assert results.steps[-1].tflops_per_gpu == m.iterations[-1].tflops_per_gpu
    # memory is logged after iterations 1 and 2 only (rank 0, GB = 1e9 bytes): later steps carry the last report
    assert results.steps[0].memory_reserved_bytes == 5.4715e9
    assert results.steps[-1].memory_reserved_bytes == 6.2915e9
    assert results.steps[-1].memory_allocated_bytes == 3.4127e9

    cfg = results.config
    assert results.aggregation is not None
    assert results.aggregation.step_time_sec.mean == statistics.mean(
        s.step_time_sec for s in results.steps[cfg.exclude_start_steps:])
    assert cfg.exclude_start_steps == 5
    own = json.loads((run / "mbridge_config.json").read_text())
    assert (cfg.tensor_parallel_size, cfg.expert_parallel_size) == (own["tp"], own["ep"])
    assert (cfg.micro_batch_size, cfg.global_batch_size, cfg.seq_length) == (own["mbs"], own["gbs"], own["seq_length"])
    assert (cfg.num_experts, cfg.hidden_size) == (own["model"]["num_experts"], own["model"]["hidden_size"])
    assert (cfg.world_size, cfg.data_parallel_size, cfg.num_nodes) == (4, 4, 1)
    assert cfg.test_template_name == "MBridgeTraining"


def test_no_aggregation_when_every_step_is_excluded(tmp_path: Path) -> None:
    from cloudai_mbridge.metrics import parse_run
    from cloudai_mbridge.workloads.training_report import training_results

    m = parse_run(RUN)
    results, why = training_results(m)
    assert results is not None and why is None
    import dataclasses

    short = dataclasses.replace(m, iterations=m.iterations[:5])
    results, _ = training_results(short)
    assert results is not None and len(results.steps) == 5 and results.aggregation is None


@pytest.mark.parametrize("damage", ["iterations", "memory"])
def test_damaged_run_gets_no_training_report(tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str) -> None:
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    marker = "elapsed time per iteration" if damage == "iterations" else ") memory ("
    for log in (run / "logs").glob("*.log"):
        lines = log.read_text(errors="replace").splitlines(keepends=True)
        log.write_text("".join(line for line in lines if marker not in line))
    with caplog.at_level(logging.INFO):
        path = _report(run)
    assert not path.exists()
    assert (run / "mbridge_summary.json").is_file()
    assert any("no training_report.json" in r.getMessage() for r in caplog.records)


def _long_run(path: Path, n: int) -> Path:
    """A one-rank Bridge log of ``n`` iterations with a memory report every 100 (benchmarks/log_parse_scale.py's)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import log_parse_scale
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    log_parse_scale.write_training(path, n)
    return path


def test_a_run_up_to_the_cap_gets_the_same_report_as_one_json_dump(tmp_path: Path) -> None:
    """Streamed piece by piece, the file is the text json.dumps gives for CloudAI's TrainingResults of the run."""
    from dataclasses import asdict

    from cloudai_mbridge.metrics import parse_run
    from cloudai_mbridge.workloads.training_report import training_report_chunks, training_results

    m = parse_run(_long_run(tmp_path / "run", 9000))
    results, why = training_results(m)
    assert why is None and len(results.steps) > 8000
    pieces = list(training_report_chunks(m))
    assert len(pieces) > 3  # the steps come in batches, not in one text
    assert "".join(pieces) == json.dumps(asdict(results), indent=2, allow_nan=False) + "\n"


def test_a_run_past_the_cap_is_reported_in_bounded_memory_and_says_what_is_sampled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past stats.SAMPLE_CAP steps every step is still listed, mean / min / max / std are of all of them, t99 / t95
    of a systematic sample, and mbridge_summary.json says so; what the writer holds does not grow with the run."""
    import tracemalloc

    from cloudai_mbridge.metrics import parse_run, stats
    from cloudai_mbridge.workloads import training_report as tr_mod

    cap = 256
    monkeypatch.setattr(stats, "SAMPLE_CAP", cap)
    monkeypatch.setattr(tr_mod, "STEP_BATCH", 64)

    def traced_peak(m: object) -> tuple[int, int]:
        tracemalloc.start()
        try:
            size = sum(len(piece) for piece in tr_mod.training_report_chunks(m))
            return tracemalloc.get_traced_memory()[1], size
        finally:
            tracemalloc.stop()

    short = parse_run(_long_run(tmp_path / "short", 1000))
    traced_peak(short)  # warm: what the first call imports
    peak_short, size_short = traced_peak(short)
    run = _long_run(tmp_path / "run", 4000)
    m = parse_run(run)
    peak_long, size_long = traced_peak(m)
    assert size_long > 3.5 * size_short
    assert peak_long < 1.3 * peak_short + 65536, f"{peak_short:,} -> {peak_long:,} B traced ({size_long:,} B of text)"
    exact, _ = tr_mod.training_results(m)
    path = _report(run)
    data = json.loads(path.read_text(), parse_constant=_strict)
    assert [s["iteration"] for s in data["steps"]] == [s.iteration for s in exact.steps]
    agg, want = data["aggregation"]["step_time_sec"], exact.aggregation.step_time_sec
    assert agg["mean"] == pytest.approx(want.mean, rel=1e-12) and agg["std"] == pytest.approx(want.std, rel=1e-9)
    assert (agg["min"], agg["max"]) == (want.min, want.max)
    assert agg["t99"] == pytest.approx(want.t99, rel=0.01) and agg["t95"] == pytest.approx(want.t95, rel=0.01)
    summary = json.loads((run / "mbridge_summary.json").read_text())
    assert "t99 and t95 from a 1-in-16 sample" in summary["training_report"], summary.get("training_report")
    assert f"of {len(exact.steps) - exact.config.exclude_start_steps:,}" in summary["training_report"]


def test_the_iteration_plot_of_a_run_past_the_cap_draws_a_sample_and_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past reporting.PLOT_POINTS iterations the PNG's points are a 1-in-k systematic sample (a 10^6-iteration run held
    and drew 3 x 10^6 points), and its title says so; up to the cap every point is drawn and nothing is said."""
    from cloudai_mbridge.metrics import parse_run
    from cloudai_mbridge.workloads import reporting

    m = parse_run(_long_run(tmp_path / "run", 1000))
    whole = reporting.training_figure_panels(m)
    assert len(whole[0].series["iteration time"]) == 1000 - m.warmup and reporting.plot_note(m) == ""
    monkeypatch.setattr(reporting, "PLOT_POINTS", 64)
    panels = reporting.training_figure_panels(m)
    times = panels[0].series["iteration time"]
    assert 32 <= len(times) <= 64 and set(times) <= set(whole[0].series["iteration time"])
    assert {b[0] - a[0] for a, b in itertools.pairwise(times)} == {16}  # every 16th iteration
    assert len(panels[2].series["lm loss"]) <= 64
    assert reporting.plot_note(m) == ", points: a 1-in-16 sample of 1,000 iterations"
    assert reporting.training_title("t", m).endswith(", points: a 1-in-16 sample of 1,000 iterations")
