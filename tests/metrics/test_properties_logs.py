"""Issue 14: property-based tests (hypothesis) of the log parsers.

Run folders are copies of the real GPU runs in tests/fixtures/logs/gpu (as in test_damaged_times.py), edited per
example in a temporary folder. What must hold whatever the bytes:

- clean_text / scan_file / parse_training_run / parse_refit_run never raise (NUL, invalid UTF-8, ``\\r``, ANSI codes,
  runs of thousands of digits, '1e999', 'nan', negative numbers, inserted anywhere);
- a time that is negative, zero, non-finite or above MAX_ITERATION_MS makes the run invalid with the reason, and never
  enters a mean (a training time that is no number at all is dropped, as a spliced value is); a valid one is read
  back exactly;
- steady_state of finite positive values: min <= p10 <= median <= p90 <= max, mean within [min, max], spread >= 0;
- lines that carry no marker change nothing: a valid log with garbage lines gives the same numbers;
- the training payload's own printers (payload/train/log.py) write lines the parsers read back to the printed values.
"""

from __future__ import annotations

import math
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis_settings import SETTINGS

from cloudai_mbridge.metrics import (
    parse_iteration_line,
    parse_memory_line,
    parse_refit_run,
    parse_training_run,
    signals,
)
from cloudai_mbridge.metrics import refit as refit_module
from cloudai_mbridge.metrics import training as training_module
from cloudai_mbridge.metrics.scan import Marker, clean_text, scan_file
from cloudai_mbridge.metrics.stats import MAX_ITERATION_MS, iteration_time_problem, percentile, steady_state
from cloudai_mbridge.payload.train import log as payload_log

FEW = settings(SETTINGS, max_examples=50)

GPU = Path(__file__).resolve().parent.parent / "fixtures" / "logs" / "gpu"
TRAIN_RUN = GPU / "ab_mbs1_overlap-off_deepep"  # rank-1 prints the iterations, rank-0 memory and the contract
REFIT_RUN = GPU / "refit_tp2-ep2_1l"

# Every byte string some parser searches a log for: a line holding none of them is invisible to all of them.
NEEDLES = sorted({
    needle
    for module in (signals, training_module, refit_module)
    for value in vars(module).values()
    for marker in (value if isinstance(value, tuple | list) else (value,))
    if isinstance(marker, Marker)
    for needle in marker.needles
})

# Damage a log really gets, and values that break naive parsers.
NASTY = [
    b"\x00", b"\x00" * 64, b"\xff\xfe\xfd", b"\xc3", b"\xed\xa0\x80", b"\r", b"\r\n", b"\n", b"\t", b"\x1b[31m",
    b"\x1b]0;title\x07", b"\x1b", b"|", b" | ", b":", b"9" * 5000, b"9" * 5000 + b": ", b"[rank" + b"9" * 5000 + b"]: ",
    b"[1," + b"9" * 5000 + b"]<stdout>: ", b"1e999", b"-1e999", b"nan", b"NaN", b"inf", b"-inf", b"-5.0", b"-0.0",
    b"0", b"1e308", b"1e-400", b"2000000000.0", b"\xd9\xa1\xd9\xa2", b"1_0", b"3: ", b"[rank1]: ",
    b"elapsed time per iteration (ms): ", b"elapsed time per iteration (ms): nan |",
    b" iteration " + b"9" * 5000 + b"/" + b"9" * 5000 + b" |", b" iteration 5/ 30 |",
    b"REFIT_ITER iter=" + b"9" * 5000 + b" time_ms=1.0", b"REFIT_ITER iter=3 time_ms=-1",
    b"REFIT_STATS bytes_remote=" + b"9" * 5000 + b" bytes_local=1 send_ops=1 recv_ops=1",
    b"REFIT_VERIFY status=pass params=" + b"9" * 5000 + b" mismatched=0", b"Mean refit time: 1e" + b"9" * 5000 + b" ms",
    b"Effective bandwidth: -1 GB/s", b"REFIT_RESULT {", b"REFIT_RESULT [1]",
    b"[Rank " + b"9" * 5000 + b"] (after 1 iterations) memory (MB) | allocated: 1.0 | max allocated: 1.0",
    b"[Rank 0] (after 1 iterations) memory (MB) | alloc retries: " + b"9" * 5000 + b" |",
    b"Step Time : " + b"9" * 400 + b"s GPU utilization: 1.0MODEL_TFLOP/s/GPU", b"Step Time : 0.0s GPU utilization: 1.0",
    b"provider is efa (" + b"9" * 5000 + b" NICs)", b"MBRIDGE_DISPATCHER requested=deepep built=", b"MBRIDGE_",
]
nasty = st.one_of(st.sampled_from(NASTY), st.binary(max_size=40))
garbage_bytes = st.lists(nasty, min_size=1, max_size=4).map(b"".join)
# a line no parser looks at (garbage, but not a marker's)
quiet_line = st.one_of(st.binary(max_size=60), st.text(max_size=60).map(str.encode), st.sampled_from(NASTY)).map(
    lambda b: b.replace(b"\n", b" ")
).filter(lambda b: not any(n in b for n in NEEDLES))


