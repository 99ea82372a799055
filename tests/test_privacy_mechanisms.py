"""DP mechanisms: calibration against closed forms / numerical integration, seeding, exponential mechanism
frequencies, and the empirical (eps, delta) histogram check with a negative control."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy import integrate, stats

from duck.errors import DuckInputError
from duck.privacy import (
    dp_histogram_test,
    exponential_mechanism,
    gaussian_mechanism,
    gaussian_sigma,
    make_generator,
    smooth_gaussian_mechanism,
    smooth_gaussian_params,
    top_h_without_replacement,
)
from duck.privacy.mechanisms import exponential_mechanism_logits


def _hockey_stick_gaussians(shift: float, sigma: float, eps: float) -> float:
    """sup_T P[N(0,s^2) in T] - e^eps P[N(shift,s^2) in T] by numerical integration (independent reference)."""
    def integrand(x: float) -> float:
        return max(0.0, stats.norm.pdf(x, 0, sigma) - math.exp(eps) * stats.norm.pdf(x, shift, sigma))

    return integrate.quad(integrand, -40 * sigma, 40 * sigma + shift, limit=400, points=[0.0, shift])[0]


def test_classic_sigma_is_paper_theorem_1():
    assert gaussian_sigma(3.0, 0.5, 0.01) == pytest.approx(3.0 * math.sqrt(2 * math.log(2 / 0.01)) / 0.5)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_analytic_sigma_is_tight_against_numerical_integration(eps):
    sigma = gaussian_sigma(1.0, eps, 1e-3, calibration="analytic")
    assert _hockey_stick_gaussians(1.0, sigma, eps) == pytest.approx(1e-3, rel=1e-4)
    assert _hockey_stick_gaussians(1.0, 0.97 * sigma, eps) > 1e-3  # smaller noise breaks the guarantee
    if eps < 1:
        assert sigma < gaussian_sigma(1.0, eps, 1e-3, calibration="classic")


def test_smooth_params_are_paper_theorem_2():
    alpha, beta = smooth_gaussian_params(0.5, 0.01)
    log_term = math.log(200.0)
    assert alpha == pytest.approx(0.5 / (5 * math.sqrt(2 * log_term)))
    assert beta == pytest.approx(0.5 / (4 * (1 + log_term)))


@pytest.mark.parametrize(
    "call",
    [
        lambda: gaussian_mechanism(1.0, 1.0, 0.0, 0.1),
        lambda: gaussian_mechanism(1.0, 1.0, -1.0, 0.1),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, 0.0),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, 1.0),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, 1.5),
        lambda: gaussian_mechanism(1.0, 1.0, 1.5, 0.1),  # classic calibration needs eps < 1
        lambda: gaussian_mechanism(1.0, 0.0, 0.5, 0.1),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, 0.1, calibration="laplace"),
        lambda: smooth_gaussian_mechanism(1.0, 2.0, 1.5, 0.1),
        lambda: exponential_mechanism([1.0, 2.0], 0.0),
        lambda: exponential_mechanism([], 1.0),
        lambda: exponential_mechanism([1.0, float("nan")], 1.0),
        lambda: top_h_without_replacement([1.0, 2.0], 3, 1.0),
        lambda: make_generator("seed"),
    ],
)
def test_bad_privacy_parameters_raise(call):
    with pytest.raises(DuckInputError):
        call()


def test_noise_is_seeded_only_on_request():
    a = gaussian_mechanism(5.0, 1.0, 0.5, 0.01, seed=7).value
    assert a == gaussian_mechanism(5.0, 1.0, 0.5, 0.01, seed=7).value
    unseeded = {gaussian_mechanism(5.0, 1.0, 0.5, 0.01).value for _ in range(5)}
    assert len(unseeded) == 5  # fresh OS entropy each call, not torch's fixed default seed


def test_smooth_release_hides_data_dependent_sigma():
    rel = smooth_gaussian_mechanism(3.0, 4.0, 0.5, 0.01, seed=0)
    alpha, _ = smooth_gaussian_params(0.5, 0.01)
    assert rel.sigma == pytest.approx(4.0 / alpha) and not rel.sigma_is_public
    assert "sigma" not in rel.to_dict() and "sensitivity" not in rel.to_dict()
    assert "sigma" in gaussian_mechanism(3.0, 1.0, 0.5, 0.01, seed=0).to_dict()


def test_exponential_mechanism_frequencies_match_softmax():
    utilities = np.array([0.0, 1.0, 2.0, 4.0])
    probs = torch.softmax(exponential_mechanism_logits(utilities, 1.0, 1.0), 0).numpy()
    assert probs == pytest.approx(np.exp(utilities / 2) / np.exp(utilities / 2).sum())
    gen = make_generator(0)
    draws = np.array([exponential_mechanism(utilities, 1.0, seed=gen) for _ in range(20000)])
    freq = np.bincount(draws, minlength=4) / draws.size
    assert np.abs(freq - probs).max() < 4 * np.sqrt(probs * (1 - probs) / draws.size).max()


def test_top_h_is_sequential_exponential_mechanism_without_replacement():
    utilities = np.array([3.0, 1.0, 0.0, 2.0])
    eps, h = 2.0, 2
    p = np.exp(eps / h * utilities / 2)
    p /= p.sum()
    gen = make_generator(1)
    n = 20000
    pairs = np.array([top_h_without_replacement(utilities, h, eps, seed=gen) for _ in range(n)])
    assert (pairs[:, 0] != pairs[:, 1]).all()
    # P(first=i, second=j) = p_i p_j / (1 - p_i), Algorithm 3 (redraw until unseen)
    for i, j in [(0, 3), (3, 0), (0, 1), (2, 0)]:
        expected = p[i] * p[j] / (1 - p[i])
        observed = np.mean((pairs[:, 0] == i) & (pairs[:, 1] == j))
        assert abs(observed - expected) < 4 * math.sqrt(expected * (1 - expected) / n) + 1e-3


def _draws(mechanism, n: int, seed: int) -> np.ndarray:
    gen = make_generator(seed)
    return np.array([mechanism(gen) for _ in range(n)])


def test_histogram_dp_check_passes_gaussian_and_fails_undernoised_control():
    eps, delta, n = 0.5, 0.01, 20000
    sens = 3.0
    ok_x = _draws(lambda g: gaussian_mechanism(10.0, sens, eps, delta, seed=g).value, n, 0)
    ok_xp = _draws(lambda g: gaussian_mechanism(10.0 + sens, sens, eps, delta, seed=g).value, n, 1)
    assert dp_histogram_test(ok_x, ok_xp, eps, delta)["passed"]
    # negative control: noise calibrated to sensitivity 1 while the neighbours differ by 3
    bad_x = _draws(lambda g: gaussian_mechanism(10.0, 1.0, eps, delta, seed=g).value, n, 2)
    bad_xp = _draws(lambda g: gaussian_mechanism(10.0 + sens, 1.0, eps, delta, seed=g).value, n, 3)
    result = dp_histogram_test(bad_x, bad_xp, eps, delta)
    exact = _hockey_stick_gaussians(sens, gaussian_sigma(1.0, eps, delta), eps)  # about 0.041
    assert not result["passed"] and exact > 3 * delta
    assert result["delta_hat"] == pytest.approx(exact, abs=0.01)
