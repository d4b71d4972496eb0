"""Seeded synthetic availability traces.

Every generator is a pure function of its arguments: equal arguments (including `seed`)
give equal traces. All return count traces.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pearl.traces.availability import AvailabilityTrace


def constant(
    num_gpus: int, duration_s: float, *, name: str = "constant", reclaim_notice_s: float = 0.0
) -> AvailabilityTrace:
    """`num_gpus` GPUs for the whole duration (no change)."""
    return AvailabilityTrace.from_counts(
        name,
        duration_s,
        [(0.0, num_gpus)],
        reclaim_notice_s=reclaim_notice_s,
        source=f"synthetic: constant {num_gpus}",
    )


def periodic(
    levels: Sequence[int],
    period_s: float,
    duration_s: float,
    *,
    name: str = "periodic",
    reclaim_notice_s: float = 0.0,
) -> AvailabilityTrace:
    """A step pattern: `levels[0]` for `period_s`, then `levels[1]`, ..., cycling until the end.

    E.g. `periodic([12, 4], 600, 7200)` alternates 12 and 4 GPUs every ten minutes.
    """
    if not levels:
        raise ValueError("levels must not be empty")
    if period_s <= 0:
        raise ValueError(f"period_s must be > 0, got {period_s}")
    points = []
    i = 0
    t = 0.0
    while t < duration_s:
        points.append((t, levels[i % len(levels)]))
        i += 1
        t = i * period_s
    return AvailabilityTrace.from_counts(
        name,
        duration_s,
        points,
        reclaim_notice_s=reclaim_notice_s,
        source=f"synthetic: periodic {list(levels)} every {period_s:g} s",
    )


def poisson_churn(
    duration_s: float,
    *,
    seed: int,
    mean_interval_s: float,
    min_gpus: int = 0,
    max_gpus: int = 12,
    initial_gpus: int | None = None,
    max_step: int = 2,
    name: str = "churn",
    reclaim_notice_s: float = 0.0,
) -> AvailabilityTrace:
    """Random churn: changes arrive as a Poisson process (mean gap `mean_interval_s`); each
    moves the count by a uniform nonzero step in `[-max_step, max_step]`, reflected at the
    bounds (then clipped) so that it stays in `[min_gpus, max_gpus]`.

    Starts at `initial_gpus` (default: the middle of the bounds). Times are rounded to
    milliseconds, like the real traces.
    """
    if not 0 <= min_gpus < max_gpus:
        raise ValueError(f"need 0 <= min_gpus < max_gpus, got {min_gpus}, {max_gpus}")
    if mean_interval_s <= 0 or max_step < 1:
        raise ValueError("mean_interval_s must be > 0 and max_step >= 1")
    rng = np.random.default_rng(seed)
    n = (min_gpus + max_gpus) // 2 if initial_gpus is None else initial_gpus
    if not min_gpus <= n <= max_gpus:
        raise ValueError(f"initial_gpus {n} outside [{min_gpus}, {max_gpus}]")
    points = [(0.0, n)]
    t = 0.0
    while True:
        t = round(t + float(rng.exponential(mean_interval_s)), 3)
        if t >= duration_s:
            break
        step = int(rng.integers(1, max_step + 1)) * (1 if rng.random() < 0.5 else -1)
        nxt = n + step
        if not min_gpus <= nxt <= max_gpus:
            nxt = n - step  # reflect
        n = min(max(nxt, min_gpus), max_gpus)
        points.append((t, n))
    return AvailabilityTrace.from_counts(
        name,
        duration_s,
        points,
        reclaim_notice_s=reclaim_notice_s,
        source=f"synthetic: poisson churn seed={seed} mean_interval_s={mean_interval_s:g}",
    )
