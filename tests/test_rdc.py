"""Batched RDC (Lopez-Paz et al. 2013) against independent references: scipy ranks, explicit one-hot copula
features, QR/SVD canonical correlations, Pearson correlation (k = 1), scipy graph components, brute-force
spanning trees; and the exactness of the cheap component certificate used by UnlearnSPN."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.sparse.csgraph import connected_components, minimum_spanning_tree
from scipy.stats import rankdata

from duck.deletion.rdc import (
    EIG_RCOND,
    Combinations,
    canonical_directions,
    category_tables,
    centred_features,
    certificate_pairs,
    components_still_hold,
    dependency_components,
    draw_projections,
    ecdf,
    ecdf_counts,
    ecdf_counts_after_removal,
    pair_sides,
    random_features,
    rdc_from_whitened,
    rdc_lower_bounds,
    rdc_matrix,
    rdc_pairs,
    spanning_forest,
    whiten,
    whitened_features,
)


def projections(cats: list[int], k: int = 10, seed: int = 0) -> torch.Tensor:
    return draw_projections(torch.Generator().manual_seed(seed), cats, k)


def mixed_data(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """x, an independent y, x^2 + noise, a categorical function of x, an independent categorical, ties."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=n), rng.normal(size=n)
    X = np.column_stack(
        [
            x,
            y,
            x**2 + 0.1 * rng.normal(size=n),
            (x > 0).astype(float) + 2 * (x > 1),  # categories 0, 1, 3 of a 4-category domain
            rng.integers(0, 3, n),
            np.round(y, 1),  # many ties
        ]
    )
    return X, [0, 0, 0, 4, 3, 0]


def qr_canonical_correlation(A: np.ndarray, B: np.ndarray, rcond: float) -> float:
    """Largest canonical correlation by orthonormal bases of the centred columns (Bjorck & Golub 1973)."""

    def basis(M: np.ndarray) -> np.ndarray:
        U, s, _ = np.linalg.svd(M - M.mean(0), full_matrices=False)
        return U[:, s > rcond * s[0]]

    return float(np.linalg.svd(basis(A).T @ basis(B), compute_uv=False)[0])


def test_ecdf_matches_scipy_max_ranks_with_ties():
    rng = np.random.default_rng(0)
    U = np.column_stack([rng.normal(size=300), rng.integers(0, 5, 300), np.zeros(300)])
    expected = np.column_stack([rankdata(c, method="max") / 300 for c in U.T])
    np.testing.assert_array_equal(ecdf(torch.from_numpy(U)).numpy(), expected)


def test_random_features_match_explicit_one_hot_copula():
    """Steps 1-2 written out literally: one-hot, per-column ECDF, append 1, project, scale s/(D+1), sine."""
    X, cats = mixed_data(80, seed=1)
    W = projections(cats, k=7)
    F = random_features(torch.from_numpy(X), cats, W, 1 / 6).numpy()  # (n, V, k)
    for v, K in enumerate(cats):
        cols = X[:, [v]] if K == 0 else np.eye(K)[X[:, v].astype(int)]
        P = np.column_stack([rankdata(c, method="max") / len(X) for c in cols.T])
        D = max(K, 1)
        ref = np.sin((1 / 6) / (D + 1) * np.column_stack([np.ones(len(X)), P]) @ W[v, : D + 1].numpy())
        np.testing.assert_allclose(F[:, v], ref, atol=1e-13)


def test_rdc_matches_qr_canonical_correlation_of_the_same_features():
    """Step 3 (batched eigen-whitening + one Gram + batched eigvalsh) against QR/SVD CCA pair by pair.
    With s = 1 the features are well conditioned, so both rank cut-offs keep the same directions."""
    X, cats = mixed_data(400, seed=2)
    W = projections(cats)
    R = rdc_matrix(torch.from_numpy(X), cats, W, scale=1.0).numpy()
    F = random_features(torch.from_numpy(X), cats, W, 1.0).numpy()
    for i in range(len(cats)):
        for j in range(i + 1, len(cats)):
            assert R[i, j] == pytest.approx(qr_canonical_correlation(F[:, i], F[:, j], 1e-5), abs=1e-6)
    assert np.allclose(R, R.T) and np.all(np.diag(R) == 1.0) and R.min() >= 0 and R.max() <= 1


