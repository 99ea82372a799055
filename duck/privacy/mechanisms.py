"""Differential-privacy mechanisms used by the DP outlier analysis (Okada et al., seeds/004 §2).

* Gaussian mechanism calibrated to the global sensitivity (Theorem 1 of the paper, Dwork et al. 2006):
  ``A(X) = q(X) + N(0, sigma^2)`` with ``sigma = GS * sqrt(2 ln(2/delta)) / eps`` ("classic", valid for
  ``eps < 1``), or the analytic calibration of Balle & Wang (2018, Theorem 8), exact for every ``eps``.
* Gaussian mechanism calibrated to a beta-smooth upper bound ``S`` of the local sensitivity (Theorem 2,
  Nissim, Raskhodnikova & Smith 2007): ``A(X) = q(X) + (S(X) / alpha) * N(0, 1)`` with
  ``alpha = eps / (5 sqrt(2 ln(2/delta)))`` and ``beta = eps / (4 (p + ln(2/delta)))`` (``p = 1`` for a
  scalar query).
* Exponential mechanism (McSherry & Talwar 2007; Theorem 3) and its top-h-without-replacement form
  (Algorithm 3 of the paper), sampled with the Gumbel-max trick.

Randomness: every function takes ``seed``. ``None`` draws a fresh seed from the operating system (never a
fixed default), an ``int`` makes the noise reproducible (tests, benchmarks), and a ``torch.Generator`` is
used as given. Noise is drawn in float64 with torch's generators. Like every floating-point implementation
of a continuous mechanism, it is exposed to the least-significant-bit attacks of Mironov (2012); that
limitation is documented, not mitigated.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import log_ndtr, ndtr

from duck.errors import DuckInputError

Seed = int | torch.Generator | None


def check_eps(eps: float, *, upper: float | None = None) -> float:
    """Validate a privacy parameter epsilon (``0 < eps``, and ``eps <= upper`` when given)."""
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise DuckInputError(f"eps={eps!r} is not a number; pass a positive float such as eps=0.5") from None
    if not math.isfinite(e) or e <= 0:
        raise DuckInputError(f"eps={eps!r} must be a finite number > 0 (e.g. eps=0.5)")
    if upper is not None and e > upper:
        raise DuckInputError(f"eps={eps!r} must be <= {upper} for this mechanism; lower eps")
    return e


def check_delta(delta: float) -> float:
    """Validate a privacy parameter delta (``0 < delta < 1``)."""
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise DuckInputError(f"delta={delta!r} is not a number; pass a float in (0, 1) such as 1e-5") from None
    if not (0.0 < d < 1.0):
        raise DuckInputError(f"delta={delta!r} must lie strictly between 0 and 1 (e.g. delta=1e-5)")
    return d


def make_generator(seed: Seed, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator: OS-seeded when ``seed`` is None, seeded when it is an int, or ``seed`` itself."""
    if isinstance(seed, torch.Generator):
        return seed
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()  # non-deterministic seed from the OS; never torch's fixed default
    elif isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        gen.manual_seed(int(seed))
    else:
        raise DuckInputError(f"seed={seed!r} must be None, an int or a torch.Generator")
    return gen


@dataclass(frozen=True)
class DPRelease:
    """One released noisy value and how it was produced.

    ``value`` is the only quantity covered by the (eps, delta) guarantee. ``sigma`` and ``sensitivity`` are
    data-independent (hence publishable) when ``sigma_is_public`` is True (global-sensitivity mechanisms);
    for the smooth-sensitivity mechanism they depend on the data and must not be published.
    """

    value: float
    sigma: float
    sensitivity: float
    mechanism: str
    eps: float
    delta: float
    sigma_is_public: bool

    def __float__(self) -> float:
        return self.value

    def to_dict(self, *, public_only: bool = True) -> dict[str, Any]:
        """JSON-able dict; with ``public_only`` a data-dependent sigma/sensitivity is left out."""
        d = asdict(self)
        if public_only and not self.sigma_is_public:
            d.pop("sigma")
            d.pop("sensitivity")
        return d


def gaussian_sigma_classic(sensitivity: float, eps: float, delta: float) -> float:
    """Theorem 1 of the paper: ``sigma = GS sqrt(2 ln(2/delta)) / eps`` (the classic analysis needs eps < 1)."""
    eps = check_eps(eps)
    delta = check_delta(delta)
    if eps >= 1.0:
        raise DuckInputError(
            f"eps={eps} >= 1: the classic Gaussian calibration (paper Theorem 1) is only proven for eps < 1; "
            "use calibration='analytic'"
        )
    return float(sensitivity) * math.sqrt(2.0 * math.log(2.0 / delta)) / eps


def _analytic_delta(sigma: float, sensitivity: float, eps: float) -> float:
    """Exact delta of the Gaussian mechanism at eps (Balle & Wang 2018, Theorem 8)."""
    a = sensitivity / (2.0 * sigma)
    b = eps * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(eps + log_ndtr(-a - b)))


@functools.lru_cache(maxsize=256)
def gaussian_sigma_analytic(sensitivity: float, eps: float, delta: float, tol: float = 1e-12) -> float:
    """Smallest sigma for which the Gaussian mechanism is (eps, delta)-DP (Balle & Wang 2018), by bisection."""
    eps = check_eps(eps)
    delta = check_delta(delta)
    if sensitivity <= 0:
        raise DuckInputError(f"sensitivity={sensitivity} must be > 0")
    lo, hi = 1e-12 * sensitivity, sensitivity
    while _analytic_delta(hi, sensitivity, eps) > delta:  # delta(sigma) decreases in sigma
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _analytic_delta(mid, sensitivity, eps) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo <= tol * hi:
            break
    return hi


