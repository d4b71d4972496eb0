"""Workload profiles, fitted performance parameters and hardware priors (paper §4.2, §4.3).

* `HardwarePrior`: plain numbers about one model on one GPU type (weights, KV bytes per
  token, FLOPs per token, peak FLOP/s, HBM bandwidth and capacity, KV-link bandwidth). It is
  built by duck typing from spec objects (`HardwarePrior.from_specs(model, gpu)`), so this
  package never imports `pearl.specs` (pydantic).
* `PerfParams`: the coefficients of our own coarse analytical cost model of one worker:
  prefill time of a turn `a + b_p*new + c_attn*new*context`, decode iteration time
  `a + b_d*batch + c_ctx*sum(context)`, KV transfer `latency + bytes*s_per_byte`. Priors
  come from a roofline over `HardwarePrior`; the tracker refits them from telemetry.
* `WorkloadProfile`: EMA statistics of the workload plus the fitted `PerfParams` and how
  confident the fits are. Serialises to JSON (`pearl profile fit` writes it, `pearl decide`
  reads it); `from_json` names the offending field.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from pearl.control.telemetry import TelemetryError


class ProfileError(TelemetryError):
    """A bad profile document (names the source and the field path)."""


@dataclass(frozen=True, slots=True)
class HardwarePrior:
    """Per-GPU hardware and per-token model numbers that seed the fits.

    Efficiencies are the fraction of datasheet peak a real engine reaches (prefill GEMMs
    reach roughly 55-65% of peak FLOP/s, decode reads HBM at roughly 60-80% of peak);
    `usable_memory_fraction` is the share of HBM an engine may use for weights and KV.
    """

    weight_bytes: float
    kv_bytes_per_token: float
    flops_per_token: float
    attn_flops_per_token_ctx: float
    gpu_flops_per_s: float
    gpu_hbm_bytes_per_s: float
    gpu_hbm_bytes: float
    link_bytes_per_s: float = 25e9
    gpus_per_worker: int = 1
    prefill_flops_efficiency: float = 0.6
    decode_bandwidth_efficiency: float = 0.7
    usable_memory_fraction: float = 0.9
    expert_weight_bytes: float = 0.0
    experts_per_token_fraction: float = 0.0

    @classmethod
    def from_specs(
        cls,
        model: Any,
        gpu: Any,
        *,
        gpus_per_worker: int = 1,
        link_bytes_per_s: float = 25e9,
        usable_memory_fraction: float = 0.9,
    ) -> HardwarePrior:
        """Read a model spec (weight_bytes_bf16, kv_bytes_per_token_bf16, active_params,
        num_hidden_layers, num_attention_heads, head_dim; for MoE num_experts,
        num_experts_per_tok, moe_intermediate_size, hidden_size) and a GPU spec
        (bf16_tflops, hbm_tb_s, hbm_gb) by attribute name."""
        attn = 4.0 * model.num_hidden_layers * model.num_attention_heads * model.head_dim
        num_experts = int(getattr(model, "num_experts", 0) or 0)
        per_tok = int(getattr(model, "num_experts_per_tok", 0) or 0)
        expert_bytes, frac = 0.0, 0.0
        if num_experts > 0 and per_tok > 0:
            # gate, up and down projections of every expert of every layer, bf16
            expert_bytes = (
                2.0
                * 3.0
                * num_experts
                * model.num_hidden_layers
                * (model.hidden_size * model.moe_intermediate_size)
            )
            frac = per_tok / num_experts
        return cls(
            weight_bytes=float(model.weight_bytes_bf16),
            kv_bytes_per_token=float(model.kv_bytes_per_token_bf16),
            flops_per_token=2.0 * float(model.active_params),
            attn_flops_per_token_ctx=attn,
            gpu_flops_per_s=float(gpu.bf16_tflops) * 1e12,
            gpu_hbm_bytes_per_s=float(gpu.hbm_tb_s) * 1e12,
            gpu_hbm_bytes=float(gpu.hbm_gb) * 1e9,
            link_bytes_per_s=float(link_bytes_per_s),
            gpus_per_worker=gpus_per_worker,
            usable_memory_fraction=usable_memory_fraction,
            expert_weight_bytes=expert_bytes,
            experts_per_token_fraction=frac,
        )

    @property
    def decode_saturation_seqs(self) -> float:
        """Decode sequences per iteration past which a MoE iteration reads every expert
        (our coarse linear coverage: each sequence reads `k/E` of the experts until all are
        read, at E/k sequences); infinite for dense models."""
        f = self.experts_per_token_fraction
        return 1.0 / f if f > 0 and self.expert_weight_bytes > 0 else math.inf

    def worker_memory_bytes(self, num_gpus_per_worker: int | None = None) -> float:
        g = self.gpus_per_worker if num_gpus_per_worker is None else num_gpus_per_worker
        return g * self.gpu_hbm_bytes * self.usable_memory_fraction

    def weights_fit(self, num_gpus_per_worker: int | None = None) -> bool:
        return self.weight_bytes < self.worker_memory_bytes(num_gpus_per_worker)

    def kv_capacity_tokens(self, num_gpus_per_worker: int | None = None) -> float:
        """H_max: KV tokens one worker can hold beside its weights (0 if weights don't fit)."""
        free = self.worker_memory_bytes(num_gpus_per_worker) - self.weight_bytes
        return max(0.0, free / self.kv_bytes_per_token)

    def perf_prior(self) -> PerfParams:
        """Roofline priors for a worker of `gpus_per_worker` GPUs (our coarse model)."""
        g = self.gpus_per_worker
        flops = g * self.gpu_flops_per_s * self.prefill_flops_efficiency
        bw = g * self.gpu_hbm_bytes_per_s * self.decode_bandwidth_efficiency
        # A decode iteration reads the weights once; for MoE only the shared weights for
        # sure, plus the experts its sequences route to (`decode_saturation_seqs`).
        shared = self.weight_bytes - self.expert_weight_bytes
        per_seq_bytes = self.expert_weight_bytes * self.experts_per_token_fraction
        return PerfParams(
            step_overhead_s=shared / bw + 2e-3,  # one weight read + launch slack
            prefill_s_per_token=self.flops_per_token / flops,
            prefill_s_per_token_ctx=self.attn_flops_per_token_ctx / flops,
            decode_s_per_seq=self.flops_per_token / (g * self.gpu_flops_per_s * 0.3)
            + per_seq_bytes / bw,
            decode_s_per_ctx_token=self.kv_bytes_per_token / bw,
            kv_latency_s=2e-3,
            kv_s_per_byte=1.0 / self.link_bytes_per_s,
            gpus_per_worker=g,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class PerfParams:
    """Coefficients of the coarse per-worker cost model (all seconds, all >= 0).

    Measured on workers of `gpus_per_worker` GPUs; `scaled(g)` assumes compute and memory
    terms scale perfectly with the GPUs of a worker (coarse on purpose), KV transfer not.
    """

    step_overhead_s: float
    prefill_s_per_token: float
    prefill_s_per_token_ctx: float
    decode_s_per_seq: float
    decode_s_per_ctx_token: float
    kv_latency_s: float
    kv_s_per_byte: float
    gpus_per_worker: int = 1

    def scaled(self, num_gpus_per_worker: int) -> PerfParams:
        if num_gpus_per_worker == self.gpus_per_worker:
            return self
        k = self.gpus_per_worker / num_gpus_per_worker
        return replace(
            self,
            step_overhead_s=self.step_overhead_s * k,
            prefill_s_per_token=self.prefill_s_per_token * k,
            prefill_s_per_token_ctx=self.prefill_s_per_token_ctx * k,
            decode_s_per_seq=self.decode_s_per_seq * k,
            decode_s_per_ctx_token=self.decode_s_per_ctx_token * k,
            gpus_per_worker=num_gpus_per_worker,
        )

    def prefill_s(self, new_tokens: float, context_tokens: float) -> float:
        """One turn's prefill on an otherwise idle worker."""
        return (
            self.step_overhead_s
            + self.prefill_s_per_token * new_tokens
            + self.prefill_s_per_token_ctx * new_tokens * context_tokens
        )

    def decode_step_s(self, batch: float, total_context_tokens: float) -> float:
        """One decode iteration of `batch` sequences attending to `total_context_tokens`."""
        return (
            self.step_overhead_s
            + self.decode_s_per_seq * batch
            + self.decode_s_per_ctx_token * total_context_tokens
        )

    def kv_transfer_s(self, num_bytes: float) -> float:
        return self.kv_latency_s + self.kv_s_per_byte * num_bytes

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class FitQuality:
    """How much to trust a fit: samples behind it, relative RMS residual, and a 0..1 score.

    `confidence` is `n / (n + prior_weight)` discounted by the residual: 0 means "prior
    only", values near 1 mean many samples that the model explains well.
    """

    num_samples: int = 0
    rel_rms_residual: float = 0.0
    confidence: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    """What the tracker knows about the workload and the hardware (EMAs over rollout steps).

    Per-turn token counts and times are means over turns. The `tail_*` fields describe the
    trajectory that finished last in a step (its turns, and its totals of new prefill
    tokens, decode tokens and environment seconds): the critical path of a batch;
    `env_wait_fraction` is the share of a trajectory's lifetime spent waiting on its
    environment (it reduces decode concurrency, paper §4.3.1); `prefill_tokens_cv2` the
    squared coefficient of variation of the tokens a turn prefills (how irregular a
    prefill worker's service is: 1 for exponential, 0 for constant).
    `new_prefill_tokens_per_turn` counts tokens new to the trajectory (context growth), and
    `cached_prefix_tokens_per_turn` the reusable rest of the context, whether or not a
    cache served it in the telemetry; `cache_hit_coeff_*` (c in `h = depth*(1 - exp(-c*r^2))`,
    see `pearl.control.makespan`) say how often prefix caches served it per mode, and
    `prefix_hit_depth` how much of it a hit serves (1: all of it; an agent that re-renders
    its history each turn keeps only the part before the first change reusable).
    `kv_capacity_tokens` is a worker's KV pool as its engine reported it (telemetry), 0 when
    no engine said: then `kv_capacity()` falls back to the hardware prior's estimate.
    `trajectory_sample` holds the totals of recently finished trajectories (newest last, at
    most `TRAJECTORY_SAMPLE_SIZE`), each `(turns, new prefill tokens, reusable prefix
    tokens, decode tokens, environment seconds)`: the engine takes a batch's critical path
    as the longest of B draws from it (`pearl.control.longest`); without it, from the
    `tail_*` fields.
    """

    hardware: HardwarePrior
    perf: PerfParams
    batch_size: float = 64.0
    turns_per_traj_mean: float = 20.0
    turns_per_traj_p90: float = 35.0
    turns_per_traj_max: float = 50.0
    new_prefill_tokens_per_turn: float = 6000.0
    cached_prefix_tokens_per_turn: float = 4000.0
    decode_tokens_per_turn: float = 300.0
    context_tokens_mean: float = 10000.0
    context_tokens_p90: float = 20000.0
    traj_context_tokens_mean: float = 16000.0
    env_s_per_turn_mean: float = 5.0
    env_s_per_turn_p90: float = 15.0
    env_wait_fraction: float = 0.3
    prefill_tokens_cv2: float = 1.0
    tail_turns: float = 50.0
    tail_new_prefill_tokens: float = 300000.0
    tail_decode_tokens: float = 15000.0
    tail_env_s: float = 250.0
    turn_overhead_s: float = 0.0
    cache_hit_coeff_colocated: float = 1.0
    cache_hit_coeff_disaggregated: float = 1.0
    prefix_hit_depth: float = 1.0
    kv_capacity_tokens: float = 0.0
    num_steps: int = 0
    num_turns: int = 0
    step_fit: FitQuality = FitQuality()
    kv_fit: FitQuality = FitQuality()
    trajectory_sample: tuple[tuple[float, float, float, float, float], ...] = ()

    @classmethod
    def prior(cls, hardware: HardwarePrior, **workload: float) -> WorkloadProfile:
        """A profile from priors only (before any telemetry): roofline perf, SWE defaults."""
        return cls(hardware=hardware, perf=hardware.perf_prior(), **workload)  # type: ignore[arg-type]

    def kv_capacity(self, num_gpus_per_worker: int) -> float:
        """H_max of a worker of `num_gpus_per_worker` GPUs: the reported pool (workers of the
        prior's size), rescaled through the memory per GPU it implies for other sizes; the
        prior's estimate when no engine reported one."""
        hw = self.hardware
        if self.kv_capacity_tokens <= 0:
            return hw.kv_capacity_tokens(num_gpus_per_worker)
        if num_gpus_per_worker == hw.gpus_per_worker:
            return self.kv_capacity_tokens
        per_gpu = (
            self.kv_capacity_tokens * hw.kv_bytes_per_token + hw.weight_bytes
        ) / hw.gpus_per_worker
        free = num_gpus_per_worker * per_gpu - hw.weight_bytes
        return max(0.0, free / hw.kv_bytes_per_token)

    @property
    def prefix_hit_rate(self) -> float:
        total = self.new_prefill_tokens_per_turn + self.cached_prefix_tokens_per_turn
        return self.cached_prefix_tokens_per_turn / total if total > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc["trajectory_sample"] = [list(r) for r in self.trajectory_sample]
        doc["prefix_hit_rate"] = self.prefix_hit_rate  # derived, ignored on load
        return doc

    @classmethod
    def from_json(cls, doc: Any, source: str = "<profile>") -> WorkloadProfile:
        """Validate a profile document: every field present, numbers finite and >= 0."""
        if not isinstance(doc, dict):
            raise ProfileError(source, "expected a JSON object")
        sub = {
            "hardware": HardwarePrior,
            "perf": PerfParams,
            "step_fit": FitQuality,
            "kv_fit": FitQuality,
        }
        kwargs: dict[str, Any] = {}
        # added later: profiles written before keep the defaults
        optional = {
            "prefix_hit_depth",
            "kv_capacity_tokens",
            "trajectory_sample",
            "prefill_tokens_cv2",
        }
        for f in fields(cls):
            if f.name not in doc and f.name in optional:
                continue
            if f.name not in doc:
                raise ProfileError(source, "missing", field=f.name)
            if f.name == "trajectory_sample":
                kwargs[f.name] = _sample(doc[f.name], source, f.name)
            elif f.name in sub:
                kwargs[f.name] = _build(sub[f.name], doc[f.name], source, f.name)
            else:
                kwargs[f.name] = _number(doc[f.name], source, f.name, integer=f.type == "int")
        unknown = sorted(set(doc) - {f.name for f in fields(cls)} - {"prefix_hit_rate"})
        if unknown:
            raise ProfileError(source, "unknown field", field=unknown[0])
        for name in ("turns_per_traj_mean", "turns_per_traj_max", "batch_size", "tail_turns"):
            if kwargs[name] <= 0:
                raise ProfileError(source, "must be > 0", field=name)
        if kwargs["env_wait_fraction"] >= 1.0:
            raise ProfileError(source, "must be < 1", field="env_wait_fraction")
        return cls(**kwargs)


TRAJECTORY_SAMPLE_SIZE = 512  # finished trajectories the profile keeps (8 batches of 64)


def _sample(doc: Any, source: str, path: str) -> tuple[tuple[float, ...], ...]:
    """A trajectory sample: a list of [turns >= 1, new, reusable, decode tokens, env s]."""
    if not isinstance(doc, list):
        raise ProfileError(source, "expected a list", field=path)
    if len(doc) > TRAJECTORY_SAMPLE_SIZE:
        raise ProfileError(
            source, f"at most {TRAJECTORY_SAMPLE_SIZE} trajectories, got {len(doc)}", field=path
        )
    out = []
    for i, row in enumerate(doc):
        where = f"{path}[{i}]"
        if not isinstance(row, list) or len(row) != 5:
            raise ProfileError(
                source,
                "expected [turns, new prefill tokens, reusable prefix tokens, decode tokens, "
                "environment seconds]",
                field=where,
            )
        vals = tuple(_number(v, source, where) for v in row)
        if vals[0] < 1:
            raise ProfileError(source, f"turns must be >= 1, got {vals[0]!r}", field=where)
        out.append(vals)
    return tuple(out)


def _number(v: Any, source: str, path: str, *, integer: bool = False) -> Any:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProfileError(source, f"expected a number, got {v!r}", field=path)
    if not math.isfinite(v) or v < 0:
        raise ProfileError(source, f"must be a finite number >= 0, got {v!r}", field=path)
    if integer:
        if v != int(v):
            raise ProfileError(source, f"expected an integer, got {v!r}", field=path)
        return int(v)
    return float(v)


def _build(cls: type, doc: Any, source: str, path: str) -> Any:
    if not isinstance(doc, dict):
        raise ProfileError(source, "expected a JSON object", field=path)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        if f.name not in doc:
            raise ProfileError(source, "missing", field=f"{path}.{f.name}")
        kwargs[f.name] = _number(doc[f.name], source, f"{path}.{f.name}", integer=f.type == "int")
    unknown = sorted(set(doc) - set(kwargs))
    if unknown:
        raise ProfileError(source, "unknown field", field=f"{path}.{unknown[0]}")
    if "gpus_per_worker" in kwargs and kwargs["gpus_per_worker"] < 1:
        raise ProfileError(source, "must be >= 1", field=f"{path}.gpus_per_worker")
    return cls(**kwargs)
