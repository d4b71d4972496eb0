"""Synthetic generators: seeded, bounded, and shaped as asked."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.traces import constant, periodic, poisson_churn


def test_constant() -> None:
    s = constant(7, 3600).stats()
    assert (s.min_gpus, s.mean_gpus, s.max_gpus, s.num_changes) == (7, 7.0, 7, 0)


def test_periodic_cycles_levels() -> None:
    tr = periodic([12, 4, 8], 600, 7200)
    for k in range(12):
        assert tr.count_at(k * 600 + 1) == [12, 4, 8][k % 3]
    assert tr.stats().mean_gpus == pytest.approx(8.0)
    with pytest.raises(ValueError):
        periodic([], 600, 7200)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(0, 6), st.integers(1, 6), st.integers(1, 3))
def test_churn_is_seeded_and_bounded(seed: int, lo: int, width: int, step: int) -> None:
    kw = dict(seed=seed, mean_interval_s=120.0, min_gpus=lo, max_gpus=lo + width, max_step=step)
    a = poisson_churn(7200, **kw)  # type: ignore[arg-type]
    assert a == poisson_churn(7200, **kw)  # type: ignore[arg-type]
    s = a.stats()
    assert lo <= s.min_gpus <= s.max_gpus <= lo + width
    for prev, cur in zip(a.levels(), a.levels()[1:], strict=False):
        assert 0 < abs(cur[1] - prev[1]) <= step and cur[0] > prev[0]


def test_churn_seeds_differ_and_rate_scales_changes() -> None:
    a = poisson_churn(7200, seed=1, mean_interval_s=60)
    b = poisson_churn(7200, seed=2, mean_interval_s=60)
    slow = poisson_churn(7200, seed=1, mean_interval_s=900)
    assert a != b
    assert slow.stats().num_changes < a.stats().num_changes
