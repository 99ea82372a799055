"""The batched ε of :mod:`attacks.epsilon` against the per-example path (itself checked against the reference's
outputs and a rule-by-rule evaluation in tests/test_forgetting.py), the exact linspace counts it relies on, and
its table of rule ε."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_forgetting import REFERENCE, _epsilon_rule_by_rule

from attacks.epsilon import (
    _count_le_linspace,
    epsilon_table,
    epsilons,
    epsilons_per_example,
)
from duck.errors import DuckInputError


def _case(rng: np.random.Generator, kind: str, n_u: int, n_r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    sd = float(rng.choice([0.05, 0.3, 1.0, 3.0]))
    u, r = rng.normal(0, sd, (n_u, n)), rng.normal(0, sd * rng.uniform(0.5, 2), (n_r, n))
    if kind == "lattice":  # ties with each other and with the grids' points
        q = float(rng.choice([0.01, 0.05, 0.25]))
        u, r = np.round(u / q) * q, np.round(r / q) * q
    elif kind == "shifted":
        u = u + rng.uniform(-3, 3) * sd
    elif kind == "heavy":
        u = rng.standard_t(3, (n_u, n)) * sd
    keep = (np.ptp(u, axis=0) > 0) & (np.ptp(r, axis=0) > 0)
    return u[:, keep], r[:, keep]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["normal", "lattice", "shifted", "heavy"])
def test_batched_epsilons_equal_the_per_example_path(seed, kind):
    """Exactly equal (not approximately: the same float32 rule ε), for equal and unequal set sizes."""
    rng = np.random.default_rng([seed, len(kind)])
    for n_u, n_r in ((4, 4), (8, 8), (5, 11), (32, 32), (16, 3)):
        u, r = _case(rng, kind, n_u, n_r, 60)
        np.testing.assert_array_equal(epsilons(u, r), epsilons_per_example(u, r), err_msg=f"{kind} {n_u}x{n_r}")


def test_batched_epsilons_equal_the_rule_by_rule_evaluation_and_the_reference():
    rng = np.random.default_rng(7)
    u, r = rng.normal(0.4, 1, (8, 12)), rng.normal(0, 1.3, (8, 12))
    got = epsilons(u, r)
    for i in range(u.shape[1]):
        pos, neg = (r[:, i], u[:, i]) if np.median(r[:, i]) > np.median(u[:, i]) else (u[:, i], r[:, i])
        assert got[i] == pytest.approx(_epsilon_rule_by_rule(pos, neg), abs=1e-6)
    for case in REFERENCE.values():  # google-deepmind/unlearning_evaluation's own outputs
        np.testing.assert_allclose(epsilons(np.array(case["unlearned"]), np.array(case["retrained"])),
                                   case["epsilons"], rtol=1e-6, atol=1e-6)


def test_linspace_counts_are_exact_at_and_beside_the_grid_points():
    rng = np.random.default_rng(1)
    for _ in range(200):
        start = float(rng.normal(0, 20))
        stop = start + float(rng.choice([0.0, 1e-3, 0.37, 4.0, 57.3]))
        num = int(rng.integers(0, 500))
        grid = np.linspace(start, stop, num)
        probes = np.concatenate([grid, np.nextafter(grid, np.inf), np.nextafter(grid, -np.inf),
                                 rng.uniform(start - 1, stop + 1, 20)])
        want = (grid[None, :] <= probes[:, None]).sum(axis=1)
        got = _count_le_linspace(np.full(probes.shape, start), np.full(probes.shape, stop), num, probes)
        np.testing.assert_array_equal(got, want)


def test_linspace_counts_need_one_correction_at_most(monkeypatch):
    """The count's estimate from the step is at most one point off (the grid's floats round, the quotient does
    not know it), so two comparison passes settle every count, including values outside the grid, at ±inf or
    NaN, and one-point, empty and zero-step grids; a worse first estimate (a wrong clip or NaN fill) would need
    more and raises here; values off the grid's span need no correction at all. (kills ``_count_le_linspace``'s
    estimate mutants: the clip bounds, the NaN fill)"""
    import attacks.epsilon as epsilon_module

    monkeypatch.setattr(epsilon_module, "_LINSPACE_PASSES", 2)
    rng = np.random.default_rng(2)
    for _ in range(200):
        start = float(rng.normal(0, 20))
        stop = start + float(rng.choice([0.0, 1e-3, 0.37, 4.0, 57.3]))
        num = int(rng.choice([0, 1, 2, 3, int(rng.integers(4, 500))]))
        grid = np.linspace(start, stop, num)
        probes = np.concatenate([grid, np.nextafter(grid, np.inf), np.nextafter(grid, -np.inf),
                                 rng.uniform(start - 3, stop + 3, 20), [-np.inf, np.inf, np.nan]])
        want = (grid[None, :] <= probes[:, None]).sum(axis=1)
        got = _count_le_linspace(np.full(probes.shape, start), np.full(probes.shape, stop), num, probes)
        np.testing.assert_array_equal(got, want)
        # values off the grid's span (and ±inf, NaN) are counted by the clip alone: one pass, no correction
        outside = np.array([start - 1.0, start - 50.0, stop + 1.0, stop + 50.0, -np.inf, np.inf, np.nan])
        monkeypatch.setattr(epsilon_module, "_LINSPACE_PASSES", 1)
        got = _count_le_linspace(np.full(outside.shape, start), np.full(outside.shape, stop), num, outside)
        np.testing.assert_array_equal(got, [0, 0, num, num, 0, num, 0])
        monkeypatch.setattr(epsilon_module, "_LINSPACE_PASSES", 2)
    monkeypatch.setattr(epsilon_module, "_LINSPACE_PASSES", 0)  # no pass at all: said, not a wrong count
    with pytest.raises(RuntimeError, match=r"^linspace count did not converge$"):
        _count_le_linspace(np.zeros(1), np.ones(1), 11, np.array([0.5]))


@pytest.mark.parametrize("start,stop,num", [(0.0, 1.0, 101), (2.0, 2.0, 5), (-1e-3, 1e-3, 2), (-3.0, 4.0, 1)])
def test_linspace_counts_are_silent_on_infinite_huge_and_missing_values(start, stop, num):
    """±inf, NaN and values whose distance to the grid overflows are counted without a numpy RuntimeWarning (a
    user's run prints none: the counts of such values are exact by construction). (kills
    ``_count_le_linspace``'s error-state mutants)"""
    import warnings

    probes = np.array([-np.inf, np.inf, np.nan, 1.7e308, -1.7e308, start, stop, 0.5 * (start + stop)])
    want = (np.linspace(start, stop, num)[None, :] <= probes[:, None]).sum(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = _count_le_linspace(np.full(probes.shape, start), np.full(probes.shape, stop), num, probes)
    np.testing.assert_array_equal(got, want)


def test_epsilon_table_holds_the_rule_formula():
    """ε(a, b) = max(log(1 − δ − FPR) − log FNR, log(1 − δ − FNR) − log FPR) clipped at 0, in float32; ∞ for a
    perfect rule; −∞ (skipped) when exactly one of FPR, FNR is zero."""
    t = epsilon_table(8, 4)
    assert t.shape == (9, 5)
    assert t[8, 0] == math.inf  # every positive inside, no negative: perfect
    assert t[0, 0] == -math.inf and t[8, 2] == -math.inf and t[3, 0] == -math.inf  # FNR or FPR alone zero
    tpr, fpr = np.float32(5 / 8), np.float32(1 / 4)
    fnr = np.float32(1) - tpr
    one = np.float32(1 - 1e-5)
    want = max(float(np.log(one - fpr) - np.log(fnr)), float(np.log(one - fnr) - np.log(fpr)), 0.0)
    assert t[5, 1] == pytest.approx(want, rel=1e-6)
    assert epsilon_table(4, 8)[1, 5] != t[5, 1]  # the roles are not symmetric


def test_collapsed_and_ruleless_examples_behave_as_the_reference():
    u = np.array([[0.0, 0.0], [1.0, 1e-4]])  # column 1: a range 1e-4 against 1: collapsed -> 50
    r = np.array([[0.5, 0.5], [1.5, 1.5]])
    assert epsilons(u, r)[1] == 50.0 == epsilons_per_example(u, r)[1]
    with pytest.raises(DuckInputError, match="at least 2"):
        epsilons(np.zeros((1, 3)), np.zeros((4, 3)))


# ---------------------------------------------------------------------------------------------- issue 39
def test_points_buckets_end_at_the_ceiling_of_ln_n_minus_1():
    from attacks.epsilon import epsilon_points

    # N = 4: ⌈ln 3⌉ = 2, four buckets; N = 3: ⌈ln 2⌉ = 1, two buckets; N = 32: ⌈ln 31⌉ = 4, eight
    eps = np.array([0.0, 0.499, 0.5, 0.999, 1.0, 1.5, 1.999, 2.0, 3.9, 4.0])
    np.testing.assert_array_equal(epsilon_points(eps, 4), [1, 1, .5, .5, .25, .125, .125, 0, 0, 0])
    np.testing.assert_array_equal(epsilon_points(eps, 3), [1, 1, .5, .5, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(epsilon_points(eps, 32)[-2:], [1 / 128, 0])
    with pytest.raises(DuckInputError) as e:
        epsilon_points(eps, 1)
    assert str(e.value) == "the ε score needs at least 2 unlearned models, got 1"


def test_forgetting_quality_is_the_mean_points_at_the_number_of_unlearned_models():
    from attacks.epsilon import epsilon_points, forgetting_quality

    rng = np.random.default_rng(11)
    u, r = rng.normal(0.3, 1, (4, 40)), rng.normal(0, 1, (32, 40))  # N = 4 buckets, not R = 32's
    eps = epsilons(u, r)
    assert forgetting_quality(u, r) == pytest.approx(float(np.mean(epsilon_points(eps, 4))), abs=0)
    assert forgetting_quality(u, r) != pytest.approx(float(np.mean(epsilon_points(eps, 32))))


def test_sample_and_pair_refusals_state_the_shapes():
    from attacks.epsilon import example_epsilon

    with pytest.raises(DuckInputError) as e:
        example_epsilon([1.0], [0.0, 1.0])
    assert str(e.value) == "pos needs at least 2 finite values (one per model), got 1"
    with pytest.raises(DuckInputError) as e:
        example_epsilon([0.0, 1.0], [0.0, np.nan, 2.0])
    assert str(e.value) == "neg needs at least 2 finite values (one per model), got 3"
    assert 0.0 <= example_epsilon([0.0, 1.0], [0.5, 2.0]) <= 50.0  # two models a side are enough
    with pytest.raises(DuckInputError) as e:
        epsilons(np.zeros((4, 3)), np.zeros((4, 2)))
    assert str(e.value) == "φ arrays must be (models, examples) over the same examples, got (4, 3) and (4, 2)"
    with pytest.raises(DuckInputError, match=r"got \(3,\) and"):
        epsilons(np.zeros(3), np.zeros((4, 3)))
    with pytest.raises(DuckInputError) as e:
        epsilons(np.zeros((4, 3)), np.zeros((1, 3)))
    assert str(e.value) == "need at least 2 unlearned and 2 retrained models, got 4 and 1"
    with pytest.raises(DuckInputError) as e:
        epsilons(np.zeros((2, 3)), np.full((2, 3), np.inf))
    assert str(e.value) == "φ arrays hold NaN or inf values"
    assert epsilons(np.array([[0.0], [1.0]]), np.array([[0.2], [0.9]])).shape == (1,)


def test_a_set_collapsed_below_one_percent_of_the_other_scores_the_cap_and_not_at_one_percent():
    u = np.array([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]])  # range 1
    r = np.array([[0.495, 0.495], [0.505, 0.50499]])  # ranges 0.01 (not collapsed) and 0.00999 (collapsed)
    assert np.ptp(r[:, 0]) / np.ptp(u[:, 0]) >= 0.01
    batched, per_example = epsilons(u, r), epsilons_per_example(u, r)
    assert batched[1] == per_example[1] == 50.0
    assert batched[0] == per_example[0] < 50.0  # the rules decide: no rule separates 0.5 from [0.495, 0.505]


def test_a_collapsed_unlearned_set_is_judged_per_example():
    """The collapse test reads each example's own ranges: the unlearned models agree to 0.008 on example 0
    (0.4 % of the retrained range: the cap) but spread over 2 on example 1 (the rules decide). (kills
    ``epsilons`` 56, 58: the unlearned range over every example)"""
    u = np.array([[0.0, 0.0], [0.004, 1.0], [0.008, 2.0]])
    r = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    batched, per_example = epsilons(u, r), epsilons_per_example(u, r)
    assert batched[0] == per_example[0] == 50.0
    assert batched[1] == per_example[1] < 50.0


def test_a_range_of_exactly_one_percent_is_not_collapsed():
    """Collapse is a range *below* 1 % of the other set's: at exactly 1 % (0.01 against 1.0, both exact in
    floats) the rules decide, in both paths. (kills ``epsilons`` 87: ``<=``)"""
    u, r = np.array([[0.0], [0.5], [1.0]]), np.array([[0.0], [0.01]])
    assert np.ptp(r) / np.ptp(u) == 0.01
    assert epsilons(u, r)[0] == epsilons_per_example(u, r)[0] < 50.0


def test_an_example_no_rule_separates_is_refused_in_full_by_both_paths():
    """Two models a side within 0.006 of each other: the single-threshold grid (100 per unit) has one point and
    no double-threshold rule holds a block, so no rule gives an ε; both paths refuse with the same message
    (the batched one only for examples that are not collapsed). (kills ``epsilons`` 90-94)"""
    u, r = np.array([[-0.01805], [-0.02314]]), np.array([[-0.02112], [-0.01996]])
    message = "no decision rule gave an ε for this example (the samples admit no threshold); check the φ values"
    for path in (epsilons, epsilons_per_example):
        with pytest.raises(DuckInputError) as err:
            path(u, r)
        assert str(err.value) == message
    import warnings

    with warnings.catch_warnings():  # both sets constant (0 / 0 ranges): the same one refusal, no RuntimeWarning
        warnings.simplefilter("error")
        for path in (epsilons, epsilons_per_example):
            with pytest.raises(DuckInputError) as err:
                path(np.array([[1.0], [1.0]]), np.array([[1.0], [1.0]]))
            assert str(err.value) == message


def test_samples_of_any_numeric_type_and_shape_are_read_as_float_vectors():
    """``example_epsilon`` reads its two samples as float64 vectors: integers, Decimals and column vectors give
    the ε of the same floats, and ``epsilons`` reads φ arrays of Decimals as floats too. (kills ``_as_samples``
    2, 4, 6 and ``_check_pair`` 3, 5, 7, 9)"""
    from decimal import Decimal

    from attacks.epsilon import example_epsilon

    pos, neg = [0.0, 1.0, 2.0, 4.0], [1.0, 3.0, 5.0, 6.0]
    want = example_epsilon(pos, neg)
    assert example_epsilon([int(v) for v in pos], [int(v) for v in neg]) == want
    assert example_epsilon([Decimal(v) for v in pos], [Decimal(v) for v in neg]) == want
    assert example_epsilon(np.array(pos)[:, None], np.array(neg)[:, None]) == want
    u, r = np.array([pos, neg]).T, np.array([neg, pos]).T  # (4 models, 2 examples) each
    as_decimals = [[Decimal(v) for v in row] for row in u.tolist()], [[Decimal(v) for v in row] for row in r.tolist()]
    np.testing.assert_array_equal(epsilons(*as_decimals), epsilons(u, r))


def test_equal_ranges_make_the_other_set_the_peakier_one():
    """The reference swaps the double-threshold roles when ``pos_diff >= neg_diff``: with equal ranges the
    negative set is the peakier one P. Here that choice decides ε (1.28 rather than 0.92), and both paths make
    it. (kills ``_double_threshold_blocks`` 35: ``>``)"""
    u = np.array([[-0.21], [-0.16], [0.54], [0.21], [0.36], [-0.65]])
    r = np.array([[0.0], [0.39], [0.7], [-0.48], [0.71]]) - 0.48
    r = (r - r.min()) / np.ptp(r) * np.ptp(u) + r.min()
    assert np.ptp(r) == np.ptp(u)
    assert epsilons(u, r)[0] == epsilons_per_example(u, r)[0]


def test_rule_epsilons_are_the_references_float32_values_and_never_negative():
    """Every entry of the rule table is the reference's ε computed in float32 rates (TPR, FPR, FNR of float32
    counts; ``max(log(1 − δ − FPR) − log(FNR), log(1 − δ − FNR) − log(FPR), 0)``), exactly, ∞ for a perfect
    rule and −∞ where exactly one of FPR, FNR is zero (the reference skips those). (kills ``_family_epsilons``'
    float32 casts and its clip at 0)"""
    n_pos, n_neg, delta = 6, 5, 1e-5
    table = epsilon_table(n_pos, n_neg, delta)
    one = np.float32(1)
    for a in range(n_pos + 1):
        for b in range(n_neg + 1):
            tpr, fpr = np.float32(a) / np.float32(n_pos), np.float32(b) / np.float32(n_neg)
            fnr = (np.float32(n_pos) - np.float32(a)) / np.float32(n_pos)
            if fpr == 0 and fnr == 0:
                want = np.inf
            elif fpr == 0 or fnr == 0:
                want = -np.inf
            else:
                with np.errstate(invalid="ignore"):
                    c = [np.log(np.float32(1 - delta) - fpr) - np.log(fnr),
                         np.log(np.float32(1 - delta) - fnr) - np.log(fpr)]
                c = [v for v in c if not np.isnan(v)]
                want = float(np.float32(max(max(c), np.float32(0)))) if c else -np.inf
            assert table[a, b] == want, (a, b, table[a, b], want)
            assert not table[a, b] < 0 or table[a, b] == -np.inf
    assert tpr.dtype == np.float32 and one.dtype == np.float32


def test_equal_medians_make_the_unlearned_set_the_positive_one():
    from attacks.epsilon import example_epsilon

    u = np.array([[0.0], [-0.2], [0.4], [2.2]])  # median 0.2
    r = np.array([[1.3], [0.2], [1.1], [-2.1], [0.1]])  # median 0.2 too
    assert np.median(u) == np.median(r)
    want = example_epsilon(u[:, 0], r[:, 0])
    assert want != example_epsilon(r[:, 0], u[:, 0])  # the roles matter here
    assert epsilons(u, r)[0] == want == epsilons_per_example(u, r)[0]


def test_delta_reaches_every_rule():
    rng = np.random.default_rng(12)
    u, r = rng.normal(0.5, 1, (8, 30)), rng.normal(0, 1, (8, 30))
    a, b = epsilons(u, r), epsilons(u, r, delta=0.2)
    np.testing.assert_array_equal(b, epsilons_per_example(u, r, delta=0.2))
    assert (b <= a).all() and (b < a).any()  # log(1 − δ − FPR) falls with δ
    t = epsilon_table(8, 8, 0.2)
    tpr, fpr = np.float32(6 / 8), np.float32(1 / 8)
    want = max(float(np.log(np.float32(1 - 0.2) - fpr) - np.log(np.float32(1) - tpr)),
               float(np.log(np.float32(1 - 0.2) - (np.float32(1) - tpr)) - np.log(fpr)), 0.0)
    assert t[6, 1] == pytest.approx(want, rel=1e-6)


def test_delta_reaches_the_rules_where_the_retrained_set_is_positive():
    """Where the retrained models' median is the larger (their table is ``(R, N)``), δ reaches those rules
    too: the batched ε at δ = 0.2 is the per-example path's at 0.2 and lower than at the default. (kills
    ``_batched_epsilons`` 57)"""
    rng = np.random.default_rng(14)
    u, r = rng.normal(0, 1, (5, 30)), rng.normal(1.5, 1, (9, 30))
    assert (np.median(r, axis=0) > np.median(u, axis=0)).all()
    b = epsilons(u, r, delta=0.2)
    np.testing.assert_array_equal(b, epsilons_per_example(u, r, delta=0.2))
    assert (b < epsilons(u, r)).any()


def test_chunks_of_examples_give_the_same_epsilons(monkeypatch):
    import attacks.epsilon as epsilon_module

    rng = np.random.default_rng(13)
    u, r = rng.normal(0.2, 1, (6, 25)), rng.normal(0, 1.2, (5, 25))
    whole = epsilons(u, r)
    for entries in (1, 121 * 3, 121 * 7):  # one example per chunk, then 3 and 7 (25 is not a multiple)
        monkeypatch.setattr(epsilon_module, "_CHUNK_ENTRIES", entries)
        np.testing.assert_array_equal(epsilons(u, r), whole)


@pytest.mark.parametrize("seed,kind,n_u,n_r", [(363, "heavy", 3, 7), (1108, "lattice", 5, 11), (262, "lattice", 32, 32),
                                              (701, "lattice", 8, 8)])
def test_batched_epsilons_at_boundary_cases_found_by_search(seed, kind, n_u, n_r):
    """Cases found by searching random φ (``_case``'s generator) for inputs where a change to the batched path's
    boundary handling changes some ε: 363, an example whose best block is reached only through the right
    grid's last point (``np.linspace``'s end, exactly ``b``, not ``a + k·step``); 1108, one whose left-end window
    needs the tolerance on the low side; 262 and 701, lattice values that sit on the bounds, where the tolerance
    must grow with the values' magnitude and the width (``scale = 1 + max|z| + w``). The batched ε equals the
    per-example path there. (kills ``_blocks_reached`` 67, 129, 136, 137 and ``_batched_epsilons`` 232, 233)"""
    u, r = _case(np.random.default_rng([seed, 99]), kind, n_u, n_r, 60)
    np.testing.assert_array_equal(epsilons(u, r), epsilons_per_example(u, r))


def _blocks_held_by_brute_force(z: np.ndarray, width: float, a_lo: float, b_hi: float, n_right: float) -> set:
    """Every block ``(i, j)`` of the sorted values ``z`` that one of the reference's double-threshold rules holds
    (calls exactly ``z_i .. z_j`` positive), by enumerating the rules: each right end of ``np.linspace(a_lo,
    b_hi, n_right)`` with each of its 400 left ends ``np.linspace(r − w − 2, r − w + 2, 400)``."""
    rights = np.linspace(a_lo, b_hi, int(n_right))
    lefts = np.linspace(rights - width - 2.0, rights - width + 2.0, 400, axis=1)  # (K, 400)
    i = np.searchsorted(z, lefts, side="left")  # the first value >= the left end
    j = np.broadcast_to(np.searchsorted(z, rights, side="right")[:, None] - 1, i.shape)  # the last <= the right end
    held = i <= j
    return set(zip(i[held].tolist(), j[held].tolist(), strict=True))


def test_double_threshold_bounds_hold_every_rules_block_and_little_else():
    """The batched path's two-sided bounds on the double-threshold blocks, against every rule enumerated:
    ``lower`` ⊆ {blocks some rule holds} ⊆ ``upper`` on every example (a block wrongly in ``lower`` would raise
    ε, one missing from ``upper`` lower it), and both within about a grid step of the truth: on these 16 cases
    ``lower`` holds 85 % of the held blocks and ``upper`` 26 % more (a looser bound sends more blocks to the
    exact pass, the batched path's cost). (kills ``_double_threshold_blocks``' bounds: tolerances, steps,
    the reach conditions on i, j and the block's inner and outer widths)"""
    from attacks.epsilon import _double_threshold_blocks

    counts = {"held": 0, "lower": 0, "upper": 0}
    for s in range(16):
        rng = np.random.default_rng([s, 5])
        kind = ["normal", "lattice", "shifted", "heavy"][s % 4]
        n_u, n_r = [(4, 4), (8, 8), (5, 11), (3, 7)][s % 4]
        u, r = _case(rng, kind, n_u, n_r, 20)
        z = np.sort(np.concatenate([u, r]).T, axis=1)
        blocks = _double_threshold_blocks(z, u, r, ~(np.median(r, axis=0) > np.median(u, axis=0)))
        for e in range(z.shape[0]):
            held = _blocks_held_by_brute_force(z[e], blocks.width[e], blocks.a_lo[e], blocks.b_hi[e],
                                               blocks.n_right[e])
            lower = set(zip(*np.nonzero(blocks.lower[e]), strict=True))
            upper = set(zip(*np.nonzero(blocks.upper[e]), strict=True))
            assert lower <= held <= upper, (s, e, sorted(lower - held)[:3], sorted(held - upper)[:3])
            counts["held"] += len(held)
            counts["lower"] += len(lower)
            counts["upper"] += len(upper)
    assert counts["lower"] >= 0.8 * counts["held"] and counts["upper"] <= 1.35 * counts["held"], counts


def test_double_threshold_bounds_are_the_right_end_interval_conditions():
    """``upper`` and ``lower`` restated one block at a time (an independent, loop-by-loop statement of the bounds;
    continuous φ, so no value sits on a bound and the 1e-9 tolerance never decides): a rule holds exactly
    ``z_i .. z_j`` iff some right end r of the grid lies in ``[max(z_j, A, z_{i−1} + w − 2), min(z_{j+1}, B,
    z_i + w + 2)]`` with a left end in ``(z_{i−1}, z_i]``. ``upper``: that interval is not empty and
    ``z_{i−1} < z_i``, ``z_j < z_{j+1}``. ``lower``: ``z_i − z_{i−1}`` exceeds the left grid's step ``s_l`` and the
    interval, each end moved in by ``s_l`` on the left-window side, is longer than the right grid's step ``s_r``
    (so it holds a grid point, and that point's left window a left end in ``(z_{i−1}, z_i]``). (kills the
    bounds' steps and conditions in ``_double_threshold_blocks``)"""
    from attacks.epsilon import _double_threshold_blocks

    step_l = 4.0 / 399
    for s in range(36):
        rng = np.random.default_rng([s, 77] if s < 24 else [s - 24, 6])
        n_u, n_r = [(4, 4), (8, 8), (5, 11), (3, 7)][s % 4]
        u, r = _case(rng, ["normal", "shifted", "heavy"][s % 3], n_u, n_r, 10)
        r = r * float(rng.choice([1, 3, 6, 10]) if s < 24 else 6.0)  # a set far wider: the outer conditions bind
        z = np.sort(np.concatenate([u, r]).T, axis=1)
        blocks = _double_threshold_blocks(z, u, r, ~(np.median(r, axis=0) > np.median(u, axis=0)))
        m = z.shape[1]
        for e in range(z.shape[0]):
            w, a, b = blocks.width[e], blocks.a_lo[e], blocks.b_hi[e]
            step_r = (b - a) / max(blocks.n_right[e] - 1, 1)
            upper, lower = np.zeros((m, m), bool), np.zeros((m, m), bool)
            for i in range(m):
                zp = z[e, i - 1] if i else -np.inf
                for j in range(i, m):
                    zn = z[e, j + 1] if j < m - 1 else np.inf
                    lo, hi = max(z[e, j], a, zp + w - 2), min(zn, b, z[e, i] + w + 2)
                    upper[i, j] = zp < z[e, i] and z[e, j] < zn and lo < hi
                    inner = min(zn, b, z[e, i] + w + 2 - step_l) - max(z[e, j], a, zp + w - 2 + step_l)
                    lower[i, j] = z[e, i] - zp > step_l and inner > step_r
            np.testing.assert_array_equal(blocks.upper[e], upper, err_msg=f"upper, case {s}, example {e}")
            np.testing.assert_array_equal(blocks.lower[e], lower, err_msg=f"lower, case {s}, example {e}")


def _searchsorted_rows(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    return np.stack([np.searchsorted(row, values, side="right") for row in rows])


def test_first_above_settles_linspace_rows_in_two_passes_and_searches_other_rows(monkeypatch):
    """``_first_above`` (the double-threshold rules' left-end positions) is ``searchsorted(row, v, "right")``
    per row. For rows that are linspaces (the reference's left-end grids) the estimate from the row's ends is
    at most one position off, so two comparison passes settle it, at and beside every grid point and outside the
    row (intervals of zero width included), without a RuntimeWarning; rows that are not linspaces get the per-row search.
    (kills ``_first_above_linspace``'s estimate, clip, padding and pass mutants, ``_first_above``'s search)"""
    import warnings

    import attacks.epsilon as epsilon_module
    from attacks.epsilon import _first_above, _first_above_linspace

    monkeypatch.setattr(epsilon_module, "_FIRST_ABOVE_PASSES", 2)
    rng = np.random.default_rng(3)
    for _ in range(50):
        right = np.sort(rng.normal(0, 5, 6))
        width = float(rng.choice([0.0, 0.013, 0.7, 3.0]))
        rows = np.linspace(right - width - 2.0, right - width + 2.0, num=400, axis=1)
        grid = rows.ravel()
        values = np.concatenate([grid[::37], np.nextafter(grid[::41], np.inf), np.nextafter(grid[::43], -np.inf),
                                 rng.uniform(grid.min() - 3, grid.max() + 3, 30)])
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = _first_above_linspace(rows, values)
        assert got is not None
        np.testing.assert_array_equal(got, _searchsorted_rows(rows, values))
    rows = np.sort(rng.normal(0, 1, (5, 40)), axis=1)  # not linspaces: the estimate cannot settle them
    values = rng.normal(0, 1, 25)
    assert _first_above_linspace(rows, values) is None
    np.testing.assert_array_equal(_first_above(rows, values), _searchsorted_rows(rows, values))
    near = np.arange(40.0)[None, :].copy()
    near[0, 3:5] = [2.2, 2.4]  # 2.5 is estimated at position 3 but lies after 5: two corrections, three passes
    assert _first_above_linspace(near, np.array([2.5])) is None  # the passes are _FIRST_ABOVE_PASSES (2 here)
    assert _first_above(near, np.array([2.5])).tolist() == [[5]]
    monkeypatch.setattr(epsilon_module, "_FIRST_ABOVE_PASSES", 1)  # values outside a row: no correction at all
    outside = np.array([-1e9, -5.0, 50.0, 1e9])
    grid_rows = np.linspace([0.0, -3.0], [39.0, 7.0], num=40, axis=1)
    np.testing.assert_array_equal(_first_above_linspace(grid_rows, outside), [[0, 0, 40, 40]] * 2)
    constant = np.full((2, 40), 0.5)  # first == last: the estimate divides by zero, silently, and the search decides
    values = np.array([0.4, 0.5, 0.6])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(_first_above(constant, values), _searchsorted_rows(constant, values))


def test_f_has_buckets_from_three_models():
    """F's buckets end at ⌈ln(N − 1)⌉: 0 for N = 2 (every ε earns 0 points), 1 from N = 3 on. (has_buckets)"""
    from attacks.epsilon import epsilon_points, has_buckets

    assert [has_buckets(n) for n in (2, 3, 4, 32)] == [False, True, True, True]
    assert epsilon_points(np.array([0.0]), 2).tolist() == [0.0] and epsilon_points(np.array([0.0]), 3).tolist() == [1.0]
