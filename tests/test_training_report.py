"""CloudAI's own training_report.json beside ours, from a recorded real 4 x H100 Bridge run."""

from __future__ import annotations

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
