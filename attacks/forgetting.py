"""Per-example forgetting measures against models retrained without the forget set (ALGORITHMS.md §10):
the ε-based forgetting quality of the NeurIPS 2023 Machine Unlearning Challenge, KLOM, and U-LiRA.

All three take the per-example statistic φ of §4 (the margin ``z_y − logsumexp_{y'≠y} z_{y'}``, eval mode) of
several models on the same examples: arrays ``(models, examples)``.

**(a) ε-based forgetting quality** (Triantafillou et al. 2024, "Are we making progress in unlearning?",
google-deepmind/unlearning_evaluation ``metric.py`` and ``main.py``). Per forget example x the unlearned and the
retrained models' φ(x) are two samples; each decision rule "is this φ from the positive set?" (single
thresholds on a grid of 100 per unit over the pooled range; double thresholds: an interval as wide as the
smaller of the two ranges, slid over a ±2 buffer, 100 steps per unit) has an FPR and an FNR over the models;
its ε is ``max(log(1 − δ − FPR) − log FNR, log(1 − δ − FNR) − log FPR)`` clipped at 0 (δ = 1e-5), ∞ for a
perfect rule, skipped when exactly one of FPR, FNR is 0; ``ε(x)`` is the largest over the rules, clipped to
``[0, 50]``, and 50 outright when the smaller range is below 1 % of the larger (a collapsed distribution).
Each ε(x) earns the points of its bucket (width 0.5 from 0: 1, 1/2, 1/4, ... while the bucket ends at most at
``⌈ln(N − 1)⌉``, N the number of unlearned models; 0 beyond); the **forgetting quality** F is the mean
points over the forget set and the **final score** ``F × (RA_U / RA_R) × (TA_U / TA_R)`` with the mean retain
and test accuracies of the unlearned and the retrained models.
*Where this differs from the reference*: nothing in the result: the counts are computed from sorted samples
(``searchsorted``: the same counts as the reference's comparisons of every model with every threshold, in
O(T log N) instead of O(T N)), and since a rule's ε depends only on its two counts, ε is evaluated once per
distinct count pair (at most (N + 1)(R + 1)) from float32 fractions exactly like the reference's ``torch.mean``
of float32 indicators, on CPU or GPU inputs alike (the reference is CUDA-only); ``tests/test_forgetting.py``
checks ε against the reference's own outputs on hand-made samples and against a rule-by-rule evaluation.

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
unlearned rather than never trained on). :func:`ulira_loo` scores shadow pairs leaving one out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from duck.errors import DuckInputError

DELTA = 1e-5
EPSILON_CAP = 50.0
THRESHOLDS_PER_UNIT = 100
DOUBLE_THRESHOLD_BUFFER = 2.0
COLLAPSED_RATIO = 0.01


def _as_samples(values: np.ndarray | Sequence[float], name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size < 2 or not np.isfinite(arr).all():
        raise DuckInputError(f"{name} needs at least 2 finite values (one per model), got {arr.size}")
    return arr


def _inside_counts(sorted_vals: np.ndarray, lo: np.ndarray | None, hi: np.ndarray) -> np.ndarray:
    """How many of the sorted samples each rule calls positive: ``lo <= φ <= hi`` (``lo`` None: ``φ >= hi``)."""
    if lo is None:
        return sorted_vals.size - np.searchsorted(sorted_vals, hi, side="left")
    return np.clip(np.searchsorted(sorted_vals, hi, side="right") - np.searchsorted(sorted_vals, lo, side="left"),
                   0, None)


@dataclass(frozen=True)
class _RuleFamily:
    """The rules of one family, as the counts of positive and negative samples each calls positive."""

    pos_in: np.ndarray
    neg_in: np.ndarray
    n_pos: int
    n_neg: int


def _first_above(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``out[i, k]`` = the first index j with ``rows[i, j] > values[k]`` (``rows.shape[1]`` if none), for rows
    that are each an ``np.linspace``: estimated from the row's ends, then corrected by exact comparisons with
    the row's own floats (the same answer as ``np.searchsorted(rows[i], values, side="right")`` per row)."""
    n = rows.shape[1]
    first, last = rows[:, :1], rows[:, -1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.floor((values[None, :] - first) / (last - first) * (n - 1)) + 1
    p = np.clip(np.nan_to_num(est, nan=0.0, posinf=n, neginf=0), 0, n).astype(np.int64)
    padded = np.concatenate([np.full((rows.shape[0], 1), -np.inf), rows, np.full((rows.shape[0], 1), np.inf)],
                            axis=1)  # padded[:, j + 1] = rows[:, j]; the answer p satisfies rows[p-1] <= v < rows[p]
    for _ in range(4):
        up = np.take_along_axis(padded, p + 1, axis=1) <= values[None, :]
        down = np.take_along_axis(padded, p, axis=1) > values[None, :]
        if not (up.any() or down.any()):
            return p
        p = p + up - down
    return np.stack([np.searchsorted(row, values, side="right") for row in rows])  # rows that are not linspaces


def _double_threshold_rules(pos: np.ndarray, neg: np.ndarray) -> _RuleFamily:
    """The reference's double-threshold family: the peakier sample is the positive one; intervals as wide as
    its range, right ends on a grid over ``[min + width − 2, max + 2]``, each with 400 left ends within ±2
    (one ``np.linspace`` over all right ends: the same floats as the reference's one call per right end).

    The ~10^5 rules are not evaluated one by one: for one right end the counts change only where a left end
    passes a sample, so the distinct outcomes of its 400 rules are the states after each group of samples
    with the same position among the left ends (plus "none passed" when no sample lies below the first)."""
    pos_diff, neg_diff = float(pos.max() - pos.min()), float(neg.max() - neg.min())
    width = neg_diff if pos_diff > neg_diff else pos_diff
    if pos_diff >= neg_diff:
        pos, neg = neg, pos
    buffer = DOUBLE_THRESHOLD_BUFFER
    lo_right, hi_right = pos.min() + width - buffer, pos.max() + buffer
    right = np.linspace(lo_right, hi_right, num=int(np.ceil((hi_right - lo_right) * THRESHOLDS_PER_UNIT)))
    n_left = int(np.ceil(2 * buffer * THRESHOLDS_PER_UNIT))
    if right.size == 0:
        return _RuleFamily(np.empty(0, np.int64), np.empty(0, np.int64), pos.size, neg.size)
    left = np.linspace(right - width - buffer, right - width + buffer, num=n_left, axis=1)  # (rights, lefts)
    samples = np.concatenate([pos, neg])
    is_pos = np.arange(samples.size) < pos.size
    position = _first_above(left, samples)  # sample k is below the left end j of row i iff position[i, k] <= j
    order = np.argsort(position, axis=1, kind="stable")
    sorted_pos = np.take_along_axis(position, order, axis=1)
    below_pos = np.cumsum(is_pos[order], axis=1)
    below_neg = np.cumsum(~is_pos[order], axis=1)
    group_end = np.ones(sorted_pos.shape, dtype=bool)
    group_end[:, :-1] = sorted_pos[:, :-1] != sorted_pos[:, 1:]
    state = group_end & (sorted_pos < n_left)  # the states the left ends 0 .. n_left-1 reach
    upto_pos = np.searchsorted(np.sort(pos), right, side="right")  # count(φ <= right end)
    upto_neg = np.searchsorted(np.sort(neg), right, side="right")
    rows = np.broadcast_to(np.arange(right.size)[:, None], state.shape)[state]
    start = np.flatnonzero(sorted_pos[:, 0] > 0)  # rows whose first left end has no sample below it
    pos_in = np.concatenate([upto_pos[rows] - below_pos[state], upto_pos[start]])
    neg_in = np.concatenate([upto_neg[rows] - below_neg[state], upto_neg[start]])
    return _RuleFamily(np.clip(pos_in, 0, None), np.clip(neg_in, 0, None), pos.size, neg.size)


def _single_threshold_rules(pos: np.ndarray, neg: np.ndarray) -> _RuleFamily:
    """The reference's single-threshold family: "positive if φ >= t", t on a grid over the pooled range."""
    both = np.concatenate([pos, neg])
    lo, hi = float(both.min()), float(both.max())
    thresholds = np.linspace(lo, hi, int(math.ceil((hi - lo) * THRESHOLDS_PER_UNIT)))
    return _RuleFamily(_inside_counts(np.sort(pos), None, thresholds), _inside_counts(np.sort(neg), None, thresholds),
                       pos.size, neg.size)


def _family_epsilons(family: _RuleFamily, delta: float) -> np.ndarray:
    """ε of every distinct rule outcome of a family (NaN where the reference skips the rule). A rule's ε depends
    only on its two counts, so each distinct (positive, negative) count pair is evaluated once: the same float32
    rates and the same maximum as evaluating the reference's ~10^5 rules one by one."""
    n_pos, n_neg = family.n_pos, family.n_neg
    seen = np.bincount(family.pos_in * (n_neg + 1) + family.neg_in, minlength=(n_pos + 1) * (n_neg + 1)) > 0
    pos_in, neg_in = np.divmod(np.flatnonzero(seen), n_neg + 1)
    fp_pos, fp_neg = np.float32(n_pos), np.float32(n_neg)
    pos_in, neg_in = pos_in.astype(np.float32), neg_in.astype(np.float32)
    tpr, fnr, fpr, tnr = pos_in / fp_pos, (fp_pos - pos_in) / fp_pos, neg_in / fp_neg, (fp_neg - neg_in) / fp_neg
    eps = np.zeros(tpr.shape, dtype=np.float32)
    perfect = (fpr + fnr == 0) & (tpr + tnr == 2)
    eps[perfect] = np.inf
    one_zero = (eps == 0) & (fpr * fnr == 0)
    eps[one_zero] = np.nan
    rest = eps == 0
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: rules the reference drops too
        candidates = np.stack([np.log(np.float32(1 - delta) - fpr[rest]) - np.log(fnr[rest]),
                               np.log(np.float32(1 - delta) - fnr[rest]) - np.log(fpr[rest])])
        eps[rest] = np.clip(np.nanmax(candidates, axis=0), 0, None) if rest.any() else eps[rest]
    return eps


def example_epsilon(pos: np.ndarray | Sequence[float], neg: np.ndarray | Sequence[float], delta: float = DELTA) -> float:
    """ε of one example from the positive and the negative set's φ (the reference's ``_get_epsilons`` for one
    column): see the module docstring."""
    pos, neg = _as_samples(pos, "pos"), _as_samples(neg, "neg")
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    largest, smallest = max(pos_diff, neg_diff), min(pos_diff, neg_diff)
    if largest > 0 and smallest / largest < COLLAPSED_RATIO:
        return EPSILON_CAP
    eps = np.concatenate([_family_epsilons(_double_threshold_rules(pos, neg), delta),
                          _family_epsilons(_single_threshold_rules(pos, neg), delta)])
    kept = eps[~np.isnan(eps)]
    if kept.size == 0:
        raise DuckInputError("no decision rule gave an ε for this example (the samples admit no threshold); "
                             "check the φ values")
    return float(np.clip(np.max(kept), 0.0, EPSILON_CAP))


def epsilons(unlearned: np.ndarray, retrained: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """ε(x) for every example: ``unlearned`` / ``retrained`` are φ ``(models, examples)``; per example the set
    with the larger median is the positive one (the retrained set only when its median is strictly larger, as
    in the reference)."""
    u, r = _check_pair(unlearned, retrained)
    retrain_positive = np.median(r, axis=0) > np.median(u, axis=0)
    # per example (the two sets may hold different numbers of models: the reference's np.where needs equal ones)
    return np.array([example_epsilon(r[:, i], u[:, i], delta) if retrain_positive[i]
                     else example_epsilon(u[:, i], r[:, i], delta) for i in range(u.shape[1])])


def epsilon_points(eps: np.ndarray, n_models: int) -> np.ndarray:
    """Points per ε: buckets of width 0.5 from 0 worth 1, 1/2, 1/4, ... while a bucket ends at most at
    ``⌈ln(n_models − 1)⌉``; an ε beyond the last bucket earns 0."""
    if n_models < 2:
        raise DuckInputError(f"the ε score needs at least 2 unlearned models, got {n_models}")
    max_epsilon = math.ceil(math.log(n_models - 1))
    n_buckets = int(max_epsilon / 0.5)
    eps = np.asarray(eps, dtype=np.float64)
    bucket = np.floor(eps / 0.5)
    return np.where(bucket < n_buckets, 0.5 ** np.clip(bucket, 0, None), 0.0)


def forgetting_quality(unlearned: np.ndarray, retrained: np.ndarray, delta: float = DELTA) -> float:
    """F: the mean points of the forget examples' ε (the reference's ``compute_forget_score_from_confs``)."""
    u, _ = _check_pair(unlearned, retrained)
    return float(epsilon_points(epsilons(unlearned, retrained, delta), u.shape[0]).mean())


def jackknife_interval(stat: Callable[[np.ndarray, np.ndarray], float], n_u: int, n_r: int,
                       level: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0)) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of ``stat(u_rows, r_rows)`` (a statistic of the unlearned and the retrained
    models) with a delete-one jackknife over each model set: ``SE² = (N−1)/N Σ_i (θ₋ᵢ − θ̄)²`` over the
    unlearned models plus the same over the retrained ones, and the normal interval ``θ̂ ± z·SE`` clipped to
    ``bounds``. (Resampling models with replacement duplicates them, which the ε estimator reads as collapsed
    ranges: F is then biased low, and a digits run's estimate 0.086 fell outside its own percentile interval
    [0.056, 0.084]. Leaving models out never duplicates one.)"""
    from scipy.stats import norm

    all_u, all_r = np.arange(n_u), np.arange(n_r)
    theta = stat(all_u, all_r)
    var = 0.0
    for n, leave in ((n_u, lambda i: (np.delete(all_u, i), all_r)), (n_r, lambda i: (all_u, np.delete(all_r, i)))):
        loo = np.array([stat(*leave(i)) for i in range(n)])
        var += (n - 1) / n * float(((loo - loo.mean()) ** 2).sum())
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt(var)
    return theta, max(bounds[0], theta - half), min(bounds[1], theta + half)


def final_score(quality: float, retain_acc_u: Sequence[float], retain_acc_r: Sequence[float],
                test_acc_u: Sequence[float], test_acc_r: Sequence[float]) -> float:
    """The challenge's final score ``F × (RA_U / RA_R) × (TA_U / TA_R)`` (``main.py``), accuracies averaged
    over the unlearned and the retrained models."""
    ra_r, ta_r = float(np.mean(retain_acc_r)), float(np.mean(test_acc_r))
    if ra_r <= 0 or ta_r <= 0:
        raise DuckInputError("the retrained models' mean retain and test accuracies must be > 0 for the final score")
    return float(quality * (np.mean(retain_acc_u) / ra_r) * (np.mean(test_acc_u) / ta_r))


def _check_pair(unlearned: np.ndarray, retrained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    if u.ndim != 2 or r.ndim != 2 or u.shape[1] != r.shape[1]:
        raise DuckInputError(f"φ arrays must be (models, examples) over the same examples, got {u.shape} and "
                             f"{r.shape}")
    if u.shape[0] < 2 or r.shape[0] < 2:
        raise DuckInputError(f"need at least 2 unlearned and 2 retrained models, got {u.shape[0]} and {r.shape[0]}")
    if not (np.isfinite(u).all() and np.isfinite(r).all()):
        raise DuckInputError("φ arrays hold NaN or inf values")
    return u, r


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

    p = np.clip(np.asarray(p, dtype=np.float64), -clip, clip)
    q = np.clip(np.asarray(q, dtype=np.float64), -clip, clip)
    start = np.minimum(p.min(axis=0), q.min(axis=0))
    end = np.maximum(p.max(axis=0), q.max(axis=0))
    end = np.where(start >= end, start + 1, end)
    edges = np.linspace(start, end, bins + 1, axis=1)  # (examples, bins + 1)
    cols = np.arange(p.shape[1])

    def probs(x: np.ndarray) -> np.ndarray:
        idx = (x.T[:, :, None] >= edges[:, None, :]).sum(axis=2)  # np.digitize(x, edges) per column
        counts = np.bincount((cols[:, None] * (bins + 2) + idx).ravel(), minlength=len(cols) * (bins + 2))
        counts = counts.reshape(len(cols), bins + 2)[:, 1:bins + 1].astype(np.float64)
        total = counts.sum(axis=1, keepdims=True)
        return np.divide(counts, total, out=np.zeros_like(counts), where=total > 0)

    p_prob, q_prob = probs(p), probs(q)
    q_safe = np.where(p_prob > 0, np.maximum(q_prob, eps), q_prob)
    with np.errstate(invalid="ignore", divide="ignore"):
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
    unlearned value sits there (N identical runs of a deterministic method above all retrained ones) the
    unlearned histogram is empty and the KL divergence is NaN, in the reference as here."""
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
    two sets are independent, so any pairing serves) and the normal interval ``θ̂ ± z·SE`` clipped at 0, as
    :func:`jackknife_interval` does for F. ``None`` where KLOM is undefined on every example."""
    from scipy.stats import norm

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
    loo = np.array([median(np.delete(np.arange(k), i)) for i in range(k)]) if k > 2 else np.array([theta])
    loo = loo[~np.isnan(loo)]
    var = (len(loo) - 1) / len(loo) * float(((loo - loo.mean()) ** 2).sum()) if len(loo) > 1 else 0.0
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt(var)
    return theta, max(0.0, theta - half), theta + half


# ----------------------------------------------------------------------------------------------- U-LiRA
MIN_STD = 1e-6
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
    ``fixed_variance``: one pooled σ per side for all examples."""
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
        return mu, np.maximum(sd, MIN_STD)

    mu_u, sd_u = moments(np.asarray(unlearned, dtype=np.float64), mask_u)
    mu_r, sd_r = moments(np.asarray(retrained, dtype=np.float64), mask_r)
    return GaussianFit(mu_u, sd_u, mu_r, sd_r)


