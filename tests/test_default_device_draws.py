"""Seeded draws are made on the CPU whatever torch's default device is.

Every seeded component draws from a CPU ``torch.Generator`` so that a seed gives the same result on any device.
``torch.rand``/``randn``/``randint``/``randperm`` allocate on torch's *default* device unless told otherwise: under
``torch.set_default_device("cuda")`` a CPU generator then raises, and a user who sets it (common in notebooks)
could not build an LSH index, fit DC-k-means, or run DUCK's centroid subsampling. Each test runs the component
under ``torch.device("meta")`` (standing in for a CUDA default on this CPU-only machine: without ``device="cpu"``
the draw lands on ``meta`` and the result is lost or the next step raises) and asserts the result of a normal
run, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from test_lsh import clustered_points
from torch import nn

import duck.models.factory as factory
from attacks.batched import _BatchSource
from baselines.erm_ktp import learn_erm_mask
from baselines.kgltop2 import retain_subset
from duck.deletion._kmeans_ops import uniforms
from duck.deletion.dckmeans import DCKMeans
from duck.deletion.lsh import LSHIndex
from duck.deletion.rdc import draw_projections
from duck.privacy.mechanisms import top_h_without_replacement
from duck.unlearn.duck import class_centroids

X = np.random.default_rng(0).normal(size=(240, 4))


def under_meta(fn):
    """``fn()`` with ``meta`` as torch's default device."""
    with torch.device("meta"):
        return fn()


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert b.device == a.device == torch.device("cpu")
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_lsh_hash_functions():
    def build():
        idx = LSHIndex(4, 3, 5, 1.0, seed=2, device="cpu")
        return idx.projections, idx.offsets, idx.multipliers

    for a, b in zip(build(), under_meta(build), strict=True):
        same(a, b)


def test_kmeans_uniforms():
    same(uniforms(torch.Generator().manual_seed(5), 7), under_meta(lambda: uniforms(torch.Generator().manual_seed(5), 7)))


def test_dckmeans_leaf_assignment():
    def fit():
        m = DCKMeans(3, seed=1, device="cpu", min_leaf_per_cluster=5).fit(X)
        return m.cluster_centers_, m.predict(X)

    for a, b in zip(fit(), under_meta(fit), strict=True):
        same(a, b)


def test_rdc_projections():
    def draw():
        return draw_projections(torch.Generator().manual_seed(3), [1, 3, 2], 4)

    same(draw(), under_meta(draw))


def test_exponential_mechanism_top_h():
    def top():
        return top_h_without_replacement(np.arange(20.0), 5, 2.0, seed=9)

    assert under_meta(top) == top()


def test_kgltop2_retain_subset():
    same(retain_subset(np.arange(50), 10, 4), under_meta(lambda: retain_subset(np.arange(50), 10, 4)))


def test_erm_ktp_mask_order():
    torch.manual_seed(0)
    z, y, head = torch.randn(30, 6), torch.arange(30) % 3, nn.Linear(6, 3)

    def learn():
        return learn_erm_mask(z, y, head, 3, epochs=2, lr=0.1, lambda_reg=0.01, density=0.5, batch_size=8,
                              generator=torch.Generator().manual_seed(1)).detach()

    same(learn(), under_meta(learn))


@pytest.mark.parametrize("n", [5, 23])  # fewer rows than a batch (the sampler's extra draw) and several batches
def test_shadow_bank_batch_plan(n):
    src = _BatchSource.__new__(_BatchSource)
    src.subsets, src.batch_size = [torch.arange(100, 100 + n)], 8
    same(src._draw(0, torch.Generator().manual_seed(6)), under_meta(lambda: src._draw(0, torch.Generator().manual_seed(6))))


def test_duck_centroid_subsample():
    z, y = torch.randn(40, 3, generator=torch.Generator().manual_seed(0)), torch.arange(40) % 2

    def centroids():
        return class_centroids(z, y, max_per_class=5, generator=torch.Generator().manual_seed(8))[0]

    same(centroids(), under_meta(centroids))


def test_custom_model_probe_batch(monkeypatch):
    """``model=custom`` finds the head on a fixed random batch; that batch is the CPU seed-0 draw."""
    seen = []

    def capture(net, *, example, **_):
        seen.append(example)
        raise RuntimeError("captured")

    monkeypatch.setattr(factory, "wrap_model", capture)
    for run in (lambda f: f(), under_meta):
        with pytest.raises(RuntimeError, match="captured"):
            run(lambda: factory._custom_model(3, 1, 8, "torch.nn.Identity", None, {}))
    expected = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    same(expected, seen[0])
    same(expected, seen[1])


