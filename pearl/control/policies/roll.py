"""Fixed-resource ROLL (paper §6.1 baselines): a fixed rollout pool, colocated PD,
asynchronous training with bounded staleness, no elasticity of any kind.

* `roll`: on the reserved pool alone (the paper's headline baseline).
* `roll-large`: the same on a larger fixed pool, the reserved GPUs plus the trace's
  time-weighted mean of preemptible ones, rounded (14, 10 and 12 GPUs on seg1-seg3, as
  the paper's ROLL-Large). The world builds that pool; the controller is `roll`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from pearl.control.policies.base import BorrowMode, Policy, PoolSource


@dataclass(frozen=True, slots=True)
class Roll(Policy):
    name: str = "roll"
    use_preemptible: bool = False
    gate_expansion: bool = False
    borrow: BorrowMode = "never"
    adapt_pd: bool = False
    modes: tuple[str, ...] = ("colocated",)


@dataclass(frozen=True, slots=True)
class RollLarge(Roll):
    name: str = "roll-large"
    pool: PoolSource = "trace_mean"