def test_single_feature_rdc_is_absolute_pearson_correlation():
    X, cats = mixed_data(200, seed=3)
    W = projections(cats, k=1)
    R = rdc_matrix(torch.from_numpy(X), cats, W).numpy()
    F = random_features(torch.from_numpy(X), cats, W, 1 / 6).numpy()[:, :, 0]
    np.testing.assert_allclose(R[0, 1:3], np.abs(np.corrcoef(F.T)[0, 1:3]), atol=1e-9)


def test_rdc_detects_nonlinear_dependence_and_is_copula_invariant():
    X, cats = mixed_data(2000, seed=4)
    R = rdc_matrix(torch.from_numpy(X), cats, projections(cats)).numpy()
    assert R[0, 2] > 0.95  # y = x^2 + noise: no linear correlation, strong dependence
    assert R[0, 3] > 0.9  # a categorical function of x
    assert R[0, 1] < 0.15 and R[0, 4] < 0.15 and R[1, 4] < 0.15  # independent pairs
    Y = X.copy()
    Y[:, 0] = np.exp(3 * Y[:, 0])  # strictly increasing transform: same ranks, same RDC
    np.testing.assert_array_equal(rdc_matrix(torch.from_numpy(Y), cats, projections(cats)).numpy(), R)


def test_rdc_pairs_equal_full_matrix_entries():
    X, cats = mixed_data(300, seed=5)
    Z = whitened_features(torch.from_numpy(X), cats, projections(cats))
    R = rdc_from_whitened(Z).numpy()
    pairs = np.array([[0, 2], [1, 5], [3, 4], [0, 5]])
    np.testing.assert_allclose(rdc_pairs(Z, pairs).numpy(), R[pairs[:, 0], pairs[:, 1]], atol=1e-12)


def test_factorised_pair_blocks_equal_dense_ones_for_every_kind_of_pair():
    """Categorical pairs are read off contingency tables, the others off per-row features: both must give the
    blocks (and RDCs) of the dense (V, r, n) features."""
    X, cats = mixed_data(400, seed=9)
    X = np.column_stack([X, np.random.default_rng(1).integers(0, 5, 400)])  # a second categorical with K=5
    cats = cats + [5]
    parts = whiten(torch.from_numpy(X), cats, projections(cats))
    Z = parts.dense()
    np.testing.assert_array_equal(Z.numpy(), whitened_features(torch.from_numpy(X), cats, projections(cats)).numpy())
    pairs = np.array([[3, 4], [3, 6], [4, 6], [0, 3], [1, 2], [5, 6], [0, 1]])  # cat-cat, cat-gauss, gauss-gauss
    dense_blocks = torch.bmm(Z[pairs[:, 0]], Z[pairs[:, 1]].mT) / (X.shape[0] - 1)
    np.testing.assert_allclose(parts.pair_blocks(pairs).numpy(), dense_blocks.numpy(), atol=1e-12)
    R = rdc_from_whitened(Z).numpy()
    np.testing.assert_allclose(rdc_pairs(parts, pairs).numpy(), R[pairs[:, 0], pairs[:, 1]], atol=1e-12)
    np.testing.assert_allclose(rdc_from_whitened(parts).numpy(), R, atol=1e-12)
    # a categorical domain too large for tables on few rows falls back to per-row features, same blocks
    Xw = np.column_stack([X[:40, :4], np.arange(40) % 37])
    big = whiten(torch.from_numpy(Xw), [0, 0, 0, 4, 37], projections([0, 0, 0, 4, 37]))
    Zw = big.dense()
    dense_w = torch.bmm(Zw[[3, 0]], Zw[[4, 4]].mT) / 39
    np.testing.assert_allclose(big.pair_blocks(np.array([[3, 4], [0, 4]])).numpy(), dense_w.numpy(), atol=1e-12)