def ulira_loo(phi_u: np.ndarray, phi_r: np.ndarray, in_mask: np.ndarray, fixed_variance: bool = False
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Method-level U-LiRA on shadow pairs, leaving one pair out (Hayes et al. 2024): ``phi_u`` / ``phi_r``
    ``(E, F)`` are the φ of the unlearned shadows ``U_k`` and the retrained shadows ``R_k`` on the forget
    examples, ``in_mask`` ``(E, F)`` whether example x was in shadow k's training data (so forgotten by ``U_k``
    and never seen by ``R_k``). For each k the Gaussians are fitted on the other pairs where x was IN, and
    ``U_k`` (positives) and ``R_k`` (negatives) are scored on the examples IN for k. Returns ``(scores,
    is_unlearned, pair)`` (the pair k of each score, for intervals that resample pairs): an attacker's AUC of
    0.5 means it cannot tell the method from retraining."""
    phi_u, phi_r = np.asarray(phi_u, dtype=np.float64), np.asarray(phi_r, dtype=np.float64)
    mask = np.asarray(in_mask, dtype=bool)
    if phi_u.shape != phi_r.shape or phi_u.shape != mask.shape:
        raise DuckInputError(f"U-LiRA needs phi and IN masks of one shape (pairs, examples), got {phi_u.shape}, "
                             f"{phi_r.shape} and {mask.shape}")
    scores, labels, pairs = [], [], []
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
    if not scores:
        raise DuckInputError("U-LiRA found no forget example in any shadow's training data")
    return np.concatenate(scores), np.concatenate(labels), np.concatenate(pairs)


def ulira_pair_jackknife(phi_u: np.ndarray, phi_r: np.ndarray, in_mask: np.ndarray, level: float = 0.95,
                         fixed_variance: bool = False) -> tuple[float, float, float]:
    """``(AUC, low, high)`` of :func:`ulira_loo` with a delete-one-*pair* jackknife that refits: for each pair j
    the whole leave-one-pair-out attack is rerun on the other pairs, ``SE² = (E−1)/E Σ_j (AUC₋ⱼ − mean)²``,
    normal interval clipped to [0, 1]. Every score depends on every other pair through the fitted Gaussians, so
    resampling pairs while keeping their scores (the pair bootstrap this replaced) misses that variability: on
    simulated null pairs (16 pairs, 137 examples) its 95 % interval excluded 0.5 in 21 of 100 runs."""
    from scipy.stats import norm

    from attacks.roc import auc_score

    scores, labels, _ = ulira_loo(phi_u, phi_r, in_mask, fixed_variance)
    auc = auc_score(scores, labels)
    e = np.asarray(in_mask).shape[0]
    loo = []
    for j in range(e):
        keep = np.delete(np.arange(e), j)
        s, lab, _ = ulira_loo(np.asarray(phi_u)[keep], np.asarray(phi_r)[keep], np.asarray(in_mask)[keep],
                              fixed_variance)
        loo.append(auc_score(s, lab))
    loo_arr = np.array(loo)
    half = float(norm.ppf(0.5 + level / 2)) * math.sqrt((e - 1) / e * float(((loo_arr - loo_arr.mean()) ** 2).sum()))
    return float(auc), max(0.0, auc - half), min(1.0, auc + half)
