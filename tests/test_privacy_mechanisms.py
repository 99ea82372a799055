"""DP mechanisms: calibration against closed forms / numerical integration, seeding, exponential mechanism
frequencies, and the empirical (eps, delta) histogram check with a negative control."""

from __future__ import annotations

import math
import sys

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


@pytest.mark.parametrize(
    "call",
    [
        lambda: gaussian_mechanism(1.0, 1.0, True, 0.1),  # bools and strings are not privacy parameters
        lambda: gaussian_mechanism(1.0, 1.0, "0.5", 0.1),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, True),
        lambda: gaussian_mechanism(1.0, 1.0, 0.5, "1e-5"),
        lambda: gaussian_sigma("a", 0.5, 1e-5),
        lambda: gaussian_sigma(True, 0.5, 1e-5),
        lambda: gaussian_sigma(float("nan"), 0.5, 1e-5),
        lambda: gaussian_sigma(-1.0, 0.5, 1e-5),
        lambda: gaussian_sigma(float("inf"), 0.5, 1e-5),
        lambda: gaussian_sigma([1.0, 2.0], 0.5, 1e-5, "analytic"),
        lambda: gaussian_sigma(np.array([1.0, 2.0]), 0.5, 1e-5, "analytic"),
        lambda: gaussian_sigma(5e-324, 10.0, 1e-5, "analytic"),  # sigma underflows to 0
        lambda: gaussian_sigma(1e308, 0.5, 1e-5, "analytic"),  # sigma overflows
        lambda: gaussian_mechanism(float("nan"), 1.0, 0.5, 1e-5),
        lambda: gaussian_mechanism(float("inf"), 1.0, 0.5, 1e-5),
        lambda: gaussian_mechanism("a", 1.0, 0.5, 1e-5),
        lambda: gaussian_mechanism([1.0, 2.0], 1.0, 0.5, 1e-5),  # scalar queries only
        lambda: gaussian_mechanism(1.0 + 0j, 1.0, 0.5, 1e-5),
        lambda: gaussian_mechanism(1.0, "a", 0.5, 1e-5),
        lambda: gaussian_mechanism(1.0, None, 0.5, 1e-5),
        lambda: gaussian_mechanism(1.0, np.array([1.0, 2.0]), 0.5, 1e-5),
        lambda: gaussian_mechanism(1.0, 1.0, 5e-324, 1e-5),  # sigma would be inf
        lambda: smooth_gaussian_mechanism(float("nan"), 1.0, 0.5, 1e-5),
        lambda: smooth_gaussian_mechanism(1.0, "a", 0.5, 1e-5),
        lambda: smooth_gaussian_mechanism(1.0, 1.0, 5e-324, 1e-5),
        lambda: smooth_gaussian_mechanism(1.0, 1e10, 1e-300, 1e-5),
        lambda: smooth_gaussian_params(0.5, 0.5, -math.log(4)),
        lambda: smooth_gaussian_params(0.5, 0.5, "a"),
        lambda: smooth_gaussian_params(0.5, 1e-5, float("nan")),
        lambda: smooth_gaussian_params(0.5, 1e-5, -5),
        lambda: smooth_gaussian_params(0.5, 1e-5, 0),
        lambda: exponential_mechanism(["a", "b"], 1.0),
        lambda: exponential_mechanism([1 + 1j, 2.0], 1.0),
        lambda: exponential_mechanism(np.array([True, False]), 1.0),
        lambda: exponential_mechanism([1.0, 2.0], 1.0, "a"),
        lambda: exponential_mechanism([0.0, 1.0], 1.0, 5e-324),  # logits overflow
        lambda: top_h_without_replacement(torch.tensor([1 + 1j, 2 + 0j]), 1, 1.0),
        lambda: make_generator(2**70),
        lambda: make_generator(-1),
        lambda: make_generator(True),
    ],
)
def test_bad_values_raise_input_errors_not_raw_exceptions(call):
    with pytest.raises(DuckInputError):
        call()


def test_analytic_sigma_cache_is_reached_with_validated_floats_only():
    sigma = gaussian_sigma(1.0, 1, 1e-5, "analytic")
    with pytest.raises(DuckInputError):
        gaussian_sigma(1.0, 1 + 0j, 1e-5, "analytic")  # hash(1 + 0j) == hash(1): must not hit the cache
    # bit-identical for a power-of-two rescaling of the sensitivity, and for numpy / int arguments
    assert gaussian_sigma(8.0, 1.0, 1e-5, "analytic") == 8.0 * sigma
    assert gaussian_sigma(np.float64(1.0), np.int64(1), 1e-5, "analytic") == sigma


