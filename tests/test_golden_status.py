"""A training test that names a golden-values file: the run's status and its report, on a real Bridge H100 run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import CONF

FIXTURE = Path(__file__).parent / "fixtures" / "logs" / "bridge" / "te_dsv3_bf16"


def test_run(tmp_path: Path, **cmd_args):
    from cloudai.core import Registry, TestRun
    from cloudai.parser import Parser

    from cloudai_mbridge.registration import register

    register()
    run = tmp_path / "run"
    if not run.exists():
        shutil.copytree(FIXTURE, run)
    data = {
        "name": "dsv3_proxy",
        "description": "golden",
        "test_template_name": "MBridgeTraining",
        "cmd_args": {"model": "deepseek_v3_proxy", "gpu": "h100", **cmd_args},
    }
    tdef = Registry().test_definitions_map["MBridgeTraining"].model_validate(data)
    tr = TestRun(name="dsv3_proxy", test=tdef, num_nodes=1, nodes=[], output_path=run)
    system = Parser.parse_system(CONF / "system" / "slurm_h100_ib.toml")
    return system, tr


test_run.__test__ = False  # a helper, not a test


def report(system, tr):
    from cloudai_mbridge.workloads.reporting import MBridgeTrainingReport

    rep = MBridgeTrainingReport(system, tr)
    assert rep.can_handle_directory()
    rep.generate_report()
    return json.loads((tr.output_path / "mbridge_summary.json").read_text())


def test_every_run_writes_the_next_golden_file(tmp_path: Path) -> None:
    system, tr = test_run(tmp_path)
    assert tr.test.was_run_successful(tr).is_successful
    summary = report(system, tr)
    golden = json.loads((tr.output_path / "golden_values.json").read_text())
    assert golden["39"] == {"lm loss": 4.172084, "elapsed time per iteration (ms)": 557.4, "GPU utilization": 80.8}
    assert "golden" not in summary and not (tr.output_path / "mbridge_golden.json").exists()


def test_breach_fails_the_run_with_the_reason(tmp_path: Path) -> None:
    system, tr = test_run(tmp_path)
    report(system, tr)
    values = json.loads((tr.output_path / "golden_values.json").read_text())
    for entry in values.values():
        if isinstance(entry, dict):
            entry["elapsed time per iteration (ms)"] *= 0.9  # the reference was 10 % faster
    golden = tmp_path / "dsv3_golden.json"
    golden.write_text(json.dumps(values))
    system, tr = test_run(tmp_path, golden_values=str(golden))
    status = tr.test.was_run_successful(tr)
    assert not status.is_successful
    assert "golden values breached: step time regression" in status.error_message
    assert "(+11.1%, limit ±5%, first 4 step(s) skipped)" in status.error_message
    summary = report(system, tr)
    assert summary["golden"]["passed"] is False and summary["golden"]["golden_path"] == str(golden)
    assert [c["name"] for c in summary["golden"]["checks"] if not c["passed"]] == ["step_timing"]
    assert json.loads((tr.output_path / "mbridge_golden.json").read_text())["passed"] is False

    # a looser limit is a field: 12 % lets the same run pass
    system, tr = test_run(tmp_path, golden_values=str(golden), golden_thresholds={"timing_threshold": 0.12})
    assert tr.test.was_run_successful(tr).is_successful


def test_missing_golden_file_fails_and_says_where_the_values_are(tmp_path: Path) -> None:
    _, tr = test_run(tmp_path, golden_values=str(tmp_path / "absent.json"))
    status = tr.test.was_run_successful(tr)
    assert not status.is_successful and "absent.json not found" in status.error_message
    assert "golden_values.json" in status.error_message


def test_threshold_fields_are_bridges_defaults() -> None:
    from dataclasses import asdict

    from cloudai_mbridge.metrics import GoldenThresholds
    from cloudai_mbridge.workloads.training.test_definition import GoldenThresholdArgs

    assert GoldenThresholdArgs().model_dump() == asdict(GoldenThresholds())
    with pytest.raises(ValueError):
        GoldenThresholdArgs(timing_treshold=0.1)
