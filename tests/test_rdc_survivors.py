"""RDC feature half (duck.deletion.rdc): properties that the main RDC tests leave open -- dtypes of the scaled
projections, the documented N(0, 1) draw, the whitening rank and rcond, single-kind and one-category nodes,
supplied ECDF counts, the numpy host paths, tiny n -- each against a brute-force / independent reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from duck.deletion.rdc import (
    Combinations,
    FeatureMap,
    _whitening,
    category_tables,
    centred_features,
    draw_projections,
    ecdf_counts,
    ecdf_counts_after_removal,
    random_features,
    whiten,
)


def projections(cats: list[int], k: int = 6, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return draw_projections(torch.Generator().manual_seed(seed), cats, k, dtype)


def ranks(col: np.ndarray) -> np.ndarray:
    """Brute-force ECDF count #{j : u_j <= u_i}."""
    return (col[None, :] <= col[:, None]).sum(1)


def reference_features(X: np.ndarray, cats: list[int], W: np.ndarray, s: float) -> np.ndarray:
    """Steps 1-2 written out: one-hot, per-column ECDF, [1, P] W scaled by s / (D + 1), sine. -> (n, V, k)"""
    n = len(X)
    out = []
    for v, K in enumerate(cats):
        cols = X[:, [v]] if K == 0 else np.eye(K)[X[:, v].astype(int)]
        P = np.column_stack([ranks(c) / n for c in cols.T])
        D = max(K, 1)
        out.append(np.sin(s / (D + 1) * np.column_stack([np.ones(n), P]) @ W[v, : D + 1]))
    return np.stack(out, axis=1)


