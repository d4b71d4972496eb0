"""The critical path of a batch as the longest of its B trajectories (paper §4.3.1).

`longest_path` follows each sampled trajectory through the rounds of a candidate
configuration (`pearl.control.makespan` gives the rounds' costs) and `expected_longest`
takes the expected longest of B of them.

A batch ends when its last trajectory does, and which trajectory that is depends on the
configuration: where decoding is slow (a colocated worker whose prefill chunks stretch its
decode steps) the trajectory with the most generated tokens finishes last; where it is
fast, the one with the longest environment steps. So the decision engine keeps a sample of
finished trajectories' totals (`WorkloadProfile.trajectory_sample`: turns, new prefill
tokens, reusable prefix tokens, decode tokens, environment seconds), scores each sampled
trajectory's own path under a candidate's speeds, and takes the expected longest of B
independent draws from the sample: with the n scores sorted ascending, the j-th smallest is
the longest of B draws with probability `(j/n)^B - ((j-1)/n)^B` (order statistics of the
empirical distribution). No scaling rule for the batch size is needed: the draws are B.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# Fields of one sampled trajectory, in `WorkloadProfile.trajectory_sample` order.
SAMPLE_FIELDS = ("turns", "new_tokens", "reusable_tokens", "decode_tokens", "env_s")


@dataclass(frozen=True, slots=True)
class TrajectoryPaths:
    """Sampled trajectories' totals as arrays (one entry per trajectory) and the
    order-statistic weights of the longest of `batch` draws (`weights[j]` belongs to the
    j-th smallest score)."""

    turns: np.ndarray
    new_tokens: np.ndarray
    reusable_tokens: np.ndarray
    decode_tokens: np.ndarray
    env_s: np.ndarray  # environment seconds plus the per-turn dispatch overhead
    weights: np.ndarray

    @classmethod
    def from_sample(
        cls, sample: Sequence[Sequence[float]], batch: float, turn_overhead_s: float = 0.0
    ) -> TrajectoryPaths | None:
        """None for an empty sample (the caller falls back on the observed tail)."""
        if not sample:
            return None
        a = np.asarray(sample, dtype=float).reshape(len(sample), len(SAMPLE_FIELDS))
        turns = np.maximum(a[:, 0], 1.0)
        n = len(a)
        j = np.arange(1, n + 1, dtype=float)
        weights = (j / n) ** batch - ((j - 1) / n) ** batch
        return cls(
            turns=turns,
            new_tokens=a[:, 1],
            reusable_tokens=a[:, 2],
            decode_tokens=a[:, 3],
            env_s=a[:, 4] + turns * turn_overhead_s,
            weights=weights,
        )

    @classmethod
    def single(
        cls, turns: float, new_tokens: float, reusable_tokens: float, decode: float, env_s: float
    ) -> TrajectoryPaths:
        """One trajectory that is the longest for certain (the observed tail)."""

        def one(v: float) -> np.ndarray:
            return np.array([float(v)])

        return cls(
            one(max(turns, 1.0)),
            one(new_tokens),
            one(reusable_tokens),
            one(decode),
            one(env_s),
            np.ones(1),
        )

    @property
    def max_turns(self) -> int:
        return int(np.ceil(self.turns.max() - 1e-9))

    def survival(self, rounds: int) -> np.ndarray:
        """Share of sampled trajectories with at least k turns, k = 1..rounds."""
        ks = np.arange(1, rounds + 1, dtype=float)
        return (self.turns[None, :] >= ks[:, None] - 1e-9).mean(axis=1)


def expected_longest(
    scores: np.ndarray, weights: np.ndarray, parts: Mapping[str, np.ndarray] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Expected longest path per candidate from `scores` (candidates x trajectories), and
    the expectation of each of `parts` (arrays broadcastable to `scores`) over the
    trajectory that is the longest.

    Only the top scores of each candidate are sorted: the lowest ranks, which together
    carry at most `_NEGLIGIBLE` of the weight, lend it to the smallest sorted score (so
    the result is high by at most 0.1% of the longest score); this keeps thousands of
    candidates cheap."""
    n = scores.shape[1]
    low = min(int(np.searchsorted(np.cumsum(weights), _NEGLIGIBLE, side="right")), n - 1)
    if low > 0:
        top = np.argpartition(scores, low, axis=1)[:, low:]
        top_scores = np.take_along_axis(scores, top, axis=1)
        order = np.argsort(top_scores, axis=1, kind="stable")
        idx = np.take_along_axis(top, order, axis=1)
        w = weights[low:].copy()
        w[0] += weights[:low].sum()
    else:
        idx = np.argsort(scores, axis=1, kind="stable")
        w = weights

    def expect(v: np.ndarray) -> np.ndarray:
        return (np.take_along_axis(np.broadcast_to(v, scores.shape), idx, axis=1) * w).sum(axis=1)

    return expect(scores), {name: expect(v) for name, v in (parts or {}).items()}


