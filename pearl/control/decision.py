"""The PD decision engine (paper §4.2, §4.3.2).

`DecisionEngine.decide(profile, num_workers, batch, current)` scores colocation and every
disaggregated split `(p, d)` with `p + d = num_workers`, and picks the feasible one with
the minimum predicted makespan, subject to hysteresis:

* the *stay* candidate is the current config at this budget (same mode; for a
  disaggregated config, the split whose P share is closest to the current one);
* a mode change needs a relative saving over *stay* above `mode_switch_threshold`, a
  ratio change within the mode one above `ratio_switch_threshold` (smaller);
* an infeasible *stay* forces a switch to the best feasible candidate;
* a budget of one worker where only splits are allowed (`modes=("disaggregated",)`)
  gets colocation, said in the reason, until the budget grows.

Why only full-budget splits: in our makespan model the best split never gets worse with
one more worker (prefill work per worker and decode busy time shrink or stay, and
feasibility only improves), so a budget's best is never beaten by a smaller budget's;
property tests pin this (`tests/control/test_decision.py`). One split with one more decode
worker can predict a slightly longer tail (the others' turns return to the prefill queue
sooner), a closed-system effect the tests bound.

Scoring is vectorised over the splits and the choice is made on the arrays; budgets of
more than 64 splits are searched coarse to fine (`pearl.control.split_search`: the best
split is scored exactly, the others between scored ones interpolated, and say so in their
breakdown). `Decision.candidates` is a `CandidateTable`, a read-only sequence that builds
each `Candidate` on first access, so 4,096 workers take a few tens of milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from pearl.control.batch_workload import batch_workload
from pearl.control.makespan import (
    Prediction,
    colocated_arrays,
    disaggregated_arrays,
    feasibility,
)
from pearl.control.plan import PDConfig
from pearl.control.profile import WorkloadProfile
from pearl.control.split_search import score_splits

MODES = ("colocated", "disaggregated")


@dataclass(frozen=True, slots=True)
class DecisionConfig:
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
    candidates: CandidateTable = field(compare=False)
    feasible: bool = True
    predicted_makespan_s: float = float("nan")

    def candidate(self, config: PDConfig) -> Candidate | None:
        i = self.candidates.index_of(config)
        return None if i is None else self.candidates[i]

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


class CandidateTable(Sequence[Candidate]):
    """Every scored config of one budget: colocated:N first (if scored), then
    disaggregated:p:(N-p) for p = 1..N-1. Read-only; `Candidate`s are built on access."""

    def __init__(
        self,
        num_workers: int,
        blocks: list[tuple[str, dict[str, np.ndarray], np.ndarray, Callable[[int], str]]],
    ) -> None:
        self.num_workers = num_workers
        self._blocks = blocks
        empty = np.zeros(0)
        self.makespans_s = np.concatenate([a["makespan_s"] for _, a, _, _ in blocks] or [empty])
        self.feasible = np.concatenate([ok for _, _, ok, _ in blocks] or [empty]).astype(bool)
        self._cache: dict[int, Candidate] = {}
        self._lists: dict[int, dict[str, list[float]]] = {}

    def __len__(self) -> int:
        return len(self.makespans_s)

    @overload
    def __getitem__(self, i: int) -> Candidate: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Candidate]: ...
    def __getitem__(self, i: int | slice) -> Candidate | Sequence[Candidate]:
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(len(self))))
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        if i not in self._cache:
            self._cache[i] = self._build(i)
        return self._cache[i]

    def __iter__(self) -> Iterator[Candidate]:
        return (self[i] for i in range(len(self)))

    def mode_range(self, mode: str) -> range:
        """Indices of the candidates of `mode` (empty if not scored)."""
        start = 0
        for m, arrays, _, _ in self._blocks:
            n = len(arrays["makespan_s"])
            if m == mode:
                return range(start, start + n)
            start += n
        return range(0)

    def config_at(self, i: int) -> PDConfig:
        j = i
        for mode, arrays, _, _ in self._blocks:
            n = len(arrays["makespan_s"])
            if j < n:
                if mode == "colocated":
                    return PDConfig.colocated(self.num_workers)
                return PDConfig.disaggregated(j + 1, self.num_workers - j - 1)
            j -= n
        raise IndexError(i)

    def index_of(self, config: PDConfig | None) -> int | None:
        if config is None or config.num_workers != self.num_workers:
            return None
        r = self.mode_range(config.mode)
        if not r:
            return None
        return r.start if config.is_colocated else r.start + config.num_prefill - 1

    def _build(self, i: int) -> Candidate:
        j = i
        for b, (_, arrays, ok, why) in enumerate(self._blocks):
            n = len(arrays["makespan_s"])
            if j < n:
                cols = self._lists.get(b)
                if cols is None and len(self._cache) >= 16:
                    # Many candidates wanted (e.g. to_json): one tolist() per block beats
                    # numpy scalar indexing; a few (the decision itself) index directly.
                    cols = self._lists[b] = {k: v.tolist() for k, v in arrays.items()}
                if cols is None:
                    breakdown = {k: float(v[j]) for k, v in arrays.items() if k != "makespan_s"}
                    makespan = float(arrays["makespan_s"][j])
                else:
                    breakdown = {k: v[j] for k, v in cols.items() if k != "makespan_s"}
                    makespan = cols["makespan_s"][j]
                pred = Prediction(makespan, bool(ok[j]), why(j), breakdown)
                return Candidate(self.config_at(i), pred)
            j -= n
        raise IndexError(i)


class DecisionEngine:
    """Pure and deterministic: equal inputs give equal decisions."""

    def __init__(self, cfg: DecisionConfig | None = None) -> None:
        self.cfg = cfg or DecisionConfig()

    def candidates(
        self,
        profile: WorkloadProfile,
        num_workers: int,
        batch: int,
        *,
        modes: tuple[str, ...] = MODES,
    ) -> CandidateTable:
        """Every config of the budget in `modes`: colocated first, then p = 1..N-1."""
        if num_workers < 1:
            raise ValueError(f"the worker budget must be >= 1, got {num_workers}")
        unknown = set(modes) - set(MODES)
        if unknown:
            raise ValueError(f"unknown mode(s) {sorted(unknown)}; use {', '.join(MODES)}")
        w = batch_workload(profile, batch, self.cfg.num_gpus_per_worker)
        blocks: list[tuple[str, dict[str, np.ndarray], np.ndarray, Callable[[int], str]]] = []
        if "colocated" in modes:
            arr = colocated_arrays(w, np.array([float(num_workers)]))
            blocks.append(("colocated", arr, *feasibility(w, "colocated")))
        if "disaggregated" in modes and num_workers >= 2:
            d = num_workers - np.arange(1, num_workers, dtype=float)
            ok, why = feasibility(w, "disaggregated", d)
            arr, scored = score_splits(
                lambda pp, dd: disaggregated_arrays(w, pp, dd), num_workers, ok
            )
            if not scored.all():  # say which splits' numbers are interpolated
                arr["interpolated"] = (~scored).astype(float)
            blocks.append(("disaggregated", arr, ok, why))
        return CandidateTable(num_workers, blocks)

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

        `fixed` (a baseline with one fixed mode and ratio): the config rescaled to the
        budget is chosen whether or not another would be better; only it is scored.
        """
        cfg = self.cfg
        if fixed is not None:
            target = at_budget(fixed, num_workers) or PDConfig.colocated(num_workers)
            table = self.candidates(profile, num_workers, batch, modes=(target.mode,))
            only = table[table.index_of(target) or 0]
            return Decision(
                target, current, target != current, False,
                f"fixed configuration {fixed} at {num_workers} worker(s)",
                _Single(num_workers, only), only.prediction.feasible,
                only.prediction.makespan_s,
            )  # fmt: skip
        table = self.candidates(profile, num_workers, batch, modes=modes)
        if len(table) == 0:  # only splits allowed, and one worker cannot be split
            table = self.candidates(profile, num_workers, batch, modes=("colocated",))
            only = table[0]
            return Decision(
                only.config, current, only.config != current,
                current is not None and not current.is_colocated,
                f"a split needs 2 workers and the budget has {num_workers}: colocated until "
                "it grows", table, only.prediction.feasible, only.prediction.makespan_s,
            )  # fmt: skip
        m = np.where(table.feasible, table.makespans_s, np.inf)
        stay_cfg = None if current is None else at_budget(current, num_workers)
        i_stay = table.index_of(stay_cfg)
        if not table.feasible.any():
            pick = table[i_stay if i_stay is not None else 0]
            return Decision(
                pick.config, current, pick.config != current, False,
                f"no feasible configuration at {num_workers} worker(s): {pick.prediction.reason}",
                table, False, pick.prediction.makespan_s,
            )  # fmt: skip
        # argmin takes the first minimum: colocated before splits, then fewer prefill workers.
        i_best = int(np.argmin(m))
        if current is None:
            return _decision(table, i_best, None, False, "no current configuration: best predicted")
        if i_stay is None or not table.feasible[i_stay]:
            why = (
                "current configuration is not available in the allowed modes/budget"
                if i_stay is None
                else f"current configuration infeasible ({table[i_stay].prediction.reason})"
            )
            return _decision(table, i_best, current, True, f"{why}: switch to best predicted")
        m_stay = float(m[i_stay])
        stay_mode = table.config_at(i_stay).mode
        r = table.mode_range(stay_mode)
        i_same = r.start + int(np.argmin(m[r.start : r.stop]))
        if table.config_at(i_best).mode != stay_mode:
            gain = _saving(m_stay, float(m[i_best]))
            if gain > cfg.mode_switch_threshold:
                why = f"mode change saves {gain:.1%} > {cfg.mode_switch_threshold:.0%}"
                return _decision(table, i_best, current, False, why)
        gain = _saving(m_stay, float(m[i_same]))
        if i_same != i_stay and gain > cfg.ratio_switch_threshold:
            why = f"ratio change saves {gain:.1%} > {cfg.ratio_switch_threshold:.0%}"
            return _decision(table, i_same, current, False, why)
        why = "keep current configuration"
        if i_best != i_stay:
            why += (
                f" (best {table.config_at(i_best)} saves only "
                f"{_saving(m_stay, float(m[i_best])):.1%}, below threshold)"
            )
        if stay_cfg != current:
            why += f"; rescaled from {current} to {num_workers} worker(s)"
        return _decision(table, i_stay, current, False, why)


class _Single(CandidateTable):
    """A table of exactly one candidate (the `fixed` baseline)."""

    def __init__(self, num_workers: int, only: Candidate) -> None:
        self.num_workers = num_workers
        self._only = only
        self._blocks = []
        self.makespans_s = np.array([only.prediction.makespan_s])
        self.feasible = np.array([only.prediction.feasible])
        self._cache = {0: only}
        self._lists = {}

    def config_at(self, i: int) -> PDConfig:
        if i != 0:
            raise IndexError(i)
        return self._only.config

    def index_of(self, config: PDConfig | None) -> int | None:
        return 0 if config == self._only.config else None

    def mode_range(self, mode: str) -> range:
        return range(1) if mode == self._only.config.mode else range(0)


def _saving(m_stay: float, m_new: float) -> float:
    return (m_stay - m_new) / m_stay if m_stay > 0 else 0.0


def _decision(
    table: CandidateTable, i: int, current: PDConfig | None, forced: bool, reason: str
) -> Decision:
    pick = table[i]
    return Decision(
        pick.config, current, pick.config != current, forced, reason, table, True,
        pick.prediction.makespan_s,
    )  # fmt: skip
