"""The decision engine's priors for `pearl run` (paper §4.3): the hardware of one device
slot, and the workload held within the run's own caps.

Priors only: the runtime tracker refits every performance parameter from telemetry, and the
first rollout step's statistics replace the workload prior outright.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pearl.control.profile import HardwarePrior, WorkloadProfile
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
    if cfg.engine.backend == "vllm":  # vLLM sizes its pool in bytes
        kv_pool = cfg.engine.kv_cache_mb * 2.0**20
    else:
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


def workload_prior(cfg: RunConfig, hardware: HardwarePrior, max_turns: int) -> WorkloadProfile:
    """The workload the decision engine assumes before the first rollout step's telemetry:
    `WorkloadProfile`'s defaults (the paper's SWE agent: ~20 turns, contexts up to ~20K
    tokens), held within the limits of this run (`max_turns`, the environment's turn
    cap; `rollout.max_context_tokens`, at which a trajectory ends, so only its last
    observation can carry it past; `rollout.max_new_tokens`). Token and turn fields
    above a cap shrink in proportion, so the prior keeps its shape; environment times have
    no cap and stay the defaults'. Without this, a run whose trajectories are far shorter
    than an SWE agent's would find every configuration infeasible (one trajectory's KV
    past a worker's pool) until its first telemetry, and decline GPUs offered meanwhile."""
    base = WorkloadProfile.prior(hardware)
    ctx_cap = float(cfg.rollout.max_context_tokens)
    new_cap = float(cfg.rollout.max_new_tokens)
    t = min(1.0, max_turns / base.turns_per_traj_max)
    c = min(1.0, ctx_cap / max(base.context_tokens_p90, base.traj_context_tokens_mean))
    tail_turns = min(base.tail_turns, float(max_turns))
    decode = min(base.decode_tokens_per_turn, new_cap)
    return WorkloadProfile.prior(
        hardware,
        turns_per_traj_mean=base.turns_per_traj_mean * t,
        turns_per_traj_p90=base.turns_per_traj_p90 * t,
        turns_per_traj_max=min(base.turns_per_traj_max, float(max_turns)),
        tail_turns=tail_turns,
        context_tokens_mean=base.context_tokens_mean * c,
        context_tokens_p90=base.context_tokens_p90 * c,
        traj_context_tokens_mean=base.traj_context_tokens_mean * c,
        new_prefill_tokens_per_turn=base.new_prefill_tokens_per_turn * c,
        cached_prefix_tokens_per_turn=base.cached_prefix_tokens_per_turn * c,
        decode_tokens_per_turn=decode,
        tail_new_prefill_tokens=min(base.tail_new_prefill_tokens * c, tail_turns * ctx_cap),
        tail_decode_tokens=min(base.tail_decode_tokens, tail_turns * decode),
    )
