"""The controller a `pearl run` drives, built from its RunConfig (no I/O, no Ray).

`configured_policy` applies the config's controller knobs to the named policy; `build_controller`
adds the advisor (the decision engine with the device prior and the switch-cost gates
seeded from `controller.switch_costs`) and the controller over the dedicated slots.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pearl.control.controller import Controller
from pearl.control.decision import DecisionConfig
from pearl.control.gates import SwitchCosts, SwitchCostTracker
from pearl.control.policies import get_policy
from pearl.control.policies.base import Policy
from pearl.control.state import ClusterState, Gpu, Zone
from pearl.runtime.device_prior import slot_prior
from pearl.runtime.run_config import RunConfig


def configured_policy(cfg: RunConfig) -> Policy:
    """The named policy with the run's staleness bound, modes and routing bound."""
    c = cfg.controller
    policy = dataclasses.replace(get_policy(c.policy), max_staleness=cfg.rollout.max_staleness)
    if c.modes is not None:
        policy = dataclasses.replace(policy, modes=tuple(c.modes))
    if c.sticky_max_imbalance is not None:
        policy = dataclasses.replace(policy, sticky_max_imbalance=c.sticky_max_imbalance)
    return policy


def build_controller(
    cfg: RunConfig,
    policy: Policy,
    model_cfg: Any,
    training_gpus: tuple[Gpu, ...],
    version: int,
) -> tuple[Controller, SwitchCostTracker]:
    """The controller over the dedicated slots, and the switch-cost book its gates use."""
    costs = SwitchCostTracker(defaults=SwitchCosts(**cfg.controller.switch_costs))
    advisor = policy.make_advisor(
        hardware=slot_prior(cfg, model_cfg),
        batch_size=cfg.rollout.batch_size,
        gpus_per_worker=cfg.cluster.gpus_per_worker,
        costs=costs,
        engine_config=DecisionConfig(
            mode_switch_threshold=cfg.controller.mode_switch_threshold,
            ratio_switch_threshold=cfg.controller.ratio_switch_threshold,
            num_gpus_per_worker=cfg.cluster.gpus_per_worker,
        ),
    )
    dedicated = tuple(
        Gpu(f"d{i}", Zone.DEDICATED, "dedicated") for i in range(cfg.cluster.num_dedicated)
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
