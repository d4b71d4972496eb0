"""One rollout step's workload statistics from its `TurnRecord`s (pure functions): what the
runtime tracker (`pearl.control.tracker`) blends into the `WorkloadProfile`.

`workload_stats`: turns, tokens (split into tokens new to a trajectory and tokens a prefix
cache could serve), contexts, environment time, the tail trajectory, orchestration gaps and
the fitted cache behaviour. `trajectory_totals`: the per-trajectory totals of the
trajectories that finished in the step (the profile's sample).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from pearl.control.profile import HardwarePrior
from pearl.control.telemetry import TurnRecord


def workload_stats(
    turns: Sequence[TurnRecord],
    hardware: HardwarePrior | None = None,
    kv_capacity_tokens: float = 0.0,
) -> dict[str, float]:
    """One step's workload statistics (empty dict when there are no turns).

    Prefill tokens are split by what a prefix cache could do about them: `own` tokens are
    new to the trajectory (its context growth since its previous turn, capped by the
    recorded new tokens; a turn whose previous turn is not in the step counts its recorded
    new tokens) and are prefilled whatever the cache; the rest of the context is the
    reusable prefix (`cached_prefix_tokens_per_turn`), which a cache may or may not serve.
    With `hardware`, the step's cache behaviour is fitted too (`_cache_hit_coeff`).
    """
    if not turns:
        return {}
    by_traj = _by_trajectory(turns)
    own = {id(r): float(n) for rs in by_traj.values() for r, n in _own_tokens(rs)}
    counted = list(_finished(by_traj).values())
    num_turns = np.array([max(r.turn for r in rs) + 1 for rs in counted], dtype=float)
    final_ctx = np.array(
        [max(r.context_tokens + r.decode_tokens for r in rs) for rs in by_traj.values()],
        dtype=float,
    )
    ctx = np.array([t.context_tokens for t in turns], dtype=float)
    env = np.array([t.env_s for t in turns if t.env_s is not None], dtype=float)
    span = sum(
        max(r.t_end_s for r in rs) - min(r.t_queued_s for r in rs) for rs in by_traj.values()
    )
    env_total = float(env.sum()) if env.size else 0.0
    stats = {
        "batch_size": float(len(by_traj)),
        "turns_per_traj_mean": float(num_turns.mean()),
        "turns_per_traj_p90": float(np.percentile(num_turns, 90)),
        "turns_per_traj_max": float(num_turns.max()),
        "new_prefill_tokens_per_turn": float(np.mean([own[id(t)] for t in turns])),
        "cached_prefix_tokens_per_turn": float(
            np.mean([t.context_tokens - own[id(t)] for t in turns])
        ),
        "decode_tokens_per_turn": float(np.mean([t.decode_tokens for t in turns])),
        "context_tokens_mean": float(ctx.mean()),
        "context_tokens_p90": float(np.percentile(ctx, 90)),
        "traj_context_tokens_mean": float(final_ctx.mean()),
        "env_wait_fraction": min(0.99, env_total / span) if span > 0 else 0.0,
    }
    prefilled = np.array([t.new_prefill_tokens for t in turns], dtype=float)
    if prefilled.mean() > 0:
        stats["prefill_tokens_cv2"] = float(prefilled.var() / prefilled.mean() ** 2)
    # The tail: the trajectory that finished last (ties: the smaller id, deterministic).
    tail = max(by_traj.items(), key=lambda kv: (max(r.t_end_s for r in kv[1]), _neg(kv[0])))[1]
    stats["tail_turns"] = float(max(r.turn for r in tail) - min(r.turn for r in tail) + 1)
    stats["tail_new_prefill_tokens"] = float(sum(own[id(r)] for r in tail))
    stats["tail_decode_tokens"] = float(sum(r.decode_tokens for r in tail))
    stats["tail_env_s"] = float(sum(r.env_s or 0.0 for r in tail))
    gaps = _orchestration_gaps(by_traj.values())
    if gaps:
        stats["turn_overhead_s"] = float(np.mean(gaps))
    depth = _prefix_hit_depth(turns, own)
    if depth is not None:
        stats["prefix_hit_depth"] = depth
    if hardware is not None:
        coeff = _cache_hit_coeff(turns, own, stats, hardware, kv_capacity_tokens)
        if coeff is not None:
            stats[coeff[0]] = coeff[1]
    if env.size:
        stats["env_s_per_turn_mean"] = float(env.mean())
        stats["env_s_per_turn_p90"] = float(np.percentile(env, 90))
    return stats


def trajectory_totals(
    turns: Sequence[TurnRecord],
) -> tuple[tuple[float, float, float, float, float], ...]:
    """`(turns, new prefill tokens, reusable prefix tokens, decode tokens, environment
    seconds)` of each trajectory that finished in this step's telemetry (`_finished`), in
    the order of their ids; new and reusable tokens as in `workload_stats`."""
    finished = _finished(_by_trajectory(turns))
    out = []
    for tid in sorted(finished):
        rs = finished[tid]
        own = _own_tokens(rs)
        new = float(sum(n for _, n in own))
        out.append(
            (
                float(len({r.turn for r in rs})),
                new,
                float(sum(r.context_tokens for r in rs)) - new,
                float(sum(r.decode_tokens for r in rs)),
                float(sum(r.env_s or 0.0 for r in rs)),
            )
        )
    return tuple(out)


def _by_trajectory(turns: Sequence[TurnRecord]) -> dict[str, list[TurnRecord]]:
    by_traj: dict[str, list[TurnRecord]] = {}
    for t in turns:
        by_traj.setdefault(t.traj_id, []).append(t)
    return by_traj


def _finished(by_traj: dict[str, list[TurnRecord]]) -> dict[str, list[TurnRecord]]:
    """The trajectories that finished in a step: those whose last turn has no environment
    step; where none is so marked (the runtime's environments also score the last
    response), every trajectory of the step."""
    marked = {tid: rs for tid, rs in by_traj.items() if any(r.env_s is None for r in rs)}
    return marked or by_traj


def _own_tokens(rs: Sequence[TurnRecord]) -> list[tuple[TurnRecord, int]]:
    """Each turn's tokens new to its trajectory (see `workload_stats`)."""
    out: list[tuple[TurnRecord, int]] = []
    prev: TurnRecord | None = None
    for r in sorted(rs, key=lambda r: r.turn):
        if prev is not None and prev.turn == r.turn - 1:
            grown = r.context_tokens - prev.context_tokens - prev.decode_tokens
            out.append((r, min(r.new_prefill_tokens, max(0, grown))))
        else:
            out.append((r, r.new_prefill_tokens))
        prev = r
    return out


