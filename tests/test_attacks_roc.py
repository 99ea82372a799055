"""ROC, AUC, TPR at fixed FPR and AUC confidence intervals on hand-computed and reference values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from attacks.roc import ROC_GRID, auc_score, auc_with_ci, bootstrap_auc, hanley_mcneil_se, roc_curve, roc_summary, tpr_at_fpr
from duck.errors import DuckInputError

SCORES = np.array([0.9, 0.8, 0.7, 0.6, 0.55, 0.5])
MEMBER = np.array([1, 1, 0, 1, 0, 0], dtype=bool)


def test_roc_points_by_hand() -> None:
    fpr, tpr, thr = roc_curve(SCORES, MEMBER)
    np.testing.assert_allclose(fpr, [0, 0, 0, 1 / 3, 1 / 3, 2 / 3, 1])
    np.testing.assert_allclose(tpr, [0, 1 / 3, 2 / 3, 2 / 3, 1, 1, 1])
    np.testing.assert_allclose(thr[1:], SCORES)
    assert auc_score(SCORES, MEMBER) == pytest.approx(8 / 9)  # 0.9 and 0.8 beat all 3, 0.6 beats 2
    assert np.trapezoid(tpr, fpr) == pytest.approx(8 / 9)


def test_tpr_at_fpr_is_largest_tpr_within_level() -> None:
    fpr, tpr, _ = roc_curve(SCORES, MEMBER)
    assert tpr_at_fpr(fpr, tpr, 0.001) == pytest.approx(2 / 3)  # only FPR = 0 qualifies
    assert tpr_at_fpr(fpr, tpr, 0.33) == pytest.approx(2 / 3)
    assert tpr_at_fpr(fpr, tpr, 1 / 3) == pytest.approx(1.0)
    assert tpr_at_fpr(fpr, tpr, 1.0) == 1.0
    # a level is a rate: outside [0, 1] it is refused, naming what it is (0 and 1 themselves are levels)
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(DuckInputError, match=rf"^FPR level must be a finite number >= 0.0 and <= 1.0, got {bad}$"):
            tpr_at_fpr(fpr, tpr, bad)
    assert tpr_at_fpr(fpr, tpr, 0.0) == pytest.approx(2 / 3)


def test_ties_form_one_roc_point_and_count_half() -> None:
    scores = np.array([1.0, 1.0, 0.0, 0.0])
    member = np.array([1, 0, 1, 0], dtype=bool)
    fpr, tpr, _ = roc_curve(scores, member)
    np.testing.assert_allclose(fpr, [0, 0.5, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 1])
    assert auc_score(scores, member) == pytest.approx(0.5)


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 60), st.integers(2, 60), st.integers(0, 5), st.integers(0, 10_000))
def test_auc_matches_sklearn_with_ties(n_pos: int, n_neg: int, rounding: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = np.round(rng.normal(size=n_pos + n_neg), rounding)
    member = np.r_[np.ones(n_pos, bool), np.zeros(n_neg, bool)]
    assert auc_score(scores, member) == pytest.approx(roc_auc_score(member, scores), abs=1e-12)
    fpr, tpr, _ = roc_curve(scores, member)
    assert np.trapezoid(tpr, fpr) == pytest.approx(roc_auc_score(member, scores), abs=1e-12)


def test_hanley_mcneil_formula() -> None:
    a, n1, n2 = 0.8, 40, 60
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    expected = np.sqrt((a * (1 - a) + (n1 - 1) * (q1 - a * a) + (n2 - 1) * (q2 - a * a)) / (n1 * n2))
    assert hanley_mcneil_se(a, n1, n2) == pytest.approx(expected)
    # at A = 0.5 it is the Mann–Whitney null SE sqrt((n1 + n2 + 1) / (12 n1 n2)) up to O(1/n)
    assert hanley_mcneil_se(0.5, 200, 200) == pytest.approx(np.sqrt(401 / (12 * 200 * 200)), rel=0.02)


def test_bootstrap_se_agrees_with_hanley_mcneil_and_ci_covers() -> None:
    rng = np.random.default_rng(0)
    scores = np.r_[rng.normal(0.5, 1, 300), rng.normal(0, 1, 300)]
    member = np.r_[np.ones(300, bool), np.zeros(300, bool)]
    boots = bootstrap_auc(scores, member, n_boot=1000, seed=1)
    auc = auc_score(scores, member)
    assert boots.std() == pytest.approx(hanley_mcneil_se(auc, 300, 300), rel=0.2)
    res = auc_with_ci(scores, member, method="bootstrap", n_boot=1000)
    assert res["auc_ci"][0] < auc < res["auc_ci"][1]
    hm = auc_with_ci(scores, member, method="hanley_mcneil")
    assert hm["auc_ci"][0] == pytest.approx(auc - 1.959964 * hm["auc_se"], abs=1e-6)


def test_ci_coverage_under_the_null() -> None:
    """Member and non-member scores from one distribution: the 95 % interval holds 0.5 in ~95 % of draws."""
    rng = np.random.default_rng(5)
    member = np.r_[np.ones(60, bool), np.zeros(40, bool)]
    covered = []
    for _ in range(300):
        ci = auc_with_ci(rng.normal(size=100), member, method="hanley_mcneil")["auc_ci"]
        covered.append(ci[0] <= 0.5 <= ci[1])
    assert 0.9 <= np.mean(covered) <= 0.99


def test_summary_fields() -> None:
    rng = np.random.default_rng(2)
    scores = np.r_[rng.normal(1, 1, 50), rng.normal(0, 1, 200)]
    member = np.r_[np.ones(50, bool), np.zeros(200, bool)]
    s = roc_summary(scores, member, n_boot=500)
    assert set(s["tpr_at_fpr"]) == {"0.001", "0.01", "0.05"}
    assert s["fpr_resolution"] == pytest.approx(1 / 200)
    assert len(s["roc"]["fpr"]) == len(ROC_GRID) == len(s["roc"]["tpr"])
    assert np.all(np.diff(s["roc"]["tpr"]) >= 0)


def test_bad_inputs_raise() -> None:
    with pytest.raises(DuckInputError, match="members and non-members"):
        auc_score(np.ones(3), np.ones(3, bool))
    with pytest.raises(DuckInputError, match="NaN"):
        auc_score(np.array([np.nan, 1.0]), np.array([True, False]))
    with pytest.raises(DuckInputError, match="ci.method"):
        auc_with_ci(SCORES, MEMBER, method="delong")


def test_bootstrap_resamples_by_hand() -> None:
    """The stratified bootstrap: exactly ``n_boot`` AUCs whatever the chunking, reproducible from its seed, each
    the Mann-Whitney AUC of its resample; with one member and one non-member every resample is the pair itself."""
    one_each = bootstrap_auc(np.array([0.3, 0.9]), np.array([False, True]), n_boot=7, seed=0)
    np.testing.assert_array_equal(one_each, np.ones(7))  # the member above: AUC 1 in every resample
    low_member = bootstrap_auc(np.array([0.3, 0.9]), np.array([True, False]), n_boot=5, seed=0)
    np.testing.assert_array_equal(low_member, np.zeros(5))
    rng = np.random.default_rng(0)
    scores, member = rng.normal(size=60), np.arange(60) < 20
    boots = bootstrap_auc(scores, member, n_boot=300, seed=3, chunk=250)  # 300: one full chunk and a part
    assert boots.shape == (300,) and np.all((0 <= boots) & (boots <= 1))
    np.testing.assert_array_equal(boots, bootstrap_auc(scores, member, n_boot=300, seed=3, chunk=250))
    assert not np.array_equal(boots, bootstrap_auc(scores, member, n_boot=300, seed=4, chunk=250))


def test_roc_summary_passes_its_settings_on() -> None:
    """roc_summary's interval is auc_with_ci's with the same method, level, resamples and seed (defaults: a 95 %
    bootstrap interval of 2,000 resamples, seed 0)."""
    rng = np.random.default_rng(1)
    scores, member = rng.normal(size=80) + np.r_[np.ones(30), np.zeros(50)], np.arange(80) < 30
    default = roc_summary(scores, member)
    explicit = auc_with_ci(scores, member, method="bootstrap", level=0.95, n_boot=2000, seed=0)
    assert default["auc_ci"] == explicit["auc_ci"] and default["auc_se"] == explicit["auc_se"]
    hm = roc_summary(scores, member, ci_method="hanley_mcneil", ci_level=0.8)
    assert hm["auc_ci"] == auc_with_ci(scores, member, method="hanley_mcneil", level=0.8)["auc_ci"]
    few = roc_summary(scores, member, n_boot=150, seed=5)
    assert few["auc_ci"] == auc_with_ci(scores, member, n_boot=150, seed=5)["auc_ci"]


def test_scores_and_labels_are_checked_as_stated() -> None:
    """Labels are booleans or 0/1 (any other integer is refused, naming the values); scores and labels of any shape
    are read flat; a hard 0/1 prediction (booleans) is a valid score."""
    as_ints = roc_curve(SCORES, MEMBER.astype(int))
    for got, want in zip(as_ints, roc_curve(SCORES, MEMBER), strict=True):
        np.testing.assert_array_equal(got, want)
    with pytest.raises(DuckInputError, match=r"^membership labels must be booleans or 0/1, got values \[0, 1, 2\]; "
                                             r"pass is_member as True/False$"):
        roc_curve(SCORES, np.array([1, 2, 0, 1, 0, 0]))
    flat = auc_score(SCORES.reshape(2, 3), MEMBER)
    assert flat == auc_score(SCORES, MEMBER.reshape(3, 2)) == auc_score(SCORES, MEMBER)
    hard = np.array([True, True, False, False, True, False])  # a 0/1 prediction: 2 of 3 members called, 1 of 3 others
    assert auc_score(hard, MEMBER) == pytest.approx((1 + 2 / 3 - 1 / 3) / 2)
    fpr, tpr, _ = roc_curve(hard, MEMBER)
    np.testing.assert_allclose(fpr, [0, 1 / 3, 1])
    np.testing.assert_allclose(tpr, [0, 2 / 3, 1])


def test_auc_with_ci_record_intervals_and_refusals() -> None:
    """The whole record of both interval methods, recomputed from their definitions: the bootstrap's percentile
    interval and standard deviation (ddof 1) of the stratified resamples it names; Hanley-McNeil's AUC ± z·SE
    clipped to [0, 1]; and every setting's range, refused at its ends with the message naming it."""
    rng = np.random.default_rng(2)
    member = np.arange(80) < 30
    scores = rng.normal(size=80) + 1.2 * member
    auc = auc_score(scores, member)
    rec = auc_with_ci(scores, member, method="bootstrap", level=0.9, n_boot=150, seed=4)
    boots = bootstrap_auc(scores, member, n_boot=150, seed=4)
    lo, hi = np.quantile(boots, [0.05, 0.95])
    assert rec == {"auc": auc, "auc_se": pytest.approx(float(np.std(boots, ddof=1))), "auc_ci": [lo, hi],
                   "ci_method": "bootstrap", "ci_level": 0.9, "auc_se_hanley_mcneil": hanley_mcneil_se(auc, 30, 50)}
    # Hanley-McNeil on a small, well separated set: the upper end is clipped at 1
    small_member = np.array([True, True, True, False, False, False])
    small = np.array([0.9, 0.8, 0.3, 0.4, 0.2, 0.1])
    a = auc_score(small, small_member)
    se = hanley_mcneil_se(a, 3, 3)
    hm = auc_with_ci(small, small_member, method="hanley_mcneil", level=0.9)
    assert a + 1.6448536 * se > 1 and hm["auc_ci"] == [pytest.approx(max(0.0, a - 1.6448536 * se)), 1.0]
    assert hm["auc_se"] == se and hm["ci_method"] == "hanley_mcneil"
    for level in (0.5, 0.999):
        auc_with_ci(small, small_member, method="hanley_mcneil", level=level)
    for level in (0.49, 1.0, 1.5):
        with pytest.raises(DuckInputError, match=rf"^attack\.ci\.level={level} must be in \[0\.5, 1\), e\.g\. 0\.95$"):
            auc_with_ci(small, small_member, level=level)
    for n_boot in (100, 100_000):
        assert len(auc_with_ci(small, small_member, n_boot=n_boot)["auc_ci"]) == 2
    for n_boot in (99, 100_001, True, 150.0):
        with pytest.raises(DuckInputError, match=rf"^attack\.ci\.n_boot={n_boot!r} must be an integer in \[100, 100000\] "
                                                 r"\(resamples of the percentile interval; 2000 is usual\)$"):
            auc_with_ci(small, small_member, n_boot=n_boot)