def data(n: int, cats: list[int], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    cols = []
    for K in cats:
        cols.append(x + rng.normal(size=n) if K == 0 else (rng.integers(0, K, n) + (x > 0)) % max(K, 1))
    return np.column_stack(cols).astype(float)


def test_draw_projections_are_the_documented_standard_normal_draw():
    """One float64 N(0, 1) draw of shape (V, Dmax+1, k) from the generator, rows beyond D_v zeroed; a Gaussian
    variable has D = 1, so an all-Gaussian node has Dmax + 1 = 2 rows; the requested dtype is honoured."""
    for cats in ([0, 0, 0], [0, 3, 1, 0, 2]):
        dims = [max(K, 1) for K in cats]
        W = projections(cats, k=5, seed=3)
        ref = torch.randn(len(cats), max(dims) + 1, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        assert W.shape == (len(cats), max(dims) + 1, 5) and W.dtype == torch.float64
        for v, D in enumerate(dims):
            torch.testing.assert_close(W[v, : D + 1], ref[v, : D + 1], rtol=0, atol=0)
            assert (W[v, D + 1 :] == 0).all()
    W32 = projections([0, 3], k=4, seed=1, dtype=torch.float32)
    assert W32.dtype == torch.float32
    torch.testing.assert_close(W32, projections([0, 3], k=4, seed=1).float(), rtol=0, atol=0)


def test_float32_data_gives_float32_features_whatever_the_projections_dtype():
    """The scaled projections follow the data's dtype: float64 projections on float32 rows give float32
    features, equal (to float32 precision) to the float64 ones."""
    cats = [0, 3, 0]
    X = data(50, cats, seed=2)
    W = projections(cats)
    X32 = torch.from_numpy(X).float()
    F = centred_features(X32, cats, W)
    assert F.Zg.dtype == torch.float32 and F.z_tables.dtype == torch.float32
    fmap = FeatureMap.build(cats, W, 1 / 6, X32)
    assert fmap.Wg.dtype == torch.float32 and fmap.Wc.dtype == torch.float32
    assert fmap.Wg.shape == (2, 2, W.shape[2], 1)  # [W_0, W_1] of each Gaussian variable
    F64 = centred_features(torch.from_numpy(X), cats, W)
    np.testing.assert_allclose(F.dense().numpy(), F64.dense().numpy(), atol=1e-5)
    assert whiten(X32, cats, W).dense().dtype == torch.float32
    np.testing.assert_allclose(
        random_features(X32, cats, W, 1 / 6).numpy(), reference_features(X, cats, W.numpy(), 1 / 6), atol=1e-5
    )


def test_whitening_rank_and_dropped_eigenvalues_on_hand_built_covariances():
    """Diagonal covariances with known spectra: kept directions (eigenvalue > rcond * largest) are whitened,
    dropped ones are zero columns with eigenvalue 0, and r is the largest per-variable kept count."""
    rcond = 0.1
    one_each = torch.stack([torch.diag(torch.tensor([0.01, 0.02, 4.0])), torch.diag(torch.tensor([0.001, 9.0, 0.05]))])
    P, evals = _whitening(one_each.double(), rcond)
    assert P.shape == (2, 3, 1) and evals.shape == (2, 1)  # r = 1: one direction kept per variable
    torch.testing.assert_close(evals[:, 0], torch.tensor([4.0, 9.0], dtype=torch.float64))
    torch.testing.assert_close(P.mT @ one_each.double() @ P, torch.ones(2, 1, 1, dtype=torch.float64))

    two_and_one = torch.stack([torch.diag(torch.tensor([1.0, 0.5, 0.001])), torch.diag(torch.tensor([0.0, 2.0, 0.0]))])
    P, evals = _whitening(two_and_one.double(), rcond)
    assert P.shape == (2, 3, 2)
    torch.testing.assert_close(evals, torch.tensor([[0.5, 1.0], [0.0, 2.0]], dtype=torch.float64))
    assert (P[1, :, 0] == 0).all()  # the dropped direction of variable 1
    C = P.mT @ two_and_one.double() @ P
    torch.testing.assert_close(C, torch.diag_embed((evals > 0).double()))

    P, evals = _whitening(torch.zeros(2, 3, 3, dtype=torch.float64), rcond)  # constant variables: nothing kept
    assert P.shape == (2, 3, 1) and (P == 0).all() and (evals == 0).all()


def test_categorical_variable_with_a_single_category_is_a_constant_feature():
    """K = 1: the one indicator column is all ones, ECDF 1, so the feature is sin(s/2 (W_0 + W_1)) on every
    row; it still counts as a (categorical) variable, with centred features 0."""
    cats = [0, 1, 3]
    X = data(40, cats, seed=5)
    W = projections(cats)
    F = random_features(torch.from_numpy(X), cats, W, 1 / 6).numpy()
    np.testing.assert_allclose(F, reference_features(X, cats, W.numpy(), 1 / 6), atol=1e-13)
    C = centred_features(torch.from_numpy(X), cats, W)
    assert C.n_vars == 3 and list(C.categorical) == [1, 2]
    D = C.dense().numpy()
    assert D.shape == (3, W.shape[2], 40)
    np.testing.assert_allclose(D, (F - F.mean(0)).transpose(1, 2, 0), atol=1e-12)


def test_supplied_gauss_counts_replace_the_sort_and_are_kept():
    """centred_features / whiten with ``gauss_counts`` use those counts as the Gaussian ECDF (so the features
    are those of any data with these counts) and keep them, as whitening keeps counts and category counts."""
    cats = [0, 4, 0]
    X = data(60, cats, seed=7)
    Y = X.copy()
    Y[:, [0, 2]] = np.random.default_rng(8).normal(size=(60, 2))  # other Gaussian columns, same categorical one
    counts_y = ecdf_counts(torch.from_numpy(Y[:, [0, 2]]))
    W = projections(cats)
    got = centred_features(torch.from_numpy(X), cats, W, gauss_counts=counts_y)
    ref = centred_features(torch.from_numpy(Y), cats, W)
    torch.testing.assert_close(got.dense(), ref.dense(), rtol=0, atol=1e-13)
    assert got.gauss_counts is counts_y
    torch.testing.assert_close(
        whiten(torch.from_numpy(X), cats, W, gauss_counts=counts_y).dense(), whiten(torch.from_numpy(Y), cats, W).dense()
    )
    # counts computed when not supplied: the brute-force ECDF counts; category counts by brute force
    F = centred_features(torch.from_numpy(X), cats, W)
    brute = np.column_stack([ranks(X[:, v]) for v in (0, 2)])
    np.testing.assert_array_equal(F.gauss_counts.numpy(), brute)
    per_category = np.bincount(X[:, 1].astype(int), minlength=4)
    np.testing.assert_array_equal(F.cat_counts.numpy()[0], per_category)
    Z = F.whitened()
    np.testing.assert_array_equal(Z.gauss_counts.numpy(), brute)
    np.testing.assert_array_equal(Z.cat_counts.numpy()[0], per_category)


@pytest.mark.parametrize("cats", [[0, 0, 0], [3, 2, 4]], ids=["all-gaussian", "all-categorical"])
def test_single_kind_nodes_match_dense_computations(cats):
    """A node whose variables are all of one kind: covariances, squared sums, pair blocks, projections and
    whitening agree with the same sums on the dense per-row features."""
    n = 30
    X = data(n, cats, seed=11)
    W = projections(cats)
    F = centred_features(torch.from_numpy(X), cats, W)
    assert (F.Zg is None) == (cats[0] > 0) and (F.z_tables is None) == (cats[0] == 0)
    assert (F.codes is None) == (cats[0] == 0) and (F.cat_counts is None) == (cats[0] == 0)
    raw = random_features(torch.from_numpy(X), cats, W, 1 / 6)
    D = (raw - raw.mean(0)).permute(1, 2, 0)  # (V, k, n)
    torch.testing.assert_close(F.dense(), D)
    torch.testing.assert_close(F.covariances(), D @ D.mT / (n - 1))
    torch.testing.assert_close(F.sq_sums(), (D * D).sum((1, 2)))
    pairs = np.array([[0, 1], [1, 2], [2, 0]])
    torch.testing.assert_close(F.pair_blocks(pairs), D[pairs[:, 0]] @ D[pairs[:, 1]].mT / (n - 1))
    assert F.pair_blocks(np.zeros((0, 2), dtype=np.int64)).shape == (0, F.rank, F.rank)
    variables = np.array([2, 0, 2])
    coef = torch.randn(3, W.shape[2], generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    torch.testing.assert_close(F.projected(Combinations.of(F, variables, coef)), torch.einsum("mkn,mk->mn", D[variables], coef))
    Z = F.whitened()
    Zd = Z.dense()
    cov = Zd @ Zd.mT / (n - 1)
    torch.testing.assert_close(cov, torch.diag_embed((Z.eigenvalues > 0).double()), atol=1e-5, rtol=0)  # near-1e-10 directions
    torch.testing.assert_close(Z.pair_blocks(pairs), Zd[pairs[:, 0]] @ Zd[pairs[:, 1]].mT / (n - 1))


def test_one_categorical_among_gaussians_dense_and_empty_rows():
    cats = [0, 0, 3]
    X = data(25, cats, seed=13)
    W = projections(cats)
    F = centred_features(torch.from_numpy(X), cats, W)
    raw = random_features(torch.from_numpy(X), cats, W, 1 / 6)
    D = (raw - raw.mean(0)).permute(1, 2, 0)
    assert F.dense().shape == (3, W.shape[2], 25)
    torch.testing.assert_close(F.dense(), D)
    assert F.rows(np.array([], dtype=np.int64)).shape == (0, W.shape[2], 25)
    assert F.rows([]).shape == (0, W.shape[2], 25)
    assert F.pair_blocks([]).shape == (0, W.shape[2], W.shape[2])


def test_two_rows_divide_by_n_minus_one():
    """n = 2: covariances and cross blocks (categorical pairs through contingency tables too) are sums / 1."""
    cats = [0, 2, 2]
    X = np.array([[0.3, 0, 1], [-1.2, 1, 0]])
    W = projections(cats)
    F = centred_features(torch.from_numpy(X), cats, W)
    raw = random_features(torch.from_numpy(X), cats, W, 1 / 6)
    D = (raw - raw.mean(0)).permute(1, 2, 0)
    torch.testing.assert_close(F.covariances(), D @ D.mT)
    pairs = np.array([[1, 2], [0, 1], [2, 1]])
    torch.testing.assert_close(F.pair_blocks(pairs), D[pairs[:, 0]] @ D[pairs[:, 1]].mT)


def test_ecdf_counts_after_removal_on_numpy_arrays():
    """The host path (numpy) gives the brute-force counts of the kept rows."""
    rng = np.random.default_rng(3)
    U = np.round(rng.normal(size=(40, 2)), 1)
    removed = np.array([3, 17, 22, 30])
    kept = np.setdiff1d(np.arange(40), removed)
    counts = np.column_stack([ranks(c) for c in U.T])[kept]
    updated = ecdf_counts_after_removal(counts, U[kept], U[removed])
    assert isinstance(updated, np.ndarray) and updated.dtype == counts.dtype
    np.testing.assert_array_equal(updated, np.column_stack([ranks(c) for c in U[kept].T]))


def test_category_tables_against_explicit_one_hot_features():
    """Every category's feature value is sin([1, ECDF(one-hot of c)] W) with the scaled W; torch in, torch out;
    numpy float32 in, float32 tables and counts out."""
    rng = np.random.default_rng(4)
    n = 50
    codes = np.column_stack([rng.integers(0, 4, n), rng.integers(0, 2, n)])
    W = projections([4, 2]) * 0.2
    tables, counts = category_tables(torch.from_numpy(codes), W)
    assert isinstance(tables, torch.Tensor) and isinstance(counts, torch.Tensor)
    for v in range(2):
        K = int(codes[:, v].max()) + 1
        onehot = np.eye(K)[codes[:, v]]
        P = np.column_stack([ranks(c) / n for c in onehot.T])
        per_row = np.sin(np.column_stack([np.ones(n), P]) @ W[v, : K + 1].numpy())
        for c in range(K):
            np.testing.assert_allclose(tables[v, c].numpy(), per_row[codes[:, v] == c][0], atol=1e-13)
        np.testing.assert_array_equal(counts[v, :K].numpy(), np.bincount(codes[:, v], minlength=K))
    t32, c32 = category_tables(codes, W.numpy().astype(np.float32))
    assert t32.dtype == np.float32 and c32.dtype == np.float32
    np.testing.assert_allclose(t32, tables.numpy(), atol=1e-5)


def test_whitened_honours_rcond_and_refuses_twice():
    cats = [0, 3, 0]
    n = 120
    X = data(n, cats, seed=17)
    W = projections(cats, k=8)
    F = centred_features(torch.from_numpy(X), cats, W)
    loose, strict = F.whitened(), F.whitened(rcond=1e-3)
    cov = F.covariances()
    top = torch.linalg.eigvalsh(cov)[:, -1]
    kept = strict.eigenvalues > 0
    assert (strict.eigenvalues[kept] > 1e-3 * top[:, None].expand_as(kept)[kept]).all()
    assert kept.sum() < (loose.eigenvalues > 0).sum()  # the looser cut keeps more directions
    evals_all = torch.linalg.eigvalsh(cov)
    assert (kept.sum(1) == (evals_all > 1e-3 * top[:, None]).sum(1)).all()
    Zd = strict.dense()
    torch.testing.assert_close(Zd @ Zd.mT / (n - 1), torch.diag_embed(kept.double()), atol=1e-9, rtol=0)
    with pytest.raises(ValueError, match="^these features are already whitened$"):
        loose.whitened()


def test_whitening_drops_an_eigenvalue_exactly_at_rcond_times_the_largest():
    """The rule is "keep eigenvalues strictly above rcond x the largest": an exact tie (0.25 = 0.25 x 1.0, both
    exact in binary) is dropped, one just above it is kept."""
    cov = torch.diag(torch.tensor([0.25, 1.0], dtype=torch.float64))[None]  # (1, 2, 2), eigh returns the diagonal
    P, evals = _whitening(cov, rcond=0.25)
    assert P.shape == (1, 2, 1) and evals.tolist() == [[1.0]]
    above = torch.diag(torch.tensor([0.25 + 2**-20, 1.0], dtype=torch.float64))[None]
    P, evals = _whitening(above, rcond=0.25)
    assert P.shape == (1, 2, 2) and evals.tolist() == [[0.25 + 2**-20, 1.0]]
