"""Model architecture config of a Qwen3 (dense or MoE) decoder, built from HF `config.json`.

Only the fields the forward pass needs are kept. Anything the engine does not implement
(rope scaling, sliding-window attention, other activations, other model types) is refused
with an `InputError` naming the file and the field, never silently ignored.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pearl.errors import InputError

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_moe")
_DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a Qwen3 decoder. `num_experts > 0` selects the MoE variant (Qwen3-30B-A3B)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 40_960
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    initializer_range: float = 0.02
    # MoE (paper's Qwen3-30B-A3B workload): top-k routing over num_experts experts.
    num_experts: int = 0
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = True
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = field(default_factory=tuple)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        src = "<ModelConfig>"
        positive = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        )
        for name in positive:
            if int(getattr(self, name)) <= 0:
                raise InputError(src, "must be a positive integer", field=name)
        if self.num_attention_heads % self.num_key_value_heads:
            raise InputError(
                src,
                "must divide num_attention_heads (grouped-query attention)",
                field="num_key_value_heads",
            )
        if self.head_dim % 2:
            raise InputError(src, "must be even (rotary embedding)", field="head_dim")
        if self.num_experts:
            if not 0 < self.num_experts_per_tok <= self.num_experts:
                raise InputError(src, "must be in 1..num_experts", field="num_experts_per_tok")
            if self.moe_intermediate_size <= 0:
                raise InputError(src, "must be positive for MoE", field="moe_intermediate_size")
        if self.dtype not in _DTYPES:
            raise InputError(src, f"must be one of {_DTYPES}", field="dtype")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer_idx: int) -> bool:
        """HF rule: sparse when not listed in mlp_only_layers and on the sparse step."""
        return (
            self.is_moe
            and layer_idx not in self.mlp_only_layers
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )

    @property
    def kv_bytes_per_token(self) -> int:
        elem = 4 if self.dtype == "float32" else 2
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * elem

    @classmethod
    def tiny(cls, *, moe: bool = False, vocab_size: int = 260, **overrides: Any) -> ModelConfig:
        """A test-sized model (2 layers, hidden 64) over the byte tokenizer's vocabulary."""
        base: dict[str, Any] = dict(
            vocab_size=vocab_size,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            rope_theta=10_000.0,
            max_position_embeddings=2048,
        )
        if moe:
            base.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
        base.update(overrides)
        return cls(**base)

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any], *, source: str = "config.json") -> ModelConfig:
        """Build from an HF config dict; refuse features the engine does not implement."""
        model_type = cfg.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise InputError(
                source,
                f"unsupported model_type {model_type!r} (supported: "
                f"{', '.join(SUPPORTED_MODEL_TYPES)})",
                field="model_type",
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise InputError(source, "only 'silu' is supported", field="hidden_act")
        rope_theta = cfg.get("rope_theta")
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling")
        if isinstance(rope, dict):
            rope_type = rope.get("rope_type", rope.get("type", "default"))
            if rope_type != "default":
                raise InputError(
                    source,
                    f"rope type {rope_type!r} is not supported (only default RoPE)",
                    field="rope_parameters" if "rope_parameters" in cfg else "rope_scaling",
                )
            rope_theta = rope.get("rope_theta", rope_theta)
        if cfg.get("use_sliding_window"):
            raise InputError(
                source, "sliding-window attention is not supported", field="use_sliding_window"
            )
        required = (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
        )
        for name in required:
            if not isinstance(cfg.get(name), int):
                raise InputError(source, "missing or not an integer", field=name)
        heads = cfg["num_attention_heads"]
        num_experts = 0
        if model_type == "qwen3_moe":
            num_experts = int(cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0)
        dtype = cfg.get("dtype") or cfg.get("torch_dtype") or "float32"
        try:
            return cls(
                vocab_size=cfg["vocab_size"],
                hidden_size=cfg["hidden_size"],
                intermediate_size=cfg["intermediate_size"],
                num_hidden_layers=cfg["num_hidden_layers"],
                num_attention_heads=heads,
                num_key_value_heads=int(cfg.get("num_key_value_heads") or heads),
                head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
                rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                rope_theta=float(rope_theta if rope_theta is not None else 10_000.0),
                max_position_embeddings=int(cfg.get("max_position_embeddings", 40_960)),
                tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
                attention_bias=bool(cfg.get("attention_bias", False)),
                initializer_range=float(cfg.get("initializer_range", 0.02)),
                num_experts=num_experts,
                num_experts_per_tok=int(cfg.get("num_experts_per_tok", 0) or 0),
                moe_intermediate_size=int(cfg.get("moe_intermediate_size", 0) or 0),
                norm_topk_prob=bool(cfg.get("norm_topk_prob", True)),
                decoder_sparse_step=int(cfg.get("decoder_sparse_step", 1) or 1),
                mlp_only_layers=tuple(cfg.get("mlp_only_layers") or ()),
                dtype=dtype if dtype in _DTYPES else "float32",
            )
        except InputError as err:  # re-anchor the validation error to the file
            raise InputError(source, err.message, field=err.field) from None

    @classmethod
    def from_json_file(cls, path: str | Path) -> ModelConfig:
        path = Path(path)
        if not path.is_file():
            raise InputError(str(path), "file not found (a checkpoint needs config.json)")
        try:
            cfg = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise InputError(
                str(path), f"not valid JSON: {err.msg}", location=f"line {err.lineno}"
            ) from None
        if not isinstance(cfg, dict):
            raise InputError(str(path), "must be a JSON object")
        return cls.from_hf_dict(cfg, source=str(path))

    def to_hf_dict(self) -> dict[str, Any]:
        """HF-style config.json content (model_type qwen3 or qwen3_moe)."""
        d = asdict(self)
        d["mlp_only_layers"] = list(self.mlp_only_layers)
        d["model_type"] = "qwen3_moe" if self.is_moe else "qwen3"
        d["architectures"] = ["Qwen3MoeForCausalLM" if self.is_moe else "Qwen3ForCausalLM"]
        d["hidden_act"] = "silu"
        d["rope_scaling"] = None
        if not self.is_moe:
            for key in (
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "norm_topk_prob",
                "decoder_sparse_step",
                "mlp_only_layers",
            ):
                d.pop(key)
        return d
