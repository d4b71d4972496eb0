"""The upper bound no policy can beat on a trace.

Every available GPU-second — the rollout GPUs' (reserved plus the trace's preemptible ones)
and the training GPUs' idle time — is used at the *best static configuration's per-GPU
rate*, with free, instantaneous transitions. The per-GPU rate is measured by simulating
static configurations (no trace, no borrowing) at one or more budgets, each with sticky and
with load-balanced routing, and taking the best trajectories per GPU-second over all of
them, so the bound is optimistic for every budget.

Training GPUs are idle only while no training step runs, and every `batch_size`
trajectories cost one step of `train_step_s` on all of them. With X trajectories in a run of
D seconds, R rollout GPU-seconds, N_t training GPUs and rate r:

    X <= r * (R + N_t * (D - X / B * t_step))   =>   X <= r (R + N_t D) / (1 + r N_t t_step / B)

and the pipeline itself limits it (`pipeline_trajectories`): with staleness bound s, batch
k may start only once weights v_{k-s} exist, i.e. when training step k-s-1 ends; it cannot
finish before its longest trajectory would alone on its own GPU (its latency floor,
`pearl.sim.calibration.critical_path`, the same trajectories the world draws); training
step k starts when batch k is done and step k-1 has ended. Replaying that recursion over
the run's own batches counts the trajectories that could finish in D seconds with
unlimited GPUs. The bound is the smaller of the two.

`bound_for(cfg, actions, duration_s)` measures the static rates by simulation (`bound_plan`
lists the runs; results are cached per setting in `RATE_CACHE`) and computes the bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pearl.sim import run_store
from pearl.sim.playback import TraceAction, live_gpu_seconds
from pearl.sim.policy_run import run_policy

if TYPE_CHECKING:
    from pearl.sim.config import SimConfig


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
    limited_by: str  # "gpus" or "pipeline" (trainer and the batches' latency floors)

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
    by_pipeline: float | None = None,
) -> Bound:
    """The bound for a run (see the module docstring); `borrowing=False` drops idle training
    time (static-budget runs, where no policy may borrow). `by_pipeline`: trajectories the
    pipeline allows (`pipeline_trajectories`); None: the trainer's rate alone, rollout
    infinitely fast (`batch_size * (D / t_step + 1 + max_staleness)`)."""
    best = best_rate(rates)
    r = best.per_gpu
    n_t = num_training_gpus if borrowing else 0
    by_gpus = r * (rollout_gpu_s + n_t * duration_s) / (1.0 + r * n_t * train_step_s / batch_size)
    if by_pipeline is None:
        by_pipeline = batch_size * (duration_s / train_step_s + 1 + max_staleness)
    limited_by = "gpus" if by_gpus <= by_pipeline else "pipeline"
    return Bound(
        trajectories=min(by_gpus, by_pipeline),
        duration_s=duration_s,
        rate_per_gpu_s=r,
        best=best,
        rollout_gpu_s=rollout_gpu_s,
        num_training_gpus=n_t,
        train_step_s=train_step_s,
        limited_by=limited_by,
    )


# -- measuring the static rates (simulation) -----------------------------------------------
RATE_CACHE: dict[str, StaticRate] = {}
BOUND_RUN_S = 2400.0  # simulated seconds of each static run behind the bound


BALANCED = "+balanced"  # a static run routed as pearl's router does (balanced every turn)


def _static_setting(
    cfg: SimConfig, num_gpus: int, policy: str, duration_s: float
) -> tuple[SimConfig, str]:
    """The config and registry name of a static run. A name ending in `BALANCED` runs the
    static policy with load-balanced routing (`sticky_max_imbalance` 0) instead of its own
    always-sticky one (ROLL's), so the bound covers the better of the two routers."""
    scfg = cfg.with_updates(**{"trace.static_gpus": num_gpus, "trace.duration_s": duration_s})
    if policy.endswith(BALANCED):
        scfg = scfg.with_updates(**{"controller.sticky_max_imbalance": 0})
    return scfg, policy.removesuffix(BALANCED)


def rate_key(cfg: SimConfig, num_gpus: int, policy: str, duration_s: float) -> str:
    from pearl.sim.config import config_identity

    scfg, _ = _static_setting(cfg, num_gpus, policy, duration_s)
    return config_identity(scfg.model_copy(update={"policies": ()})) + policy


def static_rate(cfg: SimConfig, num_gpus: int, policy: str, duration_s: float) -> StaticRate:
    """Steady-state trajectories per second of a static configuration (cached per setting).

    Measured from the end of the first rollout step to the end of the run, so the start-up
    of the pipeline does not dilute it. `policy` is a static policy's name, optionally with
    `BALANCED` appended (see `_static_setting`).
    """
    scfg, name = _static_setting(cfg, num_gpus, policy, duration_s)
    key = rate_key(cfg, num_gpus, policy, duration_s)
    if known_rate(key) is None:
        run = run_policy(scfg, name, keep_history=False)
        # Trajectories finished after the first rollout step ended, per second of the rest
        # of the run: the pipeline's start-up (the first makespan) does not dilute it.
        first = run.step_end_times_s[0] if run.step_end_times_s else 0.0
        rate = run.summary["trajectories"] / duration_s
        if duration_s - first >= 0.25 * duration_s:
            after = sum(1 for t in run.traj_done_times_s if t > first)
            rate = max(rate, after / (duration_s - first))
        label = name.removeprefix("fixed:") + (", balanced" if name != policy else "")
        remember_rate(key, StaticRate(label, num_gpus, rate))
    return RATE_CACHE[key]


def known_rate(key: str) -> StaticRate | None:
    """The static rate of `key` (`rate_key`) measured before: in this process, or kept by
    the active run store (`pearl.sim.run_store`), which then fills `RATE_CACHE`."""
    if key not in RATE_CACHE:
        store = run_store.active()
        kept = None if store is None else store.get_part("rate", key)
        if kept is None:
            return None
        RATE_CACHE[key] = kept
    return RATE_CACHE[key]


def remember_rate(key: str, rate: StaticRate) -> None:
    """Keep a measured static rate in `RATE_CACHE` and in the active run store, if any."""
    RATE_CACHE[key] = rate
    store = run_store.active()
    if store is not None:
        store.put_part("rate", key, rate)


def bound_plan(
    cfg: SimConfig, actions: list[TraceAction], duration_s: float
) -> list[tuple[int, str, float]]:
    """The static runs the bound needs: (GPUs, policy, seconds): colocation and the 1:1
    split at the reserved budget, colocation and the 1:3 split at the trace's mean budget,
    each with the static policies' own sticky routing and with balanced routing."""
    dedicated = cfg.trace.static_gpus or cfg.cluster.num_dedicated_gpus
    rollout_gpu_s = dedicated * duration_s + live_gpu_seconds(actions, duration_s)
    mean_gpus = max(1, round(rollout_gpu_s / duration_s))
    bound_s = min(duration_s, BOUND_RUN_S)
    plan = []
    for n in sorted({dedicated, mean_gpus}):
        names = ["fixed:colocated"]
        p = max(1, n // 2) if n == dedicated else max(1, n // 4)
        if n >= 2:
            names.append(f"fixed:disagg:{p}:{n - p}")
        plan += [(n, name + routing, bound_s) for name in names for routing in ("", BALANCED)]
    return plan


def bound_for(cfg: SimConfig, actions: list[TraceAction], duration_s: float) -> Bound:
    """The upper bound of a setting (see pearl.sim.bound and `bound_plan`)."""
    static = cfg.trace.static_gpus is not None
    dedicated = cfg.trace.static_gpus or cfg.cluster.num_dedicated_gpus
    rollout_gpu_s = dedicated * duration_s + live_gpu_seconds(actions, duration_s)
    rates = [static_rate(cfg, n, name, d) for n, name, d in bound_plan(cfg, actions, duration_s)]
    return compute_bound(
        rates,
        duration_s=duration_s,
        rollout_gpu_s=rollout_gpu_s,
        num_training_gpus=cfg.cluster.num_training_gpus,
        train_step_s=train_step_s(cfg),
        batch_size=cfg.rollout.batch_size,
        borrowing=(not static) if cfg.trace.borrowing is None else cfg.trace.borrowing,
        max_staleness=cfg.rollout.max_staleness,
        by_pipeline=pipeline_trajectories(cfg, duration_s),
    )


PIPELINE_CACHE: dict[str, float] = {}


def pipeline_trajectories(cfg: SimConfig, duration_s: float) -> float:
    """Trajectories that could finish in `duration_s` with unlimited rollout GPUs: the
    staleness pipeline replayed over the run's own batches (module docstring). Each
    trajectory takes at least its time alone on its own worker (`trajectory_alone_s`:
    container start, env steps, prefill and decode with nothing else on the GPU)."""
    from pearl.sim.calibration import trajectory_alone_s
    from pearl.sim.config import dump_config
    from pearl.sim.trainer import step_time_s
    from pearl.sim.trajectories import step_sampler
    from pearl.specs import get_gpu, get_model
    from pearl.specs.workload import WorkloadSpec

    key = dump_config(cfg.model_copy(update={"policies": ()})) + f"{duration_s}"
    if key in PIPELINE_CACHE:
        return PIPELINE_CACHE[key]
    m, g = get_model(cfg.cluster.model), get_gpu(cfg.cluster.gpu)
    hw = cfg.worker_hardware()
    spec = WorkloadSpec.model_validate(
        {**cfg.rollout.workload, "context_cap_tokens": cfg.rollout.max_context_tokens}
    )
    s, b = cfg.rollout.max_staleness, cfg.rollout.batch_size
    ends: list[float] = []  # E_k: end of training step k
    done = 0.0
    k = 0
    while True:
        start = ends[k - s - 1] if k > s else 0.0
        if start >= duration_s:
            break
        batch = step_sampler(spec, cfg.seed, k).batch(b)
        alone = [sum(trajectory_alone_s(t, hw)) for t in batch]
        done += sum(1 for a in alone if start + a <= duration_s)
        ready = start + max(alone)
        tokens = sum(t.total_tokens for t in batch)
        tau = step_time_s(
            cfg.trainer,
            num_tokens=tokens,
            active_params=float(m.active_params),
            num_gpus=cfg.cluster.num_training_gpus,
            peak_flops_per_s=g.flops_per_s,
        )
        ends.append(max(ready, ends[-1] if ends else 0.0) + tau)
        k += 1
    PIPELINE_CACHE[key] = done
    return done


def train_step_s(cfg: SimConfig) -> float:
    """Training step time of a mean batch of the configured workload."""
    from pearl.sim.trainer import step_time_s
    from pearl.specs import get_gpu, get_model

    m, g = get_model(cfg.cluster.model), get_gpu(cfg.cluster.gpu)
    tokens = mean_trajectory_tokens(cfg) * cfg.rollout.batch_size
    return step_time_s(
        cfg.trainer,
        num_tokens=round(tokens),
        active_params=float(m.active_params),
        num_gpus=cfg.cluster.num_training_gpus,
        peak_flops_per_s=g.flops_per_s,
    )


def mean_trajectory_tokens(cfg: SimConfig, num_samples: int = 512) -> float:
    """Mean final context (training tokens) of the configured workload's trajectories."""
    from pearl.sim.trajectories import TrajectorySampler
    from pearl.specs.workload import WorkloadSpec

    spec = WorkloadSpec.model_validate(
        {**cfg.rollout.workload, "context_cap_tokens": cfg.rollout.max_context_tokens}
    )
    trajs = TrajectorySampler(spec, seed=cfg.seed).batch(num_samples)
    return sum(t.total_tokens for t in trajs) / num_samples
