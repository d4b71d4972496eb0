"""ModelConfig from HF config.json fields: real Qwen3 shapes, and refusals."""

from __future__ import annotations

import math

import pytest

from pearl.errors import InputError
from pearl.runtime.engine.checkpoint import expected_shapes
from pearl.runtime.engine.model_config import ModelConfig
from pearl.specs import get_model


def hf_config_of(name: str) -> dict:
    """An HF-style config.json for a model of our specs table (as the Hub ships it)."""
    spec = get_model(name)
    moe = spec.num_experts is not None
    cfg = {
        "model_type": "qwen3_moe" if moe else "qwen3",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size or 6144,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "max_position_embeddings": spec.max_position_embeddings,
        "tie_word_embeddings": spec.tie_word_embeddings,
        "use_sliding_window": False,
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
    }
    if moe:
        cfg.update(
            num_experts=spec.num_experts,
            num_experts_per_tok=spec.num_experts_per_tok,
            moe_intermediate_size=spec.moe_intermediate_size,
            norm_topk_prob=spec.norm_topk_prob,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return cfg


@pytest.mark.parametrize("name", ["qwen3-8b", "qwen3-30b-a3b"])
def test_real_model_shapes_match_the_specs(name: str) -> None:
    """Built from the Hub config, the model has the spec's parameter count and KV size."""
    spec = get_model(name)
    cfg = ModelConfig.from_hf_dict(hf_config_of(name))
    assert cfg.is_moe == (spec.num_experts is not None) and cfg.dtype == "bfloat16"
    num_params = sum(math.prod(s) for s in expected_shapes(cfg).values())
    assert num_params == spec.params_total
    assert cfg.kv_bytes_per_token == spec.kv_bytes_per_token_bf16


def test_transformers5_style_fields() -> None:
    """rope_parameters and num_local_experts (transformers 5 names) are understood."""
    d = hf_config_of("qwen3-30b-a3b")
    d.pop("rope_theta")
    d["rope_parameters"] = {"rope_type": "default", "rope_theta": 5e5}
    d["num_local_experts"] = d.pop("num_experts")
    cfg = ModelConfig.from_hf_dict(d)
    assert cfg.rope_theta == 5e5 and cfg.num_experts == 128


def test_round_trip_through_hf_dict() -> None:
    for cfg in (ModelConfig.tiny(), ModelConfig.tiny(moe=True, tie_word_embeddings=True)):
        assert ModelConfig.from_hf_dict(cfg.to_hf_dict()) == cfg


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"num_hidden_layers": None}, "num_hidden_layers"),
        ({"head_dim": 127}, "head_dim"),
        ({"rope_scaling": {"type": "linear", "factor": 2.0}}, "rope_scaling"),
    ],
)
def test_bad_fields_are_named(patch, field) -> None:
    d = hf_config_of("qwen3-8b") | patch
    with pytest.raises(InputError) as err:
        ModelConfig.from_hf_dict(d, source="ckpt/config.json")
    assert err.value.field == field and err.value.source == "ckpt/config.json"


def test_config_json_file_errors(tmp_path) -> None:
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(InputError, match="line 1"):
        ModelConfig.from_json_file(path)
