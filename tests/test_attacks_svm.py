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