_NEGLIGIBLE = 1e-3  # order-statistic weight below the top scores that is not sorted
_PACE_ITERATIONS = 6  # the damped pace ratio: the path changes < 0.2% after six


class RunningSums:
    """Running sums over the rounds of per-round arrays (candidates x K rounds), looked up
    at fractional round counts: a last round counts in part, and rounds past K at round
    K's value (the last trajectory running alone). Built once per prediction call; the
    lookups are flat gathers (the pace iteration of `longest_path` does several)."""

    def __init__(self, per_round: dict[str, np.ndarray]) -> None:
        c, k = next(iter(per_round.values())).shape
        self.k = k
        self.cum_rows = (np.arange(c) * (k + 1))[:, None]
        self.rate_rows = (np.arange(c) * k)[:, None]
        zeros = np.zeros((c, 1))
        self.cum = {
            name: np.concatenate([zeros, np.cumsum(v, axis=1)], axis=1).ravel()
            for name, v in per_round.items()
        }
        self.rate = {name: np.ascontiguousarray(v).ravel() for name, v in per_round.items()}

    def at(self, rounds: np.ndarray, *names: str) -> list[np.ndarray]:
        """The sums of `names` over the first `rounds` rounds (broadcast to candidates x
        trajectories)."""
        lo = np.minimum(np.floor(np.clip(rounds, 0.0, float(self.k))).astype(int), self.k - 1)
        frac = rounds - lo
        i, j = self.cum_rows + lo, self.rate_rows + lo
        return [np.take(self.cum[n], i) + frac * np.take(self.rate[n], j) for n in names]


def longest_path(
    tr: TrajectoryPaths,
    own_prefill: np.ndarray,
    fixed_per_turn: float,
    cycle: np.ndarray,
    round_parts: dict[str, np.ndarray],
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The expected longest path of `tr`'s trajectories (candidates): its own prefill, `fixed_per_turn` seconds per
    turn (a KV transfer), its environment, and through its turns the rounds'
    `round_parts` (candidates x rounds): "decode" (seconds per decode token; a
    trajectory's tokens are spread evenly over its turns), "wait" (seconds per turn) and
    any other per-token part to report. Returns it and the expected parts of the longest.

    Round k is the k-th turn of the batch's mean pace (a turn per `cycle`). A trajectory
    slower than that pace (more decode tokens, longer environment steps) runs its k-th
    turn when the others are further on, so fewer run beside it: at pace ratio `r` (its
    time over the mean pace's for as many turns) its k-th turn meets round `k*r`, and its
    turns sum the rounds as `sum_k f(k*r) = (1/r) * F(T*r)` (F the running sum). `r`
    follows from the path it sets, a fixed point of a few iterations."""
    per_turn_decode = (tr.decode_tokens / tr.turns)[None, :]
    env = tr.env_s[None, :]
    fixed = own_prefill + (tr.turns * fixed_per_turn)[None, :] + env
    turns = tr.turns[None, :]
    sums = RunningSums({"cycle": cycle, **round_parts})
    (pace,) = sums.at(turns, "cycle")
    nxt = np.ones_like(own_prefill)
    for _ in range(_PACE_ITERATIONS):
        ratio = nxt
        at = turns * ratio
        dec, wt = sums.at(at, "decode", "wait")
        decode = per_turn_decode * dec / ratio
        wait = wt / ratio
        total = fixed + decode + wait
        nxt = np.maximum(0.5 * (ratio + total / pace), 1e-3)  # damped: r sets its path
    others = [k for k in round_parts if k not in ("decode", "wait")]
    extra = {
        k: per_turn_decode * v / ratio for k, v in zip(others, sums.at(at, *others), strict=True)
    }
    return expected_longest(
        total,
        tr.weights,
        {
            "prefill": own_prefill,
            "decode": decode,
            "wait": wait,
            "env": env,
            "turns": turns,
            **extra,
        },
    )
