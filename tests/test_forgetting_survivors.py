"""The forgetting measures of attacks/forgetting.py (ALGORITHMS.md §10 (b), (c) and the final score) where the
main tests leave room: ``binned_kl``'s settings and its real-valued inputs against a histogram counted by hand,
the final score's division by the retrained accuracies and its refusal in full, the default level of KLOM's
median interval against the delete-one-pair jackknife written out, every field of the KLOM summary (defined,
undefined and read back from JSON), the clip of a U-LiRA AUC difference's interval to [−1, 1], and the score-0
tie of U-LiRA's per-example accuracy."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from refusals import refused
from test_forgetting import REFERENCE  # the reference implementations' outputs on hand-made samples

from attacks.forgetting import (
    UliraScores,
    binned_kl,
    final_score,
    jackknife_normal_interval,
    klom,
    klom_median_interval,
    summarize,
    ulira_difference,
)

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile


def _kl_by_hand(p: list[float], q: list[float], bins: int, eps: float, clip: float) -> float:
    """The reference's ``compute_binned_KL_div`` spelled out with loops: clip, ``bins`` equal bins over the pooled
    range (a value counts in bin i when edge i <= value < edge i+1; the pooled maximum falls beyond the last edge
    and is dropped), Q's empty bins floored at ``eps`` where P has mass, both renormalised, Σ p log(p / q)."""
    p = [min(max(v, -clip), clip) for v in p]
    q = [min(max(v, -clip), clip) for v in q]
    lo, hi = min(p + q), max(p + q)
    hi = lo + 1 if lo >= hi else hi
    edges = np.linspace(lo, hi, bins + 1)

    def hist(values: list[float]) -> list[float]:
        counts = [0] * bins
        for v in values:
            above = sum(e <= v for e in edges)  # np.digitize: the edges at or below v
            if 1 <= above <= bins:
                counts[above - 1] += 1
        return [c / sum(counts) for c in counts]

    hp, hq = hist(p), hist(q)
    hq = [max(b, eps) if a > 0 else b for a, b in zip(hp, hq, strict=True)]
    sp, sq = sum(hp), sum(hq)
    return sum(a / sp * math.log((a / sp) / (b / sq)) for a, b in zip(hp, hq, strict=True) if a > 0)


# --- binned KL ---------------------------------------------------------------------------------------------------


def test_binned_kl_honours_bins_floor_and_clip_against_a_histogram_by_hand():
    """Seven bins, a floor of 1e-3 and a clip of ±5 (values at ±8 count as ±5, unlike the default clip of 100):
    ``binned_kl`` equals the histogram counted by hand, and differs from the unclipped samples' KL."""
    p = [-8.0, -1.0, 0.2, 0.4, 1.5, 2.5, 8.0, 3.0]
    q = [-2.0, -1.5, 0.3, 0.3, 0.6, 1.0, 9.0, 4.5]
    want = _kl_by_hand(p, q, bins=7, eps=1e-3, clip=5.0)
    assert binned_kl(p, q, bins=7, eps=1e-3, clip=5.0) == pytest.approx(want, rel=1e-12)
    assert binned_kl(p, q, bins=7, eps=1e-3) == pytest.approx(_kl_by_hand(p, q, 7, 1e-3, 100.0), rel=1e-12)
    assert want != pytest.approx(_kl_by_hand(p, q, 7, 1e-3, 100.0), rel=1e-3)  # the clip matters here


