"""KMeansPP and the shared k-means ops: scikit-learn parity, Lloyd fixed points, seeding, weights."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, make_blobs
from threadpoolctl import threadpool_limits

from duck.deletion import KMeansPP
from duck.deletion._kmeans_ops import (
    _inverse_cdf,
    assign,
    kmeans_plusplus,
    lloyd,
    make_generator,
    partition,
    sq_dists,
)
from duck.errors import DuckInputError


def brute_force_assign(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d2.argmin(1), d2.min(1)


def test_assign_matches_brute_force_and_blocks():
    rng = np.random.default_rng(0)
    X, C = rng.normal(size=(500, 7)), rng.normal(size=(6, 7))
    labels, d2 = assign(torch.from_numpy(X), torch.from_numpy(C))
    ref_labels, ref_d2 = brute_force_assign(X, C)
    np.testing.assert_array_equal(labels.numpy(), ref_labels)
    np.testing.assert_allclose(d2.numpy(), ref_d2, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(
        sq_dists(torch.from_numpy(X), torch.from_numpy(C)).numpy().min(1), ref_d2, atol=1e-10
    )
    import duck.deletion._kmeans_ops as ops

    old = ops._block_rows
    ops._block_rows = lambda d: 7  # many blocks, the last one partial
    try:
        blocked, blocked_d2 = assign(torch.from_numpy(X), torch.from_numpy(C))
        part = partition(torch.from_numpy(X), torch.from_numpy(C))
        active = torch.from_numpy(np.arange(500) % 3 != 0)
        masked = partition(torch.from_numpy(X), torch.from_numpy(C), active=active)
    finally:
        ops._block_rows = old
    np.testing.assert_array_equal(blocked.numpy(), ref_labels)
    np.testing.assert_allclose(blocked_d2.numpy(), ref_d2, atol=1e-10)
    np.testing.assert_array_equal(part.labels.numpy(), ref_labels)
    for j in range(6):  # one pass gives the cluster sums and sizes too; inactive rows count nowhere
        np.testing.assert_allclose(part.sums[j].numpy(), X[ref_labels == j].sum(0), atol=1e-9)
        keep = (ref_labels == j) & active.numpy()
        np.testing.assert_allclose(masked.sums[j].numpy(), X[keep].sum(0), atol=1e-9)
        assert int(part.masses[j]) == (ref_labels == j).sum() and int(masked.masses[j]) == keep.sum()
    assert (masked.labels.numpy()[~active.numpy()] == 6).all() and float(masked.min_sq_dist[0]) == 0.0


def test_ties_go_to_the_first_centre_like_argmin():
    """Integer data with centres on data points (and a duplicated centre) ties often: the blocked arg-min
    must pick the first minimising centre, as numpy/torch argmin do, and count each row once in the sums."""
    rng = np.random.default_rng(0)
    X = rng.integers(0, 3, size=(3000, 4)).astype(np.float64)
    C = np.concatenate([X[:5], X[4:5]])  # centre 5 duplicates centre 4
    d2 = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    ref = d2.argmin(1)
    assert (np.sort(d2, 1)[:, 0] == np.sort(d2, 1)[:, 1]).mean() > 0.1  # the case is really exercised
    labels, _ = assign(torch.from_numpy(X), torch.from_numpy(C))
    part = partition(torch.from_numpy(X), torch.from_numpy(C))
    np.testing.assert_array_equal(labels.numpy(), ref)
    np.testing.assert_array_equal(part.labels.numpy(), ref)
    np.testing.assert_array_equal(part.masses.numpy(), np.bincount(ref, minlength=6))
    np.testing.assert_allclose(part.sums.numpy(), np.stack([X[ref == j].sum(0) for j in range(6)]))


def test_inverse_cdf_sampling_frequencies():
    p = torch.tensor([0.0, 0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
    u = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    idx = _inverse_cdf(torch.cumsum(p, 0), u)
    freq = torch.bincount(idx, minlength=5).double() / u.numel()
    assert freq[0] == 0 and freq[2] == 0  # zero-mass items are never drawn
    np.testing.assert_allclose(freq.numpy(), p.numpy(), atol=5e-3)


def test_kmeans_plusplus_spreads_seeds_and_respects_weights():
    rng = np.random.default_rng(1)
    groups = [rng.normal(loc=10 * g, scale=0.01, size=(50, 2)) for g in range(4)]
    X = torch.from_numpy(np.concatenate(groups))
    for s in range(20):
        rows = kmeans_plusplus(X, 4, make_generator(s), n_local_trials=1)
        assert sorted(r // 50 for r in rows) == [0, 1, 2, 3]  # D^2 sampling: one seed per far-apart group
    w = torch.ones(200, dtype=torch.float64)
    w[:100] = 0.0  # rows of groups 0 and 1 weigh nothing
    for s in range(10):
        rows = kmeans_plusplus(X, 2, make_generator(s), weights=w)
        assert all(r >= 100 for r in rows) and len(set(rows)) == 2


def test_kmeans_plusplus_duplicates():
    X = torch.zeros(6, 2, dtype=torch.float64)  # all rows coincide: zero potential everywhere
    rows = kmeans_plusplus(X, 3, make_generator(0))
    assert len(set(rows)) == 3


def test_plain_kmeans_plusplus_law_matches_exact_enumeration():
    """n_local_trials=1 is Arthur & Vassilvitskii's k-means++: the law of the seed set, over 20,000 draws,
    matches the exact law enumerated over seeding orders (D^2 sampling)."""
    from itertools import permutations

    x = [3.0, 9.0, 10.0, 23.0, 29.0]
    law: dict[frozenset, float] = {}
    for order in permutations(range(5), 3):
        p, chosen = 1.0 / 5, [order[0]]
        for r in order[1:]:
            d2 = [min((x[q] - x[c]) ** 2 for c in chosen) for q in range(5)]
            p *= d2[r] / sum(d2)
            chosen.append(r)
        law[frozenset(order)] = law.get(frozenset(order), 0.0) + p
    X = torch.tensor(x, dtype=torch.float64)[:, None]
    n, counts = 20000, Counter()
    for s in range(n):
        counts[frozenset(kmeans_plusplus(X, 3, make_generator(7, s), n_local_trials=1))] += 1
    tv = 0.5 * sum(abs(counts[key] / n - p) for key, p in law.items())
    assert tv < 0.03, tv


def test_lloyd_converges_to_a_fixed_point():
    X, _ = make_blobs(n_samples=600, centers=4, n_features=3, random_state=0)
    Xt = torch.from_numpy(X)
    res = lloyd(Xt, Xt[:4].clone(), max_iter=300)
    assert res.converged
    labels, d2 = brute_force_assign(X, res.centers.numpy())
    np.testing.assert_array_equal(res.labels.numpy(), labels)
    for j in range(4):  # every centre is the mean of its cluster (closed form)
        np.testing.assert_allclose(res.centers[j].numpy(), X[labels == j].mean(0), atol=1e-10)
    assert res.inertia == pytest.approx(d2.sum(), rel=1e-10)


def test_weighted_lloyd_equals_duplicated_rows():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    counts = rng.integers(1, 4, size=60)
    init = torch.from_numpy(X[:3].copy())
    weighted = lloyd(torch.from_numpy(X), init, max_iter=50, weights=torch.from_numpy(counts.astype(float)))
    repeated = lloyd(torch.from_numpy(np.repeat(X, counts, axis=0)), init, max_iter=50)
    np.testing.assert_allclose(weighted.centers.numpy(), repeated.centers.numpy(), atol=1e-10)
    assert weighted.inertia == pytest.approx(repeated.inertia, rel=1e-10)


def test_loss_matches_sklearn_on_blobs():
    X, _ = make_blobs(n_samples=4000, centers=6, n_features=8, cluster_std=1.5, random_state=3)
    for seed in range(3):
        ours = KMeansPP(6, seed=seed, device="cpu", dtype=torch.float64).fit(X)
        theirs = KMeans(6, n_init=1, random_state=seed).fit(X)
        assert ours.inertia_ == pytest.approx(theirs.inertia_, rel=0.01)


def test_loss_close_to_sklearn_on_digits():
    X = load_digits().data
    with threadpool_limits(1):
        theirs = np.mean([KMeans(10, n_init=1, random_state=s).fit(X).inertia_ for s in range(4)])
    ours = np.mean([KMeansPP(10, seed=s, device="cpu").fit(X).inertia_ for s in range(4)])
    assert abs(ours / theirs - 1) < 0.02  # local optima differ per seed; averages agree


def test_fixed_iteration_baseline_and_delete_retrains():
    X, _ = make_blobs(n_samples=300, centers=3, random_state=1)
    model = KMeansPP(3, max_iter=10, tol=0.0, seed=0, device="cpu", dtype=torch.float64).fit(
        X, ids=np.arange(300) + 5
    )
    assert model.n_iter_ <= 10 and model.labels_.shape == (300,)
    assert model.delete([5, 6]) is True and model.n_retrains_ == 1
    assert model.n_samples_ == 298 and 5 not in model.ids_.tolist()
    labels, _ = brute_force_assign(X[2:], model.cluster_centers_.numpy())
    np.testing.assert_array_equal(model.labels_.numpy(), labels)
    assert model.inertia_ == pytest.approx(brute_force_assign(X[2:], model.cluster_centers_.numpy())[1].sum())


def test_predict_matches_brute_force():
    X, _ = make_blobs(n_samples=200, centers=3, random_state=2)
    model = KMeansPP(3, seed=0, device="cpu", dtype=torch.float64).fit(X)
    Q = np.random.default_rng(0).normal(size=(50, 2)) * 5
    np.testing.assert_array_equal(
        model.predict(Q).numpy(), brute_force_assign(Q, model.cluster_centers_.numpy())[0]
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_matches_cpu():
    X, _ = make_blobs(n_samples=2000, centers=4, random_state=0)
    cpu = KMeansPP(4, seed=0, device="cpu", dtype=torch.float64).fit(X)
    gpu = KMeansPP(4, seed=0, device="cuda", dtype=torch.float64).fit(X)
    np.testing.assert_allclose(gpu.cluster_centers_.cpu().numpy(), cpu.cluster_centers_.numpy(), atol=1e-8)


# ---------------------------------------------------------------------------------------------- issue 39
def _composed(X: np.ndarray, k: int, keys: tuple[int, int], *, weights=None, trials=None, tol=1e-4, max_iter=300):
    """The documented composition: k-means++ seeded by the generator of ``keys`` ((seed, 0) for fit, (seed, i)
    for the i-th retrain), then Lloyd from those seeds with scikit-learn's tolerance."""
    from duck.deletion._kmeans_ops import sklearn_tol

    Xt = torch.from_numpy(X)
    w = None if weights is None else torch.from_numpy(np.asarray(weights, dtype=np.float64))
    seeds = np.asarray(kmeans_plusplus(Xt, k, make_generator(*keys), weights=w, n_local_trials=trials))
    return seeds, lloyd(Xt, Xt[seeds], max_iter=max_iter, tol=sklearn_tol(Xt, tol), weights=w)


