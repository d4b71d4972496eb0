"""Estimators of the laws the world's trajectory sampler draws from (`pearl.sim.trajectories`),
used to fit a workload from telemetry (`pearl.sim.workload_fit`).

* `lognormal_mixture`: environment-step latencies as a mixture of lognormals
  (expectation-maximisation on the log; the number of components by the Bayesian
  information criterion).
* `truncated_quantiles`: quantiles of a law from values each seen only because it fell
  below its own limit (an observation that would have filled the context ended its
  trajectory unseen, so the largest are missing from the records, most near the limit).
* `censored_quantiles`: quantiles of a law from values of which some are only lower
  bounds (a generation the length limit cut would have gone on).
* `turn_count_law`: the turn-count law (`run_to_cap_fraction`, and the lognormal of the
  trajectories that stop on their own, rounded and clipped to [min, max] turns) by maximum
  likelihood from trajectories of which many were *censored*: the length limit ended them
  before they would have stopped. Taking quantiles of the turn counts seen instead would
  mistake a cut trajectory's count for its own and shorten the law (on the default workload
  about half the trajectories are cut: median 18 and p90 26 turns against 20 and 40).

numpy only, deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

_Z90 = 1.2815515655446004
MIN_DURATION_S = 1e-3  # a duration shorter than this is taken as this (log of 0)
_SIGMA_FLOOR = 0.05  # a point mass (a timeout) is not an infinite density


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF, vectorised (Abramowitz & Stegun 7.1.26 for erf, |error| < 1.5e-7)."""
    z = np.asarray(x, dtype=float) / math.sqrt(2.0)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    erf = 1.0 - poly * np.exp(-a * a)
    return 0.5 * (1.0 + np.sign(z) * erf)


# -- environment latencies ---------------------------------------------------------------------
def lognormal_mixture(
    samples_s: Sequence[float], max_components: int = 3
) -> list[tuple[float, float, float]]:
    """Fit a mixture of lognormals to durations: `[(weight, mu, sigma), ...]` in log space,
    sorted by mu; 1..max_components components, chosen by the Bayesian information
    criterion (each extra component must pay for its three parameters)."""
    logs = np.log(np.maximum(np.asarray(samples_s, dtype=float), MIN_DURATION_S))
    n = len(logs)
    if n == 0:
        raise ValueError("no durations to fit")
    # EM on the distinct values at 1% resolution, each weighted by its count: as exact for
    # a fit, and fast on a long run's tens of thousands of steps
    y, counts = np.unique(np.round(logs, 2), return_counts=True)
    best: tuple[float, list[tuple[float, float, float]]] | None = None
    for k in range(1, min(max_components, len(y)) + 1):
        comps, loglik = _em(y, counts.astype(float), k)
        bic = -2.0 * loglik + (3 * k - 1) * math.log(n)
        if best is None or bic < best[0] - 1e-9:
            best = (bic, comps)
    assert best is not None
    return best[1]


def _em(
    y: np.ndarray, w: np.ndarray, k: int, iterations: int = 300
) -> tuple[list[tuple[float, float, float]], float]:
    """Expectation-maximisation of a k-component Gaussian mixture on values `y` seen `w`
    times each."""
    mean = float((w * y).sum() / w.sum())
    sd = max(math.sqrt(float((w * (y - mean) ** 2).sum() / w.sum())), _SIGMA_FLOOR)
    cum = np.cumsum(w) / w.sum()
    mu = y[np.minimum(np.searchsorted(cum, (np.arange(k) + 0.5) / k), len(y) - 1)]
    sigma = np.full(k, max(sd / k, _SIGMA_FLOOR))
    weight = np.full(k, 1.0 / k)
    loglik = -math.inf
    for _ in range(iterations):
        z = (y[:, None] - mu[None, :]) / sigma[None, :]
        log_p = np.log(weight)[None, :] - np.log(sigma)[None, :] - 0.5 * z**2
        log_p -= 0.5 * math.log(2 * math.pi)
        top = log_p.max(axis=1, keepdims=True)
        log_norm = top[:, 0] + np.log(np.exp(log_p - top).sum(axis=1))
        resp = np.exp(log_p - log_norm[:, None]) * w[:, None]
        new_loglik = float((w * log_norm).sum())
        mass = resp.sum(axis=0) + 1e-12
        weight = mass / mass.sum()
        mu = (resp * y[:, None]).sum(axis=0) / mass
        sigma = np.sqrt((resp * (y[:, None] - mu[None, :]) ** 2).sum(axis=0) / mass)
        sigma = np.maximum(sigma, _SIGMA_FLOOR)
        done = abs(new_loglik - loglik) < 1e-8 * max(1.0, abs(new_loglik))
        loglik = new_loglik
        if done:
            break
    order = np.argsort(mu)
    return [(float(weight[i]), float(mu[i]), float(sigma[i])) for i in order], loglik


