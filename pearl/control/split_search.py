"""Scoring every disaggregated split of a large worker budget (`DecisionEngine.candidates`).

Each split `p + d = N` is scored on every sampled trajectory (`pearl.control.longest`),
so scoring all N - 1 splits of a budget of thousands of workers would take a second.
Up to `EXACT_SPLITS` splits are all scored. Above that the search is coarse to fine:
`GRID` evenly spaced prefill counts, then the same number around the best feasible one
found so far, until neighbours are one apart; the splits it did not score get their
numbers interpolated (linearly in `p`) between the scored ones around them. The
makespan of a split moves smoothly with `p` (prefill-bound for few prefill workers,
decode-bound for many), so the best split is scored exactly; the table says which were.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

EXACT_SPLITS = 64
GRID = 32

Score = Callable[[np.ndarray, np.ndarray], dict[str, np.ndarray]]


def score_splits(
    score: Score, num_workers: int, feasible: np.ndarray
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Arrays for p = 1..num_workers-1 from `score(p, d)` (same keys, one entry per split),
    and a mask of the splits scored exactly. `feasible[i]` is split p = i + 1's
    feasibility: the search refines around the best feasible split (any, if none is)."""
    p_all = np.arange(1, num_workers, dtype=float)
    if len(p_all) <= EXACT_SPLITS:
        return score(p_all, num_workers - p_all), np.ones(len(p_all), dtype=bool)
    done: dict[int, int] = {}  # p -> column in the scored arrays
    cols: list[dict[str, np.ndarray]] = []
    lo, hi = 1, num_workers - 1
    while True:
        pts = np.unique(np.rint(np.linspace(lo, hi, GRID)).astype(int))
        new = np.array([p for p in pts if p not in done], dtype=float)
        if len(new):
            arr = score(new, num_workers - new)
            base = sum(len(c["makespan_s"]) for c in cols)
            done.update({int(p): base + i for i, p in enumerate(new)})
            cols.append(arr)
        ps = np.array(sorted(done))
        spans = np.concatenate([c["makespan_s"] for c in cols])[[done[p] for p in ps]]
        ok = feasible[ps - 1]
        best = int(ps[np.argmin(np.where(ok, spans, np.inf) if ok.any() else spans)])
        step = (hi - lo) / (GRID - 1)
        if step <= 1.0:
            break
        reach = int(np.ceil(step))
        lo, hi = max(1, best - reach), min(num_workers - 1, best + reach)
    order = np.array(sorted(done))
    idx = [done[p] for p in order]
    out = {}
    for key in cols[0]:
        vals = np.concatenate([c[key] for c in cols])[idx]
        out[key] = np.interp(p_all, order.astype(float), vals)
    scored = np.zeros(len(p_all), dtype=bool)
    scored[order - 1] = True
    return out, scored
