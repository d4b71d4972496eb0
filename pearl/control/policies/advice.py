"""What an advisor is and what it answers: the `Advisor` protocol the controller asks (which
PD config, admit an expansion, borrow training GPUs), a gate's `Verdict`, and how a PD
config's shape scales with the budget (`scale_config`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pearl.control.plan import PDConfig


@dataclass(frozen=True, slots=True)
class Verdict:
    """A gate's answer: admit or not, with the predicted gain and cost (seconds)."""

    admit: bool
    reason: str = ""
    gain_s: float = 0.0
    cost_s: float = 0.0


def scale_config(config: PDConfig | None, num_workers: int, *, mode: str | None = None) -> PDConfig:
    """`config`'s shape on `num_workers` workers: colocated stays colocated; a P:D split keeps
    its ratio (rounded, at least one of each). Needs `num_workers >= 1` (2 if split)."""
    if num_workers < 1:
        raise ValueError("need at least one worker")
    want = mode or (config.mode if config is not None else "colocated")
    if want == "colocated" or num_workers < 2:
        return PDConfig.colocated(num_workers)
    p0, d0 = (
        (config.num_prefill, config.num_decode) if config and not config.is_colocated else (1, 1)
    )
    p = min(max(1, round(num_workers * p0 / (p0 + d0))), num_workers - 1)
    return PDConfig.disaggregated(p, num_workers - p)


class Advisor(Protocol):
    """The decision side of a policy (stateful, deterministic, no clock)."""

    def observe(self, time_s: float, turns: Sequence[Any], worker_steps: Sequence[Any]) -> None:
        """Telemetry of a finished rollout step."""

    def predicted_makespan_s(self, config: PDConfig) -> float | None:
        """One rollout batch's makespan on `config` as the advisor predicts it now; None
        where it has no model (or `config` is infeasible)."""

    def choose(self, num_workers: int, current: PDConfig | None) -> PDConfig:
        """The config for a new budget of `num_workers` (a forced re-decision)."""

    def redecide(self, num_workers: int, current: PDConfig) -> PDConfig | None:
        """After a rollout step: a better config worth the switch (hysteresis), else None."""

    def expansion(
        self, current: PDConfig | None, target: PDConfig, window_s: float | None
    ) -> Verdict:
        """Admit preemptible GPUs that would turn `current` into `target`?"""

    def borrow(
        self,
        current: PDConfig | None,
        target: PDConfig,
        window_s: float,
        batches_in_flight: int = 1,
    ) -> Verdict:
        """Borrow idle training GPUs that would turn `current` into `target` for `window_s`,
        while `batches_in_flight` rollout batches are unfinished?"""

    def record_switch(
        self,
        kind: str,
        prep_s: float,
        finalize_s: float,
        *,
        borrowed: bool,
        censored: bool = False,
    ) -> None:
        """A measured transition of `kind`: `expand` or `borrow`, with `prep_s` from its
        start until its last worker was ready and `finalize_s` from then until admission;
        or `return` (borrowed GPUs given back to training), its whole duration in
        `prep_s`. `censored`: the transition was cut short after `prep_s` (its GPUs left),
        so its cost is at least that."""
