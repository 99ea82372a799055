"""The forgetting measures of ALGORITHMS.md §10 against the reference implementations' outputs
(tests/data/forgetting_reference.json: google-deepmind/unlearning_evaluation metric.py and RoyRin/
data-unlearning-bench eval.py run on CPU on hand-made samples), closed forms and simulations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from attacks.forgetting import (
    EPSILON_CAP,
    binned_kl,
    epsilon_points,
    epsilons,
    final_score,
    fit_gaussians,
    forgetting_quality,
    klom,
    klom_median_interval,
)
from duck.errors import DuckInputError

REFERENCE = json.loads((Path(__file__).parent / "data" / "forgetting_reference.json").read_text())["cases"]


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_epsilons_and_forget_score_equal_the_reference_implementations(name):
    case = REFERENCE[name]
    u, r = np.array(case["unlearned"]), np.array(case["retrained"])
    np.testing.assert_allclose(epsilons(u, r), case["epsilons"], rtol=1e-6, atol=1e-6)
    assert forgetting_quality(u, r) == pytest.approx(case["forget_score"], abs=1e-12)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_klom_equals_the_reference_implementation(name):
    case = REFERENCE[name]
    np.testing.assert_allclose(klom(np.array(case["unlearned"]), np.array(case["retrained"])), case["klom"],
                               rtol=1e-9, atol=1e-12)


def _epsilon_rule_by_rule(pos: np.ndarray, neg: np.ndarray, delta: float = 1e-5) -> float:
    """metric.py's ε of one example written out directly: every rule of both families built with the reference's
    own loops (one np.linspace per right end), its rates as float32 means of float32 indicators, its ε, the max."""
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    if max(pos_diff, neg_diff) > 0 and min(pos_diff, neg_diff) / max(pos_diff, neg_diff) < 0.01:
        return 50.0
    families = []  # (positive sample, negative sample, lo or None, hi): one entry per right end's 400 rules
    p, q = (neg, pos) if pos_diff >= neg_diff else (pos, neg)
    width = min(pos_diff, neg_diff)
    lo_r, hi_r = p.min() + width - 2, p.max() + 2
    for tr in np.linspace(lo_r, hi_r, num=int(np.ceil((hi_r - lo_r) * 100))):
        families.append((p, q, np.linspace(tr - width - 2, tr - width + 2, num=400), np.full(400, tr)))
    both = np.concatenate([pos, neg])
    families.append((pos, neg, None, np.linspace(both.min(), both.max(), int(math.ceil(np.ptp(both) * 100)))))
    eps = []
    for a, b, lo, hi in families:
        def inside(x: np.ndarray) -> np.ndarray:
            x = x[:, None]
            return ((x >= hi) if lo is None else ((x >= lo) & (x <= hi))).astype(np.float32)

        tpr, fpr = inside(a).mean(0, dtype=np.float32), inside(b).mean(0, dtype=np.float32)
        fnr, tnr = (1 - inside(a)).mean(0, dtype=np.float32), (1 - inside(b)).mean(0, dtype=np.float32)
        if ((fpr + fnr == 0) & (tpr + tnr == 2)).any():
            return 50.0
        keep = fpr * fnr != 0
        with np.errstate(divide="ignore", invalid="ignore"):
            e = np.fmax(np.log(np.float32(1 - delta) - fpr[keep]) - np.log(fnr[keep]),
                        np.log(np.float32(1 - delta) - fnr[keep]) - np.log(fpr[keep]))
        eps.append(np.clip(e, 0, None))
    return float(min(np.nanmax(np.concatenate(eps)), 50.0))


@pytest.mark.parametrize("seed", range(6))
def test_distinct_count_pairs_give_the_rule_by_rule_epsilon(seed):
    """ε evaluated once per distinct count pair (and the double family's states from the samples' positions)
    equals ε over every rule one by one, on continuous samples, samples on a coarse lattice (ties with each
    other and with grid points) and unequal sizes."""
    from attacks.forgetting import _double_threshold_rules, example_epsilon

    rng = np.random.default_rng(seed)
    for n_u, n_r in ((8, 8), (5, 11)):
        for kind in ("normal", "lattice", "shifted"):
            u, r = rng.normal(0, 1, n_u), rng.normal(0, 1.5, n_r)
            if kind == "lattice":
                u, r = np.round(u * 4) / 4, np.round(r * 4) / 4
            if kind == "shifted":
                u = u + 1.5
            if np.ptp(u) == 0 or np.ptp(r) == 0:
                continue
            assert example_epsilon(u, r) == pytest.approx(_epsilon_rule_by_rule(u, r), abs=1e-6), (kind, u, r)
            # the double family's outcomes exactly: the distinct (positive, negative) counts of its ~10^5 rules
            fam = _double_threshold_rules(u, r)
            p, q = (r, u) if np.ptp(u) >= np.ptp(r) else (u, r)
            width = min(np.ptp(u), np.ptp(r))
            lo_r, hi_r = p.min() + width - 2, p.max() + 2
            want = set()
            for tr in np.linspace(lo_r, hi_r, num=int(np.ceil((hi_r - lo_r) * 100))):
                tl = np.linspace(tr - width - 2, tr - width + 2, num=400)
                counts = [((x[:, None] >= tl) & (x[:, None] <= tr)).sum(0) for x in (p, q)]
                want |= set(zip(*(c.tolist() for c in counts), strict=True))
            assert set(zip(fam.pos_in.tolist(), fam.neg_in.tolist(), strict=True)) == want, kind


def test_identical_and_separated_distributions_give_the_expected_extremes():
    rng = np.random.default_rng(0)
    same = epsilons(rng.normal(0, 1, (32, 50)), rng.normal(0, 1, (32, 50)))
    far = epsilons(rng.normal(0, 1, (32, 50)) + 10, rng.normal(0, 1, (32, 50)))
    assert np.median(same) < 2.0 and (far == EPSILON_CAP).all()
    # the estimator's small-N bias: two samples of 32 from one distribution score F ~ 0.19 with both rule
    # families (ALGORITHMS.md §10's 0.35 is the single-threshold family alone: 0.34 in the same simulation), a
    # shift of one standard deviation ~ 0.06
    f_same = forgetting_quality(rng.normal(0, 1, (32, 200)), rng.normal(0, 1, (32, 200)))
    f_shift = forgetting_quality(rng.normal(1, 1, (32, 200)), rng.normal(0, 1, (32, 200)))
    assert 0.12 < f_same < 0.28 and 0.02 < f_shift < 0.11 and f_shift < f_same


def test_points_follow_the_buckets():
    # N = 32: ⌈ln 31⌉ = 4, eight buckets of 0.5 worth 1, 1/2, ..., 1/128; beyond 4: nothing
    pts = epsilon_points(np.array([0.0, 0.49, 0.5, 1.2, 3.99, 4.0, 50.0]), 32)
    np.testing.assert_allclose(pts, [1, 1, 0.5, 0.25, 1 / 128, 0, 0])
    assert epsilon_points(np.array([0.1]), 2)[0] == 0  # N = 2: ⌈ln 1⌉ = 0, no bucket at all


def test_final_score_scales_by_utility():
    assert final_score(0.5, [0.9, 0.9], [1.0, 1.0], [0.8], [0.9]) == pytest.approx(0.5 * 0.9 * 0.8 / 0.9)
    with pytest.raises(DuckInputError, match="must be > 0"):
        final_score(0.5, [1], [0], [1], [1])


def test_klom_of_all_examples_at_once_equals_the_per_example_reference_loop():
    """The vectorised KLOM against compute_binned_KL_div written out per example (np.linspace, np.digitize,
    scipy.stats.entropy), on continuous values, a lattice (values on the edges and at the pooled maximum),
    constant columns and values beyond the ±100 clip."""
    from scipy import stats

    def reference(p, q, bins=20, eps=1e-5):
        p, q = np.clip(p, -100, 100), np.clip(q, -100, 100)
        start, end = min(p.min(), q.min()), max(p.max(), q.max())
        if start >= end:
            end = start + 1
        edges = np.linspace(start, end, bins + 1)
        pc = np.bincount(np.digitize(p, edges), minlength=bins + 2)[1:bins + 1]
        qc = np.bincount(np.digitize(q, edges), minlength=bins + 2)[1:bins + 1]
        pp, qp = pc / pc.sum(), qc / qc.sum()
        return stats.entropy(pk=pp, qk=np.where(pp > 0, np.maximum(qp, eps), qp))

    rng = np.random.default_rng(3)
    u, r = rng.normal(0, 1, (8, 60)), rng.normal(0.5, 2, (8, 60))
    u[:, :20], r[:, :20] = np.round(u[:, :20] * 2) / 2, np.round(r[:, :20] * 2) / 2
    u[:, 20], r[:, 20] = 3.0, 3.0
    u[:, 21] *= 500
    got = klom(u, r)
    np.testing.assert_allclose(got, [reference(u[:, i], r[:, i]) for i in range(u.shape[1])], rtol=1e-12, atol=1e-12)


def test_klom_summary_skips_undefined_examples():
    """N identical runs above every retrained value: the reference's binning leaves the unlearned histogram
    empty (the pooled maximum falls outside the last bin) and KLOM is NaN; the summary counts it apart."""
    from attacks.forgetting import summarize

    r = np.random.default_rng(0).normal(0, 1, (8, 3))
    u = r + 0.5
    u[:, 0] = 10.0  # a deterministic method: the same value in every run, above all retrained values
    vals = klom(u, r)
    assert np.isnan(vals[0]) and np.isfinite(vals[1:]).all()
    s = summarize(vals)
    assert s["undefined"] == 1 and s["n"] == 3 and s["median"] == pytest.approx(np.median(vals[1:]))
    assert summarize(np.array([np.nan]))["median"] is None


def test_klom_summary_fields_by_hand():
    """The summary's whole record: the median and the 95th percentile (linear interpolation: of 0, 1, ..., 100 they
    are exactly 50 and 95) over the defined values, the count and the undefined count; JSON's null (a KLOM that was
    NaN, read back) counts as undefined; every field present when nothing is defined."""
    from attacks.forgetting import summarize

    assert summarize(np.arange(101.0)) == {"median": 50.0, "p95": 95.0, "n": 101, "undefined": 0}
    assert summarize([4.0, None, 2.0, float("nan")]) == {"median": 3.0, "p95": pytest.approx(3.9), "n": 4,
                                                         "undefined": 2}
    assert summarize([None, float("nan")]) == {"median": None, "p95": None, "n": 2, "undefined": 2}


def test_binned_kl_on_known_histograms():
    # P puts its 10 samples in bins 0 and 19 (values 0 and just below 1), Q all in bin 19 plus the pooled
    # maximum 1.0, which np.digitize places beyond the last bin (dropped, as in the reference)
    p = np.array([0.0] * 5 + [0.97] * 5)
    q = np.array([0.97] * 9 + [1.0])
    # P = (1/2, 1/2) on bins {0, 19}; Q = (0 -> 1e-5 floor, 1) renormalised: (1e-5, 1) / (1 + 1e-5)
    q0, q19 = 1e-5 / (1 + 1e-5), 1 / (1 + 1e-5)
    expected = 0.5 * math.log(0.5 / q0) + 0.5 * math.log(0.5 / q19)
    assert binned_kl(p, q) == pytest.approx(expected, rel=1e-12)
    assert binned_kl(q, q) == pytest.approx(0.0, abs=1e-12)


def test_gaussian_fit_recovers_known_parameters_and_scores_the_likelihood_ratio():
    rng = np.random.default_rng(1)
    u, r = rng.normal(2.0, 0.5, (4000, 3)), rng.normal(-1.0, 2.0, (4000, 3))
    fit = fit_gaussians(u, r)
    np.testing.assert_allclose(fit.mu_u, 2.0, atol=0.05)
    np.testing.assert_allclose(fit.sd_r, 2.0, atol=0.08)
    phi = np.array([[2.0, 0.0, -1.0]])
    from scipy.stats import norm

    want = norm.logpdf(phi, fit.mu_u, fit.sd_u) - norm.logpdf(phi, fit.mu_r, fit.sd_r)
    np.testing.assert_allclose(fit.score(phi), want)
    masked = fit_gaussians(u, r, mask_u=np.arange(4000)[:, None] % 2 == np.array([0, 1, 0]))
    assert masked.mu_u.shape == (3,)


def test_bad_inputs_are_refused():
    with pytest.raises(DuckInputError, match="same examples"):
        epsilons(np.zeros((4, 3)), np.zeros((4, 2)))
    with pytest.raises(DuckInputError, match="at least 2 unlearned"):
        epsilons(np.zeros((1, 3)), np.zeros((4, 3)))
    with pytest.raises(DuckInputError, match="NaN"):
        klom(np.full((4, 2), np.nan), np.zeros((4, 2)))


def test_jackknife_normal_interval_of_a_mean_equals_the_textbook_standard_error():
    """For a mean, the delete-one jackknife SE is the sample SD / sqrt(n) (KLOM's and U-LiRA's intervals)."""
    from attacks.forgetting import jackknife_normal_interval

    x = np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.55])
    loo = np.array([np.delete(x, i).mean() for i in range(len(x))])
    lo, hi = jackknife_normal_interval(float(x.mean()), loo, 0.95, (-1, 2))
    se = x.std(ddof=1) / np.sqrt(len(x))
    assert hi - x.mean() == pytest.approx(1.959964 * se, rel=1e-5) and x.mean() - lo == pytest.approx(hi - x.mean())
    assert jackknife_normal_interval(0.1, loo, 0.95, (0.0, 1.0))[0] == 0.0  # clipped to the bounds


def test_ulira_on_synthetic_gaussians_with_a_known_answer():
    """Unlearned shadows shifted by 2 sd from retrained ones: U-LiRA separates them (AUC = Φ(2/√2) ≈ 0.92 in
    the limit); the same distribution: AUC near 0.5."""
    from attacks.forgetting import ulira_pair_jackknife, ulira_scores
    from attacks.roc import auc_score
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(3)
    e, f = 16, 400
    mask = keep_matrix(e, f, 0)
    mu = rng.normal(0, 3, f)  # per-example means: the statistic is per example
    r = mu + rng.normal(0, 1, (e, f))
    u_far, u_same = mu + 2 + rng.normal(0, 1, (e, f)), mu + rng.normal(0, 1, (e, f))
    far = ulira_scores(u_far, r, mask)
    scores, labels, pairs = far.scores, far.is_unlearned, far.pair
    assert labels.sum() == (~labels).sum() == mask.sum()  # every IN pair scored once a side
    assert 0.85 < auc_score(scores, labels) < 0.97 and set(pairs.tolist()) == set(range(e))
    same = ulira_scores(u_same, r, mask)
    auc = auc_score(same.scores, same.is_unlearned)
    assert abs(auc - 0.5) < 0.05
    est, lo, hi = ulira_pair_jackknife(u_same, r, mask)
    assert est == auc and lo <= auc <= hi and lo <= 0.5 <= hi


def test_ulira_interval_covers_the_null():
    """Null shadow pairs (unlearned and retrained drawn alike): the leave-one-pair-out AUC is unbiased and the
    refitted pair jackknife's 95 % interval holds 0.5 in most runs (the pair bootstrap it replaced: 79 of 100)."""
    from attacks.forgetting import ulira_pair_jackknife
    from attacks.shadow import keep_matrix

    rng = np.random.default_rng(11)
    e, f, runs = 16, 60, 40
    covered, aucs = 0, []
    for t in range(runs):
        mask = keep_matrix(e, f, t)
        mu, sd = rng.normal(5, 2, f), rng.uniform(0.5, 2, f)
        auc, lo, hi = ulira_pair_jackknife(mu + sd * rng.normal(0, 1, (e, f)), mu + sd * rng.normal(0, 1, (e, f)), mask)
        covered += lo <= 0.5 <= hi
        aucs.append(auc)
    assert abs(np.mean(aucs) - 0.5) < 0.02 and covered >= 0.85 * runs