def test_binned_kl_of_lists_equals_the_reference_klom_of_one_example():
    """Plain Python lists, one example of a reference case: the value the reference implementation stored."""
    case = REFERENCE[sorted(REFERENCE)[0]]
    u, r = np.array(case["unlearned"]), np.array(case["retrained"])
    assert binned_kl(u[:, 0].tolist(), r[:, 0].tolist()) == pytest.approx(case["klom"][0], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("side", ["p", "q"])
def test_binned_kl_refuses_complex_values_on_either_side(side):
    """φ is a real margin: complex values are refused by the conversion to float64, not cast to their real
    part (which NumPy does, with a warning only, once they sit in a complex array)."""
    real, cplx = [0.0, 0.5, 1.0], [0.0, 0.5 + 1j, 1.0]
    args = (cplx, real) if side == "p" else (real, cplx)
    with refused("float() argument must be a string or a real number, not 'complex'", TypeError):
        binned_kl(*args)


# --- final score -------------------------------------------------------------------------------------------------


def test_final_score_divides_by_the_retrained_accuracies():
    """F × (RA_U / RA_R) × (TA_U / TA_R) by hand with RA_R = 1/4: 0.8 × (0.5 / 0.25) × (0.6 / 0.8) = 1.2; and
    scaling both retain accuracies (or both test accuracies) by one factor leaves the ratio, so the score, as is."""
    assert final_score(0.8, [0.4, 0.6], [0.25, 0.25], [0.6], [0.7, 0.9]) == pytest.approx(1.2, rel=1e-12)
    base = final_score(0.5, [0.3], [0.6], [0.4], [0.5])
    assert base == pytest.approx(0.5 * 0.5 * 0.8, rel=1e-12)
    assert final_score(0.5, [0.15], [0.3], [0.4], [0.5]) == pytest.approx(base, rel=1e-12)
    assert final_score(0.5, [0.3], [0.6], [0.2], [0.25]) == pytest.approx(base, rel=1e-12)


@pytest.mark.parametrize("ra_r,ta_r", [([0.5], [0.0]), ([0.4, 0.6], [0.2, -0.2]), ([0.0], [0.5]),
                                       ([-0.1], [0.5])])
def test_final_score_refuses_a_retrained_mean_accuracy_of_zero_or_below(ra_r, ta_r):
    """A mean test accuracy of exactly 0 (one of two models at −0.2 and 0.2) is refused, as is a retain one."""
    with refused("the retrained models' mean retain and test accuracies must be > 0 for the final score"):
        final_score(0.5, [0.5], ra_r, [0.5], ta_r)


# --- KLOM median interval ----------------------------------------------------------------------------------------


def test_klom_median_interval_defaults_to_the_95_percent_jackknife_interval_by_hand():
    """The median KLOM over examples, its K delete-one-pair medians (model i of both sets left out), the
    jackknife SE² = (K−1)/K Σ (θ₋ᵢ − mean)² and θ ± 1.95996·SE: a shifted set keeps the interval above 0,
    so neither end is clipped."""
    rng = np.random.default_rng(4)
    u, r = rng.normal(1.5, 1.0, (8, 40)), rng.normal(0.0, 1.0, (8, 40))
    theta = float(np.median(klom(u, r)))
    loo = np.array([np.median(klom(np.delete(u, i, axis=0), np.delete(r, i, axis=0))) for i in range(8)])
    half = Z95 * math.sqrt(7 / 8 * ((loo - loo.mean()) ** 2).sum())
    assert theta - half > 0
    got = klom_median_interval(u, r)
    assert got == pytest.approx((theta, theta - half, theta + half), rel=1e-9)
    assert all(math.isfinite(v) for v in got)


def test_klom_median_interval_with_two_models_a_side_gives_no_interval():
    """Two models a side: a leave-one-out fit holds one model a side, where KLOM is undefined, so the spread of
    the median cannot be estimated; the median is reported without an interval rather than as (θ, θ, θ)."""
    rng = np.random.default_rng(5)
    u, r = rng.normal(1.5, 1.0, (2, 30)), rng.normal(0.0, 1.0, (2, 30))
    theta, low, high = klom_median_interval(u, r)
    assert theta == float(np.median(klom(u, r))) and low is None and high is None


# --- KLOM summary --------------------------------------------------------------------------------------------------


def test_summary_of_defined_values_is_the_median_and_the_95th_percentile_by_hand():
    """0, 1, ..., 20 with linear interpolation: the median is 10 and the 95th percentile 0.95 × 20 = 19 (the 96th
    would be 19.2); the record holds exactly the four fields."""
    assert summarize(np.arange(21.0)) == {"median": 10.0, "p95": 19.0, "n": 21, "undefined": 0}
    rec = summarize(np.array([3.0, np.nan, 1.0, 2.0]))  # defined 1, 2, 3: p95 = 1 + 0.95 × 2 = 2.9
    assert rec == {"median": 2.0, "p95": pytest.approx(2.9, rel=1e-12), "n": 4, "undefined": 1}


def test_summary_of_nothing_defined_keeps_every_field():
    assert summarize(np.full(3, np.nan)) == {"median": None, "p95": None, "n": 3, "undefined": 3}


def test_summary_of_values_read_back_from_json_counts_null_as_undefined():
    """A KLOM file whose undefined values were written as JSON null: they count as undefined, the others as
    numbers (median of 0.5 and 1.5 is 1.0)."""
    rec = summarize(json.loads("[0.5, null, 1.5, null]"))
    assert rec == {"median": 1.0, "p95": pytest.approx(0.5 + 0.95, rel=1e-12), "n": 4, "undefined": 2}


# --- U-LiRA --------------------------------------------------------------------------------------------------------


def test_ulira_difference_interval_is_clipped_to_the_range_of_an_auc_difference():
    """Two AUCs in [0, 1] differ by at most 1 either way: leave-one-pair-out differences ±0.8 give a jackknife
    half-width of 1.96 × √(3/4 × 4 × 0.64) ≈ 2.72 around 0, clipped to exactly [−1, 1] on both sides; swapping
    method and control negates the value and mirrors the interval."""
    method, control = (0.5, np.array([0.9, 0.1, 0.9, 0.1])), (0.5, np.array([0.1, 0.9, 0.1, 0.9]))
    half = Z95 * math.sqrt(3 / 4 * 4 * 0.8 ** 2)
    assert half > 2.0
    assert ulira_difference(method, control) == {"value": 0.0, "ci": [-1.0, 1.0]}
    # off-centre: 0.7 - 0.2 = 0.5 with the same spread: the lower end clips at −1, the upper at 1
    d = ulira_difference((0.7, np.array([0.9, 0.1, 0.9, 0.1])), (0.2, np.array([0.1, 0.9, 0.1, 0.9])))
    assert d["value"] == pytest.approx(0.5) and d["ci"] == [-1.0, 1.0]
    # a narrow one is not clipped: θ ± z·SE as jackknife_normal_interval gives it with unbounded limits
    m2, c2 = (0.6, np.array([0.62, 0.58, 0.61, 0.59])), (0.5, np.array([0.5, 0.5, 0.5, 0.5]))
    lo, hi = jackknife_normal_interval(0.1, m2[1] - c2[1], 0.95, (-math.inf, math.inf))
    assert ulira_difference(m2, c2)["ci"] == pytest.approx([lo, hi], rel=1e-12) and -1 < lo < hi < 1
    swapped = ulira_difference(control, (0.5, method[1]))
    assert swapped["value"] == 0.0 and swapped["ci"] == [-1.0, 1.0]


def test_ulira_per_example_accuracy_calls_a_score_of_zero_retrained():
    """The threshold is 0 with unlearned strictly above: an unlearned model scored exactly 0 is a miss, a retrained
    one scored 0 a hit; checked against a per-example count written out, on scores with many exact zeros."""
    tie = UliraScores(scores=np.zeros(4), is_unlearned=np.array([True, True, False, False]),
                      pair=np.arange(4), example=np.array([0, 1, 2, 2]))
    np.testing.assert_array_equal(tie.per_example_accuracy(), [0.0, 0.0, 1.0])
    rng = np.random.default_rng(2)
    scores = rng.choice([-1.0, 0.0, 2.0], 60)
    labels, example = rng.random(60) < 0.5, rng.integers(0, 7, 60)
    s = UliraScores(scores=scores, is_unlearned=labels, pair=np.zeros(60, dtype=int), example=example)
    want = []
    for x in np.unique(example):
        hits = [(sc > 0) if lab else (sc <= 0) for sc, lab, e in zip(scores, labels, example, strict=True) if e == x]
        want.append(sum(hits) / len(hits))
    np.testing.assert_allclose(s.per_example_accuracy(), want, rtol=0, atol=1e-15)


# --- issue 39, session q: the survivors of a fresh run ------------------------------------------------------------


def test_binned_kl_clips_the_retrained_side_from_below_too():
    """A retrained value at −500 counts as −clip (the pooled range starts at −5, not at −500): against the
    histogram counted by hand (kills ``_binned_kl_columns`` 15: q's lower clip dropped)."""
    p = [-1.0, 0.0, 0.5, 1.0, 2.0, 3.0]
    q = [-500.0, -0.5, 0.5, 1.5, 2.5, 4.0]
    want = _kl_by_hand(p, q, bins=6, eps=1e-4, clip=5.0)
    assert binned_kl(p, q, bins=6, eps=1e-4, clip=5.0) == pytest.approx(want, rel=1e-12)
    assert want != pytest.approx(_kl_by_hand(p, q, 6, 1e-4, 500.0), rel=1e-3)  # the clip matters here


@pytest.mark.parametrize("side", ["unlearned", "retrained"])
def test_an_empty_histogram_on_either_side_is_undefined_without_a_warning(side):
    """Every value of one side at the pooled maximum (beyond the last edge, dropped by the reference's
    ``np.digitize`` binning): that histogram is empty and KLOM is NaN, as the reference's ``stats.entropy`` of a
    0/0 histogram gives, counted as undefined by the summary. Retrained models far above every unlearned one
    used to score 0 (an empty Q floored to ε on P's support is uniform there), which reads as "identical"
    (kills ``_binned_kl_columns`` 109, 111). No RuntimeWarning escapes (kills 129, 131: the 0/0 not silenced)."""
    import warnings

    spread = np.array([[0.0, 5.0], [1.0, 6.0], [2.0, 7.0], [3.0, 8.0]])  # (models, examples)
    top = np.full((4, 2), 10.0)
    u, r = (top, spread) if side == "unlearned" else (spread, top)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        values = klom(u, r)
        assert np.isnan(values).all()
        assert math.isnan(binned_kl(u[:, 0], r[:, 0]))
    assert summarize(values)["undefined"] == 2


def test_klom_refusal_names_both_model_counts():
    """Three unlearned and four retrained models over five examples: the counts are the models, not the
    examples (kills ``klom`` 7-9 and ``klom_median_interval`` 12)."""
    rng = np.random.default_rng(0)
    u, r = rng.standard_normal((3, 5)), rng.standard_normal((4, 5))
    message = "KLOM compares as many unlearned as retrained models, got 3 and 4"
    with refused(message):
        klom(u, r)
    with refused(message):
        klom_median_interval(u, r)


def test_klom_median_interval_with_three_models_and_one_undefined_leave_one_out():
    """Three models a side, where leaving model 2 out leaves two unlearned runs both at the pooled maximum on
    every example (KLOM undefined there): the two defined leave-one-out medians still give an interval (kills
    ``klom_median_interval`` 41: ``k > 3``; 46, 47: three medians required). Both equal θ, so the jackknife
    interval is (θ, θ); and no RuntimeWarning for the undefined subset (kills 22: ``np.median`` of nothing)."""
    import warnings

    u = np.array([[10.0, 10.0, 10.0], [10.0, 10.0, 10.0], [0.5, 1.5, 2.5]])
    r = np.array([[0.0, 1.0, 2.0], [1.0, 2.0, 0.0], [2.0, 0.0, 1.0]])
    assert np.isnan(klom(u[:2], r[:2])).all() and np.isfinite(klom(u, r)).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        theta, low, high = klom_median_interval(u, r)
    assert theta == float(np.median(klom(u, r)))
    assert (low, high) == (theta, theta)


def test_klom_median_interval_of_identical_sets_is_zero_at_both_ends():
    """Runs equal to the retrained models: KLOM 0 on every example and in every leave-one-out fit, so the
    interval is (0, 0): its lower end is clipped at 0, not above it (kills ``klom_median_interval`` 56)."""
    r = np.random.default_rng(2).standard_normal((5, 12))
    assert klom_median_interval(r.copy(), r) == (0.0, 0.0, 0.0)


def test_ulira_scores_fit_a_variance_per_side_unless_asked_to_share():
    """Hayes et al.'s default: a Gaussian per side with its own variance; ``fixed_variance=True`` (LiRA's
    offline option) one variance for both, which scores differently on sides of unequal spread (kills
    ``ulira_scores`` 1: the default flipped)."""
    from attacks.forgetting import ulira_scores
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(6)
    mask = keep_matrix(8, 30, 0)
    u, r = 1.0 + 3.0 * rng.standard_normal((8, 30)), rng.standard_normal((8, 30))
    default, own, shared = (ulira_scores(u, r, mask).scores, ulira_scores(u, r, mask, False).scores,
                            ulira_scores(u, r, mask, True).scores)
    np.testing.assert_array_equal(default, own)
    assert not np.allclose(default, shared)



@pytest.mark.parametrize("fixed_variance", [False, True])
def test_ulira_pair_jackknife_is_the_leave_one_pair_out_auc_refitted_by_hand(fixed_variance):
    """The AUC of the leave-one-pair-out scores and, for each pair j, the AUC of the whole attack rerun on the
    other pairs, with the variance option passed to every fit; then θ ± 1.95996·SE by default (level 0.95),
    clipped to [0, 1] (kills ``ulira_pair_aucs`` 1, 10, 14, 29, 33 and ``ulira_pair_jackknife`` 1, 7: the
    option dropped or its default flipped, another default level)."""
    from attacks.forgetting import ulira_pair_aucs, ulira_pair_jackknife, ulira_scores
    from attacks.roc import auc_score
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(9)
    e = 8
    mask = keep_matrix(e, 24, 2)
    u, r = 0.4 + 2.5 * rng.standard_normal((e, 24)), rng.standard_normal((e, 24))

    def auc_of(keep):
        s = ulira_scores(u[keep], r[keep], mask[keep], fixed_variance)
        return auc_score(s.scores, s.is_unlearned)

    theta = auc_of(np.arange(e))
    loo = np.array([auc_of(np.delete(np.arange(e), j)) for j in range(e)])
    got_theta, got_loo = ulira_pair_aucs(u, r, mask, fixed_variance)
    assert got_theta == theta
    np.testing.assert_array_equal(got_loo, loo)
    half = Z95 * math.sqrt((e - 1) / e * ((loo - loo.mean()) ** 2).sum())
    want = (theta, max(0.0, theta - half), min(1.0, theta + half))
    assert ulira_pair_jackknife(u, r, mask, fixed_variance=fixed_variance) == pytest.approx(want, rel=1e-12)
    other = ulira_pair_aucs(u, r, mask, not fixed_variance)
    assert other[0] != theta and not np.array_equal(other[1], loo)  # the option matters on these sides
    if not fixed_variance:  # the default
        assert ulira_pair_aucs(u, r, mask)[0] == theta
        assert ulira_pair_jackknife(u, r, mask) == pytest.approx(want, rel=1e-12)


def test_ulira_pair_jackknife_clips_at_an_auc_of_one():
    """Shadows 2 sd apart on 6 examples: AUC 0.83 with a jackknife half-width past 1 − AUC, so the upper end is
    exactly 1, the largest AUC there is (kills ``ulira_pair_jackknife`` 21: the clip at 2)."""
    from attacks.forgetting import ulira_pair_aucs, ulira_pair_jackknife
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(0)
    mask = keep_matrix(8, 6, 0)
    u, r = 2.0 + rng.standard_normal((8, 6)), rng.standard_normal((8, 6))
    theta, loo = ulira_pair_aucs(u, r, mask)
    half = Z95 * math.sqrt(7 / 8 * ((loo - loo.mean()) ** 2).sum())
    assert theta + half > 1.0 > theta - half > 0.0
    assert ulira_pair_jackknife(u, r, mask) == pytest.approx((theta, theta - half, 1.0), rel=1e-12)


# --- U-LiRA's Gaussians and scores (the survivors of session q's fresh run) ---------------------------------------


def _moments_by_hand(x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per column: the mean and the n − 1 standard deviation of the values where the mask is true, by loops."""
    mu, sd = [], []
    for j in range(x.shape[1]):
        vals = [float(x[i, j]) for i in range(x.shape[0]) if m[i, j]]
        mean = sum(vals) / len(vals)
        mu.append(mean)
        sd.append(math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1)))
    return np.array(mu), np.array(sd)


def test_fit_gaussians_are_the_masked_moments_by_hand():
    """Each side's per-example mean and SD over its masked-in models only (a masked-out value adds nothing to
    either sum: kills ``fit_gaussians`` 30, 44), with no mask every model, floored at a quarter of the median
    SD (one example with almost no spread is lifted to it: kills 62, ``SD_FLOOR_SHARE /``)."""
    from attacks.forgetting import SD_FLOOR_SHARE, fit_gaussians

    rng = np.random.default_rng(11)
    u, r = 5.0 + rng.standard_normal((9, 7)), -3.0 + 2.0 * rng.standard_normal((9, 7))
    r[:, 3] = 1.0 + 1e-9 * np.arange(9)  # almost constant: its SD is floored
    mu_, mr_ = rng.random((9, 7)) < 0.6, rng.random((9, 7)) < 0.6
    mu_[:2], mr_[:2] = True, True  # at least two models in every column
    fit = fit_gaussians(u, r, mu_, mr_)
    want_mu_u, want_sd_u = _moments_by_hand(u, mu_)
    want_mu_r, want_sd_r = _moments_by_hand(r, mr_)
    np.testing.assert_allclose(fit.mu_u, want_mu_u, rtol=1e-12)
    np.testing.assert_allclose(fit.mu_r, want_mu_r, rtol=1e-12)
    np.testing.assert_allclose(fit.sd_u, np.maximum(want_sd_u, SD_FLOOR_SHARE * np.median(want_sd_u)), rtol=1e-12)
    floor_r = SD_FLOOR_SHARE * np.median(want_sd_r)
    assert want_sd_r[3] < floor_r and fit.sd_r[3] == pytest.approx(floor_r, rel=1e-12)
    np.testing.assert_allclose(fit.sd_r, np.maximum(want_sd_r, floor_r), rtol=1e-12)
    whole = fit_gaussians(u, r)
    np.testing.assert_allclose(whole.mu_u, u.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(whole.sd_u, np.maximum(u.std(axis=0, ddof=1),
                                                      SD_FLOOR_SHARE * np.median(u.std(axis=0, ddof=1))), rtol=1e-12)


def test_fit_gaussians_with_a_fixed_variance_pool_the_variances_per_side():
    """``fixed_variance``: σ = √(mean over the examples of the per-example variances), one per side, as an
    array over the examples (kills ``fit_gaussians`` 51: a 0-d σ)."""
    from attacks.forgetting import fit_gaussians

    rng = np.random.default_rng(12)
    u, r = rng.standard_normal((6, 5)) * np.arange(1, 6), rng.standard_normal((6, 5))
    fit = fit_gaussians(u, r, fixed_variance=True)
    for sd, x in ((fit.sd_u, u), (fit.sd_r, r)):
        assert sd.shape == (5,)
        np.testing.assert_allclose(sd, np.full(5, math.sqrt(x.var(axis=0, ddof=1).mean())), rtol=1e-12)


def test_fit_gaussians_compute_in_float64():
    """float32 margins (what a model gives) are fitted in float64: the same moments, to the bit, as the float64
    copies (kills ``fit_gaussians`` 76, 78, 85, 87: a side fitted in float32)."""
    from attacks.forgetting import fit_gaussians

    rng = np.random.default_rng(13)
    u32, r32 = rng.standard_normal((6, 40)).astype(np.float32), rng.standard_normal((6, 40)).astype(np.float32)
    want = fit_gaussians(u32.astype(np.float64), r32.astype(np.float64))
    got = fit_gaussians(u32, r32)
    for name in ("mu_u", "sd_u", "mu_r", "sd_r"):
        assert getattr(got, name).dtype == np.float64
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_fit_gaussians_need_two_models_per_example_on_each_side():
    """Two masked-in models per example are enough (an SD has one degree of freedom; kills ``fit_gaussians`` 13,
    14); one is refused with the whole message, on either side (kills 15-20)."""
    from attacks.forgetting import fit_gaussians

    rng = np.random.default_rng(14)
    u, r = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    two = np.zeros((4, 3), dtype=bool)
    two[:2] = True
    fit = fit_gaussians(u, r, two, two)
    np.testing.assert_allclose(fit.mu_u, u[:2].mean(axis=0), rtol=1e-12)
    one = two.copy()
    one[1, 2] = False
    message = ("U-LiRA needs every example to be forgotten by at least 2 unlearned and absent from at least 2 "
               "retrained models; use more shadow pairs")
    with refused(message):
        fit_gaussians(u, r, one, two)
    with refused(message):
        fit_gaussians(u, r, two, one)


def test_gaussian_fit_scores_the_selected_examples():
    """``score(φ, cols)`` uses the Gaussians of the examples ``cols`` only, in that order: the log-likelihood
    ratio by scipy for those columns (kills ``GaussianFit.score`` 3: the selection ignored)."""
    from scipy.stats import norm

    from attacks.forgetting import GaussianFit

    fit = GaussianFit(mu_u=np.array([0.0, 1.0, 2.0]), sd_u=np.array([1.0, 2.0, 3.0]),
                      mu_r=np.array([-1.0, 0.0, 1.0]), sd_r=np.array([0.5, 1.0, 1.5]))
    phi = np.array([0.3, -0.7])
    cols = np.array([2, 0])
    want = norm.logpdf(phi, [2.0, 0.0], [3.0, 1.0]) - norm.logpdf(phi, [1.0, -1.0], [1.5, 0.5])
    np.testing.assert_allclose(fit.score(phi, cols), want, rtol=1e-12)


def test_ulira_scores_bookkeeping_by_hand():
    """Pair 0 holds no forget example (skipped, and the pairs after it still scored: kills ``ulira_scores`` 27,
    ``break``), pair 1 exactly one (scored: kills 26), the others several: every IN (pair, example) is scored
    once a side, the unlearned shadow first, with its pair and example recorded (kills 62, 63, 73)."""
    from attacks.forgetting import fit_gaussians, ulira_scores

    rng = np.random.default_rng(15)
    e, f = 10, 6
    mask = rng.random((e, f)) < 0.7
    mask[0] = False
    mask[1] = False
    mask[1, 4] = True
    mask[2:6] = True  # every example IN for at least four pairs besides the one left out
    u, r = 1.0 + rng.standard_normal((e, f)), rng.standard_normal((e, f))
    s = ulira_scores(u, r, mask)
    want_scores, want_pairs, want_examples, want_labels = [], [], [], []
    for k in range(e):
        cols = np.flatnonzero(mask[k])
        if cols.size == 0:
            continue
        rest = mask.copy()
        rest[k] = False
        fit = fit_gaussians(u[:, cols], r[:, cols], rest[:, cols], rest[:, cols])
        want_scores += [fit.score(u[k, cols]), fit.score(r[k, cols])]
        want_labels += [np.ones(cols.size, bool), np.zeros(cols.size, bool)]
        want_pairs.append(np.full(2 * cols.size, k))
        want_examples += [cols, cols]
    np.testing.assert_array_equal(s.scores, np.concatenate(want_scores))
    np.testing.assert_array_equal(s.is_unlearned, np.concatenate(want_labels))
    np.testing.assert_array_equal(s.pair, np.concatenate(want_pairs))
    np.testing.assert_array_equal(s.example, np.concatenate(want_examples))
    assert 0 not in s.pair and (s.pair == 1).sum() == 2 and s.example[s.pair == 1].tolist() == [4, 4]
    assert len(s.scores) == len(s.pair) == len(s.example) == 2 * int(mask.sum())
    ints = ulira_scores(u, r, mask.astype(np.int64))  # a 0/1 mask is read as truth values (kills 29)
    np.testing.assert_array_equal(ints.scores, s.scores)
    np.testing.assert_array_equal(ints.example, s.example)


def test_ulira_scores_refusals_in_full():
    """A retrained array of another shape than the unlearned one and the mask is refused, naming the three
    shapes (kills ``ulira_scores`` 16, 19: ``and``); no IN example in any pair is refused (kills 66-69)."""
    from attacks.forgetting import ulira_scores

    u, mask = np.zeros((8, 5)), np.ones((8, 5), dtype=bool)
    with refused("U-LiRA needs phi and IN masks of one shape (pairs, examples), got (8, 5), (8, 4) and (8, 5)"):
        ulira_scores(u, np.zeros((8, 4)), mask)
    with refused("U-LiRA found no forget example in any shadow's training data"):
        ulira_scores(u, u, np.zeros((8, 5), dtype=bool))


def test_ulira_scores_pass_the_variance_option_to_every_fit():
    """``fixed_variance=True`` reaches each leave-one-pair-out fit: the scores are those of fits with the pooled
    variance (kills ``ulira_scores`` 36, 41)."""
    from attacks.forgetting import fit_gaussians, ulira_scores
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(16)
    mask = keep_matrix(8, 12, 3)
    u, r = rng.standard_normal((8, 12)) * 3.0, rng.standard_normal((8, 12))
    s = ulira_scores(u, r, mask, fixed_variance=True)
    cols = np.flatnonzero(mask[0])
    rest = mask.copy()
    rest[0] = False
    fit = fit_gaussians(u[:, cols], r[:, cols], rest[:, cols], rest[:, cols], fixed_variance=True)
    np.testing.assert_array_equal(s.scores[:cols.size], fit.score(u[0, cols]))
