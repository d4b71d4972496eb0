"""Robust least squares with a prior, for fitting cost coefficients from few samples.

`fit_with_prior(X, y, prior, prior_weight)` fits `y ~ X @ theta` in *relative* terms:

* each coefficient is written `theta_j = prior_j * s_j`, so every unknown `s_j` is a
  dimensionless multiplier of its prior (1 = "the prior was right");
* residuals are relative (`(y - yhat) / y`), so a 10 ms and a 1 s iteration weigh alike;
* a ridge term `lam * |s - 1|^2` pulls the multipliers toward 1 (a Gaussian prior with
  relative standard deviation `prior_rel_sd`, weighed against the residual noise): with
  no samples the fit is the prior, with few it moves only as far as the data demand
  (unidentified directions stay at the prior), with many it follows the data;
* coefficients stay >= 0 (a small active-set loop pins negative ones at 0 and refits);
* first, the prior's *level* is corrected: a prior from specs is often off by one common
  factor (a CPU slot's Python overhead, a GPU's real efficiency), and a ridge around a prior
  several times too small would hold the fit near it (its relative design shrinks with the
  error). The level `g` is the shrunk geometric mean of `y / (x @ prior)` (a log-normal
  prior of 4x spread against the ratios' own scatter), and the multipliers are fitted
  around `g * prior`.

It reports a `FitQuality` (samples, relative RMS residual, confidence in 0..1).
Deterministic; numpy only.
"""

from __future__ import annotations

import numpy as np

from pearl.control.profile import FitQuality


def fit_with_prior(
    x: np.ndarray,
    y: np.ndarray,
    prior: np.ndarray,
    prior_weight: float = 20.0,
    prior_rel_sd: float = 0.5,
) -> tuple[np.ndarray, FitQuality]:
    """Non-negative relative ridge fit of `y ~ x @ theta` around `prior` (see module doc).

    `x` is (n, k), `y` (n,) with y > 0 (rows with y <= 0 are dropped), `prior` (k,) > 0.
    The ridge weight is Bayesian: `noise_var / prior_rel_sd**2`, where the noise variance
    of the relative residuals is estimated from an almost unregularised first pass (a
    default of 10% when there are no more rows than unknowns). `prior_weight` is the number
    of pseudo-samples the confidence score gives the prior.
    """
    prior = np.maximum(np.asarray(prior, dtype=float), 1e-30)
    y = np.asarray(y, dtype=float).reshape(-1)
    x = np.asarray(x, dtype=float).reshape(len(y), len(prior))
    keep = np.isfinite(y) & (y > 0) & np.all(np.isfinite(x), axis=1)
    x, y = x[keep], y[keep]
    n, k = x.shape
    if n == 0:
        return prior.copy(), FitQuality(0, 0.0, 0.0)
    prior = prior * _level(x, y, prior)
    # Relative residuals: divide each row by its y; unknowns are multipliers of the prior.
    a = x * prior / y[:, None]
    if n > k:
        r = 1.0 - a @ _solve(a, 1e-9)
        noise_var = float(np.clip(r @ r / (n - k), 1e-8, 1.0))
    else:
        noise_var = 0.1**2
    s = _solve(a, noise_var / prior_rel_sd**2)
    theta = prior * s
    rel = (y - x @ theta) / y
    rel_rms = float(np.sqrt(np.mean(rel * rel)))
    confidence = (n / (n + max(prior_weight, 0.0))) / (1.0 + rel_rms)
    return theta, FitQuality(int(n), rel_rms, float(confidence))


_LEVEL_LOG_SD = float(np.log(4.0))


def _level(x: np.ndarray, y: np.ndarray, prior: np.ndarray) -> float:
    """The shrunk geometric mean of observed over prior-predicted (see module doc)."""
    pred = x @ prior
    ok = pred > 0
    if not ok.any():
        return 1.0
    logs = np.log(y[ok] / pred[ok])
    n = len(logs)
    scatter = max(float(np.var(logs)), 0.05**2) if n > 1 else 0.25**2
    shrink = n * _LEVEL_LOG_SD**2 / (n * _LEVEL_LOG_SD**2 + scatter)
    return float(np.exp(shrink * float(np.mean(logs))))


def _solve(a: np.ndarray, lam: float) -> np.ndarray:
    """argmin |a s - 1|^2 + lam |s - 1|^2 subject to s >= 0 (small active-set loop)."""
    k = a.shape[1]
    free = np.ones(k, dtype=bool)
    s = np.ones(k)
    for _ in range(k + 1):
        s = np.zeros(k)
        af = a[:, free]
        m = int(free.sum())
        lhs = af.T @ af + lam * np.eye(m)
        rhs = af.T @ np.ones(len(a)) + lam * np.ones(m)
        s[free] = np.linalg.lstsq(lhs, rhs, rcond=None)[0]
        if np.all(s[free] >= 0):
            break
        free &= s >= 0
        if not free.any():
            return np.zeros(k)
    return s