# -- truncated token counts ---------------------------------------------------------------------
def truncated_quantiles(
    values: Sequence[float], limits: Sequence[float], quantiles: Sequence[float]
) -> list[float]:
    """Quantiles of a law X from values each seen only because it fell below its own limit
    (value i is a draw with X < `limits[i]`; draws at or above it were never recorded).

    Lynden-Bell's product-limit estimator for right-truncated data (Lynden-Bell 1971; the
    mirror image of Kaplan-Meier's): going down from the largest value, the distribution
    function below each distinct value t is its value at t times (1 - d/R), d the values
    equal to t and R those that could have been seen at t (a value at most t, a limit above
    t). Without truncation (every limit above every value) these are the sample's own
    quantiles; nothing is assumed about X's shape. Each quantile is the smallest value
    whose estimated distribution function reaches it."""
    x = np.asarray(values, dtype=float)
    if len(x) == 0:
        raise ValueError("no values to fit")
    u = np.maximum(np.asarray(limits, dtype=float), x + 1e-9)  # a value is below its limit
    t, d = np.unique(x, return_counts=True)
    at_risk = np.searchsorted(np.sort(x), t, side="right") - np.searchsorted(
        np.sort(u), t, side="right"
    )
    keep = 1.0 - d / at_risk  # P(X < t_k | X <= t_k)
    below = np.cumprod(keep[::-1])[::-1]  # F(t_k-) = prod over t_j >= t_k of keep_j
    cdf = np.append(below[1:], 1.0)  # F(t_k) = F(t_{k+1}-)
    return [float(t[min(int(np.searchsorted(cdf, q - 1e-12)), len(t) - 1)]) for q in quantiles]


def censored_quantiles(
    values: Sequence[float], censored: Sequence[bool], quantiles: Sequence[float]
) -> list[float]:
    """Quantiles of a law X from values of which the `censored` ones are lower bounds
    (X >= value: the draw was cut there), by Kaplan and Meier's product-limit estimator
    (1958): going up through the distinct values t, the survival P(X > t) is multiplied by
    (1 - d/R), d the uncensored values equal to t and R the values that could still end at
    t (an uncensored value at least t, a censored one above t). Without censoring these are
    the sample's own quantiles. Each quantile is the smallest uncensored value whose
    estimated distribution function reaches it; where censoring hides the law above some
    quantile, the largest value seen."""
    v = np.asarray(values, dtype=float)
    cut = np.asarray(censored, dtype=bool)
    if len(v) == 0:
        raise ValueError("no values to fit")
    seen = np.sort(v[~cut])
    if len(seen) == 0:
        return [float(v.max())] * len(quantiles)
    t, d = np.unique(seen, return_counts=True)
    at_risk = (len(seen) - np.searchsorted(seen, t, side="left")) + (
        len(v[cut]) - np.searchsorted(np.sort(v[cut]), t, side="right")
    )
    cdf = 1.0 - np.cumprod(1.0 - d / at_risk)  # F(t_k) = 1 - prod over t_j <= t_k
    out = []
    for q in quantiles:
        i = int(np.searchsorted(cdf, q - 1e-12))
        out.append(float(t[i]) if i < len(t) else float(v.max()))
    return out


# -- turn counts -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TurnEnding:
    """How one trajectory ended, as its records show it.

    `turns`: its turn count. `cut_mid_turn`: the length limit cut its last generation (so it
    would have gone on). Otherwise it ended after its last turn, either on its own or
    because the observation left no room for another turn, which happens with probability
    `p_no_room` (from the observation law and how close it ended to the limit).
    """

    turns: int
    cut_mid_turn: bool = False
    p_no_room: float = 0.0


@dataclass(frozen=True, slots=True)
class TurnCountLaw:
    """`WorkloadSpec`'s turn fields: the share run to the cap, and the lognormal of the
    others by its median and 90th percentile (before rounding and clipping)."""

    run_to_cap_fraction: float
    median: float
    p90: float


