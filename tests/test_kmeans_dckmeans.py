"""DC-k-means (seeds/000 §4.2, ALGORITHMS.md §6): tree, weighted merge, exact path-recompute deletion."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import make_blobs

from duck.deletion import DCKMeans
from duck.deletion.dckmeans import auto_width

F64 = dict(device="cpu", dtype=torch.float64)


def all_nodes_equal(a: DCKMeans, b: DCKMeans) -> bool:
    return all(
        torch.equal(ca, cb) and torch.equal(wa, wb)
        for level_a, level_b in zip(a.node_outputs_, b.node_outputs_, strict=True)
        for (ca, wa), (cb, wb) in zip(level_a, level_b, strict=True)
    )


def test_auto_width_balances_leaf_and_merge_sizes():
    assert auto_width(100_000, 5, 1) == 141  # floor(sqrt(n / k))
    assert auto_width(100_000, 5, 2) == 27  # floor((n / k) ** (1/3))
    assert auto_width(10, 5, 1) == 1
    for n, k, h in [(1797, 10, 1), (60_000, 10, 1), (5000, 3, 2)]:
        w = auto_width(n, k, h)
        assert w ** (h + 1) * k <= n < (w + 1) ** (h + 1) * k


def test_auto_width_leaf_size_floor():
    """With the floor, a leaf keeps >= m rows per cluster on average; large data keeps sqrt(n / k)."""
    assert auto_width(100_000, 5, 1, 20) == 141  # the Gaussian mixture: the floor does not bind
    assert auto_width(178, 3, 1, 20) == 2  # wine: 7 without the floor
    assert auto_width(1797, 10, 1, 20) == 8  # digits: 13 without the floor
    assert auto_width(50, 3, 1, 20) == 1  # too small for two leaves: plain k-means at the single leaf
    for n, k, h, m in [(178, 3, 1, 20), (1797, 10, 1, 20), (60_000, 10, 2, 20), (5000, 3, 2, 50)]:
        w = auto_width(n, k, h, m)
        assert w == 1 or w**h * k * m <= n
        assert w <= auto_width(n, k, h)
    assert DCKMeans(3, seed=0).fit(np.random.default_rng(0).normal(size=(178, 4))).width_ == 2
    assert DCKMeans(3, min_leaf_per_cluster=1, seed=0).fit(np.random.default_rng(0).normal(size=(178, 4))).width_ == 7


def test_exactness_under_random_deletion_sequences():
    """After every deletion every node equals a fresh fit replaying the leaf assignment and node seeds."""
    rng = np.random.default_rng(3)
    for trial in range(10):
        n, d, k = int(rng.integers(20, 150)), int(rng.integers(1, 4)), int(rng.integers(1, 4))
        X = rng.normal(size=(n, d)) * 3
        ids = rng.permutation(4 * n)[:n]
        params = dict(width=[2, 3, "auto"][trial % 3], height=1 + trial % 2, weighted=trial % 4 != 3)
        model = DCKMeans(k, seed=trial, **params, **F64).fit(X, ids=ids)
        alive = list(ids)
        for _ in range(15):
            if len(alive) < k + 4:
                break
            batch = [alive[i] for i in rng.choice(len(alive), int(rng.integers(1, 4)), replace=False)]
            assert model.delete(batch) is False
            alive = [a for a in alive if a not in batch]
            left = np.flatnonzero(np.isin(ids, alive))
            order = rng.permutation(left)  # any row order: nodes order their rows by id
            fresh = DCKMeans(k, seed=999, **params, **F64).fit(
                X[order], ids=ids[order], replay=model.random_state_
            )
            assert all_nodes_equal(model, fresh), trial
            assert model.n_retrains_ == 0


def test_deletion_recomputes_only_the_leaf_to_root_path():
    X, _ = make_blobs(n_samples=2000, centers=4, random_state=0)
    model = DCKMeans(4, width=5, height=2, seed=0, **F64).fit(X)  # 25 leaves, 5 internal nodes, 1 root
    assert model.n_node_fits_ == 25 + 5 + 1
    before = model.node_outputs_
    leaf = int(model._leaf_of_row[17])
    model.delete([17])
    assert model.n_node_fits_ == 31 + 3  # one leaf, its parent, the root
    after = model.node_outputs_
    for level, index in [(2, leaf), (1, leaf // 5), (0, 0)]:
        assert after[level][index] is not before[level][index]
    untouched = [
        (lvl, i)
        for lvl in range(3)
        for i in range(5**lvl)
        if (lvl, i) not in [(2, leaf), (1, leaf // 5), (0, 0)]
    ]
    assert all(after[lvl][i] is before[lvl][i] for lvl, i in untouched)


def test_weighted_merge_conserves_mass_and_is_a_weighted_mean():
    X, _ = make_blobs(n_samples=1500, centers=3, cluster_std=2.0, random_state=1)
    model = DCKMeans(3, width=6, n_iter=200, seed=0, **F64).fit(X)
    leaves = model.node_outputs_[1]
    assert sum(float(w.sum()) for _, w in leaves) == 1500  # leaf masses are cluster sizes
    root_centers, root_masses = model.node_outputs_[0][0]
    assert float(root_masses.sum()) == 1500  # weighted merge carries every row's mass to the root
    points = torch.cat([c for c, _ in leaves]).numpy()
    weights = torch.cat([w for _, w in leaves]).numpy()
    nearest = ((points[:, None] - root_centers.numpy()[None]) ** 2).sum(-1).argmin(1)
    for j in range(3):  # converged root: each centroid is the weighted mean of the leaf centroids it owns
        mask = nearest == j
        expected = (weights[mask, None] * points[mask]).sum(0) / weights[mask].sum()
        np.testing.assert_allclose(root_centers[j].numpy(), expected, atol=1e-8)
    model.delete(np.arange(100))
    assert float(model.node_outputs_[0][0][1].sum()) == 1400
    unweighted = DCKMeans(3, width=6, weighted=False, seed=0, **F64).fit(X)
    assert float(unweighted.node_outputs_[0][0][1].sum()) == sum(
        c.shape[0] for c, _ in unweighted.node_outputs_[1]
    )


def test_single_leaf_is_plain_kmeans_and_quality_on_blobs():
    X, y = make_blobs(n_samples=3000, centers=4, n_features=3, random_state=5)
    model = DCKMeans(4, seed=1, **F64).fit(X)
    assert model.width_ == auto_width(3000, 4, 1)
    from sklearn.metrics import normalized_mutual_info_score

    assert normalized_mutual_info_score(y, model.labels_.numpy()) > 0.95
    labels = ((X[:, None] - model.cluster_centers_.numpy()[None]) ** 2).sum(-1).argmin(1)
    np.testing.assert_array_equal(model.labels_.numpy(), labels)
    one_leaf = DCKMeans(4, width=1, seed=1, **F64).fit(X)
    leaf_centers, _ = one_leaf.node_outputs_[1][0]
    np.testing.assert_allclose(
        one_leaf.cluster_centers_.numpy(), leaf_centers.numpy()
    )  # k points -> identity


def test_leaves_that_empty_out_are_skipped():
    X = np.random.default_rng(0).normal(size=(40, 2))
    model = DCKMeans(2, width=8, seed=0, **F64).fit(X)
    rows_by_leaf = [np.flatnonzero(model._leaf_of_row == leaf) for leaf in range(8)]
    target = max(range(8), key=lambda i: len(rows_by_leaf[i]))
    model.delete(rows_by_leaf[target])
    assert model.node_outputs_[1][target][0].shape[0] == 0
    fresh_ids = np.setdiff1d(np.arange(40), rows_by_leaf[target])
    fresh = DCKMeans(2, width=8, **F64).fit(X[fresh_ids], ids=fresh_ids, replay=model.random_state_)
    assert all_nodes_equal(model, fresh)


def test_result_does_not_depend_on_the_row_order():
    """Leaves are drawn in stable-id order (module docstring): a permutation of the rows with their ids gives
    the same tree, centroids and labels (per id); before, leaves followed row positions."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 3))
    ids = rng.choice(10_000, 400, replace=False)
    perm = rng.permutation(400)
    a = DCKMeans(3, seed=0, dtype=torch.float64).fit(X, ids=ids)
    b = DCKMeans(3, seed=0, dtype=torch.float64).fit(X[perm], ids=ids[perm])
    assert all_nodes_equal(a, b) and torch.equal(a.cluster_centers_, b.cluster_centers_)
    by_id = dict(zip(b.ids_.tolist(), b.labels_.tolist(), strict=True))
    assert a.labels_.tolist() == [by_id[i] for i in a.ids_.tolist()]
