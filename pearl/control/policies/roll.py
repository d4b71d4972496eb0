"""`roll`: fixed-resource ROLL (paper §6.1 baseline): a fixed rollout pool, colocated PD,
asynchronous training with bounded staleness, no elasticity of any kind."""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.base import BorrowMode, Policy


@dataclass(frozen=True, slots=True)
class Roll(Policy):
    name: str = "roll"
    use_preemptible: bool = False
    gate_expansion: bool = False
    borrow: BorrowMode = "never"
    adapt_pd: bool = False
    modes: tuple[str, ...] = ("colocated",)