def test_mechanisms_accept_numpy_scalars_and_release_finite_values():
    a = gaussian_mechanism(np.int64(5), np.float64(1.0), 0.5, 0.01, seed=np.int64(7))
    assert a.value == gaussian_mechanism(5, 1.0, 0.5, 0.01, seed=7).value and math.isfinite(a.value)
    assert smooth_gaussian_params(0.5, 0.01, np.int64(1)) == smooth_gaussian_params(0.5, 0.01)


@pytest.mark.parametrize(
    "kwargs",
    [{"n_bins": 2.5}, {"n_bins": "x"}, {"n_bins": True}, {"n_bins": 10**12}, {"z": float("nan")}, {"z": -1.0}],
)
def test_histogram_check_refuses_bad_options(kwargs):
    rng = np.random.default_rng(0)
    with pytest.raises(DuckInputError):
        dp_histogram_test(rng.normal(size=1000), rng.normal(size=1000), 0.5, 1e-5, **kwargs)


def test_histogram_check_refuses_non_finite_or_complex_draws_and_handles_huge_eps():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=1000), rng.normal(size=1000)
    with_nan = a.copy()
    with_nan[:10] = np.nan
    for bad in (with_nan, a + 1j, ["x"] * 1000):
        with pytest.raises(DuckInputError):
            dp_histogram_test(bad, b, 0.5, 1e-5)
    # above ln(1000) + 1 only bins with q = 0 can be selected: same answer as eps = 7.5, no OverflowError
    huge = dp_histogram_test(a, b + 2.0, 1000.0, 1e-5)
    assert huge == dp_histogram_test(a, b + 2.0, 7.5, 1e-5) and huge["delta_hat"] > 0.01


# --- issue 39: the mutants of duck/privacy/mechanisms.py that survived the tests above (each test names them) ----


def _z(seed: int) -> float:
    """The standard normal draw a seeded release adds (float64, from the seed's own generator)."""
    return float(torch.randn((), generator=make_generator(seed), dtype=torch.float64))


def test_seeded_releases_add_exactly_sigma_times_a_float64_standard_normal():
    """Kills: the draw in float32 (`dtype=None`), the smooth release ignoring its seed, its record's fields."""
    g = gaussian_mechanism(5.0, 1.0, 0.5, 0.01, seed=7)
    assert g.value == 5.0 + g.sigma * _z(7)
    rel = smooth_gaussian_mechanism(3.0, 4.0, 0.5, 0.01, seed=11)
    alpha, _ = smooth_gaussian_params(0.5, 0.01)
    assert rel.value == 3.0 + (4.0 / alpha) * _z(11)
    assert (rel.sensitivity, rel.mechanism, rel.eps, rel.delta) == (4.0, "gaussian_smooth", 0.5, 0.01)
    assert rel.sigma_is_public is False and type(rel.eps) is float and type(rel.delta) is float
    assert rel.to_dict(public_only=False)["sensitivity"] == 4.0


def test_analytic_tolerance_is_an_open_interval_named_tol():
    """Kills: the tolerance's bounds, their openness and its name in the message."""
    from duck.privacy.mechanisms import gaussian_sigma_analytic

    assert gaussian_sigma_analytic(1.0, 1.0, 1e-5, tol=0.5) > 0
    assert gaussian_sigma_analytic(1.0, 1.0, 1e-5, tol=1e-15) > 0
    for tol in (0.0, 1.0, 1.5):
        with pytest.raises(DuckInputError, match=f"^tol must be a finite number > 0.0 and < 1.0, got {tol}$"):
            gaussian_sigma_analytic(1.0, 1.0, 1e-5, tol=tol)


def test_overflowing_noise_scales_name_the_sensitivity_and_eps():
    """Kills: ``_finite_sigma``'s sensitivity or eps replaced by None in the analytic and smooth calibrations."""
    with pytest.raises(DuckInputError, match=r"overflows in float64 for sensitivity=1e\+308 and eps=1e-08;"):
        gaussian_sigma(1e308, 1e-8, 1e-5, "analytic")
    with pytest.raises(DuckInputError, match=r"overflows in float64 for sensitivity=10000000000.0 and eps=1e-300;"):
        smooth_gaussian_mechanism(1.0, 1e10, 1e-300, 1e-5)
    with pytest.raises(DuckInputError, match=r"^smooth_bound must be a finite number > 0.0, got 0.0$"):
        smooth_gaussian_mechanism(1.0, 0.0, 0.5, 1e-5)


