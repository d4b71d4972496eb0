"""The decision engine's hardware prior for one device slot of `pearl run` (paper §4.3).

A prior only: the runtime tracker refits every performance parameter from telemetry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pearl.control.profile import HardwarePrior
from pearl.runtime.run_config import RunConfig


def slot_prior(cfg: RunConfig, model_cfg: Any) -> HardwarePrior:
    """A CPU slot is one core of float32 maths (about 20 GFLOP/s, 10 GB/s) whose memory is
    the engine's KV pool; a CUDA slot is a bf16 GPU of H100 class. `model_cfg` None: read
    the checkpoint's config.json."""
    import torch

    from pearl.runtime.engine import ModelConfig, Qwen3ForCausalLM

    mc = model_cfg
    if mc is None:
        mc = ModelConfig.from_json_file(Path(str(cfg.model.checkpoint_dir)) / "config.json")
    with torch.device("meta"):
        num_params = sum(p.numel() for p in Qwen3ForCausalLM(mc).parameters())
    cuda = cfg.cluster.use_cuda
    dtype_bytes = 2.0 if cuda else 4.0
    kv_per_token = 2.0 * mc.num_hidden_layers * mc.num_key_value_heads * mc.head_dim * dtype_bytes
    kv_pool = cfg.engine.num_kv_blocks * cfg.engine.block_size * kv_per_token
    return HardwarePrior(
        weight_bytes=num_params * dtype_bytes,
        kv_bytes_per_token=kv_per_token,
        flops_per_token=2.0 * num_params,
        attn_flops_per_token_ctx=4.0 * mc.num_hidden_layers * mc.num_attention_heads * mc.head_dim,
        gpu_flops_per_s=4e14 if cuda else 2e10,
        gpu_hbm_bytes_per_s=2e12 if cuda else 1e10,
        gpu_hbm_bytes=(num_params * dtype_bytes + kv_pool) / 0.9,
        link_bytes_per_s=1e9,
        gpus_per_worker=cfg.cluster.gpus_per_worker,
    )
