"""The simulated rollout engine's scheduler knobs: the paper's setting by default (vLLM as
ROLL configures it), overridable from the run config, and in force in the world's workers."""

import pytest
from sim_toys import toy

from pearl.control.state import Role
from pearl.sim.config import SimConfig
from pearl.sim.physics.inference import InferenceWorker
from pearl.sim.physics.inference_types import Request, WorkerConfig, rollout_engine_defaults
from pearl.sim.world import SimWorld

from ._inference_helpers import run


def test_default_engine_is_rolls_vllm_configuration() -> None:
    """8,192 tokens per iteration on every worker role and 128 running sequences, as ROLL's
    vLLM strategy leaves vLLM (docs/simulator-model.md, "The setting")."""
    cfg = SimConfig().engine.worker_config()
    assert cfg == rollout_engine_defaults()
    assert (cfg.max_batched_tokens, cfg.prefill_max_batched_tokens, cfg.max_num_seqs) == (
        8192,
        8192,
        128,
    )
    assert cfg.admission == "first_chunk"  # vLLM 0.10.2, which ROLL pins
    assert cfg.kv_watermark_fraction == 0.0


def test_admission_rule_is_a_config_field_with_a_clear_error() -> None:
    """`engine.admission: prompt` reserves whole prompts (vLLM 0.32); anything else is
    refused, naming the field."""
    cfg = SimConfig().with_updates(**{"engine.admission": "prompt"})
    assert cfg.engine.worker_config().admission == "prompt"
    with pytest.raises(ValueError, match="engine.admission"):
        SimConfig().with_updates(**{"engine.admission": "whole"})
    with pytest.raises(ValueError, match="admission"):
        WorkerConfig(admission="whole")


def test_engine_section_reaches_the_worlds_workers() -> None:
    """`engine.max_batched_tokens` sets both budgets (colocated and prefill-only) of the
    workers a world builds; `engine.max_num_seqs` their running-request cap."""
    cfg = SimConfig().with_updates(
        **{"engine.max_batched_tokens": 16384, "engine.max_num_seqs": 1024}
    )
    world = SimWorld(cfg, [], borrowing=False)
    assert world.engine_config.max_batched_tokens == 16384
    assert world.engine_config.prefill_max_batched_tokens == 16384
    assert world.engine_config.max_num_seqs == 1024


@pytest.mark.parametrize(("budget", "iterations"), [(8192, 2), (16384, 1)])
@pytest.mark.parametrize("role", [Role.COLOCATED, Role.PREFILL])
def test_token_budget_chunks_a_long_prompt(budget: int, role: Role, iterations: int) -> None:
    """A 14,000-token prompt takes two prefill iterations under the default budget and one
    under vLLM's offline H100 budget, on colocated and prefill-only workers alike."""
    config = WorkerConfig(max_batched_tokens=budget, prefill_max_batched_tokens=budget)
    w = InferenceWorker("w", toy(), role, config)
    [c] = run(w, [(0.0, Request(1, 0, 14_000, 1))])
    assert c.t_prefill_end_s is not None
    stats = w.take_stats(c.t_prefill_end_s)
    assert stats.num_iterations == iterations
    assert stats.prefill_tokens == 14_000


@pytest.mark.parametrize("share", [0.9, 0.8])
def test_memory_share_sizes_the_kv_cache_of_the_world_and_the_engines_prior(
    share: float,
) -> None:
    """`engine.gpu_memory_utilization` (vLLM's flag; 0.90 by default) sets the KV cache
    the world's workers hold, from the card's memory, the weights and the 2 GB activation
    reserve, and the decision engine's prior is told the same share."""
    from pearl.sim.policy_run import hardware_prior
    from pearl.specs import get_gpu, get_model

    cfg = SimConfig().with_updates(**{"engine.gpu_memory_utilization": share})
    model, gpu = get_model("qwen3-8b"), get_gpu("h100-sxm")
    expected = (gpu.hbm_bytes * share - 2e9 - model.weight_bytes_bf16) / (
        model.kv_bytes_per_token_bf16
    )
    world = SimWorld(cfg, [], borrowing=False)
    assert world._hardware(1).kv_capacity_tokens == pytest.approx(expected, abs=1)
    assert hardware_prior(cfg).usable_memory_fraction == share
    if share == 0.8:  # ~57K tokens fewer than the default
        default = SimWorld(SimConfig(), [], borrowing=False)._hardware(1).kv_capacity_tokens
        assert default - world._hardware(1).kv_capacity_tokens > 50_000


def test_a_memory_share_that_leaves_no_kv_cache_is_refused_naming_it() -> None:
    """Qwen3-30B-A3B's 61 GB fit one H100 at 0.90 but leave nothing at 0.70: refused when
    the config is read, naming the share and the tensor parallelism that fits."""
    ok = SimConfig().with_updates(**{"cluster.model": "qwen3-30b-a3b"})
    assert ok.worker_hardware().kv_capacity_tokens > 100_000
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=0.7; gpus_per_worker=2 fits"):
        ok.with_updates(**{"engine.gpu_memory_utilization": 0.7})
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match="gpu_memory_utilization"):
            SimConfig().with_updates(**{"engine.gpu_memory_utilization": bad})