def test_smooth_parameters_refuse_dimensions_beyond_2_53_and_a_beta_that_underflows():
    """Kills: the dimension bound (>=, 2*53, 3**53, 2**54), its messages, and the underflow rule's `or`."""
    assert smooth_gaussian_params(0.5, 1e-5, 2**53)[1] > 0  # the bound itself is allowed
    assert smooth_gaussian_params(0.5, 1e-5, 1000)[1] == pytest.approx(0.5 / (4 * (1000 + math.log(2e5))))
    for p in (2**53 + 1, 2**60):
        with pytest.raises(DuckInputError, match=r"^p=\d+ must be an integer between 1 and 2\*\*53 \(the dimension"):
            smooth_gaussian_params(0.5, 1e-5, p)
    with pytest.raises(DuckInputError, match=r"^p=0 must be an integer >= 1$"):
        smooth_gaussian_params(0.5, 1e-5, 0)
    # alpha = 1e-310 / (5 sqrt(2 ln 2e5)) is a positive subnormal; beta = 1e-310 / (4 (2**53 + ln 2e5)) is 0
    with pytest.raises(DuckInputError, match=r"^eps=1e-310 is too small: alpha or beta underflows to 0"):
        smooth_gaussian_params(1e-310, 1e-5, 2**53)


def test_utilities_refusals_say_what_is_wrong():
    """Kills: the utilities' messages and names, the shape rule's `or` / `== 0`, and the overflow message."""
    with pytest.raises(DuckInputError, match=r"^utilities must be a non-empty 1-D array, got shape \(2, 2\)$"):
        exponential_mechanism([[1.0, 2.0], [3.0, 4.0]], 1.0)
    with pytest.raises(DuckInputError, match=r"^utilities must be a non-empty 1-D array, got shape \(0,\)$"):
        exponential_mechanism([], 1.0)
    assert exponential_mechanism([5.0], 1.0, seed=0) == 0  # one candidate is a valid choice
    with pytest.raises(DuckInputError, match="^utilities contain NaN or inf; every candidate needs a finite utility$"):
        exponential_mechanism([1.0, float("inf")], 1.0)
    with pytest.raises(DuckInputError, match=r"^utilities must be a numeric 1-D array: "):
        exponential_mechanism([[1.0], [1.0, 2.0]], 1.0)  # ragged
    with pytest.raises(DuckInputError, match=r"^utilities must be a real-valued numeric array, got dtype <U1$"):
        exponential_mechanism(["a", "b"], 1.0)
    with pytest.raises(DuckInputError, match=r"overflows float64 \(eps=1.0, sensitivity=5e-324\); rescale the "
                                             r"utilities or the sensitivity$"):
        exponential_mechanism([0.0, 1.0], 1.0, 5e-324)


def test_integer_utilities_give_float64_logits():
    """Kills: the utilities' cast to float64 removed (integer input then yields float32 logits)."""
    logits = exponential_mechanism_logits(np.array([1, 2, 3]), 1.0, 1.0)
    assert logits.dtype == torch.float64 and logits.tolist() == [0.5, 1.0, 1.5]


def _gumbel_top_h(utilities: np.ndarray, h: int, eps: float, seed: int) -> list[int]:
    """Independent statement of the Gumbel-max draws: float64 uniforms from the seed's generator, Gumbel noise
    on eps/h * u / 2, the h largest."""
    gen = make_generator(seed)
    uniform = torch.rand(len(utilities), generator=gen, dtype=torch.float64).numpy()
    keys = eps / h * utilities / 2 - np.log(-np.log(uniform))
    return [int(i) for i in np.argsort(-keys, kind="stable")[:h]]


def test_top_h_draws_follow_the_seed_and_may_take_every_candidate():
    """Kills: the generator dropped or unseeded (four mutants), float32 uniforms, `h < n`, a bool h accepted,
    and the seed not passed through by ``exponential_mechanism``."""
    u = np.linspace(0.0, 1.0, 50)
    for seed in (0, 1, 2):
        assert top_h_without_replacement(u, 5, 1.0, seed=seed) == _gumbel_top_h(u, 5, 1.0, seed)
        assert exponential_mechanism(u, 1.0, seed=seed) == _gumbel_top_h(u, 1, 1.0, seed)[0]
    assert sorted(top_h_without_replacement(u[:4], 4, 1.0, seed=0)) == [0, 1, 2, 3]
    for h in (True, 5, 0):
        with pytest.raises(DuckInputError, match=rf"^h={h!r} must be an integer between 1 and the number of "
                                                 r"candidates \(4\)$"):
            top_h_without_replacement(u[:4], h, 1.0)


