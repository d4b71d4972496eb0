"""The controller `pearl run` builds: its decision engine's priors before any telemetry."""

from __future__ import annotations

from pathlib import Path

import pytest

from pearl.control.plan import PDConfig
from pearl.control.profile import WorkloadProfile
from pearl.runtime.control_setup import build_controller, configured_policy
from pearl.runtime.device_prior import slot_prior, workload_prior
from pearl.runtime.engine import ModelConfig
from pearl.runtime.run_config import load_run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["demo.yaml", "vllm.yaml"])
def test_before_any_telemetry_the_engine_finds_feasible_configs(name: str) -> None:
    """The example runs' trajectories are a few hundred tokens; the SWE prior's contexts
    (~20K tokens) exceed their workers' KV pools, which made every configuration
    infeasible and declined GPUs offered before the first rollout step."""
    cfg = load_run_config(EXAMPLES / name)
    model_cfg = ModelConfig.tiny(**cfg.model.tiny_overrides)
    controller, _ = build_controller(cfg, configured_policy(cfg), model_cfg, (), 0)
    advisor = controller.advisor
    for config in (PDConfig.colocated(4), PDConfig.disaggregated(2, 2)):
        assert advisor.predicted_makespan_s(config) is not None, config


def test_the_workload_prior_keeps_within_the_runs_caps() -> None:
    cfg = load_run_config(EXAMPLES / "demo.yaml")
    hw = slot_prior(cfg, ModelConfig.tiny(**cfg.model.tiny_overrides))
    prior = workload_prior(cfg, hw, max_turns=5)
    cap = cfg.rollout.max_context_tokens
    assert prior.turns_per_traj_max == prior.tail_turns == 5
    assert prior.turns_per_traj_mean <= prior.turns_per_traj_p90 <= 5
    assert prior.context_tokens_mean <= prior.context_tokens_p90 <= cap
    assert prior.traj_context_tokens_mean <= cap
    assert prior.new_prefill_tokens_per_turn + prior.cached_prefix_tokens_per_turn <= cap
    assert prior.decode_tokens_per_turn == cfg.rollout.max_new_tokens
    assert prior.tail_new_prefill_tokens <= 5 * cap
    assert prior.tail_decode_tokens <= 5 * cfg.rollout.max_new_tokens


def test_caps_above_the_swe_workload_leave_its_prior_alone() -> None:
    cfg = load_run_config(EXAMPLES / "demo.yaml")
    roomy = cfg.model_copy(
        update={
            "rollout": cfg.rollout.model_copy(
                update={"max_context_tokens": 40_000, "max_new_tokens": 4_096}
            )
        }
    )
    hw = slot_prior(roomy, ModelConfig.tiny(**cfg.model.tiny_overrides))
    assert workload_prior(roomy, hw, max_turns=100) == WorkloadProfile.prior(hw)