def test_fit_is_kmeans_plusplus_from_the_seed_then_lloyd():
    X, _ = make_blobs(n_samples=240, centers=5, cluster_std=2.5, random_state=3)
    for seed, trials, tol, max_iter in ((0, None, 1e-4, 300), (7, 1, 0.5, 300), (3, 4, 0.0, 2)):
        model = KMeansPP(5, seed=seed, n_local_trials=trials, tol=tol, max_iter=max_iter, device="cpu",
                         dtype=torch.float64).fit(X, ids=np.arange(240) * 2)
        seeds, want = _composed(X, 5, (seed, 0), trials=trials, tol=tol, max_iter=max_iter)
        assert model.seed_ids_.tolist() == (2 * seeds).tolist()
        torch.testing.assert_close(model.cluster_centers_, want.centers, rtol=0, atol=0)
        assert model.n_iter_ == want.n_iter and model.inertia_ == want.inertia
    assert KMeansPP(5, seed=1, device="cpu").fit(X).seed_ids_.tolist() != \
        KMeansPP(5, seed=2, device="cpu").fit(X).seed_ids_.tolist()


def test_weighted_fit_and_every_retrain_follow_their_own_generators():
    X, _ = make_blobs(n_samples=120, centers=3, random_state=4)
    w = np.random.default_rng(0).uniform(0.2, 3.0, 120)
    model = KMeansPP(3, seed=5, device="cpu", dtype=torch.float64).fit(X, sample_weight=w)
    seeds, want = _composed(X, 3, (5, 0), weights=w)
    assert model.seed_ids_.tolist() == seeds.tolist() and model.inertia_ == want.inertia
    keep = np.ones(120, dtype=bool)
    for i, gone in enumerate(([3, 50], [7]), start=1):
        model.delete(gone)
        keep[gone] = False
        seeds, want = _composed(X[keep], 3, (5, i), weights=w[keep])
        assert model.n_retrains_ == i
        assert model.seed_ids_.tolist() == np.flatnonzero(keep)[seeds].tolist()
        torch.testing.assert_close(model.cluster_centers_, want.centers, rtol=0, atol=0)
        assert model.inertia_ == want.inertia


