"""What flows between the driver and rollout workers: requests, streamed chunks, results.

All frozen dataclasses, picklable, shipped through Ray. The driver-side helper
`collect_turn` consumes a worker's token stream and turns a worker that died mid-turn (its
node was preempted) into an interrupted result that keeps every token streamed so far
(paper §4.5: interrupted requests keep their partial trajectories for later resumption).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pearl.runtime.engine import LLMEngine

from pearl.control.telemetry import TurnRecord
from pearl.runtime.engine import ModelConfig, SamplingParams
from pearl.runtime.transport.kv_transfer import KVHandle

#: finish reasons a turn can end with, besides the engine's own ("stop", "length",
#: "context_limit"): cut by `interrupt()`/`release()`, the worker died, the KV of a
#: disaggregated turn was lost in transit, or the request was refused.
INTERRUPTED = "interrupted"
NO_VERSION = -1  # a result that carries no generated tokens names no weight version
WORKER_LOST = "worker_lost"
KV_LOST = "kv_lost"
ERROR = "error"


@dataclass(frozen=True)
class EngineSpec:
    """How a worker builds its engine (contract C). `model_config=None`: the tiny test model.

    `device="auto"` picks CUDA when the worker's process sees a device, else CPU.
    `torch_threads` bounds intra-op threads (several workers share a small machine).
    """

    model_config: ModelConfig | None = None
    checkpoint_dir: str | None = None
    seed: int = 0
    device: str = "auto"
    num_kv_blocks: int = 256
    block_size: int = 16
    max_num_batched_tokens: int = 512
    max_num_seqs: int = 64
    max_model_len: int | None = None
    torch_threads: int = 1
    start_released: bool = False  # nothing on the device until the worker is activated
    backend: str = "pearl"  # pearl.runtime.backends: pearl or vllm
    kv_cache_bytes: int = 64 << 20  # the vllm backend's KV cache (PEARL's: num_kv_blocks)

    def build(self) -> LLMEngine:
        import torch

        from pearl.runtime.engine import LLMEngine

        if self.torch_threads > 0:
            torch.set_num_threads(self.torch_threads)
        if self.backend == "vllm":
            return self._build_vllm()  # an EngineBackend, not an LLMEngine
        device = self.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        return LLMEngine(
            self.model_config if self.model_config is not None else ModelConfig.tiny(),
            device=device,
            seed=self.seed,
            checkpoint_dir=self.checkpoint_dir,
            num_kv_blocks=self.num_kv_blocks,
            block_size=self.block_size,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len,
            start_released=self.start_released,
        )

    def _build_vllm(self) -> Any:
        """A vLLM engine over `checkpoint_dir`; without one, over the same random weights
        PEARL's engine would start from (`seed`), written once as an HF directory."""
        import tempfile

        from pearl.runtime.backends.vllm_engine import VllmEngine
        from pearl.runtime.engine import LLMEngine
        from pearl.runtime.engine.checkpoint import save_checkpoint

        ckpt = self.checkpoint_dir
        if ckpt is None:
            cfg = self.model_config if self.model_config is not None else ModelConfig.tiny()
            init = LLMEngine(cfg, seed=self.seed, num_kv_blocks=8, block_size=self.block_size)
            ckpt = tempfile.mkdtemp(prefix="pearl-vllm-init-")
            save_checkpoint(ckpt, init.config, init.state_dict())
            del init
        return VllmEngine(
            ckpt,
            seed=self.seed,
            max_model_len=self.max_model_len,
            kv_cache_bytes=self.kv_cache_bytes,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            dtype="float32",
        )


@dataclass(frozen=True)
class TurnRequest:
    """One turn of one trajectory: the whole context so far as the prompt.

    `t_queued_s` is when the driver queued it (wall clock); None: when the worker got it.
    `resumed` marks a turn restarted after an interruption (one full prefill of its context).
    """

    traj_id: str
    turn: int
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams
    step: int = 0
    resumed: bool = False
    t_queued_s: float | None = None

    @property
    def request_id(self) -> str:
        return f"{self.traj_id}#{self.turn}"


@dataclass(frozen=True)
class TurnResult:
    """How a turn ended on a worker. `token_ids`/`logprobs`: everything generated this turn
    (for a disaggregated turn, including the prefill worker's first token)."""

    traj_id: str
    turn: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    worker_id: str
    # the weights that generated `token_ids` (the version at the turn's end; a turn whose
    # worker died: the oldest version any streamed chunk came from); NO_VERSION: no tokens
    weight_version: int
    error: str | None = None
    record: TurnRecord | None = None

    @property
    def request_id(self) -> str:
        return f"{self.traj_id}#{self.turn}"

    @property
    def interrupted(self) -> bool:
        """Cut short; the generated prefix is kept and the turn can resume elsewhere."""
        return self.finish_reason in (INTERRUPTED, WORKER_LOST, KV_LOST)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.interrupted


