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


def test_split_headroom_measures_against_the_alone_on_a_gpu_floor() -> None:
    """The note says how far colocation and the best split are above the floor no pool
    beats, and how close the paper's +9.7% would need the split to come."""
    from pearl.sim.config import SimConfig
    from pearl.sim.experiments.facts import _split_headroom, unlimited_pool

    cfg = SimConfig()
    floor, _ = unlimited_pool(cfg.with_updates(**{"rollout.batch_size": 8}))
    p = PdPoint(8, colocated_s=1.3 * floor, disaggregated_s={(1, 1): 1.2 * floor})
    note = _split_headroom(cfg, "qwen3-8b", "qwen3-8b", p)
    assert f"takes {floor:.0f} s" in note
    assert "colocation is 30% above it, the best split 20%" in note
    assert f"within {1.3 / 1.097 - 1:.0%} of it" in note
    assert "no split" in _split_headroom(cfg, "qwen3-8b", "qwen3-8b", PdPoint(8, 100.0, {}))
