"""The points and the forgetting quality F of attacks/epsilon.py (ALGORITHMS.md §10 (a)) where the main tests leave
room: F at a δ other than the default (a hand-computed ε = ln(3 − 4δ), checked against the rule-by-rule
evaluation too, and F non-decreasing in δ), the points of ε values that are not float arrays (JSON null,
``Decimal``), the points' range and order for any ε, negative ones included, and the batched
double-threshold bounds and exact pass at φ placed exactly on the rules' grid points (lower ⊆ held ⊆ upper)."""

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


# The batched double-threshold bounds at exact ties with the rules' grids. P (the peakier set, positive for these
# rules) has range w; the right ends are np.linspace(A, B, n) with A = min P + w − 2, B = max P + 2 (B − A = 4, so
# n = 400 and the right step equals the left step 4/399: every right end's 400 left ends lie on one lattice); a
# right end r's left ends are np.linspace(r − w − 2, r − w + 2, 400). The values below sit exactly on those floats
# (or one ulp beside them), where the 1e-9 tolerances and the strict inequalities decide; continuous φ never does.
def _right_ends(p: np.ndarray) -> np.ndarray:
    w = float(np.ptp(p))
    lo, hi = p.min() + w - 2.0, p.max() + 2.0
    return np.linspace(lo, hi, int(np.ceil((hi - lo) * 100)))


def _bounds_and_exact_pass(u: np.ndarray, r: np.ndarray) -> dict[str, set]:
    """One example's double-threshold blocks: ``held`` by the rules enumerated one by one, the batched path's
    ``lower`` and ``upper`` bounds, and the blocks ``_blocks_reached`` (the exact pass) says some rule holds, asked
    of every block i <= j."""
    from test_epsilon import _blocks_held_by_brute_force

    from attacks.epsilon import _blocks_reached, _double_threshold_blocks

    u2, r2 = u[:, None], r[:, None]
    z = np.sort(np.concatenate([u2, r2]).T, axis=1)
    blocks = _double_threshold_blocks(z, u2, r2, ~(np.median(r2, axis=0) > np.median(u2, axis=0)))
    i, j = np.triu_indices(z.shape[1])
    reached = _blocks_reached(z, np.zeros(i.size, dtype=np.int64), i, j, blocks.width, blocks.a_lo, blocks.b_hi,
                              blocks.n_right, blocks.tol)
    return {"held": _blocks_held_by_brute_force(z[0], blocks.width[0], blocks.a_lo[0], blocks.b_hi[0],
                                                blocks.n_right[0]),
            "lower": set(zip(*(x.tolist() for x in np.nonzero(blocks.lower[0])), strict=True)),
            "upper": set(zip(*(x.tolist() for x in np.nonzero(blocks.upper[0])), strict=True)),
            "reached": set(zip(i[reached].tolist(), j[reached].tolist(), strict=True))}


def _assert_bounds_hold(u: np.ndarray, r: np.ndarray) -> dict[str, set]:
    """lower ⊆ held ⊆ upper, the exact pass is exact on every block, and the batched ε is the per-example one."""
    from attacks.epsilon import epsilons_per_example

    got = _bounds_and_exact_pass(u, r)
    assert got["lower"] <= got["held"], sorted(got["lower"] - got["held"])
    assert got["held"] <= got["upper"], sorted(got["held"] - got["upper"])
    assert got["reached"] == got["held"], sorted(got["reached"] ^ got["held"])
    np.testing.assert_array_equal(epsilons(u[:, None], r[:, None]), epsilons_per_example(u[:, None], r[:, None]))
    return got


def test_a_block_held_only_by_the_narrowest_rule_is_within_the_upper_bound():
    """w = 3: the rule (last left end ``s = r − w + 2``, right end ``r``) is w − 2 = 1 wide; with Q values one ulp
    outside it on both sides, ``z_{j+1} − z_{i−1}`` exceeds w − 2 by two ulps only, and the block {s, r} is held by
    that one rule: the upper bound must keep it (its outer-width condition allows the tolerance below w − 2)."""
    u = np.array([0.0, 0.2, 0.4, 3.0])
    rk = _right_ends(u)[150]
    s = (rk - 3.0) + 2.0
    r = np.array([-1.0, np.nextafter(s, -np.inf), s, rk, np.nextafter(rk, np.inf), 4.0])
    got = _assert_bounds_hold(u, r)
    assert (5, 6) in got["held"]  # z_5 = s, z_6 = r (z_0 .. z_3 = -1, 0, 0.2, 0.4; z_4 = s⁻)


