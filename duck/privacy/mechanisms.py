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
import sys
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from scipy.special import log_ndtr, ndtr

from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int, check_seed, real_array_tensor

Seed = int | torch.Generator | None


def check_eps(eps: Any, *, upper: float | None = None) -> float:
    """Validate a privacy parameter epsilon: a finite real number ``> 0`` (and ``<= upper`` when given)."""
    e = check_number(eps, "eps", 0.0, True)
    if upper is not None and e > upper:
        raise DuckInputError(f"eps={eps!r} must be <= {upper} for this mechanism; lower eps")
    return e


def check_delta(delta: Any, name: str = "delta") -> float:
    """Validate a privacy parameter delta: a real number strictly between 0 and 1, and not below the smallest
    normal float64 (the calibrations take ln(2 / delta), which overflows for subnormal deltas)."""
    value = check_number(delta, name, 0.0, True, 1.0, True)
    if value < sys.float_info.min:
        raise DuckInputError(
            f"{name}={value!r} is below the smallest normal float64 ({sys.float_info.min:.3g}): ln(2 / delta) "
            "overflows; use a delta of at least 1e-300 (practical deltas are far larger, e.g. 1e-5)"
        )
    return value


def check_sensitivity(value: Any, name: str = "sensitivity") -> float:
    """Validate a sensitivity (or a smooth upper bound on one): a finite real number ``> 0``.

    A zero sensitivity would release the value without noise; every mechanism here refuses it.
    """
    return check_number(value, name, 0.0, True)


#: noise calibrations of the global-sensitivity Gaussian mechanism
CALIBRATIONS = ("classic", "analytic")


def check_calibration(calibration: Any) -> str:
    """Validate the Gaussian calibration name (one of :data:`CALIBRATIONS`)."""
    if not isinstance(calibration, str) or calibration not in CALIBRATIONS:
        raise DuckInputError(f"calibration={calibration!r} is not supported; use 'classic' or 'analytic'")
    return calibration


