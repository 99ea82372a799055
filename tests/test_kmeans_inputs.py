"""Bad input for every deletable k-means model: clear DuckInputError, model left unchanged."""

from __future__ import annotations

import copy

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
        "inertia": model.inertia_,
    }


def assert_refused_and_unchanged(model, call, match: str) -> None:
    """``call()`` raises a DuckInputError matching ``match`` and leaves ``model`` exactly as it was; the model
    still predicts and deletes afterwards (on a copy, so the caller can go on)."""
    before = snapshot(model)
    with pytest.raises(DuckInputError, match=match):
        call()
    assert_same(before, snapshot(model))
    probe = copy.deepcopy(model)
    assert torch.equal(probe.predict(probe._X[:5]), probe.labels_[:5])
    probe.delete(probe.ids_[:1])
    assert probe.n_samples_ == before["n"] - 1


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


# ------------------------------------------------------------------------------- values beyond the dtype
@pytest.mark.parametrize("cls", MODELS)
def test_too_large_data_is_refused_and_a_failed_refit_keeps_the_model(cls):
    """Squared distances that overflow the dtype (k-means++ then sampled past the last row: raw IndexErrors)
    are refused before any state changes: a failed refit keeps the previous model."""
    model = make(cls).fit(data())
    for factor in (1e160, 1e300):  # squared distances (or the squared norms themselves) overflow float64
        assert_refused_and_unchanged(model, lambda f=factor: model.fit(data() * f), "too large for float64")
    assert_refused_and_unchanged(model, lambda: model.predict(data() * 1e300), "too large for float64")
    small = cls(3, seed=0, device="cpu").fit(data())  # float32
    for factor in (1e20, 1e40):  # 1e40: finite in the float64 input, inf once in float32
        assert_refused_and_unchanged(
            small, lambda f=factor: small.fit(data() * f), "too large for float32.*dtype=torch.float64"
        )
    assert small.fit(data() * 1e15).n_samples_ == 60  # large but representable: fits


def blobs_far_from_zero(offset: float) -> tuple[np.ndarray, np.ndarray]:
    """Three well-separated blobs (std 1) shifted by ``offset`` in both coordinates, and their labels."""
    rng = np.random.default_rng(0)
    z = rng.integers(0, 3, 300)
    return np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])[z] + rng.normal(size=(300, 2)) + offset, z


@pytest.mark.parametrize("cls", MODELS)
def test_data_far_from_the_origin_is_refused_where_distances_would_be_wrong(cls):
    """||x||^2 - 2 x.c + ||c||^2 cancels for data far from 0 compared with its spread: in float32 an offset of
    1e5 leaves no correct digit (the clustering was arbitrary, ARI ~0 against the blobs, before this check),
    so the fit is refused with the two remedies; accepted offsets give the blobs back exactly (the reference:
    the generating labels, which scikit-learn's KMeans also recovers)."""
    from sklearn.metrics import adjusted_rand_score

    float32 = cls(3, seed=0, device="cpu").fit(data())
    X, _ = blobs_far_from_zero(1e5)  # float64 would resolve it: both remedies
    assert_refused_and_unchanged(float32, lambda: float32.fit(X), "far from the origin.*centre X first.*float64")
    X, _ = blobs_far_from_zero(1e9)  # beyond float64 too: centring only
    float64 = make(cls).fit(data())
    for model in (float32, float64):
        assert_refused_and_unchanged(model, lambda m=model: m.fit(X), r"far from the origin.*predict\)$")
    for model, offset in ((float32, 1e3), (float64, 1e5), (float64, 1e7)):
        X, z = blobs_far_from_zero(offset)
        assert adjusted_rand_score(z, model.fit(X).labels_.numpy()) > 0.98, offset


