"""The PD decision engine (paper §4.2, §4.3.2).

`DecisionEngine.decide(profile, num_workers, batch, current)` scores colocation and every
disaggregated split `(p, d)` with `p + d = num_workers`, and picks the feasible one with
the minimum predicted makespan, subject to hysteresis:

* the *stay* candidate is the current config at this budget (same mode; for a
  disaggregated config, the split whose P share is closest to the current one);
* a mode change needs a relative saving over *stay* above `mode_switch_threshold`, a
  ratio change within the mode one above `ratio_switch_threshold` (smaller);
* an infeasible *stay* forces a switch to the best feasible candidate.

Why only full-budget splits: in our makespan model adding a worker never lengthens any
term (prefill work per worker, decode busy time and critical path all shrink or stay, and
feasibility only improves), so a config with fewer workers than the budget is never
strictly better; property tests pin this (`tests/control/test_decision.py`).

Scoring is vectorised over all splits, so 4,096 workers take a few milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from pearl.control.makespan import (
    Prediction,
    colocated_arrays,
    disaggregated_arrays,
    feasibility,
    workload,
)
from pearl.control.plan import PDConfig
from pearl.control.profile import WorkloadProfile

MODES = ("colocated", "disaggregated")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Hysteresis thresholds (relative makespan saving) and the worker size."""

    mode_switch_threshold: float = 0.10
    ratio_switch_threshold: float = 0.03
    num_gpus_per_worker: int = 1

    def __post_init__(self) -> None:
        if not 0 <= self.ratio_switch_threshold <= self.mode_switch_threshold < 1:
            raise ValueError("need 0 <= ratio_switch_threshold <= mode_switch_threshold < 1")
        if self.num_gpus_per_worker < 1:
            raise ValueError("num_gpus_per_worker must be >= 1")


@dataclass(frozen=True, slots=True)
class Candidate:
    config: PDConfig
    prediction: Prediction

    def to_json(self) -> dict[str, Any]:
        return {"config": str(self.config), **self.prediction.to_json()}


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's answer. `switch`: `chosen` differs from `current`; `forced`: because the
    current config is infeasible at this budget; `feasible`: False when no candidate is
    (then `chosen` is the least bad one and the caller must not expect the prediction)."""

    chosen: PDConfig
    current: PDConfig | None
    switch: bool
    forced: bool
    reason: str
    candidates: tuple[Candidate, ...]
    feasible: bool = True
    predicted_makespan_s: float = float("nan")

    def candidate(self, config: PDConfig) -> Candidate | None:
        for c in self.candidates:
            if c.config == config:
                return c
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": str(self.chosen),
            "current": None if self.current is None else str(self.current),
            "switch": self.switch,
            "forced": self.forced,
            "feasible": self.feasible,
            "predicted_makespan_s": self.predicted_makespan_s,
            "reason": self.reason,
            "candidates": [c.to_json() for c in self.candidates],
        }


def at_budget(config: PDConfig, num_workers: int) -> PDConfig | None:
    """`config`'s mode and P:D ratio rescaled to `num_workers` (None if it cannot exist)."""
    if config.is_colocated:
        return PDConfig.colocated(num_workers)
    if num_workers < 2:
        return None
    if config.num_workers == num_workers:
        return config
    p = round(num_workers * config.num_prefill / config.num_workers)
    p = min(max(p, 1), num_workers - 1)
    return PDConfig.disaggregated(p, num_workers - p)


