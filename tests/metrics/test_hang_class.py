"""A hung start is a failed run of its class (issue 43): the payload watchdog's MBRIDGE_HANG line
(payload/train/watchdog.py) and, for a start killed from outside, the last MBRIDGE_STAGE line of the ranks' logs
become the failure the run status, mbridge_runs.csv and the A/B cells show ("hang at first dispatch", "hang after
iteration 3")."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from cloudai_mbridge.metrics import parse_training_run
from cloudai_mbridge.payload.train.log import iteration_line
from cloudai_mbridge.workloads.reporting import run_status

from .conftest import make_run, training_config

ITERS = 8


def iteration(i: int, ms: float = 500.0) -> str:
    return iteration_line(timestamp=datetime(2026, 11, 29), iteration=i, train_iters=ITERS, consumed_samples=i * 128,
                          elapsed_time_per_iteration=ms / 1000.0, throughput=100.0, learning_rate=1e-5,
                          batch_size=128, losses={"lm loss": 7.0 - i * 0.01}, loss_scale=1.0, grad_norm=1.0,
                          skipped_iterations=0, nan_iterations=0)


def stages(rank: int, *names: str) -> str:
    return "".join(f"MBRIDGE_STAGE stage={s} rank={rank} t_s={i * 10}.0\n" for i, s in enumerate(names))


HANG_STACKS = ('MBRIDGE_HANG_STACKS rank={r}: no progress for 120 s in stage first_dispatch; the Python stack of every '
               'thread follows\nThread 0x00007f (most recent call first):\n  File "/x/deep_ep/buffer.py", line 88 in '
               'dispatch\n')


def config() -> dict:
    return training_config(pp=1, ep=2, dispatcher="deepep", train_iters=ITERS)


def test_watchdog_line_at_first_dispatch_is_the_failure(tmp_path: Path) -> None:
    ranks = {r: stages(r, "init", "model_built", "first_dispatch") + HANG_STACKS.format(r=r)
             + f"MBRIDGE_HANG class=first_dispatch stage=first_dispatch after_s=120 rank={r} timeout_s=120\n"
             for r in (0, 1)}
    m = parse_training_run(make_run(tmp_path / "run", config(), ranks))
    assert m.status == "failed"
    assert m.failure.primary == "hang"
    assert m.failure.reason()["failure_class"] == "hang at first dispatch"
    assert m.iteration_time_ms.n == 0
    status = run_status(tmp_path / "run")
    assert not status.is_successful
    assert status.error_message.startswith("hang at first dispatch on rank 0: MBRIDGE_HANG class=first_dispatch")


def test_watchdog_line_after_iterations_names_the_iteration(tmp_path: Path) -> None:
    last = stages(1, "init", "model_built", "first_dispatch", "iteration_1") + "".join(
        iteration(i) + "\n" for i in range(1, 4)) + "MBRIDGE_HANG class=later stage=iteration_3 after_s=300 rank=1\n"
    m = parse_training_run(make_run(tmp_path / "run", config(), {0: stages(0, "init"), 1: last}))
    assert (m.status, m.failure.primary) == ("failed", "hang")
    assert m.failure.reason()["failure_class"] == "hang after iteration 3"


def test_a_rank_that_only_hangs_in_the_middle_of_the_ranks_is_found(tmp_path: Path) -> None:
    ranks = {r: stages(r, "init") for r in range(4)}
    ranks[2] += "MBRIDGE_HANG class=init stage=init after_s=1200 rank=2\n"
    m = parse_training_run(make_run(tmp_path / "run", {**config(), "world_size": 4}, ranks))
    assert m.failure.reason()["failure_class"] == "hang at init"
    assert m.failure.first.rank == 2


def test_a_log_that_just_stops_is_classified_by_its_last_stage(tmp_path: Path) -> None:
    """Killed from outside: no MBRIDGE_HANG, no exit line. The rank furthest behind names the stage."""
    ranks = {0: stages(0, "init", "model_built", "first_dispatch"), 1: stages(1, "init", "model_built")}
    m = parse_training_run(make_run(tmp_path / "run", config(), ranks))
    assert m.status == "failed"
    assert m.failure.primary == "log_stops"
    assert m.failure.first.rank == 1
    assert m.failure.reason()["failure_class"].startswith("hang at init (model built, no dispatch yet)")
    assert "MBRIDGE_STAGE stage=model_built rank=1" in m.failure.first.detail


def test_a_log_that_stops_after_iterations_and_the_launcher_timeout(tmp_path: Path) -> None:
    last = stages(1, "init", "model_built", "first_dispatch", "iteration_1") + "".join(
        iteration(i) + "\n" for i in range(1, 6)) + "MBRIDGE_LAUNCH_TIMEOUT rank=1 timeout_s=180\n"
    m = parse_training_run(make_run(tmp_path / "run", config(), {0: stages(0, "init", "first_dispatch"), 1: last}))
    assert m.failure.primary == "log_stops"
    assert m.failure.reason()["failure_class"].startswith("hang after iteration 5")
    assert "MBRIDGE_LAUNCH_TIMEOUT rank=1 timeout_s=180" in m.failure.first.detail


def test_a_finished_run_with_stage_lines_is_ok(tmp_path: Path) -> None:
    last = stages(1, "init", "model_built", "first_dispatch", "iteration_1") + "".join(
        iteration(i) + "\n" for i in range(1, ITERS + 1))
    m = parse_training_run(make_run(tmp_path / "run", config(), {0: stages(0, "init"), 1: last}))
    assert m.status == "ok", m.problems


def test_a_stopped_log_without_stage_lines_stays_incomplete(tmp_path: Path) -> None:
    last = "".join(iteration(i) + "\n" for i in range(1, 4))
    m = parse_training_run(make_run(tmp_path / "run", config(), {0: "", 1: last}))
    assert m.failure.primary is None