def test_spn_with_a_categorical_column():
    """The categorical codes' domain check builds its tensor beside the data, not on the default device: an SPN
    with a categorical column learns and scores under a non-CPU default (it raised "Tensor on device meta is not
    on the expected device cpu")."""
    from duck.deletion import learn_spn

    rng = np.random.default_rng(0)
    data = np.column_stack([rng.normal(size=40), rng.integers(0, 3, 40)])

    def build_and_score():
        spn = learn_spn(data, ["gaussian", "categorical"], min_instances=10, device="cpu")
        return spn.log_likelihood(data)

    same(build_and_score(), under_meta(build_and_score))


# --- whole sessions: every tensor on the component's own device (issue 39: "CUDA-only" mutants that drop a
# device= argument create their tensor on torch's default device; "meta" makes that visible on the CPU) --------


def same_session(session) -> None:
    """``session()`` (a list of results) under "meta" as torch's default device equals the plain run, on the CPU."""
    plain = session()
    meta = under_meta(session)
    assert len(meta) == len(plain)
    for a, b in zip(plain, meta, strict=True):
        same(a, b)


def _cpu_data(seed: int = 0, n: int = 150, d: int = 3) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).normal(size=(n, d)) + np.arange(n)[:, None] % 3 * 4.0)


def test_lsh_session():
    """Every public operation of a CPU index once (built, grown twice, points removed, hashed, a table read,
    queried, sampled by every method, by ids too): a notebook that sets ``torch.set_default_device("cuda")`` and
    asks for ``device="cpu"`` gets the same results, every tensor made on the index's own device."""

    def session():
        X = clustered_points(9, n=200, dim=6)
        index = LSHIndex(6, k=2, L=5, w=3.0, seed=3, device="cpu")
        out = [index.add(X[:150]), index.add(X[150:])]
        index.remove([1, 2, 3, 160])
        out += [index.ids, index.hash(torch.from_numpy(X[:5])), *index.table(2), *index.query(X[:4], 2.5)]
        counts = torch.from_numpy(np.array([3, 0, 5, 2]))
        for method, kw in (("uniform", {}), ("weighted", {}), ("exact_degree", {}), ("approx_degree", {}),
                           ("approx_degree", {"probes": "tables"})):
            out.append(index.sample(X[:4], 2.5, method, counts, seed=7, **kw))
        out.append(index.sample(np.array([0, 5]), 2.5, "uniform", 3, seed=1))
        assert len(out) == 16
        return out

    same_session(session)


def test_kmeans_ops_session():
    """The blocked partitions (weighted, one-hot and k > the one-hot limit, exact, with excluded rows), k-means++
    seeding with and without weights, host_take."""
    from duck.deletion._kmeans_ops import _ONE_HOT_MAX_K, host_take, kmeans_plusplus, partition, partition_exact

    def session():
        X = _cpu_data()
        w = torch.from_numpy(np.linspace(0.5, 2.0, X.shape[0]))
        active = torch.from_numpy(np.arange(X.shape[0]) % 7 != 0)
        out = []
        for k in (3, _ONE_HOT_MAX_K + 2):
            C = X[:k].clone()
            for kw in ({}, {"weights": w}, {"active": active}, {"weights": w, "active": active}):
                p = partition(X, C, **kw)
                out += [p.labels, p.sums, p.masses, p.min_sq_dist]
        p = partition_exact(X, X[:2].clone(), active=active)
        out += [p.labels, p.sums, p.masses, p.min_sq_dist]
        for kw in ({}, {"weights": w}):
            out.append(torch.tensor(kmeans_plusplus(X, 4, torch.Generator().manual_seed(2), **kw), device="cpu"))
        out.append(host_take(X, np.array([4, 0, 9])))
        return out

    same_session(session)


def test_qkmeans_session():
    """Q-k-means fitted, predicted, rows deleted (one that changes the model, one replayed), its state read."""
    from duck.deletion.qkmeans import QKMeans

    def session():
        m = QKMeans(3, seed=4, device="cpu").fit(_cpu_data(1))
        out = [m.cluster_centers_, m.labels_, m.predict(_cpu_data(2, n=10)), m.inertia_]
        for ids in ([0], [5, 6, 7], list(range(40, 60))):
            m.delete(ids)
            out += [m.cluster_centers_, m.labels_, m.ids_]
        kept = m.ids_.numpy()
        replayed = QKMeans(3, seed=4, device="cpu").fit(_cpu_data(1)[kept], ids=kept, replay=m.random_state_)
        return [*out, replayed.cluster_centers_, replayed.labels_]

    same_session(session)


def test_dckmeans_session():
    """DC-k-means fitted (with sample weights in its node solves), rows deleted, refitted by replay."""

    def session():
        m = DCKMeans(3, seed=1, device="cpu", min_leaf_per_cluster=5).fit(_cpu_data(3))
        out = [m.cluster_centers_, m.labels_, m.predict(_cpu_data(4, n=10))]
        m.delete([0, 1, 2, 70])
        out += [m.cluster_centers_, m.labels_, m.ids_]
        return out

    same_session(session)


