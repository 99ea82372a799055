"""Single-classifier membership inference with an RBF SVM (seeds/003 Supp. V-F; ALGORITHMS.md §4).

Features: the target model's softmax vector. Members (label 1): the forget samples; non-members
(label 0): the test samples (homogeneous removal) or the test samples of the forgotten classes (class
removal, so that the SVM cannot key on class identity). Each run resamples the two sets to the
configured ratio (homogeneous: 1 member per non-member; class removal: at most 3 members per non-member,
the paper's 1:3), splits 80/20 (stratified), tunes ``C ∈ {1, 5, 10, 100}``, ``γ ∈ {1, 0.1, 0.01}`` by
3-fold cross-validated grid search on the 80 %, and scores F1 on the 20 %. Reported: mean (std) F1 and
accuracy over 5 runs, and the chance level — the F1 of a guess that calls "member" with the member
prior ``π`` (F1 = π: 0.5 balanced, 0.75 at 1:3) and the majority-class accuracy ``max(π, 1 − π)`` — plus
``all_member_f1 = 2π / (1 + π)`` (0.667 balanced, 0.857 at 1:3), the F1 of calling every sample a member: the
best F1 any guess that ignores the sample reaches, so an SVM F1 at or below it shows no membership signal (a
tuned SVM that predicts "member" for everything scores exactly that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from duck.errors import DuckInputError


def resample_counts(n_members: int, n_nonmembers: int, member_ratio: float,
                    max_per_side: int) -> tuple[int, int]:
    """Members and non-members one run uses: ``member_ratio`` members per non-member wherever the data allow
    (the excess side is subsampled), each side capped at ``max_per_side``.

    Class removal (ratio 3): CIFAR-10's 5,000 forget / 1,000 forgotten-class test samples give 3,000 / 1,000
    as in the paper; with fewer forget samples than that the non-members are cut instead, so the members
    stay the 3:1 majority. Homogeneous removal (ratio 1): balanced."""
    if isinstance(member_ratio, bool) or not isinstance(member_ratio, (int, float, np.integer, np.floating)) \
            or not 0 < member_ratio < float("inf"):  # NaN fails too
        raise DuckInputError(f"svm_mia.member_ratio={member_ratio!r} must be a finite number > 0 "
                             "(1 = balanced, 3 = the paper's 1:3)")
    n_mem = min(n_members, int(max_per_side), int(round(member_ratio * n_nonmembers)))
    n_non = min(n_nonmembers, int(max_per_side), int(np.ceil(n_mem / member_ratio)))
    return n_mem, n_non


def checked_counts(n_members: int, n_nonmembers: int, member_ratio: float, *, max_per_side: int = 3000,
                   cv: int = 3, test_size: float = 0.2) -> tuple[int, int]:
    """The members and non-members one SVM MIA run uses (:func:`resample_counts`), refused with a clear error
    when they are too few for ``cv``-fold grid search and a ``test_size`` split. Pure counting, so an audit
    checks it before any training (``attacks.audit.check_audit_data``); :func:`svm_mia` checks it again."""
    if isinstance(cv, bool) or not hasattr(cv, "__index__") or cv < 2:
        raise DuckInputError(f"svm_mia.cv={cv!r} must be an integer >= 2 (cross-validation folds)")
    if not 0.0 < test_size < 1.0:
        raise DuckInputError(f"svm_mia.test_size={test_size} must be in (0, 1) (the paper: 0.2)")
    n_mem, n_non = resample_counts(n_members, n_nonmembers, member_ratio, max_per_side)
    if min(n_mem, n_non) < 2 * cv:
        raise DuckInputError(f"SVM MIA needs at least {2 * cv} members and non-members (got {n_mem} and "
                             f"{n_non}); "
                             "use a larger forget/test set or disable it (attack.svm_mia.enabled=false)")
    small = min(n_mem, n_non)  # the stratified split must leave the smaller side cv training and 1 test sample
    if math.floor(small * (1 - test_size)) < cv or math.floor(small * test_size) < 1:
        lo, hi = 1 / small, 1 - cv / small
        raise DuckInputError(f"svm_mia.test_size={test_size} splits the smaller side ({small} samples) into too few "
                             f"training (>= cv = {cv}) or test (>= 1) samples; use a test_size between "
                             f"{math.ceil(lo * 100) / 100:g} and {math.floor(hi * 100) / 100:g}")
    return n_mem, n_non


def f1_binary(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """F1 of the positive class (members); 0 when nothing is predicted or present."""
    tp = float(np.sum((y_pred == 1) & (y_true == 1)))
    fp = float(np.sum((y_pred == 1) & (y_true == 0)))
    fn = float(np.sum((y_pred == 0) & (y_true == 1)))
    denom = 2 * tp + fp + fn
    return 2 * tp / denom if denom else 0.0


# grid-search criteria as plain numpy callables (sklearn's scorer machinery dominates the cost here)
SCORERS = {
    "f1": lambda est, x, y: f1_binary(y, est.predict(x)),
    "accuracy": lambda est, x, y: float(np.mean(est.predict(x) == y)),
}


def svm_mia(member_probs: np.ndarray, nonmember_probs: np.ndarray, *, member_ratio: float = 1.0,
            runs: int = 5, C: Sequence[float] = (1, 5, 10, 100), gamma: Sequence[float] = (1, 0.1, 0.01),
            cv: int = 3, test_size: float = 0.2, max_per_side: int = 3000, scoring: str = "f1",
            seed: int = 0) -> dict[str, Any]:
    """Mean F1 of an RBF-SVC membership classifier over ``runs`` resamples/splits (Supp. V-F).

    ``member_probs (n_m, C)``, ``nonmember_probs (n_n, C)``: softmax outputs of the audited model."""
    from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
    from sklearn.svm import SVC

    mem, non = np.asarray(member_probs, dtype=np.float64), np.asarray(nonmember_probs, dtype=np.float64)
    if mem.ndim != 2 or non.ndim != 2 or mem.shape[1] != non.shape[1]:
        raise DuckInputError(f"SVM MIA features must be (n, classes) softmax matrices, got {mem.shape} and "
                             f"{non.shape}")
    if not (np.isfinite(mem).all() and np.isfinite(non).all()):
        raise DuckInputError("SVM MIA features contain NaN or inf (the audited model's outputs are not finite); "
                             "check the model")
    if isinstance(runs, bool) or not hasattr(runs, "__index__") or runs < 1:
        raise DuckInputError(f"svm_mia.runs={runs!r} must be an integer >= 1")
    n_mem, n_non = checked_counts(len(mem), len(non), member_ratio, max_per_side=max_per_side, cv=cv,
                                  test_size=test_size)
    if scoring not in SCORERS:
        raise DuckInputError(f"svm_mia.scoring={scoring!r}; choose one of {sorted(SCORERS)}")
    grid = {"C": [float(c) for c in C], "gamma": [float(g) for g in gamma]}
    f1s, accs, best = [], [], []
    for r in range(int(runs)):
        rng = np.random.default_rng([int(seed), r])
        x = np.concatenate([mem[rng.choice(len(mem), n_mem, replace=False)],
                            non[rng.choice(len(non), n_non, replace=False)]])  # (n_mem + n_non, C)
        y = np.r_[np.ones(n_mem, dtype=int), np.zeros(n_non, dtype=int)]
        x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, stratify=y,
                                                  random_state=int(rng.integers(2**31)))
        search = GridSearchCV(SVC(kernel="rbf"), grid, scoring=SCORERS[scoring],
                              cv=StratifiedKFold(cv, shuffle=True, random_state=int(rng.integers(2**31))))
        search.fit(x_tr, y_tr)
        pred = search.predict(x_te)
        f1s.append(f1_binary(y_te, pred))
        accs.append(float(np.mean(pred == y_te)))
        best.append({k: float(v) for k, v in search.best_params_.items()})
    prior = n_mem / (n_mem + n_non)
    return {"f1": float(np.mean(f1s)), "f1_std": float(np.std(f1s, ddof=1)) if runs > 1 else 0.0,
            "accuracy": float(np.mean(accs)), "chance": prior, "chance_accuracy": max(prior, 1 - prior),
            "all_member_f1": 2 * prior / (1 + prior),  # the best F1 of a guess that ignores the sample
            "n_members": n_mem, "n_nonmembers": n_non, "runs": int(runs), "f1_runs": [float(f) for f in f1s],
            "best_params": best}
