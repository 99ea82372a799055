"""ROC metrics of a membership-inference attack (ALGORITHMS.md §4 "Metrics"; Carlini et al. 2022 §III-B).

Scores are "larger means member". Everything here is plain numpy: ROC curve, AUC (the Mann–Whitney
statistic, ties counted 1/2), TPR at a fixed FPR (the largest TPR whose FPR is <= the level), and the
confidence interval every reported AUC carries — stratified bootstrap (percentile) or Hanley & McNeil
(1982) — because forget sets can be small.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import norm, rankdata

from duck.errors import DuckInputError
from duck.utils import check_number

CI_METHODS = ("bootstrap", "hanley_mcneil")
# FPR grid of the stored / plotted ROC (log-log axes from 1e-5 to 1, ALGORITHMS.md §4)
ROC_GRID = np.unique(np.concatenate([np.logspace(-5, 0, 121), np.linspace(0.0, 1.0, 101)]))


def _check_scores(scores: np.ndarray, is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    labels = np.asarray(is_member).reshape(-1)
    if labels.dtype != bool and not np.isin(labels, (0, 1)).all():  # 2 or -1 were read as "member"
        raise DuckInputError(f"membership labels must be booleans or 0/1, got values "
                             f"{np.unique(labels)[:5].tolist()}; pass is_member as True/False")
    is_member = labels.astype(bool)
    if scores.shape != is_member.shape:
        raise DuckInputError(f"{scores.size} scores but {is_member.size} membership labels; pass one label "
                             f"per score")
    if not np.all(np.isfinite(scores)):
        raise DuckInputError("attack scores contain NaN or inf; check the shadow / target statistics")
    n_pos = int(is_member.sum())
    if n_pos == 0 or n_pos == is_member.size:
        raise DuckInputError(f"ROC needs members and non-members (got {n_pos} members of {is_member.size} "
                             f"samples)")
    return scores, is_member


def roc_curve(scores: np.ndarray, is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC points ``(fpr, tpr, thresholds)``, one per distinct score plus the origin.

    Point ``i`` classifies ``score >= thresholds[i]`` as member; ``fpr[0] = tpr[0] = 0`` (threshold +inf).
    """
    scores, is_member = _check_scores(scores, is_member)
    order = np.argsort(-scores, kind="stable")
    s, m = scores[order], is_member[order]
    last_of_run = np.r_[s[1:] != s[:-1], True]  # (Q,) True at the last sample of each distinct score
    tp = np.cumsum(m)[last_of_run]
    fp = np.cumsum(~m)[last_of_run]
    tpr = np.r_[0.0, tp / m.sum()]
    fpr = np.r_[0.0, fp / (~m).sum()]
    return fpr, tpr, np.r_[np.inf, s[last_of_run]]