def test_the_model_keeps_its_own_copy_of_the_weights():
    X, _ = make_blobs(n_samples=60, centers=2, random_state=5)
    w = torch.ones(60, dtype=torch.float64)
    model = KMeansPP(2, seed=0, device="cpu", dtype=torch.float64).fit(X, sample_weight=w)
    w[:30] = 0.0  # the caller's array changes after fit
    model.delete([59])
    control = KMeansPP(2, seed=0, device="cpu", dtype=torch.float64).fit(X, sample_weight=torch.ones(60,
                                                                                                 dtype=torch.float64))
    control.delete([59])
    torch.testing.assert_close(model.cluster_centers_, control.cluster_centers_, rtol=0, atol=0)


def test_deletion_keeps_n_clusters_positive_weights_or_refuses():
    X, _ = make_blobs(n_samples=12, centers=3, random_state=6)
    w = np.r_[np.full(3, 0.5), np.zeros(9)]  # exactly k = 3 positive weights (< 1 each)
    model = KMeansPP(3, seed=0, device="cpu", dtype=torch.float64).fit(X, sample_weight=w)
    assert model.delete([5]) is True  # a zero-weight row: 3 positive weights are left
    with pytest.raises(DuckInputError) as e:
        model.delete([1])
    assert str(e.value) == "deleting these ids would leave fewer positive-weight rows than n_clusters"
    assert model.n_samples_ == 11 and model.n_retrains_ == 1  # refused: nothing changed


