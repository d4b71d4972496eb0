"""`pearl run` configuration: one typed tree, loaded from YAML, dumped into every run dir.

Each component gets its own sub-config. Defaults are the demo: a tiny Qwen3-architecture
model learning the `guess` task on a local multi-node Ray cluster whose preemptible nodes
follow a few-minute trace.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pearl.configio import dump_yaml_model, load_yaml_model
from pearl.control.knobs import ControllerKnobs
from pearl.world.sections import ClusterShape, RolloutShape, TraceShape


class _M(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ModelSection(_M):
    """Which policy model runs (the same weights on trainer and rollout workers)."""

    checkpoint_dir: str | None = Field(
        None, description="Local HF checkpoint dir (config.json + *.safetensors); None: tiny model."
    )
    tiny_overrides: dict[str, Any] = Field(
        default_factory=dict, description="Overrides of the tiny test model's config fields."
    )
    init_seed: int = Field(
        0, ge=0, description="Seed of the random initial weights (no checkpoint)."
    )

    @model_validator(mode="after")
    def _tiny_model_builds(self) -> ModelSection:
        """The tiny model's config with these overrides, built when the file is read (a
        checkpoint's config.json is read, with its own errors, when the run starts)."""
        from pearl.errors import InputError
        from pearl.runtime.engine.model_config import ModelConfig

        try:
            ModelConfig.tiny(**self.tiny_overrides)
        except TypeError as err:
            known = ", ".join(ModelConfig.__dataclass_fields__)
            raise ValueError(f"tiny_overrides: {err} (fields: {known})") from None
        except InputError as err:
            raise ValueError(f"tiny_overrides.{err.field}: {err.message}") from None
        return self


class EngineSection(_M):
    """Inference-engine sizing per rollout worker."""

    num_kv_blocks: int = Field(256, ge=8, description="Paged-KV blocks per worker.")
    block_size: int = Field(16, ge=1, description="Tokens per KV block.")
    max_num_batched_tokens: int = Field(512, ge=16, description="Token budget per engine step.")
    max_num_seqs: int = Field(64, ge=1, description="Sequences per engine step.")
    torch_threads: int = Field(1, ge=1, description="Intra-op threads per worker process.")
    backend: Literal["pearl", "vllm"] = Field(
        "pearl",
        description="Rollout engine backend (docs/engines.md): PEARL's engine, or vLLM (the "
        "vllm extra; colocated and disaggregated workers, vLLM to vLLM).",
    )
    kv_cache_mb: int = Field(
        64,
        ge=1,
        description="KV cache per worker in MiB for the vllm backend (PEARL's "
        "engine sizes it with num_kv_blocks).",
    )


class EnvSection(_M):
    """The environment every trajectory interacts with."""

    name: str = Field("guess", description="Registered environment name (guess, code_repair).")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Environment options.")
    num_hosts: int = Field(2, ge=1, description="Parallel environment hosts in the pool.")
    use_ray: bool = Field(False, description="Host environments in Ray actors, not threads.")

    @model_validator(mode="after")
    def _registered(self) -> EnvSection:
        """A known name whose factory takes these kwargs (building one is cheap: its
        sandbox, if any, starts at reset), checked when the config is read, not in a
        worker once Ray is up."""
        from pearl.envs.registry import env_names, make_env

        if self.name not in env_names():
            raise ValueError(f"unknown environment {self.name!r} (known: {', '.join(env_names())})")
        try:
            make_env(self.name, **self.kwargs).close()
        except (TypeError, ValueError) as err:
            raise ValueError(f"kwargs: {self.name}: {err}") from None
        return self


class RolloutSection(RolloutShape):
    """Rollout batches: B = batch_size trajectories in GRPO groups of group_size (the shared
    fields, `RolloutShape`'s, with the demo's defaults)."""

    batch_size: int = RolloutShape.shape_field("batch_size", 16)
    max_context_tokens: int = RolloutShape.shape_field("max_context_tokens", 256)
    group_size: int = Field(4, ge=1, description="Samples per prompt (a GRPO group).")
    max_new_tokens: int = Field(4, ge=1, description="Generation cap per turn, in tokens.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")

    @model_validator(mode="after")
    def _groups(self) -> RolloutSection:
        if self.batch_size % self.group_size:
            raise ValueError("batch_size must be a multiple of group_size")
        return self


class TrainerSection(_M):
    """GRPO on the training devices."""

    num_steps: int = Field(12, ge=1, description="Training steps (rollout batches) to run.")
    lr: float = Field(1e-2, gt=0, description="AdamW learning rate.")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range.")
    kl_coef: float = Field(0.0, ge=0, description="KL penalty against the initial policy.")
    micro_batch_size: int = Field(16, ge=1, description="Trajectories per backward pass.")
    return_grace_s: float = Field(
        10.0, gt=0, description="Borrowed training devices must be back this long after asked."
    )


