"""SVM membership inference (seeds/003 Supp. V-F): resampling, chance levels, separable vs identical data."""

from __future__ import annotations

import numpy as np
import pytest

from attacks.svm_mia import f1_binary, resample_counts, svm_mia
from duck.errors import DuckInputError

FAST = {"runs": 2, "C": (1, 10), "gamma": (1, 0.1)}


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("n_m,n_n,ratio,cap,expected", [
    (5000, 1000, 3, 3000, (3000, 1000)),  # the paper's CIFAR-10 class removal: 1:3
    (137, 46, 3, 3000, (137, 46)),        # digits class 3: already ~3:1
    (490, 1000, 3, 3000, (490, 164)),     # fewer forget samples: the non-members are cut, members stay 3:1
    (135, 450, 1, 3000, (135, 135)),      # homogeneous: balanced
    (5000, 10000, 1, 2000, (2000, 2000)),  # cost cap
])
def test_resample_counts(n_m: int, n_n: int, ratio: float, cap: int, expected: tuple[int, int]) -> None:
    assert resample_counts(n_m, n_n, ratio, cap) == expected


def test_f1_binary_by_hand() -> None:
    y = np.array([1, 1, 1, 0, 0])
    assert f1_binary(y, np.array([1, 1, 0, 1, 0])) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert f1_binary(y, np.zeros(5, int)) == 0.0


def test_separable_softmax_features_are_detected() -> None:
    rng = np.random.default_rng(0)
    members = softmax_rows(rng.normal(0, 1, (200, 5)) + np.array([6.0, 0, 0, 0, 0]))  # confident on class 0
    nonmembers = softmax_rows(rng.normal(0, 1, (200, 5)))
    res = svm_mia(members, nonmembers, **FAST)
    assert res["f1"] > 0.9 and res["accuracy"] > 0.9
    assert res["chance"] == pytest.approx(0.5) and res["chance_accuracy"] == pytest.approx(0.5)
    assert res["n_members"] == res["n_nonmembers"] == 200 and len(res["f1_runs"]) == 2


def test_identical_distributions_stay_near_chance() -> None:
    rng = np.random.default_rng(1)
    members, nonmembers = (softmax_rows(rng.normal(0, 2, (150, 5))) for _ in range(2))
    res = svm_mia(members, nonmembers, member_ratio=3, **FAST)  # class-removal ratio: 150 vs 50
    assert (res["n_members"], res["n_nonmembers"]) == (150, 50)
    assert res["chance"] == pytest.approx(0.75)
    assert abs(res["accuracy"] - res["chance_accuracy"]) < 0.15
    assert 0.6 < res["f1"] < 0.95  # around the chance F1 0.75 (always "member" gives 0.857)


def test_bad_inputs_raise() -> None:
    x = np.full((20, 3), 1 / 3)
    with pytest.raises(DuckInputError, match="softmax matrices"):
        svm_mia(x, np.full((20, 4), 0.25))
    with pytest.raises(DuckInputError, match="member_ratio"):
        svm_mia(x, x, member_ratio=0)
    with pytest.raises(DuckInputError, match="at least 6"):
        svm_mia(x[:4], x[:4])
    with pytest.raises(DuckInputError, match="scoring"):
        svm_mia(x, x, scoring="auc")


def reference_runs(mem: np.ndarray, non: np.ndarray, n_mem: int, n_non: int, *, runs: int, C, gamma, cv: int,
                   test_size: float, seed: int, scoring) -> list[tuple[float, float, dict]]:
    """Supp. V-F's protocol stated with scikit-learn alone: per run r a generator seeded ``[seed, r]`` draws the
    members and non-members without replacement, then the random states of a stratified ``test_size`` split and
    of a shuffled stratified ``cv``-fold grid search over C and gamma of an RBF SVC; F1 (sklearn's) and accuracy
    on the held-out part."""
    from sklearn.metrics import f1_score
    from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
    from sklearn.svm import SVC

    out = []
    for r in range(runs):
        rng = np.random.default_rng([seed, r])
        x = np.concatenate([mem[rng.choice(len(mem), n_mem, replace=False)],
                            non[rng.choice(len(non), n_non, replace=False)]])
        y = np.r_[np.ones(n_mem, dtype=int), np.zeros(n_non, dtype=int)]
        x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=test_size, stratify=y,
                                                  random_state=int(rng.integers(2**31)))
        search = GridSearchCV(SVC(kernel="rbf"), {"C": list(C), "gamma": list(gamma)}, scoring=scoring,
                              cv=StratifiedKFold(cv, shuffle=True, random_state=int(rng.integers(2**31))))
        search.fit(x_tr, y_tr)
        pred = search.predict(x_te)
        out.append((f1_score(y_te, pred, zero_division=0.0), float(np.mean(pred == y_te)), search.best_params_))
    return out


