"""The compact forms a long run's numbers are held in (issue 46: a 10^6-iteration log within bounded memory), each
checked against the plain form it stands for: training._Column against ``array``, IterationNumbers against a tuple,
stats.steady_state's numpy sort against Python's, frames.csv_chunks_of against the whole text."""

from __future__ import annotations

import dataclasses
import math
import random
import struct
from array import array

import pytest

from cloudai_mbridge.metrics import frames, stats
from cloudai_mbridge.metrics.training import (
    IterationNumbers,
    IterationRecord,
    IterationRecords,
    _Column,
    parse_iteration_line,
)

NAN2 = struct.unpack("d", struct.pack("Q", 0x7FF8000000000001))[0]  # a NaN of another payload


def _bits(values) -> list:
    return [struct.pack("d", v) if isinstance(v, float) else v for v in values]


def test_a_column_gives_back_what_an_array_would_value_for_value() -> None:
    rng = random.Random(46)
    for _ in range(2000):
        typecode = rng.choice("qdI")
        n = rng.randint(0, 9)
        if typecode == "d":
            pool = [0.0, -0.0, 1.5, math.nan, NAN2, math.inf, 2.0]
            first = rng.choice(pool)
            values = [first if rng.random() < 0.8 else rng.choice(pool) for _ in range(n)]
        else:
            start, step = rng.randint(0, 50), rng.randint(-3 if typecode == "q" else 0, 3)
            values = [abs(start + k * step) if rng.random() < 0.85 else rng.randint(0, 60) for k in range(n)]
        column, plain = _Column(typecode, values), array(typecode, values)
        assert len(column) == len(plain) and _bits(column) == _bits(plain), (typecode, values)
        for i in range(-n, n):
            assert _bits([column[i]]) == _bits([plain[i]])
        for part in (slice(None), slice(1, None), slice(2, 5), slice(None, None, 2), slice(5, 1, -1)):
            assert _bits(column[part]) == _bits(plain[part]), (values, part)
        with pytest.raises(IndexError):
            column[n]
    held = _Column("q", [1, 2])
    with pytest.raises(OverflowError):
        held.append(1 << 63)
    with pytest.raises(TypeError):
        _Column("q", [1, 2]).append(3.0)


def test_records_that_change_pattern_midway_come_back_exactly() -> None:
    """Every column first a progression, then broken at a different record: each record equal to the one stored,
    repr included (-0.0 and a NaN's payload too)."""
    base = parse_iteration_line(
        "[2026-11-24 14:52:07] iteration 1/9000 | consumed samples: 256 | elapsed time per iteration (ms): 681.5 | "
        "throughput per GPU (TFLOP/s/GPU): 8.9 | learning rate: 1.0E-05 | global batch size: 256 | "
        "lm loss: 1.050000E+01 | loss scale: 1.0 | grad norm: 0.0 | number of skipped iterations: 0 | "
        "number of nan iterations: 0 |", "logs/rank-0.log")[0]
    records = []
    for i in range(1, 400):
        records.append(dataclasses.replace(
            base, iteration=i if i < 100 else 100 + (i - 100) * 10, consumed_samples=256 * i if i < 200 else 7,
            global_batch_size=256 if i < 300 else 512, grad_norm=0.0 if i < 150 else -0.0,
            lm_loss=10.5 if i < 250 else (NAN2 if i % 2 else math.nan),
            timestamp=None if i == 333 else "2026-11-24 14:52:07" + ("" if i < 350 else ".5"),
            losses={"z_loss": 1.0} if i == 120 else base.losses, complete=i != 390))
    store = IterationRecords(records)
    assert [repr(r) for r in store] == [repr(r) for r in records]
    assert [repr(store[i]) for i in range(len(store))] == [repr(r) for r in records]  # by index: the same
    assert _bits(store.values("lm_loss")) == _bits(r.lm_loss for r in records)
    assert _bits(store.values("grad_norm")) == _bits(r.grad_norm for r in records)
    assert store.iteration_numbers() == tuple(r.iteration for r in records)


