"""The controller's knobs, one config section both worlds read: `controller:` in a
simulation config (`pearl.sim.config.SimConfig`) and in a run config
(`pearl.runtime.run_config.RunConfig`, which adds the policy name and switch-cost priors).

`apply_knobs` turns a policy into the one the knobs and the run's staleness bound make it;
`decision_config` is the decision engine's hysteresis for the knobs.
"""

from __future__ import annotations

import dataclasses

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pearl.control.decision import DecisionConfig
from pearl.control.policies.base import Policy

MODES = ("colocated", "disaggregated")


class ControllerKnobs(BaseModel):
    """What a user may set on the controller whatever the world."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    modes: list[str] | None = Field(
        None,
        description="PD modes the decision engine may choose (colocated, disaggregated); "
        "None: those the policy allows. Restricting them keeps the engine's choice of size "
        "and ratio within the allowed modes.",
    )
    sticky_max_imbalance: int | None = Field(
        None,
        ge=0,
        description="Routing: a trajectory leaves the worker holding its prefix when that "
        "worker has more than this many requests above the least-loaded one (None: the "
        "policy's: 0 for pearl and rlboost+, always sticky for roll, roll-large and the "
        "fixed configurations; a large number keeps every trajectory on its worker).",
    )
    mode_switch_threshold: float = Field(
        0.10,
        ge=0,
        lt=1,
        description="Hysteresis: predicted relative makespan saving a PD mode change needs.",
    )
    ratio_switch_threshold: float = Field(
        0.03,
        ge=0,
        lt=1,
        description="Hysteresis: saving a P:D ratio change within a mode needs (<= the mode's).",
    )

    @model_validator(mode="after")
    def _consistent(self) -> ControllerKnobs:
        if self.modes is not None:
            bad = [m for m in self.modes if m not in MODES]
            if bad or not self.modes:
                raise ValueError(
                    f"modes must be a non-empty list of colocated, disaggregated (got {self.modes})"
                )
        if self.ratio_switch_threshold > self.mode_switch_threshold:
            raise ValueError("ratio_switch_threshold must be <= mode_switch_threshold")
        return self


def apply_knobs(policy: Policy, knobs: ControllerKnobs, *, max_staleness: int) -> Policy:
    """`policy` with the run's staleness bound, and the knobs' modes and routing bound
    where they are set."""
    policy = dataclasses.replace(policy, max_staleness=max_staleness)
    if knobs.modes is not None:
        policy = dataclasses.replace(policy, modes=tuple(knobs.modes))
    if knobs.sticky_max_imbalance is not None:
        policy = dataclasses.replace(policy, sticky_max_imbalance=knobs.sticky_max_imbalance)
    return policy


def decision_config(knobs: ControllerKnobs, *, gpus_per_worker: int) -> DecisionConfig:
    """The decision engine's hysteresis thresholds and worker size for the knobs."""
    return DecisionConfig(
        mode_switch_threshold=knobs.mode_switch_threshold,
        ratio_switch_threshold=knobs.ratio_switch_threshold,
        num_gpus_per_worker=gpus_per_worker,
    )
