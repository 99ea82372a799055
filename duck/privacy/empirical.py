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
from duck.utils import check_number, check_positive_int, real_array_tensor


def _hockey_stick(p: np.ndarray, q: np.ndarray, n_p: int, n_q: int, eps: float) -> tuple[float, float]:
    # Beyond eps = ln(n_q) + 1, e^eps q >= e > 1 >= p in every bin with q > 0 (q >= 1/n_q there), so only the
    # bins with q = 0 are selected and the result no longer depends on eps: capping eps changes nothing but
    # keeps e^eps and e^(2 eps) finite.
    eps = min(eps, math.log(n_q) + 1.0)
    excess = p - math.exp(eps) * q  # (bins,)
    selected = excess > 0
    estimate = float(excess[selected].sum())
    variance = (p * (1 - p) / n_p + math.exp(2 * eps) * q * (1 - q) / n_q)[selected].sum()
    return estimate, float(math.sqrt(variance))


def _draws(samples: Any, name: str) -> np.ndarray:
    """Draws of a mechanism as a flat float64 array of finite real numbers (at least 100 of them)."""
    a = real_array_tensor(samples, name, "1-D").cpu().numpy().astype(np.float64, copy=False).ravel()
    if a.size < 100:
        raise DuckInputError(f"{name} holds {a.size} draws; need at least 100 draws per data set")
    bad = int((~np.isfinite(a)).sum())
    if bad:
        raise DuckInputError(
            f"{name} contains {bad} NaN or inf draws; a DP mechanism must release finite values: fix the mechanism"
        )
    return a


def dp_histogram_test(
    samples_x: Any, samples_x_prime: Any, eps: float, delta: float, *, n_bins: int = 100, z: float = 4.0
) -> dict[str, float | bool]:
    """Histogram test of (eps, delta)-DP from draws of ``A(X)`` and ``A(X')`` (1-D real outputs).

    Bins are equal-mass quantile bins of the pooled draws (open-ended at both sides); ``n_bins`` is an
    integer from 2 to the number of pooled draws, ``z >= 0`` the number of standard errors allowed. Returns
    ``delta_hat`` (the larger of the two directions), its standard error, the threshold
    ``delta + z * se`` and ``passed``.
    """
    eps = check_eps(eps)
    delta = check_delta(delta)
    n_bins = check_positive_int(n_bins, "n_bins", 2)
    z = check_number(z, "z", 0.0, False)
    a = _draws(samples_x, "samples_x")
    b = _draws(samples_x_prime, "samples_x_prime")
    if n_bins > a.size + b.size:
        raise DuckInputError(
            f"n_bins={n_bins} exceeds the number of pooled draws ({a.size + b.size}); use fewer bins"
        )
    edges = np.unique(np.quantile(np.concatenate([a, b]), np.linspace(0, 1, n_bins + 1)[1:-1]))
    edges = np.concatenate([[-np.inf], edges, [np.inf]])
    p = np.histogram(a, edges)[0] / a.size
    q = np.histogram(b, edges)[0] / b.size
    forward = _hockey_stick(p, q, a.size, b.size, eps)
    backward = _hockey_stick(q, p, b.size, a.size, eps)
    delta_hat, se = max(forward, backward)
    threshold = delta + z * se
    return {"delta_hat": delta_hat, "se": se, "threshold": threshold, "passed": delta_hat <= threshold}