class ClusterSection(ClusterShape):
    """Device slots (GPUs on a real cluster, CPU slots on a laptop) by zone (the shared
    fields, `ClusterShape`'s, with the demo's defaults)."""

    num_training_gpus: int = ClusterShape.shape_field("num_training_gpus", 2)
    num_dedicated_gpus: int = ClusterShape.shape_field("num_dedicated_gpus", 2)
    address: str | None = Field(None, description="Ray address ('auto'); None: local cluster.")
    use_cuda: bool = Field(False, description="Bind workers to CUDA devices.")
    worker_init_failure_rate: float = Field(
        0.0, ge=0, le=1, description="Chaos testing: probability a worker start fails."
    )
    park_borrowed_workers: bool = Field(
        True,
        description="Keep rollout workers on borrowed training slots alive between borrows "
        "(parked, device state released; pre-started at run start) and activate them, "
        "instead of starting and killing a worker process per borrow.",
    )
    kv_transport: Literal["object_store", "shared_memory"] = Field(
        "object_store",
        description="How KV moves from prefill to decode workers: Ray's object store (any "
        "nodes), or shared memory (prefill and decode workers on one node only; no "
        "per-transfer object-store cost).",
    )

    @model_validator(mode="after")
    def _one_reserved(self) -> ClusterSection:
        if self.num_dedicated_gpus < 1:
            raise ValueError("num_dedicated_gpus must be >= 1: a run needs a reserved rollout slot")
        return self


class TraceSection(TraceShape):
    """Preemptible availability: nodes added and removed by a trace."""

    source: str | None = Field(
        None, description="Trace name or file (pearl trace list); None: no preemptible GPUs."
    )
    scale: str | None = Field(None, description="Scale nodes to slots, 'A/B'.")
    window: str | None = Field(None, description="Cut 'START:END' seconds of the trace.")
    cap: int | None = Field(2, ge=0, description="At most this many preemptible slots.")
    time_scale: float = Field(1.0, gt=0, description="Trace seconds per wall second.")


class ControllerSection(ControllerKnobs):
    """The policy that drives the controller, plus the knobs both worlds share
    (`pearl.control.knobs.ControllerKnobs`: modes, routing bound, hysteresis)."""

    policy: str = Field(
        "pearl", description="pearl, roll, rlboost+, or an ablation name (docs/baselines.md)."
    )
    switch_costs: dict[str, float] = Field(
        default_factory=dict,
        description="Priors of the switch-cost EMAs the cost gates start from, in seconds "
        "(expansion_prep_s, expansion_finalize_s, activation_s, deactivation_s); the "
        "defaults are the paper's GPU measurements.",
    )

    @model_validator(mode="after")
    def _known_costs(self) -> ControllerSection:
        from pearl.control.policies import get_policy

        if get_policy(self.policy).pool != "trace":  # ValueError names the known policies
            raise ValueError(
                f"policy '{self.policy}' is a simulation baseline (a fixed pool at the trace's "
                "mean); on a cluster run 'roll' with cluster.num_dedicated_gpus set to that pool"
            )
        known = {"expansion_prep_s", "expansion_finalize_s", "activation_s", "deactivation_s"}
        for key, value in self.switch_costs.items():
            if key not in known:
                raise ValueError(f"unknown switch cost '{key}' (known: {', '.join(sorted(known))})")
            if value < 0:
                raise ValueError(f"switch cost '{key}' must be >= 0")
        return self


class RunConfig(_M):
    seed: int = Field(0, ge=0, description="Seed of sampling, tasks and chaos.")
    model: ModelSection = Field(default_factory=ModelSection)
    engine: EngineSection = Field(default_factory=EngineSection)
    env: EnvSection = Field(default_factory=EnvSection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    trainer: TrainerSection = Field(default_factory=TrainerSection)
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    trace: TraceSection = Field(default_factory=TraceSection)
    controller: ControllerSection = Field(default_factory=ControllerSection)

    @model_validator(mode="after")
    def _backend_can_serve_the_modes(self) -> RunConfig:
        from pearl.runtime.backends import capabilities_of

        caps = capabilities_of(self.engine.backend)
        modes = self.controller.modes
        if not caps.disaggregation and (modes is None or "disaggregated" in modes):
            raise ValueError(
                f"engine.backend {self.engine.backend} has no PD handoff: set "
                "controller.modes: [colocated]"
            )
        return self


def load_run_config(path: Path | str) -> RunConfig:
    return load_yaml_model(RunConfig, path)


def dump_run_config(cfg: RunConfig) -> str:
    return dump_yaml_model(cfg)
