"""Checkpoint loading: HF safetensors dirs load; bad ones fail naming file and tensor."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from pearl.errors import InputError
from pearl.runtime.engine import LLMEngine, ModelConfig, SamplingParams
from pearl.runtime.engine.checkpoint import check_checkpoint, load_checkpoint, save_checkpoint

from .conftest import hf_model


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_hf_save_pretrained_dir_loads_and_matches(tmp_path, moe: bool) -> None:
    """A directory written by transformers' save_pretrained runs with HF's logits."""
    cfg = ModelConfig.tiny(moe=moe)
    hf = hf_model(cfg)
    hf.save_pretrained(tmp_path)
    engine = LLMEngine(checkpoint_dir=tmp_path, block_size=4)
    assert engine.config.is_moe == moe and engine.config.num_hidden_layers == 2
    ours = engine.state_dict()
    for name, t in hf.state_dict().items():
        assert torch.equal(ours[name], t), name
    out = engine.generate([[1, 2, 3, 4, 5]], SamplingParams(temperature=0, max_new_tokens=3))
    with torch.no_grad():
        first = int(hf(torch.tensor([[1, 2, 3, 4, 5]])).logits[0, -1].argmax())
    assert out[0].output_token_ids[0] == first


def test_per_expert_moe_layout_is_fused(tmp_path) -> None:
    """Hub-style per-expert MoE tensors load into the fused layout."""
    cfg = ModelConfig.tiny(moe=True)
    sd = LLMEngine(cfg, seed=4).state_dict()
    flat = {}
    for name, t in sd.items():
        if name.endswith("experts.gate_up_proj"):
            prefix = name[: -len(".gate_up_proj")]
            for e in range(cfg.num_experts):
                gate, up = t[e].chunk(2, dim=0)
                flat[f"{prefix}.{e}.gate_proj.weight"] = gate.clone()
                flat[f"{prefix}.{e}.up_proj.weight"] = up.clone()
        elif name.endswith("experts.down_proj"):
            prefix = name[: -len(".down_proj")]
            for e in range(cfg.num_experts):
                flat[f"{prefix}.{e}.down_proj.weight"] = t[e].clone()
        else:
            flat[name] = t.clone()
    save_checkpoint(tmp_path, cfg, flat)
    _, loaded = load_checkpoint(tmp_path)
    assert all(torch.equal(loaded[k], v) for k, v in sd.items())


# every bad checkpoint is refused alike by the loader and by the header check a run makes
# before it starts anything
READERS = pytest.mark.parametrize(
    "read", [load_checkpoint, check_checkpoint], ids=["load", "headers"]
)


@pytest.fixture
def good_ckpt(tmp_path):
    cfg = ModelConfig.tiny()
    return save_checkpoint(tmp_path / "ckpt", cfg, LLMEngine(cfg).state_dict())


@READERS
def test_missing_config_json(good_ckpt, read) -> None:
    (good_ckpt / "config.json").unlink()
    with pytest.raises(InputError, match="config.json"):
        read(good_ckpt)


@READERS
def test_missing_weights_file(good_ckpt, read) -> None:
    (good_ckpt / "model.safetensors").unlink()
    with pytest.raises(InputError, match="no \\*.safetensors"):
        read(good_ckpt)


@READERS
def test_missing_shard_from_index(good_ckpt, read) -> None:
    index = {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}
    (good_ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(InputError) as err:
        read(good_ckpt)
    assert "model-00002-of-00002.safetensors" in str(err.value)


@READERS
def test_missing_tensor_is_named(good_ckpt, read) -> None:
    path = good_ckpt / "model.safetensors"
    sd = load_file(str(path))
    del sd["model.layers.1.self_attn.k_norm.weight"]
    save_file(sd, str(path))
    with pytest.raises(InputError) as err:
        read(good_ckpt)
    assert err.value.field == "model.layers.1.self_attn.k_norm.weight"


def test_wrong_shape_names_file_and_tensor(good_ckpt) -> None:
    path = good_ckpt / "model.safetensors"
    sd = load_file(str(path))
    sd["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(sd, str(path))
    with pytest.raises(InputError) as err:
        LLMEngine(checkpoint_dir=good_ckpt)
    assert err.value.field == "model.layers.0.mlp.up_proj.weight"
    assert err.value.source.endswith("model.safetensors") and "[3, 3]" in str(err.value)
    with pytest.raises(InputError) as err:
        check_checkpoint(good_ckpt)
    assert err.value.field == "model.layers.0.mlp.up_proj.weight" and "[3, 3]" in str(err.value)


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_the_header_check_passes_a_good_checkpoint_without_reading_weights(
    tmp_path, monkeypatch, moe: bool
) -> None:
    cfg = ModelConfig.tiny(moe=moe)
    hf_model(cfg).save_pretrained(tmp_path)  # MoE experts per expert, as on the Hub

    def no_weights(*args, **kwargs):
        raise AssertionError("the header check read weights")

    monkeypatch.setattr("pearl.runtime.engine.checkpoint.load_file", no_weights)
    assert check_checkpoint(tmp_path).is_moe == moe


@READERS
def test_corrupt_safetensors_file(good_ckpt, read) -> None:
    (good_ckpt / "model.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(InputError, match="model.safetensors"):
        read(good_ckpt)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"model_type": "llama"}, "model_type"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling"),
        ({"use_sliding_window": True}, "use_sliding_window"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
    ],
)
@READERS
def test_unsupported_config_is_refused(good_ckpt, read, patch, field) -> None:
    path = good_ckpt / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(patch)
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError) as err:
        read(good_ckpt)
    assert err.value.field == field and err.value.source.endswith("config.json")


def test_missing_directory(tmp_path) -> None:
    with pytest.raises(InputError, match="not found"):
        LLMEngine(checkpoint_dir=tmp_path / "nope")


def test_engine_loads_a_checkpoint_snapshot_by_version(tmp_path) -> None:
    """load_checkpoint(dir, version) installs the weights; another architecture is refused."""
    cfg = ModelConfig.tiny()
    source = LLMEngine(cfg, seed=21)
    save_checkpoint(tmp_path / "v5", cfg, source.state_dict())
    engine = LLMEngine(cfg, seed=1)
    engine.load_checkpoint(tmp_path / "v5", version=5)
    assert engine.weight_version == 5
    assert all(torch.equal(engine.state_dict()[k], v) for k, v in source.state_dict().items())
    other = ModelConfig.tiny(num_hidden_layers=3)
    save_checkpoint(tmp_path / "other", other, LLMEngine(other).state_dict())
    with pytest.raises(InputError, match="config.json"):
        engine.load_checkpoint(tmp_path / "other", version=6)
    assert engine.weight_version == 5