@dataclass(frozen=True)
class PrefillResult:
    """A prefill worker's answer: the KV handle plus what the decode side needs to finish.

    `handle` is None when the turn already ended at its first token (`finish_reason` stop
    or length: `token_ids` is the whole answer), or on error/interruption.
    """

    traj_id: str
    turn: int
    handle: KVHandle | None
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    finish_reason: str
    worker_id: str
    weight_version: int
    num_prompt_tokens: int = 0
    cached_prefix_tokens: int = 0
    t_queued_s: float = 0.0
    t_prefill_start_s: float = 0.0
    t_prefill_end_s: float = 0.0
    t_kv_start_s: float = 0.0
    error: str | None = None
    # the turn's telemetry when it ended on this worker (at its first token, or refused)
    record: TurnRecord | None = None

    @property
    def request_id(self) -> str:
        return f"{self.traj_id}#{self.turn}"

    @property
    def needs_decode(self) -> bool:
        return self.handle is not None

    @classmethod
    def failed(cls, result: TurnResult, num_prompt_tokens: int) -> PrefillResult:
        """A prefill that ended without KV to hand over (refused, interrupted or failed):
        what it generated, its reason and error, from the worker's `result`."""
        return cls(
            result.traj_id,
            result.turn,
            None,
            result.token_ids,
            result.logprobs,
            result.finish_reason,
            result.worker_id,
            result.weight_version,
            num_prompt_tokens=num_prompt_tokens,
            error=result.error,
            record=result.record,
        )

    def as_turn_result(self) -> TurnResult:
        """The turn's result when no decode step follows (finished at once, or failed)."""
        return TurnResult(
            self.traj_id,
            self.turn,
            self.token_ids,
            self.logprobs,
            self.finish_reason,
            self.worker_id,
            self.weight_version,
            self.error,
            self.record,
        )


@dataclass(frozen=True)
class TokenChunk:
    """A piece of a streamed turn: new tokens, generated with weights `weight_version`;
    the last chunk has `result` set."""

    traj_id: str
    turn: int
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    weight_version: int
    result: TurnResult | None = None

    @property
    def finished(self) -> bool:
        return self.result is not None


@dataclass(frozen=True)
class WorkerStatus:
    worker_id: str
    role: str
    accepting: bool
    num_running: int
    weight_version: int
    released: bool
    node_id: str
    num_engine_steps: int
    syncing_version: int | None = None
    parked: bool = False  # parked: device state released, admits nothing until activated
    pid: int = 0  # the actor's process (kept across park and activation)
    engine_build_s: float = 0.0  # time __init__ spent building the engine (start breakdown)
    backend: str = "pearl"  # the engine backend it runs (pearl.runtime.backends)


async def collect_turn(
    stream: Any,
    request: TurnRequest,
    worker_id: str,
    on_chunk: Callable[[TokenChunk], None] | None = None,
    prefill: PrefillResult | None = None,
) -> TurnResult:
    """Consume a worker's `serve` stream to the end (`on_chunk` sees each chunk).

    If the worker dies mid-turn (node preempted, process killed), returns a `worker_lost`
    result holding every token streamed before the death. A decode worker's first chunk
    repeats the tokens that came with the KV; pass the turn's `prefill` result so that a
    decode worker dying before its first chunk still returns those tokens.
    """
    import ray

    tokens: list[int] = []
    logprobs: list[float] = []
    versions: list[int] = []  # of the chunks that carried tokens
    if prefill is not None and prefill.token_ids:
        versions.append(prefill.weight_version)  # the decode side's first chunk repeats them
    try:
        async for ref in stream:
            chunk: TokenChunk = await ref
            tokens.extend(chunk.token_ids)
            logprobs.extend(chunk.logprobs)
            if chunk.token_ids:
                versions.append(chunk.weight_version)
            if on_chunk is not None:
                on_chunk(chunk)
            if chunk.result is not None:
                return chunk.result
        raise RuntimeError("stream ended without a result")
    except (ray.exceptions.RayActorError, ray.exceptions.NodeDiedError) as err:
        if prefill is not None and not tokens:
            tokens, logprobs = list(prefill.token_ids), list(prefill.logprobs)
        return TurnResult(
            request.traj_id,
            request.turn,
            tuple(tokens),
            tuple(logprobs),
            WORKER_LOST,
            worker_id,
            min(versions) if tokens and versions else NO_VERSION,
            error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
        )


def with_env_times(result: TurnResult, t_env_start_s: float, t_env_end_s: float) -> TurnResult:
    """The result with its record's environment step filled in (the driver runs envs)."""
    if result.record is None:
        return result
    t0 = max(t_env_start_s, result.record.t_decode_end_s)
    rec = replace(result.record, t_env_start_s=t0, t_env_end_s=max(t0, t_env_end_s))
    return replace(result, record=rec)
