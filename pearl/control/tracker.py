"""The runtime tracker: rollout-step telemetry -> `WorkloadProfile` (paper §4.1.1, §4.3, §5).

After each rollout step, `observe_step(turns, worker_steps)` computes the step's
statistics and fits, then blends them into the profile with an exponential moving average
(weight `alpha` on the new step; no stationarity assumed, so old steps fade):

* workload statistics from `TurnRecord`s (`pearl.control.workload_stats`): batch size
  (distinct trajectories), turns per trajectory (mean, p90, max; from trajectories that
  finished in the step when there are any), new / cached / decoded tokens per turn,
  context per turn (mean, p90), final trajectory context, environment time per turn
  (mean, p90), the share of a trajectory's lifetime spent waiting on its environment,
  the spread of the tokens turns prefill, and the tail trajectory (the one that finished
  last: its turns and totals of new prefill tokens, decode tokens and environment
  seconds);
* the sample of finished trajectories (`trajectory_totals`): a window of the newest
  `TRAJECTORY_SAMPLE_SIZE`, not an average; the engine takes the critical path as the
  longest of B draws from it (`pearl.control.longest`);
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

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from pearl.control.fit import fit_with_prior
from pearl.control.profile import (
    TRAJECTORY_SAMPLE_SIZE,
    FitQuality,
    HardwarePrior,
    PerfParams,
    WorkloadProfile,
)
from pearl.control.telemetry import TurnRecord, WorkerStepRecord
from pearl.control.workload_stats import trajectory_totals, workload_stats

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
        caps = [r.kv_capacity_tokens for r in worker_steps if r.kv_capacity_tokens]
        kv_capacity = float(np.median(caps)) if caps else old.kv_capacity_tokens
        stats = workload_stats(turns, self.hardware, kv_capacity)
        first = old.num_turns == 0  # no turn seen yet: the statistics are still the prior's
        upd: dict[str, float] = {}
        for name, value in stats.items():
            upd[name] = value if first else a * value + (1 - a) * getattr(old, name)
        if caps:  # a fact the engines report, not a statistic: the latest report stands
            upd["kv_capacity_tokens"] = kv_capacity
        base = old.perf.scaled(self._prior_perf.gpus_per_worker)
        ctx_obs = stats.get("context_tokens_mean", 0.0) if turns else 0.0
        perf, step_q = self._fit_iterations(worker_steps, ctx_obs)
        kv, kv_q = self._fit_kv(turns)
        # A fit with samples is blended in (taken as is on the first step: it already
        # leans on the prior); a fit without samples leaves the old values alone.
        iter_a = 0.0 if step_q.num_samples == 0 else (1.0 if old.step_fit.num_samples == 0 else a)
        kv_a = 0.0 if kv_q.num_samples == 0 else (1.0 if old.kv_fit.num_samples == 0 else a)
        perf = _blend(perf, base, iter_a, _ITER_FIELDS)
        perf = _blend(
            replace(perf, kv_latency_s=kv[0], kv_s_per_byte=kv[1]), base, kv_a, _KV_FIELDS
        )
        sample = (old.trajectory_sample + trajectory_totals(turns))[-TRAJECTORY_SAMPLE_SIZE:]
        profile = replace(
            old,
            perf=perf,
            trajectory_sample=sample,
            num_steps=old.num_steps + 1,
            num_turns=old.num_turns + len(turns),
            step_fit=_blend_quality(step_q, old.step_fit, a),
            kv_fit=_blend_quality(kv_q, old.kv_fit, a),
            **upd,  # type: ignore[arg-type]
        )
        self._profile = profile
        return profile

    # -- fits ---------------------------------------------------------------------------
    def _fit_iterations(
        self, steps: Sequence[WorkerStepRecord], context_tokens: float = 0.0
    ) -> tuple[PerfParams, FitQuality]:
        """Fit the iteration cost. A prefill token's fitted cost already includes its
        attention over the context the step's turns had (`context_tokens`, mean; iteration
        records do not separate the two): it is split between `prefill_s_per_token` and
        `prefill_s_per_token_ctx` in the prior's proportions, so that
        `b_p + c_attn * context_tokens` equals the fitted cost (no double counting)."""
        prior = self._prior_perf
        sat = self.hardware.decode_saturation_seqs
        stride = max(1, len(steps) // _MAX_ROWS)
        rows = steps[::stride]
        x = np.array(
            [(1.0, s.prefill_tokens, min(s.decode_tokens, sat), s.context_tokens) for s in rows],
            dtype=float,
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
        decode_only = np.array([s.role == "decode" for s in rows], dtype=bool)
        if decode_only.sum() >= 2 and (~decode_only).any():
            theta, q = self._fit_staged(x, y, p0, decode_only)
        else:
            theta, q = fit_with_prior(x, y, p0, self.prior_weight)
        per_token_prior = p0[1] + prior.prefill_s_per_token_ctx * context_tokens
        ratio = theta[1] / per_token_prior if per_token_prior > 0 else 1.0
        perf = replace(
            prior,
            step_overhead_s=float(theta[0]),
            prefill_s_per_token=float(p0[1] * ratio),
            prefill_s_per_token_ctx=prior.prefill_s_per_token_ctx * float(ratio),
            decode_s_per_seq=float(theta[2]),
            decode_s_per_ctx_token=float(theta[3]),
        )
        return perf, q

    def _fit_staged(
        self, x: np.ndarray, y: np.ndarray, p0: np.ndarray, decode_only: np.ndarray
    ) -> tuple[np.ndarray, FitQuality]:
        """Disaggregated telemetry: decode-only iterations (memory-bound: weights, MoE
        experts and KV read) fix the overhead and decode terms; the prefill cost per token
        is what the other iterations take beyond them. A joint fit would charge the
        decode iterations the overhead of compute-bound prefill chunks, in which the weight
        read is hidden."""
        cols = [0, 2, 3]
        dec, dq = fit_with_prior(x[decode_only][:, cols], y[decode_only], p0[cols],
                                 self.prior_weight)  # fmt: skip
        theta = p0.copy()
        theta[cols] = dec
        rest = ~decode_only
        beyond = y[rest] - x[rest][:, cols] @ dec
        pf, pq = fit_with_prior(x[rest][:, 1:2], beyond, p0[1:2], self.prior_weight)
        theta[1] = pf[0]
        rel = (y - x @ theta) / y
        rel_rms = float(np.sqrt(np.mean(rel * rel)))
        n = len(y)
        confidence = (n / (n + max(self.prior_weight, 0.0))) / (1.0 + rel_rms)
        return theta, FitQuality(n, rel_rms, float(confidence))

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


_ITER_FIELDS = (
    "step_overhead_s", "prefill_s_per_token", "prefill_s_per_token_ctx", "decode_s_per_seq",
    "decode_s_per_ctx_token",
)  # fmt: skip
_KV_FIELDS = ("kv_latency_s", "kv_s_per_byte")


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