def test_global_release_record_and_its_refusals():
    """Kills: the global release's record fields, the classic rule's `eps >= 1` (as `> 1`) and its message, the
    noise scale's underflow / overflow messages, the value's name and the overflow headroom (`-`, `/`)."""
    for calibration in ("classic", "analytic"):
        rel = gaussian_mechanism(2.0, 3.0, 0.5, 0.01, calibration=calibration, seed=5)
        assert (rel.sigma, rel.sensitivity) == (gaussian_sigma(3.0, 0.5, 0.01, calibration), 3.0)
        assert (rel.mechanism, rel.eps, rel.delta, rel.sigma_is_public) == (f"gaussian_global_{calibration}", 0.5,
                                                                            0.01, True)
        assert rel.value == 2.0 + rel.sigma * _z(5)
    with pytest.raises(DuckInputError, match=r"^eps=1.0 >= 1: the classic Gaussian calibration \(paper Theorem 1\) is "
                                             r"only proven for eps < 1; use calibration='analytic'$"):
        gaussian_mechanism(1.0, 1.0, 1.0, 1e-5)
    with pytest.raises(DuckInputError, match=r"^the noise scale overflows in float64 for sensitivity=1e\+308 and "
                                             r"eps=0.5; rescale the query \(sensitivity nearer 1\) or change eps$"):
        gaussian_sigma(1e308, 0.5, 1e-5)
    with pytest.raises(DuckInputError, match=r"^the noise scale underflows to 0 in float64 for sensitivity=5e-324 "
                                             r"and eps=100.0;"):
        gaussian_sigma(5e-324, 100.0, 0.5, "analytic")
    with pytest.raises(DuckInputError, match=r"^value must be a finite number, got nan$"):
        gaussian_mechanism(float("nan"), 1.0, 0.5, 1e-5)
    # sigma = 9.88e305: |value| + 64 sigma = 1e308 + 6.3e307 is finite, 1.2e308 + 6.3e307 is not
    assert math.isfinite(gaussian_mechanism(1e308, 1e305, 0.5, 1e-5, seed=0).value)
    with pytest.raises(DuckInputError, match=r"^value=1.2e\+308 plus noise of scale sigma=9.88\d*e\+305 overflows "
                                             r"float64; rescale the query$"):
        gaussian_mechanism(1.2e308, 1e305, 0.5, 1e-5)


def test_parameter_checks_name_the_parameter_and_keep_their_bounds():
    """Kills: the names in the parameter checks' messages (defaults included), delta's and the sensitivity's
    open lower end (None / False), delta's smallest normal float accepted (`<=`), eps's upper bound (`>=`),
    the seed checks' `or` and messages, the calibration's message."""
    from duck.privacy.mechanisms import check_calibration, check_delta, check_eps, check_sensitivity

    refusals = [
        (lambda: check_delta(0.0), r"delta must be a finite number > 0.0 and < 1.0, got 0.0"),
        (lambda: gaussian_mechanism(1.0, 1.0, 0.5, 0.0), r"delta must be a finite number > 0.0 and < 1.0, got 0.0"),
        (lambda: check_delta(1e-310), r"delta=1e-310 is below the smallest normal float64 \(2.23e-308\): ln\(2 / delta\) "
                                      r"overflows; use a delta of at least 1e-300 \(practical deltas are far larger, "
                                      r"e.g. 1e-5\)"),
        (lambda: check_eps(0), r"eps must be a finite number > 0.0, got 0"),
        (lambda: gaussian_mechanism(1.0, 1.0, 0.0, 0.1), r"eps must be a finite number > 0.0, got 0.0"),
        (lambda: smooth_gaussian_params(1.5, 0.1), r"eps=1.5 must be <= 1.0 for this mechanism; lower eps"),
        (lambda: check_sensitivity(0.0), r"sensitivity must be a finite number > 0.0, got 0.0"),
        (lambda: gaussian_mechanism(1.0, 0.0, 0.5, 0.1), r"sensitivity must be a finite number > 0.0, got 0.0"),
        (lambda: check_calibration("laplace"), r"calibration='laplace' is not supported; use 'classic' or 'analytic'"),
        (lambda: make_generator("a"), r"seed='a' must be None, an int or a torch.Generator"),
        (lambda: make_generator(1.5), r"seed=1.5 must be None, an int or a torch.Generator"),
        (lambda: make_generator(-1), r"seed=-1 must be an integer >= 0"),
    ]
    for call, message in refusals:
        with pytest.raises(DuckInputError, match=f"^{message}$"):
            call()
    assert check_delta(sys.float_info.min) == sys.float_info.min  # the smallest normal float is allowed
    assert smooth_gaussian_params(1.0, 0.1)[0] == pytest.approx(1.0 / (5 * math.sqrt(2 * math.log(20.0))))