@pytest.mark.parametrize("scoring", ["f1", "accuracy"])
def test_svm_mia_follows_the_papers_protocol_run_by_run(scoring: str) -> None:
    """Every reported number against the protocol stated with scikit-learn (its F1, its scorers): per-run F1,
    their mean and sample standard deviation, accuracy, the tuned parameters, the counts, and the chance levels
    from the member prior pi = n_m / (n_m + n_n): F1 pi, accuracy max(pi, 1 - pi), all-member F1 2 pi / (1 + pi)."""
    rng = np.random.default_rng(3)
    members = softmax_rows(rng.normal(0, 1, (90, 4)) + np.array([1.5, 0, 0, 0]))
    nonmembers = softmax_rows(rng.normal(0, 1, (70, 4)))
    # test_size 0.3, not 0.25: sklearn's own default would hide a test_size that is not passed on
    settings = {"runs": 3, "C": (1, 10), "gamma": (1, 0.1), "cv": 3, "test_size": 0.3, "seed": 7}
    res = svm_mia(members, nonmembers, member_ratio=2, max_per_side=80, scoring=scoring, **settings)
    n_mem, n_non = resample_counts(90, 70, 2, 80)
    assert (res["n_members"], res["n_nonmembers"]) == (n_mem, n_non) == (80, 40)
    ref = reference_runs(members, nonmembers, n_mem, n_non, scoring=scoring, **settings)
    f1s = [f for f, _, _ in ref]
    assert res["f1_runs"] == pytest.approx(f1s, abs=1e-12) and res["runs"] == 3
    assert res["f1"] == pytest.approx(np.mean(f1s), abs=1e-12)
    assert res["f1_std"] == pytest.approx(np.std(f1s, ddof=1), abs=1e-12)
    assert res["accuracy"] == pytest.approx(np.mean([a for _, a, _ in ref]), abs=1e-12)
    assert res["best_params"] == [{k: float(v) for k, v in p.items()} for _, _, p in ref]
    prior = 80 / 120
    assert res["chance"] == pytest.approx(prior) and res["chance_accuracy"] == pytest.approx(prior)
    assert res["all_member_f1"] == pytest.approx(2 * prior / (1 + prior))
    flipped = svm_mia(members, nonmembers, member_ratio=0.5, max_per_side=80, scoring=scoring, **settings)
    assert flipped["chance"] == pytest.approx(1 / 3) and flipped["chance_accuracy"] == pytest.approx(2 / 3)
    assert svm_mia(members, nonmembers, member_ratio=2, max_per_side=80, scoring=scoring,
                   **{**settings, "runs": 1})["f1_std"] == 0.0


def test_the_scorers_and_f1_by_hand() -> None:
    """F1 counts true positives twice over 2 TP + FP + FN; no positive predicted or present gives 0 (not NaN);
    the accuracy scorer is the share of right predictions."""
    assert f1_binary(np.array([0, 0, 1]), np.array([1, 0, 0])) == 0.0  # no TP: 0 / 2
    assert f1_binary(np.array([0, 0]), np.array([0, 0])) == 0.0  # nothing predicted or present
    assert f1_binary(np.array([1, 0, 1, 1]), np.array([1, 1, 1, 0])) == pytest.approx(4 / 6)

    class Fixed:
        def predict(self, x):
            return np.array([1, 0, 1, 1])

    from attacks.svm_mia import SCORERS

    y = np.array([1, 1, 1, 0])
    assert SCORERS["accuracy"](Fixed(), None, y) == pytest.approx(0.5)
    assert SCORERS["f1"](Fixed(), None, y) == pytest.approx(4 / 6)


