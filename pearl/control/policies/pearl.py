"""`pearl`: everything on (paper §4): PD mode and P:D ratio chosen by the decision engine with
hysteresis, gated preemptible expansion, gated borrowing of idle training GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.base import BorrowMode, Policy


@dataclass(frozen=True, slots=True)
class Pearl(Policy):
    name: str = "pearl"
    use_preemptible: bool = True
    gate_expansion: bool = True
    borrow: BorrowMode = "gated"
    adapt_pd: bool = True
    modes: tuple[str, ...] = ("colocated", "disaggregated")