def test_a_steady_run_costs_few_bytes_an_iteration() -> None:
    """3,000 records of one line, the iteration counting up: only the time, the loss and the timestamp vary here, so
    only they cost memory (under 60 B a record; 150 B as plain array columns, about 900 as objects)."""
    import tracemalloc

    line = parse_iteration_line(
        "[2026-11-24 14:52:07] iteration 1/10000 | consumed samples: 256 | elapsed time per iteration (ms): 681.5 | "
        "learning rate: 1.0E-05 | global batch size: 256 | lm loss: 1.050000E+01 | load_balancing_loss: 1.2 | "
        "loss scale: 1.0 | grad norm: 3.2 | number of skipped iterations: 0 | number of nan iterations: 0 |")[0]
    tracemalloc.start()
    try:
        store = IterationRecords(dataclasses.replace(line, iteration=i, consumed_samples=256 * i,
                                                     elapsed_ms=680.0 + i % 7, lm_loss=10.5 - i / 1e4)
                                 for i in range(1, 3_001))
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store[2_999].iteration == 3_000 and store[2_999].consumed_samples == 768_000
    assert held / 3_000 < 60, f"{held / 3_000:.0f} B per record"


def test_iteration_numbers_are_the_tuple_they_stand_for() -> None:
    numbers = IterationNumbers(range(5, 100, 5))
    plain = tuple(range(5, 100, 5))
    assert numbers == plain and plain == numbers and list(numbers) == list(plain) and numbers != plain[:-1]
    assert hash(numbers) == hash(plain) and repr(numbers) == repr(plain) and numbers[2:] == plain[2:]
    assert all((i in numbers) == (i in plain) for i in range(-5, 110))
    unsorted = IterationNumbers([1, 5, 3, 5])
    assert all((i in unsorted) == (i in (1, 5, 3, 5)) for i in range(7)) and unsorted[-1] == 5
    broken = IterationNumbers([2, 4, 6, 7, 9])  # a progression, then not
    assert all((i in broken) == (i in (2, 4, 6, 7, 9)) for i in range(12))


@pytest.mark.parametrize("values", [
    [3.0, -0.0, 0.0, 1.0, 0.0, -0.0, math.nan, None, 2, math.inf, 1e308, 1e308, -1e308],
    [680.0 + (i * 7919) % 97 / 10 for i in range(500)] + [5000.0, None, math.nan],
    [1, 2, 3, 4, 5],
])
def test_the_large_series_sort_gives_the_same_statistics(values, monkeypatch: pytest.MonkeyPatch) -> None:
    small = stats.steady_state(values, warmup=2)
    monkeypatch.setattr(stats, "SORT_IN_PYTHON", 0)  # numpy's stable sort, as above 65,536 values
    large = stats.steady_state(values, warmup=2)
    assert repr(large) == repr(small)
    assert [type(getattr(large, f)) for f in ("median", "p10", "min")] == [float, float, float]


def test_the_csv_in_pieces_is_the_csv(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"iteration": i, "elapsed_ms": 680.5 + i, "steady": i > 2, "note": "a,b\"c" if i == 3 else None}
            for i in range(50)]
    whole = frames.csv_text_of(lambda: iter(rows))
    monkeypatch.setattr(frames, "CHUNK", 64)
    pieces = list(frames.csv_chunks_of(lambda: iter(rows)))
    assert len(pieces) > 10 and "".join(pieces) == whole == frames.csv_text(rows)


@pytest.mark.parametrize("records, peak", [((), None), ((), 6.0e10), (None, 6.0e10)])
def test_the_golden_file_in_pieces_is_the_golden_file(records, peak) -> None:
    import json
    from types import SimpleNamespace

    from cloudai_mbridge.metrics.golden import golden_values, golden_values_chunks

    if records is None:
        records = [IterationRecord(i, 9, elapsed_ms=680.5, lm_loss=10.5 - i if i != 3 else math.nan) for i in (1, 2, 3)]
        records.append(IterationRecord(4, 9))  # no value: no entry
    m = SimpleNamespace(iterations=records, memory=(), peak_allocated_bytes=peak)
    assert "".join(golden_values_chunks(m)) == json.dumps(golden_values(m), indent=1) + "\n"
