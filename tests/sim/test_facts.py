"""The §3 facts' verdicts (pearl.sim.experiments.facts): what counts as reproducing the
paper's PD crossover."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.sim.experiments.facts import PdPoint, crossover_verdict


@pytest.mark.parametrize(
    ("gain", "paper", "ok", "off"),
    [
        (0.08, 0.097, True, ""),  # right sign, 1.7 points off
        (0.025, 0.097, False, "; sign right, 7.2 points off"),
        (-0.002, 0.097, False, ""),  # wrong sign
        (-0.022, -0.061, True, ""),
        (0.051, -0.061, False, ""),
        (-0.15, -0.061, False, "; sign right, 8.9 points off"),
    ],
)
def test_crossover_verdict_needs_sign_and_magnitude(gain, paper, ok, off) -> None:
    assert crossover_verdict(gain, paper) == (ok, off)


@given(st.floats(-0.5, 0.5), st.sampled_from([0.097, -0.061]))
def test_wrong_sign_never_passes(gain: float, paper: float) -> None:
    ok, _ = crossover_verdict(gain, paper)
    if (gain > 0) != (paper > 0):
        assert not ok
    if ok:
        assert abs(gain - paper) <= 0.05


@pytest.mark.parametrize(
    ("gain", "seeds", "ok", "off"),
    [
        (0.08, (0.07, 0.08, 0.09), True, ""),
        (0.003, (0.005, -0.015, -0.006), False, "; the seeds disagree on the sign"),
        (-0.03, (-0.02, -0.03, -0.04), True, ""),
    ],
)
def test_a_sign_the_seeds_disagree_on_is_no_sign(gain, seeds, ok, off) -> None:
    paper = 0.097 if gain > 0 else -0.061
    assert crossover_verdict(gain, paper, seed_gains=seeds) == (ok, off)


def test_pd_point_gain_and_best_ratio() -> None:
    p = PdPoint(96, colocated_s=367.0, disaggregated_s={(3, 5): 406.0, (4, 4): 349.0})
    assert p.best_ratio == (4, 4)
    assert p.disagg_gain == pytest.approx(367.0 / 349.0 - 1)
