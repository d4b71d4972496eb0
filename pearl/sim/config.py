"""The simulator's configuration: a tree of typed models, one sub-config per component.

Loaded from YAML (`load_config`), validated on load with errors that name the file and the
field (`InputError`), and dumped next to every run's outputs (`dump_config`), so that a run
is reproducible from `config.yaml` and its seed alone.

Defaults are the paper's evaluation setting (§6.1): Qwen3-8B on H100-class GPUs, 16
training GPUs, 4 reserved rollout GPUs plus up to 12 preemptible ones from a two-hour trace,
batch 64, 32K-token trajectory limit, and the reconfiguration costs of the paper's Table 3.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from pearl.configio import (
    dump_yaml_model,
    load_yaml_model,
    model_from_dict,
    with_dotted_updates,
)
from pearl.control.knobs import ControllerKnobs
from pearl.errors import InputError, from_validation
from pearl.specs.workload import WorkloadSpec
from pearl.world.sections import ClusterShape, RolloutShape, TraceShape

if TYPE_CHECKING:
    from pearl.sim.physics.inference_types import WorkerConfig
    from pearl.sim.physics.iteration import HardwareParams, WorkerHardware


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Range(_Model):
    """A closed interval [low_s, high_s] from which a cost is drawn uniformly (seeded)."""

    low_s: float = Field(ge=0, description="Smallest value in seconds.")
    high_s: float = Field(ge=0, description="Largest value in seconds.")

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.high_s < self.low_s:
            raise ValueError("high_s must be >= low_s")
        return self

    @property
    def mean_s(self) -> float:
        return 0.5 * (self.low_s + self.high_s)


class ClusterConfig(ClusterShape):
    """Which model runs on which GPUs, and how many GPUs each pool has (paper §6.1: 16
    training GPUs, 4 reserved rollout GPUs; the shared fields are `ClusterShape`'s)."""

    model: str = Field(
        "qwen3-8b",
        description="A model of pearl/specs/data/models.yaml by name, or a model file: an HF "
        "config.json or a spec YAML (pearl.specs.model_file).",
    )
    gpu: str = Field(
        "h100-sxm",
        description="A GPU type of pearl/specs/data/gpus.yaml by name, or a GPU file of its "
        "fields (a card of your own).",
    )
    max_preemptible_gpus: int = Field(
        12, ge=0, description="Cap on preemptible rollout GPUs taken from the trace."
    )
    gpus_per_node: int = Field(
        8,
        ge=1,
        description="GPUs per server (an 8-GPU HGX node): reserved rollout and training GPUs "
        "fill servers in index order, each preemptible GPU is a server of its own; KV moves "
        "over NVLink between workers on one server, else over the NIC.",
    )

    @field_validator("model", "gpu")
    @classmethod
    def _known_name(cls, name: str, info: ValidationInfo) -> str:
        from pearl.specs import get_gpu, get_model

        try:
            (get_model if info.field_name == "model" else get_gpu)(name)
        except InputError as err:  # a model file's own error names the file and its field
            raise ValueError(err.message if err.source == "<argument>" else str(err)) from None
        return name


class EngineConfig(_Model):
    """The rollout engine's scheduler knobs (vLLM-like continuous batching, chunked prefill)
    and the share of GPU memory it may take (`gpu_memory_utilization`, which sizes KV).

    None takes the paper's substrate's (`pearl.sim.physics.inference_types.
    rollout_engine_defaults`: ROLL's vLLM strategy, 8,192 tokens and 128 sequences on every
    GPU, admission on a request's first chunk as in vLLM 0.10; docs/simulator-model.md).
    vLLM's own offline defaults on H100/H200-class GPUs are 16,384 and 1,024 (set both to
    run them)."""

    max_batched_tokens: int | None = Field(
        None, ge=1, description="Per-iteration token budget (prefill chunks + decodes)."
    )
    max_num_seqs: int | None = Field(None, ge=1, description="Running requests per worker.")
    gpu_memory_utilization: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Share of each GPU's memory the engine may take for weights, KV cache and "
        "activations, as vLLM's flag of that name (its default 0.90; ROLL's agentic examples "
        "set 0.8). What is left after the weights and 2 GB of activations is KV cache.",
    )
    admission: Literal["first_chunk", "prompt"] | None = Field(
        None,
        description="KV reserved at admission: 'first_chunk' (vLLM up to 0.11, which ROLL "
        "pins) or the whole 'prompt' (vLLM 0.32's default).",
    )

    def hardware_params(self) -> HardwareParams:
        """The hardware model's knobs this section sets (the memory share)."""
        from pearl.sim.physics.iteration import HardwareParams

        return HardwareParams(memory_utilisation=self.gpu_memory_utilization)

    def worker_config(self) -> WorkerConfig:
        from pearl.sim.physics.inference_types import rollout_engine_defaults

        base = rollout_engine_defaults()
        budget = self.max_batched_tokens or base.max_batched_tokens
        return dataclasses.replace(
            base,
            max_batched_tokens=budget,
            prefill_max_batched_tokens=budget,
            max_num_seqs=self.max_num_seqs or base.max_num_seqs,
            admission=self.admission or base.admission,
        )


