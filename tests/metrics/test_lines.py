"""Single lines, as the real programs printed them (tests/fixtures/logs/SOURCES.md)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import classify_line, parse_iteration_line, parse_memory_line, parse_step_time_line
from cloudai_mbridge.metrics.scan import LogLine

MIB = float(1 << 20)


def lines(fixtures: Path, name: str) -> list[str]:
    return (fixtures / name).read_text().splitlines()


def test_megatron_lm_line_every_field(fixtures: Path) -> None:
    (record,) = parse_iteration_line(lines(fixtures, "megatron_lm_756_mixtral_moe.log")[3])
    assert record.iteration == 43 and record.train_iters == 100
    assert record.timestamp == "2024-04-06 02:59:36"
    assert record.consumed_samples == 5504
    assert record.elapsed_ms == 5444.9
    assert record.tflops_per_gpu == 239.8
    assert record.learning_rate == pytest.approx(8.6e-6)
    assert record.global_batch_size == 128
    assert record.lm_loss == pytest.approx(1.825991)
    assert record.losses == {"load_balancing_loss": pytest.approx(1.019746)}
    assert record.loss_scale == 1.0
    assert record.grad_norm == 1.426
    assert record.extras == {"num zeros": "0.0"}
    assert (record.skipped_iterations, record.nan_iterations) == (0, 0)
    assert record.complete


def test_bridge_line_with_mtp_and_seq_aux_loss_pasted_without_final_bar(fixtures: Path) -> None:
    (record,) = parse_iteration_line(lines(fixtures, "megatron_bridge_2403_dsv3.log")[0])
    assert (record.iteration, record.train_iters) == (10, 10)
    assert record.elapsed_ms == 51701.1
    assert record.global_batch_size == 16384
    assert record.lm_loss == pytest.approx(11.89217)
    assert record.losses == {"seq_load_balancing_loss": pytest.approx(1.000194), "mtp_1 loss": pytest.approx(11.89801)}
    assert record.grad_norm == 224119.688
    assert record.tflops_per_gpu is None
    assert record.skipped_iterations == 0
    # "number of nan iterations:   0" has no closing "|": not taken, and the line is not complete.
    assert record.nan_iterations is None
    assert not record.complete


def test_bridge_doc_line_without_timestamp(fixtures: Path) -> None:
    (record,) = parse_iteration_line(lines(fixtures, "megatron_bridge_mtp_doc.log")[0])
    assert record.timestamp is None
    assert (record.iteration, record.train_iters, record.elapsed_ms) == (100, 300000, 3738.6)
    assert record.losses["mtp_1 loss"] == pytest.approx(7.925096)


def test_launcher_prefixed_lines(fixtures: Path) -> None:
    text = lines(fixtures, "cloudai_megatron_bridge_launcher.log")
    assert parse_step_time_line(text[0])[0].step_time_s == 9.09
    assert parse_step_time_line(text[0])[0].tflops_per_gpu == 663.5
    (record,) = parse_iteration_line(text[2])
    assert (record.iteration, record.elapsed_ms, record.lm_loss) == (50, 9089.0, pytest.approx(8.114214))


def test_older_step_time_spelling(fixtures: Path) -> None:
    (step,) = parse_step_time_line(lines(fixtures, "megatron_bridge_388_step_time.log")[0])
    assert (step.step_time_s, step.tflops_per_gpu) == (12.78, 528.1)


def test_nan_grad_norm_and_unknown_fields(fixtures: Path) -> None:
    (record,) = parse_iteration_line(lines(fixtures, "megatron_deepspeed_396_grad_norm_nan.log")[0])
    assert math.isnan(record.grad_norm)
    assert record.lm_loss is None
    assert record.elapsed_ms == 4247.9
    assert record.extras["consumed tokens"] == "88899584"
    assert record.extras["TFLOPs"] == "78.36"
    assert record.tflops_per_gpu is None


def test_skipped_iteration_line(fixtures: Path) -> None:
    (record,) = parse_iteration_line(lines(fixtures, "epfllm_megatron_llm_pr34_skipped.log")[2])
    assert record.skipped_iterations == 1
    assert record.grad_norm is None and record.nan_iterations is None
    assert record.complete


def test_a_value_spliced_with_other_output_is_dropped_not_shortened(fixtures: Path) -> None:
    good = lines(fixtures, "megatron_lm_756_mixtral_moe.log")[4]
    cut = good.index("(ms): 5533.8") + len("(ms): 55")
    spliced = good[:cut] + "[rank3]: some other rank's output | tail"
    (record,) = parse_iteration_line(spliced)
    assert record.iteration == 44
    assert record.consumed_samples == 5632
    assert record.elapsed_ms is None
    assert record.lm_loss is None


def test_two_records_in_one_line(fixtures: Path) -> None:
    text = lines(fixtures, "megatron_lm_756_mixtral_moe.log")
    first, second = parse_iteration_line(text[3] + text[4])
    assert (first.iteration, first.elapsed_ms, first.complete) == (43, 5444.9, False)
    assert (second.iteration, second.elapsed_ms, second.complete) == (44, 5533.8, True)


def test_an_unterminated_line_keeps_only_closed_fields(fixtures: Path) -> None:
    text = lines(fixtures, "epfllm_megatron_llm_33_truncated.log")[2]
    (record,) = parse_iteration_line(LogLine(offset=0, text=text, terminated=False))
    assert record.elapsed_ms == 7624.3
    assert record.loss_scale == 1.0
    assert record.grad_norm is None
    assert not record.complete


def test_megatron_lm_memory_report(fixtures: Path) -> None:
    (report,) = parse_memory_line(lines(fixtures, "megatron_lm_756_mixtral_moe.log")[0])
    assert (report.rank, report.after_iterations, report.unit) == (1, 1, "MB")
    assert report.allocated_bytes == pytest.approx(54250.97802734375 * MIB)
    assert report.max_allocated_bytes == pytest.approx(54250.98583984375 * MIB)
    assert report.reserved_bytes == pytest.approx(61480.0 * MIB)
    assert report.max_reserved_bytes == pytest.approx(61480.0 * MIB)


def test_bridge_memory_report_in_gigabytes() -> None:
    # Rendered from Megatron-Bridge train_utils.training_log: "[Rank {}] (after {} iterations) memory (GB) | k: v".
    text = (
        "[Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 12.345 | mem-active-gigabytes: 12.3 | "
        "mem-max-allocated-gigabytes: 60.123 | mem-max-reserved-gigabytes: 71.5 | mem-alloc-retires: 3 | "
        "mem-allocated-count: 1234"
    )
    (report,) = parse_memory_line(text)
    assert report.unit == "GB"
    assert report.allocated_bytes == pytest.approx(12.345e9)
    assert report.max_allocated_bytes == pytest.approx(60.123e9)
    assert report.max_reserved_bytes == pytest.approx(71.5e9)
    assert report.reserved_bytes is None
    assert report.alloc_retries == 3


def test_two_memory_reports_glued_together(fixtures: Path) -> None:
    first = lines(fixtures, "megatron_lm_756_mixtral_moe.log")[0]
    glued = first + first.replace("[Rank 1]", "[Rank 6]").replace("61480.0", "11000.0")
    one, six = parse_memory_line(glued)
    assert (one.rank, one.max_reserved_bytes) == (1, pytest.approx(61480.0 * MIB))
    assert (six.rank, six.max_reserved_bytes) == (6, pytest.approx(11000.0 * MIB))


def test_memory_report_cut_by_the_end_of_the_file_is_skipped(fixtures: Path) -> None:
    text = lines(fixtures, "megatron_lm_756_mixtral_moe.log")[0][:-2]
    assert parse_memory_line(LogLine(offset=0, text=text, terminated=False)) == []


@pytest.mark.parametrize(
    ("name", "index", "kind"),
    [
        ("nccl_1409_watchdog.log", 0, "nccl_timeout"),
        ("nccl_1409_watchdog.log", 1, "nccl_timeout"),
        ("ms_swift_5943_torch_oom.log", 0, "oom"),
        ("megatron_lm_1509_nccl_cuda_oom.log", 0, "oom"),
        ("megatron_lm_1509_nccl_cuda_oom.log", 4, "exception"),
        ("megatron_lm_1880_sigsegv_summary.log", 5, "segfault"),
        ("flagembedding_1549_torchrun_child_failed.log", 7, "child_failed"),
        ("slurm_node_failure.log", 0, "node_failure"),
        ("slurm_node_failure.log", 1, "node_failure"),
        ("slurm_node_failure.log", 3, "node_failure"),
        ("slurm_time_limit.log", 0, "time_limit"),
        ("megatron_bridge_known_issue_deepep_timeout.log", 0, "deepep_timeout"),
    ],
)
def test_failure_lines_are_classified(fixtures: Path, name: str, index: int, kind: str) -> None:
    text = lines(fixtures, name)[index]
    assert classify_line(text) == kind


@pytest.mark.parametrize(
    "text",
    [
        "  error_file: <N/A>",
        "[rank9]: Traceback (most recent call last):",
        '[rank9]:   File "/mnt/workspace/Megatron-LM/megatron/training/training.py", line 2422, in train',
        "UserWarning: barrier(): using the device under current context; on error, check NCCL_DEBUG output",
        "NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)",
    ],
)
def test_lines_that_are_not_failures(text: str) -> None:
    assert classify_line(text) is None
