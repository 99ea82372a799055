"""Q-k-means (seeds/000 §4.1, ALGORITHMS.md §5): quantiser, Alg. 1 vs a naive reference, exact deletion."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from sklearn.datasets import make_blobs

from duck.deletion import QKMeans
from duck.deletion._kmeans_ops import kmeans_plusplus, make_generator
from duck.deletion.qkmeans import balanced_means, lattice_cells, lattice_point

F64 = dict(device="cpu", dtype=torch.float64)


# ------------------------------------------------------------------------------------------ building blocks
def test_quantiser_lattice_error_bound_and_dithering():
    rng = np.random.default_rng(0)
    eps = 0.3
    c = rng.normal(size=(200, 5)) * 4
    theta = rng.random(5)
    cells = lattice_cells(c, eps, theta)
    q = lattice_point(cells, eps, theta)
    np.testing.assert_allclose(
        (q / eps + theta - 0.5), np.round(q / eps + theta - 0.5), atol=1e-9
    )  # on lattice
    assert np.abs(q - c).max() <= eps / 2 + 1e-12  # nearest vertex
    # random phase: the error is uniform on [-eps/2, eps/2), hence unbiased with variance eps^2 / 12
    point = np.full((1, 1), 1.234)
    phases = rng.random((40_000, 1))
    errors = lattice_point(lattice_cells(point, eps, phases), eps, phases) - point
    assert abs(errors.mean()) < 0.005 and errors.var() == pytest.approx(eps**2 / 12, rel=0.05)
    # numpy and torch give identical cells
    assert np.array_equal(lattice_cells(torch.from_numpy(c), eps, torch.from_numpy(theta)).numpy(), cells)


def test_balanced_means_formula():
    sums = np.array([[[10.0, 0.0], [3.0, 3.0], [0.0, 0.0]]])  # (1, 3, 2)
    sizes = np.array([[[10.0], [1.0], [0.0]]])  # cluster sizes 10, 1 (imbalanced), 0 (empty)
    prev = np.array([[[9.0, 9.0], [1.0, 1.0], [5.0, -5.0]]])
    m = 4.0  # gamma n / k
    out = balanced_means(sums, sizes, prev, m)
    np.testing.assert_allclose(out[0, 0], [1.0, 0.0])  # s >= m: plain mean
    np.testing.assert_allclose(
        out[0, 1], 0.25 * np.array([3.0, 3.0]) + 0.75 * np.array([1.0, 1.0])
    )  # (s/m) c + (1-s/m) prev
    np.testing.assert_allclose(out[0, 2], [5.0, -5.0])  # empty: previous centroid
    t = balanced_means(torch.from_numpy(sums), torch.from_numpy(sizes), torch.from_numpy(prev), m)
    np.testing.assert_array_equal(t.numpy(), out)


# -------------------------------------------------------------------------------------- Alg. 1 reference
def naive_qkmeans(X, seed_rows, phases, eps, gamma, T):
    """Alg. 1 written directly from the paper with explicit loops (independent of the package code)."""
    n, _ = X.shape
    k = len(seed_rows)

    def partition(c):
        d2 = ((X[:, None, :] - c[None]) ** 2).sum(-1)
        return d2.argmin(1), d2.min(1).sum()

    c = X[seed_rows].copy()
    labels, loss = partition(c)
    accepted = 0
    for tau in range(1, T + 1):
        m = gamma * n / k
        means = np.empty_like(c)
        for j in range(k):
            members = X[labels == j]
            s = len(members)
            mean = members.mean(0) if s else np.zeros(X.shape[1])
            means[j] = (s / m) * mean + (1 - s / m) * c[j] if s < m else mean
        theta = phases[tau - 1]
        q = eps * (np.round(means / eps + theta - 0.5) - (theta - 0.5))
        new_labels, new_loss = partition(q)
        if not new_loss < loss:
            break
        c, labels, loss, accepted = q, new_labels, new_loss, tau
    return c, labels, accepted


@pytest.mark.parametrize("eps", ["auto", 0.05, 1.0])
@pytest.mark.parametrize("gamma", [0.2, 0.9])
def test_fit_matches_naive_algorithm_1(eps, gamma):
    X, _ = make_blobs(n_samples=400, centers=4, n_features=3, cluster_std=2.0, random_state=1)
    X = np.concatenate([X, np.array([[30.0, 30.0, 30.0]] * 3)])  # a tiny far cluster: imbalance correction
    model = QKMeans(5, eps=eps, gamma=gamma, seed=3, **F64).fit(X)
    state = model.random_state_
    seed_rows = state["seed_ids"].numpy()
    centers, labels, accepted = naive_qkmeans(X, seed_rows, state["phases"].numpy(), model.eps_, gamma, 10)
    assert model.n_iter_ == accepted
    np.testing.assert_allclose(model.cluster_centers_.numpy(), centers, atol=1e-9)
    np.testing.assert_array_equal(model.labels_.numpy(), labels)
    losses = model.metadata_["losses"]
    assert np.all(np.diff(losses[: accepted + 1]) < 0)  # accepted iterations strictly decrease the loss


def test_auto_eps_is_scaled_spread_on_a_phased_half_octave_grid():
    X, _ = make_blobs(n_samples=3000, centers=3, n_features=4, random_state=0)
    for seed in range(4):
        model = QKMeans(3, eps_scale=0.5, seed=seed, **F64).fit(X * 7.0)
        n, d = X.shape
        raw = 0.5 * math.sqrt(model.metadata_["losses"][0] / (2 * n * d))
        assert 2**-0.25 - 1e-12 <= model.eps_ / raw <= 2**0.25 + 1e-12
        shift = model.random_state_["eps_phase"] - 0.5
        grid_index = math.log2(model.eps_) / 0.5 + shift
        assert grid_index == pytest.approx(round(grid_index), abs=1e-9)
    fixed = QKMeans(3, eps=0.25, **F64).fit(X)
    assert fixed.eps_ == 0.25


# ---------------------------------------------------------------------------------------- exact deletion
def models_equal(a: QKMeans, b: QKMeans) -> bool:
    if not (torch.equal(a.cluster_centers_, b.cluster_centers_) and torch.equal(a.labels_, b.labels_)):
        return False
    if not (torch.equal(a.ids_, b.ids_) and a.n_iter_ == b.n_iter_ and a.eps_ == b.eps_):
        return False
    ma, mb = a.metadata_, b.metadata_
    for key in ma:
        if key == "n_accepted":
            if ma[key] != mb[key]:
                return False
        elif ma[key].shape != mb[key].shape or not np.allclose(ma[key], mb[key], rtol=1e-9, atol=1e-9):
            return False
    return True


def test_exactness_under_random_deletion_sequences():
    """After every deletion the model equals a fresh fit on the remaining rows replaying its random draws."""
    rng = np.random.default_rng(7)
    seen = Counter()
    for trial in range(14):
        n, d, k = int(rng.integers(25, 120)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
        X = rng.normal(size=(k, d))[rng.integers(0, k, n)] * 3 + rng.normal(size=(n, d))
        ids = rng.permutation(5 * n)[:n]  # sparse, shuffled stable ids
        params = dict(eps=[0.05, 0.5, 3.0, "auto"][trial % 4], gamma=[0.2, 0.6][trial % 2], n_iter=6)
        model = QKMeans(k, seed=trial, **params, **F64).fit(X, ids=ids)
        alive = list(ids)
        for _ in range(25):
            if len(alive) < k + 4:
                break
            batch = [alive[i] for i in rng.choice(len(alive), int(rng.integers(1, 4)), replace=False)]
            predicted = model.deletion_changes_model(batch)
            seeds_before = model.seed_ids_.tolist()
            retrained = model.delete(batch)
            assert predicted == retrained
            seen["retrain" if retrained else "kept"] += 1
            seen[model.last_deletion_["reason"]] += 1
            seen["seed deleted"] += any(b in seeds_before for b in batch)
            alive = [a for a in alive if a not in batch]
            left = np.isin(ids, alive)
            fresh = QKMeans(k, seed=12345, **params, **F64).fit(
                X[left], ids=ids[left], replay=model.random_state_
            )
            assert models_equal(model, fresh), (trial, model.last_deletion_)
    # the sequences exercised every branch: kept models, retrains after changed centroids and deleted seeds
    assert seen["kept"] > 20 and seen["centroid"] > 5 and seen["seed"] > 5


def test_deleting_a_seed_redraws_every_seed():
    """ALGORITHMS.md §5.4: a deleted seed means a retrain on X minus x, so all k seeds are drawn afresh on the
    remaining rows (from the generator (seed, 1, i)), none kept."""
    X, _ = make_blobs(n_samples=300, centers=4, random_state=0)
    model = QKMeans(4, seed=1, **F64).fit(X)
    seeds = model.seed_ids_.tolist()
    assert model.delete([seeds[2]]) is True
    assert model.last_deletion_["reason"] == "seed" and model.n_retrains_ == 1
    new_seeds = model.seed_ids_.tolist()
    assert model.random_state_["n_reseeds"] == 1 and seeds[2] not in new_seeds
    left = np.setdiff1d(np.arange(300), [seeds[2]])
    drawn = kmeans_plusplus(torch.from_numpy(X[left]), 4, make_generator(1, 1, 0),
                            n_local_trials=model.n_local_trials)
    assert new_seeds == left[drawn].tolist()  # k-means++ on the remaining rows, no seed pinned
    again = QKMeans(4, seed=1, **F64).fit(X)
    again.delete([seeds[2]])
    assert again.seed_ids_.tolist() == new_seeds


def test_emptying_a_small_cluster_one_point_at_a_time():
    rng = np.random.default_rng(0)
    X = np.concatenate(
        [rng.normal(size=(60, 2)), rng.normal(size=(60, 2)) + 12, rng.normal(size=(4, 2)) * 0.1 + [0, 40]]
    )
    model = QKMeans(3, eps=0.5, seed=0, **F64).fit(X)
    small = list(range(120, 124))
    assert model.labels_[120:].unique().numel() == 1  # the far points form their own cluster
    assert len(set(model.labels_[120:].tolist()) & set(model.labels_[:120].tolist())) == 0
    for step, i in enumerate(small):
        model.delete([i])
        left = np.setdiff1d(np.arange(124), small[: step + 1])
        fresh = QKMeans(3, eps=0.5, **F64).fit(X[left], ids=left, replay=model.random_state_)
        assert models_equal(model, fresh)
    assert model.n_samples_ == 120 and model.cluster_centers_.shape == (3, 2)


def test_large_lattice_makes_most_deletions_free():
    X, _ = make_blobs(n_samples=5000, centers=3, n_features=2, random_state=0)
    model = QKMeans(3, eps_scale=2.0, seed=0, device="cpu").fit(X)  # float32 path
    centers = model.cluster_centers_.clone()
    ids = np.random.default_rng(0).permutation(5000)[:100]
    retrains = sum(model.delete([int(i)]) for i in ids)
    assert retrains <= 10 and model.n_retrains_ == retrains
    if retrains == 0:
        assert torch.equal(model.cluster_centers_, centers)


def test_replay_without_deletions_reproduces_the_fit():
    X, _ = make_blobs(n_samples=500, centers=3, random_state=4)
    a = QKMeans(3, seed=11, **F64).fit(X)
    b = QKMeans(3, seed=99, **F64).fit(X, replay=a.random_state_)
    assert models_equal(a, b)
    c = QKMeans(3, seed=11, **F64).fit(X)  # same seed: same draws
    assert models_equal(a, c)
    perm = np.random.default_rng(0).permutation(500)  # row order does not matter (ids do)
    d = QKMeans(3, **F64).fit(X[perm], ids=perm, replay=a.random_state_)
    order = np.argsort(d.ids_.numpy())
    np.testing.assert_array_equal(d.labels_.numpy()[order], a.labels_.numpy())
    np.testing.assert_allclose(d.cluster_centers_.numpy(), a.cluster_centers_.numpy(), atol=1e-12)


def test_deletion_erases_what_the_model_derived_from_the_row():
    """docs/kmeans.md: a deleted row's data does not outlive the request -- its values, squared norm and
    cluster history are erased even when no retrain (hence no compaction) happens."""
    X, _ = make_blobs(n_samples=400, centers=3, random_state=0)
    model = QKMeans(3, eps_scale=2.0, seed=0, **F64).fit(X)
    victim = next(i for i in range(400) if i not in model.seed_ids_.tolist()
                  and not model.deletion_changes_model([i]))
    model.delete([victim])
    row = victim  # rows stay in storage (masked) until a retrain compacts them
    assert float(model._X[row].abs().sum()) == 0.0 and float(model._x_sqnorm[row]) == 0.0
    assert (model._labels_hist[:, row] == 3).all()
    left = np.setdiff1d(np.arange(400), [victim])
    fresh = QKMeans(3, eps_scale=2.0, **F64).fit(X[left], ids=left, replay=model.random_state_)
    assert models_equal(model, fresh)