def _prefix_hit_depth(turns: Sequence[TurnRecord], own: dict[int, float]) -> float | None:
    """Of the reusable prefix of the turns that did hit a cache, the share served: how
    deep a hit goes (None when no turn with a reusable prefix hit)."""
    reusable = served = 0.0
    for t in turns:
        r = t.context_tokens - own[id(t)]
        if r > 0 and t.cached_prefix_tokens > 0:
            reusable += r
            served += min(t.cached_prefix_tokens, r)
    return float(np.clip(served / reusable, 0.01, 1.0)) if reusable > 0 else None


def _cache_hit_coeff(
    turns: Sequence[TurnRecord],
    own: dict[int, float],
    stats: dict[str, float],
    hardware: HardwarePrior,
    kv_capacity_tokens: float = 0.0,
) -> tuple[str, float] | None:
    """Fit the prefix-cache hit curve of the step's mode (paper §6.1), or None.

    The makespan model predicts the share of the reusable prefix that caches serve as
    `h = depth * (1 - exp(-c * r^2))` (`depth`: `_prefix_hit_depth`), where `r = W * H_max / (B * K_seq)` is the cache room of the W
    workers that prefill (observed: distinct prefill workers) over the batch's working set
    (LRU over a working set larger than the cache mostly misses, hence the steep start).
    From the observed hit share `h` this gives `c = -ln(1 - h) / r^2`; steps whose caches
    served (almost) everything, or nothing reusable, carry no information and give None.
    """
    reusable = sum(t.context_tokens - own[id(t)] for t in turns)
    served = sum(min(t.cached_prefix_tokens, t.context_tokens - own[id(t)]) for t in turns)
    h_max = kv_capacity_tokens or hardware.kv_capacity_tokens(hardware.gpus_per_worker)
    working_set = stats["batch_size"] * (
        stats["context_tokens_mean"] + stats["decode_tokens_per_turn"]
    )
    if reusable <= 0 or h_max <= 0 or working_set <= 0:
        return None
    hit = served / reusable / stats.get("prefix_hit_depth", 1.0)
    num_workers = len({t.prefill_worker for t in turns})
    r = num_workers * h_max / working_set
    if not 0.0 < hit < 0.97:
        return None
    colocated = all(t.decode_worker is None or "prefill" not in t.roles for t in turns)
    name = "cache_hit_coeff_colocated" if colocated else "cache_hit_coeff_disaggregated"
    return name, float(np.clip(-np.log1p(-hit) / (r * r), 0.05, 20.0))


def _orchestration_gaps(trajs: Iterable[Sequence[TurnRecord]]) -> list[float]:
    """Per turn, the time a trajectory is neither on a worker, nor queued, nor in its
    environment: from decode end to env start, and from env end to the next turn's queueing
    (the runtime's dispatch and bookkeeping; about zero in the simulator)."""
    gaps: list[float] = []
    for rs in trajs:
        rs = sorted(rs, key=lambda r: r.turn)
        for a, b in zip(rs, rs[1:], strict=False):
            if a.t_env_start_s is None or a.t_env_end_s is None:
                continue
            gap = (a.t_env_start_s - a.t_decode_end_s) + (b.t_queued_s - a.t_env_end_s)
            if gap >= 0:
                gaps.append(gap)
    return gaps


def _neg(text: str) -> tuple[int, ...]:
    """A key that orders strings in reverse (so max() picks the smallest id on ties)."""
    return tuple(-ord(c) for c in text) + (1,)