def test_ecdf_counts_after_removal_equal_a_fresh_sort():
    rng = np.random.default_rng(10)
    for trial in range(20):
        n = int(rng.integers(2, 60))
        U = torch.from_numpy(np.round(rng.normal(size=(n, 3)), int(trial % 3)))  # many ties for some trials
        removed = rng.choice(n, int(rng.integers(0, n)), replace=False)
        kept = np.setdiff1d(np.arange(n), removed)
        updated = ecdf_counts_after_removal(ecdf_counts(U)[kept], U[kept], U[removed])
        assert updated.dtype == torch.int64
        torch.testing.assert_close(updated, ecdf_counts(U[kept]), rtol=0, atol=0)
    # the counts give the ECDF of the scipy reference
    U = torch.from_numpy(rng.integers(0, 4, (30, 2)).astype(float))
    np.testing.assert_array_equal((ecdf_counts(U).double() / 30).numpy(), ecdf(U).numpy())


def test_dependency_components_match_scipy_on_random_graphs():
    rng = np.random.default_rng(6)
    for _ in range(50):
        V = int(rng.integers(1, 15))
        A = rng.random((V, V))
        A = (A + A.T) / 2
        comps = dependency_components(A, 0.8)
        n_ref, labels = connected_components(A >= 0.8, directed=False)
        assert len(comps) == n_ref
        assert sorted(v for c in comps for v in c) == list(range(V))
        for comp in comps:
            assert len({labels[v] for v in comp}) == 1 and list(comp) == sorted(comp)
        assert [c[0] for c in comps] == sorted(c[0] for c in comps)


def test_spanning_forest_is_a_maximum_spanning_forest():
    rng = np.random.default_rng(7)
    for _ in range(20):
        V = int(rng.integers(2, 12))
        A = rng.random((V, V)) + 0.1
        A = (A + A.T) / 2
        comps = dependency_components(A, 0.7)
        edges = spanning_forest(A, comps)
        assert len(edges) == V - len(comps)
        n_comp, _ = (
            connected_components(
                np.bincount(edges[:, 0] * V + edges[:, 1], minlength=V * V).reshape(V, V) > 0, directed=False
            )
            if len(edges)
            else (V, None)
        )
        assert n_comp == len(comps)
        # same total weight as scipy's minimum spanning forest of the negated weights inside the components
        inside = np.zeros((V, V))
        for comp in comps:
            inside[np.ix_(comp, comp)] = 3.0 - A[np.ix_(comp, comp)]
        np.fill_diagonal(inside, 0)
        ref = (3.0 * (V - len(comps))) - minimum_spanning_tree(inside).sum()
        assert A[edges[:, 0], edges[:, 1]].sum() == pytest.approx(ref)


def test_component_certificate_never_disagrees_with_the_full_matrix():
    """On random removals from dependent / independent data: whenever the certificate holds, recomputing the
    full matrix gives the stored components (so the update keeps LearnSPN's decision exactly)."""
    rng = np.random.default_rng(8)
    n_holds = 0
    for trial in range(12):
        X, cats = mixed_data(150, seed=100 + trial)
        W = projections(cats, seed=trial)
        R = rdc_matrix(torch.from_numpy(X), cats, W).numpy()
        comps = dependency_components(R, 0.3)
        cert = certificate_pairs(comps, R)
        keep = np.ones(len(X), dtype=bool)
        for _ in range(5):
            keep[rng.choice(np.flatnonzero(keep), 3, replace=False)] = False
            Z = whitened_features(torch.from_numpy(X[keep]), cats, W)
            full = dependency_components(rdc_from_whitened(Z), 0.3)
            if cert is not None:
                holds, _ = components_still_hold(Z, cert[0], cert[1], 0.3, 1e-9)
                n_holds += holds
                assert not holds or full == comps
    assert n_holds > 10


