"""Whole run folders built from the real-log fixtures; every expected number is worked out by hand below."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cloudai_mbridge.metrics import classify_failure, parse_run, parse_training_run, runs_frame, warmup_count

from .conftest import fixture_bytes, make_run, training_config

MIB = float(1 << 20)
# megatron_lm_756_mixtral_moe.log logs iterations 2, 3, 43, 44, 45. With warmup=4 the run is taken to start at
# iteration 2 (first record, log interval 1), so iterations 2 and 3 are warm-up and 43, 44, 45 are steady.
STEADY_MS = [5444.9, 5533.8, 5718.6]
EFA_LINE = (
    "ip-10-1-0-1:4001:4001 [1] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 16 nics)\n"
)


def mixtral_run(tmp_path: Path, last_rank_file: str = "megatron_lm_756_mixtral_moe.log", **config) -> Path:
    return make_run(
        tmp_path / "run",
        training_config(**config),
        {0: EFA_LINE, 1: EFA_LINE.encode() + fixture_bytes(last_rank_file)},
    )


def test_real_megatron_lm_run(tmp_path: Path) -> None:
    m = parse_training_run(mixtral_run(tmp_path))
    assert [r.iteration for r in m.iterations] == [2, 3, 43, 44, 45]
    assert m.iteration_source == "logs/rank-1.log"
    assert m.steady_iterations == (43, 44, 45)
    t = m.iteration_time_ms
    assert (t.n, t.n_warmup, t.n_invalid, t.n_stalls) == (3, 2, 0, 0)
    assert t.mean == pytest.approx((5444.9 + 5533.8 + 5718.6) / 3)
    assert t.median == 5533.8
    assert t.p10 == pytest.approx(5444.9 + 0.2 * (5533.8 - 5444.9))
    assert t.p90 == pytest.approx(5533.8 + 0.8 * (5718.6 - 5533.8))
    assert m.tflops_per_gpu.mean == pytest.approx((239.8 + 236.0 + 228.4) / 3)
    tokens = [128 * 4096 / (ms / 1000) for ms in STEADY_MS]
    assert m.tokens_per_s.mean == pytest.approx(sum(tokens) / 3)
    assert m.tokens_per_s_per_gpu == pytest.approx(sum(tokens) / 3 / 2)
    assert m.loss_curve == {2: 2.02153, 3: 2.003316, 43: 1.825991, 44: 1.875063, 45: 1.834162}
    assert m.iterations[2].losses == {"load_balancing_loss": 1.019746}
    (mem,) = m.memory
    assert (mem.rank, mem.after_iterations) == (1, 1)
    assert m.peak_allocated_bytes == pytest.approx(54250.98583984375 * MIB)
    assert m.peak_reserved_bytes == pytest.approx(61480.0 * MIB)
    # The quoted log stops at 45 of 100: the numbers stand, the run is reported unfinished.
    assert m.status == "incomplete"
    assert m.failure.status == "incomplete" and m.failure.primary is None
    v = m.validity
    assert v.efa_ranks == (0, 1) and v.efa_on_all_ranks
    assert (v.efa_fabric, v.efa_nics) == ("efa-direct", 16)
    assert v.dispatcher.downgraded is False
    assert v.nan_iterations == () and v.skipped_iterations == 0


@pytest.mark.parametrize("damaged", ["damaged_ansi.log", "damaged_cr.log", "damaged_non_utf8.log"])
def test_damage_that_loses_no_number(tmp_path: Path, damaged: str) -> None:
    m = parse_training_run(mixtral_run(tmp_path, damaged))
    assert [r.elapsed_ms for r in m.iterations] == [5630.1, 5410.6, *STEADY_MS]
    assert m.iteration_time_ms.mean == pytest.approx(sum(STEADY_MS) / 3)
    assert m.status == "incomplete"


def test_truncated_last_rank_log(tmp_path: Path) -> None:
    m = parse_training_run(mixtral_run(tmp_path, "damaged_truncated.log"))
    assert m.status == "truncated"
    assert m.truncated_files == ("logs/rank-1.log",)
    assert "incomplete" in m.problems
    last = m.iterations[-1]
    assert (last.iteration, last.consumed_samples, last.elapsed_ms, last.complete) == (45, 5760, None, False)
    t = m.iteration_time_ms
    assert (t.n, t.n_invalid) == (2, 1)
    assert t.mean == pytest.approx((5444.9 + 5533.8) / 2)


def test_real_truncated_quote_keeps_closed_fields_of_the_cut_line(tmp_path: Path) -> None:
    run = make_run(  # the config of the run that log is from: global batch size 64
        tmp_path / "run", training_config(gbs=64), {0: "x\n", 1: fixture_bytes("epfllm_megatron_llm_33_truncated.log")}
    )
    m = parse_training_run(run, warmup=0)
    assert [r.elapsed_ms for r in m.iterations] == [7613.1, 7845.5, 7624.3]
    # 3385 lost its loss to the cut, not to a NaN: the line is incomplete, so no NaN is claimed.
    assert m.validity.nan_iterations == ()
    assert m.status == "truncated"


def test_job_killed_without_a_message(tmp_path: Path) -> None:
    m = parse_training_run(mixtral_run(tmp_path, "damaged_killed.log"))
    assert [r.iteration for r in m.iterations] == [2, 3, 43]
    assert m.iteration_time_ms.n == 1 and m.iteration_time_ms.mean == 5444.9
    assert m.status == "incomplete"
    assert classify_failure(tmp_path / "run").status == "incomplete"


def test_empty_last_rank_log(tmp_path: Path) -> None:
    m = parse_training_run(mixtral_run(tmp_path, "damaged_empty.log"))
    # rank 1 holds only the EFA line: no iteration at all
    assert m.status == "no_iterations"
    run = make_run(tmp_path / "empty", training_config(), {0: EFA_LINE, 1: b""})
    m = parse_training_run(run)
    assert m.status == "no_iterations"
    assert "empty_rank_log" in m.problems
    assert m.validity.efa_ranks == (0,) and not m.validity.efa_on_all_ranks


def test_missing_last_rank_log_is_the_status(tmp_path: Path) -> None:
    m = parse_training_run(make_run(tmp_path / "run", training_config(), {0: EFA_LINE}))
    assert m.status == "missing_rank_log"
    assert m.problems[:2] == ("missing_rank_log", "no_iterations")
    assert m.missing_ranks == (1,)


def test_no_logs_at_all(tmp_path: Path) -> None:
    m = parse_training_run(make_run(tmp_path / "run", training_config()))
    assert m.status == "no_logs"
    assert m.iteration_time_ms.n == 0


def test_interleaved_job_log_without_rank_logs(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", training_config(), stdout=fixture_bytes("damaged_interleaved_stdout.txt"))
    m = parse_training_run(run)
    assert m.iteration_source == "job logs"
    assert "iterations_from_job_logs" in m.problems
    # 44's time was cut by rank 0's write: no value, not "55".
    assert [r.elapsed_ms for r in m.iterations] == [5630.1, 5410.6, 5444.9, None, 5718.6]
    t = m.iteration_time_ms
    assert (t.n, t.n_invalid) == (2, 1)
    assert t.mean == pytest.approx((5444.9 + 5718.6) / 2)
    # rank 0's Step Time lines; the one glued into rank 1's line is not rank 0's as far as labels tell.
    assert [s.step_time_s for s in m.step_times] == [5.63, 5.41, 5.44, 5.72]
    assert m.validity.efa_ranks == (0, 1)
    assert m.status == "missing_rank_log"


def test_bridge_run_that_finished(tmp_path: Path) -> None:
    config = training_config(world_size=1, gbs=512, seq_length=4096, num_nodes=1, gpus_per_node=1)
    run = make_run(tmp_path / "run", config, {0: fixture_bytes("cloudai_megatron_bridge_launcher.log")})
    m = parse_training_run(run, warmup=0)
    assert m.status == "ok" and m.ok
    assert m.failure.status == "ok"
    assert m.iteration_time_ms.mean == 9089.0
    assert m.tokens_per_s.mean == pytest.approx(512 * 4096 / 9.089)
    assert (m.step_time_s.mean, m.step_tflops_per_gpu.mean) == (9.09, 663.5)
    # The default warm-up swallows the only record.
    assert parse_training_run(run).status == "no_steady_state"


def test_missing_config_still_parses(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", None, {0: fixture_bytes("cloudai_megatron_bridge_launcher.log")})
    m = parse_training_run(run, warmup=0)
    assert m.world_size == 1
    assert m.iteration_time_ms.mean == 9089.0
    assert m.status == "missing_config"
    assert "missing_seq_length" in m.problems
    assert m.tokens_per_s.n == 0


def test_nan_grad_norm_fails_the_run(tmp_path: Path) -> None:
    run = make_run(
        tmp_path / "run", training_config(), {0: "x\n", 1: fixture_bytes("megatron_deepspeed_396_grad_norm_nan.log")}
    )
    m = parse_training_run(run, warmup=0)
    assert m.validity.nonfinite_grad_norm_iterations == (5426, 5427, 5428)
    assert m.validity.nan_iterations == (5426, 5427, 5428)
    assert m.failure.primary == "nan"
    assert m.status == "failed"
    # The times themselves are fine and still reported.
    assert m.iteration_time_ms.mean == pytest.approx((4247.9 + 4225.8 + 4229.2) / 3)


def test_a_loss_that_stops_being_printed_is_nan_evidence(fixtures: Path, tmp_path: Path) -> None:
    quoted = (fixtures / "epfllm_megatron_llm_33_truncated.log").read_text().splitlines()
    # Iteration 3385 as issue 33 quotes it, completed by us after the cut with Megatron's closing fields.
    completed = (
        quoted[2].removesuffix(" gr") + " grad norm: 0.750 | number of skipped iterations:   0 | "
        "number of nan iterations:   0 |"
    )
    run = make_run(tmp_path / "run", training_config(), {0: "x\n", 1: "\n".join([*quoted[:2], completed]) + "\n"})
    m = parse_training_run(run, warmup=0)
    assert m.validity.nan_iterations == (3385,)
    assert m.validity.nonfinite_grad_norm_iterations == ()
    (finding,) = m.failure.findings
    assert finding.kind == "nan" and "lm loss not printed" in finding.detail


def test_skipped_iterations_are_counted(tmp_path: Path) -> None:
    run = make_run(
        tmp_path / "run", training_config(), {0: "x\n", 1: fixture_bytes("epfllm_megatron_llm_pr34_skipped.log")}
    )
    m = parse_training_run(run, warmup=0)
    assert m.validity.skipped_iterations == 1
    assert m.failure.primary is None


def test_duplicate_iterations_with_other_values_are_inconsistent(tmp_path: Path, fixtures: Path) -> None:
    """One iteration logged twice with two times: no run logs that; the log is no measurement (the held-out finding:
    the last copy used to be kept silently). tests/metrics/test_duplicate_iterations.py: the reports' side."""
    lines = (fixtures / "megatron_lm_756_mixtral_moe.log").read_text().splitlines()
    again = lines[3].replace("5444.9", "9999.9")
    run = make_run(tmp_path / "run", training_config(), {0: "x\n", 1: "\n".join([*lines, again]) + "\n"})
    m = parse_training_run(run)
    assert [r.iteration for r in m.iterations] == [2, 3, 43, 44, 45]
    assert m.status == "inconsistent_log" and "duplicate_iterations" in m.problems
    assert "iteration 43" in m.inconsistencies[0] and "5444.9 and 9999.9" in m.inconsistencies[0]
    assert "logs/rank-1.log" in m.inconsistencies[0]