def test_the_exponential_mechanism_defaults_to_sensitivity_one():
    """Kills: the default sensitivity of ``exponential_mechanism_logits`` changed (1.0 -> 2.0)."""
    assert exponential_mechanism_logits([2.0, 4.0], 1.0).tolist() == [1.0, 2.0]  # eps u / (2 * 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_utilities_and_generators_stay_on_their_devices():
    """On a GPU machine: CUDA utilities are drawn from on the CPU (the seeded stream does not depend on where
    the utilities live) and a CUDA generator draws CUDA noise (the device mutants listed as equivalent on
    CPU-only machines in mutation/equivalent.toml)."""
    u = torch.linspace(0.0, 1.0, 50)
    assert top_h_without_replacement(u.cuda(), 5, 1.0, seed=3) == top_h_without_replacement(u, 5, 1.0, seed=3)
    gen = make_generator(3, "cuda")
    assert gen.device.type == "cuda"
    expected = float(torch.randn((), generator=make_generator(3, "cuda"), dtype=torch.float64, device="cuda"))
    from duck.privacy.mechanisms import _standard_normal

    assert _standard_normal(gen) == expected


# --- issue 39: duck/privacy/empirical.py against the hockey-stick estimate written out bin by bin -------------
def _histogram_reference(a, b, eps, delta, n_bins, z):
    """Equal-mass bins of the pooled draws (interior edges at the pooled quantiles k / n_bins, duplicates merged,
    open at both ends), then per direction sum_b max(0, p_b - e^eps q_b) and its standard error
    sqrt(sum over those bins of p(1 - p)/n_p + e^{2 eps} q(1 - q)/n_q); the larger direction is reported."""
    pooled = np.concatenate([a, b])
    inner = sorted({float(np.quantile(pooled, k / n_bins)) for k in range(1, n_bins)})
    edges = [-math.inf, *inner, math.inf]

    def shares(x):
        out = []
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            last = hi == math.inf
            out.append(sum(1 for v in x if lo <= v and (v < hi or (last and v <= hi))) / len(x))
        return out

    p, q = shares(a), shares(b)

    def direction(p, q, n_p, n_q):
        e = min(eps, math.log(n_q) + 1.0)
        est, var = 0.0, 0.0
        for pb, qb in zip(p, q, strict=True):
            if pb - math.exp(e) * qb > 0:
                est += pb - math.exp(e) * qb
                var += pb * (1 - pb) / n_p + math.exp(2 * e) * qb * (1 - qb) / n_q
        return est, math.sqrt(var)

    delta_hat, se = max(direction(p, q, len(a), len(b)), direction(q, p, len(b), len(a)))
    return {"delta_hat": delta_hat, "se": se, "threshold": delta + z * se, "passed": delta_hat <= delta + z * se}


@pytest.mark.parametrize("seed,eps,n_bins,z", [(0, 0.5, 10, 4.0), (1, 0.1, 2, 0.0), (2, 1.5, 37, 2.5),
                                               (3, 9.0, 20, 1.0)])
def test_histogram_check_equals_the_bin_by_bin_statement(seed, eps, n_bins, z):
    rng = np.random.default_rng(seed)
    a = rng.normal(0.0, 1.0, 300)
    b = np.round(rng.normal(0.4, 1.3, 220), 1)  # ties: merged quantile edges
    got = dp_histogram_test(a, b, eps, 1e-3, n_bins=n_bins, z=z)
    want = _histogram_reference(a, b, eps, 1e-3, n_bins, z)
    assert got["passed"] == want["passed"]
    for key in ("delta_hat", "se", "threshold"):
        assert got[key] == pytest.approx(want[key], rel=1e-12, abs=1e-15), key