def gaussian_sigma(sensitivity: float, eps: float, delta: float, calibration: str = "classic") -> float:
    """Noise scale of the global-sensitivity Gaussian mechanism: ``"classic"`` (paper) or ``"analytic"``."""
    if calibration == "classic":
        return gaussian_sigma_classic(sensitivity, eps, delta)
    if calibration == "analytic":
        return gaussian_sigma_analytic(sensitivity, eps, delta)
    raise DuckInputError(f"calibration={calibration!r} is not supported; use 'classic' or 'analytic'")


def _standard_normal(gen: torch.Generator) -> float:
    return float(torch.randn((), generator=gen, dtype=torch.float64, device=gen.device))


def gaussian_mechanism(
    value: float, sensitivity: float, eps: float, delta: float, *, calibration: str = "classic", seed: Seed = None
) -> DPRelease:
    """Release ``value + N(0, sigma^2)`` with sigma calibrated to the global sensitivity (paper Theorem 1)."""
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise DuckInputError(f"sensitivity={sensitivity!r} must be a finite number > 0")
    sigma = gaussian_sigma(sensitivity, eps, delta, calibration)
    noisy = float(value) + sigma * _standard_normal(make_generator(seed))
    return DPRelease(noisy, sigma, float(sensitivity), f"gaussian_global_{calibration}", float(eps), float(delta), True)


def smooth_gaussian_params(eps: float, delta: float, p: int = 1) -> tuple[float, float]:
    """``(alpha, beta)`` of paper Theorem 2 for a p-dimensional query (p = 1 for a count)."""
    eps = check_eps(eps, upper=1.0)
    delta = check_delta(delta)
    log_term = math.log(2.0 / delta)
    alpha = eps / (5.0 * math.sqrt(2.0 * log_term))
    beta = eps / (4.0 * (p + log_term))
    return alpha, beta


def smooth_gaussian_mechanism(
    value: float, smooth_bound: float, eps: float, delta: float, *, seed: Seed = None
) -> DPRelease:
    """Release ``value + (S/alpha) N(0, 1)`` (paper Theorem 2); ``smooth_bound`` must be beta-smooth with the
    beta of :func:`smooth_gaussian_params` (eps <= 1, where Nissim et al.'s admissibility proof applies)."""
    alpha, _ = smooth_gaussian_params(eps, delta)
    if not (smooth_bound > 0 and math.isfinite(smooth_bound)):
        raise DuckInputError(f"smooth_bound={smooth_bound!r} must be a finite number > 0")
    sigma = smooth_bound / alpha
    noisy = float(value) + sigma * _standard_normal(make_generator(seed))
    return DPRelease(noisy, sigma, float(smooth_bound), "gaussian_smooth", float(eps), float(delta), False)


def _utilities(utilities: Any) -> torch.Tensor:
    u = torch.as_tensor(np.asarray(utilities, dtype=np.float64))
    if u.ndim != 1 or u.numel() == 0:
        raise DuckInputError(f"utilities must be a non-empty 1-D array, got shape {tuple(u.shape)}")
    if not torch.isfinite(u).all():
        raise DuckInputError("utilities contain NaN or inf; every candidate needs a finite utility")
    return u


def exponential_mechanism_logits(utilities: Any, eps: float, sensitivity: float = 1.0) -> torch.Tensor:
    """Log-probabilities (up to a constant) ``eps u / (2 Delta_u)`` of the eps-DP exponential mechanism."""
    eps = check_eps(eps)
    if not (sensitivity > 0 and math.isfinite(sensitivity)):
        raise DuckInputError(f"sensitivity={sensitivity!r} must be a finite number > 0")
    return _utilities(utilities) * (eps / (2.0 * sensitivity))


def exponential_mechanism(utilities: Any, eps: float, sensitivity: float = 1.0, *, seed: Seed = None) -> int:
    """Index drawn with probability proportional to ``exp(eps u / (2 Delta_u))`` (eps-DP; paper Theorem 3).

    The paper states the mechanism as ``exp(eps u)`` with a 2 eps Delta_u guarantee; this is the same
    mechanism parametrised by its privacy level.
    """
    return top_h_without_replacement(utilities, 1, eps, sensitivity, seed=seed)[0]


def top_h_without_replacement(
    utilities: Any, h: int, eps: float, sensitivity: float = 1.0, *, seed: Seed = None
) -> list[int]:
    """Top-h items by h exponential-mechanism draws without replacement, eps/h each (paper Algorithm 3).

    Algorithm 3 redraws until an unseen item comes up, i.e. each round is the exponential mechanism
    restricted to the remaining items. Adding i.i.d. Gumbel(0, 1) noise to the logits and taking the h
    largest produces exactly that sequence of draws (Gumbel-max trick; Durfee & Rogers 2019), so the whole
    procedure is eps-DP by sequential composition of h (eps/h)-DP draws. Returned in draw order.
    """
    u = _utilities(utilities)
    if not isinstance(h, (int, np.integer)) or isinstance(h, bool) or not (1 <= h <= u.numel()):
        raise DuckInputError(f"h={h!r} must be an integer between 1 and the number of candidates ({u.numel()})")
    logits = exponential_mechanism_logits(u, check_eps(eps) / int(h), sensitivity)
    gen = make_generator(seed)
    uniform = torch.rand(u.shape, generator=gen, dtype=torch.float64).clamp_min(torch.finfo(torch.float64).tiny)
    gumbel = -torch.log(-torch.log(uniform))
    return torch.topk(logits + gumbel, int(h)).indices.tolist()
