"""Cost gates for optional transitions (paper §4.1.2, §4.5, §4.6, §5).

Expanding onto new preemptible GPUs and borrowing idle training GPUs are optional: each is
admitted only when its expected gain beats its cost. Returning borrowed GPUs and giving
back reclaimed ones are mandatory and never gated.

Costs are exponential moving averages of measured switch costs, kept separately for
rollout steps with and without borrowing (§5), seeded with the paper's measured costs
(Table 3): expansion 56-67 s of background preparation (worker start + weight-snapshot
load) and 11-18 s of finalisation (sync to the latest weights + atomic admission);
activation of a borrowed GPU about 6 s, deactivation 3.2-4.4 s.

* `expansion_gate`: gain = predicted relative makespan saving x expected availability
  window (rollout time saved while the GPUs stay); cost = preparation + finalisation.
* `borrow_gate`: gain = predicted rollout-step saving (scaled down when the idle window
  is shorter than the step); cost = activation + deactivation (the return is mandatory).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("expansion_prep", "expansion_finalize", "activation", "deactivation")


@dataclass(frozen=True, slots=True)
class SwitchCosts:
    """Seconds per switch kind (defaults: midpoints of the paper's measured ranges)."""

    expansion_prep_s: float = 61.5
    expansion_finalize_s: float = 14.5
    activation_s: float = 6.0
    deactivation_s: float = 3.8

    def get(self, kind: str) -> float:
        return float(getattr(self, f"{kind}_s"))

    def to_json(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class GateResult:
    admit: bool
    gain_s: float
    cost_s: float
    reason: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class SwitchCostTracker:
    """EMAs of measured switch costs, one book for steps with borrowing, one without.

    A kind with no measurement in a book falls back to the other book, then to the
    defaults. `observe` rejects unknown kinds and negative or non-finite costs.
    """

    def __init__(self, *, alpha: float = 0.3, defaults: SwitchCosts | None = None) -> None:
        if not 0 < alpha <= 1:
            raise ValueError("alpha must be in (0, 1]")
        self.alpha = alpha
        self.defaults = defaults or SwitchCosts()
        self._ema: dict[bool, dict[str, float]] = {True: {}, False: {}}
        self._count: dict[bool, dict[str, int]] = {True: {}, False: {}}

    def observe(self, kind: str, cost_s: float, *, borrowing: bool) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown switch kind {kind!r}; use {', '.join(KINDS)}")
        if not cost_s >= 0 or cost_s == float("inf"):
            raise ValueError(f"switch cost must be a finite number >= 0, got {cost_s!r}")
        book = self._ema[borrowing]
        book[kind] = (
            cost_s if kind not in book else self.alpha * cost_s + (1 - self.alpha) * book[kind]
        )
        self._count[borrowing][kind] = self._count[borrowing].get(kind, 0) + 1

    def cost(self, kind: str, *, borrowing: bool) -> float:
        for book in (self._ema[borrowing], self._ema[not borrowing]):
            if kind in book:
                return book[kind]
        return self.defaults.get(kind)

    def num_observed(self, kind: str, *, borrowing: bool) -> int:
        return self._count[borrowing].get(kind, 0)

    def expansion_cost_s(self, *, borrowing: bool = False) -> float:
        return self.cost("expansion_prep", borrowing=borrowing) + self.cost(
            "expansion_finalize", borrowing=borrowing
        )

    def borrow_cost_s(self) -> float:
        return self.cost("activation", borrowing=True) + self.cost("deactivation", borrowing=True)

    def summary(self) -> dict[str, dict[str, Any]]:
        """Flat run-summary view: `switch_costs_s` (the borrowing book, seconds) and
        `switch_costs_measured` (observations per kind, both books; 0 means the prior)."""
        return {
            "switch_costs_s": {k: round(self.cost(k, borrowing=True), 3) for k in KINDS},
            "switch_costs_measured": {
                k: self.num_observed(k, borrowing=True) + self.num_observed(k, borrowing=False)
                for k in KINDS
            },
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "with_borrowing": {k: self.cost(k, borrowing=True) for k in KINDS},
            "without_borrowing": {k: self.cost(k, borrowing=False) for k in KINDS},
        }


def expansion_gate(
    makespan_now_s: float,
    makespan_with_s: float,
    expected_window_s: float | None,
    costs: SwitchCostTracker,
    *,
    borrowing: bool = False,
    default_window_s: float = 1800.0,
    handoff_s: float = 0.0,
) -> GateResult:
    """Admit new preemptible GPUs iff the rollout time they save while they serve exceeds
    what the hand-off costs the workers already serving (paper §4.1.2, §4.5).

    The new workers initialise and sync in the background (prep + finalisation, the EMA of
    measured costs) while every other worker keeps serving, so that time is not lost: it
    only shortens the time the GPUs serve. gain = saving x (window - init - sync); the cost
    is `handoff_s`, what the serving workers lose at the admission (role changes, drains;
    0 when the plan only adds workers). A window shorter than the initialisation gains
    nothing. `expected_window_s` None (unknown) uses `default_window_s`. A non-positive or
    infinite current makespan (nothing runs now, e.g. no feasible config) admits when any
    config becomes feasible with the GPUs.
    """
    init = costs.expansion_cost_s(borrowing=borrowing)
    window = default_window_s if expected_window_s is None else max(0.0, expected_window_s)
    if not makespan_now_s < float("inf") or makespan_now_s <= 0:
        ok = makespan_with_s < float("inf")
        reason = "no feasible config without them" if ok else "no feasible config with them either"
        return GateResult(ok, float("inf") if ok else 0.0, handoff_s, reason)
    saving = max(0.0, (makespan_now_s - makespan_with_s) / makespan_now_s)
    serving = max(0.0, window - init)
    gain = saving * serving
    ok = gain > handoff_s
    reason = (
        f"saving {_share(saving)} x ({window:.0f} s window - {init:.1f} s init + weight sync) "
        f"= {_seconds(gain)} {'>' if ok else '<='} hand-off {_seconds(handoff_s)}"
    )
    return GateResult(ok, gain, handoff_s, reason)


def _share(x: float) -> str:
    """A saving as a percentage; a positive one too small for one decimal says so."""
    return "<0.1%" if 0 < x < 0.0005 else f"{x:.1%}"


def _seconds(x: float) -> str:
    """Seconds to one decimal; a positive figure under 0.05 s with two significant digits,
    so a gate's comparison never reads "0.0 s > 0.0 s"."""
    return f"{x:.2g} s" if 0 < x < 0.05 else f"{x:.1f} s"


def borrow_gate(
    makespan_without_s: float,
    makespan_with_s: float,
    costs: SwitchCostTracker,
    *,
    idle_window_s: float | None = None,
    batches_in_flight: int = 1,
) -> GateResult:
    """Borrow idle training GPUs iff the predicted rollout saving > activation + return.

    With `idle_window_s` the saving counts only for the share of the rollout step the GPUs
    can stay (`min(1, idle_window / makespan_without)`). The makespans are one batch's; the
    borrowed workers serve every batch in flight (with staleness s, up to s + 1 of them), so
    the saving counts once per unfinished batch (`batches_in_flight`).
    """
    cost = costs.borrow_cost_s()
    gain = max(0.0, makespan_without_s - makespan_with_s)
    if idle_window_s is not None and makespan_without_s > 0:
        gain *= min(1.0, max(0.0, idle_window_s) / makespan_without_s)
    gain *= max(1, batches_in_flight)
    verdict = ">" if gain > cost else "<="
    over = f" over {batches_in_flight} batches in flight" if batches_in_flight > 1 else ""
    reason = f"rollout saving {gain:.1f} s{over} {verdict} activation + return {cost:.1f} s"
    return GateResult(gain > cost, gain, cost, reason)
