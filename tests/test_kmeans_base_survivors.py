"""The shared base of the deletable k-means models (duck/deletion/_kmeans_base.py): stable ids of any kind (dense,
offset, negative, sparse) give the same models as ids 0..n-1, the id index switches to the sorted search exactly
beyond its memory bound, deletion refusals name the offending ids (unknown, duplicated, already deleted before
and after a compaction) and leave the model unchanged, deleted rows are erased from the stored data, and the
too-large hint names float64 only where it helps."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from off_host import OffHost
from refusals import refused

from duck.deletion import DCKMeans, KMeansPP, QKMeans
from duck.errors import DuckInputError

MODELS = [KMeansPP, QKMeans, DCKMeans]
N, K = 30, 3


def make(cls, k: int = K, device: str = "cpu", width: int = 2):
    extra = dict(width=width, min_leaf_per_cluster=1) if cls is DCKMeans else {}
    return cls(k, seed=0, device=device, dtype=torch.float64, **extra)


def blobs() -> np.ndarray:
    """Three separated blobs of 10 rows in 2-D."""
    rng = np.random.default_rng(0)
    return np.concatenate([rng.normal(size=(10, 2)) + c for c in ([0.0, 0.0], [8.0, 0.0], [0.0, 8.0])])


def unknown(ids: list[int], name: str) -> str:
    return f"unknown ids {ids}: not among the ids this {name} was fitted on"


def again(ids: list[int]) -> str:
    return f"ids {ids} were already deleted; each row can be deleted once"


def snapshot(model) -> dict:
    """The public state and the stored rows, their ids, alive mask and deleted-id record."""
    return {
        "centers": model.cluster_centers_.clone(), "labels": model.labels_.clone(), "ids": model.ids_.clone(),
        "n": model.n_samples_, "X": model._X.clone(), "stored_ids": torch.from_numpy(model._ids.copy()),
        "alive": torch.from_numpy(model._alive.copy()), "deleted": set(model._deleted_ids),
    }


def assert_refused_unchanged(model, ids, message: str) -> None:
    """``delete(ids)`` raises exactly ``message`` and leaves the model as it was (it still deletes afterwards)."""
    before = snapshot(model)
    with refused(message):
        model.delete(ids)
    after = snapshot(model)
    for key, value in before.items():
        assert torch.equal(value, after[key]) if isinstance(value, torch.Tensor) else value == after[key], key
    probe = copy.deepcopy(model)
    probe.delete(probe.ids_[:1])
    assert probe.n_samples_ == before["n"] - 1


# id sets, all increasing in the row order (so every model, DC-k-means' leaves included, sees the same rows)
ID_SETS = {
    "dense": np.arange(N),
    "offset": np.arange(N) + 10,  # a table whose first entries are no rows
    "negative": np.arange(N) - 15,  # negative and non-negative ids: the sorted search
    "sparse": np.arange(N) * 2**57,  # a table of 2**62 entries would be impossible
    "sparse_signed": np.arange(N) * 2**57 - 2**61,
    "just_sparse": np.append(np.arange(N - 1), 4 * N + 1024),
}


def deletion_schedule(model) -> list[list[int]]:
    """Positions (in the fit order) deleted request by request: the seeds and more than half of the rows (a
    Q-k-means retrain then compacts; k-means++ compacts on every request), then the last and first rows left."""
    seeds = [int(s) for s in model.seed_ids_] if hasattr(model, "seed_ids_") else [0]
    first = seeds + [p for p in range(2, N, 2) if p not in seeds][: N // 2 + 1 - len(seeds)]
    rest = [p for p in range(N) if p not in first]
    return [first, [rest[-1]], [rest[0], rest[1]], [rest[2]]]


@pytest.mark.parametrize("kind", list(ID_SETS))
@pytest.mark.parametrize("cls", MODELS)
def test_any_stable_ids_give_the_same_model_as_dense_ids(cls, kind):
    """Same rows, same deletions (by the rows' ids): the same ids_, labels, centres and predictions as with ids
    0..n-1 after every request, compactions included; afterwards every deleted id is refused as deleted."""
    X, ids = blobs(), ID_SETS[kind]
    dense, model = make(cls).fit(X), make(cls).fit(X, ids=ids)
    schedule = deletion_schedule(dense)
    for positions in schedule:
        dense.delete(positions)
        model.delete(ids[positions])
        assert torch.equal(model.ids_, torch.from_numpy(ids[dense.ids_.numpy()]))
        assert torch.equal(model.labels_, dense.labels_)
        assert torch.equal(model.cluster_centers_, dense.cluster_centers_)
        assert model.n_samples_ == dense.n_samples_
        assert torch.equal(model.predict(X), dense.predict(X))
    assert model._X.shape == dense._X.shape  # compacted alike
    if cls is not DCKMeans:
        assert model._X.shape[0] < N  # the schedule did compact
    deleted = sorted(p for request in schedule for p in request)
    for position in (deleted[0], deleted[-1]):  # deleted in the first and last requests
        assert_refused_unchanged(model, [int(ids[position])], again([int(ids[position])]))
    # all of them again: ten are named, in request order (the compacted ones first where a compaction left some)
    request = [int(i) for i in ids[deleted]]
    with pytest.raises(DuckInputError, match=r"^ids \[(.*)\] were already deleted; each row") as caught:
        model.delete(request)
    named = [int(i) for i in caught.value.args[0].split("[")[1].split("]")[0].split(", ")]
    assert len(named) == 10 and named == [i for i in request if i in set(named)]


@pytest.mark.parametrize(
    ("largest", "dense"), [(4 * N + 1023, True), (4 * N + 1024, False), (N - 1, True), (2**62, False)]
)
def test_the_id_table_is_used_exactly_while_it_stays_below_4n_plus_1024_entries(largest, dense):
    """The O(1) id -> row table for non-negative ids below ``4 n + 1024`` (memory O(n)), else the sorted search."""
    ids = np.append(np.arange(N - 1), largest)
    model = make(KMeansPP).fit(blobs(), ids=ids)
    assert (model._row_table is not None) is dense
    assert make(KMeansPP).fit(blobs(), ids=ids - 1)._row_table is None  # a negative id
    model.delete([0, largest])
    assert model.ids_.tolist() == list(range(1, N - 1))


@pytest.mark.parametrize("kind", ["dense", "offset", "negative", "sparse", "sparse_signed"])
@pytest.mark.parametrize("cls", MODELS)
def test_unknown_ids_are_named_and_change_nothing(cls, kind):
    """Ids just past the largest, far beyond, below the smallest (inside a dense table's range for the offset
    ids), negative, between sparse ids: refused naming only them (at most ten), alone or next to known ids."""
    ids = ID_SETS[kind]
    model = make(cls).fit(blobs(), ids=ids)
    lo, hi = int(ids.min()), int(ids.max())
    outside = [hi + 1, hi + 2, hi + 10**6, lo - 1, -1, -(2**62), 2**62 + 1] + ([lo + 1] if kind == "sparse" else [])
    outside = [u for u in outside if u not in set(ids.tolist())]
    for u in outside:
        assert_refused_unchanged(model, [u], unknown([u], cls._name))
        for known in (lo, int(ids[1]), hi):  # with known ids (the first row's, the largest) in one request
            assert_refused_unchanged(model, [known, u], unknown([u], cls._name))
            assert_refused_unchanged(model, [u, known], unknown([u], cls._name))
    many = [hi + 1 + i for i in range(12)]
    assert_refused_unchanged(model, many, unknown(many[:10], cls._name))
    # the first (row 0) and last rows are known and still deletable
    model.delete([lo, hi])
    assert model.n_samples_ == N - 2 and lo not in model.ids_.tolist() and hi not in model.ids_.tolist()


@pytest.mark.parametrize("cls", MODELS)
def test_a_single_row_model_refuses_unknown_ids(cls):
    """A one-entry id table: unknown ids past it or negative are refused, not looked up."""
    model = make(cls, k=1, width=1).fit(blobs()[:1])
    for u in (1, 5, -1):
        with refused(unknown([u], cls._name)):
            model.delete([u])
        assert model.ids_.tolist() == [0] and model.n_samples_ == 1


@pytest.mark.parametrize("cls", MODELS)
def test_duplicate_and_non_integer_requests_are_named(cls):
    """Duplicates name the first ten requested ids; non-integer ids name the argument ``ids``."""
    model = make(cls).fit(blobs())
    request = list(range(11)) + [3]
    assert_refused_unchanged(
        model, request, f"ids to delete contain duplicates: {request[:10]}; pass each id once"
    )
    assert_refused_unchanged(model, [1.5], "ids must hold integer ids, got non-integer values [1.5]")
    assert_refused_unchanged(model, [[1]], "ids has shape (1, 1); give a flat (1-D) sequence of integer ids")
    model.delete([4])  # a single id is never a duplicate
    assert model.n_samples_ == N - 1


@pytest.mark.parametrize("kind", ["dense", "offset", "sparse"])
@pytest.mark.parametrize("cls", MODELS)
def test_deleting_twice_names_the_deleted_ids_only(cls, kind):
    """Before a compaction (rows only masked) and after one (k-means++: every request), a second deletion names
    the already deleted ids, at most ten, and none of the live ids in the same request."""
    ids = ID_SETS[kind]
    model = make(cls).fit(blobs(), ids=ids)
    first = [int(i) for i in ids[:12]]  # row 0 included
    model.delete(first)
    live = int(ids[20])
    assert_refused_unchanged(model, first, again(first[:10]))
    assert_refused_unchanged(model, [live] + first, again(first[:10]))
    assert_refused_unchanged(model, [live, first[3]], again([first[3]]))
    assert_refused_unchanged(model, [first[3], live], again([first[3]]))
    # next to an unknown id: while the deleted rows (row 0 among them) are still stored, only the unknown id is
    # named; once compacted away, the deleted id is (k-means++ compacts on every request, the others did not yet)
    u = int(ids.max()) + 1
    compacted = model._X.shape[0] < N
    assert compacted is (cls is KMeansPP)
    message = again([first[0]]) if compacted else unknown([u], cls._name)
    assert_refused_unchanged(model, [first[0], u], message)
    assert_refused_unchanged(model, [u, first[0]], message)


@pytest.mark.parametrize("cls", MODELS)
def test_deletions_may_leave_exactly_n_clusters_rows(cls):
    """Deleting down to n_clusters rows is allowed; one row fewer is refused."""
    model = make(cls).fit(blobs())
    model.delete(list(range(N - K - 1)))
    assert_refused_unchanged(
        model, [N - K - 1, N - K], f"deleting 2 of {K + 1} rows would leave fewer rows than n_clusters={K}; "
        "refit with fewer clusters instead"
    )
    model.delete([N - K - 1])
    assert model.n_samples_ == K and model.ids_.tolist() == list(range(N - K, N))


def check_erased(cls, device: str, off_host: bool = False) -> None:
    """The model's stored copy of a deleted row is zeros (k-means++ drops it at once), the others keep their
    values; the alive row index lives on the data's device; DC-k-means' labels are the alive rows' nearest centres.
    ``off_host``: the stored rows report themselves off the host, so the erasure takes the device path."""
    X = blobs()
    model = make(cls, device=device).fit(X, ids=np.arange(N) + 100)
    if off_host:
        model._X = model._X.as_subclass(OffHost)
    gone = [101, 117, 128]
    model.delete(gone)
    ids_now = model._ids  # stored ids, deleted included until a compaction
    assert set(gone) <= set(ids_now.tolist()) or cls is KMeansPP
    stored = model._X.cpu().numpy()
    for row, i in enumerate(ids_now.tolist()):
        expected = np.zeros(2) if i in gone else X[i - 100]
        np.testing.assert_array_equal(stored[row], expected)
    assert model._alive_rows().device == model._X.device
    survivors = model.ids_.numpy() - 100
    if cls is DCKMeans:  # its labels_ are the alive rows' nearest root centres
        assert torch.equal(model.labels_.cpu(), model.predict(X[survivors]).cpu())


@pytest.mark.parametrize("cls", MODELS)
def test_deleted_rows_are_erased_from_the_stored_data(cls):
    check_erased(cls, "cpu")


@pytest.mark.parametrize("cls", MODELS)
def test_deleted_rows_are_erased_through_the_device_storage_path(cls):
    check_erased(cls, "cpu", off_host=True)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", MODELS)
def test_deleted_rows_are_erased_on_cuda_and_indices_stay_on_the_device(cls):
    check_erased(cls, "cuda")


TOO_LARGE = (
    "X values are too large for {dt} (largest squared row norm inf: squared distances summed over 3 rows can "
    "reach inf, above the {dt} maximum {mx}); rescale X (e.g. divide it by its largest absolute value){hint}"
)


@pytest.mark.parametrize("cls", MODELS)
def test_too_large_data_suggests_float64_only_from_float32(cls):
    big64 = np.array([[1e160, 0.0], [0.0, 1e160], [1.0, 1.0]])
    with refused(TOO_LARGE.format(dt="float64", mx="1.8e+308", hint="")):
        cls(2, device="cpu", dtype=torch.float64).fit(big64)
    big32 = np.array([[1e20, 0.0], [0.0, 1e20], [1.0, 1.0]])
    with refused(TOO_LARGE.format(dt="float32", mx="3.4e+38", hint=" or use dtype=torch.float64")):
        cls(2, device="cpu", dtype=torch.float32).fit(big32)


# ------------------------------------------------------------------------------ constructor and fit inputs
def assert_same(before: dict, after: dict) -> None:
    for key, value in before.items():
        assert torch.equal(value, after[key]) if isinstance(value, torch.Tensor) else value == after[key], key


@pytest.mark.parametrize("cls", MODELS)
def test_constructor_refusals_name_the_argument(cls):
    """Bad n_clusters, seed and device are refused naming the argument; a new model has made no retrain."""
    for kwargs, message in [
        (dict(n_clusters=0), "n_clusters=0 must be an integer >= 1"),
        (dict(n_clusters=2.0), "n_clusters=2.0 must be an integer >= 1"),
        (dict(seed=-1), "seed=-1 must be an integer >= 0"),
        (dict(seed=2**63), "seed=9223372036854775808 is too large; seeds are integers in [0, 2^63 - 1]"),
        (dict(device="tpu"), "device='tpu' is not a device; use cpu, cuda, cuda:N or auto"),
    ]:
        with refused(message):
            cls(**{"n_clusters": 2, "device": "cpu", **kwargs})
    assert cls(2, device="cpu").n_retrains_ == 0


@pytest.mark.parametrize("cls", MODELS)
def test_n_retrains_counts_the_retraining_deletions_only(cls):
    """0 after construction and after a fit; then the number of delete calls that returned True (k-means++: every
    one; Q-k-means: those that needed a retrain, a deleted seed always does; DC-k-means: none); 0 after a refit."""
    model = make(cls)
    assert model.n_retrains_ == 0
    model.fit(blobs())
    assert model.n_retrains_ == 0
    first = [int(model.seed_ids_[0])] if hasattr(model, "seed_ids_") else [0]
    retrained = [model.delete(first), model.delete([int(model.ids_[-1])])]
    assert model.n_retrains_ == sum(retrained)
    assert retrained[0] is (cls is not DCKMeans)
    model.fit(blobs())
    assert model.n_retrains_ == 0


@pytest.mark.parametrize("cls", MODELS)
def test_fit_never_shares_memory_with_the_callers_array(cls):
    """A caller's array of the model's dtype and device (numpy or torch) overwritten after fit leaves the model as
    a fit on an untouched copy: same centres, and the same model after a deletion (which reuses the stored rows)."""
    for wrap in (lambda a: a, torch.from_numpy):
        X = blobs()
        model, twin = make(cls).fit(wrap(X)), make(cls).fit(blobs())
        X[:] = 100.0 * X[::-1]
        assert torch.equal(model.cluster_centers_, twin.cluster_centers_)
        first = [int(model.seed_ids_[0])] if hasattr(model, "seed_ids_") else [0]
        model.delete(first)
        twin.delete(first)
        assert torch.equal(model.cluster_centers_, twin.cluster_centers_)
        assert torch.equal(model.predict(blobs()), twin.predict(blobs()))


@pytest.mark.parametrize("cls", MODELS)
def test_default_ids_are_int64_row_positions(cls):
    model = make(cls).fit(blobs())
    assert model.ids_.dtype == torch.int64 and model.ids_.tolist() == list(range(N))


@pytest.mark.parametrize("cls", MODELS)
def test_bad_fit_ids_are_refused_naming_ids_and_change_nothing(cls):
    """Non-integer, duplicated or miscounted ids: refused naming ``ids``; the previously fitted model stays."""
    model = make(cls).fit(blobs())
    before = snapshot(model)
    duplicated = np.arange(N)
    duplicated[7] = 3
    for ids, message in [
        ([0.5] + list(range(1, N)), "ids must hold integer ids, got non-integer values [0.5]"),
        (np.arange(N).reshape(1, N), f"ids has shape (1, {N}); give a flat (1-D) sequence of integer ids"),
        (duplicated, "ids must be unique (one stable id per row); found duplicates"),
        (np.arange(N - 1), f"ids has {N - 1} entries but X has {N} rows; pass one id per row"),
    ]:
        with refused(message):
            model.fit(blobs() * 2.0, ids=ids)
        assert_same(before, snapshot(model))


@pytest.mark.parametrize("cls", MODELS)
def test_non_numeric_data_and_too_few_rows_are_named(cls):
    """Text data is refused naming X at fit and predict; too few rows name the row count (not the feature count)."""
    model = make(cls).fit(blobs())
    for call in (make(cls).fit, model.predict):
        with refused("X must be a real-valued numeric array, got dtype <U1"):
            call([["a", "b"], ["c", "d"]])
    with refused("X has 2 rows but n_clusters=3; pass at least n_clusters rows or lower n_clusters"):
        make(cls).fit(np.ones((2, 5)))


@pytest.mark.parametrize("cls", MODELS)
def test_integer_data_fits_like_the_same_float_data(cls):
    """Integer input (checked for its offset on the caller's values) fits exactly like its float64 copy."""
    X = np.round(blobs() * 10).astype(np.int64)
    a, b = make(cls).fit(X), make(cls).fit(X.astype(np.float64))
    assert torch.equal(a.cluster_centers_, b.cluster_centers_) and torch.equal(a.predict(X), b.predict(X))


# ------------------------------------------------------------------------------ non-finite and too-large data
BAD_ROWS = [1, 3, 4, 8, 11, 12, 17]  # seven bad rows: only the first five are named


def with_bad_rows(value: float) -> np.ndarray:
    X = np.random.default_rng(1).normal(size=(20, 2))
    X[BAD_ROWS, 1] = value
    return X


@pytest.mark.parametrize("cls", MODELS)
def test_nan_and_inf_rows_are_named_first_five(cls):
    model = make(cls).fit(blobs())
    message = "X contains NaN or inf values (first bad rows: [1, 3, 4, 8, 11]); clean or drop those rows"
    for value in (np.nan, np.inf, -np.inf):
        for call in (make(cls).fit, model.predict):
            with refused(message):
                call(with_bad_rows(value))


OVERFLOW = (
    "X values are too large for float32 (rows {rows} overflow float32); rescale X (e.g. divide it by its largest "
    "absolute value) or use dtype=torch.float64"
)


@pytest.mark.parametrize("cls", MODELS)
def test_values_beyond_float32_name_the_overflowing_rows(cls):
    """Finite float64 values that are inf in float32 (1e39): the too-large refusal naming the first five rows, at
    fit and predict; a NaN among the named rows makes it the NaN refusal."""
    model = cls(2, device="cpu", dtype=torch.float32).fit(blobs())
    for call in (cls(2, device="cpu", dtype=torch.float32).fit, model.predict):
        with refused(OVERFLOW.format(rows="[1, 3, 4, 8, 11]")):
            call(with_bad_rows(1e39))
        with refused(OVERFLOW.format(rows="[1, 3, 4, 8, 11]")):
            call(torch.from_numpy(with_bad_rows(-1e39)))
        mixed = with_bad_rows(1e39)
        mixed[4, 0] = np.nan
        with refused("X contains NaN or inf values (first bad rows: [1, 3, 4, 8, 11]); clean or drop those rows"):
            call(mixed)


@pytest.mark.parametrize("cls", MODELS)
def test_finite_values_whose_sum_overflows_get_the_scale_refusal(cls):
    """All values finite but their sum inf: the squared-distance refusal, not a bad-rows one (fit: summed over the
    rows; predict: single squared distances)."""
    X = np.array([[3e38, 0.0], [3e38, 0.0], [0.0, 1.0]])
    f32 = " or use dtype=torch.float64"
    with refused(TOO_LARGE.format(dt="float32", mx="3.4e+38", hint=f32)):
        cls(2, device="cpu", dtype=torch.float32).fit(X)
    with refused(TOO_LARGE.format(dt="float64", mx="1.8e+308", hint="")):
        cls(2, device="cpu", dtype=torch.float64).fit(X * (1e308 / 3e38))
    model = cls(2, device="cpu", dtype=torch.float32).fit(blobs())
    with refused(TOO_LARGE.format(dt="float32", mx="3.4e+38", hint=f32).replace(" summed over 3 rows", "")):
        model.predict(np.full((1, 2), 3e38))


#: float32's largest value, (2**24 - 1) * 2**104, and integers whose squares are exact in float32 and sum to
#: 2**24 - 1: a row ``EDGE * 2**e`` has the squared norm (2**24 - 1) * 2**(2 e), computed without rounding
MAX32 = torch.finfo(torch.float32).max
EDGE = np.array([4095.0, 90.0, 9.0, 3.0])


def scale_refusal(largest: float, summed: str, bound: float) -> str:
    return (
        f"X values are too large for float32 (largest squared row norm {largest:.3g}: squared distances{summed} can "
        f"reach {bound:.3g}, above the float32 maximum {MAX32:.3g}); rescale X (e.g. divide it by its largest "
        "absolute value) or use dtype=torch.float64"
    )


@pytest.mark.parametrize("cls", MODELS)
def test_predict_accepts_single_squared_distances_up_to_the_float32_maximum(cls):
    """predict: a squared distance reaches 4 max||x||^2; rows where that is exactly the float32 maximum are
    predicted (any number of them: predict sums nothing), one power of two more is refused."""
    assert (EDGE**2).sum() == 2**24 - 1 and MAX32 == (2**24 - 1) * 2.0**104
    model = cls(2, device="cpu", dtype=torch.float32).fit(np.random.default_rng(0).normal(size=(8, 4)))
    row = EDGE * 2.0**51
    assert 4.0 * float((row**2).sum()) == MAX32
    labels = model.predict(np.stack([row, -row, row / 2, np.zeros(4)]))
    assert labels.shape == (4,) and set(labels.tolist()) <= {0, 1}
    beyond = np.array([[2.0**63, 0.0, 0.0, 0.0]])  # squared norm 2**126 > MAX32 / 4
    with refused(scale_refusal(2.0**126, "", 2.0**128)):
        model.predict(beyond)


@pytest.mark.parametrize("cls", MODELS)
def test_fit_accepts_summed_squared_distances_up_to_the_float32_maximum(cls):
    """fit on n rows: summed squared distances reach 4 n max||x||^2; exactly the float32 maximum is fitted (not by
    Q-k-means, whose lattice needs headroom beyond the rows: its own lattice check refuses it), one power of two
    more is refused naming the row count."""
    r = EDGE * 2.0**50
    X = np.stack([r, -r, r / 2, np.zeros(4)])
    assert 4.0 * len(X) * float((r**2).sum()) == MAX32
    fit32 = cls(2, device="cpu", dtype=torch.float32, **(dict(width=1) if cls is DCKMeans else {})).fit
    if cls is QKMeans:
        with pytest.raises(DuckInputError, match=r"^eps_scale=0\.5 gives eps="):
            fit32(X)
    else:
        assert torch.isfinite(fit32(X).cluster_centers_).all()
    X[0] = [2.0**62, 0.0, 0.0, 0.0]  # squared norm 2**124 > MAX32 / 16
    with refused(scale_refusal(2.0**124, " summed over 4 rows", 2.0**128)):
        fit32(X)


# ------------------------------------------------------------------------------ the offset check
def offset_refusal(X: np.ndarray, dtype: torch.dtype) -> str:
    """The refusal of ``_check_offset`` computed by hand from its docstring: rounding error 0.5 eps max||x||^2
    against 1e-2 V (V: per-column population variances, summed), the float64 hint iff float64 would pass."""
    V = float(X.var(axis=0).sum())
    largest = float((X**2).sum(axis=1).max())
    error = 0.5 * torch.finfo(dtype).eps * largest
    assert error > 1e-2 * V
    hint = " or use dtype=torch.float64" if 0.5 * torch.finfo(torch.float64).eps * largest <= 1e-2 * V else ""
    return (
        f"X lies far from the origin compared with its spread (largest squared row norm {largest:.3g}, total "
        f"variance {V:.3g}): the squared distances, computed as ||x||^2 - 2 x.c + ||c||^2 in "
        f"{str(dtype).removeprefix('torch.')}, would carry rounding errors of {error / V:.2g} times the variance; "
        "centre X first (subtract its column means, and the same vector from every row passed to predict)" + hint
    )


#: 1e-2 in float64 is M * 2**-59; (U, V, W) and (U2, V2, W2) have squares summing to M and to M + 2
M_001 = 5764607523034235
AT, ABOVE = (75924999, 35297, 28355), (75925008, 26058, 2053)


def two_rows(uvw: tuple[int, int, int]) -> np.ndarray:
    """Rows (u, v, w) 2**7 and (u - 16, v, w) 2**7: every column's population variance is exact, total V = 2**20
    (deviations +-2**10 in the first column), and the largest squared row norm is (u^2 + v^2 + w^2) 2**14."""
    top = np.array(uvw, dtype=np.float64) * 2.0**7
    return np.stack([top, top - [2.0**11, 0.0, 0.0]])


def test_offset_data_is_built_exactly_on_and_just_above_the_float64_threshold():
    assert 1e-2 == M_001 * 2.0**-59
    assert sum(c * c for c in AT) == M_001 and sum(c * c for c in ABOVE) == M_001 + 2
    for uvw, on in ((AT, True), (ABOVE, False)):
        X = two_rows(uvw)
        V, largest = float(X.var(axis=0).sum()), float((X**2).sum(axis=1).max())
        assert V == 2.0**20 and largest == sum(c * c for c in uvw) * 2.0**14
        assert (0.5 * 2.0**-52 * largest == 1e-2 * V) is on and (0.5 * 2.0**-52 * largest >= 1e-2 * V)


@pytest.mark.parametrize("cls", MODELS)
def test_offset_refusal_threshold_is_inclusive_against_the_population_variance(cls):
    """float64: rounding error exactly 1e-2 V is accepted; the next representable data above is refused with the
    hand-computed message (two rows: a sample variance, or any variance not per column, would accept it)."""
    at, above = two_rows(AT), two_rows(ABOVE)
    assert make(cls, k=1, width=1).fit(at).n_samples_ == 2
    with refused(offset_refusal(above, torch.float64)):
        make(cls, k=1, width=1).fit(above)
    column = np.array([[2.0**34], [2.0**34 - 2.0**11]])  # one column is checked as well: V = 2**20, error 2**15
    with refused(offset_refusal(column, torch.float64)):
        make(cls, k=1, width=1).fit(column)
    lone = above[:1]  # a single row has no spread to lose: not refused
    assert make(cls, k=1, width=1).fit(lone).n_samples_ == 1


@pytest.mark.parametrize("cls", MODELS)
def test_float32_offset_refusal_suggests_float64_exactly_when_float64_passes(cls):
    """float32 refuses both; the hint appears where the float64 error is at the threshold, not just above it."""
    f32 = dict(device="cpu", dtype=torch.float32, **(dict(width=1) if cls is DCKMeans else {}))
    at, above = two_rows(AT), two_rows(ABOVE)
    message = offset_refusal(at, torch.float32)
    assert message.endswith(" or use dtype=torch.float64")
    with refused(message):
        cls(1, **f32).fit(at)
    message = offset_refusal(above, torch.float32)
    assert message.endswith("passed to predict)")
    with refused(message):
        cls(1, **f32).fit(above)


def test_qkmeans_with_exact_distances_skips_the_offset_check():
    """The SPN's SplitData clusterings (``exact_distances``) compute differences, not the expansion: offset data
    that the default refuses is fitted."""
    above = two_rows(ABOVE)
    with refused(offset_refusal(above, torch.float64)):
        make(QKMeans, k=1).fit(above)
    model = make(QKMeans, k=1)
    model.exact_distances = True
    assert model.fit(above).n_samples_ == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("cls", MODELS)
def test_data_is_moved_to_the_models_device(cls):
    """numpy data into a CUDA model, CUDA data into a CPU model: fit and predict run on the model's device."""
    X = blobs()
    gpu = make(cls, device="cuda").fit(X)
    assert gpu.cluster_centers_.device.type == "cuda" and gpu.predict(X).device.type == "cuda"
    Xc = torch.from_numpy(X).cuda()
    cpu = make(cls).fit(Xc)
    assert cpu.cluster_centers_.device.type == "cpu" and cpu.predict(Xc).device.type == "cpu"
    assert torch.equal(cpu.cluster_centers_, make(cls).fit(X).cluster_centers_)
