"""Megatron-Bridge's own log lines (engine bridge, real runs on one H100, 2026-11-24; trimmed to the MBRIDGE_*,
iteration, Step Time and memory lines; the full logs are in benchmarks/results/bridge/runs/) through the extractor."""

from __future__ import annotations

import json
from pathlib import Path

import gpu_memory  # benchmarks/ is on pytest's pythonpath
import pytest

from cloudai_mbridge.metrics import parse_training_run

FIXTURES = Path(__file__).parent.parent / "fixtures" / "logs" / "bridge"


def test_pretraining_run_reads_as_bridges_numbers():
    m = parse_training_run(FIXTURES / "te_dsv3_bf16")
    assert m.ok and len(m.iterations) == 40
    curve = m.loss_curve
    assert curve[1] == 10.43445 and curve[40] == 4.172084
    assert 600 < m.iteration_time_ms.median < 700  # 659.4 ms measured
    assert 60 < m.tflops_per_gpu.median < 75  # Bridge's "throughput per GPU (TFLOP/s/GPU)", 68.3
    assert m.peak_allocated_bytes == 10188000000.0  # "mem-max-allocated-gigabytes: 10.188"


def test_sft_run_loss_goes_down():
    m = parse_training_run(FIXTURES / "sft")
    assert m.ok and m.config["task"] == "sft" and m.config["engine"] == "bridge"
    curve = m.loss_curve
    assert curve[max(curve)] < 0.2 * curve[min(curve)]  # 10.69 -> 1.42


def test_payload_lines_say_which_code_path_ran():
    text = (FIXTURES / "te_dsv3_bf16" / "logs" / "rank-0.log").read_text()
    assert "MBRIDGE_ENGINE requested=bridge selected=bridge" in text
    assert "MBRIDGE_RECIPE deepseek_v3 task=pretrain" in text
    assert "MBRIDGE_HF_CONFIG source=catalog deepseek_v3_proxy" in text and "hub=offline" in text
    assert "MBRIDGE_FALLBACK gradient_accumulation_fusion=False" in text


RESULTS = Path(__file__).resolve().parent.parent.parent / "benchmarks" / "results" / "bridge"
TE_RUNS = [(stack, row) for stack, name in (("0.4.2", "bridge_train_memory"), ("0.6.2", "bridge_0.6.2_train_memory"))
           for row in json.loads((RESULTS / f"{name}.json").read_text())["configs"]]


@pytest.mark.parametrize(("stack", "row"), TE_RUNS, ids=[f"{s}-{r['name']}" for s, r in TE_RUNS])
def test_todays_estimate_meets_the_te_target_on_the_recorded_runs(stack, row):
    """plan/memory.py as it is now against the Bridge-engine runs on record (Megatron-Bridge 0.4.2 / 0.6.2, TE, one
    H100): within 10 % of torch's max allocated without the runtime term (issue 12's target), within 15 % of the
    nvidia-smi device peak with it (its runtime term was fitted on the mcore engine: 6 GiB vs 4.1-5.2 measured)."""
    from cloudai_mbridge.plan.memory import estimate_memory

    plan = gpu_memory.make_plan(row["name"], 4)
    assert plan.precision_aware_optimizer and plan.transformer_impl == "transformer_engine"
    errors = gpu_memory.compare(plan, estimate_memory(plan), row["measured"])
    assert abs(errors["error_pct_without_runtime"]) <= 10.0
    assert abs(errors["device_error_pct"]) <= 15.0


def test_the_recipes_optimizer_state_is_what_the_estimate_counts():
    """By owner and dtype (MBRIDGE_MEMORY_BREAKDOWN after iteration 2): fp32 master 4 B, bf16 moments 2 + 2 B per
    parameter, bf16 weights and gradients 2 + 2 B; the estimate's optimizer term is those 8 B."""
    from cloudai_mbridge.plan.memory import estimate_memory

    for row in json.loads((RESULTS / "bridge_breakdown.json").read_text())["configs"]:
        b = row["breakdown"]
        params = b["param_buffer[torch.bfloat16]"] / 2
        assert b["optimizer_params[torch.float32]"] / params == 4.0
        assert b["optimizer_state[exp_avg:torch.bfloat16]"] / params == 2.0
        assert b["optimizer_state[exp_avg_sq:torch.bfloat16]"] / params == 2.0
        est = estimate_memory(gpu_memory.make_plan(row["name"], 4))
        assert abs(est.optimizer / (8 * params) - 1) < 0.005


@pytest.mark.parametrize(("model", "engine", "aware"), [
    ("deepseek_v3", "bridge", True), ("kimi_k2_proxy", "auto", True),  # the DeepSeek-V3 recipe's optimizer
    ("kimi_k2", "bridge", False),  # Kimi-K2's own recipe: use_precision_aware_optimizer = False, fp32 moments
    ("kimi_k2_proxy", "mcore", False),  # the mcore loop's plain Adam
])
def test_the_plan_takes_the_recipes_optimizer(model, engine, aware):
    from types import SimpleNamespace

    from cloudai_mbridge.workloads.training.test_definition import MBridgeTrainingTestDefinition

    tdef = MBridgeTrainingTestDefinition.model_validate({
        "name": "t", "description": "d", "test_template_name": "MBridgeTraining",
        "cmd_args": {"model": model, "gpu": "h100", "engine": engine}})
    plan = tdef.plan(SimpleNamespace(nnodes=1), None)
    assert plan.precision_aware_optimizer is aware
