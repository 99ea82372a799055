"""Per-example forgetting measures against models retrained without the forget set (ALGORITHMS.md §10):
the ε-based forgetting quality of the NeurIPS 2023 Machine Unlearning Challenge, KLOM, and U-LiRA.

All three take the per-example statistic φ of §4 (the margin ``z_y − logsumexp_{y'≠y} z_{y'}``, eval mode) of
several models on the same examples: arrays ``(models, examples)``.

**(a) ε-based forgetting quality** (Triantafillou et al. 2024; google-deepmind/unlearning_evaluation
``metric.py``, ``main.py``): :mod:`attacks.epsilon` (ε per example, its points and F, re-exported here), and the
challenge's **final score** ``F × (RA_U / RA_R) × (TA_U / TA_R)`` with the mean retain and test accuracies of the
unlearned and the retrained models (:func:`final_score`).

**(b) KLOM** (Georgiev et al. 2024, RoyRin/data-unlearning-bench ``unlearning_bench/eval.py``,
``compute_binned_KL_div`` / ``kl_from_margins``): per example, φ clipped to [−100, 100], 20 equal bins over the
pooled range of both samples (``np.digitize``, so a value equal to the pooled maximum falls outside the last
bin and is not counted, as in the reference), probabilities, the reference sample's empty bins floored at 1e-5
where the other has mass, ``scipy.stats.entropy`` (natural log, both renormalised). ``KLOM(x) = KL(P_U ‖ P_R)``
as the paper defines it and ``kl_from_margins(all_unlearned_margins, all_oracle_margins)`` computes it; note
that the benchmark's ``run.py::load_klom`` calls ``kl_from_margins(oracle_margins, margins)``, i.e. stores
``KL(P_R ‖ P_U)``: compare published files with care.

**(c) U-LiRA** (Hayes et al. 2024, "Inexact unlearning needs more careful evaluations to avoid a false sense of
privacy"): per forget example, Gaussians fitted to the unlearned models' φ (μ_U, σ_U) and the retrained
models' (μ_R, σ_R); a model's score on x is ``log N(φ; μ_U, σ_U) − log N(φ; μ_R, σ_R)`` (high: looks
unlearned rather than never trained on). :func:`ulira_scores` scores shadow pairs leaving one out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attacks.epsilon import (  # noqa: F401  (re-exported: the forgetting measures' one import)
    DELTA,
    EPSILON_CAP,
    _check_pair,
    _double_threshold_rules,
    epsilon_points,
    epsilons,
    example_epsilon,
    forgetting_quality,
)
from duck.errors import DuckInputError


def final_score(quality: float, retain_acc_u: Sequence[float], retain_acc_r: Sequence[float],
                test_acc_u: Sequence[float], test_acc_r: Sequence[float]) -> float:
    """The challenge's final score ``F × (RA_U / RA_R) × (TA_U / TA_R)`` (``main.py``), accuracies averaged
    over the unlearned and the retrained models."""
    ra_r, ta_r = float(np.mean(retain_acc_r)), float(np.mean(test_acc_r))
    if ra_r <= 0 or ta_r <= 0:
        raise DuckInputError("the retrained models' mean retain and test accuracies must be > 0 for the final score")
    return float(quality * (np.mean(retain_acc_u) / ra_r) * (np.mean(test_acc_u) / ta_r))


# ------------------------------------------------------------------------------------------------- KLOM
KLOM_BINS = 20
KLOM_EPS = 1e-5
KLOM_CLIP = 100.0


def _binned_kl_columns(p: np.ndarray, q: np.ndarray, bins: int = KLOM_BINS, eps: float = KLOM_EPS,
                       clip: float = KLOM_CLIP) -> np.ndarray:
    """``KL(P ‖ Q)`` per column of two samples ``(models, examples)`` by binning, all columns at once: per column
    the reference's ``compute_binned_KL_div`` (the same edges from one ``np.linspace`` per column, ``np.digitize``'s
    bins as counts of edges at or below a value, ``scipy.stats.entropy``'s normalisation and ``rel_entr``)."""
    from scipy.special import rel_entr

    p, q = np.clip(p, -clip, clip), np.clip(q, -clip, clip)  # float64 (models, examples): binned_kl, klom
    start = np.minimum(p.min(axis=0), q.min(axis=0))
    end = np.maximum(p.max(axis=0), q.max(axis=0))
    end = np.where(start >= end, start + 1, end)
    edges = np.linspace(start, end, bins + 1, axis=1)  # (examples, bins + 1)
    cols = np.arange(p.shape[1])

    def probs(x: np.ndarray) -> np.ndarray:
        idx = (x.T[:, :, None] >= edges[:, None, :]).sum(axis=2)  # np.digitize(x, edges) per column
        counts = np.bincount((cols[:, None] * (bins + 2) + idx).ravel(), minlength=len(cols) * (bins + 2))
        counts = counts.reshape(len(cols), bins + 2)[:, 1:bins + 1]
        return counts / counts.sum(axis=1, keepdims=True)

    # a side whose every value sits at the pooled maximum (beyond the last edge) has an empty histogram: 0/0, NaN,
    # as in the reference (stats.entropy of NaN), on either side; an empty retrained histogram read as zeros was
    # floored to eps on P's support, a uniform Q there, and scored retrained models far above every unlearned
    # one as KL 0 ("identical")
    with np.errstate(invalid="ignore"):
        p_prob, q_prob = probs(p), probs(q)
        q_safe = np.where(p_prob > 0, np.maximum(q_prob, eps), q_prob)
        pk = p_prob / p_prob.sum(axis=1, keepdims=True)
        qk = q_safe / q_safe.sum(axis=1, keepdims=True)
        return rel_entr(pk, qk).sum(axis=1)


