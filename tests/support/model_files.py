"""A bundled model's config.json, as its model card publishes it (its architecture fields),
for tests of models of your own (`cluster.model: path/to/config.json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pearl.specs import model_specs

HF_KEYS = (
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings", "rope_theta",
    "tie_word_embeddings", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
    "norm_topk_prob",
)  # fmt: skip


def hf_config(name: str, **changes: Any) -> dict[str, Any]:
    """The config.json of bundled model `name`, with `changes`."""
    spec = model_specs()[name].model_dump()
    doc = {k: spec[k] for k in HF_KEYS if spec.get(k) is not None}
    return {"architectures": [spec["architecture"]], **doc, **changes}


def write_hf_config(folder: Path, name: str, **changes: Any) -> Path:
    """`folder/config.json` holding `hf_config(name, **changes)`; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(hf_config(name, **changes)))
    return path
