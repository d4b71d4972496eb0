"""`pearl`: everything on (paper §4): PD mode and P:D ratio chosen by the decision engine with
hysteresis, gated preemptible expansion, gated borrowing of idle training GPUs.

Routing is load-balanced at every turn boundary (`sticky_max_imbalance` 0): a turn stays on
the worker that holds its trajectory's prefix unless another worker has fewer requests in
flight. Where only the initial prompt is reusable (the default workload, docs/
simulator-model.md) a move costs that prompt's prefill, and workers that just joined (a
borrowed training GPU, a preemptible one) take turns of the trajectories already running,
the batch's stragglers among them, instead of only new ones."""

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
    sticky_max_imbalance: int | None = 0
