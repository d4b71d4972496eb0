"""Robust least squares with a prior, for fitting cost coefficients from few samples.

`fit_with_prior(X, y, prior, prior_weight)` fits `y ~ X @ theta` in *relative* terms:

* each coefficient is written `theta_j = prior_j * s_j`, so every unknown `s_j` is a
  dimensionless multiplier of its prior (1 = "the prior was right");
* residuals are relative (`(y - yhat) / y`), so a 10 ms and a 1 s iteration weigh alike;
* a ridge term `prior_weight * |s - 1|^2` pulls the multipliers toward 1: with no samples
  the fit is the prior, with many it follows the data (`prior_weight` acts like that many
  samples of evidence for the prior);
* coefficients stay >= 0 (a small active-set loop pins negative ones at 0 and refits).

It reports a `FitQuality` (samples, relative RMS residual, confidence in 0..1).
Deterministic; numpy only.
"""

from __future__ import annotations

import numpy as np

from pearl.control.profile import FitQuality


def fit_with_prior(
    x: np.ndarray, y: np.ndarray, prior: np.ndarray, prior_weight: float = 20.0
) -> tuple[np.ndarray, FitQuality]:
    """Non-negative relative ridge fit of `y ~ x @ theta` around `prior` (see module doc).

    `x` is (n, k), `y` (n,) with y > 0 (rows with y <= 0 are dropped), `prior` (k,) > 0.
    """
    prior = np.maximum(np.asarray(prior, dtype=float), 1e-30)
    y = np.asarray(y, dtype=float).reshape(-1)
    x = np.asarray(x, dtype=float).reshape(len(y), len(prior))
    keep = np.isfinite(y) & (y > 0) & np.all(np.isfinite(x), axis=1)
    x, y = x[keep], y[keep]
    n, k = x.shape
    if n == 0:
        return prior.copy(), FitQuality(0, 0.0, 0.0)
    # Relative residuals: divide each row by its y; unknowns are multipliers of the prior.
    a = x * prior / y[:, None]
    b = np.ones(n)
    lam = max(prior_weight, 1e-9)
    free = np.ones(k, dtype=bool)
    s = np.ones(k)
    for _ in range(k + 1):
        s = np.zeros(k)
        af = a[:, free]
        lhs = af.T @ af + lam * np.eye(int(free.sum()))
        rhs = af.T @ b + lam * np.ones(int(free.sum()))
        s[free] = np.linalg.solve(lhs, rhs)
        if np.all(s[free] >= 0):
            break
        free &= s >= 0
        if not free.any():
            s = np.zeros(k)
            break
    theta = prior * s
    rel = (y - x @ theta) / y
    rel_rms = float(np.sqrt(np.mean(rel * rel)))
    confidence = (n / (n + lam)) / (1.0 + rel_rms)
    return theta, FitQuality(int(n), rel_rms, float(confidence))
