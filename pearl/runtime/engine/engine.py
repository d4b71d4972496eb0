"""LLMEngine: the inference engine a rollout worker drives (the engine contract).

One `step()` is one continuous-batching iteration (scheduler -> model runner -> sampling ->
bookkeeping). Requests are refused with `RequestRejected` (never a crash) when they cannot
run; checkpoint and weight problems raise `InputError` naming the file and tensor.
Disaggregation (paper §4.3.1): a prefill engine runs `add_request(..., prefill_only=True)`,
which samples the first token and keeps the KV; `export_kv` ships it; a decode engine
`import_kv`s it and continues exactly as one colocated engine would have.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

import torch

from pearl.errors import InputError
from pearl.runtime.backends.interface import BACKENDS, Capabilities, StepTelemetry
from pearl.runtime.engine.checkpoint import load_checkpoint, normalize_state_dict
from pearl.runtime.engine.kv_cache import BlockManager
from pearl.runtime.engine.model import DTYPES
from pearl.runtime.engine.model_config import ModelConfig
from pearl.runtime.engine.model_runner import ModelRunner
from pearl.runtime.engine.payload import TOKENS, KVPayload
from pearl.runtime.engine.request_errors import (
    EngineReleased,
    RequestRejected,
    check_payload,
    check_request,
)
from pearl.runtime.engine.sampling import SamplingParams
from pearl.runtime.engine.scheduler import ScheduledBatch, Scheduler
from pearl.runtime.engine.sequence import RequestOutput, SeqStatus, Sequence


class LLMEngine:
    """Paged-KV Qwen3 engine with continuous batching, chunked prefill and prefix caching;
    the reference `EngineBackend` (`pearl.runtime.backends`; its `capabilities`).

    Weights come from `checkpoint_dir` (HF safetensors; its config.json wins over
    `model_config`) or a random init seeded by `seed`. `max_model_len` (prompt + new
    tokens) defaults to min(max_position_embeddings, num_kv_blocks * block_size).
    `start_released`: build the weights on the CPU and allocate nothing on the device
    until `restore()` (a worker pre-started on a device someone else is using).
    """

    capabilities: Capabilities = BACKENDS["pearl"]

    def __init__(
        self,
        model_config: ModelConfig | None = None,
        *,
        device: str | torch.device = "cpu",
        seed: int = 0,
        checkpoint_dir: str | Path | None = None,
        num_kv_blocks: int = 256,
        block_size: int = 16,
        max_num_batched_tokens: int = 512,
        max_num_seqs: int = 64,
        max_model_len: int | None = None,
        dtype: torch.dtype | None = None,
        weight_version: int = 0,
        start_released: bool = False,
    ) -> None:
        state_dict = None
        if checkpoint_dir is not None:
            model_config, state_dict = load_checkpoint(checkpoint_dir)
        if model_config is None:
            raise InputError(
                "<argument>", "give a model_config or a checkpoint_dir", field="model_config"
            )
        self.config = model_config
        self.device = torch.device(device)
        self.dtype = dtype or DTYPES[model_config.dtype]
        self.seed = seed
        self._param_shapes: dict[str, tuple[int, ...]] | None = None
        self.block_size = block_size
        self.num_kv_blocks = num_kv_blocks
        self.max_model_len = max_model_len or min(
            model_config.max_position_embeddings, num_kv_blocks * block_size
        )
        self.weight_version = weight_version
        self.blocks = BlockManager(num_kv_blocks, block_size)
        self.blocks.set_namespace(weight_version)
        self.scheduler = Scheduler(
            self.blocks, max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs
        )
        self.runner = ModelRunner(
            model_config,
            device=self.device,
            dtype=self.dtype,
            num_kv_blocks=num_kv_blocks,
            block_size=block_size,
        )
        self._seqs: dict[str, Sequence] = {}  # unfinished + finished prefill_only (KV kept)
        self._offloaded: dict[str, torch.Tensor] | None = None
        if start_released:  # weights wait on the CPU; restore() puts them on the device
            self._offloaded = self.runner.host_weights(state_dict, seed)
        else:
            self.runner.build(state_dict, seed)
        self._num_generate_calls = 0
        self.last_batch: ScheduledBatch | None = None  # what the latest step() fed (telemetry)
        self._last_step = StepTelemetry()

    # -- requests -----------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        prefill_only: bool = False,
    ) -> None:
        """Queue a request. Raises RequestRejected (see its reason codes) if it cannot run."""
        self._check_ready()
        prompt = [int(t) for t in prompt_token_ids]
        self._validate(request_id, prompt, sampling)
        seed = sampling.seed if sampling.seed is not None else self._derive_seed(request_id)
        seq = Sequence(request_id, prompt, len(prompt), sampling, seed, prefill_only)
        self._seqs[request_id] = seq
        self.scheduler.add(seq)

    def _validate(self, request_id: str, prompt: list[int], sampling: SamplingParams) -> None:
        check_request(
            request_id,
            prompt,
            sampling.max_new_tokens,
            live=self._seqs,
            vocab_size=self.config.vocab_size,
            max_model_len=self.max_model_len,
        )
        total = len(prompt) + sampling.max_new_tokens
        if self.blocks.blocks_needed(total) > self.num_kv_blocks:
            raise RequestRejected(
                request_id,
                "kv_capacity",
                f"{total} tokens need {self.blocks.blocks_needed(total)} KV blocks; the cache "
                f"has {self.num_kv_blocks} of {self.block_size} tokens",
            )

    def _derive_seed(self, request_id: str) -> int:
        return (self.seed << 32) ^ zlib.crc32(request_id.encode())

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def step(self) -> list[RequestOutput]:
        """One continuous-batching iteration; outputs for sequences that sampled or finished."""
        self._check_ready()
        batch = self.scheduler.schedule()
        self.last_batch = batch
        self._last_step = batch.telemetry()
        if batch.is_empty:
            return []
        results = self.runner.run(batch)
        outputs: list[RequestOutput] = []
        for seq, n, res in zip(batch.seqs, batch.num_new_tokens, results, strict=True):
            seq.num_computed_tokens += n
            self.blocks.register_full_blocks(seq)
            if res is None:
                continue
            token, logprob = res
            seq.token_ids.append(token)
            seq.output_logprobs.append(logprob)
            self._maybe_finish(seq, token)
            outputs.append(RequestOutput.of(seq, [token], [logprob]))
        self.blocks.check_invariants()
        return outputs

    def _maybe_finish(self, seq: Sequence, token: int) -> None:
        p = seq.sampling
        if token in p.stop_token_ids:
            reason = "stop"
        elif seq.num_output_tokens >= p.max_new_tokens:
            reason = "length"
        elif seq.num_tokens >= self.max_model_len:
            reason = "context_limit"
        elif seq.prefill_only:
            reason = "prefill"
        else:
            return
        seq.status, seq.finish_reason = SeqStatus.FINISHED, reason
        self.scheduler.remove(seq)
        if reason != "prefill":  # a finished prefill keeps its KV until export_kv
            self._drop(seq)

    def _drop(self, seq: Sequence) -> None:
        self.blocks.free_seq(seq)
        self._seqs.pop(seq.request_id, None)

    def abort(self, request_id: str) -> RequestOutput:
        """Stop a request; returns everything it generated so far (finish_reason "abort")."""
        seq = self._get(request_id)
        self.scheduler.remove(seq)
        self._drop(seq)
        if seq.status is not SeqStatus.FINISHED:
            seq.status, seq.finish_reason = SeqStatus.FINISHED, "abort"
        return RequestOutput.of(seq, [], [])

    def _get(self, request_id: str) -> Sequence:
        seq = self._seqs.get(request_id)
        if seq is None:
            raise RequestRejected(request_id, "unknown_id", "no live request with this id")
        return seq

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[RequestOutput]:
        """Run prompts to completion; one final RequestOutput per prompt, in order."""
        self._num_generate_calls += 1
        ids = [f"generate-{self._num_generate_calls}-{i}" for i in range(len(prompts))]
        for rid, prompt in zip(ids, prompts, strict=True):
            self.add_request(rid, prompt, sampling)
        final: dict[str, RequestOutput] = {}
        while any(rid not in final for rid in ids):
            for out in self.step():
                if out.finished:
                    final[out.request_id] = out
        return [final[rid] for rid in ids]

    # -- KV export / import (disaggregated prefill -> decode) ----------------------------
    @property
    def model_signature(self) -> tuple[int, int, int, int]:
        c = self.config
        return (c.num_hidden_layers, c.num_key_value_heads, c.head_dim, c.vocab_size)

    def export_kv(self, request_id: str, *, release: bool = True) -> KVPayload:
        """Copy a request's computed KV and token state to CPU. With release=True (default)
        the request leaves this engine (its full blocks stay in the prefix cache)."""
        self._check_ready()
        seq = self._get(request_id)
        assert self.runner.kv is not None
        n = seq.num_computed_tokens
        k, v = self.runner.kv.read(seq.block_table, n)
        payload = KVPayload(
            request_id=request_id,
            token_ids=tuple(seq.token_ids),
            num_prompt_tokens=seq.num_prompt_tokens,
            num_kv_tokens=n,
            output_logprobs=tuple(seq.output_logprobs),
            k=k.to("cpu"),
            v=v.to("cpu"),
            seed=seq.seed,
            weight_version=self.weight_version,
            model_signature=self.model_signature,
            num_cached_prefix_tokens=seq.num_cached_prefix_tokens,
        )
        if release:
            self.scheduler.remove(seq)
            self._drop(seq)
        return payload

    def import_kv(
        self, request_id: str, payload: KVPayload, sampling: SamplingParams
    ) -> RequestOutput | None:
        """Continue a request from an exported payload (max_new_tokens counts the tokens
        generated before the export). Raises RequestRejected when it cannot be taken.

        Returns None when the request is queued; a finished RequestOutput (no new tokens)
        when the payload's tokens already end it under `sampling` (a stop token, or
        max_new_tokens reached) -- then step() will report nothing for it.
        """
        self._check_ready()
        check_payload(
            request_id,
            payload.model_signature,
            payload.layout,
            signature=self.model_signature,
            layout=TOKENS,
        )
        tokens = list(payload.token_ids)
        prompt = tokens[: payload.num_prompt_tokens]
        self._validate(request_id, prompt, sampling)
        seq = Sequence(
            request_id,
            tokens,
            payload.num_prompt_tokens,
            sampling,
            payload.seed,
            output_logprobs=list(payload.output_logprobs),
            num_cached_prefix_tokens=payload.num_cached_prefix_tokens,
        )
        need = self.blocks.blocks_needed(len(tokens))
        if need > self.blocks.num_free_blocks:
            raise RequestRejected(
                request_id,
                "kv_capacity",
                f"needs {need} free KV blocks, {self.blocks.num_free_blocks} free",
            )
        if payload.num_kv_tokens:
            self.blocks.grow(seq, payload.num_kv_tokens)
            assert self.runner.kv is not None
            self.runner.kv.write(seq.block_table, payload.k, payload.v)
            seq.num_computed_tokens = payload.num_kv_tokens
            self.blocks.register_full_blocks(seq)
        self._seqs[request_id] = seq
        if seq.num_output_tokens:
            seq.prefill_only = False  # a decode engine never stops at "prefill"
            self._maybe_finish(seq, seq.token_ids[-1])
            if seq.status is SeqStatus.FINISHED:
                return RequestOutput.of(seq, [], [])
        if seq.block_table:  # holds KV: runs (or is preempted) like any running sequence
            self.scheduler.add_running(seq)
        else:
            self.scheduler.add(seq)
        return None

    # -- weights and device state --------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """HF-named copies of the weights on CPU (never aliases of the live parameters)."""
        self._check_ready()
        assert self.runner.model is not None
        return {
            k: v.detach().to("cpu", copy=True) for k, v in self.runner.model.state_dict().items()
        }

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Install a weight snapshot and set `weight_version`. Prefix-cache entries of older
        versions stop matching; requests in flight keep their KV and continue."""
        sd = normalize_state_dict(
            self.config, state_dict, source=f"<weights v{version}>", shapes=self._shapes()
        )
        if self.runner.model is None:  # released: becomes the weights restore() installs
            self._offloaded = {k: v.detach().to("cpu") for k, v in sd.items()}
        else:
            with torch.no_grad():
                params = self.runner.model.state_dict()
                for name, tensor in sd.items():
                    params[name].copy_(tensor.to(params[name].device, params[name].dtype))
        self.weight_version = version
        self.blocks.set_namespace(version)

    def _shapes(self) -> dict[str, tuple[int, ...]] | None:
        """Parameter shapes of this engine's model (cached; None before any build)."""
        if self._param_shapes is None:
            live = self.runner.model.state_dict() if self.runner.model is not None else None
            source = live if live is not None else self._offloaded
            if source:
                self._param_shapes = {k: tuple(v.shape) for k, v in source.items()}
        return self._param_shapes

    def load_checkpoint(self, checkpoint_dir: str | Path, version: int) -> None:
        """load_weights from an HF safetensors directory; its config must match this model."""
        cfg, state_dict = load_checkpoint(checkpoint_dir)
        if replace(cfg, dtype=self.config.dtype) != self.config:
            raise InputError(
                str(Path(checkpoint_dir) / "config.json"),
                "model shape differs from the engine's (a snapshot must keep the architecture)",
            )
        self.load_weights(state_dict, version)

    def release(self) -> list[RequestOutput]:
        """Free device state (weights to CPU, KV dropped). Aborts live requests and returns
        what each had generated."""
        if not self.runner.ready:
            return []
        aborted = [self.abort(rid) for rid in list(self._seqs)]
        self._offloaded = self.state_dict()
        self.runner.free()
        self.blocks = BlockManager(self.num_kv_blocks, self.block_size)
        self.blocks.set_namespace(self.weight_version)
        self.scheduler.blocks = self.blocks
        return aborted

    def restore(self) -> None:
        """Rebuild device state from the weights kept at release (or loaded since)."""
        if self.runner.ready:
            return
        assert self._offloaded is not None
        self.runner.build(self._offloaded, self.seed)
        self._offloaded = None

    @property
    def is_released(self) -> bool:
        return not self.runner.ready

    @property
    def last_step(self) -> StepTelemetry:
        """What the latest `step()` fed (the backend interface's per-step telemetry)."""
        return self._last_step

    def _check_ready(self) -> None:
        if not self.runner.ready:
            raise EngineReleased("engine device state is released; call restore() first")
