"""A model of the user's own, for the simulator and the decision engine: a `ModelSpec` from an
HF `config.json` or a spec YAML (`cluster.model: path/to/config.json`).

The hardware model times dense decoders with grouped-query attention and MoE decoders whose
every layer routes to experts (no shared expert), as the bundled Qwen3 and Llama specs are;
`SUPPORTED` names the HF architectures of that shape. What a config.json does not state is
derived from what it does: the parameter count (embeddings, attention, MLP or experts and
router, norms), the bf16 weight bytes, the KV bytes a token takes, and for an MoE the
parameters a token touches. `derived_params` reproduces every bundled spec's published
count exactly (tests/sim/test_model_file.py).

A GPU file (`cluster.gpu: card.yaml`, `pearl.specs.hardware.get_gpu`) is read by the same
`read_spec_file`, cached until the file changes. Errors are `InputError`s naming the file
and the field.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from pearl.errors import InputError

_SUFFIXES = (".json", ".yaml", ".yml")

# HF architecture -> whether it is an MoE, has q/k norms (Qwen3), has q/k/v biases (Qwen2)
SUPPORTED: dict[str, dict[str, Any]] = {
    "LlamaForCausalLM": {"moe": False, "qk_norm": False, "qkv_bias": False},
    "MistralForCausalLM": {"moe": False, "qk_norm": False, "qkv_bias": False},
    "Qwen2ForCausalLM": {"moe": False, "qk_norm": False, "qkv_bias": True},
    "Qwen3ForCausalLM": {"moe": False, "qk_norm": True, "qkv_bias": False},
    "Qwen3MoeForCausalLM": {"moe": True, "qk_norm": True, "qkv_bias": False},
    "MixtralForCausalLM": {"moe": True, "qk_norm": False, "qkv_bias": False},
}


def _shape(arch: object, source: str, field: str) -> dict[str, Any]:
    """`SUPPORTED`'s entry for an architecture, or an `InputError` naming the ones timed."""
    kind = SUPPORTED.get(str(arch))
    if kind is None:
        raise InputError(
            source,
            f"{arch} is not a shape the simulator's hardware model times; supported: "
            f"{', '.join(SUPPORTED)} (dense GQA decoders, MoE without shared experts)",
            field=field,
        )
    return kind


def derived_params(arch: dict[str, Any]) -> tuple[int, int]:
    """(all parameters, parameters a token touches) of a decoder of this shape (the fields
    of `ModelSpec`: layers, widths, heads, MLP or experts, vocab, tied embeddings)."""
    h = int(arch["hidden_size"])
    layers = int(arch["num_hidden_layers"])
    heads, kv = int(arch["num_attention_heads"]), int(arch["num_key_value_heads"])
    hd = int(arch["head_dim"])
    q, k = heads * hd, kv * hd
    attn = h * q + 2 * h * k + q * h
    if arch.get("qkv_bias"):
        attn += q + 2 * k
    if arch.get("qk_norm"):
        attn += 2 * hd
    norms = 2 * h
    if arch.get("num_experts"):
        experts, topk = int(arch["num_experts"]), int(arch["num_experts_per_tok"])
        expert = 3 * h * int(arch["moe_intermediate_size"])
        router = h * experts
        layer_all = attn + norms + router + experts * expert
        layer_active = attn + norms + router + topk * expert
    else:
        layer_all = layer_active = attn + norms + 3 * h * int(arch["intermediate_size"])
    embed = int(arch["vocab_size"]) * h
    heads_out = embed if not arch.get("tie_word_embeddings") else 0
    rest = embed + heads_out + h  # embeddings, LM head, final norm
    return layers * layer_all + rest, layers * layer_active + rest


def spec_fields(arch: dict[str, Any]) -> dict[str, Any]:
    """`arch` completed with what follows from it: parameter counts, bf16 weight bytes and
    KV bytes a token takes (2 for K and V x layers x KV heads x head_dim x 2 bytes)."""
    kind = _shape(arch.get("architecture"), "<model>", "architecture")
    arch = {"qk_norm": kind["qk_norm"], "qkv_bias": kind["qkv_bias"], **arch}
    total, active = derived_params(arch)
    out = dict(arch)
    out.setdefault("params_total", total)
    if arch.get("num_experts"):
        out.setdefault("params_active_per_token", active)
    embeddings = int(arch["vocab_size"]) * int(arch["hidden_size"])
    embeddings *= 1 if arch.get("tie_word_embeddings") else 2
    out.setdefault("params_non_embedding", int(out["params_total"]) - embeddings)
    out.setdefault("weight_bytes_bf16", 2 * int(out["params_total"]))
    out.setdefault(
        "kv_bytes_per_token_bf16",
        2
        * int(arch["num_hidden_layers"])
        * int(arch["num_key_value_heads"])
        * int(arch["head_dim"])
        * 2,
    )
    return out


