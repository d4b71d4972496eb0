"""Closed-form sums of linear step times, for stretches of identical decode iterations.

A stretch of decode-only iterations grows every sequence's context by one token a step, so
each step's time is linear in the step number on each roofline side, and a step takes the
larger side: `pearl.sim.physics.iteration` sums and inverts those sums here without
looping over the steps.
"""

from __future__ import annotations

import math


def _sum_linear(a: float, b: float, n0: int, n1: int) -> float:
    """sum_{n=n0}^{n1-1} (a + b*n)."""
    k = n1 - n0
    if k <= 0:
        return 0.0
    return a * k + b * (n0 + n1 - 1) * k / 2.0


def fit_linear(a: float, b: float, budget: float) -> int:
    """The largest k >= 0 with sum_{n<k} (a + b*n) <= budget (a > 0, b >= 0)."""
    if b <= 0:
        return int(budget // a)
    # b/2 k^2 + (a - b/2) k - budget <= 0
    half = b / 2.0
    lin = a - half
    k = int((-lin + math.sqrt(lin * lin + 4 * half * budget)) / (2 * half))
    while k > 0 and a * k + half * k * (k - 1) > budget:
        k -= 1
    return k


def sum_max_linear(c0: float, c1: float, m0: float, m1: float, k: int) -> float:
    """sum_{n=0}^{k-1} max(c0 + c1*n, m0 + m1*n), in closed form (one crossover at most)."""
    if c1 == m1:
        return _sum_linear(max(c0, m0), c1, 0, k)
    # crossover n* where c0 + c1 n = m0 + m1 n
    n_star = (m0 - c0) / (c1 - m1)
    if n_star <= 0:  # one side dominates from n = 0 on: the one with the larger slope
        return _sum_linear(c0, c1, 0, k) if c1 > m1 else _sum_linear(m0, m1, 0, k)
    if n_star >= k:  # the side that is larger at n = 0 dominates throughout
        return _sum_linear(c0, c1, 0, k) if c0 >= m0 else _sum_linear(m0, m1, 0, k)
    split = math.ceil(n_star)
    first_c = c0 >= m0
    head = _sum_linear(c0, c1, 0, split) if first_c else _sum_linear(m0, m1, 0, split)
    tail = _sum_linear(m0, m1, split, k) if first_c else _sum_linear(c0, c1, split, k)
    return head + tail
