"""Empirical check of an (eps, delta)-DP guarantee from samples of a mechanism on two neighbouring inputs.

For outputs ``A(X)`` and ``A(X')`` the guarantee ``P[A(X) in T] <= e^eps P[A(X') in T] + delta`` for all T
is equivalent to the hockey-stick divergence ``sup_T P[A(X) in T] - e^eps P[A(X') in T] <= delta``. On a
histogram with bins ``b`` the supremum over unions of bins is ``sum_b max(0, p_b - e^eps q_b)``; we
estimate it from draws (both directions) and compare it with delta plus ``z`` standard errors of the
estimate. A histogram can only detect violations at its resolution, so the check can refute a guarantee,
never prove one; tests pair it with a negative control that must fail.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from duck.errors import DuckInputError
from duck.privacy.mechanisms import check_delta, check_eps


def _hockey_stick(p: np.ndarray, q: np.ndarray, n_p: int, n_q: int, eps: float) -> tuple[float, float]:
    excess = p - math.exp(eps) * q  # (bins,)
    selected = excess > 0
    estimate = float(excess[selected].sum())
    variance = (p * (1 - p) / n_p + math.exp(2 * eps) * q * (1 - q) / n_q)[selected].sum()
    return estimate, float(math.sqrt(variance))


def dp_histogram_test(
    samples_x: Any, samples_x_prime: Any, eps: float, delta: float, *, n_bins: int = 100, z: float = 4.0
) -> dict[str, float | bool]:
    """Histogram test of (eps, delta)-DP from draws of ``A(X)`` and ``A(X')`` (1-D real outputs).

    Bins are equal-mass quantile bins of the pooled draws (open-ended at both sides). Returns
    ``delta_hat`` (the larger of the two directions), its standard error, the threshold
    ``delta + z * se`` and ``passed``.
    """
    eps = check_eps(eps)
    delta = check_delta(delta)
    a = np.asarray(samples_x, dtype=np.float64).ravel()
    b = np.asarray(samples_x_prime, dtype=np.float64).ravel()
    if a.size < 100 or b.size < 100:
        raise DuckInputError(f"need at least 100 draws per data set, got {a.size} and {b.size}")
    if n_bins < 2:
        raise DuckInputError(f"n_bins={n_bins} must be >= 2")
    edges = np.unique(np.quantile(np.concatenate([a, b]), np.linspace(0, 1, n_bins + 1)[1:-1]))
    edges = np.concatenate([[-np.inf], edges, [np.inf]])
    p = np.histogram(a, edges)[0] / a.size
    q = np.histogram(b, edges)[0] / b.size
    forward = _hockey_stick(p, q, a.size, b.size, eps)
    backward = _hockey_stick(q, p, b.size, a.size, eps)
    delta_hat, se = max(forward, backward)
    threshold = delta + z * se
    return {"delta_hat": delta_hat, "se": se, "threshold": threshold, "passed": delta_hat <= threshold}
