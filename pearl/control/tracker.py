"""The runtime tracker: rollout-step telemetry -> `WorkloadProfile` (paper §4.1.1, §4.3, §5).

After each rollout step, `observe_step(turns, worker_steps)` computes the step's
statistics and fits, then blends them into the profile with an exponential moving average
(weight `alpha` on the new step; no stationarity assumed, so old steps fade):

* workload statistics from `TurnRecord`s: batch size (distinct trajectories), turns per
  trajectory (mean, p90, max; from trajectories that finished in the step when there are
  any), new / cached / decoded tokens per turn, context per turn (mean, p90), final
  trajectory context, environment time per turn (mean, p90), the share of a
  trajectory's lifetime spent waiting on its environment, and the tail trajectory (the
  one that finished last: its turns and totals of new prefill tokens, decode tokens and
  environment seconds), which sets the batch's critical path;
* performance parameters: the iteration cost `a + b_p*prefill + b_d*decode + c_ctx*context`
  fitted on `WorkerStepRecord`s, and KV transfer `latency + s_per_byte*bytes` on turns that
  moved KV. Fits are relative ridge regressions around the `HardwarePrior` roofline
  (`fit.fit_with_prior`), so a handful of samples gives sensible numbers and the profile
  says how confident each fit is. The prefill attention coefficient is not observable from
  iteration records; it is the prior scaled by the fitted/prior ratio of `b_p`.

The first step with turns (or with samples for a fit) replaces the prior's values outright
(the prior is a guess, not a measurement); later steps are blended.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np

from pearl.control.fit import fit_with_prior
from pearl.control.profile import FitQuality, HardwarePrior, PerfParams, WorkloadProfile
from pearl.control.telemetry import TurnRecord, WorkerStepRecord

_MAX_ROWS = 50_000  # per step; a deterministic stride keeps larger steps cheap to fit


class RuntimeTracker:
    """Keeps the current `WorkloadProfile`; pure and deterministic."""

    def __init__(
        self,
        hardware: HardwarePrior,
        *,
        alpha: float = 0.5,
        prior_weight: float = 20.0,
        initial: WorkloadProfile | None = None,
    ) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.hardware = hardware
        self.alpha = alpha
        self.prior_weight = prior_weight
        self._prior_perf = hardware.perf_prior()
        self._profile = initial or WorkloadProfile.prior(hardware)

    @property
    def profile(self) -> WorkloadProfile:
        return self._profile

    def observe_step(
        self, turns: Sequence[TurnRecord], worker_steps: Sequence[WorkerStepRecord]
    ) -> WorkloadProfile:
        """Fold one rollout step's telemetry into the profile and return the new profile."""
        old = self._profile
        a = self.alpha
        stats = workload_stats(turns)
        first = old.num_turns == 0  # no turn seen yet: the statistics are still the prior's
        upd: dict[str, float] = {}
        for name, value in stats.items():
            upd[name] = value if first else a * value + (1 - a) * getattr(old, name)
        base = old.perf.scaled(self._prior_perf.gpus_per_worker)
        perf, step_q = self._fit_iterations(worker_steps)
        kv, kv_q = self._fit_kv(turns)
        # A fit with samples is blended in (taken as is on the first step: it already
        # leans on the prior); a fit without samples leaves the old values alone.
        iter_a = 0.0 if step_q.num_samples == 0 else (1.0 if old.step_fit.num_samples == 0 else a)
        kv_a = 0.0 if kv_q.num_samples == 0 else (1.0 if old.kv_fit.num_samples == 0 else a)
        perf = _blend(perf, base, iter_a, _ITER_FIELDS)
        perf = _blend(
            replace(perf, kv_latency_s=kv[0], kv_s_per_byte=kv[1]), base, kv_a, _KV_FIELDS
        )
        profile = replace(
            old,
            perf=perf,
            num_steps=old.num_steps + 1,
            num_turns=old.num_turns + len(turns),
            step_fit=_blend_quality(step_q, old.step_fit, a),
            kv_fit=_blend_quality(kv_q, old.kv_fit, a),
            **upd,  # type: ignore[arg-type]
        )
        self._profile = profile
        return profile

    # -- fits ---------------------------------------------------------------------------
    def _fit_iterations(self, steps: Sequence[WorkerStepRecord]) -> tuple[PerfParams, FitQuality]:
        prior = self._prior_perf
        stride = max(1, len(steps) // _MAX_ROWS)
        rows = steps[::stride]
        x = np.array(
            [(1.0, s.prefill_tokens, s.decode_tokens, s.context_tokens) for s in rows], dtype=float
        ).reshape(-1, 4)
        y = np.array([s.step_time_s for s in rows], dtype=float)
        p0 = np.array(
            [
                prior.step_overhead_s,
                prior.prefill_s_per_token,
                prior.decode_s_per_seq,
                prior.decode_s_per_ctx_token,
            ]
        )
        theta, q = fit_with_prior(x, y, p0, self.prior_weight)
        ratio = theta[1] / p0[1] if p0[1] > 0 else 1.0
        perf = replace(
            prior,
            step_overhead_s=float(theta[0]),
            prefill_s_per_token=float(theta[1]),
            prefill_s_per_token_ctx=prior.prefill_s_per_token_ctx * float(ratio),
            decode_s_per_seq=float(theta[2]),
            decode_s_per_ctx_token=float(theta[3]),
        )
        return perf, q

    def _fit_kv(self, turns: Sequence[TurnRecord]) -> tuple[tuple[float, float], FitQuality]:
        prior = self._prior_perf
        moved = [t for t in turns if t.kv_s is not None]
        x = np.array(
            [(1.0, t.context_tokens * self.hardware.kv_bytes_per_token) for t in moved]
        ).reshape(-1, 2)
        y = np.array([t.kv_s for t in moved], dtype=float)
        theta, q = fit_with_prior(
            x, y, np.array([prior.kv_latency_s, prior.kv_s_per_byte]), self.prior_weight
        )
        return (float(theta[0]), float(theta[1])), q


def workload_stats(turns: Sequence[TurnRecord]) -> dict[str, float]:
    """One step's workload statistics (empty dict when there are no turns)."""
    if not turns:
        return {}
    by_traj: dict[str, list[TurnRecord]] = {}
    for t in turns:
        by_traj.setdefault(t.traj_id, []).append(t)
    finished = [rs for rs in by_traj.values() if any(r.env_s is None for r in rs)]
    counted = finished or list(by_traj.values())
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
        "new_prefill_tokens_per_turn": float(np.mean([t.new_prefill_tokens for t in turns])),
        "cached_prefix_tokens_per_turn": float(np.mean([t.cached_prefix_tokens for t in turns])),
        "decode_tokens_per_turn": float(np.mean([t.decode_tokens for t in turns])),
        "context_tokens_mean": float(ctx.mean()),
        "context_tokens_p90": float(np.percentile(ctx, 90)),
        "traj_context_tokens_mean": float(final_ctx.mean()),
        "env_wait_fraction": min(0.99, env_total / span) if span > 0 else 0.0,
    }
    # The tail: the trajectory that finished last (ties: the smaller id, deterministic).
    tail = max(by_traj.items(), key=lambda kv: (max(r.t_end_s for r in kv[1]), _neg(kv[0])))[1]
    stats["tail_turns"] = float(max(r.turn for r in tail) - min(r.turn for r in tail) + 1)
    stats["tail_new_prefill_tokens"] = float(sum(r.new_prefill_tokens for r in tail))
    stats["tail_decode_tokens"] = float(sum(r.decode_tokens for r in tail))
    stats["tail_env_s"] = float(sum(r.env_s or 0.0 for r in tail))
    gaps = _orchestration_gaps(by_traj.values())
    if gaps:
        stats["turn_overhead_s"] = float(np.mean(gaps))
    if env.size:
        stats["env_s_per_turn_mean"] = float(env.mean())
        stats["env_s_per_turn_p90"] = float(np.percentile(env, 90))
    return stats


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


_ITER_FIELDS = (
    "step_overhead_s", "prefill_s_per_token", "prefill_s_per_token_ctx", "decode_s_per_seq",
    "decode_s_per_ctx_token",
)  # fmt: skip
_KV_FIELDS = ("kv_latency_s", "kv_s_per_byte")


def _neg(text: str) -> tuple[int, ...]:
    """A key that orders strings in reverse (so max() picks the smallest id on ties)."""
    return tuple(-ord(c) for c in text) + (1,)


def _blend(new: PerfParams, old: PerfParams, a: float, names: tuple[str, ...]) -> PerfParams:
    """`a * new + (1 - a) * old` on the named fields (other fields from `new`)."""
    return replace(new, **{n: a * getattr(new, n) + (1 - a) * getattr(old, n) for n in names})


def _blend_quality(new: FitQuality, old: FitQuality, a: float) -> FitQuality:
    if new.num_samples == 0:
        return old
    if old.num_samples == 0:
        return new
    return FitQuality(
        old.num_samples + new.num_samples,
        a * new.rel_rms_residual + (1 - a) * old.rel_rms_residual,
        a * new.confidence + (1 - a) * old.confidence,
    )