def auc_score(scores: np.ndarray, is_member: np.ndarray) -> float:
    """``P(score_member > score_nonmember) + ½·P(tie)`` (Mann–Whitney U / (n_pos·n_neg)), equal to the
    trapezoidal area under :func:`roc_curve`."""
    scores, is_member = _check_scores(scores, is_member)
    ranks = rankdata(scores)  # average ranks for ties
    n_pos, n_neg = int(is_member.sum()), int((~is_member).sum())
    return float((ranks[is_member].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, level: float) -> float:
    """Largest TPR among ROC points with ``FPR <= level`` (ALGORITHMS.md §4); ``level`` in [0, 1]."""
    level = check_number(level, "FPR level", 0.0, False, 1.0)
    ok = np.asarray(fpr) <= level + 1e-12
    return float(np.max(np.asarray(tpr)[ok]))  # (0, 0) is always a point


def hanley_mcneil_se(auc: float, n_pos: int, n_neg: int) -> float:
    """Standard error of an AUC (Hanley & McNeil 1982, Eq. 2) with ``Q1 = A/(2−A)``, ``Q2 = 2A²/(1+A)``."""
    a = float(auc)
    q1, q2 = a / (2.0 - a), 2.0 * a * a / (1.0 + a)
    var = (a * (1 - a) + (n_pos - 1) * (q1 - a * a) + (n_neg - 1) * (q2 - a * a)) / (n_pos * n_neg)
    return float(np.sqrt(max(var, 0.0)))


def bootstrap_auc(scores: np.ndarray, is_member: np.ndarray, *, n_boot: int = 2000, seed: int = 0,
                  chunk: int = 250) -> np.ndarray:
    """AUCs of ``n_boot`` stratified bootstrap resamples (members and non-members resampled separately,
    so every resample keeps the original counts). Vectorised: ranks of ``chunk`` resamples at a time."""
    scores, is_member = _check_scores(scores, is_member)
    pos, neg = scores[is_member], scores[~is_member]
    n_pos, n_neg = pos.size, neg.size
    rng = np.random.default_rng(seed)
    out = []
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        sample = np.concatenate([pos[rng.integers(0, n_pos, (b, n_pos))],
                                 neg[rng.integers(0, n_neg, (b, n_neg))]], axis=1)  # (b, n_pos + n_neg)
        ranks = rankdata(sample, axis=1)
        out.append((ranks[:, :n_pos].sum(1) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
    return np.concatenate(out)


def auc_with_ci(scores: np.ndarray, is_member: np.ndarray, *, method: str = "bootstrap", level: float = 0.95,
                n_boot: int = 2000, seed: int = 0) -> dict[str, Any]:
    """AUC, its standard error and a ``level`` confidence interval.

    ``bootstrap``: percentile interval and standard deviation of stratified resamples;
    ``hanley_mcneil``: ``AUC ± z·SE`` (clipped to [0, 1]) with the closed-form SE.
    """
    if method not in CI_METHODS:
        raise DuckInputError(f"attack.ci.method={method!r}; choose one of {list(CI_METHODS)}")
    if not 0.5 <= level < 1.0:
        raise DuckInputError(f"attack.ci.level={level} must be in [0.5, 1), e.g. 0.95")
    scores, is_member = _check_scores(scores, is_member)
    auc = auc_score(scores, is_member)
    n_pos, n_neg = int(is_member.sum()), int((~is_member).sum())
    hm_se = hanley_mcneil_se(auc, n_pos, n_neg)
    if method == "bootstrap":
        if isinstance(n_boot, bool) or not hasattr(n_boot, "__index__") or not 100 <= n_boot <= 100_000:
            raise DuckInputError(f"attack.ci.n_boot={n_boot!r} must be an integer in [100, 100000] (resamples of "
                                 "the percentile interval; 2000 is usual)")
        n_boot = int(n_boot)
        boots = bootstrap_auc(scores, is_member, n_boot=n_boot, seed=seed)
        lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
        se = float(boots.std(ddof=1))
    else:
        z = float(norm.ppf((1 + level) / 2))
        lo, hi, se = max(0.0, auc - z * hm_se), min(1.0, auc + z * hm_se), hm_se
    return {"auc": auc, "auc_se": se, "auc_ci": [float(lo), float(hi)], "ci_method": method,
            "ci_level": level,
            "auc_se_hanley_mcneil": hm_se}


def roc_summary(scores: np.ndarray, is_member: np.ndarray, *,
                fpr_levels: Sequence[float] = (0.001, 0.01, 0.05),
                ci_method: str = "bootstrap", ci_level: float = 0.95, n_boot: int = 2000,
                seed: int = 0) -> dict[str, Any]:
    """Everything reported about one attack: AUC with CI, TPR at each FPR level, the FPR resolution
    (``1/n_nonmembers``: levels below it can only be met at FPR 0) and the ROC on :data:`ROC_GRID`."""
    scores, is_member = _check_scores(scores, is_member)
    fpr, tpr, _ = roc_curve(scores, is_member)
    out = auc_with_ci(scores, is_member, method=ci_method, level=ci_level, n_boot=n_boot, seed=seed)
    out["tpr_at_fpr"] = {f"{lvl:g}": tpr_at_fpr(fpr, tpr, lvl) for lvl in fpr_levels}
    out["n_members"], out["n_nonmembers"] = int(is_member.sum()), int((~is_member).sum())
    out["fpr_resolution"] = 1.0 / out["n_nonmembers"]
    out["roc"] = {"fpr": ROC_GRID.tolist(), "tpr": [tpr_at_fpr(fpr, tpr, g) for g in ROC_GRID]}
    return out