@pytest.mark.parametrize(
    ("iterations", "warmup", "dropped"),
    [
        ([2, 3, 43, 44, 45], 4, 2),
        ([1, 2, 3, 4, 5, 6], 4, 4),
        ([10, 20, 30], 4, 1),  # log interval 10: the first record averages iterations 1-10
        ([1001, 1002, 1003, 1004, 1005, 1006], 4, 4),  # resumed from a checkpoint
        ([5], 4, 1),
        ([], 4, 0),
        ([1, 2], 0, 0),
    ],
)
def test_warmup_count(iterations: list[int], warmup: int, dropped: int) -> None:
    assert warmup_count(iterations, warmup) == dropped


def test_stalls_are_counted_not_hidden(tmp_path: Path, fixtures: Path) -> None:
    lines = (fixtures / "megatron_lm_756_mixtral_moe.log").read_text().splitlines()
    slow = lines[5].replace("5718.6", "17000.0")
    run = make_run(tmp_path / "run", training_config(), {0: "x\n", 1: "\n".join([*lines[:5], slow]) + "\n"})
    m = parse_training_run(run)
    assert m.stall_iterations == (45,)
    assert m.iteration_time_ms.mean == pytest.approx((5444.9 + 5533.8 + 17000.0) / 3)
    frame = m.to_dataframe()
    assert frame.loc[frame.iteration == 45, "stall"].item()
    assert frame.steady.tolist() == [False, False, True, True, True]
    assert frame.load_balancing_loss.tolist() == pytest.approx([1.087362, 1.085377, 1.019746, 1.020033, 1.018004])


