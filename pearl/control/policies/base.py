"""What a policy is: a small frozen description of the knobs the controller obeys, plus an
`Advisor` that answers the controller's questions (which PD config, admit an expansion,
borrow training GPUs) from the workload profile (paper §4.2, §4.3, §4.5, §4.6).

The controller owns the mechanisms (plans, groups, interrupts, returns); a policy only says
which of them are on and how decisions are made. One small class per policy file; the
registry in `pearl.control.policies` picks one by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pearl.control.policies.advice import Advisor
from pearl.control.policies.advisor import make_advisor

PoolSource = Literal["trace", "trace_mean"]
BorrowMode = Literal["never", "gated", "always", "budgeted"]


@dataclass(frozen=True, slots=True)
class Policy:
    """Which controller mechanisms are on, and how decisions are made.

    * `use_preemptible`: take offered preemptible GPUs at all (inter-scale elasticity).
    * `gate_expansion`: ask the advisor before expanding (else admit every offer).
    * `borrow`: `never`; `gated` (advisor's borrow gate); `always` (whenever idle);
      `budgeted` (always, but borrowed workers take at most a per-window budget of turns,
      tuned from the measured training bubble: RLBoost's adaptive offload, see rlboost.py).
    * `adapt_pd`: re-decide the PD config after each rollout step (hysteresis in advisor).
    * `modes`: the PD modes the advisor may choose; `fixed_ratio`: a fixed P:D split.
    * `admit_individually`: each new worker is its own group (admitted as soon as it is
      ready and synced) instead of one group per expansion.
    * `max_staleness`: versions a trajectory's weights may lag the weights it trains.
    * `max_batches_in_flight`: rollout batches in the book at once (current and next).
    * `max_inflight_per_worker`: cap on requests routed to one worker (None: no cap).
    * `sticky_max_imbalance`: a trajectory leaves its prefix worker when that worker has
      more than this many requests above the least-loaded one (None: always sticky).
    * `initial_borrow_budget_turns`: the first budget of a `budgeted` borrow.
    * `group_timeout_s`: a group not admitted this long after it started is cancelled like
      a failed one (checked on every event; None: wait forever).
    * `pool`: where the world's rollout GPUs come from: `trace` (the reserved pool plus the
      trace's preemptible offers) or `trace_mean` (a fixed pool of the reserved GPUs plus
      the trace's time-weighted mean of preemptible ones, rounded: ROLL-Large, paper §6.1).
    """

    name: str
    use_preemptible: bool = True
    gate_expansion: bool = True
    borrow: BorrowMode = "gated"
    adapt_pd: bool = True
    modes: tuple[str, ...] = ("colocated", "disaggregated")
    fixed_ratio: tuple[int, int] | None = None
    admit_individually: bool = False
    max_staleness: int = 1
    max_batches_in_flight: int = 2
    max_inflight_per_worker: int | None = None
    sticky_max_imbalance: int | None = None
    initial_borrow_budget_turns: int = 64
    group_timeout_s: float | None = 900.0
    pool: PoolSource = "trace"

    def make_advisor(self, **kwargs: Any) -> Advisor:
        """The advisor for this policy. Subclasses pick the decision engine or heuristics."""
        return make_advisor(self, **kwargs)
