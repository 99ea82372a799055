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
