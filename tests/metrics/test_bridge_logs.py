"""Megatron-Bridge's own log lines (engine bridge, real runs on one H100, 2026-11-24; trimmed to the MBRIDGE_*,
iteration, Step Time and memory lines; the full logs are in benchmarks/results/bridge/runs/) through the extractor."""

from __future__ import annotations

from pathlib import Path

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
