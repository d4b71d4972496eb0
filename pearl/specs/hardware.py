"""Model and GPU specifications, loaded from the bundled datasheet YAML files.

The figures are datasheet leads (see `data/gpus.yaml`), not measurements: the simulator
applies its own efficiency factors and the runtime tracker learns real speeds from telemetry.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cache
from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pearl.errors import InputError, from_validation
from pearl.specs.model_file import is_spec_path, read_model_fields, read_spec_file


class GpuSpec(BaseModel):
    """One GPU type (dense bf16 datasheet figures)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Short name, e.g. 'h100-sxm'.")
    bf16_tflops: float = Field(gt=0, description="Peak dense bf16 TFLOP/s.")
    hbm_tb_s: float = Field(gt=0, description="Peak HBM bandwidth in TB/s.")
    hbm_gb: float = Field(
        gt=0, description="Device memory in GB (1e9 bytes) as the driver reports it."
    )
    nvlink_gb_s_per_dir: float = Field(gt=0, description="NVLink GB/s per direction.")
    compute_efficiency: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Share of peak FLOP/s the world's hardware model reaches on this card "
        "(a card of your own; the bundled cards' are calibrated, pearl.sim.physics.iteration).",
    )
    memory_efficiency: float | None = Field(
        default=None, gt=0, le=1, description="Share of peak HBM bandwidth, likewise."
    )
    unpinned: str = Field(
        default="",
        description="Why the simulated world's speed on this card is not pinned to a "
        "published measurement (BENCHMARKS.md, the calibration table); empty where rows "
        "within tolerance pin it. Commands that simulate on such a card say so.",
    )

    @property
    def flops_per_s(self) -> float:
        return self.bf16_tflops * 1e12

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tb_s * 1e12

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gb * 1e9


class ModelSpec(BaseModel):
    """Architecture facts of a Qwen3-family decoder, as in its HF config.json."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(description="Short name, e.g. 'qwen3-8b'.")
    architecture: str = Field(description="HF architecture name.")
    num_hidden_layers: int = Field(gt=0, description="Decoder layers.")
    hidden_size: int = Field(gt=0, description="Model width.")
    num_attention_heads: int = Field(gt=0, description="Query heads.")
    num_key_value_heads: int = Field(gt=0, description="KV heads (GQA).")
    head_dim: int = Field(gt=0, description="Per-head dimension.")
    intermediate_size: int | None = Field(default=None, description="Dense MLP width.")
    moe_intermediate_size: int | None = Field(default=None, description="Per-expert MLP width.")
    num_experts: int | None = Field(default=None, description="Experts per MoE layer.")
    num_experts_per_tok: int | None = Field(default=None, description="Routed experts per token.")
    norm_topk_prob: bool | None = Field(default=None, description="Renormalise top-k weights.")
    vocab_size: int = Field(gt=0, description="Vocabulary size.")
    max_position_embeddings: int = Field(gt=0, description="Context limit in tokens.")
    rope_theta: float = Field(gt=0, description="RoPE base.")
    qk_norm: bool = Field(default=True, description="RMSNorm on q and k per head.")
    qkv_bias: bool = Field(default=False, description="Biases on q, k and v (Qwen2).")
    tie_word_embeddings: bool = Field(default=False, description="Share input/output embedding.")
    params_total: int = Field(gt=0, description="All parameters.")
    params_non_embedding: int | None = Field(default=None, description="Without embeddings.")
    params_active_per_token: int | None = Field(default=None, description="MoE active params.")
    weight_bytes_bf16: int = Field(gt=0, description="Weight bytes in bf16.")
    kv_bytes_per_token_bf16: int = Field(gt=0, description="KV-cache bytes per token in bf16.")

    @property
    def is_moe(self) -> bool:
        return self.num_experts is not None

    @property
    def active_params(self) -> int:
        """Parameters touched per token (all of them for a dense model)."""
        return self.params_active_per_token or self.params_total


def _load_yaml(name: str) -> dict:
    text = resources.files("pearl.specs").joinpath("data", name).read_text()
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise InputError(name, "expected a mapping at top level")
    return data


def _build(cls: type[BaseModel], source: str, key: str, raw: object) -> BaseModel:
    if not isinstance(raw, dict):
        raise InputError(source, "expected a mapping", location=key)
    try:
        return cls(name=key, **raw)
    except ValidationError as err:
        raise from_validation(err, source, location=key) from None


@cache
def gpu_specs() -> dict[str, GpuSpec]:
    """All bundled GPU types by name."""
    return {k: _build(GpuSpec, "gpus.yaml", k, v) for k, v in _load_yaml("gpus.yaml").items()}  # type: ignore[misc]


@cache
def model_specs() -> dict[str, ModelSpec]:
    """All bundled models by name (Qwen3-8B, Qwen3-30B-A3B)."""
    return {k: _build(ModelSpec, "models.yaml", k, v) for k, v in _load_yaml("models.yaml").items()}  # type: ignore[misc]


def get_gpu(name: str) -> GpuSpec:
    """A bundled GPU type by name, or a GPU file of `GpuSpec`'s fields (a card of your own:
    its datasheet, and measured efficiencies where you have them)."""
    specs = gpu_specs()
    if name in specs:
        return specs[name]
    if is_spec_path(name):
        doc = read_spec_file(name)
        doc.setdefault("name", Path(name).stem)
        doc.setdefault(
            "unpinned",
            "a card of your own: its datasheet with "
            + (
                "the efficiencies the file gives"
                if doc.get("compute_efficiency") and doc.get("memory_efficiency")
                else "the world's fallback efficiencies (set compute_efficiency and "
                "memory_efficiency in the file to measured ones)"
            ),
        )
        try:
            return GpuSpec(**doc)
        except ValidationError as err:
            raise from_validation(err, name) from None
        except TypeError as err:
            raise InputError(name, f"malformed: {err}") from None
    raise InputError(
        "<argument>",
        f"unknown GPU '{name}'; known: {', '.join(sorted(specs))}, or a GPU file (YAML)",
        field="gpu",
    )


def model_labels(names: Sequence[str]) -> dict[str, str]:
    """Each model's name for a table's row: a bundled model's own, a model file's spec name
    (its folder for a config.json, else its stem) unless two files share one, which keep
    their paths."""
    labels = {n: get_model(n).name if is_spec_path(n) else n for n in names}
    counts = Counter(labels.values())
    return {n: label if counts[label] == 1 else n for n, label in labels.items()}


def get_model(name: str) -> ModelSpec:
    """A bundled model by name, or a model file: an HF config.json or a spec YAML
    (`pearl.specs.model_file`); a file is read again when it changes."""
    specs = model_specs()
    if name in specs:
        return specs[name]
    if is_spec_path(name):
        try:
            return ModelSpec(**read_model_fields(name))
        except ValidationError as err:
            raise from_validation(err, name) from None
    raise InputError(
        "<argument>",
        f"unknown model '{name}'; known: {', '.join(sorted(specs))}, or a model file "
        "(an HF config.json or a spec YAML)",
        field="model",
    )