def test_raw_feature_helpers_equal_dense_computations():
    """covariances / sq_sums / projected of the factorised raw features equal the same sums on the dense
    per-row features (categorical variables are handled through their category tables)."""
    X, cats = mixed_data(200, seed=3)
    F = centred_features(torch.from_numpy(X), cats, projections(cats))
    D = F.dense()  # (V, k, n)
    raw = random_features(torch.from_numpy(X), cats, projections(cats), 1 / 6)  # (n, V, k)
    np.testing.assert_allclose(D.numpy(), (raw - raw.mean(0)).permute(1, 2, 0).numpy(), atol=1e-12)
    np.testing.assert_allclose(F.covariances().numpy(), (D @ D.mT / 199).numpy(), atol=1e-12)
    np.testing.assert_allclose(F.sq_sums().numpy(), (D * D).sum((1, 2)).numpy(), atol=1e-12)
    variables = np.array([3, 0, 4, 3, 5, 0, 2, 0])
    coef = torch.randn(8, D.shape[1], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    expected = torch.einsum("mkn,mk->mn", D[variables], coef)
    np.testing.assert_allclose(F.projected(Combinations.of(F, variables, coef)).numpy(), expected.numpy(), atol=1e-12)
    # the whitened features are the raw ones times P_v, and identity-covariance on the kept directions
    Z = F.whitened()
    np.testing.assert_allclose(Z.dense().numpy(), (Z.whitening.mT @ D).numpy(), atol=1e-12)
    reference = whitened_features(torch.from_numpy(X), cats, projections(cats))
    np.testing.assert_allclose(Z.dense().numpy(), reference.numpy(), atol=1e-12)


def test_rdc_lower_bounds_never_exceed_the_rdc_of_the_new_rows():
    """The bound (rdc_lower_bounds) holds for any coefficient vectors: canonical directions of earlier rows,
    random ones, and directions through nearly-dropped eigen-directions (where the truncation term matters);
    with the directions of the same rows it is the restricted canonical correlation minus a small term."""
    rng = np.random.default_rng(4)
    pairs = np.array([[0, 2], [0, 3], [3, 4], [1, 5], [0, 1], [2, 5], [4, 1]])
    n_tight = 0
    for trial in range(10):
        X, cats = mixed_data(160, seed=200 + trial)
        W = projections(cats, seed=trial)
        Z = whiten(torch.from_numpy(X), cats, W)
        sides = canonical_directions(Z, pairs)
        same = rdc_lower_bounds(centred_features(torch.from_numpy(X), cats, W), sides)
        exact = rdc_pairs(Z, pairs)
        assert (same <= exact + 1e-12).all()
        n_tight += int(((exact - same) < 0.1)[exact > 0.3].all())
        random_a, random_b = torch.randn(2, len(pairs), W.shape[2], dtype=torch.float64)
        candidates = [
            sides,
            pair_sides(Z, pairs, random_a, random_b),
            canonical_directions(Z, pairs, rcond=EIG_RCOND),  # through the smallest kept directions
        ]
        keep = np.ones(len(X), dtype=bool)
        for _ in range(4):
            keep[rng.choice(np.flatnonzero(keep), int(rng.integers(1, 6)), replace=False)] = False
            Xk = torch.from_numpy(X[keep])
            F = centred_features(Xk, cats, W)
            exact = rdc_pairs(whiten(Xk, cats, W), pairs)
            for candidate in candidates:
                bound = rdc_lower_bounds(F, candidate)
                assert (bound <= exact + 1e-12).all(), (trial, (bound - exact).max())
    assert n_tight >= 8


def test_rdc_lower_bound_of_a_degenerate_direction_certifies_nothing():
    X, cats = mixed_data(100, seed=1)
    W = projections(cats)
    F = centred_features(torch.from_numpy(X), cats, W)
    a = torch.ones(2, W.shape[2], dtype=torch.float64)
    bound = rdc_lower_bounds(F, pair_sides(F, np.array([[0, 3], [3, 2]]), a, torch.zeros_like(a)))  # v = 0
    assert (bound == -1.0).all()
    assert rdc_lower_bounds(F, pair_sides(F, np.zeros((0, 2), dtype=np.int64), a[:0], a[:0])).shape == (0,)


def test_category_tables_agree_on_torch_and_numpy():
    """The host path (numpy) gives the torch path's category tables and counts."""
    rng = np.random.default_rng(0)
    codes = np.column_stack([rng.integers(0, 4, 90), rng.integers(0, 2, 90)])  # (n, Vc), domains 4 and 2
    W = projections([4, 2])
    tables_t, counts_t = category_tables(torch.from_numpy(codes), W)
    tables_n, counts_n = category_tables(codes, W.numpy())
    np.testing.assert_allclose(tables_n, tables_t.numpy(), atol=1e-14)
    np.testing.assert_array_equal(counts_n, counts_t.numpy())
    np.testing.assert_array_equal(counts_n[1, 2:], 0)  # padded categories of the 2-category variable