# --- failures -----------------------------------------------------------------------------------------------------
def test_watchdog_in_the_job_log_names_its_ranks(tmp_path: Path) -> None:
    run = mixtral_run(tmp_path)
    (run / "stderr.txt").write_bytes(fixture_bytes("nccl_1409_watchdog.log"))
    report = classify_failure(run)
    assert report.status == "failed" and report.primary == "nccl_timeout"
    assert report.ranks("nccl_timeout") == (3, 7)


def test_oom_outranks_the_watchdogs_it_causes(tmp_path: Path) -> None:
    run = make_run(
        tmp_path / "run",
        training_config(world_size=16),
        {15: fixture_bytes("ms_swift_5943_torch_oom.log")},
        stderr=fixture_bytes("nccl_1409_watchdog.log"),
    )
    report = classify_failure(run)
    assert report.primary == "oom"
    assert report.kinds == ("oom", "nccl_timeout")
    assert report.ranks("oom") == (15,)


def test_nccl_cuda_oom_without_error_in_its_line(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", training_config(), {0: fixture_bytes("megatron_lm_1509_nccl_cuda_oom.log")})
    report = classify_failure(run)
    assert report.primary == "oom"
    oom = next(f for f in report.findings if f.kind == "oom")
    assert oom.count == 2 and "Cuda failure 2 'out of memory'" in oom.detail
    assert "exception" in report.kinds


def test_torchrun_sigsegv_summary_in_a_rank_log(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", training_config(), {0: fixture_bytes("megatron_lm_1880_sigsegv_summary.log")})
    report = classify_failure(run)
    assert report.primary == "segfault"
    assert report.findings[0].detail == "traceback : Signal 11 (SIGSEGV) received by PID 3304209"


def test_torchrun_child_failed(tmp_path: Path) -> None:
    run = make_run(
        tmp_path / "run", training_config(), stderr=fixture_bytes("flagembedding_1549_torchrun_child_failed.log")
    )
    assert classify_failure(run).kinds == ("child_failed",)


@pytest.mark.parametrize(
    ("fixture", "with_watchdogs", "kind"),
    [
        ("slurm_node_failure.log", True, "node_failure"),
        ("megatron_bridge_known_issue_deepep_timeout.log", True, "deepep_timeout"),
        ("slurm_time_limit.log", False, "time_limit"),
        # A hang the watchdog reported is the cause; the time limit only ended the job.
        ("slurm_time_limit.log", True, "nccl_timeout"),
    ],
)
def test_job_level_failures(tmp_path: Path, fixture: str, with_watchdogs: bool, kind: str) -> None:
    run = mixtral_run(tmp_path)
    (run / "stdout.txt").write_bytes(fixture_bytes(fixture))
    if with_watchdogs:
        (run / "stderr.txt").write_bytes(fixture_bytes("nccl_1409_watchdog.log"))
    assert classify_failure(run).primary == kind


def test_node_failure_counts_lines(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", training_config(), stdout=fixture_bytes("slurm_node_failure.log"))
    (finding,) = classify_failure(run).findings
    assert (finding.kind, finding.count, finding.source) == ("node_failure", 3, "stdout.txt")
    assert finding.detail == "salloc: error: Node failure on worker-1"


def test_a_traceback_head_alone_is_not_a_classified_failure(tmp_path: Path) -> None:
    run = mixtral_run(tmp_path)
    (run / "logs" / "rank-0.log").write_bytes(fixture_bytes("transformer_engine_2543_megatron_traceback.log"))
    report = classify_failure(run)
    assert report.findings == ()
    assert report.status == "incomplete"


# --- dispatcher and UCCL-EP ---------------------------------------------------------------------------------------
UCCL = fixture_bytes("awsome_1116_efa_uccl.log")


def dispatcher_run(tmp_path: Path, rank0: str, rank1: str = "", **config) -> Path:
    ranks = {
        0: UCCL + rank0.encode(),
        1: UCCL + rank1.encode() + fixture_bytes("megatron_lm_756_mixtral_moe.log"),
    }
    return make_run(tmp_path / "run", training_config(**{"dispatcher": "deepep", **config}), ranks)


CONTRACT_UCCL = (
    "MBRIDGE_DISPATCHER requested=deepep built=flex backend=deepep\n"
    "MBRIDGE_DEEP_EP module=/opt/uccl/ep/deep_ep_wrapper/deep_ep/__init__.py provider=uccl\n"
)


def test_uccl_arm_as_it_should_be(tmp_path: Path) -> None:
    m = parse_training_run(dispatcher_run(tmp_path, CONTRACT_UCCL))
    d = m.validity.dispatcher
    assert (d.requested, d.built, d.backend, d.deep_ep_provider) == ("deepep", "flex", "deepep", "uccl")
    assert d.deep_ep_module == "/opt/uccl/ep/deep_ep_wrapper/deep_ep/__init__.py"
    assert d.downgraded is False and d.problems == ()
    v = m.validity
    assert v.uccl_proxy_ranks == (0, 1) and v.uccl_active
    assert (v.uccl_modes, v.uccl_nics) == (("high-throughput",), ("rdmap16s0",))
    assert v.efa_on_all_ranks
    assert m.failure.primary is None


def test_built_alltoall_is_a_downgrade(tmp_path: Path) -> None:
    m = parse_training_run(
        dispatcher_run(tmp_path, "MBRIDGE_DISPATCHER requested=deepep built=alltoall backend=none\n")
    )
    assert m.validity.dispatcher.downgraded is True
    assert m.failure.primary == "dispatcher_downgrade"
    assert m.status == "failed"


def test_bridge_skipping_deepep_is_a_downgrade_without_our_line(tmp_path: Path) -> None:
    warning = (Path(__file__).parent.parent / "fixtures/logs/megatron_bridge_042_deepep_skipped.log").read_text()
    m = parse_training_run(dispatcher_run(tmp_path, warning))
    d = m.validity.dispatcher
    assert d.built is None and d.downgraded is True
    assert d.bridge_warnings == (warning.strip(),)
    assert m.failure.primary == "dispatcher_downgrade"


def test_without_the_contract_line_the_dispatcher_is_unknown(tmp_path: Path) -> None:
    d = parse_training_run(dispatcher_run(tmp_path, "")).validity.dispatcher
    assert (d.config_requested, d.requested, d.downgraded) == ("deepep", None, None)


def test_contract_problems(tmp_path: Path) -> None:
    bad = parse_training_run(dispatcher_run(tmp_path / "a", "MBRIDGE_DISPATCHER requested=deepep built=magic\n"))
    assert bad.validity.dispatcher.problems == ("contract_invalid_built", "contract_missing_backend")
    assert bad.validity.dispatcher.downgraded is None
    split = parse_training_run(
        dispatcher_run(
            tmp_path / "b",
            "MBRIDGE_DISPATCHER requested=deepep built=flex backend=deepep\n",
            "MBRIDGE_DISPATCHER requested=deepep built=alltoall backend=none\n",
        )
    )
    assert split.validity.dispatcher.problems == ("contract_disagrees_built", "contract_disagrees_backend")
    mismatch = parse_training_run(dispatcher_run(tmp_path / "c", CONTRACT_UCCL, dispatcher="alltoall"))
    assert mismatch.validity.dispatcher.problems == ("config_contract_mismatch",)


def test_ncclep_arm_is_a_flex_arm(tmp_path: Path) -> None:
    """payload/train/log.py EXPECTED_DISPATCH["ncclep"]: what the payload prints for a built NCCL EP dispatcher."""
    line = "MBRIDGE_DISPATCHER requested=ncclep built=flex backend=ncclep\n"
    d = parse_training_run(dispatcher_run(tmp_path / "a", line, line, dispatcher="ncclep")).validity.dispatcher
    assert (d.requested, d.built, d.backend, d.downgraded, d.problems) == ("ncclep", "flex", "ncclep", False, ())
    down = parse_training_run(dispatcher_run(tmp_path / "b", "MBRIDGE_DISPATCHER requested=ncclep built=alltoall "
                                                             "backend=none\n", dispatcher="ncclep"))
    assert down.validity.dispatcher.downgraded is True and down.failure.primary == "dispatcher_downgrade"
    unknown = parse_training_run(dispatcher_run(tmp_path / "c", "", dispatcher="ncclep")).validity.dispatcher
    assert (unknown.config_requested, unknown.downgraded) == ("ncclep", None)


@pytest.mark.parametrize("warning", [
    # Megatron-Bridge 0.5.1 / 0.6.0 / 0.6.1 (flex_dispatcher_backend.py L65-L68 in 0.5.1): no ncclep backend
    "Not a valid flex dispatcher backend. Skipping flex dispatcher backend configuration.",
    # Megatron-Bridge 0.6.2 L80-L88 (its f-string, on an Ampere GPU)
    "NCCL EP is only applicable to Hopper and Blackwell GPUs. Current GPU: NVIDIA A100-SXM4-80GB. Falling back to "
    "alltoall.",
])
def test_bridge_declining_ncclep_is_a_downgrade_without_our_line(tmp_path: Path, warning: str) -> None:
    d = parse_training_run(dispatcher_run(tmp_path, warning + "\n", dispatcher="ncclep")).validity.dispatcher
    assert d.built is None and d.downgraded is True and d.bridge_warnings == (warning,)


def test_uccl_is_only_searched_everywhere_for_a_deepep_run(tmp_path: Path) -> None:
    m = parse_training_run(dispatcher_run(tmp_path, "", dispatcher="alltoall"))
    assert m.validity.uccl_searched_ranks == (0,)
    assert m.validity.uccl_proxy_ranks == (0,)


# --- memory reports follow the rank order -------------------------------------------------------------------------
def test_memory_reports_are_read_from_the_data_parallel_rank0_ranks(tmp_path: Path) -> None:
    def report(rank: int) -> str:
        return (
            f"[Rank {rank}] (after 2 iterations) memory (MB) | allocated: 1.0 | max allocated: {rank}000.0 | "
            "reserved: 1.0 | max reserved: 1.0\n"
        )

    ranks = {r: report(r) for r in range(8)}
    default = parse_training_run(make_run(tmp_path / "a", training_config(world_size=8, tp=2, pp=2), ranks))
    assert [m.rank for m in default.memory] == [0, 1, 4, 5]
    assert default.peak_allocated_bytes == pytest.approx(5000.0 * MIB)
    tp_pp_dp = training_config(world_size=8, tp=2, pp=2, rank_order="tp-pp-dp")
    assert [m.rank for m in parse_training_run(make_run(tmp_path / "b", tp_pp_dp, ranks)).memory] == [0, 1, 2, 3]


# --- entry points and frames --------------------------------------------------------------------------------------
def test_parse_run_dispatches_and_frames_summarise(tmp_path: Path) -> None:
    m = parse_run(mixtral_run(tmp_path))
    frame = runs_frame([m])
    row = frame.iloc[0]
    assert row.status == "incomplete"
    assert row.iter_ms_mean == pytest.approx(sum(STEADY_MS) / 3)
    assert row.efa_on_all_ranks
    assert row.n_steady == 3


def test_parallel_scan_gives_the_same_answer(tmp_path: Path) -> None:
    run = mixtral_run(tmp_path)
    assert parse_training_run(run, workers=2) == parse_training_run(run)


def test_the_payloads_own_error_lines(tmp_path: Path) -> None:
    # As payload/train/__main__.py and payload/train/log.py print them (rank 0, stderr) before exiting with code 3.
    rank0 = (
        "MBRIDGE_DISPATCHER requested=deepep built=alltoall backend=none\n"
        "MBRIDGE_DISPATCHER_ERROR dispatcher downgraded: requested deepep (expects flex/deepep) but the built model "
        "uses alltoall/none; a dispatcher A/B with a silently changed dispatcher is invalid.\n"
    )
    report = classify_failure(dispatcher_run(tmp_path / "a", rank0))
    assert report.primary == "dispatcher_error"
    assert report.kinds == ("dispatcher_error", "dispatcher_downgrade")
    config_error = "MBRIDGE_CONFIG_ERROR world_size = 16 in the config but 2 processes were started\n"
    run = make_run(tmp_path / "b", training_config(), stderr=config_error)
    assert classify_failure(run).primary == "config_error"


def test_parsing_does_not_import_pandas(tmp_path: Path) -> None:
    run = mixtral_run(tmp_path)
    code = (
        "import sys; from cloudai_mbridge.metrics import parse_training_run; "
        f"m = parse_training_run({str(run)!r}); assert m.iteration_time_ms.n == 3; print('pandas' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("edit", ["past_total", "two_totals", "other_gbs"])
def test_a_log_that_contradicts_itself_or_its_config_is_no_measurement(tmp_path: Path, edit: str) -> None:
    """Iterations past their total, iterations of two totals, or a global batch size other than the config's: the
    log was edited, mixed with another run's or damaged, and its times give no number (issue 32: an A/B winner came
    from such a log)."""
    def line(i: int, total: int = 12, gbs: int = 128) -> str:
        return (f" [2026-11-27 10:00:{i:02d}] iteration {i:8d}/{total:8d} | consumed samples: {i * gbs} | elapsed time "
                f"per iteration (ms): 5000.0 | learning rate: 1.0E-05 | global batch size: {gbs:5d} | lm loss: "
                "1.0E+01 | loss scale: 1.0 | grad norm: 1.0 | number of skipped iterations:   0 | number of nan "
                "iterations:   0 |\n")
    lines = [line(i) for i in range(1, 13)]
    if edit == "past_total":
        lines += [line(i) for i in range(13, 20)]
    elif edit == "two_totals":
        lines = [line(i, total=100 if i > 6 else 12) for i in range(1, 13)]
    else:
        lines = [line(i, gbs=64) for i in range(1, 13)]
    good = parse_training_run(make_run(tmp_path / "good", training_config(train_iters=12, gbs=128),
                                       {0: "x\n", 1: "".join(line(i) for i in range(1, 13))}), warmup=2)
    assert good.status == "ok", good.problems
    bad = parse_training_run(make_run(tmp_path / "bad", training_config(train_iters=12, gbs=128),
                                      {0: "x\n", 1: "".join(lines)}), warmup=2)
    assert bad.status == "inconsistent_log" and not bad.ok
