"""Policies by name, the one registry every command uses: `pearl`, `roll`, `roll-large`,
`rlboost+`, the ablations `pearl-colocated`, `pearl-disagg:P:D`, `pearl-no-borrow`,
`pearl-ungated`, the ladder rungs, and the static `fixed:colocated` / `fixed:disagg:P:D`
(see docs/baselines.md)."""

from __future__ import annotations

import re
from collections.abc import Callable

from pearl.control.policies.ablations import (
    LadderExpansion,
    LadderPD,
    PearlColocated,
    PearlFixedDisagg,
    PearlNoBorrow,
    PearlUngated,
)
from pearl.control.policies.advice import Advisor, Verdict, scale_config
from pearl.control.policies.base import Policy
from pearl.control.policies.pearl import Pearl
from pearl.control.policies.rlboost import RLBoostPlus, TurnBudget
from pearl.control.policies.roll import Roll, RollLarge
from pearl.control.policies.static import FixedColocated, FixedDisagg

REGISTRY: dict[str, Callable[[], Policy]] = {
    "pearl": Pearl,
    "roll": Roll,
    "roll-large": RollLarge,
    "rlboost+": RLBoostPlus,
    "pearl-colocated": PearlColocated,
    "pearl-no-borrow": PearlNoBorrow,
    "pearl-ungated": PearlUngated,
    "ladder-expansion": LadderExpansion,
    "ladder-pd": LadderPD,
    "fixed:colocated": FixedColocated,
}
_DISAGG = re.compile(r"pearl-disagg:(\d+):(\d+)")
_FIXED_DISAGG = re.compile(r"fixed:(?:disagg|disaggregated):(\d+):(\d+)")


def policy_names() -> tuple[str, ...]:
    """Every accepted name (`pearl-disagg:P:D` stands for any P, D >= 1)."""
    return (*REGISTRY, "pearl-disagg:P:D", "fixed:disagg:P:D")


def get_policy(name: str) -> Policy:
    """The policy called `name`; ValueError (listing the names) if there is none."""
    name = name.strip()
    m = _DISAGG.fullmatch(name)
    if m:
        return PearlFixedDisagg.with_ratio(int(m.group(1)), int(m.group(2)))
    m = _FIXED_DISAGG.fullmatch(name)
    if m:
        return FixedDisagg.with_ratio(int(m.group(1)), int(m.group(2)), name)
    factory = REGISTRY.get(name)
    if factory is None:
        raise ValueError(f"unknown policy '{name}' (known: {', '.join(policy_names())})")
    return factory()


def borrow_budget(policy: Policy) -> TurnBudget | None:
    """The turn budget a `budgeted` policy's borrows run under (RLBoost's adaptive offload);
    None for every other borrow mode (a borrow lasts until training wants its GPUs)."""
    if policy.borrow != "budgeted":
        return None
    return TurnBudget(policy.initial_borrow_budget_turns)


__all__ = [
    "Advisor",
    "Policy",
    "TurnBudget",
    "Verdict",
    "borrow_budget",
    "get_policy",
    "policy_names",
    "scale_config",
]
