"""The upper bound no policy can beat on a trace (issue 5, item 6).

Every available GPU-second — the rollout GPUs' (reserved plus the trace's preemptible ones)
and the training GPUs' idle time — is used at the *best static configuration's per-GPU
rate*, with free, instantaneous transitions. The per-GPU rate is measured by simulating
static configurations (no trace, no borrowing) at one or more budgets and taking the best
trajectories per GPU-second over all of them, so the bound is optimistic for every budget.

Training GPUs are idle only while no training step runs, and every `batch_size`
trajectories cost one step of `train_step_s` on all of them. With X trajectories in a run of
D seconds, R rollout GPU-seconds, N_t training GPUs and rate r:

    X <= r * (R + N_t * (D - X / B * t_step))   =>   X <= r (R + N_t D) / (1 + r N_t t_step / B)

and rollout can be at most `max_staleness + 1` batches ahead of the trainer, which trains at
most D / t_step batches:
the bound is the smaller of the two.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StaticRate:
    """A measured static configuration: `config` on `num_gpus` GPUs made `trajs_per_s`."""

    config: str
    num_gpus: int
    trajs_per_s: float

    @property
    def per_gpu(self) -> float:
        return self.trajs_per_s / self.num_gpus


@dataclass(frozen=True, slots=True)
class Bound:
    """Trajectories no policy can exceed in `duration_s`, and how that number was made."""

    trajectories: float
    duration_s: float
    rate_per_gpu_s: float
    best: StaticRate
    rollout_gpu_s: float
    num_training_gpus: int
    train_step_s: float
    limited_by: str  # "gpus" or "trainer"

    @property
    def trajs_per_hour(self) -> float:
        return self.trajectories * 3600.0 / self.duration_s

    def fraction(self, trajectories: float) -> float:
        """A policy's trajectories as a fraction of the bound."""
        return trajectories / self.trajectories if self.trajectories > 0 else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "trajectories": round(self.trajectories, 2),
            "trajs_per_hour": round(self.trajs_per_hour, 2),
            "rate_per_gpu_hour": round(self.rate_per_gpu_s * 3600.0, 4),
            "best_static": f"{self.best.config} on {self.best.num_gpus} GPUs",
            "rollout_gpu_hours": round(self.rollout_gpu_s / 3600.0, 3),
            "num_training_gpus": self.num_training_gpus,
            "train_step_s": round(self.train_step_s, 2),
            "limited_by": self.limited_by,
        }


def best_rate(rates: list[StaticRate]) -> StaticRate:
    """The static configuration with the highest per-GPU rate (ties: fewer GPUs, then name)."""
    if not rates:
        raise ValueError("no static rates measured")
    return max(rates, key=lambda r: (r.per_gpu, -r.num_gpus, r.config))


def compute_bound(
    rates: list[StaticRate],
    *,
    duration_s: float,
    rollout_gpu_s: float,
    num_training_gpus: int,
    train_step_s: float,
    batch_size: int,
    borrowing: bool = True,
    max_staleness: int = 1,
) -> Bound:
    """The bound for a run (see the module docstring); `borrowing=False` drops idle training
    time (static-budget runs, where no policy may borrow)."""
    best = best_rate(rates)
    r = best.per_gpu
    n_t = num_training_gpus if borrowing else 0
    by_gpus = r * (rollout_gpu_s + n_t * duration_s) / (1.0 + r * n_t * train_step_s / batch_size)
    by_trainer = batch_size * (duration_s / train_step_s + 1 + max_staleness)
    limited_by = "gpus" if by_gpus <= by_trainer else "trainer"
    return Bound(
        trajectories=min(by_gpus, by_trainer),
        duration_s=duration_s,
        rate_per_gpu_s=r,
        best=best,
        rollout_gpu_s=rollout_gpu_s,
        num_training_gpus=n_t,
        train_step_s=train_step_s,
        limited_by=limited_by,
    )
