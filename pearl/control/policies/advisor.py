"""Advisors: the decision side of a policy.

`HeuristicAdvisor` needs no workload model: it keeps the current PD shape when the budget
changes, never switches on its own, and admits an expansion or a borrow when the expected
window is longer than the measured (EMA) cost of the switch. It is what the fixed baselines
use, and what PEARL falls back to before the decision engine has a profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pearl.control.plan import PDConfig
from pearl.control.policies.advice import Verdict, scale_config
from pearl.control.policies.engine_advisor import EngineAdvisor

if TYPE_CHECKING:
    from pearl.control.policies.advice import Advisor
    from pearl.control.policies.base import Policy


class HeuristicAdvisor:
    """Keep the shape; gate on window length vs EMA switch cost (prior `default_cost_s`)."""

    def __init__(
        self,
        policy: Policy,
        *,
        default_expand_cost_s: float = 75.0,
        default_borrow_cost_s: float = 10.0,
        default_return_cost_s: float = 3.8,
        ema_alpha: float = 0.3,
        margin: float = 2.0,
    ) -> None:
        self.policy = policy
        self.alpha = ema_alpha
        self.margin = margin
        # a borrow costs its activation and its (mandatory) return: the borrow EMA takes
        # samples of measured activation + the current return estimate
        self.cost_s = {"expand": default_expand_cost_s, "borrow": default_borrow_cost_s}
        self.return_cost_s = default_return_cost_s

    def _shape(self, num_workers: int, current: PDConfig | None) -> PDConfig:
        p = self.policy
        if p.fixed_ratio is not None and num_workers >= 2:
            ratio = PDConfig.disaggregated(*p.fixed_ratio)
            return scale_config(ratio, num_workers, mode="disaggregated")
        if "disaggregated" not in p.modes:
            return PDConfig.colocated(num_workers)
        if "colocated" not in p.modes and num_workers >= 2:
            return scale_config(current, num_workers, mode="disaggregated")
        return scale_config(current, num_workers)

    def observe(self, time_s: float, turns: Sequence[Any], worker_steps: Sequence[Any]) -> None:
        return None

    def predicted_makespan_s(self, config: PDConfig) -> float | None:
        return None  # no model of the makespan

    def choose(self, num_workers: int, current: PDConfig | None) -> PDConfig:
        return self._shape(num_workers, current)

    def redecide(self, num_workers: int, current: PDConfig) -> PDConfig | None:
        want = self._shape(num_workers, current)
        return None if want == current else want

    def _window_gate(self, kind: str, window_s: float | None) -> Verdict:
        cost = self.cost_s[kind]
        if window_s is None:
            return Verdict(True, f"no expected window; admit ({kind} cost ~{cost:.0f}s)", 0, cost)
        ok = window_s > self.margin * cost
        return Verdict(ok, f"window {window_s:.0f}s vs {self.margin}x cost {cost:.0f}s", 0, cost)

    def expansion(
        self, current: PDConfig | None, target: PDConfig, window_s: float | None
    ) -> Verdict:
        if not self.policy.gate_expansion:
            return Verdict(True, "ungated")
        return self._window_gate("expand", window_s)

    def borrow(
        self,
        current: PDConfig | None,
        target: PDConfig,
        window_s: float,
        batches_in_flight: int = 1,
    ) -> Verdict:
        if self.policy.borrow in ("always", "budgeted"):
            return Verdict(True, "ungated")
        return self._window_gate("borrow", window_s)

    def record_switch(
        self,
        kind: str,
        prep_s: float,
        finalize_s: float,
        *,
        borrowed: bool,
        censored: bool = False,
    ) -> None:
        cost_s = max(0.0, prep_s + finalize_s)
        if kind == "return":
            self.return_cost_s = (1 - self.alpha) * self.return_cost_s + self.alpha * cost_s
            return
        key = "borrow" if kind == "borrow" else "expand"
        if key == "borrow":
            cost_s += self.return_cost_s
        if censored and cost_s <= self.cost_s[key]:  # a lower bound below the estimate
            return
        self.cost_s[key] = (1 - self.alpha) * self.cost_s[key] + self.alpha * cost_s


def make_advisor(
    policy: Policy,
    *,
    hardware: Any = None,
    batch_size: int = 64,
    gpus_per_worker: int = 1,
    **kwargs: Any,
) -> Advisor:
    """The policy's advisor: with a `HardwarePrior` (`hardware`), the decision engine with
    the runtime tracker and cost gates (`EngineAdvisor`); without one, `HeuristicAdvisor`.
    Extra keyword arguments go to the advisor's constructor."""
    if hardware is None:
        return HeuristicAdvisor(policy, **kwargs)
    return EngineAdvisor(
        policy,
        hardware=hardware,
        batch_size=batch_size,
        gpus_per_worker=gpus_per_worker,
        **kwargs,
    )