class TrainerConfig(_Model):
    """The asynchronous trainer: step time from the tokens in the batch (paper §3, §6.1).

    step_time_s = overhead_s + flops_per_token_factor * active_params * tokens
                  / (num_training_gpus * peak_flops * mfu)
    The factor counts a forward+backward of the policy (6N) plus forward passes for old and
    reference log-probs (2N each): 10N FLOPs per token. `mfu` is an *effective* utilisation
    over the whole step (attention over long contexts, activation recomputation, gradient
    and weight communication, packing waste), calibrated so that the default workload's
    batch of 64 trajectories (mean final context ~27.4K tokens, so ~1.75M tokens) takes about
    164 s for Qwen3-8B on 16 H100s, the paper's figure (docs/simulator-model.md): 20 s + 145 s.
    """

    flops_per_token_factor: float = Field(
        10.0, gt=0, description="Training FLOPs per token as a multiple of active parameters."
    )
    mfu: float = Field(
        0.0625,
        gt=0,
        le=1,
        description="Effective model FLOPs utilisation of a training step (calibrated).",
    )
    overhead_s: float = Field(
        20.0, ge=0, description="Fixed per-step time (optimizer, weight gather, logging)."
    )
    weight_sync_s: Range = Field(
        default_factory=lambda: Range(low_s=2.0, high_s=4.0),
        description="Time for a serving worker to load a new weight version.",
    )


class CostConfig(_Model):
    """Reconfiguration costs, as measured in the paper's Table 3 (drawn per event, seeded)."""

    expansion_prep_s: Range = Field(
        default_factory=lambda: Range(low_s=56.0, high_s=67.0),
        description="Background preparation of a new preemptible worker (process, model load).",
    )
    expansion_final_s: Range = Field(
        default_factory=lambda: Range(low_s=11.0, high_s=18.0),
        description="Finalisation of a new worker: weight-snapshot sync before admission.",
    )
    borrow_activation_s: Range = Field(
        default_factory=lambda: Range(low_s=5.5, high_s=6.5),
        description="Activating a rollout worker on a borrowed training GPU (restore state).",
    )
    borrow_deactivation_s: Range = Field(
        default_factory=lambda: Range(low_s=3.2, high_s=4.4),
        description="Returning a borrowed GPU: offload rollout state, restore training.",
    )
    training_offload_s: float = Field(
        1.0, ge=0, description="Trainer releasing GPU memory when its GPUs are borrowed."
    )
    init_failure_prob: float = Field(
        0.0, ge=0, le=1, description="Probability that a new worker fails to initialise."
    )


class TraceConfig(TraceShape):
    """Where preemptible GPUs come from: a named or file trace, or a constant budget."""

    trace: str = Field("seg1", description="Bundled segment name (seg1/seg2/seg3) or a file.")
    static_gpus: int | None = Field(
        None,
        ge=1,
        description="If set: a constant rollout budget of this many GPUs, no trace, no borrowing.",
    )
    duration_s: float | None = Field(
        None, gt=0, description="Simulated time; None runs the whole trace (7200 s if static)."
    )
    borrowing: bool | None = Field(
        None,
        description="Offer idle training GPUs to the controller; None: yes with a trace, "
        "no with a static budget.",
    )