@contextmanager
def edited_copy(fixture: Path, edit: dict[str, bytes]) -> Iterator[Path]:
    """A copy of a run folder with some files replaced (paths relative to the run folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(shutil.copytree(fixture, Path(tmp) / "run"))
        for name, data in edit.items():
            (run / name).write_bytes(data)
        yield run


def _read(fixture: Path, name: str) -> bytes:
    return (fixture / name).read_bytes()


def _lines(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def _training_numbers(m: training_module.TrainingRunMetrics) -> tuple:
    return (m.status, m.problems, m.iteration_time_ms, m.tflops_per_gpu, m.tokens_per_s, m.step_time_s,
            [(r.iteration, r.elapsed_ms, r.lm_loss, r.grad_norm) for r in m.iterations], m.memory, m.time_errors)


def _refit_numbers(m: refit_module.RefitRunMetrics) -> tuple:
    return (m.status, m.problems, m.iterations, m.time_ms, dict(m.printed), m.bandwidth_gbps, m.bytes_remote,
            m.bytes_local, m.send_ops, m.recv_ops, m.verify, m.time_errors)


BASE_TRAINING = parse_training_run(TRAIN_RUN)
BASE_REFIT = parse_refit_run(REFIT_RUN)


def test_the_fixtures_are_valid_runs() -> None:
    assert BASE_TRAINING.ok and BASE_TRAINING.iteration_time_ms.n == 26 and BASE_TRAINING.memory
    assert BASE_REFIT.ok and BASE_REFIT.time_ms.n == 5
    assert b"elapsed time per iteration" in NEEDLES and b"REFIT_" in NEEDLES and b"rror" in NEEDLES


def _assert_honest_training(m: training_module.TrainingRunMetrics) -> None:
    """What any parse, of any bytes, must hold: no damaged time in a statistic, a damaged time never 'ok'."""
    for r in m.iterations:
        assert r.elapsed_ms is None or iteration_time_problem(r.elapsed_ms) is None
    for stats in (m.iteration_time_ms, m.tflops_per_gpu, m.tokens_per_s, m.step_time_s):
        if stats.n:
            assert math.isfinite(stats.mean) and stats.min <= stats.mean <= stats.max
    if m.iteration_time_ms.n:
        assert m.iteration_time_ms.min > 0 and m.iteration_time_ms.max <= MAX_ITERATION_MS
    if m.time_errors:
        assert not m.ok and "bad_iteration_time" in (m.status, *m.problems)
    summary = m.summary()
    assert summary["status"] == m.status


def _assert_honest_refit(m: refit_module.RefitRunMetrics) -> None:
    for _, ms in m.iterations:
        assert iteration_time_problem(ms) is None
    if m.time_ms.n:
        assert math.isfinite(m.time_ms.mean) and m.time_ms.min <= m.time_ms.mean <= m.time_ms.max
        assert math.isfinite(m.time_ms.stdev)
    if m.time_errors:
        assert not m.ok and "bad_iteration_time" in (m.status, *m.problems)
    assert m.bandwidth_gbps is None or (math.isfinite(m.bandwidth_gbps) and m.bandwidth_gbps >= 0)
    m.summary()


# --- scan.clean_text -------------------------------------------------------------------------------------------------
@SETTINGS
@given(st.one_of(st.binary(max_size=200), garbage_bytes, st.text(max_size=80).map(str.encode)))
@example(b"9" * 5000 + b": elapsed")  # int() refuses more than 4300 digits
@example(b"[rank" + b"9" * 5000 + b"]: x")
@example(b"[1," + b"9" * 5000 + b"]<stderr>: x")
@example(b"\xff\x00\x1b[0m\r\n")
def test_clean_text_never_raises(raw: bytes) -> None:
    text, label = clean_text(raw)
    assert isinstance(text, str) and not text.endswith(("\r", "\n"))
    assert label is None or (isinstance(label, int) and label >= 0)
    assert clean_text(raw + b"\r\n") == (text, label)
    if b"\x1b" not in raw and label is None:
        assert text == raw.decode("utf-8", "replace").rstrip("\r\n")


LABELS = {
    "srun": lambda r: f"{r}: ",
    "torchrun": lambda r: f"[rank{r}]: ",
    "mpirun": lambda r: f"[1,{r}]<stdout>: ",
    "srun+torchrun": lambda r: f"{r}: [rank{r}]: ",
}


@SETTINGS
@given(st.sampled_from(sorted(LABELS)), st.integers(0, 10**6), st.text(st.characters(codec="utf-8"), max_size=60))
def test_a_rank_label_is_removed_and_reported(style: str, rank: int, payload: str) -> None:
    assume(payload[:1].strip() and not re.match(r"\[rank\d+\]:", payload) and "\x1b" not in payload)
    payload = payload.rstrip("\r\n")
    assert clean_text((LABELS[style](rank) + payload).encode()) == (payload, rank)


# --- scan.scan_file --------------------------------------------------------------------------------------------------
SCAN_PLAN = [*signals.FAILURE_MARKERS, training_module.ITERATION, training_module.STEP_TIME, training_module.MEMORY,
             refit_module.REFIT, signals.CONTRACT]


@SETTINGS
@given(st.lists(st.one_of(nasty, st.sampled_from(_lines(_read(TRAIN_RUN, "logs/rank-1.log"))[:3]),
                          st.sampled_from(_lines(_read(REFIT_RUN, "logs/rank-0.log")))), max_size=12).map(b"".join))
def test_scan_file_never_raises_and_cuts_whole_segments(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rank-0.log"
        path.write_bytes(data)
        scan = scan_file(path, SCAN_PLAN)
    if not data:
        assert scan.status == "empty"
        return
    assert scan.status == "ok" and scan.size == len(data)
    assert scan.truncated == (not data.endswith(b"\n"))
    for marker in SCAN_PLAN:
        for line in scan.lines(marker.name):
            assert "\n" not in line.text and "\r" not in line.text
            assert line.offset == 0 or data[line.offset - 1 : line.offset] in (b"\n", b"\r")
            if b"\x1b" not in data:
                assert any(n.decode() in line.text for n in marker.needles), (marker.name, line.text[:200])


# --- stats -----------------------------------------------------------------------------------------------------------
@SETTINGS
@given(st.one_of(st.floats(), st.sampled_from([0.0, -0.0, MAX_ITERATION_MS, math.nextafter(MAX_ITERATION_MS, math.inf),
                                               5e-324, -5e-324, math.inf, -math.inf, math.nan])))
def test_iteration_time_problem_accepts_exactly_the_real_times(ms: float) -> None:
    why = iteration_time_problem(ms)
    assert (why is None) == (math.isfinite(ms) and 0.0 < ms <= MAX_ITERATION_MS)
    assert why is None or (isinstance(why, str) and why)


positive = st.floats(min_value=5e-324, max_value=1.7e308, allow_nan=False, allow_infinity=False)
times_ms = st.one_of(positive, st.floats(min_value=1.0, max_value=1e5))


@SETTINGS
@given(st.lists(times_ms, min_size=1, max_size=40), st.integers(0, 8), st.floats(1.0, 10.0))
def test_steady_state_of_positive_values(values: list[float], warmup: int, stall_factor: float) -> None:
    s = steady_state(values, warmup, stall_factor)
    kept = values[warmup:]
    assert (s.n, s.n_warmup, s.n_invalid) == (len(kept), len(values) - len(kept), 0)
    if not kept:
        assert s.mean is None and s.spread is None
        return
    assert s.min == min(kept) and s.max == max(kept)
    assert s.min <= s.p10 <= s.median <= s.p90 <= s.max
    assert s.min <= s.mean <= s.max
    assert s.stdev >= 0 and s.spread is not None and s.spread >= 0
    assert s.stall_positions == tuple(i for i, v in enumerate(kept) if v > s.stall_threshold)


@SETTINGS
@given(st.lists(st.one_of(times_ms, st.sampled_from([None, math.nan, math.inf, -math.inf])), max_size=30),
       st.integers(0, 5))
def test_steady_state_never_lets_a_non_finite_value_in(values: list[float | None], warmup: int) -> None:
    s = steady_state(values, warmup)
    kept = values[warmup:]
    finite = [v for v in kept if v is not None and math.isfinite(v)]
    assert (s.n, s.n_invalid) == (len(finite), len(kept) - len(finite))
    reference = steady_state(finite, 0)
    assert (s.mean, s.median, s.p10, s.p90, s.min, s.max, s.stdev) == (
        reference.mean, reference.median, reference.p10, reference.p90, reference.min, reference.max, reference.stdev)


@SETTINGS
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300), min_size=1,
                max_size=30).map(sorted),
       st.lists(st.floats(0.0, 100.0), min_size=2, max_size=5).map(sorted))
def test_percentile_is_monotone_and_within_the_values(values: list[float], qs: list[float]) -> None:
    results = [percentile(values, q) for q in qs]
    assert all(values[0] <= r <= values[-1] for r in results)
    assert results == sorted(results)
    assert percentile(values, 0.0) == values[0] and percentile(values, 100.0) == values[-1]


@SETTINGS
@given(st.one_of(st.floats(max_value=-1e-9), st.floats(min_value=100.000001), st.just(math.nan)))
def test_percentile_refuses_a_q_outside_0_100_and_an_empty_series(q: float) -> None:
    with pytest.raises(ValueError):
        percentile([1.0, 2.0], q)
    with pytest.raises(ValueError):
        percentile([], 50.0)


# --- parse_training_run ----------------------------------------------------------------------------------------------
def _insert_lines(data: bytes, inserts: list[tuple[int, bytes]]) -> bytes:
    lines = _lines(data)
    for position, line in sorted(inserts, key=lambda t: t[0], reverse=True):
        lines.insert(position % (len(lines) + 1), line + b"\n")
    return b"".join(lines)


@FEW
@given(st.lists(st.tuples(st.integers(0, 10**4), quiet_line), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 10**4), quiet_line), max_size=4))
def test_garbage_lines_do_not_change_a_training_run(last_rank: list[tuple[int, bytes]],
                                                     rank0: list[tuple[int, bytes]]) -> None:
    edit = {"logs/rank-1.log": _insert_lines(_read(TRAIN_RUN, "logs/rank-1.log"), last_rank),
            "logs/rank-0.log": _insert_lines(_read(TRAIN_RUN, "logs/rank-0.log"), rank0)}
    with edited_copy(TRAIN_RUN, edit) as run:
        m = parse_training_run(run)
    assert _training_numbers(m) == _training_numbers(BASE_TRAINING)



def _inserted(data: bytes, inserts: list[tuple[int, bytes]], keep_final_newline: bool) -> bytes:
    """``data`` with each junk inserted at its offset (modulo the length), and a final newline if asked."""
    out = bytearray(data)
    for offset, junk in sorted(inserts, reverse=True):
        out[offset % (len(out) + 1) : offset % (len(out) + 1)] = junk
    if keep_final_newline and not out.endswith(b"\n"):
        out += b"\n"
    return bytes(out)

@FEW
@given(st.sampled_from(["logs/rank-1.log", "logs/rank-0.log"]),
       st.lists(st.tuples(st.integers(0, 10**6), garbage_bytes), min_size=1, max_size=4), st.booleans())
@example("logs/rank-1.log", [(0, b" iteration " + b"9" * 5000 + b"/ 30 | elapsed time per iteration (ms): 1.0 |\n")],
         True)
@example("logs/rank-1.log", [(0, b"9" * 5000 + b": ")], True)
@example("logs/rank-0.log", [(0, b"[Rank " + b"9" * 5000 + b"] (after 1 iterations) memory (MB) | allocated: 1.0\n")],
         True)
def test_bytes_inserted_anywhere_in_a_training_log_never_raise_nor_lie(
    name: str, inserts: list[tuple[int, bytes]], keep_final_newline: bool
) -> None:
    with edited_copy(TRAIN_RUN, {name: _inserted(_read(TRAIN_RUN, name), inserts, keep_final_newline)}) as run:
        m = parse_training_run(run)
    _assert_honest_training(m)


def _float_tokens() -> st.SearchStrategy[str]:
    """Time values as a log could print them, damaged or not."""
    return st.one_of(
        st.floats().map(repr),
        st.floats().map(lambda v: f"{v:.1f}"),
        st.floats(min_value=0.0, max_value=1e12).map(lambda v: f"{v:g}"),
        st.sampled_from(["1e999", "-1e999", "nan", "NaN", "-nan", "inf", "+inf", "Infinity", "-0.0", "0", "1e-400",
                         "9" * 400, "-5", "1e9", "1000000000.1", "2000000000.0", "12x", "0x10", "1_0", "١٢", "",
                         "5.0.1", "--1", "1e", ".5", "5.", "+5"]),
    )


def _as_time(token: str) -> float | None:
    """The value a token stands for, if it is a plain ASCII decimal number (nan/inf included)."""
    if not token.strip() or not token.isascii() or "_" in token:
        return None
    try:
        return float(token)
    except ValueError:
        return None


def _replace_training_time(data: bytes, iteration: int, token: str) -> bytes:
    pattern = rb"(iteration\s+%d/\s*\d+ \|.*?elapsed time per iteration \(ms\): )[^|]*?( \|)" % iteration
    new, n = re.subn(pattern, lambda m: m.group(1) + token.encode() + m.group(2), data)
    assert n == 1
    return new


@SETTINGS
@given(st.integers(1, 30), _float_tokens())
@example(12, "12x")  # a written time that is no number
@example(12, "")
@example(30, "1e999")
@example(5, "5e-324")  # the smallest positive float is a (tiny) time
def test_a_training_time_is_read_exactly_or_makes_the_run_invalid(iteration: int, token: str) -> None:
    edit = {"logs/rank-1.log": _replace_training_time(_read(TRAIN_RUN, "logs/rank-1.log"), iteration, token)}
    with edited_copy(TRAIN_RUN, edit) as run:
        m = parse_training_run(run)
    _assert_honest_training(m)
    value = _as_time(token)
    record = next(r for r in m.iterations if r.iteration == iteration)
    others = [(r.iteration, r.elapsed_ms) for r in BASE_TRAINING.iterations if r.iteration != iteration]
    assert [(r.iteration, r.elapsed_ms) for r in m.iterations if r.iteration != iteration] == others
    if value is not None and iteration_time_problem(value) is None:
        assert m.ok and not m.time_errors, (m.status, m.problems)
        assert record.elapsed_ms == value
        return
    # never a number: the time enters no statistic
    assert record.elapsed_ms is None
    stats = m.iteration_time_ms
    assert stats.n + stats.n_invalid + stats.n_warmup == 30 and stats.n == BASE_TRAINING.iteration_time_ms.n - (
        iteration > 4)
    if value is not None:  # a number that is not a time (negative, zero, nan/inf, absurd): the run is invalid
        assert m.status == "bad_iteration_time" and not m.ok, (token, m.status, m.problems)
        assert len(m.time_errors) == 1 and f"iteration {iteration}" in m.time_errors[0]
        assert iteration_time_problem(value) in m.time_errors[0]
    else:  # no number at all ("12x", "", "1_0"): dropped like a value spliced with other output (test_lines.py)
        assert not m.time_errors


# --- parse_refit_run -------------------------------------------------------------------------------------------------
@FEW
@given(st.lists(st.tuples(st.integers(0, 10**4), quiet_line), min_size=1, max_size=8),
       st.lists(st.tuples(st.integers(0, 10**4), quiet_line), max_size=4))
def test_garbage_lines_do_not_change_a_refit_run(
    rank0: list[tuple[int, bytes]], rank1: list[tuple[int, bytes]]
) -> None:
    edit = {"logs/rank-0.log": _insert_lines(_read(REFIT_RUN, "logs/rank-0.log"), rank0),
            "logs/rank-1.log": _insert_lines(_read(REFIT_RUN, "logs/rank-1.log"), rank1)}
    with edited_copy(REFIT_RUN, edit) as run:
        m = parse_refit_run(run)
    assert _refit_numbers(m) == _refit_numbers(BASE_REFIT)


@FEW
@given(st.sampled_from(["logs/rank-0.log", "logs/rank-1.log"]),
       st.lists(st.tuples(st.integers(0, 10**5), garbage_bytes), min_size=1, max_size=4), st.booleans())
@example("logs/rank-0.log", [(0, b"REFIT_ITER iter=" + b"9" * 5000 + b" time_ms=1.0\n")], True)
@example("logs/rank-0.log",
         [(0, b"REFIT_STATS bytes_remote=" + b"9" * 5000 + b" bytes_local=1 send_ops=1 recv_ops=1\n")], True)
@example("logs/rank-0.log", [(0, b"Mean refit time: 1e" + b"9" * 5000 + b" ms\n")], True)
def test_bytes_inserted_anywhere_in_a_refit_log_never_raise_nor_lie(
    name: str, inserts: list[tuple[int, bytes]], keep_final_newline: bool
) -> None:
    with edited_copy(REFIT_RUN, {name: _inserted(_read(REFIT_RUN, name), inserts, keep_final_newline)}) as run:
        m = parse_refit_run(run)
    _assert_honest_refit(m)


@SETTINGS
@given(st.integers(0, 4), _float_tokens().filter(lambda t: t and not any(c.isspace() for c in t)))
def test_a_refit_time_is_read_exactly_or_makes_the_run_invalid(iteration: int, token: str) -> None:
    data = _read(REFIT_RUN, "logs/rank-0.log")
    data, n = re.subn(rb"REFIT_ITER iter=%d time_ms=\S+" % iteration,
                      b"REFIT_ITER iter=%d time_ms=%s" % (iteration, token.encode()), data)
    assert n == 1
    with edited_copy(REFIT_RUN, {"logs/rank-0.log": data}) as run:
        m = parse_refit_run(run)
    _assert_honest_refit(m)
    value = _as_time(token)
    kept = dict(m.iterations)
    assert sorted(kept) in ([0, 1, 2, 3, 4], [i for i in range(5) if i != iteration])
    if value is not None and iteration_time_problem(value) is None:
        assert kept[iteration] == value and not m.time_errors
        assert "bad_iteration_time" not in m.problems
    else:
        assert iteration not in kept
        assert m.status == "bad_iteration_time" and not m.ok
        why = iteration_time_problem(math.nan if value is None else value)
        assert m.time_errors == (f"REFIT_ITER iter={iteration} time_ms={token} is {why}",)


# --- payload/train/log.py printers -> metrics parsers ----------------------------------------------------------------
LOSS_KEYS = ["lm loss", "load_balancing_loss", "seq_load_balancing_loss", "z_loss", "mtp_1 loss"]


@SETTINGS
@given(
    iteration=st.integers(1, 10**9),
    extra_iters=st.integers(0, 10**9),
    consumed=st.integers(0, 10**15),
    elapsed_s=st.floats(min_value=1e-4, max_value=1e6),
    throughput=st.none() | st.floats(min_value=0.0, max_value=1e6),
    lr=st.floats(min_value=0.0, max_value=1.0),
    batch=st.integers(1, 10**7),
    losses=st.dictionaries(st.sampled_from(LOSS_KEYS), st.floats(min_value=1e-30, max_value=1e30)),
    loss_scale=st.floats(min_value=0.0, max_value=1e9),
    grad_norm=st.none() | st.floats(min_value=0.0, max_value=1e9) | st.sampled_from([math.nan, math.inf]),
    skipped=st.integers(0, 999),
    nans=st.integers(0, 999),
    seconds=st.integers(0, 10**9),
)
def test_the_payload_iteration_line_is_read_back_as_printed(
    iteration: int, extra_iters: int, consumed: int, elapsed_s: float, throughput: float | None, lr: float,
    batch: int, losses: dict[str, float], loss_scale: float, grad_norm: float | None, skipped: int, nans: int,
    seconds: int,
) -> None:
    stamp = datetime(2026, 1, 1) + timedelta(seconds=seconds, microseconds=seconds % 999_983)
    line = payload_log.iteration_line(
        timestamp=stamp, iteration=iteration, train_iters=iteration + extra_iters, consumed_samples=consumed,
        elapsed_time_per_iteration=elapsed_s, throughput=throughput, learning_rate=lr, batch_size=batch,
        losses=losses, loss_scale=loss_scale, grad_norm=grad_norm, skipped_iterations=skipped, nan_iterations=nans)
    (record,) = parse_iteration_line(line)
    assert (record.iteration, record.train_iters, record.consumed_samples) == (iteration, iteration + extra_iters,
                                                                               consumed)
    assert record.elapsed_ms == float(f"{elapsed_s * 1000.0:.1f}")
    assert record.tflops_per_gpu == (None if throughput is None else float(f"{throughput:.1f}"))
    assert record.learning_rate == float(f"{lr:.6E}") and record.global_batch_size == batch
    assert record.lm_loss == (float(f"{losses['lm loss']:.6E}") if "lm loss" in losses else None)
    assert dict(record.losses) == {k: float(f"{v:.6E}") for k, v in losses.items() if k != "lm loss"}
    assert record.loss_scale == float(f"{loss_scale:.1f}")
    if grad_norm is None:
        assert record.grad_norm is None
    else:
        printed = float(f"{grad_norm:.3f}")
        assert record.grad_norm == printed or (math.isnan(printed) and math.isnan(record.grad_norm))
    assert (record.skipped_iterations, record.nan_iterations) == (skipped, nans)
    assert record.complete and record.timestamp == stamp.strftime("%Y-%m-%d %H:%M:%S.%f")


@SETTINGS
@given(st.integers(0, 10**6), st.integers(0, 10**9), st.lists(st.integers(0, 2**50), min_size=4, max_size=4))
def test_the_payload_memory_line_is_read_back_as_printed(rank: int, iteration: int, sizes: list[int]) -> None:
    line = payload_log.memory_line(rank=rank, iteration=iteration, allocated=sizes[0], max_allocated=sizes[1],
                                   reserved=sizes[2], max_reserved=sizes[3])
    (report,) = parse_memory_line(line)
    assert (report.rank, report.after_iterations, report.unit) == (rank, iteration, "MB")
    mib = payload_log.MEGABYTES
    expected = [float(f"{s / mib:.2f}") * mib for s in sizes]
    assert [report.allocated_bytes, report.max_allocated_bytes, report.reserved_bytes,
            report.max_reserved_bytes] == expected
