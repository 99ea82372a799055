"""The points and the forgetting quality F of attacks/epsilon.py (ALGORITHMS.md §10 (a)) where the main tests leave
room: F at a δ other than the default (a hand-computed ε = ln(3 − 4δ), checked against the rule-by-rule
evaluation too, and F non-decreasing in δ), the points of ε values that are not float arrays (JSON null,
``Decimal``), and the points' range and order for any ε, negative ones included."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import numpy as np
import pytest
from test_forgetting import _epsilon_rule_by_rule  # metric.py's ε, every rule evaluated one by one

from attacks.epsilon import epsilon_points, epsilons, forgetting_quality


def _points_by_hand(eps: float, n_models: int) -> float:
    """Buckets [0, 0.5), [0.5, 1), ... worth 1, 1/2, 1/4, ... while a bucket ends at most at ⌈ln(N − 1)⌉."""
    n_buckets = 2 * math.ceil(math.log(n_models - 1))
    k = math.floor(eps / 0.5)
    return 0.5 ** k if k < n_buckets else 0.0


# four unlearned and four retrained models on one example: the best rule ("positive if φ >= t", t in (0, 0.05])
# calls 3 of the 4 unlearned and 1 of the 4 retrained models positive, FNR = FPR = 1/4, so
# ε = ln((1 − δ − 1/4) / (1/4)) = ln(3 − 4δ); every other rule either misses more or has exactly one rate at 0
_U = np.array([0.0, 1.1, 1.2, 1.3])
_R = np.array([-1.3, -1.2, -1.1, 0.05])


@pytest.mark.parametrize("delta", [1e-5, 0.1, 0.3])
def test_epsilon_of_the_hand_made_example_is_ln_of_3_minus_4_delta(delta):
    want = math.log(3 - 4 * delta)
    assert _epsilon_rule_by_rule(_U, _R, delta) == pytest.approx(want, abs=1e-6)
    assert epsilons(_U[:, None], _R[:, None], delta)[0] == pytest.approx(want, abs=1e-6)


def test_forgetting_quality_uses_the_delta_it_is_given():
    """Example 0 as above, example 1 two identical samples (ε = 0, 1 point); N = 4: buckets of 0.5 up to
    ⌈ln 3⌉ = 2. δ = 1e-5: ε = ln 3 ≈ 1.099, 1/4 point, F = 5/8; δ = 0.1: ε = ln 2.6 ≈ 0.956, 1/2 point, F = 3/4;
    δ = 0.3: ε = ln 1.8 ≈ 0.588, 1/2 point, F = 3/4."""
    u, r = np.stack([_U, _U], axis=1), np.stack([_R, _U], axis=1)
    for delta in (1e-5, 0.1, 0.3):
        want = (_points_by_hand(math.log(3 - 4 * delta), 4) + 1.0) / 2
        assert forgetting_quality(u, r, delta) == pytest.approx(want, abs=1e-12), delta
    assert forgetting_quality(u, r) == pytest.approx(5 / 8, abs=1e-12)
    assert forgetting_quality(u, r, 0.1) == pytest.approx(3 / 4, abs=1e-12)


def test_forgetting_quality_does_not_decrease_as_delta_grows():
    """Each rule's ε, log(1 − δ − FPR) − log FNR and its mirror, falls as δ grows, so ε(x) does and its points,
    hence F, do not fall; on shifted Gaussians F also equals the mean of the hand buckets of each δ's ε."""
    rng = np.random.default_rng(3)
    u, r = rng.normal(0.8, 1.0, (6, 25)), rng.normal(0.0, 1.0, (6, 25))
    fs = []
    for delta in (1e-5, 0.05, 0.2, 0.4):
        want = np.mean([_points_by_hand(e, 6) for e in epsilons(u, r, delta)])
        fs.append(forgetting_quality(u, r, delta))
        assert fs[-1] == pytest.approx(want, abs=1e-12), delta
    assert all(a <= b for a, b in zip(fs, fs[1:], strict=False)) and fs[-1] > fs[0], fs


def test_points_of_epsilons_read_back_from_json_or_as_decimals():
    """ε read from a JSON record: null (an undefined ε) earns nothing, like NaN; numbers parsed as ``Decimal``
    earn the points of their value (N = 32: 0.7 in bucket 1, 1/2; 1.5 in bucket 3, 1/8)."""
    np.testing.assert_array_equal(epsilon_points(json.loads("[0.2, null, 0.7]"), 32), [1.0, 0.0, 0.5])
    np.testing.assert_array_equal(epsilon_points(np.array([0.2, np.nan, 0.7]), 32), [1.0, 0.0, 0.5])
    exact = json.loads("[0.7, 1.5, 3.99, 4.0]", parse_float=Decimal)
    np.testing.assert_array_equal(epsilon_points(exact, 32), [0.5, 0.125, 1 / 128, 0.0])


def test_points_lie_in_zero_one_and_never_rise_with_epsilon_negative_ones_included():
    """Bucket 0 starts at 0 and is worth the most (1 point): an ε below 0 (the caller's, not one clipped by
    :func:`epsilons`) earns that 1 point, never more, and points never rise as ε grows."""
    eps = np.linspace(-3.0, 5.0, 161)
    for n in (3, 4, 32, 200):
        pts = epsilon_points(eps, n)
        assert ((pts >= 0) & (pts <= 1)).all(), n
        assert (np.diff(pts) <= 0).all(), n
        np.testing.assert_array_equal(pts, [_points_by_hand(e, n) if e >= 0 else 1.0 for e in eps])
    np.testing.assert_array_equal(epsilon_points([-0.25, -2.0, -40.0], 4), [1.0, 1.0, 1.0])


# φ given in float32 is read as float64 before anything is computed on it: the median that picks each example's
# positive set, taken in float32, rounds the midpoint of two adjacent float32s (a float64, not a float32) to the
# even one of them (down from (1, 1 + 2⁻²³), up from (1 + 2⁻²³, 1 + 2⁻²²)); a median of the other set exactly at
# that midpoint then picks the other set as positive, and this example's ε changes.
def _adjacent_float32s(start: float) -> tuple[np.float32, np.float32, float]:
    lo = np.float32(start)
    hi = np.nextafter(lo, np.float32(2.0))
    return lo, hi, (float(lo) + float(hi)) / 2


@pytest.mark.parametrize("float32_side", ["unlearned", "retrained"])
@pytest.mark.parametrize("lo_start", [1.0, float(np.nextafter(np.float32(1.0), np.float32(2.0)))])
def test_float32_phi_gives_the_float64_result_at_a_median_halfway_between_two_float32s(float32_side, lo_start):
    lo, hi, mid = _adjacent_float32s(lo_start)
    f32 = np.array([[lo], [hi], [hi], [0.5]], dtype=np.float32)  # median (lo + hi) / 2 = mid exactly in float64
    f64 = np.array([[0.75], [float(hi)], [mid], [mid]])           # median mid: the medians are equal
    u, r = (f32, f64) if float32_side == "unlearned" else (f64, f32)
    expected = epsilons(u.astype(np.float64), r.astype(np.float64))
    assert np.array_equal(epsilons(u, r), expected)
    assert forgetting_quality(u, r) == forgetting_quality(u.astype(np.float64), r.astype(np.float64))