def test_resample_counts_rounds_and_caps() -> None:
    """Members: min(available, cap, round(ratio * non-members)); non-members: min(available, cap,
    ceil(members / ratio))."""
    assert resample_counts(100, 10, 2.5, 3000) == (25, 10)  # round(25.0)
    assert resample_counts(100, 11, 2.5, 3000) == (28, 11)  # round(27.5) = 28 (half to even), ceil(11.2) = 12 > 11
    assert resample_counts(7, 100, 2.0, 3000) == (7, 4)  # ceil(3.5)
    assert resample_counts(5000, 10000, 1, 2000) == (2000, 2000)
    assert resample_counts(50, 50, 1.0, 30.9) == (30, 30)  # the cap as an integer


def test_every_refusal_names_the_value_and_the_way_out() -> None:
    from attacks.svm_mia import checked_counts

    x = np.full((20, 3), 1 / 3)
    for call, message in [
        (lambda: resample_counts(10, 10, 0, 3000), r"svm_mia.member_ratio=0 must be a finite number > 0 "
                                                   r"\(1 = balanced, 3 = the paper's 1:3\)"),
        (lambda: resample_counts(10, 10, True, 3000), r"svm_mia.member_ratio=True must be"),
        (lambda: resample_counts(10, 10, "3", 3000), r"svm_mia.member_ratio='3' must be"),
        (lambda: resample_counts(10, 10, float("inf"), 3000), r"svm_mia.member_ratio=inf must be"),
        (lambda: resample_counts(10, 10, float("nan"), 3000), r"svm_mia.member_ratio=nan must be"),
        (lambda: checked_counts(50, 50, 1, cv=1), r"svm_mia.cv=1 must be an integer >= 2 \(cross-validation folds\)"),
        (lambda: checked_counts(50, 50, 1, cv=True), r"svm_mia.cv=True must be"),
        (lambda: checked_counts(50, 50, 1, cv=2.0), r"svm_mia.cv=2.0 must be"),
        (lambda: checked_counts(50, 50, 1, test_size=0.0), r"svm_mia.test_size=0.0 must be in \(0, 1\) \(the paper: 0.2\)"),
        (lambda: checked_counts(50, 50, 1, test_size=1.0), r"svm_mia.test_size=1.0 must be in \(0, 1\)"),
        (lambda: checked_counts(5, 50, 1, cv=3), r"SVM MIA needs at least 6 members and non-members \(got 5 and 5\); "
                                                 r"use a larger forget/test set or disable it \(attack.svm_mia.enabled=false\)"),
        # 10 a side: test_size 0.75 leaves floor(2.5) = 2 < cv = 3 for training; the allowed range [0.1, 0.7]
        (lambda: checked_counts(10, 10, 1, cv=3, test_size=0.75),
         r"svm_mia.test_size=0.75 splits the smaller side \(10 samples\) into too few training \(>= cv = 3\) or "
         r"test \(>= 1\) samples; use a test_size between 0.1 and 0.7"),
        (lambda: checked_counts(10, 10, 1, cv=3, test_size=0.05), r"svm_mia.test_size=0.05 splits the smaller side"),
        (lambda: svm_mia(x, np.full((20, 4), 0.25)), r"SVM MIA features must be \(n, classes\) softmax matrices, got "
                                                     r"\(20, 3\) and \(20, 4\)"),
        (lambda: svm_mia(x[0], x[0]), r"SVM MIA features must be \(n, classes\) softmax matrices, got \(3,\) and \(3,\)"),
        (lambda: svm_mia(x, np.full((20, 3), np.nan)), r"SVM MIA features contain NaN or inf"),
        (lambda: svm_mia(np.full((20, 3), np.inf), x), r"SVM MIA features contain NaN or inf"),
        (lambda: svm_mia(x, x, runs=0), r"svm_mia.runs=0 must be an integer >= 1"),
        (lambda: svm_mia(x, x, runs=True), r"svm_mia.runs=True must be an integer >= 1"),
        (lambda: svm_mia(x, x, runs=1.0), r"svm_mia.runs=1.0 must be an integer >= 1"),
        (lambda: svm_mia(x, x, scoring="auc"), r"svm_mia.scoring='auc'; choose one of \['accuracy', 'f1'\]"),
        (lambda: svm_mia(x, x, cv=11), r"SVM MIA needs at least 22 members and non-members \(got 20 and 20\)"),
    ]:
        with pytest.raises(DuckInputError, match=f"^{message}"):
            call()
    # the edges that pass: 2 cv a side, test_size at both ends of the allowed range
    assert checked_counts(6, 6, 1, cv=3, test_size=0.2) == (6, 6)
    assert checked_counts(10, 10, 1, cv=3, test_size=0.1) == checked_counts(10, 10, 1, cv=3, test_size=0.7) == (10, 10)


