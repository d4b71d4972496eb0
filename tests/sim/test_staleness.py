"""The simulated run's staleness bound (`rollout.max_staleness`) reaches the controller,
and every trajectory the world trains on stays within it."""

from __future__ import annotations

import pytest

from pearl.sim.config import SimConfig
from pearl.sim.policy_run import build, run_policy


@pytest.mark.parametrize("bound", [0, 2])
def test_config_bound_reaches_the_controller(bound: int) -> None:
    """`rollout.max_staleness` is the controller's bound, for every policy."""
    cfg = SimConfig().with_updates(**{"rollout.max_staleness": bound})
    for name in ("pearl", "rlboost+", "roll", "fixed:colocated"):
        _, controller, _, _ = build(cfg, name)
        assert controller.policy.max_staleness == bound
        assert controller.book.max_staleness == bound


def test_a_looser_bound_keeps_more_batches_in_flight() -> None:
    """Bound 0 runs one batch at a time; bound 2 lets rollout run ahead of the trainer,
    so over the same 20 minutes it finishes at least as many steps, all within bound."""
    done = {}
    for bound in (0, 2):
        cfg = SimConfig(check_every=1).with_updates(
            **{"rollout.max_staleness": bound, "trace.static_gpus": 4, "trace.duration_s": 1200.0}
        )
        run = run_policy(cfg, "roll")
        assert all(t.staleness() <= bound for t in run.controller.book)
        done[bound] = run.summary["trajectories"]
    assert done[2] >= done[0] > 0
