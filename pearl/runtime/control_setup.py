"""The controller a `pearl run` drives, built from its RunConfig (no I/O, no Ray).

`configured_policy` applies the config's controller knobs to the named policy;
`build_controller` adds the advisor (the decision engine with the device and workload priors
and the switch-cost gates seeded from `controller.switch_costs`) and the controller over the
dedicated slots.
"""

from __future__ import annotations

from typing import Any

from pearl.control.controller import Controller
from pearl.control.gates import SwitchCosts, SwitchCostTracker
from pearl.control.knobs import apply_knobs, decision_config
from pearl.control.policies import get_policy
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState, Gpu, Zone
from pearl.envs.registry import make_env
from pearl.runtime.device_prior import slot_prior, workload_prior
from pearl.runtime.run_config import RunConfig


def configured_policy(cfg: RunConfig) -> Policy:
    """The named policy with the run's staleness bound, modes and routing bound."""
    return apply_knobs(
        get_policy(cfg.controller.policy), cfg.controller, max_staleness=cfg.rollout.max_staleness
    )


def build_controller(
    cfg: RunConfig,
    policy: Policy,
    model_cfg: Any,
    training_gpus: tuple[Gpu, ...],
    version: int,
) -> tuple[Controller, SwitchCostTracker]:
    """The controller over the dedicated slots, and the switch-cost book its gates use."""
    costs = SwitchCostTracker(defaults=SwitchCosts(**cfg.controller.switch_costs))
    hardware = slot_prior(cfg, model_cfg)
    advisor = policy.make_advisor(
        hardware=hardware,
        initial_profile=workload_prior(cfg, hardware, env_max_turns(cfg)),
        batch_size=cfg.rollout.batch_size,
        gpus_per_worker=cfg.cluster.gpus_per_worker,
        costs=costs,
        engine_config=decision_config(cfg.controller, gpus_per_worker=cfg.cluster.gpus_per_worker),
    )
    dedicated = tuple(
        Gpu(f"d{i}", Zone.DEDICATED, "dedicated") for i in range(cfg.cluster.num_dedicated_gpus)
    )
    controller = Controller(
        policy,
        advisor=advisor,
        state=ClusterState(gpus=dedicated),
        batch_size=cfg.rollout.batch_size,
        group_size=cfg.rollout.group_size,
        gpus_per_worker=cfg.cluster.gpus_per_worker,
        training_gpus=training_gpus,
        initial_version=version,
    )
    return controller, costs


def env_max_turns(cfg: RunConfig) -> int:
    """The environment's turn cap (building one is cheap: a sandbox starts at reset)."""
    env = make_env(cfg.env.name, **cfg.env.kwargs)
    try:
        return int(env.max_turns)
    finally:
        env.close()