def test_defaults_and_option_refusals():
    m = KMeansPP()
    assert (m.n_clusters, m.max_iter, m.tol, m.seed) == (8, 300, 1e-4, 0)
    X, _ = make_blobs(n_samples=100, centers=8, random_state=7)
    assert KMeansPP(device="cpu").fit(X).seed_ids_.tolist() == KMeansPP(8, seed=0, device="cpu").fit(X).seed_ids_.tolist()
    with pytest.raises(DuckInputError) as e:
        KMeansPP(3, max_iter=0)
    assert str(e.value) == "max_iter=0 must be an integer >= 1"
    with pytest.raises(DuckInputError) as e:
        KMeansPP(3, tol=-1.0)
    assert str(e.value) == "tol must be a finite number >= 0.0, got -1.0"
    assert KMeansPP(3, tol=0.0).tol == 0.0


def test_weight_refusals_name_the_entries_and_the_fix():
    X = np.random.default_rng(8).normal(size=(10, 2))
    model = KMeansPP(3, seed=0, device="cpu")
    cases = [
        (np.r_[-1.0, np.nan, -2, -3, np.inf, -4, np.ones(4)],
         "sample_weight must be finite and >= 0, got [-1.0, nan, -2.0, -3.0, inf] at entries [0, 1, 2, 3, 4]"),
        (np.r_[np.ones(2), np.zeros(8)], "sample_weight has fewer than n_clusters=3 positive entries"),
        (np.ones(9), "sample_weight must be a 1-D array of 10 weights (one per row of X), got shape (9,)"),
        (["a"] * 10, "sample_weight must be a real-valued numeric array, got dtype <U1"),
        (np.r_[np.full(2, 3e38), np.ones(8)].astype(np.float32),  # summed in float64: 6e38, not float32's inf
         "sample_weight sums to 6e+38, above the float32 maximum 3.4e+38; rescale the weights (the clustering "
         "depends only on their ratios)"),
    ]
    for w, message in cases:
        with pytest.raises(DuckInputError) as e:
            model.fit(X, sample_weight=w)
        assert str(e.value) == message
    with pytest.raises(DuckInputError) as e:
        model.fit(X, sample_weight=[[1.0, 2.0], [3.0]])
    assert str(e.value).startswith("sample_weight must be a numeric (n,) array: ")
    assert model.fit(X, sample_weight=np.r_[np.ones(3), np.zeros(7)]).n_samples_ == 10  # exactly k positive
    big = np.r_[np.finfo(np.float32).max, np.full(9, 1e-30)]
    assert model._as_weights(big, 10)[1] == float(np.finfo(np.float32).max)  # the largest total is allowed


def test_weighted_data_too_large_for_the_dtype_is_refused_with_both_remedies():
    X = np.full((10, 2), 1e16)
    X[0] = -1e16
    model = KMeansPP(2, seed=0, device="cpu")  # float32: 10 rows fit, a total weight of 1e6 does not
    model.fit(X)
    with pytest.raises(DuckInputError) as e:
        model.fit(X, sample_weight=np.full(10, 1e5))
    assert str(e.value).startswith("X values are too large for float32 (largest squared row norm 2e+32: squared "
                                   "distances weighted by sample_weight (total 1e+06) can reach 8e+38, above the "
                                   "float32 maximum 3.4e+38); rescale X or sample_weight (the clustering depends "
                                   "only on the weights' ratios) or use dtype=torch.float64")
