"""Bad input for every deletable k-means model: clear DuckInputError, model left unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from duck.deletion import DCKMeans, KMeansPP, QKMeans
from duck.errors import DuckInputError

MODELS = [KMeansPP, QKMeans, DCKMeans]


def make(cls, k: int = 3):
    return cls(k, seed=0, device="cpu", dtype=torch.float64)


def data(n: int = 60, d: int = 2) -> np.ndarray:
    return np.random.default_rng(0).normal(size=(n, d))


def snapshot(model) -> dict:
    return {
        "centers": model.cluster_centers_.clone(),
        "labels": model.labels_.clone(),
        "ids": model.ids_.clone(),
        "n": model.n_samples_,
        "retrains": model.n_retrains_,
    }


def assert_same(a: dict, b: dict) -> None:
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize("cls", MODELS)
@pytest.mark.parametrize(
    "X, match",
    [
        (np.zeros((0, 3)), "empty"),
        ([], "empty"),
        (np.zeros(5), "2-D"),
        (np.zeros((2, 3)), "n_clusters"),  # k = 3 > n = 2
        (np.array([[0.0, 1.0], [np.nan, 1.0], [2.0, 2.0], [3.0, 1.0]]), "NaN or inf.*\\[1\\]"),
        (np.array([[0.0, 1.0], [1.0, np.inf], [2.0, 2.0], [3.0, 1.0]]), "NaN or inf"),
        (np.array([["a", "b"]] * 4), "numeric"),
    ],
)
def test_bad_fit_data(cls, X, match):
    with pytest.raises(DuckInputError, match=match):
        make(cls).fit(X)


@pytest.mark.parametrize("cls", MODELS)
def test_bad_fit_ids_and_parameters(cls):
    X = data()
    with pytest.raises(DuckInputError, match="unique"):
        make(cls).fit(X, ids=[1] * 60)
    with pytest.raises(DuckInputError, match="one id per row"):
        make(cls).fit(X, ids=np.arange(10))
    with pytest.raises(DuckInputError, match="integer"):
        make(cls).fit(X, ids=np.linspace(0, 1, 60))
    with pytest.raises(DuckInputError, match="n_clusters"):
        cls(0)
    with pytest.raises(DuckInputError, match="dtype"):
        cls(2, dtype=torch.float16)
    if not torch.cuda.is_available():
        with pytest.raises(DuckInputError, match="CUDA"):
            cls(2, device="cuda")


@pytest.mark.parametrize("cls", MODELS)
def test_not_fitted(cls):
    with pytest.raises(DuckInputError, match="not fitted"):
        make(cls).predict(data())
    with pytest.raises(DuckInputError, match="not fitted"):
        make(cls).delete([0])


@pytest.mark.parametrize("cls", MODELS)
def test_bad_delete_and_predict_leave_model_unchanged(cls):
    model = make(cls).fit(data(), ids=np.arange(100, 160))
    before = snapshot(model)
    bad_requests = [
        ([5], "unknown ids \\[5\\]"),  # out of range
        ([100, 100], "duplicates"),
        ([100.5], "integer"),
        (np.arange(100, 159), "fewer rows than n_clusters"),
    ]
    for ids, match in bad_requests:
        with pytest.raises(DuckInputError, match=match):
            model.delete(ids)
        assert_same(before, snapshot(model))
    with pytest.raises(DuckInputError, match="3 features but"):
        model.predict(np.zeros((4, 3)))
    with pytest.raises(DuckInputError, match="NaN"):
        model.predict(np.array([[np.nan, 0.0]]))
    assert_same(before, snapshot(model))
    model.delete([101])
    after_first = snapshot(model)
    with pytest.raises(DuckInputError, match="already deleted"):
        model.delete([101])
    with pytest.raises(DuckInputError, match="already deleted"):
        model.delete([102, 101])  # a partly bad request deletes nothing
    assert_same(after_first, snapshot(model))
    assert model.delete([]) is False
    assert_same(after_first, snapshot(model))


def test_replay_errors():
    X = data()
    model = QKMeans(3, seed=0, device="cpu", dtype=torch.float64).fit(X)
    state = model.random_state_
    with pytest.raises(DuckInputError, match="not among the ids"):
        QKMeans(3, device="cpu", dtype=torch.float64).fit(
            X[1:], ids=np.arange(1, 60), replay={**state, "seed_ids": torch.tensor([0, 1, 2])}
        )
    with pytest.raises(DuckInputError, match="phases have shape"):
        QKMeans(3, n_iter=4, device="cpu").fit(X, replay=state)
    with pytest.raises(DuckInputError, match="missing keys"):
        QKMeans(3, device="cpu").fit(X, replay={"seed_ids": [0, 1, 2]})
    dc = DCKMeans(3, seed=0, device="cpu").fit(X)
    with pytest.raises(DuckInputError, match="no leaf"):
        DCKMeans(3, device="cpu").fit(X, ids=np.arange(1, 61), replay=dc.random_state_)
    for bad in (dict(gamma=1.5), dict(eps=-1.0), dict(eps="big"), dict(eps_scale=0)):
        with pytest.raises(DuckInputError):
            QKMeans(3, **bad)
    with pytest.raises(DuckInputError):
        DCKMeans(3, width=0)
    with pytest.raises(DuckInputError, match="min_leaf_per_cluster"):
        DCKMeans(3, min_leaf_per_cluster=0)
    for cls in (KMeansPP, QKMeans, DCKMeans):  # validated once, in the shared base class
        with pytest.raises(DuckInputError, match="n_local_trials"):
            cls(3, n_local_trials=0)
    with pytest.raises(DuckInputError):
        DCKMeans(3, weighted="yes")


@pytest.mark.parametrize("cls", MODELS)
def test_deleted_rows_leave_no_values_in_the_model(cls):
    """Not bad input but the other side of deletion: the model's own copy of a deleted row is erased at once
    (Q-k-means keeps the slot, masked, until compaction), the rest is untouched and the caller's array too."""
    X = data()
    keep = X.copy()
    model = make(cls).fit(X)
    model.delete([4, 7])
    assert not np.isin(model._X.cpu().numpy(), X[[4, 7]]).any()
    stored = {tuple(row) for row in model._X.cpu().numpy().tolist()}
    assert all(tuple(row) in stored for row in X[np.setdiff1d(np.arange(len(X)), [4, 7])].tolist())
    np.testing.assert_array_equal(X, keep)