def binned_kl(p: np.ndarray, q: np.ndarray, bins: int = KLOM_BINS, eps: float = KLOM_EPS,
              clip: float = KLOM_CLIP) -> float:
    """``KL(P ‖ Q)`` of two samples by binning (the reference's ``compute_binned_KL_div``)."""
    p, q = np.asarray(p, dtype=np.float64).reshape(-1, 1), np.asarray(q, dtype=np.float64).reshape(-1, 1)
    return float(_binned_kl_columns(p, q, bins, eps, clip)[0])


def klom(unlearned: np.ndarray, retrained: np.ndarray) -> np.ndarray:
    """KLOM per example: ``KL(P_U ‖ P_R)`` of the φ of the unlearned and the retrained models ``(models,
    examples)`` (the same number of models on both sides, as the reference asserts)."""
    u, r = _check_pair(unlearned, retrained)
    if u.shape != r.shape:
        raise DuckInputError(f"KLOM compares as many unlearned as retrained models, got {u.shape[0]} and {r.shape[0]}")
    return _binned_kl_columns(u, r)


def summarize(values: np.ndarray) -> dict[str, float | int | None]:
    """Median and 95th percentile (KLOM per split) over the examples where KLOM is defined; ``undefined``
    counts the others: the reference's binning drops a value equal to the pooled maximum, so when every
    unlearned value sits there (N identical runs of a deterministic method above all retrained ones), or every
    retrained value, that side's histogram is empty and the KL divergence is NaN, in the reference as here."""
    v = np.asarray(values, dtype=np.float64)
    ok = v[~np.isnan(v)]
    if ok.size == 0:
        return {"median": None, "p95": None, "n": int(v.size), "undefined": int(v.size)}
    return {"median": float(np.median(ok)), "p95": float(np.percentile(ok, 95)), "n": int(v.size),
            "undefined": int(v.size - ok.size)}


def klom_median_interval(unlearned: np.ndarray, retrained: np.ndarray, level: float = 0.95
                         ) -> tuple[float | None, float | None, float | None]:
    """``(median KLOM, low, high)``: the median over examples of :func:`klom` with a delete-one-pair jackknife
    over the models (KLOM needs as many models a side, so model i of both sets is left out together; the
    two sets are independent, so any pairing serves) and the normal interval ``θ̂ ± z·SE`` clipped at 0
    (:func:`jackknife_normal_interval`). ``None`` where KLOM is undefined on every example; ``low`` and ``high``
    ``None`` where fewer than two leave-one-out medians exist (two models a side: a fit of one model a side has no
    KLOM), not a zero-width interval that would read as exact."""
    u, r = _check_pair(unlearned, retrained)
    k = u.shape[0]
    if r.shape[0] != k:
        raise DuckInputError(f"KLOM compares as many unlearned as retrained models, got {k} and {r.shape[0]}")

    def median(rows: np.ndarray) -> float:
        v = klom(u[rows], r[rows])
        v = v[~np.isnan(v)]
        return float(np.median(v)) if v.size else math.nan

    theta = median(np.arange(k))
    if math.isnan(theta):
        return None, None, None
    loo = np.array([median(np.delete(np.arange(k), i)) for i in range(k)]) if k > 2 else np.array([])
    loo = loo[~np.isnan(loo)]
    if loo.size < 2:  # no spread to estimate
        return theta, None, None
    return (theta, *jackknife_normal_interval(theta, loo, level, (0.0, math.inf)))