def test_defaults_are_the_papers_protocol() -> None:
    """runs 5, C {1, 5, 10, 100}, gamma {1, 0.1, 0.01}, 3 folds, an 80/20 split, seed 0, 3,000 per side."""
    rng = np.random.default_rng(4)
    members = softmax_rows(rng.normal(0, 1, (30, 3)) + np.array([1.0, 0, 0]))
    nonmembers = softmax_rows(rng.normal(0, 1, (30, 3)))
    res = svm_mia(members, nonmembers)
    ref = reference_runs(members, nonmembers, 30, 30, runs=5, C=(1, 5, 10, 100), gamma=(1, 0.1, 0.01), cv=3,
                         test_size=0.2, seed=0, scoring="f1")
    assert res["runs"] == 5 and res["f1_runs"] == pytest.approx([f for f, _, _ in ref], abs=1e-12)
    assert res["best_params"] == [{k: float(v) for k, v in p.items()} for _, _, p in ref]
    two = svm_mia(members, nonmembers, runs=2)  # the sample std from 2 runs on
    assert two["f1_std"] == pytest.approx(np.std(two["f1_runs"], ddof=1), abs=1e-12)
    from attacks.svm_mia import checked_counts

    assert checked_counts(6, 6, 1.0) == (6, 6)  # cv = 3 folds: 6 per side suffice
    assert checked_counts(5000, 9000, 1.0) == (3000, 3000)  # 3,000 per side
    with pytest.raises(DuckInputError, match="at least 6 members"):
        checked_counts(5, 6, 1.0)


def test_resample_counts_caps_the_non_members_too() -> None:
    # member_ratio below 1 asks for more non-members than members: the cap holds them too
    assert resample_counts(5000, 10000, 0.5, 3000) == (3000, 3000)
    assert resample_counts(100, 10000, 0.5, 3000) == (100, 200)


def test_folds_and_split_refusals_state_the_admissible_range() -> None:
    from attacks.svm_mia import checked_counts

    assert checked_counts(5, 5, 1.0, cv=2) == (5, 5)  # two folds are enough (4 training, 1 test sample)
    for cv in (1, True, 2.0):
        with pytest.raises(DuckInputError) as e:
            checked_counts(40, 40, 1.0, cv=cv)
        assert str(e.value) == f"svm_mia.cv={cv!r} must be an integer >= 2 (cross-validation folds)"
    with pytest.raises(DuckInputError) as e:
        checked_counts(9, 9, 1.0, test_size=0.05)  # 9 per side: test_size in [1/9, 1 - 3/9]
    assert str(e.value) == ("svm_mia.test_size=0.05 splits the smaller side (9 samples) into too few training "
                            "(>= cv = 3) or test (>= 1) samples; use a test_size between 0.12 and 0.66")


def test_svm_mia_checks_the_split_it_was_given_before_any_fit() -> None:
    x = softmax_rows(np.random.default_rng(5).normal(0, 1, (10, 3)))
    with pytest.raises(DuckInputError, match="test_size=0.05 splits the smaller side"):
        svm_mia(x, x, test_size=0.05, **FAST)


def test_feature_refusals_state_the_shapes_and_the_fix() -> None:
    x = np.full((20, 3), 1 / 3)
    with pytest.raises(DuckInputError) as e:
        svm_mia(np.full(20, 0.5), x)  # one 1-D side: refused, not an IndexError
    assert str(e.value) == "SVM MIA features must be (n, classes) softmax matrices, got (20,) and (20, 3)"
    with pytest.raises(DuckInputError, match=r"got \(20, 3\) and \(20,\)"):
        svm_mia(x, np.full(20, 0.5))
    bad = x.copy()
    bad[3, 1] = np.nan
    with pytest.raises(DuckInputError) as e:
        svm_mia(x, bad)
    assert str(e.value) == ("SVM MIA features contain NaN or inf (the audited model's outputs are not finite); "
                            "check the model")