def _pmf_and_survival(
    mu: np.ndarray, sigma: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each (mu, sigma) row: P(N = n), P(N > n), P(N >= n) for n = 0..hi, where N is a
    lognormal rounded and clipped to [lo, hi] (the sampler's `_num_turns`)."""
    n = np.arange(hi + 2, dtype=float)
    edges = np.log(np.maximum(n - 0.5, 1e-12))  # round(X) <= n - 1  <=>  X < n - 0.5
    below = normal_cdf((edges[None, :] - mu[:, None]) / sigma[:, None])  # P(round(X) < n)
    below[:, : lo + 1] = 0.0  # clipped up to lo: N >= lo always
    below[:, hi + 1 :] = 1.0  # clipped down to hi: N <= hi always
    pmf = below[:, 1:] - below[:, :-1]  # P(N = n), n = 0..hi
    ge = 1.0 - below[:, :-1]  # P(N >= n)
    gt = 1.0 - below[:, 1:]  # P(N > n)
    return pmf, gt, ge


def _loglik(
    endings: Sequence[TurnEnding],
    counts: np.ndarray,
    bounds: tuple[int, int],
    mu: np.ndarray,
    sigma: np.ndarray,
    f: np.ndarray,
) -> np.ndarray:
    """Log-likelihood of the endings (each seen `counts[i]` times) for each (mu, sigma, f)."""
    lo, hi = bounds
    pmf, gt, ge = _pmf_and_survival(mu, sigma, lo, hi)
    total = np.zeros(len(mu))
    for w, e in zip(counts, endings, strict=True):
        n = min(max(e.turns, 0), hi)
        if e.cut_mid_turn:  # would have run on: N >= n, or a run to the cap
            like = f + (1 - f) * ge[:, n]
        elif n >= hi:  # reached the turn cap
            like = f + (1 - f) * pmf[:, n]
        else:  # on its own, or no room left for the next turn while it would have run on
            like = (1 - f) * pmf[:, n] + e.p_no_room * (f + (1 - f) * gt[:, n])
        total += w * np.log(np.maximum(like, 1e-300))
    return total


def turn_count_law(endings: Sequence[TurnEnding], min_turns: int, max_turns: int) -> TurnCountLaw:
    """Maximum-likelihood turn-count law (a grid search, refined twice around its best)."""
    if not endings:
        raise ValueError("no trajectories to fit a turn count to")
    lo, hi = max(1, min_turns), max(max_turns, min_turns, 1)
    # the likelihood depends on each ending only through (turns, kind, p_no_room): group them
    groups: dict[tuple[int, bool, float], int] = {}
    for e in endings:
        key = (e.turns, e.cut_mid_turn, round(e.p_no_room * 50) / 50)
        groups[key] = groups.get(key, 0) + 1
    uniq = [TurnEnding(t, c, q) for (t, c, q) in groups]
    weights = np.array(list(groups.values()), dtype=float)

    def score(mu: np.ndarray, sigma: np.ndarray, f: np.ndarray) -> np.ndarray:
        return _loglik(uniq, weights, (lo, hi), mu, sigma, f)

    mu_axis = np.linspace(math.log(lo) - 1.0, math.log(hi) + 1.5, 36)
    sig_axis = np.geomspace(0.03, 2.5, 30)
    f_axis = np.linspace(0.0, 1.0, 26)
    best = _grid_best(score, mu_axis, sig_axis, f_axis)
    for _ in range(2):
        dm, ds, df = (
            mu_axis[1] - mu_axis[0],
            np.log(sig_axis[1] / sig_axis[0]),
            f_axis[1] - f_axis[0],
        )
        mu_axis = np.linspace(best[0] - dm, best[0] + dm, 11)
        sig_axis = np.exp(np.linspace(math.log(best[1]) - ds, math.log(best[1]) + ds, 11))
        f_axis = np.clip(np.linspace(best[2] - df, best[2] + df, 11), 0.0, 1.0)
        best = _grid_best(score, mu_axis, sig_axis, f_axis)
    mu, sigma, f = best
    median = math.exp(mu)
    return TurnCountLaw(float(f), median, median * math.exp(_Z90 * sigma))


def limit_ended_share(
    endings: Sequence[TurnEnding], law: TurnCountLaw, min_turns: int, max_turns: int
) -> float:
    """The share of these trajectories the length limit ended, under `law`: a cut one for
    certain; one that ended after its last turn with the posterior chance that the limit,
    not the policy, ended it (the terms of `_loglik`)."""
    if not endings:
        return 0.0
    lo, hi = max(1, min_turns), max(max_turns, min_turns, 1)
    mu = np.array([math.log(law.median)])
    sigma = np.array([max(math.log(max(law.p90, law.median) / law.median) / _Z90, _SIGMA_FLOOR)])
    pmf, gt, _ = _pmf_and_survival(mu, sigma, lo, hi)
    f = law.run_to_cap_fraction
    total = 0.0
    for e in endings:
        n = min(max(e.turns, 0), hi)
        if e.cut_mid_turn:
            total += 1.0
        elif n < hi:
            by_limit = e.p_no_room * (f + (1 - f) * float(gt[0, n]))
            own = (1 - f) * float(pmf[0, n])
            total += by_limit / (by_limit + own) if by_limit + own > 0 else 0.0
    return total / len(endings)


def _grid_best(
    score: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    mu_axis: np.ndarray,
    sig_axis: np.ndarray,
    f_axis: np.ndarray,
) -> tuple[float, float, float]:
    """The (mu, sigma, f) of the grid with the highest score."""
    m, s, f = np.meshgrid(mu_axis, sig_axis, f_axis, indexing="ij")
    values = score(m.ravel(), s.ravel(), f.ravel())
    i = int(np.argmax(values))
    return float(m.ravel()[i]), float(s.ravel()[i]), float(f.ravel()[i])