# ----------------------------------------------------------------------------------------------- U-LiRA
#: the smallest standard deviation a per-example Gaussian may take, as a share of the median over the examples of
#: that side's standard deviations: with 3-7 values per example a sample SD near 0 (chance: a chi with few
#: degrees of freedom) made likelihood ratios explode with the former absolute floor of 1e-6
SD_FLOOR_SHARE = 0.25
#: fewest shadows for U-LiRA: every example must keep two IN pairs after one pair is left out by the attack and
#: another by the jackknife of its interval (E/2 − 2 >= 2)
ULIRA_MIN_SHADOWS = 8


@dataclass
class GaussianFit:
    """Per-example Gaussians of the unlearned (``u``) and the retrained (``r``) models' φ."""

    mu_u: np.ndarray
    sd_u: np.ndarray
    mu_r: np.ndarray
    sd_r: np.ndarray

    def score(self, phi: np.ndarray, cols: np.ndarray | None = None) -> np.ndarray:
        """``log N(φ; μ_U, σ_U) − log N(φ; μ_R, σ_R)`` elementwise (φ ``(..., examples)``, or the examples
        ``cols`` of the fit)."""
        from scipy.stats import norm

        sel = slice(None) if cols is None else cols
        return (norm.logpdf(phi, self.mu_u[sel], self.sd_u[sel])
                - norm.logpdf(phi, self.mu_r[sel], self.sd_r[sel]))