class RolloutConfig(RolloutShape):
    """The rollout batch (paper §6.1: 64 trajectories, 32K-token length limit, staleness 1;
    the shared fields are `RolloutShape`'s)."""

    workload: dict[str, Any] = Field(
        default_factory=dict,
        description="Overrides of the workload spec (pearl.specs.workload.WorkloadSpec fields).",
    )

    @field_validator("workload")
    @classmethod
    def _workload_is_valid(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        """Check the overrides when the config is read, not when a world is built from it
        (the length limit is the workload's context cap)."""
        cap = info.data.get("max_context_tokens")
        doc = {**value, **({"context_cap_tokens": cap} if cap is not None else {})}
        try:
            WorkloadSpec.model_validate(doc)
        except ValidationError as err:
            inner = from_validation(err, "workload")
            msg = f"{inner.field}: {inner.message}" if inner.field else inner.message
            if "context_cap_tokens" in msg and cap is not None:
                msg += f" (the cap is rollout.max_context_tokens, {cap})"
            raise ValueError(msg) from None
        return value


class SimConfig(_Model):
    """One simulated run (or several policies on the same world)."""

    seed: int = Field(0, ge=0, description="Seed of every random draw in the run.")
    check_every: int = Field(
        64,
        ge=0,
        description="Check the controller's invariants after every N-th event (1: all, 0: "
        "never); the tests use 1.",
    )
    policies: tuple[str, ...] = Field(
        ("pearl", "rlboost+", "roll", "roll-large"),
        description="Policy names from pearl.control.policies.",
    )
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="GPUs and model.")
    engine: EngineConfig = Field(
        default_factory=EngineConfig, description="Rollout engine scheduler."
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="Trainer model.")
    costs: CostConfig = Field(default_factory=CostConfig, description="Reconfiguration costs.")
    trace: TraceConfig = Field(default_factory=TraceConfig, description="GPU availability.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="Rollout batch.")
    controller: ControllerKnobs = Field(
        default_factory=ControllerKnobs,
        description="Controller knobs, the section `pearl run` configs share (modes, routing "
        "bound, hysteresis), applied to every simulated policy.",
    )

    def worker_hardware(self, tp: int | None = None) -> WorkerHardware:
        """The world's hardware model of one worker of the configured model and GPU on `tp`
        GPUs (default `cluster.gpus_per_worker`), with the engine's memory share."""
        from pearl.sim.physics.iteration import WorkerHardware
        from pearl.specs import get_gpu, get_model

        return WorkerHardware(
            get_model(self.cluster.model),
            get_gpu(self.cluster.gpu),
            tp or self.cluster.gpus_per_worker,
            self.engine.hardware_params(),
        )

    @model_validator(mode="after")
    def _a_worker_can_be_built(self) -> SimConfig:
        """A worker whose weights leave room for KV cache, checked when the config is read
        rather than when the first worker starts."""
        tp = self.cluster.gpus_per_worker
        if self.worker_hardware(tp).kv_capacity_tokens == 0:
            fits = next((n for n in (2, 4, 8) if self.worker_hardware(n).kv_capacity_tokens), None)
            hint = f"; gpus_per_worker={fits} fits" if fits else ""
            share = self.engine.gpu_memory_utilization
            raise ValueError(
                f"cluster.gpus_per_worker: {self.cluster.model}'s weights leave no KV cache on "
                f"{tp} {self.cluster.gpu} GPU(s) at engine.gpu_memory_utilization={share}{hint}"
            )
        return self

    @model_validator(mode="after")
    def _a_static_pool_holds_a_worker(self) -> SimConfig:
        n, tp = self.trace.static_gpus, self.cluster.gpus_per_worker
        if n is not None and n < tp:
            raise ValueError(
                f"trace.static_gpus: {n} GPU(s) hold no worker of cluster.gpus_per_worker={tp}"
            )
        split = next((p for p in self.policies if "disagg:" in p), None)
        if n is not None and split is not None and n // tp < 2:
            raise ValueError(
                f"policies: {split} needs a prefill and a decode worker, and "
                f"trace.static_gpus={n} holds {n // tp} worker(s) of "
                f"cluster.gpus_per_worker={tp} (on a trace, a split on one worker runs "
                "colocated until the pool grows)"
            )
        return self

    def with_updates(self, **dotted: Any) -> SimConfig:
        """A copy with `section.field=value` updates applied (validated like a load)."""
        return with_dotted_updates(self, dotted)


def config_from_dict(doc: Any, source: str = "<config>") -> SimConfig:
    """Validate a parsed config; errors are `InputError(source, field=dotted.path)`."""
    return model_from_dict(SimConfig, doc, source)


def load_config(path: Path) -> SimConfig:
    """Read a YAML config file; missing fields take their defaults."""
    return load_yaml_model(SimConfig, path)


def dump_config(cfg: SimConfig) -> str:
    """The config as YAML text (round-trips through `load_config`)."""
    return dump_yaml_model(cfg)


def config_identity(cfg: SimConfig) -> str:
    """What a simulation is a function of: the config's text and the contents of the files
    it names (a model or GPU file in `cluster`, a trace file in `trace.trace`), so a kept
    result (`pearl.sim.run_store`) never stands for a file edited since."""
    import hashlib

    parts = [dump_config(cfg)]
    for value in (cfg.cluster.model, cfg.cluster.gpu, cfg.trace.trace):
        path = Path(value)
        if path.is_file():
            parts.append(f"{value}:{hashlib.sha256(path.read_bytes()).hexdigest()}")
    return "\n".join(parts)