def from_hf_config(doc: dict[str, Any], source: str, name: str) -> dict[str, Any]:
    """The `ModelSpec` fields of an HF config.json (a mapping), checked: the architecture
    must be one the hardware model times, and each field it needs present."""
    archs = doc.get("architectures")
    if not isinstance(archs, list) or not archs:
        raise InputError(source, "missing: a list naming the model class", field="architectures")
    arch = str(archs[0])
    kind = _shape(arch, source, "architectures")

    def need(key: str, *alts: str) -> Any:
        for k in (key, *alts):
            if doc.get(k) is not None:
                return doc[k]
        raise InputError(source, f"missing (needed for {arch})", field=key)

    heads = int(need("num_attention_heads"))
    hidden = int(need("hidden_size"))
    fields: dict[str, Any] = {
        "name": name,
        "architecture": arch,
        "num_hidden_layers": need("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": doc.get("num_key_value_heads") or heads,
        "head_dim": doc.get("head_dim") or hidden // heads,
        "vocab_size": need("vocab_size"),
        "max_position_embeddings": need("max_position_embeddings"),
        "rope_theta": doc.get("rope_theta") or 10000.0,
        "qk_norm": kind["qk_norm"],
        "tie_word_embeddings": bool(doc.get("tie_word_embeddings", False)),
    }
    if kind["qkv_bias"]:
        fields["qkv_bias"] = True
    if kind["moe"]:
        if doc.get("shared_expert_intermediate_size"):
            raise InputError(
                source, "shared experts are not modelled", field="shared_expert_intermediate_size"
            )
        fields["num_experts"] = need("num_experts", "num_local_experts")
        fields["num_experts_per_tok"] = need("num_experts_per_tok")
        fields["moe_intermediate_size"] = need("moe_intermediate_size", "intermediate_size")
        fields["norm_topk_prob"] = bool(doc.get("norm_topk_prob", True))
    else:
        fields["intermediate_size"] = need("intermediate_size")
    return fields


def is_spec_path(name: str) -> bool:
    """Whether a `cluster.model` or `cluster.gpu` value names a file rather than a bundled
    spec: it has a folder or a .json, .yaml or .yml suffix."""
    return name.endswith(_SUFFIXES) or os.sep in name or "/" in name


def read_model_fields(path: str | Path) -> dict[str, Any]:
    """`ModelSpec`'s fields from a model file: an HF config.json (`.json`, or a YAML holding
    its `architectures`), or a spec YAML of `ModelSpec`'s fields, of which the
    architecture's are enough (the rest is derived). The name is the file's stem (the
    folder's, for a `config.json`) unless the file gives one."""
    p = Path(path)
    doc = read_spec_file(p)
    default_name = p.resolve().parent.name if p.stem == "config" else p.stem
    name = str(doc.pop("name", None) or default_name)
    hf = p.suffix == ".json" or "architectures" in doc
    fields = from_hf_config(doc, str(p), name) if hf else {**doc, "name": name}
    try:
        return spec_fields(fields)
    except InputError as err:
        raise InputError(str(p), err.message, field=err.field) from None
    except KeyError as err:
        raise InputError(str(p), "missing", field=str(err.args[0])) from None
    except (TypeError, ValueError) as err:
        raise InputError(str(p), f"malformed: {err}") from None


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """The mapping a spec file (JSON or YAML) holds, read again when the file changes."""
    p = Path(path)
    try:
        stat = p.stat()
    except OSError:
        raise InputError(str(p), "file not found") from None
    return dict(_read_mapping(str(p), stat.st_mtime_ns, stat.st_size))


@cache
def _read_mapping(path: str, mtime_ns: int, size: int) -> dict[str, Any]:  # the file's state
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(path, f"cannot read: {err}") from None
    try:
        doc = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        where = f"line {err.lineno}"
        raise InputError(path, f"not valid JSON: {err.msg}", location=where) from None
    except yaml.YAMLError:
        raise InputError(path, "not valid YAML") from None
    if not isinstance(doc, dict):
        raise InputError(path, "expected a mapping at top level")
    return doc
