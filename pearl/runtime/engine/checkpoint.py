"""Local HF safetensors checkpoints: load (with errors naming file and tensor) and save.

A checkpoint directory holds `config.json` and either `model.safetensors`, or shards listed
in `model.safetensors.index.json`, or any `*.safetensors` files. MoE experts are accepted
both per expert (`mlp.experts.{e}.{gate,up,down}_proj.weight`, as on the Hub) and fused
(`mlp.experts.gate_up_proj` / `down_proj`, transformers 5 in memory) and are fused here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from pearl.errors import InputError
from pearl.runtime.engine.model import Qwen3ForCausalLM
from pearl.runtime.engine.model_config import ModelConfig

_EXPERT_KEY = re.compile(
    r"^(model\.layers\.\d+\.mlp\.experts)\.(\d+)\.(gate|up|down)_proj\.weight$"
)
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter name of the model and its shape (built on the meta device)."""
    with torch.device("meta"):
        model = Qwen3ForCausalLM(cfg)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def normalize_state_dict(
    cfg: ModelConfig,
    state_dict: dict[str, torch.Tensor],
    *,
    source: str,
    file_of: dict[str, str] | None = None,
    shapes: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, torch.Tensor]:
    """Fuse per-expert tensors, drop buffers, and check names and shapes against cfg.

    Raises InputError(file, message, field=tensor name) for a missing, unexpected or
    wrongly shaped tensor; `file_of` maps tensor names to the file they came from.
    `shapes`: the model's parameter shapes when the caller has them (a live engine); else
    they come from a model built on the meta device (its first build in a process costs
    seconds).
    """
    file_of = file_of or {}
    sd = {k: v for k, v in state_dict.items() if not k.endswith(_IGNORED_SUFFIXES)}
    sd = _fuse_experts(cfg, sd, source=source, file_of=file_of)
    shapes = shapes if shapes is not None else expected_shapes(cfg)
    for name, tensor in sd.items():
        where = file_of.get(name, source)
        if name not in shapes:
            raise InputError(where, "unexpected tensor (not part of this model config)", field=name)
        if tuple(tensor.shape) != shapes[name]:
            raise InputError(
                where,
                f"shape {list(tensor.shape)} does not match the config's {list(shapes[name])}",
                field=name,
            )
    optional = {"lm_head.weight"} if cfg.tie_word_embeddings else set()
    for name in shapes:
        if name not in sd and name not in optional:
            raise InputError(source, "missing tensor", field=name)
    if cfg.tie_word_embeddings:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


def _fuse_experts(
    cfg: ModelConfig, sd: dict[str, torch.Tensor], *, source: str, file_of: dict[str, str]
) -> dict[str, torch.Tensor]:
    per_expert: dict[str, dict[tuple[int, str], str]] = {}
    for key in sd:
        m = _EXPERT_KEY.match(key)
        if m:
            per_expert.setdefault(m.group(1), {})[(int(m.group(2)), m.group(3))] = key
    if not per_expert:
        return sd
    out = {k: v for k, v in sd.items() if not _EXPERT_KEY.match(k)}
    for prefix, parts in per_expert.items():
        gate_up, down = [], []
        for e in range(cfg.num_experts):
            names: dict[str, str] = {}
            for p in ("gate", "up", "down"):
                name = parts.get((e, p))
                if name is None:
                    raise InputError(
                        source, "missing tensor", field=f"{prefix}.{e}.{p}_proj.weight"
                    )
                names[p] = name
            try:
                gate_up.append(torch.cat([sd[names["gate"]], sd[names["up"]]], dim=0))
            except RuntimeError:
                raise InputError(
                    file_of.get(names["gate"], source),
                    "gate/up expert shapes do not match",
                    field=names["gate"],
                ) from None
            down.append(sd[names["down"]])
        try:
            out[f"{prefix}.gate_up_proj"] = torch.stack(gate_up)
            out[f"{prefix}.down_proj"] = torch.stack(down)
        except RuntimeError:
            raise InputError(source, "experts have different shapes", field=prefix) from None
    return out


def _safetensor_files(ckpt: Path) -> list[Path]:
    index = ckpt / "model.safetensors.index.json"
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise InputError(
                str(index), "not a safetensors index (needs 'weight_map')", field="weight_map"
            ) from None
        files = [ckpt / f for f in sorted(set(weight_map.values()))]
        for f in files:
            if not f.is_file():
                raise InputError(str(f), "shard listed in model.safetensors.index.json is missing")
        return files
    files = sorted(ckpt.glob("*.safetensors"))
    if not files:
        raise InputError(str(ckpt), "no *.safetensors weight files in the checkpoint directory")
    return files


def check_checkpoint(checkpoint_dir: str | Path) -> ModelConfig:
    """What `load_checkpoint` checks, from the files' headers alone (no weight is read):
    config.json, every safetensors file readable, every tensor's name and shape. A run
    calls it before it starts anything, so a bad checkpoint is one line, not an actor's
    death."""
    return _read(checkpoint_dir, _meta_tensors)[0]


def load_checkpoint(
    checkpoint_dir: str | Path, *, dtype: torch.dtype | None = None
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """Read config.json and the safetensors weights of an HF-style checkpoint directory."""

    def tensors(f: Path) -> dict[str, torch.Tensor]:
        loaded = load_file(str(f))
        return loaded if dtype is None else {k: t.to(dtype) for k, t in loaded.items()}

    return _read(checkpoint_dir, tensors)


def _meta_tensors(f: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors as shapes on the meta device (its header alone)."""
    from safetensors import safe_open

    with safe_open(str(f), framework="pt") as handle:
        return {
            name: torch.empty(handle.get_slice(name).get_shape(), device="meta")
            for name in handle.keys()  # noqa: SIM118 (a safetensors handle, not a dict)
        }


def _read(
    checkpoint_dir: str | Path, tensors_of: Callable[[Path], dict[str, torch.Tensor]]
) -> tuple[ModelConfig, dict[str, torch.Tensor]]:
    """config.json, then each weight file's tensors (`tensors_of`), checked against it."""
    ckpt = Path(checkpoint_dir)
    if not ckpt.is_dir():
        raise InputError(str(ckpt), "checkpoint directory not found")
    cfg = ModelConfig.from_json_file(ckpt / "config.json")
    sd: dict[str, torch.Tensor] = {}
    file_of: dict[str, str] = {}
    for f in _safetensor_files(ckpt):
        try:
            tensors = tensors_of(f)
        except (SafetensorError, OSError, ValueError) as err:
            raise InputError(str(f), f"cannot read safetensors file: {err}") from None
        sd.update(tensors)
        file_of.update(dict.fromkeys(tensors, str(f)))
    return cfg, normalize_state_dict(cfg, sd, source=str(ckpt), file_of=file_of)


def save_checkpoint(
    checkpoint_dir: str | Path, cfg: ModelConfig, state_dict: dict[str, torch.Tensor]
) -> Path:
    """Write config.json and model.safetensors (tied lm_head omitted, as HF does)."""
    ckpt = Path(checkpoint_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "config.json").write_text(json.dumps(cfg.to_hf_dict(), indent=2))
    tensors = {
        k: v.detach().to("cpu").contiguous().clone()
        for k, v in state_dict.items()
        if not (cfg.tie_word_embeddings and k == "lm_head.weight")
    }
    save_file(tensors, str(ckpt / "model.safetensors"))
    return ckpt
