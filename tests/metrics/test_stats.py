from __future__ import annotations

import math
import statistics

import pytest

from cloudai_mbridge.metrics import Stats, loss_equivalence, percentile, steady_state


def test_percentile_interpolates_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 10) == pytest.approx(1.3)
    assert percentile(values, 50) == pytest.approx(2.5)
    assert percentile(values, 90) == pytest.approx(3.7)
    assert percentile([7.0], 90) == 7.0


@pytest.mark.parametrize("q", [-1.0, 100.5])
def test_percentile_rejects_q_outside_0_100(q: float) -> None:
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], q)


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_steady_state_drops_warmup_and_flags_stalls() -> None:
    stats = steady_state([600, 120, 110, 100, 100, 101, 99, 400], warmup=2)
    # kept: 110 100 100 101 99 400 -> sorted 99 100 100 101 110 400
    assert stats.n == 6
    assert stats.n_warmup == 2
    assert stats.mean == pytest.approx(910 / 6)
    assert stats.median == pytest.approx(100.5)
    assert stats.p10 == pytest.approx(99.5)
    assert stats.p90 == pytest.approx(255.0)
    assert (stats.min, stats.max) == (99, 400)
    assert stats.stdev == pytest.approx(statistics.stdev([110, 100, 100, 101, 99, 400]))
    assert stats.stall_threshold == pytest.approx(301.5)
    assert stats.stall_positions == (5,)
    assert stats.n_stalls == 1
    assert stats.spread == pytest.approx((255.0 - 99.5) / 100.5)


def test_steady_state_keeps_non_finite_values_out_of_every_statistic() -> None:
    stats = steady_state([math.nan, 1.0, 2.0, None, math.inf, 3.0], warmup=1)
    assert (stats.n, stats.n_invalid, stats.n_warmup) == (3, 2, 1)
    assert stats.mean == pytest.approx(2.0)
    assert stats.max == 3.0


def test_steady_state_of_too_short_a_series_is_empty_not_wrong() -> None:
    stats = steady_state([5.0, 6.0], warmup=4)
    assert stats == Stats(n=0, n_warmup=2)
    assert stats.mean is None
    assert stats.spread is None


def test_steady_state_rejects_negative_warmup() -> None:
    with pytest.raises(ValueError, match="warmup"):
        steady_state([1.0], warmup=-1)


def test_loss_equivalence_on_the_seed_iteration_one_pair() -> None:
    # PR 1116: deepep 11.897349 vs alltoall 11.897517, "rel diff 1.4e-5".
    rel, n = loss_equivalence({1: 11.897349}, {1: 11.897517})
    assert n == 1
    assert rel == pytest.approx(0.000168 / 11.897517)
    assert 1.4e-5 < rel < 1.42e-5


def test_loss_equivalence_aligns_mappings_on_common_iterations_and_takes_first_k() -> None:
    a = {1: 10.0, 2: 9.0, 3: 8.0, 5: 7.0}
    b = {2: 9.009, 3: 8.0, 4: 1.0, 5: 7.7}
    assert loss_equivalence(a, b) == pytest.approx((0.7 / 7.7, 3))
    assert loss_equivalence(a, b, first_k=2) == pytest.approx((0.009 / 9.009, 2))


def test_loss_equivalence_on_sequences_compares_positions() -> None:
    assert loss_equivalence([2.0, 4.0, 9.0], [2.0, 5.0]) == pytest.approx((0.2, 2))


def test_loss_equivalence_never_passes_on_nan_or_nothing() -> None:
    rel, n = loss_equivalence([1.0, math.nan], [1.0, 1.0])
    assert (rel, n) == (math.inf, 2)
    rel, n = loss_equivalence({1: 1.0}, {2: 1.0})
    assert math.isnan(rel) and n == 0


def test_loss_equivalence_refuses_mixed_inputs() -> None:
    with pytest.raises(TypeError):
        loss_equivalence({1: 1.0}, [1.0])
    with pytest.raises(ValueError, match="first_k"):
        loss_equivalence([1.0], [1.0], first_k=0)
