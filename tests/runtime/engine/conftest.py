"""Shared fixtures: tiny HF reference models and engines with the same random weights."""

from __future__ import annotations

import pytest
import torch

from pearl.runtime.engine import LLMEngine, ModelConfig


def hf_model(cfg: ModelConfig, seed: int = 0) -> torch.nn.Module:
    """A transformers Qwen3 (or Qwen3-MoE) model with seeded random weights, float32, eval."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    d = cfg.to_hf_dict()
    if cfg.is_moe:
        model = transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(**d))
    else:
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**d))
    with torch.no_grad():  # HF's init leaves small logits; widen them so tokens are distinct
        for name, p in model.named_parameters():
            if "norm" not in name:
                p.normal_(0.0, 0.2)
    return model.float().eval()


def engine_like(model: torch.nn.Module, cfg: ModelConfig, **kwargs) -> LLMEngine:
    engine = LLMEngine(cfg, **kwargs)
    engine.load_weights(model.state_dict(), version=1)
    return engine


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and spinning threads on a shared 2-core
    machine slow every op down by an order of magnitude."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_cfg() -> ModelConfig:
    return ModelConfig.tiny()


@pytest.fixture(scope="module")
def tiny_engine_weights(tiny_cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Weights with a wide enough spread that greedy decoding is not a run of ties."""
    engine = LLMEngine(tiny_cfg, seed=3)
    return {k: v * 8 if v.dim() > 1 else v for k, v in engine.state_dict().items()}