def test_klom_median_interval_covers_and_separates():
    """The jackknife interval of KLOM's median (one model of each set left out): it holds the estimate, covers
    the mean of independent repeats of the same experiment in most of them (a null of two identical
    distributions), and separates a shifted set from the null."""
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(40):
        u, r = rng.normal(size=(16, 200)), rng.normal(size=(16, 200))
        runs.append(klom_median_interval(u, r, 0.95))
    centre = np.mean([t for t, _, _ in runs])
    assert all(lo <= t <= hi and lo >= 0 for t, lo, hi in runs)
    covered = np.mean([lo <= centre <= hi for _, lo, hi in runs])
    assert covered >= 0.8, covered
    shifted = klom_median_interval(rng.normal(1.5, 1.0, size=(16, 200)), rng.normal(size=(16, 200)), 0.95)
    assert shifted[1] > max(hi for _, _, hi in runs)  # a real difference lies above every null interval
    with pytest.raises(DuckInputError, match="as many unlearned as retrained"):
        klom_median_interval(rng.normal(size=(4, 10)), rng.normal(size=(5, 10)))


def test_ulira_fit_floors_a_collapsed_spread_and_pools_with_fixed_variance():
    """σ per example floored at a quarter of its side's median σ (three values that agree by chance no longer
    give σ ≈ 0 and an exploding likelihood ratio); ``fixed_variance``: one pooled σ per side."""
    from attacks.forgetting import SD_FLOOR_SHARE

    u = np.array([[0.0, 1.0, 5.0, 2.0], [2.0, 1.0 + 1e-9, 7.0, 4.0], [4.0, 1.0, 6.0, 3.0]])
    r = u + 10
    fit = fit_gaussians(u, r)
    sds = np.array([2.0, 0.0, 1.0, 1.0])  # sample SDs of the columns
    assert fit.sd_u[1] == pytest.approx(SD_FLOOR_SHARE * np.median(sds))
    np.testing.assert_allclose(fit.sd_u[[0, 2, 3]], sds[[0, 2, 3]])
    pooled = fit_gaussians(u, r, fixed_variance=True)
    np.testing.assert_allclose(pooled.sd_u, np.sqrt(np.mean(sds ** 2)))