def test_histogram_check_defaults_and_edges():
    rng = np.random.default_rng(5)
    a, b = rng.normal(size=400), rng.normal(0.3, 1, 400)
    got, want = dp_histogram_test(a, b, 0.2, 1e-3), _histogram_reference(a, b, 0.2, 1e-3, 100, 4.0)  # the defaults
    assert got == pytest.approx(want, rel=1e-12)
    assert dp_histogram_test(a[:100], b[:100], 0.2, 1e-3, n_bins=200)["se"] >= 0  # n_bins = pooled draws: allowed
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(a[:100], b[:100], 0.2, 1e-3, n_bins=201)
    assert str(e.value) == "n_bins=201 exceeds the number of pooled draws (200); use fewer bins"
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(a[:99], b, 0.2, 1e-3)
    assert str(e.value) == "samples_x holds 99 draws; need at least 100 draws per data set"
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(a, np.r_[b[:-2], np.inf, np.nan], 0.2, 1e-3)
    assert str(e.value) == ("samples_x_prime contains 2 NaN or inf draws; a DP mechanism must release finite "
                            "values: fix the mechanism")
    with pytest.raises(DuckInputError, match="n_bins=1 must be an integer >= 2"):
        dp_histogram_test(a, b, 0.2, 1e-3, n_bins=1)
    assert dp_histogram_test(a, b, 0.2, 1e-3, z=0.0)["threshold"] == 1e-3  # z = 0 allowed: delta alone
    same = dp_histogram_test(a, a.copy(), 0.2, 1e-3)
    assert same["delta_hat"] == 0.0 and same["passed"]


def test_histogram_check_selects_only_bins_with_a_positive_excess():
    """eps = ln 2 and a bin with p = 2 q exactly: its excess is 0, so it adds nothing to the estimate and nothing
    to the standard error (a bin selected at excess >= 0 would add its variance)."""
    a = np.r_[np.zeros(40), np.ones(60)]  # p = (0.4, 0.6)
    b = np.r_[np.zeros(20), np.ones(80)]  # q = (0.2, 0.8)
    res = dp_histogram_test(a, b, math.log(2), 1e-3, n_bins=2)
    assert res == {"delta_hat": 0.0, "se": 0.0, "threshold": 1e-3, "passed": True}


def test_histogram_check_passes_an_estimate_equal_to_its_threshold():
    """One draw of 100 that only A(X) releases: delta_hat = 0.01; with z = 0 and delta = 0.01 that is exactly
    the threshold, which passes (<=)."""
    a = np.r_[np.zeros(99), 5.0]
    b = np.zeros(100)
    res = dp_histogram_test(a, b, 0.5, 0.01, n_bins=200, z=0.0)
    assert res["delta_hat"] == 0.01 and res["threshold"] == 0.01 and res["passed"]


def test_histogram_check_caps_eps_at_ln_n_plus_one_exactly():
    """Between ln(n_q) − 1 and ln(n_q) + 1 the answer still depends on eps (bins with q > 0 can be selected):
    the cap must not cut there. n_q = 100 (ln 100 + 1 = 5.6); one bin with p = 0.6, q = 0.01: excess
    0.6 − 0.01 e^eps, positive up to eps = ln 60 = 4.09."""
    a = np.r_[np.zeros(60), np.full(40, 10.0)]
    b = np.r_[np.zeros(1), np.full(99, 10.0)]
    for eps in (3.0, 3.8, 4.0):
        got = dp_histogram_test(a, b, eps, 1e-3, n_bins=2)["delta_hat"]
        assert got == pytest.approx(0.6 - 0.01 * math.exp(eps), rel=1e-12)
    assert dp_histogram_test(a, b, 4.2, 1e-3, n_bins=2)["delta_hat"] == 0.0


def test_histogram_check_names_its_inputs_and_options():
    rng = np.random.default_rng(7)
    a = rng.normal(size=200)
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(["x"] * 200, a, 0.5, 1e-3)
    assert str(e.value) == "samples_x must be a real-valued numeric array, got dtype <U1"
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(a, [[1.0, 2.0], [3.0]], 0.5, 1e-3)
    assert str(e.value).startswith("samples_x_prime must be a numeric 1-D array: ")
    with pytest.raises(DuckInputError) as e:
        dp_histogram_test(a, a, 0.5, 1e-3, z=-1.0)
    assert str(e.value) == "z must be a finite number >= 0.0, got -1.0"