def test_kmeans_pp_session():
    """k-means++ with Lloyd (weighted too), predicted, rows deleted (a retrain)."""
    from duck.deletion.kmeans_pp import KMeansPP

    def session():
        X = _cpu_data(5)
        m = KMeansPP(3, seed=2, device="cpu").fit(X)
        out = [m.cluster_centers_, m.labels_, m.predict(_cpu_data(6, n=10)), m.inertia_]
        m.delete([0, 4])
        out += [m.cluster_centers_, m.labels_, m.ids_]
        w = KMeansPP(3, seed=2, device="cpu").fit(X, sample_weight=np.linspace(1.0, 3.0, X.shape[0]))
        return [*out, w.cluster_centers_, w.labels_]

    same_session(session)


def test_rdc_session():
    """The RDC on two Gaussian and two categorical columns: random features, the matrix, pairs of every kind
    (Gaussian-Gaussian, Gaussian-categorical, categorical-categorical), the factorised features' blocks, and the
    certificates' canonical directions and lower bounds."""
    from duck.deletion.rdc import (
        canonical_directions,
        centred_features,
        random_features,
        rdc_lower_bounds,
        rdc_matrix,
        rdc_pairs,
    )

    rng = np.random.default_rng(7)
    n = 60
    codes = rng.integers(0, 3, size=(n, 2))
    u = rng.uniform(size=(n, 2))
    cats = [0, 0, 3, 3]
    pairs = np.array([[0, 1], [0, 2], [2, 3], [1, 3]])

    def session():
        X = torch.from_numpy(np.column_stack([u, codes]).astype(np.float64))
        P = draw_projections(torch.Generator().manual_seed(3), cats, 5)
        F = centred_features(X, cats, P)
        Z = F.whitened()
        sides = canonical_directions(Z, pairs)
        return [random_features(X, cats, P, 1 / 6), rdc_matrix(X, cats, P), rdc_pairs(Z, pairs),
                F.covariances(), F.sq_sums(), Z.pair_blocks(pairs), F.projected(sides), rdc_lower_bounds(F, sides)]

    same_session(session)


def test_privacy_session():
    """The DP statistics on the CPU: neighbour counts (all pairs, and with an LSH index), the local and smooth
    sensitivity bounds, the Gaussian mechanisms' noise, the exponential mechanism's choice, DP outlier counts
    (smooth and global), the top subspaces and the shareable report's statistics. Found with it, each raising under
    a GPU default: ``smooth_sensitivity_bound`` indexed its CPU band counts with positions made on torch's default
    device (under "meta": "Tensor.item() cannot be called on meta tensors"), ``subspace_utilities`` divided CPU
    counts by bounds made there, ``forget_outlier_counts`` built its per-subspace counts there; fixed."""
    from duck.privacy.mechanisms import exponential_mechanism, gaussian_mechanism, smooth_gaussian_mechanism
    from duck.privacy.neighbours import neighbour_counts
    from duck.privacy.outliers import dp_outlier_count, dp_top_subspaces
    from duck.privacy.shareable import shareable_outlier_statistics
    from duck.privacy.smooth_sensitivity import local_sensitivity_bound, smooth_sensitivity_bound

    def session():
        X = torch.from_numpy(np.random.default_rng(8).normal(size=(80, 3)))
        lsh = {"k": 2, "L": 4, "w": 4.0, "seed": 1}
        return [neighbour_counts(X, 1.0, device="cpu"), neighbour_counts(X, 1.0, [0, 2], lsh=lsh, device="cpu"),
                local_sensitivity_bound(X, 3, 1.0, device="cpu"),
                smooth_sensitivity_bound(X, 3, 1.0, 0.1, device="cpu"),
                smooth_sensitivity_bound(X[:20], 3, 1.0, 0.1, ball_count="exact", device="cpu"),
                gaussian_mechanism(5.0, 1.0, 0.5, 1e-5, seed=3).value,
                smooth_gaussian_mechanism(5.0, 2.0, 0.5, 1e-5, seed=3).value,
                exponential_mechanism(np.arange(6.0), 1.0, seed=4),
                dp_outlier_count(X, 3, 1.0, 0.5, 1e-5, seed=5, device="cpu").value,
                dp_outlier_count(X, 3, 1.0, 0.5, 1e-5, mechanism="global", subspace=[1], seed=5, device="cpu").value,
                dp_top_subspaces(X, 3, 1.0, 2, 1.0, 1, seed=6, device="cpu"),
                shareable_outlier_statistics(X[:30], X[30:], eps=1.0, delta=1e-5, k=3, r=1.0, n_components=2, h=1,
                                             seed=7, device="cpu")]

    same_session(session)
