"""Coarse-to-fine scoring of the splits of large budgets: exact below the threshold, the
best split always scored, the rest interpolated and marked."""

import numpy as np
import pytest

from pearl.control.split_search import EXACT_SPLITS, score_splits


def bowl(best: float):
    calls = []

    def score(p, d):
        calls.append(len(p))
        return {"makespan_s": (p - best) ** 2 + 100.0, "p": p.copy()}

    return score, calls


def test_small_budgets_are_scored_exactly():
    score, calls = bowl(7.3)
    arr, scored = score_splits(score, EXACT_SPLITS + 1, np.ones(EXACT_SPLITS, dtype=bool))
    assert scored.all() and calls == [EXACT_SPLITS]
    assert arr["p"].tolist() == list(range(1, EXACT_SPLITS + 1))


@pytest.mark.parametrize(("num_workers", "best"), [(256, 64.0), (4096, 1000.0), (300, 1.0)])
def test_the_best_split_is_found_and_scored(num_workers, best):
    score, calls = bowl(best)
    arr, scored = score_splits(score, num_workers, np.ones(num_workers - 1, dtype=bool))
    i = int(np.argmin(arr["makespan_s"]))
    assert i + 1 == best and scored[i]
    assert sum(calls) < num_workers // 2  # far fewer than every split
    # unscored splits lie on the line between their scored neighbours
    assert arr["p"].tolist() == pytest.approx(list(range(1, num_workers)))


def test_refines_around_the_best_feasible_split():
    """The unconstrained minimum (p = 50) is infeasible; the search refines around the
    best feasible split, the first feasible one (p = 120), and scores it."""
    score, _ = bowl(50.0)
    feasible = np.arange(1, 256) >= 120
    arr, scored = score_splits(score, 256, feasible)
    m = np.where(feasible, arr["makespan_s"], np.inf)
    assert int(np.argmin(m)) + 1 == 120 and scored[119]
