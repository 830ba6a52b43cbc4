"""The dispatcher A/B over repeated process starts (reports/ab_starts.py, used by reports/ab.py when an arm ran more
than once): the interval widens with start-to-start noise, a changed routing or a loss outside the baseline's own
envelope voids the verdict, and Bridge's manual-GC iterations are left out of the times.

The recorded cell is the real one: benchmarks/results/bridge_ab_4gpu/dsv3_mbs1 (4 x H100, Megatron-Bridge 0.6.2,
2026-11-27; six alltoall starts, two UCCL-EP deepep starts, one ncclep start that died at its first dispatch)."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from cloudai_mbridge.reports import ab_starts

ROOT = Path(__file__).resolve().parent.parent
CELL = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1" / "runs"


def starts(means: list[float], n: int = 16, noise: float = 5.0, seed: int = 0) -> list[list[float]]:
    rng = random.Random(seed)
    return [[m + rng.gauss(0.0, noise) for _ in range(n)] for m in means]


def test_a_real_difference_with_steady_starts_is_found():
    base = starts([600.0, 602.0, 598.0], seed=1)
    arm = starts([540.0, 541.0, 539.0], seed=2)
    delta, lo, hi = ab_starts.bootstrap_delta(base, arm)
    assert delta == pytest.approx(-10.0, abs=0.5)
    assert lo < delta < hi < 0.0


def test_start_to_start_noise_widens_the_interval_past_what_the_iterations_say():
    """The same 3 % gap: clear with steady starts, within noise when starts move by +-10 % (as they did on the
    H100 host); pooled iterations alone would call both a win."""
    steady = ab_starts.bootstrap_delta(starts([600.0] * 3, seed=3), starts([582.0] * 3, seed=4))
    moving = ab_starts.bootstrap_delta(starts([540.0, 600.0, 660.0], seed=3), starts([520.0, 582.0, 644.0], seed=4))
    assert steady[2] < 0.0
    assert moving[1] < 0.0 < moving[2]
    assert moving[2] - moving[1] > 3 * (steady[2] - steady[1])


def test_the_bootstrap_is_repeatable_and_equal_arms_straddle_zero():
    base = starts([600.0, 610.0], seed=5)
    assert ab_starts.bootstrap_delta(base, base) == ab_starts.bootstrap_delta(base, base)
    delta, lo, hi = ab_starts.bootstrap_delta(base, base)
    assert delta == 0.0 and lo < 0.0 < hi
    assert ab_starts.bootstrap_delta([], base) is None
    lo, hi = ab_starts.bootstrap_mean(base)
    assert lo < ab_starts.arm_time(base) < hi


def test_gc_iterations_are_left_out_of_a_starts_times():
    its = [(i, 1400.0 if i in (6, 11, 16) else 600.0) for i in range(1, 21)]
    kept = ab_starts.start_times(its, set(range(5, 21)), {6, 11, 16})
    assert kept == [600.0] * 13


def test_routing_gate():
    same = {(0, 1): "a" * 16, (0, 2): "b" * 16}
    assert ab_starts.same_routing([("x", same), ("y", dict(same))]).state == "pass"
    moved = {**same, (0, 2): "c" * 16}
    gate = ab_starts.same_routing([("x", same), ("y", moved)])
    assert gate.state == "fail" and "rank 0 iteration 2" in gate.detail
    assert ab_starts.same_routing([("x", same), ("y", {})]).state == "unknown"


def test_loss_envelope_gate():
    # three baseline starts that agree at iteration 2 and drift apart at iteration 3 (the run's chaos, not the arm)
    base = [{1: 10.0, 2: 8.000, 3: 7.0}, {1: 10.0, 2: 8.004, 3: 6.0}, {1: 10.0, 2: 8.002, 3: 6.1}]
    assert ab_starts.reproducible_horizon(base, 1e-3) == 2
    for i, start in enumerate(base):  # the yardstick: the baseline passes its own gate
        assert ab_starts.loss_envelope(base[:i] + base[i + 1:], [start], 1e-3).state == "pass"
    gate = ab_starts.loss_envelope(base, [{1: 10.0, 2: 8.009, 3: 9.9}], 1e-3)
    assert gate.state == "pass" and "iterations 1-2" in gate.detail and "past 2" in gate.detail
    gate = ab_starts.loss_envelope(base, [{1: 10.0, 2: 8.2, 3: 6.5}], 1e-3)
    assert gate.state == "fail" and "iteration 2" in gate.detail
    # baseline starts that disagree after the first step: nothing to compare against
    assert ab_starts.loss_envelope([{1: 10.0, 2: 8.0}, {1: 10.0, 2: 8.4}], [{1: 10.0, 2: 8.2}], 1e-3).state == "unknown"
    assert ab_starts.loss_envelope(base[:1], [{1: 10.0}], 1e-3).state == "unknown"
    assert ab_starts.loss_envelope(base, [{1: float("nan")}], 1e-3).state == "fail"


# --- the recorded 4 x H100 cell through reports/ab.py -------------------------------------------------------------


def _report(tmp_path: Path, runs: Path) -> dict[str, dict]:
    pytest.importorskip("cloudai")
    from cloudai_mbridge.reports.folders import ab_report

    out = tmp_path / "out"
    out.mkdir()
    rows = ab_report(sorted(p for p in runs.iterdir() if (p / "mbridge_config.json").is_file()), out, warmup=4)
    assert (out / "mbridge_ab.html").is_file()
    return {r["arm"]: r for r in rows}


def test_the_recorded_cell_is_within_noise_with_same_routing_and_work(tmp_path):
    rows = _report(tmp_path, CELL)
    deepep = rows["deepep"]
    assert (deepep["base_starts"], deepep["arm_starts"]) == (6, 2)
    assert deepep["verdict"] == "within noise"
    assert deepep["routing"].startswith("same routing in 8 runs")
    assert deepep["work"].startswith("lm loss inside the baseline envelope (6 starts)")
    assert deepep["gc_iterations_left_out"] == "6 11 16"
    lo, hi = map(float, deepep["delta_ci95_pct"].split(".."))
    assert lo < 0.0 < hi
    assert rows["ncclep"]["verdict"].startswith("invalid:") and "IndexError" in rows["ncclep"]["verdict"]


def _copy(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(CELL, runs)
    shutil.rmtree(runs / "w3_ncclep_s0")
    return runs


def _edit(path: Path, pattern: str, replacement) -> None:
    text = path.read_text()
    new, n = re.subn(pattern, replacement, text)
    assert n, pattern
    path.write_text(new)


def test_a_start_that_routed_differently_gets_no_verdict(tmp_path):
    runs = _copy(tmp_path)
    _edit(runs / "w1_deepep_s1" / "logs" / "rank-0.log",
          r"(MBRIDGE_ROUTING rank=0 iteration=12 calls=\d+ hash=)[0-9a-f]{16}", r"\g<1>0123456789abcdef")
    row = _report(tmp_path, runs)["deepep"]
    assert row["verdict"] == "different routing"
    assert "rank 0 iteration 12" in row["routing"]


def test_a_start_whose_loss_leaves_the_baseline_envelope_did_other_work(tmp_path):
    runs = _copy(tmp_path)
    last = sorted((runs / "w1_deepep_s0" / "logs").glob("rank-*.log"))[-1]
    _edit(last, r"(iteration\s+10/\s+20 \|.*?lm loss: )[0-9.E+-]+", r"\g<1>1.300000E+01")
    row = _report(tmp_path, runs)["deepep"]
    assert row["verdict"] == "different work"
    assert "iteration 10" in row["work"]


# --- a single pair: no verdict from a log that lost its iterations -------------------------------------------------


def _pair(tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    runs.mkdir()
    for name in ("w1_alltoall_s0", "w1_deepep_s0"):
        shutil.copytree(CELL / name, runs / name)
    return runs


def _drop_iteration_lines(log: Path, keep) -> None:
    lines = log.read_text().splitlines(keepends=True)
    out = []
    for line in lines:
        m = re.search(r"iteration\s+(\d+)/\s+20 \|", line)
        if m is None or keep(int(m.group(1))):
            out.append(line)
    log.write_text("".join(out))


def test_the_intact_pair_gets_a_verdict(tmp_path):
    row = _report(tmp_path, _pair(tmp_path))["deepep"]
    assert not row["verdict"].startswith("invalid"), row["verdict"]


@pytest.mark.parametrize("keep", [lambda i: i <= 4 or i == 20, lambda i: i % 3 == 0 or i == 20])
def test_a_log_that_lost_iterations_gets_no_winner(tmp_path, keep):
    runs = _pair(tmp_path)
    _drop_iteration_lines(sorted((runs / "w1_deepep_s0" / "logs").glob("rank-*.log"))[-1], keep)
    row = _report(tmp_path, runs)["deepep"]
    assert row["verdict"].startswith("invalid") and "iterations" in row["verdict"], row["verdict"]


def test_iteration_times_in_other_digits_are_not_a_quiet_gap(tmp_path):
    """Arabic-Indic digits in one elapsed time: the line cannot be read as a number, and the run is not compared as
    if that iteration never happened."""
    runs = _pair(tmp_path)
    last = sorted((runs / "w1_deepep_s0" / "logs").glob("rank-*.log"))[-1]
    digits = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    _edit(last, r"(iteration\s+9/\s+20 \|.*?elapsed time per iteration \(ms\): )([0-9.]+)",
          lambda m: m.group(1) + m.group(2).translate(digits))
    row = _report(tmp_path, runs)["deepep"]
    assert row["verdict"].startswith("invalid"), row["verdict"]


# --- the second 4 x H100 host (2026-11-27, 21:32-21:56 UTC): NCCL EP's first completed A/B cells ------------------

K2_NCCLEP = Path(__file__).resolve().parents[1] / "benchmarks/results/bridge_ab_4gpu/k2_mbs1_w5/runs"
DSV3_NCCLEP = Path(__file__).resolve().parents[1] / "benchmarks/results/bridge_ab_4gpu/dsv3_mbs1_w4/runs"


def _curves(runs: Path, arm: str) -> list[dict[int, float]]:
    from cloudai_mbridge.metrics.training import parse_training_run

    return [parse_training_run(d).loss_curve for d in sorted(runs.glob(f"*_{arm}_s*"))]


def test_the_recorded_ncclep_cell_has_three_starts_per_arm_same_routing_and_work(tmp_path):
    row = _report(tmp_path, K2_NCCLEP)["ncclep"]
    assert (row["base_starts"], row["arm_starts"]) == (3, 3)
    assert row["verdict"] == "within noise"
    assert row["routing"].startswith("same routing in 6 runs")
    assert row["work"].startswith("lm loss inside the baseline envelope (3 starts)")
    assert "iterations 1-11" in row["work"]


def test_every_recorded_baseline_start_passes_the_work_gate_against_the_others():
    # the yardstick must not reject alltoall against alltoall: on these runs a plain [min, max] envelope did (the
    # losses drift apart once the runs' grad norm passes 30), the reproducible horizon does not
    for runs in (K2_NCCLEP, DSV3_NCCLEP, CELL):
        base = _curves(runs, "alltoall")
        assert len(base) >= 3
        for i, start in enumerate(base):
            gate = ab_starts.loss_envelope(base[:i] + base[i + 1:], [start], 1e-3)
            assert gate.state == "pass", (runs, i, gate.detail)


def test_a_baseline_that_does_not_repeat_itself_proves_no_work(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(K2_NCCLEP, runs)
    last = sorted((runs / "w5_alltoall_s1" / "logs").glob("rank-*.log"))[-1]
    _edit(last, r"(iteration\s+2/\s+20 \|.*?lm loss: )[0-9.E+-]+", r"\g<1>1.300000E+01")
    row = _report(tmp_path, runs)["ncclep"]
    assert row["verdict"] == "work not proven (baseline not repeatable)"
    assert ab_starts.NOT_REPEATABLE in row["work"]


# --- one machine per cell ------------------------------------------------------------------------------------------
H3_CELL = ROOT / "benchmarks" / "results" / "bridge_ab_4gpu" / "dsv3_mbs1_h3" / "runs"


def test_machine_gate():
    assert ab_starts.same_machine([("a", "gpus-1"), ("b", "gpus-1")]).state == "pass"
    assert ab_starts.same_machine([("a", None), ("b", None)]).state == "unknown"
    partly = ab_starts.same_machine([("a", "gpus-1"), ("b", None)])
    assert partly.state == "unknown" and "not recorded in 1" in partly.detail
    mixed = ab_starts.same_machine([("a", "gpus-1"), ("b", "gpus-1"), ("c", "gpus-2")])
    assert mixed.state == "fail" and "c on gpus-2" in mixed.detail


def _stamp_machine(run: Path, machine: str) -> None:
    _edit(run / "logs" / "rank-0.log", r'MBRIDGE_VERSIONS \{', f'MBRIDGE_VERSIONS {{"machine": "{machine}", ')


def test_starts_from_two_machines_are_not_pooled_into_a_verdict(tmp_path):
    """Host 3's DSV3 mbs 1 cell is `ncclep faster`; the same runs with one alltoall start stamped as another machine's
    (as when a later window on a fresh host adds starts to a cell) get no winner."""
    runs = tmp_path / "runs"
    shutil.copytree(H3_CELL, runs)
    for run in runs.iterdir():
        _stamp_machine(run, "gpus-aaaaaaaaaaaaaaaa")
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    assert _report(tmp_path / "one", runs)["ncclep"]["verdict"] == "ncclep faster"
    _edit(runs / "mbs1_overlap-off_alltoall_s2" / "logs" / "rank-0.log", "gpus-a{16}", "gpus-bbbbbbbbbbbbbbbb")
    row = _report(tmp_path / "two", runs)["ncclep"]
    assert row["verdict"].startswith("invalid:") and "2 machines" in row["verdict"], row["verdict"]


def test_the_payload_names_the_machine_by_its_gpus():
    from cloudai_mbridge.payload.versions import machine_id

    class Props:
        def __init__(self, uuid):
            self.uuid = uuid

    class Cuda:
        def __init__(self, uuids):
            self.uuids = uuids

        def device_count(self):
            return len(self.uuids)

        def get_device_properties(self, i):
            return Props(self.uuids[i])

    class Torch:
        def __init__(self, uuids):
            self.cuda = Cuda(uuids)

    one = machine_id(Torch(["ef50", "9f68", "33ef", "9c88"]))
    assert one and one.startswith("gpus-") and len(one) == 21
    assert machine_id(Torch(["9c88", "33ef", "9f68", "ef50"])) == one  # order of enumeration does not matter
    assert machine_id(Torch(["ef50", "9f68", "33ef", "0000"])) != one
    assert machine_id(Torch([])) is None and machine_id(Torch(["ef50", ""])) is None


# --- issue 43 item 5: where the time went (dispatch, combine, the rest) ---------------------------------------------
def test_the_split_adds_up_to_the_change_and_finds_which_part_moved():
    rng = random.Random(3)

    def start(t, d, c, n=16):
        return [(t + e, d + e / 2, c) for e in (rng.gauss(0.0, 4.0) for _ in range(n))]

    base = [start(600.0, 100.0, 50.0), start(603.0, 100.0, 50.0), start(598.0, 100.0, 50.0)]
    arm = [start(560.0, 60.0, 50.0), start(561.0, 60.0, 50.0), start(559.0, 60.0, 50.0)]
    split = ab_starts.bootstrap_split(base, arm)
    delta = ab_starts.bootstrap_delta([[t for t, _, _ in s] for s in base], [[t for t, _, _ in s] for s in arm])
    assert sum(split[k][0] for k in ab_starts.SPLIT) == pytest.approx(delta[0])
    assert split["dispatch"][0] == pytest.approx(-40 / 600.3 * 100, abs=0.5) and split["dispatch"][2] < 0
    assert split["combine"] == (0.0, 0.0, 0.0)  # the same combine time in every iteration
    assert split["rest"][1] < 0.0 < split["rest"][2]  # the rest did not move beyond the noise
    assert ab_starts.bootstrap_split(base, [[]]) is None


def _with_dispatcher_times(runs: Path, times: dict[str, tuple[float, float]]) -> None:
    """Give every MBRIDGE_ROUTING line of the recorded logs the fields the timing payload writes, per arm."""
    for run in runs.iterdir():
        arm = next((a for a in times if f"_{a}_" in run.name), None)
        for log in (run / "logs").glob("rank-*.log") if arm else ():
            d, c = times[arm]
            text = log.read_text()
            new, n = re.subn(r"(MBRIDGE_ROUTING rank=\d+ iteration=\d+ calls=\d+ hash=(?:[0-9a-f]{16}|none))",
                             rf"\g<1> dispatch_ms={d:.3f} combine_ms={c:.3f} dispatcher_calls=8", text)
            if n:
                log.write_text(new)


def test_the_ab_page_splits_the_change_into_dispatch_combine_and_the_rest(tmp_path):
    runs = _copy(tmp_path)
    _with_dispatcher_times(runs, {"alltoall": (120.0, 70.0), "deepep": (90.0, 70.0)})
    row = _report(tmp_path, runs)["deepep"]
    assert row["time_split"] == "recorded"
    assert (row["base_dispatch_ms"], row["arm_dispatch_ms"]) == (pytest.approx(120.0), pytest.approx(90.0))
    base_ms = row["base_time_s"] * 1000
    assert row["dispatch_delta_pct"] == pytest.approx(-30.0 / base_ms * 100)
    assert row["combine_delta_pct"] == pytest.approx(0.0) and row["combine_ci95_pct"] == "+0.0..+0.0"
    parts = row["dispatch_delta_pct"] + row["combine_delta_pct"] + row["rest_delta_pct"]
    assert parts == pytest.approx(row["delta_pct"])  # the three parts are the verdict's change
    page = (tmp_path / "out" / "mbridge_ab.html").read_text()
    assert "Where the time went" in page and "1 of 1 comparisons carry dispatcher times" in page


def test_runs_without_dispatcher_times_say_not_recorded(tmp_path):
    row = _report(tmp_path, _copy(tmp_path))["deepep"]
    assert row["time_split"].startswith("not recorded (8 of 8 starts")
    assert "dispatch_delta_pct" not in row
    page = (tmp_path / "out" / "mbridge_ab.html").read_text()
    assert "Where the time went" in page and "0 of 1 comparisons carry dispatcher times" in page


def test_a_failed_start_is_named_as_the_reason_the_split_is_missing(tmp_path):
    # 2 x H200 (2026-11-29): every hybridep start died at its first dispatch, and the page said the runs' payload
    # "did not time the dispatcher" although the baseline's starts had timed it.
    runs = _copy(tmp_path)
    _with_dispatcher_times(runs, {"alltoall": (120.0, 70.0), "deepep": (90.0, 70.0)})
    arm = sorted(p for p in runs.iterdir() if "_deepep_" in p.name)[0]
    for log in (arm / "logs").glob("rank-*.log"):
        log.write_text("MBRIDGE_DISPATCHER requested=deepep built=flex backend=deepep\n"
                       "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
                       "AssertionError: The number of ranks 2 should be divisible by the number of ranks per node 8 "
                       "at rank=0.\n")
    row = _report(tmp_path, runs)["deepep"]
    assert row["time_split"] == "not recorded (1 of 8 starts failed)"
    page = (tmp_path / "out" / "mbridge_ab.html").read_text()
    assert "a start failed, or its payload did not time the dispatcher" in page


def test_the_routing_line_parses_with_and_without_dispatcher_times():
    from cloudai_mbridge.metrics import signals
    from cloudai_mbridge.metrics.scan import LogLine

    old = "MBRIDGE_ROUTING rank=0 iteration=5 calls=8 hash=00ff00ff00ff00ff"
    new = "MBRIDGE_ROUTING rank=3 iteration=5 calls=8 hash=00ff00ff00ff00ff dispatch_ms=12.346 combine_ms=7.500 " \
          "dispatcher_calls=8"
    lines = [LogLine(0, old), LogLine(1, new), LogLine(2, new.replace("12.346", "1.0").replace("rank=3", "rank=4")),
             LogLine(3, new.replace("rank=3", "rank=4")), LogLine(4, new.replace("rank=3", "rank=5"), terminated=False)]
    assert signals.routing_hashes(lines) == {(0, 5): "00ff00ff00ff00ff", (3, 5): "00ff00ff00ff00ff",
                                             (4, 5): "00ff00ff00ff00ff"}
    # rank 4 logged two different times for one iteration: neither kept; a line cut off mid-write is not read
    assert signals.dispatcher_times(lines) == {(3, 5): (12.346, 7.5)}
    assert signals.dispatcher_times(lines[:1]) == {}


def test_a_cell_run_once_splits_by_welch_as_its_verdict():
    pytest.importorskip("cloudai")
    from cloudai_mbridge.reports.ab import _welch_split

    rng = random.Random(5)
    base = [(600.0 + e, 100.0 + e / 2, 50.0) for e in (rng.gauss(0, 4) for _ in range(16))]
    arm = [(570.0 + e, 70.0 + e / 2, 50.0) for e in (rng.gauss(0, 4) for _ in range(16))]
    split = _welch_split(base, arm)
    mean = lambda rows, k: sum(r[k] for r in rows) / len(rows)  # noqa: E731
    assert sum(v[0] for v in split.values()) == pytest.approx((mean(arm, 0) - mean(base, 0)) / mean(base, 0) * 100)
    assert split["dispatch"][2] < 0 and split["combine"] == (0.0, 0.0, 0.0) and abs(split["rest"][0]) < 1.0
    assert _welch_split(base[:1], arm) is None