def test_ulira_per_example_accuracy_and_paired_difference_by_hand():
    from attacks.forgetting import UliraScores, ulira_difference

    s = UliraScores(scores=np.array([1.0, -1.0, 0.5, 2.0, -3.0, 1.0]),
                    is_unlearned=np.array([True, True, False, True, False, False]),
                    pair=np.zeros(6, dtype=int), example=np.array([0, 1, 0, 1, 1, 0]))
    # example 0: U right (1 > 0), R wrong (0.5 > 0), R wrong (1.0 > 0) -> 1/3; example 1: U wrong, U right, R right
    np.testing.assert_allclose(s.per_example_accuracy(), [1 / 3, 2 / 3])
    # the threshold is 0, unlearned strictly above, retrained at or below: a score of exactly 0 is a retrained call
    tie = UliraScores(scores=np.array([0.0, 0.0]), is_unlearned=np.array([True, False]), pair=np.zeros(2, dtype=int),
                      example=np.array([0, 1]))
    np.testing.assert_array_equal(tie.per_example_accuracy(), [0.0, 1.0])
    same = ulira_difference((0.7, np.array([0.6, 0.7, 0.8])), (0.7, np.array([0.6, 0.7, 0.8])))
    assert same == {"value": 0.0, "ci": [0.0, 0.0]}  # the shared pairs cancel exactly
    d = ulira_difference((0.8, np.array([0.8, 0.7, 0.9])), (0.5, np.array([0.5, 0.5, 0.5])))
    half = 1.959964 * np.sqrt(2 / 3 * (((np.array([0.3, 0.2, 0.4]) - 0.3) ** 2).sum()))
    assert d["value"] == pytest.approx(0.3) and d["ci"] == pytest.approx([0.3 - half, 0.3 + half], rel=1e-5)
    # a difference of two AUCs lies in [-1, 1]: a wide jackknife interval (half-width 2.7 here) is clipped to it
    wide = ulira_difference((0.9, np.array([0.1, 0.9, 0.1, 0.9])), (0.1, np.array([0.9, 0.1, 0.9, 0.1])))
    assert wide == {"value": pytest.approx(0.8), "ci": [-1.0, 1.0]}