class DecisionEngine:
    """Pure and deterministic: equal inputs give equal decisions."""

    def __init__(self, cfg: EngineConfig | None = None) -> None:
        self.cfg = cfg or EngineConfig()

    def candidates(
        self,
        profile: WorkloadProfile,
        num_workers: int,
        batch: int,
        *,
        modes: tuple[str, ...] = MODES,
    ) -> tuple[Candidate, ...]:
        """Every config of the budget in `modes`: colocated first, then p = 1..N-1."""
        if num_workers < 1:
            raise ValueError(f"the worker budget must be >= 1, got {num_workers}")
        unknown = set(modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown mode(s) {sorted(unknown)}; use {', '.join(MODES)}")
        w = workload(profile, batch, self.cfg.num_gpus_per_worker)
        out: list[Candidate] = []
        if "colocated" in modes:
            arr = colocated_arrays(w, np.array([float(num_workers)]))
            ok, why = feasibility(w, "colocated")
            out += _to_candidates([PDConfig.colocated(num_workers)], arr, ok, why)
        if "disaggregated" in modes and num_workers >= 2:
            p = np.arange(1, num_workers, dtype=float)
            d = num_workers - p
            arr = disaggregated_arrays(w, p, d)
            ok, why = feasibility(w, "disaggregated", d)
            configs = [PDConfig.disaggregated(i, num_workers - i) for i in range(1, num_workers)]
            out += _to_candidates(configs, arr, ok, why)
        return tuple(out)

    def decide(
        self,
        profile: WorkloadProfile,
        num_workers: int,
        batch: int,
        current: PDConfig | None = None,
        *,
        modes: tuple[str, ...] = MODES,
        fixed: PDConfig | None = None,
    ) -> Decision:
        """Choose a config for `num_workers` workers (see module docstring).

        `fixed` (a baseline with one fixed mode and ratio): score only that config,
        rescaled to the budget, and choose it whether or not another would be better.
        """
        cfg = self.cfg
        if fixed is not None:
            target = at_budget(fixed, num_workers)
            if target is None:
                target = PDConfig.colocated(num_workers)
            cands = tuple(
                c
                for c in self.candidates(profile, num_workers, batch, modes=(target.mode,))
                if c.config == target
            )
            ok = cands[0].prediction.feasible
            return Decision(
                target, current, target != current, False,
                f"fixed configuration {fixed} at {num_workers} worker(s)",
                cands, ok, cands[0].prediction.makespan_s,
            )  # fmt: skip
        cands = self.candidates(profile, num_workers, batch, modes=modes)
        feasible = [c for c in cands if c.prediction.feasible]
        stay_cfg = None if current is None else at_budget(current, num_workers)
        stay = next((c for c in cands if c.config == stay_cfg), None)
        if not feasible:
            pick = stay or cands[0]
            return Decision(
                pick.config, current, pick.config != current, False,
                f"no feasible configuration at {num_workers} worker(s): {pick.prediction.reason}",
                cands, False, pick.prediction.makespan_s,
            )  # fmt: skip
        best = min(feasible, key=_key)
        if current is None:
            return _decision(best, None, False, "no current configuration: best predicted", cands)
        if stay is None or not stay.prediction.feasible:
            why = (
                "current configuration is not available in the allowed modes/budget"
                if stay is None
                else f"current configuration infeasible ({stay.prediction.reason})"
            )
            return _decision(best, current, True, f"{why}: switch to best predicted", cands)
        m_stay = stay.prediction.makespan_s
        same = min((c for c in feasible if c.config.mode == stay.config.mode), key=_key)
        if best.config.mode != stay.config.mode:
            gain = _saving(m_stay, best.prediction.makespan_s)
            if gain > cfg.mode_switch_threshold:
                why = f"mode change saves {gain:.1%} > {cfg.mode_switch_threshold:.0%}"
                return _decision(best, current, False, why, cands)
        gain = _saving(m_stay, same.prediction.makespan_s)
        if same.config != stay.config and gain > cfg.ratio_switch_threshold:
            why = f"ratio change saves {gain:.1%} > {cfg.ratio_switch_threshold:.0%}"
            return _decision(same, current, False, why, cands)
        why = "keep current configuration"
        if best.config != stay.config:
            why += (
                f" (best {best.config} saves only "
                f"{_saving(m_stay, best.prediction.makespan_s):.1%}, below threshold)"
            )
        if stay.config != current:
            why += f"; rescaled from {current} to {num_workers} worker(s)"
        return _decision(stay, current, False, why, cands)


def _key(c: Candidate) -> tuple[float, int, int]:
    # Deterministic tie-break: shorter makespan, then colocated, then fewer prefill workers.
    return (c.prediction.makespan_s, 0 if c.config.is_colocated else 1, c.config.num_prefill)


def _saving(m_stay: float, m_new: float) -> float:
    return (m_stay - m_new) / m_stay if m_stay > 0 else 0.0


def _decision(
    pick: Candidate,
    current: PDConfig | None,
    forced: bool,
    reason: str,
    cands: tuple[Candidate, ...],
) -> Decision:
    return Decision(
        pick.config, current, pick.config != current, forced, reason, cands, True,
        pick.prediction.makespan_s,
    )  # fmt: skip


def _to_candidates(
    configs: list[PDConfig], arr: dict[str, np.ndarray], ok: np.ndarray, why: list[str]
) -> list[Candidate]:
    keys = [k for k in arr if k != "makespan_s"]
    cols = [arr[k].tolist() for k in keys]
    makespans = arr["makespan_s"].tolist()
    oks = ok.tolist()
    out = []
    for i, config in enumerate(configs):
        breakdown = {k: col[i] for k, col in zip(keys, cols, strict=True)}
        out.append(Candidate(config, Prediction(makespans[i], oks[i], why[i], breakdown)))
    return out