@pytest.mark.parametrize("cls", MODELS)
def test_bad_ids_are_refused_in_fit_and_delete(cls):
    model = make(cls).fit(data(), ids=np.arange(100, 160))
    bad = [
        ([[1], [2, 3]], "nested or ragged"),
        (np.arange(60) * 1e20, "outside the int64 range"),  # not a false "duplicates"
        (np.arange(60, dtype=np.uint64) + np.uint64(2**63), "outside the int64 range"),  # no silent wrap
        (np.arange(60) + 0j, "complex"),
        ([str(i) for i in range(60)], "integer ids"),
        ([2**70] + list(range(59)), "outside the int64 range"),
        (np.ones((60, 1)), "1-D"),
    ]
    for ids, match in bad:
        assert_refused_and_unchanged(model, lambda i=ids: model.fit(data(), ids=i), match)
        assert_refused_and_unchanged(model, lambda i=ids: model.delete(i[:2]), match)
    assert_refused_and_unchanged(model, lambda: model.delete([1e20]), "outside the int64 range")
    assert_refused_and_unchanged(model, lambda: model.delete(True), "booleans")


@pytest.mark.parametrize("cls", MODELS)
def test_bad_constructor_values(cls):
    for kwargs, match in [
        (dict(dtype=[1]), "dtype"),  # unhashable: a DuckInputError, not a TypeError
        (dict(dtype={}), "dtype"),
        (dict(dtype="float16"), "dtype"),
        (dict(seed=-1), "seed"),
        (dict(seed=2**63), "seed"),
        (dict(seed=True), "seed"),
        (dict(seed="1"), "seed"),
        (dict(device=[1]), "device"),
    ]:
        with pytest.raises(DuckInputError, match=match):
            cls(2, **kwargs)


@pytest.mark.parametrize(
    "cls, attributes",
    [
        (KMeansPP, ["inertia_", "n_iter_", "seed_ids_", "labels_", "cluster_centers_", "ids_", "n_samples_"]),
        (QKMeans, ["inertia_", "n_iter_", "seed_ids_", "eps_", "last_deletion_", "random_state_", "labels_"]),
        (DCKMeans, ["inertia_", "width_", "n_leaves_", "n_node_fits_", "random_state_", "node_outputs_"]),
    ],
)
def test_fitted_attributes_say_not_fitted(cls, attributes):
    for name in attributes:
        with pytest.raises(DuckInputError, match="not fitted"):
            getattr(make(cls), name)


# --------------------------------------------------------------------------------------------- KMeansPP
def test_kmeanspp_bad_sample_weight_and_tol():
    model = make(KMeansPP).fit(data(), sample_weight=np.linspace(0.5, 2.0, 60))
    for weights, match in [
        (["a"] * 60, "numeric"),
        ([None] * 60, "numeric"),
        (np.ones(60) + 1j, "real-valued"),
        (np.ones((6, 10)), "1-D array of 60"),  # not silently flattened
        (np.ones(59), "1-D array of 60"),
        (np.full(60, np.nan), "finite"),
        (np.r_[-1.0, np.ones(59)], "finite and >= 0.*\\[0\\]"),
        (np.zeros(60), "positive"),
        (np.full(60, 1e307), "sums to .* above the float64 maximum"),  # the total overflows
        (np.full(60, 1e306), "weighted by sample_weight"),  # weights x squared distances overflow
    ]:
        assert_refused_and_unchanged(model, lambda w=weights: model.fit(data(), sample_weight=w), match)
    small = KMeansPP(3, seed=0, device="cpu").fit(data())
    assert_refused_and_unchanged(small, lambda: small.fit(data(), sample_weight=np.full(60, 3e38)), "float32")
    assert small.fit(data(), sample_weight=[1.0] * 60).n_samples_ == 60  # a plain list of numbers
    for tol in (True, float("nan"), float("inf"), -1e-3, "0.1", None):
        with pytest.raises(DuckInputError, match="tol"):
            KMeansPP(2, tol=tol)
    assert KMeansPP(2, tol=0).tol == 0.0


