"""Issue 46: a long series' order statistics are selected from its spilled values (metrics/stats.py ``_Selected``)
instead of sorted in memory, and must be the numbers the sort gives: random series with ties, both zeros, negative
and extreme values, NaN / inf / None entries and a warm-up, past a small spill threshold, against the same series
under a threshold they never reach."""

from __future__ import annotations

import random

import pytest

from cloudai_mbridge.metrics import spill, stats


def _series(rng: random.Random, n: int) -> list[float | None]:
    pool = [0.0, -0.0, 1.0, 1.0, -1.0, 5e-324, -5e-324, 1.7976931348623157e308, -1.7976931348623157e308, 684.8,
            float("nan"), float("inf"), None]
    return [rng.choice(pool) if rng.random() < 0.3 else rng.choice([round(rng.gauss(680, 20), 1), rng.random()])
            for _ in range(n)]


@pytest.mark.parametrize("seed", range(6))
def test_selected_order_statistics_are_the_sorted_ones(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    monkeypatch.setattr(spill, "BLOCK", 32)
    monkeypatch.setattr(spill, "_READ", 8)
    for n in (0, 1, 2, 63, 64, 65, 200, 1000):
        values = _series(rng, n)
        monkeypatch.setattr(stats, "SPILL_AT", 10**9)
        sorted_way = stats.steady_state(values, 3)
        monkeypatch.setattr(stats, "SPILL_AT", 64)
        selected = stats.steady_state(values, 3)
        assert repr(selected) == repr(sorted_way), n  # repr: -0.0 and 0.0 told apart


def test_a_series_of_one_value_and_of_zeros_of_both_signs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "SPILL_AT", 4)
    for values in ([2.5] * 100, [-0.0, 0.0] * 50, [0.0, -0.0] * 50, [-0.0] * 99 + [3.0]):
        monkeypatch.setattr(stats, "SPILL_AT", 10**9)
        expected = repr(stats.steady_state(values, 0))
        monkeypatch.setattr(stats, "SPILL_AT", 4)
        assert repr(stats.steady_state(values, 0)) == expected
