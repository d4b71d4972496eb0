"""The choice check of `pearl validate`: gap to the best and the noise of that gap."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.sim.validate import ChoiceCheck, _std_error


def test_best_chosen_has_no_gap_and_no_noise() -> None:
    c = ChoiceCheck(
        8, 64, "colocated:8", "colocated:8", 250.0, 250.0, (240.0, 260.0), (240.0, 260.0)
    )
    assert c.gap == 0.0 and c.noise == 0.0 and c.within_1pct and c.within_noise


def test_paired_steps_that_move_together_are_a_miss() -> None:
    """Steps spread +-10% but both configurations move together (the same sampled steps):
    the chosen one is slower on every step, so a 5% gap is a real miss."""
    c = ChoiceCheck(8, 64, "a", "b", 105.0, 100.0, (94.0, 116.0), (90.0, 110.0))
    assert c.gap == pytest.approx(0.05)
    assert c.noise == pytest.approx(2 * 1.0 / 100.0)  # differences 4 and 6: se 1
    assert not c.within_1pct and not c.within_noise


def test_gap_inside_noise() -> None:
    """The step-by-step differences disagree in sign: the gap is inside the noise."""
    c = ChoiceCheck(8, 64, "a", "b", 105.0, 100.0, (115.0, 95.0), (90.0, 110.0))
    assert not c.within_1pct and c.within_noise


def test_unpaired_when_step_counts_differ() -> None:
    c = ChoiceCheck(8, 64, "a", "b", 105.0, 100.0, (104.9, 105.1), (99.8, 100.0, 100.2))
    se = math.hypot(0.1, 0.2 / math.sqrt(3))
    assert c.noise == pytest.approx(2 * se / 100.0)


def test_one_step_has_no_noise_estimate() -> None:
    c = ChoiceCheck(8, 64, "a", "b", 105.0, 100.0, (105.0,), (100.0,))
    assert c.noise == 0.0 and not c.within_noise


@given(st.lists(st.floats(1.0, 1e4), min_size=2, max_size=8))
def test_std_error_matches_definition(xs: list[float]) -> None:
    n = len(xs)
    mean = sum(xs) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    assert _std_error(tuple(xs)) == pytest.approx(sd / math.sqrt(n), rel=1e-6, abs=1e-9)
