"""`EngineAdvisor`: PEARL's decisions from telemetry (paper §4.2, §4.3, §4.5, §4.6, §5).

* after each rollout step the `RuntimeTracker` folds the step's telemetry into the profile;
* `choose` / `redecide` ask the `DecisionEngine` (minimum predicted makespan over the
  policy's modes, hysteresis on mode and ratio changes, forced switch when infeasible);
* `expansion` / `borrow` are the cost gates (`gates.py`): predicted makespan saving against
  the EMA of measured switch costs (expansion: preparation + finalisation; borrowing:
  activation + return), unless the policy turns the gate off.

Every answer is also kept in `log` (one line each) for decision timelines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pearl.control.decision import DecisionConfig, DecisionEngine
from pearl.control.gates import SwitchCostTracker, borrow_gate, expansion_gate
from pearl.control.makespan import predict
from pearl.control.plan import PDConfig
from pearl.control.policies.advice import Verdict
from pearl.control.profile import HardwarePrior, WorkloadProfile
from pearl.control.tracker import RuntimeTracker

if TYPE_CHECKING:
    from pearl.control.policies.base import Policy


class EngineAdvisor:
    """Decision engine + runtime tracker + cost gates behind the `Advisor` protocol."""

    def __init__(
        self,
        policy: Policy,
        *,
        hardware: HardwarePrior,
        batch_size: int,
        gpus_per_worker: int = 1,
        engine_config: DecisionConfig | None = None,
        costs: SwitchCostTracker | None = None,
        initial_profile: WorkloadProfile | None = None,
    ) -> None:
        self.policy = policy
        self.batch_size = batch_size
        self.gpus_per_worker = gpus_per_worker
        self.tracker = RuntimeTracker(hardware, initial=initial_profile)
        self.engine = DecisionEngine(
            engine_config or DecisionConfig(num_gpus_per_worker=gpus_per_worker)
        )
        self.costs = costs or SwitchCostTracker()
        self.fixed = PDConfig.disaggregated(*policy.fixed_ratio) if policy.fixed_ratio else None
        self.modes = tuple(m for m in policy.modes if m in ("colocated", "disaggregated"))
        self.log: list[str] = []

    @property
    def profile(self) -> WorkloadProfile:
        return self.tracker.profile

    def predicted_makespan_s(self, config: PDConfig) -> float | None:
        p = predict(config, self.profile, self.batch_size, num_gpus_per_worker=self.gpus_per_worker)
        return p.makespan_s if p.feasible else None

    def _makespan_s(self, config: PDConfig | None) -> float:
        """The gates' makespan: infinite where there is no config or it is infeasible."""
        m = None if config is None else self.predicted_makespan_s(config)
        return float("inf") if m is None else m

    def observe(self, time_s: float, turns: Sequence[Any], worker_steps: Sequence[Any]) -> None:
        if not (turns or worker_steps):
            return
        try:
            self.tracker.observe_step(list(turns), list(worker_steps))
        except ValueError as err:  # bad telemetry must not stop the controller
            self.log.append(f"t={time_s:.3f}: telemetry ignored: {err}")

    def _decide(self, num_workers: int, current: PDConfig | None) -> Any:
        d = self.engine.decide(
            self.profile, num_workers, self.batch_size, current, modes=self.modes, fixed=self.fixed
        )
        self.log.append(f"decide n={num_workers} current={current}: {d.chosen} ({d.reason})")
        return d

    def choose(self, num_workers: int, current: PDConfig | None) -> PDConfig:
        if current is None and "colocated" in self.modes and self.fixed is None:
            # No configuration yet: colocation is the incumbent, so disaggregation must save
            # the mode-switch threshold, the bar it meets later too. The makespan model
            # leaves out what disaggregation costs an elastic pool over a run (every borrow,
            # return and reclaim re-balances the P:D roles), and the first decision is made
            # on the hardware prior, before any telemetry.
            current = PDConfig.colocated(num_workers)
        return self._decide(num_workers, current).chosen

    def redecide(self, num_workers: int, current: PDConfig) -> PDConfig | None:
        d = self._decide(num_workers, current)
        return d.chosen if d.chosen != current else None

    def expansion(
        self, current: PDConfig | None, target: PDConfig, window_s: float | None
    ) -> Verdict:
        if not self.policy.gate_expansion:
            return Verdict(True, "expansion ungated")
        g = expansion_gate(
            self._makespan_s(current), self._makespan_s(target), window_s, self.costs
        )
        self.log.append(f"expansion gate {current} -> {target}: {g.reason}")
        return Verdict(g.admit, g.reason, g.gain_s, g.cost_s)

    def borrow(
        self,
        current: PDConfig | None,
        target: PDConfig,
        window_s: float,
        batches_in_flight: int = 1,
    ) -> Verdict:
        if self.policy.borrow in ("always", "budgeted"):
            return Verdict(True, "borrow ungated")
        g = borrow_gate(
            self._makespan_s(current),
            self._makespan_s(target),
            self.costs,
            idle_window_s=window_s,
            batches_in_flight=batches_in_flight,
        )
        self.log.append(f"borrow gate {current} -> {target}: {g.reason}")
        return Verdict(g.admit, g.reason, g.gain_s, g.cost_s)

    def record_switch(
        self,
        kind: str,
        prep_s: float,
        finalize_s: float,
        *,
        borrowed: bool,
        censored: bool = False,
    ) -> None:
        if censored:  # a lower bound: informative only above the current estimate
            self._record_lower_bound(kind, prep_s + finalize_s, borrowed=borrowed)
            return
        if kind == "borrow":
            self.costs.observe("activation", prep_s + finalize_s, borrowing=True)
        elif kind == "return":
            self.costs.observe("deactivation", prep_s + finalize_s, borrowing=True)
        elif kind == "expand":
            self.costs.observe("expansion_prep", prep_s, borrowing=borrowed)
            self.costs.observe("expansion_finalize", finalize_s, borrowing=borrowed)

    def _record_lower_bound(self, kind: str, at_least_s: float, *, borrowed: bool) -> None:
        """A switch cut short after `at_least_s`: if that exceeds the estimate, it is
        observed as a cost (an expansion's as preparation, its finalisation unchanged)."""
        c = self.costs
        if kind == "borrow" and at_least_s > c.cost("activation", borrowing=True):
            c.observe("activation", at_least_s, borrowing=True)
        elif kind == "expand":
            finalize = c.cost("expansion_finalize", borrowing=borrowed)
            if at_least_s > c.cost("expansion_prep", borrowing=borrowed) + finalize:
                c.observe("expansion_prep", at_least_s - finalize, borrowing=borrowed)
