"""Refit runs: the payload's lines (the forms its docstring specifies), and the Megatron-RL summary they follow."""

from __future__ import annotations

from pathlib import Path

import pytest

from cloudai_mbridge.metrics import classify_failure, parse_refit_run, parse_run

from .conftest import fixture_bytes, make_run

CONFIG = {"workload": "refit", "world_size": 2, "num_nodes": 1, "gpus_per_node": 2}
ITERS = [45.61, 44.87, 45.21, 45.23]  # mean 45.23, median 45.22, min 44.87, max 45.61
HEAD = "".join(f"REFIT_ITER iter={i} time_ms={ms}\n" for i, ms in enumerate(ITERS)) + (
    "REFIT_STATS bytes_remote=1073741824 bytes_local=536870912 send_ops=512 recv_ops=384\n"
    "REFIT_VERIFY status=pass params=1234 mismatched=0 detail=bit-exact\n"
)
# Megatron-RL's summary block, verbatim (seed 002), then the two lines it does not have.
SUMMARY = fixture_bytes("megatron_rl_refit_summary.log").decode() + (
    "Median refit time: 45.22 ms\nEffective bandwidth: 35.61 GB/s\n"
)
RESULT = 'REFIT_RESULT {"refit_time_ms": 45.22, "n": 4}\n'


def refit_run(tmp_path: Path, rank0: str, rank1: str = "", **files) -> Path:
    return make_run(tmp_path / "run", CONFIG, {0: "REFIT_CONFIG {}\n" + rank0, 1: rank1 or "ok\n"}, **files)


def test_a_good_refit_run(tmp_path: Path) -> None:
    m = parse_refit_run(refit_run(tmp_path, HEAD + SUMMARY + RESULT))
    assert m.status == "ok" and m.ok
    assert m.iterations == ((0, 45.61), (1, 44.87), (2, 45.21), (3, 45.23))
    t = m.time_ms
    assert (t.n, t.n_warmup) == (4, 0)
    assert t.mean == pytest.approx(45.23)
    assert t.median == pytest.approx(45.22)
    assert (t.min, t.max) == (44.87, 45.61)
    assert m.printed == {"mean": 45.23, "min": 44.87, "max": 45.61, "median": 45.22}
    assert m.bandwidth_gbps == 35.61
    assert (m.bytes_remote, m.bytes_local, m.send_ops, m.recv_ops) == (1073741824, 536870912, 512, 384)
    assert (m.verify.status, m.verify.params, m.verify.mismatched, m.verify.detail) == ("pass", 1234, 0, "bit-exact")
    assert m.result == {"refit_time_ms": 45.22, "n": 4}
    assert m.failure.status == "ok"
    assert m.to_dataframe().time_ms.tolist() == ITERS
    assert parse_run(tmp_path / "run") == m


def test_a_summary_that_disagrees_with_the_iterations(tmp_path: Path) -> None:
    m = parse_refit_run(refit_run(tmp_path, HEAD + SUMMARY.replace("45.23", "46.00") + RESULT))
    assert m.status == "summary_mismatch"
    assert m.time_ms.mean == pytest.approx(45.23)


def test_rounding_of_the_printed_summary_is_not_a_mismatch(tmp_path: Path) -> None:
    head = HEAD.replace("time_ms=45.23", "time_ms=45.234")  # mean 45.2335 prints as 45.23
    assert parse_refit_run(refit_run(tmp_path, head + SUMMARY + RESULT)).status == "ok"


def test_failed_verification_as_the_payload_reports_it(tmp_path: Path) -> None:
    rank0 = (
        "REFIT_STATS bytes_remote=-1 bytes_local=-1 send_ops=-1 recv_ops=-1\n"
        "REFIT_VERIFY status=fail params=1234 mismatched=3 detail=decoder.layers.0.mlp.experts.weight1\n"
        'REFIT_RESULT {"refit_time_ms": null, "bandwidth_gbps": null}\n'
    )
    m = parse_refit_run(refit_run(tmp_path, rank0))
    assert m.status == "failed"
    assert m.failure.primary == "verify_failed"
    assert "mismatched=3" in m.failure.findings[0].detail
    assert (m.bytes_remote, m.send_ops) == (None, None)
    assert "no_iterations" in m.problems
    assert m.time_ms.n == 0


def test_refit_error_on_another_rank(tmp_path: Path) -> None:
    error = 'REFIT_ERROR phase=plan rank=1 message="timed out after 600 s"\n'
    m = parse_refit_run(refit_run(tmp_path, "", rank1=error))
    assert m.failure.primary == "refit_error"
    assert m.failure.ranks("refit_error") == (1,)
    assert m.status == "failed"


def test_skipped_verification_and_unknown_bandwidth(tmp_path: Path) -> None:
    head = HEAD.replace("status=pass", "status=skipped")
    summary = SUMMARY.replace("35.61", "n/a")
    m = parse_refit_run(refit_run(tmp_path, head + summary + RESULT))
    assert m.status == "ok"
    assert "verify_skipped" in m.problems
    assert m.bandwidth_gbps is None


def test_killed_before_the_result(tmp_path: Path) -> None:
    m = parse_refit_run(refit_run(tmp_path, HEAD))
    assert m.status == "no_result"
    assert m.failure.status == "incomplete"
    assert m.time_ms.mean == pytest.approx(45.23)


def test_a_cut_last_iteration_is_not_used(tmp_path: Path) -> None:
    m = parse_refit_run(refit_run(tmp_path, HEAD + "REFIT_ITER iter=4 time_ms=45.2"))
    assert m.status == "truncated"
    assert [i for i, _ in m.iterations] == [0, 1, 2, 3]


def test_missing_rank0_log(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", CONFIG, {1: "ok\n"})
    m = parse_refit_run(run)
    assert m.status == "missing_rank_log"
    assert m.problems[:2] == ("missing_rank_log", "no_iterations")


def test_refit_lines_from_the_job_log_with_a_bad_result(tmp_path: Path) -> None:
    labelled = "".join(f"0: {line}\n" for line in (HEAD + SUMMARY).splitlines()) + "0: REFIT_RESULT {broken}\n"
    run = make_run(tmp_path / "run", CONFIG, stdout=labelled)
    m = parse_refit_run(run)
    assert "refit_from_job_logs" in m.problems and "bad_result_json" in m.problems
    assert m.time_ms.mean == pytest.approx(45.23)
    assert m.status == "missing_rank_log"  # no rank logs at all, only the job log
    assert m.result is None and "no_result" in m.problems


def test_oom_during_refit(tmp_path: Path) -> None:
    run = refit_run(tmp_path, HEAD, rank1=fixture_bytes("ms_swift_5943_torch_oom.log").decode())
    assert classify_failure(run).primary == "oom"