def fit_gaussians(unlearned: np.ndarray, retrained: np.ndarray, mask_u: np.ndarray | None = None,
                  mask_r: np.ndarray | None = None, fixed_variance: bool = False) -> GaussianFit:
    """Per-example mean and standard deviation of the unlearned and the retrained φ ``(models, examples)``,
    over the models where ``mask`` is true (an example forgotten by shadow k only counts where it was IN k);
    ``fixed_variance``: one pooled σ per side for all examples (Hayes et al.'s and LiRA's option for few
    shadows). Each per-example σ is floored at :data:`SD_FLOOR_SHARE` of the median σ of its side."""
    def moments(x: np.ndarray, m: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        m = np.ones_like(x, dtype=bool) if m is None else m
        n = m.sum(axis=0)
        if (n < 2).any():
            raise DuckInputError("U-LiRA needs every example to be forgotten by at least 2 unlearned and absent "
                                 "from at least 2 retrained models; use more shadow pairs")
        mu = np.where(m, x, 0).sum(axis=0) / n
        var = np.where(m, (x - mu) ** 2, 0).sum(axis=0) / (n - 1)
        sd = np.sqrt(var)
        if fixed_variance:
            sd = np.full_like(sd, np.sqrt(np.mean(var)))
        floor = max(SD_FLOOR_SHARE * float(np.median(sd)), 1e-12)
        return mu, np.maximum(sd, floor)

    mu_u, sd_u = moments(np.asarray(unlearned, dtype=np.float64), mask_u)
    mu_r, sd_r = moments(np.asarray(retrained, dtype=np.float64), mask_r)
    return GaussianFit(mu_u, sd_u, mu_r, sd_r)


@dataclass
class UliraScores:
    """The leave-one-pair-out attack's scores: one per (held-out pair, forgotten example, side)."""

    scores: np.ndarray
    is_unlearned: np.ndarray
    pair: np.ndarray
    example: np.ndarray

    def per_example_accuracy(self) -> np.ndarray:
        """Hayes et al.'s per-example accuracy on held-out target models: for each forget example, the share of
        its held-out models (``U_k`` and ``R_k`` of every pair k that held it) classified right at score 0
        (unlearned above, retrained at or below)."""
        right = np.where(self.is_unlearned, self.scores > 0, self.scores <= 0)
        ids, inv = np.unique(self.example, return_inverse=True)
        return np.bincount(inv, weights=right) / np.bincount(inv)


def ulira_scores(phi_u: np.ndarray, phi_r: np.ndarray, in_mask: np.ndarray, fixed_variance: bool = False
                 ) -> UliraScores:
    """Method-level U-LiRA on shadow pairs, leaving one pair out (Hayes et al. 2024): ``phi_u`` / ``phi_r``
    ``(E, F)`` are the φ of the unlearned shadows ``U_k`` and the retrained shadows ``R_k`` on the forget
    examples, ``in_mask`` ``(E, F)`` whether example x was in shadow k's training data (so forgotten by ``U_k``
    and never seen by ``R_k``). For each k the Gaussians are fitted on the other pairs where x was IN, and
    ``U_k`` (positives) and ``R_k`` (negatives) are scored on the examples IN for k: an attacker's AUC of 0.5
    means it cannot tell the method from retraining."""
    # fit_gaussians and GaussianFit.score compute in float64 and read the mask as truth values
    phi_u, phi_r, mask = np.asarray(phi_u), np.asarray(phi_r), np.asarray(in_mask)
    if phi_u.shape != phi_r.shape or phi_u.shape != mask.shape:
        raise DuckInputError(f"U-LiRA needs phi and IN masks of one shape (pairs, examples), got {phi_u.shape}, "
                             f"{phi_r.shape} and {mask.shape}")
    scores, labels, pairs, examples = [], [], [], []
    for k in range(mask.shape[0]):
        cols = np.flatnonzero(mask[k])
        if cols.size == 0:
            continue
        rest = mask.copy()
        rest[k] = False
        fit = fit_gaussians(phi_u[:, cols], phi_r[:, cols], rest[:, cols], rest[:, cols], fixed_variance)
        scores += [fit.score(phi_u[k, cols]), fit.score(phi_r[k, cols])]
        labels += [np.ones(cols.size, dtype=bool), np.zeros(cols.size, dtype=bool)]
        pairs.append(np.full(2 * cols.size, k))
        examples += [cols, cols]
    if not scores:
        raise DuckInputError("U-LiRA found no forget example in any shadow's training data")
    return UliraScores(np.concatenate(scores), np.concatenate(labels), np.concatenate(pairs),
                       np.concatenate(examples))


def ulira_pair_aucs(phi_u: np.ndarray, phi_r: np.ndarray, in_mask: np.ndarray, fixed_variance: bool = False
                    ) -> tuple[float, np.ndarray]:
    """The leave-one-pair-out attack's AUC and, for each pair j, the AUC of the whole attack rerun without pair
    j (the delete-one-pair jackknife's replicates; every score depends on every other pair through the fitted
    Gaussians, so the attack is refitted)."""
    from attacks.roc import auc_score

    phi_u, phi_r, mask = np.asarray(phi_u), np.asarray(phi_r), np.asarray(in_mask)
    s = ulira_scores(phi_u, phi_r, mask, fixed_variance)
    e = mask.shape[0]
    loo = []
    for j in range(e):
        keep = np.delete(np.arange(e), j)
        sj = ulira_scores(phi_u[keep], phi_r[keep], mask[keep], fixed_variance)
        loo.append(auc_score(sj.scores, sj.is_unlearned))
    return float(auc_score(s.scores, s.is_unlearned)), np.array(loo)


def jackknife_normal_interval(theta: float, loo: np.ndarray, level: float, bounds: tuple[float, float]
                              ) -> tuple[float, float]:
    """``θ̂ ± z·SE`` with the delete-one jackknife ``SE² = (E−1)/E Σ_j (θ₋ⱼ − mean)²``, clipped to ``bounds``."""
    from scipy.stats import norm

    e = loo.size
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt((e - 1) / e * float(((loo - loo.mean()) ** 2).sum()))
    return max(bounds[0], theta - half), min(bounds[1], theta + half)


def ulira_pair_jackknife(phi_u: np.ndarray, phi_r: np.ndarray, in_mask: np.ndarray, level: float = 0.95,
                         fixed_variance: bool = False) -> tuple[float, float, float]:
    """``(AUC, low, high)`` of :func:`ulira_scores` with a delete-one-*pair* jackknife that refits (normal
    interval clipped to [0, 1]). Resampling pairs while keeping their scores (the pair bootstrap this replaced)
    misses the refit's variability: on simulated null pairs (16 pairs, 137 examples) its 95 % interval excluded
    0.5 in 21 of 100 runs."""
    auc, loo = ulira_pair_aucs(phi_u, phi_r, in_mask, fixed_variance)
    return (auc, *jackknife_normal_interval(auc, loo, level, (0.0, 1.0)))


def ulira_difference(method: tuple[float, np.ndarray], control: tuple[float, np.ndarray], level: float = 0.95
                     ) -> dict[str, Any]:
    """The paired difference of two U-LiRA AUCs computed on the same shadow pairs (the method's and a control's
    ``U_k`` against the same retrained ``R_k``): ``(AUC, leave-one-pair-out AUCs)`` of each from
    :func:`ulira_pair_aucs`; the jackknife leaves the same pair out of both, so their shared retrained shadows
    cancel in the difference's interval."""
    theta = method[0] - control[0]
    lo, hi = jackknife_normal_interval(theta, method[1] - control[1], level, (-1.0, 1.0))
    return {"value": float(theta), "ci": [lo, hi]}
