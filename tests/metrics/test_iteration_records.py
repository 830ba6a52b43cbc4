"""IterationRecords (metrics/training.py): a parsed run's iterations held as array columns give back, record by record,
exactly the records the parser made: every field, None apart from a logged NaN, repr included."""

from __future__ import annotations

import math

import pytest

from cloudai_mbridge.metrics.training import IterationRecord, IterationRecords, parse_iteration_line

LINE = ("[2026-11-24 14:52:07] iteration       12/     100 | consumed samples:         3072 | "
        "elapsed time per iteration (ms): 681.5 | throughput per GPU (TFLOP/s/GPU): 8.9 | "
        "learning rate: 1.538462E-05 | global batch size:   256 | lm loss: 1.050000E+01 | "
        "load_balancing_loss: 1.223444E+00 | loss scale: 1.0 | grad norm: nan | params norm: 12.5 | "
        "number of skipped iterations:   0 | number of nan iterations:   0 |")


def _records() -> list[IterationRecord]:
    parsed = parse_iteration_line(LINE, "logs/rank-0.log")
    cut = parse_iteration_line(LINE[:160], "logs/rank-0.log")  # cut short: most fields absent, not complete
    return [
        *parsed, *cut,
        IterationRecord(13, 100),  # nothing but the head
        IterationRecord(14, 100, lm_loss=float("nan"), elapsed_ms=float("inf"), extras={"note": "a | b"}),
        IterationRecord(-1, -1, source="job logs", damaged=(("iteration line", "it\ufffd"),)),
        IterationRecord(15, 100, consumed_samples=1 << 70, timestamp="caf\u00e9 \udcff"),  # beyond int64; a surrogate
        IterationRecord(16, 100, losses={}, elapsed_ms=5),  # an empty dict and an int where a float is meant
        IterationRecord(17, 100, timestamp="caf\u00e9 \udcff", extras={"k": ""}, complete=False),
    ]


def test_every_record_comes_back_equal_with_the_same_repr() -> None:
    records = _records()
    store = IterationRecords(records)
    assert len(store) == len(records)
    for got, want in zip(store, records, strict=True):
        assert repr(got) == repr(want)
        assert type(got.losses) is type(want.losses) and type(got.extras) is type(want.extras)
    assert store[-1] == records[-1] and repr(store[0]) == repr(records[0])
    assert list(store[2:4]) == records[2:4]
    with pytest.raises(IndexError):
        store[len(records)]
    finite = [r for r in records if r.grad_norm is None and r.lm_loss is None]  # NaN is unequal to itself
    assert IterationRecords(finite) == IterationRecords(finite) == tuple(finite)
    assert IterationRecords(finite) != IterationRecords(finite[:-1])


def test_a_logged_nan_stays_nan_and_an_absent_value_stays_none() -> None:
    store = IterationRecords(_records())
    first, cut = store[0], store[1]
    assert math.isnan(first.grad_norm) and first.lm_loss == 10.5 and first.losses == {"load_balancing_loss": 1.223444}
    assert first.extras == {"params norm": "12.5"} and first.timestamp == "2026-11-24 14:52:07"
    assert cut.grad_norm is None and cut.lm_loss is None and not cut.complete
    grad_norms = store.column("grad_norm")
    assert math.isnan(grad_norms[0]) and grad_norms[1:3] == [None, None]
    assert store.column("consumed_samples") == [r.consumed_samples for r in _records()]
    assert store.column("complete") == [r.complete for r in _records()]


def test_a_long_run_is_held_in_columns() -> None:
    """10^4 records of the fixture's line in under 250 bytes each (as objects: about 900)."""
    import tracemalloc

    record = parse_iteration_line(LINE, "logs/rank-0.log")[0]
    tracemalloc.start()
    try:
        store = IterationRecords(
            IterationRecord(**{**{f: getattr(record, f) for f in record.__dataclass_fields__}, "iteration": i})
            for i in range(10_000)
        )
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert store[9_999].iteration == 9_999 and store[9_999].losses == record.losses
    assert held / 10_000 < 250, f"{held / 10_000:.0f} B per record"
