"""The engine-backend interface a rollout worker drives, and what each backend can do.

The interface is the step-level one PEARL's engine has always offered the worker (the
engine contract in `pearl.runtime.engine.engine`):

* `add_request(request_id, prompt_token_ids, sampling, prefill_only=False)`: queue a turn;
  a request the backend cannot run raises `RequestRejected` with a reason code, never a
  crash later. `prefill_only` (disaggregated prefill) only where `capabilities.kv_export`.
* `step() -> list[RequestOutput]`: one engine iteration; for each request that sampled or
  finished, its new tokens and logprobs and everything generated so far, the finish
  reason and the prompt tokens served from the prefix cache.
* `abort(request_id) -> RequestOutput`: stop a request and return what it generated so far
  (the prefix an interrupted turn resumes from; a backend whose engine does not return it
  keeps it itself).
* `load_weights(state_dict, version)` / `load_checkpoint(dir, version)`: install weights
  by version; the prefix cache of older versions stops matching. Requests in flight keep
  running where `capabilities.inflight_weight_install`.
* `release()` / `restore()` / `is_released`: device state off and back (the borrowed-GPU
  handoff); `capabilities.release` says whether memory really moves (`device`) or the
  backend only refuses requests while released (`none`).
* `last_step`: what the latest `step()` fed, as `StepTelemetry` in our schema.
* `export_kv` / `import_kv`: the disaggregated handoff, only where the capabilities say so.

`Capabilities.role_change` tells the planner how a worker changes its PD role: `per_request`
(any request may be prefill-only or decode-from-KV), `when_idle`, or `restart` (a new
process: the planner charges a worker start for it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    import torch

    from pearl.runtime.engine.sampling import SamplingParams
    from pearl.runtime.engine.sequence import RequestOutput


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend can do (the worker and the controller ask for no more)."""

    name: str  # the backend's name in run configs (`engine.backend`)
    kv_export: bool  # prefill-only requests whose KV can be exported
    kv_import: bool  # decode from imported KV
    release: Literal["device", "none"]  # does release() free device memory?
    inflight_weight_install: bool  # load_weights keeps requests in flight running
    step_telemetry: bool  # last_step reports each iteration's tokens
    role_change: Literal["per_request", "when_idle", "restart"]

    @property
    def disaggregation(self) -> bool:
        """Can a worker of this backend take either side of a PD handoff?"""
        return self.kv_export and self.kv_import


@dataclass(frozen=True, slots=True)
class StepTelemetry:
    """One engine iteration: requests in it, prompt tokens prefilled, tokens decoded, and
    the context the decodes attended (the fields of a worker step record)."""

    batch_size: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0
    context_tokens: int = 0


class EngineBackend(Protocol):
    """The interface of the module docstring."""

    capabilities: Capabilities
    weight_version: int

    def add_request(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        sampling: SamplingParams,
        *,
        prefill_only: bool = False,
    ) -> None: ...

    def has_unfinished(self) -> bool: ...

    def step(self) -> list[RequestOutput]: ...

    def abort(self, request_id: str) -> RequestOutput: ...

    def generate(
        self, prompts: list[list[int]], sampling: SamplingParams
    ) -> list[RequestOutput]: ...

    def load_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None: ...

    def load_checkpoint(self, checkpoint_dir: str | Path, version: int) -> None: ...

    def release(self) -> list[RequestOutput]: ...

    def restore(self) -> None: ...

    @property
    def is_released(self) -> bool: ...

    @property
    def last_step(self) -> StepTelemetry: ...


# What each backend can do, known before one is built (the planner's cost model reads it).
BACKENDS: dict[str, Capabilities] = {
    "pearl": Capabilities(
        name="pearl",
        kv_export=True,
        kv_import=True,
        release="device",
        inflight_weight_install=True,
        step_telemetry=True,
        role_change="per_request",
    ),
    # vLLM 0.32 through `VllmEngine`: the PD handoff through PEARL's KV connector on any
    # request; sleep mode (the only way it frees device memory) exists on CUDA only.
    "vllm": Capabilities(
        name="vllm",
        kv_export=True,
        kv_import=True,
        release="none",
        inflight_weight_install=True,
        step_telemetry=True,
        role_change="per_request",
    ),
}


def capabilities_of(name: str) -> Capabilities:
    """The capabilities of backend `name`; ValueError names the known ones."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(
            f"unknown engine backend {name!r} (known: {', '.join(BACKENDS)})"
        ) from None