def make_generator(seed: Seed, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator: OS-seeded when ``seed`` is None, seeded when it is an int, or ``seed`` itself."""
    if isinstance(seed, torch.Generator):
        return seed
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise DuckInputError(f"seed={seed!r} must be None, an int or a torch.Generator")
    value = None if seed is None else check_seed(seed, "seed")
    gen = torch.Generator(device=device)
    if value is None:
        gen.seed()  # non-deterministic seed from the OS; never torch's fixed default
    else:
        gen.manual_seed(value)
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


def _finite_sigma(sigma: float, sensitivity: float, eps: float) -> float:
    """``sigma`` itself when finite and > 0; a noise scale that overflows (or underflows to 0) is an input
    error: the mechanism never releases inf or an un-noised value."""
    if not (math.isfinite(sigma) and sigma > 0.0):
        raise DuckInputError(
            f"the noise scale {'underflows to 0' if sigma == 0.0 else 'overflows'} in float64 for "
            f"sensitivity={sensitivity!r} and eps={eps!r}; rescale the query (sensitivity nearer 1) or change eps"
        )
    return sigma


def gaussian_sigma_classic(sensitivity: float, eps: float, delta: float) -> float:
    """Theorem 1 of the paper: ``sigma = GS sqrt(2 ln(2/delta)) / eps`` (the classic analysis needs eps < 1)."""
    sensitivity = check_sensitivity(sensitivity)
    eps = check_eps(eps)
    delta = check_delta(delta)
    if eps >= 1.0:
        raise DuckInputError(
            f"eps={eps} >= 1: the classic Gaussian calibration (paper Theorem 1) is only proven for eps < 1; "
            "use calibration='analytic'"
        )
    return _finite_sigma(sensitivity * math.sqrt(2.0 * math.log(2.0 / delta)) / eps, sensitivity, eps)


def _analytic_delta(sigma: float, sensitivity: float, eps: float) -> float:
    """Exact delta of the Gaussian mechanism at eps (Balle & Wang 2018, Theorem 8)."""
    a = sensitivity / (2.0 * sigma)
    b = eps * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(eps + log_ndtr(-a - b)))


@functools.lru_cache(maxsize=256)
def _analytic_sigma(sensitivity: float, eps: float, delta: float, tol: float) -> float:
    """Bisection of :func:`gaussian_sigma_analytic`; called with validated Python floats only (cache keys)."""
    lo, hi = 1e-12 * sensitivity, sensitivity
    while _analytic_delta(hi, sensitivity, eps) > delta and math.isfinite(hi):  # delta(sigma) decreases
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


def gaussian_sigma_analytic(sensitivity: float, eps: float, delta: float, tol: float = 1e-12) -> float:
    """Smallest sigma for which the Gaussian mechanism is (eps, delta)-DP (Balle & Wang 2018), by bisection."""
    sensitivity = check_sensitivity(sensitivity)
    eps = check_eps(eps)
    delta = check_delta(delta)
    tol = check_number(tol, "tol", 0.0, True, 1.0, True)
    # sigma scales with the sensitivity: bisect for its mantissa, then scale by the power of two exactly
    # (bit-identical to bisecting with the sensitivity itself, without overflow or division by 0 at the
    # ends of the float range)
    mantissa, exponent = math.frexp(sensitivity)
    try:
        sigma = math.ldexp(_analytic_sigma(mantissa, eps, delta, tol), exponent)
    except OverflowError:
        sigma = math.inf
    return _finite_sigma(sigma, sensitivity, eps)


def gaussian_sigma(sensitivity: float, eps: float, delta: float, calibration: str = "classic") -> float:
    """Noise scale of the global-sensitivity Gaussian mechanism: ``"classic"`` (paper) or ``"analytic"``.

    ``sensitivity`` must be a finite number > 0; a noise scale that overflows float64 raises.
    """
    if check_calibration(calibration) == "classic":
        return gaussian_sigma_classic(sensitivity, eps, delta)
    return gaussian_sigma_analytic(sensitivity, eps, delta)


#: |N(0, 1)| draws in float64 stay far below this; ``|value| + headroom * sigma`` must be finite
_NOISE_HEADROOM = 64.0


def _noisy_value(value: Any, sigma: float, seed: Seed) -> float:
    """``value + sigma N(0, 1)`` for a finite real scalar ``value``; checks everything before drawing."""
    value = check_number(value, "value", -math.inf, False)
    if not math.isfinite(abs(value) + _NOISE_HEADROOM * sigma):
        raise DuckInputError(
            f"value={value!r} plus noise of scale sigma={sigma!r} overflows float64; rescale the query"
        )
    return value + sigma * _standard_normal(make_generator(seed))


def _standard_normal(gen: torch.Generator) -> float:
    return float(torch.randn((), generator=gen, dtype=torch.float64, device=gen.device))


def gaussian_mechanism(
    value: float, sensitivity: float, eps: float, delta: float, *, calibration: str = "classic", seed: Seed = None
) -> DPRelease:
    """Release ``value + N(0, sigma^2)`` with sigma calibrated to the global sensitivity (paper Theorem 1).

    ``value`` is one finite real number (a scalar query, e.g. a count); ``sensitivity`` a finite number > 0.
    """
    sensitivity = check_sensitivity(sensitivity)
    eps = check_eps(eps)
    delta = check_delta(delta)
    sigma = gaussian_sigma(sensitivity, eps, delta, calibration)
    noisy = _noisy_value(value, sigma, seed)
    return DPRelease(noisy, sigma, sensitivity, f"gaussian_global_{calibration}", eps, delta, True)


def smooth_gaussian_params(eps: float, delta: float, p: int = 1) -> tuple[float, float]:
    """``(alpha, beta)`` of paper Theorem 2 for a p-dimensional query (p = 1 for a count).

    ``p`` is the query's dimension: an integer between 1 and 2**53.
    """
    eps = check_eps(eps, upper=1.0)
    delta = check_delta(delta)
    p = check_positive_int(p, "p")
    if p > 2**53:
        raise DuckInputError(f"p={p!r} must be an integer between 1 and 2**53 (the dimension of the query)")
    log_term = math.log(2.0 / delta)
    alpha = eps / (5.0 * math.sqrt(2.0 * log_term))
    beta = eps / (4.0 * (p + log_term))
    if alpha == 0.0 or beta == 0.0:
        raise DuckInputError(f"eps={eps!r} is too small: alpha or beta underflows to 0 in float64; raise eps")
    return alpha, beta


def smooth_gaussian_mechanism(
    value: float, smooth_bound: float, eps: float, delta: float, *, seed: Seed = None
) -> DPRelease:
    """Release ``value + (S/alpha) N(0, 1)`` (paper Theorem 2); ``smooth_bound`` must be beta-smooth with the
    beta of :func:`smooth_gaussian_params` (eps <= 1, where Nissim et al.'s admissibility proof applies).

    ``value`` is one finite real number; ``smooth_bound`` a finite number > 0.
    """
    alpha, _ = smooth_gaussian_params(eps, delta)
    smooth_bound = check_sensitivity(smooth_bound, "smooth_bound")
    sigma = _finite_sigma(smooth_bound / alpha, smooth_bound, eps)
    noisy = _noisy_value(value, sigma, seed)
    return DPRelease(noisy, sigma, smooth_bound, "gaussian_smooth", float(eps), float(delta), False)


def _utilities(utilities: Any) -> torch.Tensor:
    """Utilities as a (n,) float64 CPU tensor: a non-empty 1-D array of finite real numbers."""
    u = real_array_tensor(utilities, "utilities", "1-D").to(device="cpu", dtype=torch.float64)
    if u.ndim != 1 or u.numel() == 0:
        raise DuckInputError(f"utilities must be a non-empty 1-D array, got shape {tuple(u.shape)}")
    if not torch.isfinite(u).all():
        raise DuckInputError("utilities contain NaN or inf; every candidate needs a finite utility")
    return u


def exponential_mechanism_logits(utilities: Any, eps: float, sensitivity: float = 1.0) -> torch.Tensor:
    """Log-probabilities (up to a constant) ``eps u / (2 Delta_u)`` of the eps-DP exponential mechanism."""
    u = _utilities(utilities)
    eps = check_eps(eps)
    sensitivity = check_sensitivity(sensitivity)
    logits = u * (eps / (2.0 * sensitivity))
    if not torch.isfinite(logits).all():
        raise DuckInputError(
            f"eps * utilities / (2 sensitivity) overflows float64 (eps={eps!r}, sensitivity={sensitivity!r}); "
            "rescale the utilities or the sensitivity"
        )
    return logits


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
    if isinstance(h, bool) or not isinstance(h, (int, np.integer)) or not (1 <= h <= u.numel()):
        raise DuckInputError(f"h={h!r} must be an integer between 1 and the number of candidates ({u.numel()})")
    logits = exponential_mechanism_logits(u, check_eps(eps) / int(h), sensitivity)
    gen = make_generator(seed)
    uniform = torch.rand(u.shape, generator=gen, dtype=torch.float64, device=gen.device).cpu()
    uniform = uniform.clamp_min(torch.finfo(torch.float64).tiny)
    gumbel = -torch.log(-torch.log(uniform))
    return torch.topk(logits + gumbel, int(h)).indices.tolist()