@pytest.mark.parametrize("offset,k", [(0.0, 60), (0.0, 100), (1e4, 0)])
def test_a_block_reached_only_through_the_first_left_end_of_one_window(offset, k):
    """A value exactly at the first left end ``r_k − w − 2`` of right end r_k, its neighbour below one ulp away
    and the block's last value exactly r_k: the block {left end, r_k} is held by that one rule (the right ends
    below r_k end before the block does; those above start their windows past it). The exact pass must look at
    r_k (the right ends up to ``z_i + w + 2`` plus the tolerance), and the upper bound must keep the block also
    at values near 10^4, where the rounding of ``z_i + w + 2`` is larger than 1e-9 / scale."""
    u = offset + np.array([0.0, 0.1, 0.3, 0.5])
    w = float(np.ptp(u))
    rk = _right_ends(u)[k]
    first = (rk - w) - 2.0
    r = np.array([offset - 6.0, np.nextafter(first, -np.inf), first, rk, offset + 3.0])
    got = _assert_bounds_hold(u, r)
    assert (2, 3) in got["held"]


def test_a_gap_between_two_right_ends_is_not_in_the_lower_bound():
    """``z_j`` one ulp above right end r_k and ``z_{j+1}`` exactly r_{k+1}: no right end lies in ``[z_j, z_{j+1})``,
    so no rule holds a block ending at ``z_j``, although ``z_{j+1} − z_j`` is the right step less one ulp (within
    the tolerance of it): the lower bound must not claim those blocks."""
    u = np.array([0.0, 0.1, 0.3, 0.5])
    right = _right_ends(u)
    r = np.array([-1.0, np.nextafter(right[249], np.inf), right[250], 2.0])
    got = _assert_bounds_hold(u, r)
    assert not any(j == 5 for _, j in got["held"])  # z_5 = r_249⁺
    assert any(j == 5 for _, j in got["upper"])


def test_a_gap_just_narrower_than_the_left_step_between_lattice_points_is_not_in_the_lower_bound():
    """All windows' left ends lie on one lattice of step 4/399 (the right step is the same); a gap
    ``(z_{i−1}, z_i]`` from a lattice point to 1e-11 before the next one holds no left end of any window, so no rule
    holds a block starting at ``z_i``, although the gap is the left step less 1e-11 (within the tolerance of it):
    the lower bound must not claim those blocks."""
    u = np.array([0.0, 0.1, 0.3, 0.5])
    right = _right_ends(u)
    lefts = np.linspace(right - 0.5 - 2.0, right - 0.5 + 2.0, 400, axis=1).ravel()
    near = lefts[(lefts > 0.985) & (lefts < 1.005)]  # two lattice points, each as a few floats an ulp or two apart
    below, above = near[near < near.min() + 1e-6], near[near > near.min() + 1e-6]
    assert below.max() - below.min() < 1e-14 and above.max() - above.min() < 1e-14
    zp, zi = float(below.max()), float(above.min()) - 1e-11
    r = np.array([-1.0, zp, zi, zi + 0.05, 2.0])
    got = _assert_bounds_hold(u, r)
    assert not any(i == 6 for i, _ in got["held"])  # z_6 = zi (z_0 .. z_5 = -1, 0, 0.1, 0.3, 0.5, zp)
    assert any(i == 6 for i, _ in got["upper"])


def test_the_rule_whose_first_left_end_is_the_smallest_value_is_counted():
    """The per-example double family: the smallest value sits exactly on the first left end of right end r_k's
    window (no value below that left end, one at it), and r_k is a value. That window's first rule holds every
    value up to r_k, a count pair (4 of P, 2 of Q) no other rule gives (the right ends below r_k end before it;
    those above start their windows past the smallest value; r_k to 3.0 is wider than any rule): the family's
    distinct count pairs equal those of the rules enumerated one by one."""
    from attacks.epsilon import _double_threshold_rules

    u = np.array([0.0, 0.1, 0.3, 0.5])
    right = _right_ends(u)
    rk = right[249]
    r = np.array([(rk - 0.5) - 2.0, rk, 3.0])
    fam = _double_threshold_rules(u, r)
    want = set()
    for tr in right:
        tl = np.linspace(tr - 0.5 - 2.0, tr - 0.5 + 2.0, num=400)
        counts = [((x[:, None] >= tl) & (x[:, None] <= tr)).sum(0) for x in (u, r)]
        want |= set(zip(*(c.tolist() for c in counts), strict=True))
    assert (4, 2) in want
    assert set(zip(fam.pos_in.tolist(), fam.neg_in.tolist(), strict=True)) == want
