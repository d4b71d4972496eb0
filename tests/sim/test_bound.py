"""The upper bound: its algebra, and that a policy's share of it is a fraction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pearl.sim.bound import StaticRate, best_rate, compute_bound


def test_bound_without_training_gpus_is_rate_times_gpu_seconds() -> None:
    """No borrowing: trajectories = best per-GPU rate x rollout GPU-seconds."""
    rates = [StaticRate("colocated", 4, 0.04), StaticRate("disagg:1:3", 4, 0.05)]
    b = compute_bound(
        rates,
        duration_s=1000.0,
        rollout_gpu_s=8000.0,
        num_training_gpus=16,
        train_step_s=100.0,
        batch_size=64,
        borrowing=False,
    )
    assert b.best.config == "disagg:1:3"
    assert b.trajectories == pytest.approx(0.05 / 4 * 8000.0)
    assert b.limited_by == "gpus" and b.num_training_gpus == 0


def test_idle_training_time_shrinks_as_training_takes_more() -> None:
    """Borrowing adds only the time training GPUs are idle, which the trained batches eat."""
    rates = [StaticRate("colocated", 1, 0.01)]
    b = compute_bound(
        rates,
        duration_s=1000.0,
        rollout_gpu_s=1000.0,
        num_training_gpus=2,
        train_step_s=50.0,
        batch_size=10,
        borrowing=True,
        max_staleness=100,
    )
    x = b.trajectories
    idle = 2 * (1000.0 - x / 10 * 50.0)
    assert x == pytest.approx(0.01 * (1000.0 + idle))


def test_trainer_limits_the_bound() -> None:
    """Rollout cannot run more than staleness + 1 batches ahead of the trainer."""
    rates = [StaticRate("colocated", 1, 10.0)]
    b = compute_bound(
        rates,
        duration_s=1000.0,
        rollout_gpu_s=1000.0,
        num_training_gpus=0,
        train_step_s=100.0,
        batch_size=8,
        borrowing=False,
        max_staleness=1,
    )
    assert b.limited_by == "pipeline" and b.trajectories == pytest.approx(8 * (10 + 2))


@given(
    st.lists(st.tuples(st.integers(1, 16), st.floats(0.001, 1.0)), min_size=1, max_size=8),
    st.floats(100, 10000),
    st.floats(0, 1),
)
def test_bound_grows_with_gpu_seconds(
    raw: list[tuple[int, float]], dur: float, extra: float
) -> None:
    """More available GPU-seconds never lower the bound; best_rate is the max per GPU."""
    rates = [StaticRate(f"c{i}", n, r) for i, (n, r) in enumerate(raw)]
    assert best_rate(rates).per_gpu == max(r.per_gpu for r in rates)
    kw = {"duration_s": dur, "num_training_gpus": 4, "train_step_s": 50.0, "batch_size": 16}
    lo = compute_bound(rates, rollout_gpu_s=dur, **kw)
    hi = compute_bound(rates, rollout_gpu_s=dur * (1 + extra), **kw)
    assert hi.trajectories >= lo.trajectories - 1e-9
    assert 0.0 <= lo.fraction(lo.trajectories) <= 1.0 + 1e-12


def test_pipeline_bound_replays_the_staleness_pipeline_over_the_runs_batches():
    """With unlimited GPUs a batch still takes its longest trajectory alone, and batch k
    waits for weights v_{k-s}: a looser bound lets more finish, none beyond the trainer's
    rate, and a window shorter than the first batch's floor finishes part of a batch."""
    from pearl.sim.bound import pipeline_trajectories, train_step_s
    from pearl.sim.config import SimConfig

    cfg = SimConfig()
    got = {
        s: pipeline_trajectories(cfg.with_updates(**{"rollout.max_staleness": s}), 3600.0)
        for s in (0, 1, 2)
    }
    assert 0 < got[0] < got[1] <= got[2]
    trainer_only = 64 * (3600.0 / train_step_s(cfg) + 2)
    assert got[1] < trainer_only
    short = pipeline_trajectories(cfg, 60.0)
    assert 0 < short < 64
