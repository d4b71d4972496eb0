"""The critical path as the longest of B sampled trajectories: order statistics of the
empirical distribution, and the partial sort that keeps thousands of candidates cheap."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pearl.control.longest import TrajectoryPaths, expected_longest


def _weights(n: int, batch: int) -> np.ndarray:
    return TrajectoryPaths.from_sample([[1, 0, 0, 0, 0]] * n, batch).weights


def test_one_draw_is_the_mean_and_many_the_max():
    scores = np.array([[1.0, 2.0, 3.0, 10.0]])
    assert expected_longest(scores, _weights(4, 1))[0][0] == pytest.approx(4.0)
    assert expected_longest(scores, _weights(4, 10_000))[0][0] == pytest.approx(10.0)


def test_two_draws_hand_computed():
    """Of two draws from {1, 2, 3}: max 1 with p 1/9, 2 with 3/9, 3 with 5/9."""
    got, parts = expected_longest(
        np.array([[3.0, 1.0, 2.0]]), _weights(3, 2), {"x": np.array([[30.0, 10.0, 20.0]])}
    )
    assert got[0] == pytest.approx((1 + 2 * 3 + 3 * 5) / 9)
    assert parts["x"][0] == pytest.approx(10 * got[0])  # the part rides with its trajectory


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e4), min_size=2, max_size=300),
    st.integers(1, 256),
)
def test_expected_longest_is_between_mean_and_max_and_grows_with_the_batch(xs, batch):
    scores = np.array([xs])
    n = len(xs)
    got = expected_longest(scores, _weights(n, batch))[0][0]
    more = expected_longest(scores, _weights(n, batch + 1))[0][0]
    # the partial sort is at most 0.1% of the max off; 1e-12 s absolute: a subnormal score
    # (hypothesis tried 5e-324) underflows to 0 when weighted
    tol = 1e-3 * max(xs) + 1e-12
    assert np.mean(xs) - tol <= got <= max(xs) + 1e-9
    assert more >= got - tol


def test_partial_sort_matches_the_full_sort_and_monte_carlo():
    rng = np.random.default_rng(0)
    scores = rng.lognormal(0, 0.5, size=(3, 512))
    for batch in (8, 64, 128):
        w = _weights(512, batch)
        got = expected_longest(scores, w)[0]
        full = (np.sort(scores, axis=1) * w).sum(axis=1)
        assert got == pytest.approx(full, rel=1e-3)
        draws = scores[:, rng.integers(0, 512, size=(4000, batch))].max(axis=2).mean(axis=1)
        assert got == pytest.approx(draws, rel=0.02)


def test_survival_and_single_tail():
    paths = TrajectoryPaths.from_sample([[2, 0, 0, 0, 0], [4, 0, 0, 0, 0]], 8)
    assert paths.max_turns == 4
    assert paths.survival(5).tolist() == [1.0, 1.0, 0.5, 0.5, 0.0]
    one = TrajectoryPaths.single(30.5, 1.0, 2.0, 3.0, 4.0)
    assert one.weights.tolist() == [1.0] and one.max_turns == 31
    assert TrajectoryPaths.from_sample([], 8) is None