def test_klom_median_interval_defaults_to_a_95_percent_interval():
    rng = np.random.default_rng(1)
    u, r = rng.normal(size=(6, 40)), rng.normal(size=(6, 40))
    assert klom_median_interval(u, r) == klom_median_interval(u, r, 0.95)


def test_final_score_is_quality_times_the_two_utility_ratios_by_hand():
    """``F × (RA_U / RA_R) × (TA_U / TA_R)`` with every accuracy away from 1 (a ratio inverted into a product
    would pass with retrained accuracies of 1), and each retrained mean refused at 0, not only below."""
    got = final_score(0.6, [0.7, 0.9], [0.8, 0.8], [0.5, 0.7], [0.75, 0.75])
    assert got == pytest.approx(0.6 * (0.8 / 0.8) * (0.6 / 0.75), rel=1e-12)
    assert final_score(0.6, [0.4], [0.8], [0.6], [0.6]) == pytest.approx(0.3, rel=1e-12)  # RA_U / RA_R = 1/2
    assert final_score(0.6, [0.6], [0.6], [0.3], [0.6]) == pytest.approx(0.3, rel=1e-12)  # TA_U / TA_R = 1/2
    message = r"^the retrained models' mean retain and test accuracies must be > 0 for the final score$"
    for ra_r, ta_r in (([0.0, 0.0], [0.5]), ([0.5], [0.0]), ([0.5], [-0.1])):
        with pytest.raises(DuckInputError, match=message):
            final_score(0.5, [0.5], ra_r, [0.5], ta_r)


def test_binned_kl_clips_at_the_clip_it_is_given():
    """Values beyond ±clip count as ±clip (KLOM clips φ to [−100, 100] by default), for the clip given."""
    p = np.array([0.0] * 5 + [200.0] * 5)
    q = np.array([0.0] * 5 + [300.0] * 4 + [0.5])
    assert binned_kl(p, q) == pytest.approx(binned_kl(np.clip(p, -100, 100), np.clip(q, -100, 100)), rel=1e-12)
    assert binned_kl(p, q, clip=150.0) == pytest.approx(binned_kl(np.clip(p, -150, 150), np.clip(q, -150, 150)),
                                                        rel=1e-12)
    # 120 and 140 fall in different bins below a clip of 150, and onto the dropped pooled maximum with 100
    p, q = np.array([0.0, 0.0, 0.0, 120.0, 120.0, 200.0]), np.array([0.0, 0.0, 0.0, 140.0, 140.0, 200.0])
    assert binned_kl(p, q, clip=150.0) > 1.0 and binned_kl(p, q) == pytest.approx(0.0, abs=1e-12)