# ---------------------------------------------------------------------------------------------- QKMeans
def test_qkmeans_bad_replay_entries_leave_the_model_unchanged():
    model = make(QKMeans).fit(data())
    state = model.random_state_
    bad = [
        ("eps_phase", float("nan"), "eps_phase"),
        ("eps_phase", 1.0, "eps_phase"),
        ("eps_phase", "x", "eps_phase"),
        ("eps_phase", None, "eps_phase"),
        ("n_reseeds", "x", "n_reseeds"),
        ("n_reseeds", -1, "n_reseeds"),
        ("phases", [["a", "b"]] * 10, "phases"),
        ("phases", torch.full((10, 2), float("nan")), "\\[0, 1\\)"),
        ("phases", state["phases"] + 1.0, "\\[0, 1\\)"),
        ("phases", state["phases"][:, :1], "shape"),
        ("seed_ids", [[1], [2, 3, 4]], "ragged"),
        ("seed_ids", ["a", "b", "c"], "integer"),
        ("seed_ids", [0, 0, 1], "seeds"),
    ]
    for key, value, match in bad:
        replay = {**state, key: value}
        assert_refused_and_unchanged(model, lambda r=replay: model.fit(data() * 2, replay=r), match)
    assert_refused_and_unchanged(model, lambda: model.fit(data(), replay=[1, 2]), "random_state_ dict")


def test_qkmeans_eps_must_be_usable():
    for kwargs in (dict(eps=float("inf")), dict(eps=float("nan")), dict(eps=0.0), dict(eps=True), dict(eps=[1]),
                   dict(eps_scale=float("inf")), dict(eps_scale=-1.0), dict(eps_scale="2"), dict(gamma=float("nan"))):
        with pytest.raises(DuckInputError, match=next(iter(kwargs))):
            QKMeans(2, **kwargs)
    X = data()
    for kwargs, match in [
        (dict(eps=1e300), "eps=1e\\+300 is outside the lattice widths"),  # formerly a silent seeds-only model
        (dict(eps=1e-300), "outside the lattice widths"),
        (dict(eps_scale=1e300), "eps_scale=1e\\+300 gives eps="),
        (dict(eps_scale=1e-300), "eps_scale=1e-300 gives eps="),
    ]:
        with pytest.raises(DuckInputError, match=match):
            QKMeans(3, **kwargs, device="cpu", dtype=torch.float64).fit(X)
    fixed = QKMeans(3, eps=1e-6, seed=0, device="cpu").fit(X)  # float32: usable while max |x| < ~8
    assert_refused_and_unchanged(fixed, lambda: fixed.fit(X * 100), "below the dtype's resolution")


# --------------------------------------------------------------------------------------------- DCKMeans
def test_dckmeans_bad_replay_and_tree_sizes():
    model = make(DCKMeans).fit(data())
    state = model.random_state_
    width, n_leaves = model.width_, model.n_leaves_
    bad = [
        ("width", 10**12, "more than max\\(n, 2\\*\\*20\\)"),  # formerly a MemoryError with width_ left at 10**12
        ("width", "x", "width"),
        ("seed", "x", "seed"),
        ("seed", -1, "seed"),
        ("leaves", ["a"] * 60, "integer"),
        ("leaves", state["leaves"][:5], "5 entries"),
        ("leaves", state["leaves"][None], "1-D"),
        ("leaves", state["leaves"] - 1, "lie in"),
        ("leaf_ids", torch.zeros(60, dtype=torch.long), "duplicates"),
    ]
    for key, value, match in bad:
        replay = {**state, key: value}
        assert_refused_and_unchanged(model, lambda r=replay: model.fit(data(), replay=r), match)
        assert (model.width_, model.n_leaves_) == (width, n_leaves)
    for kwargs, n in [(dict(width=10**7, height=3), 60), (dict(width=10**10), 60), (dict(width=8), 7)]:
        with pytest.raises(DuckInputError, match="leaves, more than the"):
            DCKMeans(2, **kwargs, device="cpu").fit(data(n))
    with pytest.raises(DuckInputError, match="height"):
        DCKMeans(2, height=10**9)
    with pytest.raises(DuckInputError, match="'auto' or an integer"):
        DCKMeans(2, width="big")
    eight = DCKMeans(2, width=8, seed=0, device="cpu", dtype=torch.float64).fit(data(40))
    assert_refused_and_unchanged(eight, lambda: eight.fit(data(7)), "8 leaves, more than the 7 rows")
