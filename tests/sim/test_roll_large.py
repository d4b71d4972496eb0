"""ROLL-Large (paper §6.1): fixed-resource ROLL on a fixed pool of the reserved GPUs plus
the trace's mean of preemptible ones: 14, 10 and 12 GPUs on seg1-seg3."""

from __future__ import annotations

import pytest

from pearl.sim.config import SimConfig
from pearl.sim.policy_run import build, fixed_pool_size, run_policy


@pytest.mark.parametrize(("trace", "pool"), [("seg1", 14), ("seg2", 10), ("seg3", 12)])
def test_pool_is_the_segments_mean(trace: str, pool: int) -> None:
    """The paper's ROLL-Large pools, from the bundled segments' time-weighted means."""
    assert fixed_pool_size(SimConfig().with_updates(**{"trace.trace": trace})) == pool


def test_pool_follows_the_cap_the_window_and_a_static_budget() -> None:
    """Capping preemptible GPUs lowers the mean; a static budget is its own pool."""
    cfg = SimConfig().with_updates(**{"cluster.max_preemptible_gpus": 2})
    assert fixed_pool_size(cfg) == 4 + 2
    assert fixed_pool_size(SimConfig().with_updates(**{"trace.static_gpus": 7})) == 7


def test_world_is_a_fixed_pool_without_offers_or_borrowing() -> None:
    """roll-large's world has its whole pool from time 0, no trace and no training GPUs,
    and it runs the trace's whole window."""
    cfg = SimConfig().with_updates(**{"trace.trace": "seg2"})
    world, controller, _, duration = build(cfg, "roll-large")
    assert len(world.dedicated) == 10 and duration == 7200.0
    assert controller.policy.name == "roll-large" and not controller.toggle.training_gpus
    run = run_policy(cfg.with_updates(**{"trace.duration_s": 900.0}), "roll-large")
    assert not any(run.summary["reconfigurations"].values())
    assert run.summary["trajectories"] > 0
