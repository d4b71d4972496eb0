"""Values exchanged with a simulated inference worker (`pearl.sim.physics.inference`).

`Request` goes in (one turn of a trajectory); `Completion` (a finished prefill or decode,
with per-request timing for telemetry), `Partial` (an interrupted request and its generated
prefix) and `StepStats` (iteration-level statistics over an interval) come out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True, slots=True)
class Request:
    """One turn of a trajectory, submitted to a worker.

    `context_tokens`: the whole context the turn starts from (initial prompt plus all previous
    turns, generated and observed). `decode_tokens`: tokens this turn generates in total (the
    simulator knows it; policies never see it). `generated_tokens`: tokens of this turn already
    generated before an interruption or by a prefill worker; they are part of the prompt now.
    The worker's prompt is therefore context_tokens + generated_tokens, and it generates
    decode_tokens - generated_tokens more. `full_prefill`: ignore any cached prefix (a router
    decision). `t_queued_s`: when the turn first entered the system (default: submit time).
    `reusable_prefix_tokens`: the longest prefix of the prompt that is token-identical to
    what the trajectory's earlier turns left in a cache (None: all of it, the agent only
    appended to its history; `WorkloadSpec.prefix_reuse`); a cached entry is reused up to
    that length at most.
    """

    traj_id: int
    turn: int
    context_tokens: int
    decode_tokens: int
    generated_tokens: int = 0
    full_prefill: bool = False
    t_queued_s: float | None = None
    reusable_prefix_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.context_tokens < 1:
            raise ValueError("context_tokens must be >= 1")
        if self.decode_tokens < 1:
            raise ValueError("decode_tokens must be >= 1")
        if not 0 <= self.generated_tokens < self.decode_tokens:
            raise ValueError("generated_tokens must be in [0, decode_tokens)")

    @property
    def prompt_tokens(self) -> int:
        return self.context_tokens + self.generated_tokens


class CompletionKind(StrEnum):
    PREFILL = "prefill"  # a prefill-only worker finished the prompt (KV ready to transfer)
    DECODE = "decode"  # the turn's generation finished (colocated or decode worker)


@dataclass(frozen=True, slots=True)
class Completion:
    """A request that left a worker, with its timing on that worker.

    For `PREFILL`: `generated_tokens` includes the first token sampled by the prefill, and
    `prompt_tokens` is the KV (in tokens) to transfer to a decode worker; `finished` is true
    when that token ended the turn (then no decode worker is needed).
    For `DECODE`: `finished` is always true and `generated_tokens == decode_tokens` target.
    Times are None for phases that did not happen on this worker (a decode worker has no
    prefill unless a preemption made it recompute). `new_prefill_tokens` counts every token
    this worker prefilled for the request, recomputation included; `cached_prefix_tokens`
    the prompt tokens its first admission found cached (as vLLM reports `num_cached_tokens`;
    what a preempted request finds of its own KV when readmitted is the worker's
    `cache.readmitted_hit_tokens`).
    """

    kind: CompletionKind
    worker_id: str
    traj_id: int
    turn: int
    context_tokens: int
    prompt_tokens: int
    cached_prefix_tokens: int
    new_prefill_tokens: int
    generated_tokens: int
    decode_steps: int
    finished: bool
    num_preemptions: int
    t_queued_s: float
    t_submit_s: float
    t_prefill_start_s: float | None
    t_prefill_end_s: float | None
    t_decode_start_s: float | None
    t_decode_end_s: float | None

    @property
    def t_end_s(self) -> float:
        end = self.t_decode_end_s if self.t_decode_end_s is not None else self.t_prefill_end_s
        assert end is not None
        return end


class Phase(StrEnum):
    QUEUED = "queued"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True)
class Partial:
    """An interrupted request: everything generated so far is kept (paper §4.5, §5).

    Resume it with `Request(traj_id, turn, context_tokens, decode_tokens,
    generated_tokens=partial.generated_tokens, ...)` on any worker; without a cached prefix
    there it pays one full prefill of context + generated tokens.
    """

    worker_id: str
    traj_id: int
    turn: int
    context_tokens: int
    decode_tokens: int
    generated_tokens: int
    phase: Phase
    t_queued_s: float
    reusable_prefix_tokens: int | None = None

    def resume(self, *, full_prefill: bool = False) -> Request:
        """The request that continues this turn where it stopped."""
        return Request(
            self.traj_id,
            self.turn,
            self.context_tokens,
            self.decode_tokens,
            generated_tokens=self.generated_tokens,
            full_prefill=full_prefill,
            t_queued_s=self.t_queued_s,
            reusable_prefix_tokens=self.reusable_prefix_tokens,
        )


@dataclass(frozen=True, slots=True)
class StepStats:
    """A worker's iterations over [t_start_s, t_end_s] (telemetry, `WorkerStepRecord`).

    `busy_s`: summed iteration time. `prefill_busy_s`: the part of it due to prefill (an
    iteration's time minus what the same iteration would take with its decodes alone), so
    `busy_s - prefill_busy_s` is decode time. `decode_seq_steps`: sum over iterations of the
    decode batch size; `decode_context_steps`: sum over iterations of the decoding contexts.
    """

    worker_id: str
    role: str
    t_start_s: float
    t_end_s: float
    num_iterations: int
    busy_s: float
    prefill_busy_s: float
    prefill_tokens: int
    decode_tokens: int
    decode_iterations: int
    decode_seq_steps: int
    decode_context_steps: float

    @property
    def mean_decode_batch(self) -> float:
        return self.decode_seq_steps / self.decode_iterations if self.decode_iterations else 0.0

    @property
    def mean_context_tokens(self) -> float:
        return self.decode_context_steps / self.decode_seq_steps if self.decode_seq_steps else 0.0

    @property
    def mean_step_time_s(self) -> float:
        return self.busy_s / self.num_iterations if self.num_iterations else 0.0


ADMISSIONS = ("prompt", "first_chunk")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Engine knobs of a simulated worker (vLLM-like continuous batching). The defaults are
    the paper's setting (`rollout_engine_defaults`: vLLM as ROLL configures it)."""

    max_batched_tokens: int = 8192  # per-iteration token budget (chunked prefill + decodes)
    prefill_max_batched_tokens: int = 8192  # budget of a prefill-only worker
    max_num_seqs: int = 128  # running requests at most
    prefix_caching: bool = True  # keep idle trajectories' KV for reuse
    prefix_cache_fraction: float = 1.0  # idle prefixes may use at most this share of KV
    # KV kept free when admitting (growth headroom); vLLM V1 keeps none by default (0.32's
    # SchedulerConfig.watermark is 0.0; 0.10's KV manager has none)
    kv_watermark_fraction: float = 0.0
    # What admission reserves: "first_chunk", a request's first chunk, the rest chunk by
    # chunk, preempting when KV runs out (vLLM V1 up to 0.11; ROLL pins vLLM 0.10.2), or
    # "prompt", the whole prompt (vLLM 0.32's default, `scheduler_reserve_full_isl`)
    admission: str = "first_chunk"
    # Record each request's start of decoding for `InferenceWorker.pop_decode_starts` (and
    # stop at every such boundary): off by default, it only serves phase events.
    report_decode_starts: bool = False

    def __post_init__(self) -> None:
        if self.max_batched_tokens < 1 or self.prefill_max_batched_tokens < 1:
            raise ValueError("token budgets must be >= 1")
        if self.max_num_seqs < 1:
            raise ValueError("max_num_seqs must be >= 1")
        if not 0 <= self.prefix_cache_fraction <= 1:
            raise ValueError("prefix_cache_fraction must be in [0, 1]")
        if not 0 <= self.kv_watermark_fraction < 0.5:
            raise ValueError("kv_watermark_fraction must be in [0, 0.5)")
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, not {self.admission!r}")


def rollout_engine_defaults() -> WorkerConfig:
    """The rollout engine's scheduler knobs in the paper's setting: PEARL is built on ROLL
    (paper §5), whose vLLM strategy (`roll/distributed/strategy/vllm_strategy.py`) sets
    `max_num_batched_tokens` to 8,192 unless the run configures it and builds the engine
    config with `UsageContext.ENGINE_CONTEXT` (`roll/third_party/vllm/__init__.py`), for
    which vLLM leaves `max_num_seqs` at its scheduler default, 128
    (`vllm/config/scheduler.py`, `SchedulerConfig.DEFAULT_MAX_NUM_SEQS`; vLLM's larger
    per-GPU defaults in `EngineArgs.get_batch_defaults` apply only to the `LLM` class and the
    API server). The same on every GPU class; a prefill-only worker gets the same budget.
    ROLL pins `vllm==0.10.2` (`requirements_torch280_vllm.txt`), whose V1 scheduler admits a
    request once its first chunk's KV fits (`admission="first_chunk"`)."""
    return WorkerConfig()
