"""The batch a makespan prediction is about, as plain numbers (`pearl.control.makespan`).

From a `WorkloadProfile` and a batch size: the per-turn means, the trajectories whose
longest is the critical path (`paths`: the profile's sample of finished trajectories, B
draws of which the engine takes the longest; without a sample, the observed tail alone,
scaled to the batch: it was observed in batches of the profile's size B_obs, and for a
batch of B its excess over the mean trajectory is scaled by `sqrt(ln B / ln B_obs)`, as
the longest of B draws grows like `sqrt(2 ln B)`), the trajectories still running in each
round, a worker's KV seats, and the fitted costs scaled to the worker size. Computed once
per prediction call; every candidate split is scored on the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pearl.control.longest import TrajectoryPaths
from pearl.control.profile import WorkloadProfile


@dataclass(frozen=True, slots=True)
class BatchWorkload:
    """Scalars shared by every candidate of one prediction call."""

    batch: float
    turns: float
    n_new: float
    n_cached: float
    ctx: float
    working_set: float
    t_kv: float
    serve_cv2: float  # squared coefficient of variation of a turn's prefill service
    n_d: float
    ctx_dec: float
    k_seq: float
    wait: float
    h_max: float
    seats: float  # `_seats`: sequences a worker's KV holds at once
    weights_fit: bool
    weight_gb: float
    mem_gb: float
    ctx_tail: float
    step_a: float
    step_b: float
    step_c: float
    prefill_b: float
    prefill_c: float
    hit_coeff_colocated: float
    decode_saturation_seqs: float
    hit_coeff_disaggregated: float
    hit_depth: float
    # the trajectories whose longest is the critical path (`pearl.control.longest`): the
    # profile's sample, or without one the observed tail alone
    paths: TrajectoryPaths
    alive: np.ndarray  # trajectories still running in rounds 1..paths.max_turns
    env_turn_s: float  # a mean trajectory's time off the model per turn


def batch_workload(
    profile: WorkloadProfile, batch: int, num_gpus_per_worker: int = 1
) -> BatchWorkload:
    """The scalars of one prediction call for a batch of `batch` on workers of
    `num_gpus_per_worker` GPUs (the decision engine scores every split on them)."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    if num_gpus_per_worker < 1:
        raise ValueError(f"num_gpus_per_worker must be >= 1, got {num_gpus_per_worker}")
    hw = profile.hardware
    perf = profile.perf.scaled(num_gpus_per_worker)
    ctx = profile.context_tokens_mean
    n_d = profile.decode_tokens_per_turn
    turns = profile.turns_per_traj_mean
    # The tail was observed in batches of `profile.batch_size`; the longest of `batch` draws
    # sits further out for larger batches (the max of B draws grows like sqrt(2 ln B)).
    k = _max_scale(batch) / _max_scale(profile.batch_size)

    def tail(observed: float, mean: float) -> float:
        return observed if observed < mean else mean + (observed - mean) * k

    tail_turns = max(tail(profile.tail_turns, turns), 1.0)
    h_max = profile.kv_capacity(num_gpus_per_worker)
    sampled = TrajectoryPaths.from_sample(profile.trajectory_sample, batch, profile.turn_overhead_s)
    if sampled is None:  # the tail alone, the others running by the coarse survival
        paths = TrajectoryPaths.single(
            tail_turns,
            tail(profile.tail_new_prefill_tokens, turns * profile.new_prefill_tokens_per_turn),
            tail_turns * profile.cached_prefix_tokens_per_turn,
            tail(profile.tail_decode_tokens, turns * n_d),
            # time off the model: environment steps plus the per-turn dispatch overhead
            tail(profile.tail_env_s, turns * profile.env_s_per_turn_mean)
            + tail_turns * profile.turn_overhead_s,
        )
        alive = _alive_by_round(profile, batch, tail_turns)
    else:  # rounds up to the longest sampled trajectory, survival as sampled
        paths = sampled
        alive = np.maximum(batch * paths.survival(paths.max_turns), 1.0)
    return BatchWorkload(
        batch=float(batch),
        turns=turns,
        n_new=profile.new_prefill_tokens_per_turn,
        n_cached=profile.cached_prefix_tokens_per_turn,
        ctx=ctx,
        working_set=batch * (ctx + n_d),
        t_kv=perf.kv_transfer_s(ctx * hw.kv_bytes_per_token),
        serve_cv2=profile.prefill_tokens_cv2,
        n_d=n_d,
        ctx_dec=ctx + n_d / 2.0,
        k_seq=ctx + n_d,
        wait=min(max(profile.env_wait_fraction, 0.0), 0.99),
        h_max=h_max,
        seats=_seats(h_max, ctx + n_d, ctx + n_d / 2.0),
        weights_fit=hw.weights_fit(num_gpus_per_worker),
        weight_gb=hw.weight_bytes / 1e9,
        mem_gb=hw.worker_memory_bytes(num_gpus_per_worker) / 1e9,
        ctx_tail=max(profile.context_tokens_p90, ctx) + n_d,
        step_a=perf.step_overhead_s,
        step_b=perf.decode_s_per_seq,
        step_c=perf.decode_s_per_ctx_token,
        prefill_b=perf.prefill_s_per_token,
        prefill_c=perf.prefill_s_per_token_ctx,
        hit_coeff_colocated=profile.cache_hit_coeff_colocated,
        decode_saturation_seqs=hw.decode_saturation_seqs,
        hit_coeff_disaggregated=profile.cache_hit_coeff_disaggregated,
        hit_depth=min(max(profile.prefix_hit_depth, 0.0), 1.0),
        paths=paths,
        alive=alive,
        # the last turn of a trajectory has no environment step after it
        env_turn_s=profile.env_s_per_turn_mean * max(turns - 1.0, 0.0) / turns
        + profile.turn_overhead_s,
    )


def _alive_by_round(profile: WorkloadProfile, batch: int, tail_turns: float) -> np.ndarray:
    """Trajectories still running while the tail runs its k-th turn, k = 1..ceil(T_tail).

    Trajectories progress in rounds (each waits for its own turn's prefill, decode and
    environment), so while the tail is in round k the others running are those with at
    least k turns: `B * S(k)`, at least the tail itself. `S` is our coarse normal survival
    of turns per trajectory with the profile's mean and p90 (sd = (p90 - mean) / 1.2816)."""
    k_max = max(1, math.ceil(tail_turns - 1e-9))
    mu = profile.turns_per_traj_mean
    sd = (profile.turns_per_traj_p90 - mu) / 1.2816
    ks = np.arange(1, k_max + 1, dtype=float)
    if sd > 1e-6:
        z = (ks - 0.5 - mu) / (sd * math.sqrt(2.0))
        surv = np.array([0.5 * math.erfc(x) for x in z])
    else:
        surv = (ks <= mu + 0.5).astype(float)
    return np.maximum(batch * surv, 1.0)


def _max_scale(batch: float) -> float:
    return math.sqrt(2.0 * math.log(max(batch, 2.0)))


def _seats(h_max: float, k_seq: float, ctx_dec: float) -> float:
    """Sequences a worker's KV holds at once: admission is FIFO and allocates a whole
    context, so about one sequence's worth (`K_seq`) stays free at the head of the line."""
    if h_max <= 0:
        return 1.0
    return max(1.0, (h_max - k_seq) / ctx_dec)
