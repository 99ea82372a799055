"""RDC pairs / matrix, dependency components, spanning forests, component certificates and the lower bounds of
UnlearnSPN (duck.deletion.rdc), checked against independent numpy / scipy computations and brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy.sparse.csgraph import connected_components
from test_rdc import mixed_data, projections  # the shared data: Gaussian, x^2, categoricals, ties

from duck.deletion.rdc import (
    EIG_RCOND,
    Combinations,
    canonical_directions,
    centred_features,
    certificate_pairs,
    components_still_hold,
    dependency_components,
    pair_sides,
    rdc_from_whitened,
    rdc_lower_bounds,
    rdc_matrix,
    rdc_pairs,
    spanning_forest,
    whiten,
    whitened_features,
)


def test_two_rows_of_identical_variables_have_rdc_one():
    """n = 2: the cross-covariance divides by n - 1 = 1, so a variable and its copy have RDC exactly 1."""
    X = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64)
    W = projections([0, 0], k=3)
    Z = whitened_features(X, [0, 0], W)
    assert rdc_from_whitened(Z)[0, 1].item() == pytest.approx(1.0, abs=1e-9)
    assert rdc_pairs(Z, np.array([[0, 1]])).item() == pytest.approx(1.0, abs=1e-9)
    assert rdc_pairs(whiten(X, [0, 0], W), np.array([[0, 1]])).item() == pytest.approx(1.0, abs=1e-9)


def test_rdc_pairs_single_and_empty_selections_match_svd_of_whitened_cross_covariance():
    X, cats = mixed_data(150, seed=1)
    Z = whitened_features(torch.from_numpy(X), cats, projections(cats))
    n = X.shape[0]
    for i, j in [(0, 2), (1, 4), (3, 5)]:
        block = Z[i].numpy() @ Z[j].numpy().T / (n - 1)
        expected = np.linalg.svd(block, compute_uv=False)[0]
        got = rdc_pairs(Z, np.array([[i, j]]))
        assert got.shape == (1,)
        assert got.item() == pytest.approx(min(expected, 1.0), abs=1e-9)
    assert rdc_pairs(Z, np.zeros((0, 2), dtype=np.int64)).shape == (0,)
    assert rdc_pairs(whiten(torch.from_numpy(X), cats, projections(cats)), np.zeros((0, 2), dtype=np.int64)).shape == (0,)


def test_rdc_matrix_is_symmetric_unit_diagonal_and_within_unit_interval_even_for_copies_and_constants():
    """Diagonal 1 by definition (also for a constant variable), entries clipped to [0, 1] even where a variable
    and its exact copy make the canonical correlation 1 up to rounding."""
    rng = np.random.default_rng(2)
    for trial in range(6):
        x = rng.normal(size=120)
        X = np.column_stack([x, x, np.exp(x), np.zeros(120), -x, x])
        cats = [0] * 6
        R = rdc_matrix(torch.from_numpy(X), cats, projections(cats, seed=trial), scale=1.0).numpy()
        np.testing.assert_array_equal(R, R.T)
        np.testing.assert_array_equal(np.diag(R), 1.0)
        assert R.min() >= 0.0 and R.max() <= 1.0
        assert R[3, [0, 1, 2, 4, 5]].max() < 1e-6  # a constant is independent of everything
        for i, j in [(0, 1), (0, 2), (0, 5), (1, 5)]:
            assert R[i, j] == pytest.approx(1.0, abs=1e-7)


def test_integer_valued_positions_of_another_dtype_are_accepted():
    """Positions are cast to int64: float-typed whole numbers give the same results as int64 positions."""
    X, cats = mixed_data(120, seed=3)
    W = projections(cats)
    Xt = torch.from_numpy(X)
    Z = whiten(Xt, cats, W)
    D = Z.dense()
    pairs = np.array([[0, 2], [3, 4], [1, 5]])
    fpairs = pairs.astype(np.float64)
    np.testing.assert_array_equal(rdc_pairs(D, fpairs).numpy(), rdc_pairs(D, pairs).numpy())
    sides = canonical_directions(Z, pairs)
    fsides = canonical_directions(Z, fpairs)
    np.testing.assert_array_equal(fsides.coef.numpy(), sides.coef.numpy())
    F = centred_features(Xt, cats, W)
    np.testing.assert_array_equal(rdc_lower_bounds(F, fsides).numpy(), rdc_lower_bounds(F, sides).numpy())
    a, b = sides.coef[:3], sides.coef[3:]
    np.testing.assert_array_equal(
        rdc_lower_bounds(F, pair_sides(F, fpairs, a, b)).numpy(), rdc_lower_bounds(F, pair_sides(F, pairs, a, b)).numpy()
    )
    variables = np.array([3, 0, 4, 5, 0])
    comb = Combinations.of(F, variables.astype(np.float64), sides.coef[:5])
    np.testing.assert_array_equal(F.projected(comb).numpy(), F.projected(Combinations.of(F, variables, sides.coef[:5])).numpy())
    R = rdc_from_whitened(D).numpy()
    comps = [(0, 2, 3), (1, 5), (4,)]
    fcomps = [tuple(float(v) for v in c) for c in comps]
    np.testing.assert_array_equal(spanning_forest(R, fcomps), spanning_forest(R, comps))


def test_combinations_of_a_single_kind_project_like_dense_features():
    """Only Gaussian or only categorical variables: projections equal coef . dense features per row."""
    X, cats = mixed_data(100, seed=4)
    F = centred_features(torch.from_numpy(X), cats, projections(cats))
    D = F.dense()
    gen = torch.Generator().manual_seed(3)
    for variables in (np.array([0, 2, 0, 5]), np.array([3, 4, 4, 3])):
        coef = torch.randn(len(variables), D.shape[1], generator=gen, dtype=torch.float64)
        expected = torch.einsum("mkn,mk->mn", D[variables], coef)
        got = F.projected(Combinations.of(F, variables, coef))
        np.testing.assert_allclose(got.numpy(), expected.numpy(), atol=1e-12)


def test_dependency_components_threshold_is_inclusive_and_tensors_requiring_grad_are_accepted():
    R = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.2999], [0.1, 0.2999, 1.0]])
    assert dependency_components(R, 0.3) == [(0, 1), (2,)]
    n_ref, labels = connected_components(R >= 0.3, directed=False)
    assert n_ref == 2 and labels[0] == labels[1] != labels[2]
    T = torch.tensor(R, requires_grad=True)
    assert dependency_components(T, 0.3) == [(0, 1), (2,)]
    assert dependency_components(T, 0.2999) == [(0, 1, 2)]


def brute_cross_pairs(components: list[tuple[int, ...]], V: int) -> set[tuple[int, int]]:
    label = {v: c for c, comp in enumerate(components) for v in comp}
    return {(i, j) for i, j in itertools.combinations(range(V), 2) if label[i] != label[j]}


def test_certificate_pairs_are_a_spanning_forest_plus_all_cross_pairs_or_none_beyond_2v():
    rng = np.random.default_rng(5)
    seen_none = seen_boundary = 0
    for V in range(1, 9):
        A = rng.random((V, V))
        A = (A + A.T) / 2
        for _ in range(25):
            labels = rng.integers(0, int(rng.integers(1, V + 1)), V)
            comps = sorted(
                (tuple(int(v) for v in np.flatnonzero(labels == lab)) for lab in np.unique(labels)), key=lambda c: c[0]
            )
            cross = brute_cross_pairs(comps, V)
            cert = certificate_pairs(comps, A)
            if len(cross) > 2 * V:
                assert cert is None
                seen_none += 1
                continue
            seen_boundary += len(cross) == 2 * V
            assert cert is not None
            pairs, n_forest = cert
            assert n_forest == V - len(comps)
            forest = pairs[:n_forest]
            # the forest connects each component and stays inside it
            adj = np.zeros((V, V), dtype=bool)
            adj[forest[:, 0], forest[:, 1]] = True
            n_c, lab = connected_components(adj, directed=False)
            assert n_c == len(comps)
            for comp in comps:
                assert len({lab[v] for v in comp}) == 1
            assert {tuple(sorted(map(int, p))) for p in pairs[n_forest:]} == cross
            assert len(pairs) - n_forest == len(cross)
    assert seen_none > 0 and seen_boundary > 0
    # all singletons: V(V-1)/2 cross pairs; 5 variables give exactly 2V = 10 pairs (kept), 6 give 15 > 12
    assert certificate_pairs([(v,) for v in range(5)], np.eye(5)) is not None
    assert certificate_pairs([(v,) for v in range(6)], np.eye(6)) is None


def test_components_still_hold_boundaries_of_the_sufficient_condition():
    """Forest edges need RDC >= threshold + guard, cross pairs RDC < threshold - guard."""
    X, cats = mixed_data(150, seed=6)
    W = projections(cats)
    Z = whitened_features(torch.from_numpy(X), cats, W)
    pairs = np.array([[0, 2], [0, 1]])  # a forest edge (x, x^2) and a cross pair (x, y)
    edge, cross = rdc_pairs(Z, pairs).numpy()
    assert edge > cross
    holds, values = components_still_hold(Z, pairs, 1, float(edge), 0.0)
    assert holds and values.shape == (2,)  # edge exactly at the threshold: dependent
    assert not components_still_hold(Z, pairs, 1, float(cross), 0.0)[0]  # cross exactly at the threshold
    mid = (edge + cross) / 2
    gap = (edge - cross) / 2
    assert components_still_hold(Z, pairs, 1, mid, 0.9 * gap)[0]
    assert not components_still_hold(Z, pairs, 1, mid, 1.1 * gap)[0]
    assert not components_still_hold(Z, pairs, 1, float(edge) - 0.5 * gap, gap)[0]  # edge within the guard
    assert not components_still_hold(Z, pairs, 1, float(cross) + 0.5 * gap, gap)[0]  # cross within the guard
    # no pairs (a single variable): nothing to check
    holds, values = components_still_hold(Z, np.zeros((0, 2), dtype=np.int64), 0, 0.3, 1e-9)
    assert holds and values.shape == (0,)


def test_components_still_hold_detects_a_removal_that_breaks_a_dependency():
    """y copies x on the first 20 rows only (else independent): removing those rows splits {x, y}."""
    rng = np.random.default_rng(7)
    n = 60
    x = rng.normal(size=n)
    y = np.where(np.arange(n) < 40, x, rng.normal(size=n))
    X = np.column_stack([x, y])
    cats = [0, 0]
    W = projections(cats, k=5)
    R = rdc_matrix(torch.from_numpy(X), cats, W).numpy()
    comps = dependency_components(R, 0.5)
    assert comps == [(0, 1)]
    pairs, n_forest = certificate_pairs(comps, R)
    Zk = whitened_features(torch.from_numpy(X[40:]), cats, W)
    assert dependency_components(rdc_from_whitened(Zk), 0.5) != comps
    assert not components_still_hold(Zk, pairs, n_forest, 0.5, 1e-9)[0]
    Z_same = whitened_features(torch.from_numpy(X[1:]), cats, W)  # one row removed: still dependent
    assert dependency_components(rdc_from_whitened(Z_same), 0.5) == comps
    assert components_still_hold(Z_same, pairs, n_forest, 0.5, 1e-9)[0]


def restricted_cca(D: np.ndarray, i: int, j: int, rcond: float) -> float:
    """Top canonical correlation of raw features D[i], D[j] (k, n), each restricted to its own covariance's
    eigen-directions above rcond times its largest eigenvalue."""

    def basis(M: np.ndarray) -> np.ndarray:
        w, V = np.linalg.eigh(M @ M.T)
        keep = w > rcond * w.max()
        return (V[:, keep] / np.sqrt(w[keep])).T @ M  # orthonormal rows spanning the kept directions

    return float(np.linalg.svd(basis(D[i]) @ basis(D[j]).T, compute_uv=False)[0])


def test_canonical_directions_reach_the_per_variable_restricted_canonical_correlation():
    X, cats = mixed_data(150, seed=8)
    W = projections(cats, k=6)
    Xt = torch.from_numpy(X)
    F = centred_features(Xt, cats, W)
    Z = F.whitened()
    D = F.dense().numpy()
    pairs = np.array([[0, 2], [0, 3], [3, 4], [1, 5], [2, 4]])
    for rcond in (0.5, 0.05):
        sides = canonical_directions(Z, pairs, rcond=rcond)
        uv = F.projected(sides).numpy()
        P = len(pairs)
        corr = np.abs((uv[:P] * uv[P:]).sum(1)) / np.sqrt((uv[:P] ** 2).sum(1) * (uv[P:] ** 2).sum(1))
        expected = [restricted_cca(D, i, j, rcond) for i, j in pairs]
        np.testing.assert_allclose(corr, expected, atol=1e-7)


def test_canonical_directions_and_lower_bounds_reject_the_wrong_kind_of_features():
    X, cats = mixed_data(50, seed=9)
    F = centred_features(torch.from_numpy(X), cats, projections(cats))
    with pytest.raises(ValueError, match=r"^canonical_directions needs whitened features \(Features\.whitened\(\)\)$"):
        canonical_directions(F, np.array([[0, 1]]))
    Z = F.whitened()
    sides = canonical_directions(Z, np.array([[0, 1]]))
    with pytest.raises(ValueError, match=r"^rdc_lower_bounds needs the raw centred features \(centred_features\)$"):
        rdc_lower_bounds(Z, sides)


def test_rdc_lower_bounds_equal_the_documented_formula_and_stay_below_the_rdc():
    """bound = q - eps_a - eps_b - eps_a eps_b with q the correlation of u = phi_x a, v = phi_y b and
    eps_a = sqrt(2 EIG_RCOND tr(Cxx) |a|^2 / C(u, u)), computed in numpy on the dense raw features; directions
    through small eigen-directions make the eps terms large. Mixed pairs exercise both kinds of variables."""
    X, cats = mixed_data(160, seed=10)
    W = projections(cats)
    Xt = torch.from_numpy(X)
    F = centred_features(Xt, cats, W)
    D = F.dense().numpy()  # (V, k, n)
    n = X.shape[0]
    pairs = np.array([[0, 2], [0, 4], [4, 3], [1, 5], [2, 4], [3, 5]])
    exact = rdc_pairs(whiten(Xt, cats, W), pairs).numpy()

    def small_direction(v: int, scale: float) -> np.ndarray:
        C = D[v] @ D[v].T / (n - 1)
        w, E = np.linalg.eigh(C)
        ratio = w / w.max()
        pick = int(np.argmin(np.abs(np.log(np.maximum(ratio, 1e-300)) - np.log(1e-7))))
        return scale * (E[:, pick] + np.sqrt(w[pick] / w[-1]) * E[:, -1])

    a = np.stack([small_direction(i, 3.0) for i, _ in pairs])
    b = np.stack([small_direction(j, 0.5) for _, j in pairs])
    bound = rdc_lower_bounds(F, pair_sides(F, pairs, torch.from_numpy(a), torch.from_numpy(b))).numpy()
    n_large = 0
    for p, (i, j) in enumerate(pairs):
        u, v = a[p] @ D[i], b[p] @ D[j]
        q = (u @ v) / np.sqrt((u @ u) * (v @ v))
        eps_a = np.sqrt(2 * EIG_RCOND * np.sum(D[i] ** 2) * (a[p] @ a[p]) / (u @ u))
        eps_b = np.sqrt(2 * EIG_RCOND * np.sum(D[j] ** 2) * (b[p] @ b[p]) / (v @ v))
        n_large += eps_a * eps_b > 1e-6  # the product term matters at the tolerance below
        assert bound[p] == pytest.approx(q - eps_a - eps_b - eps_a * eps_b, abs=1e-9)
        assert bound[p] <= exact[p] + 1e-12
    assert n_large >= 2
    # one pair alone gives the same bound
    one = rdc_lower_bounds(F, pair_sides(F, pairs[:1], torch.from_numpy(a[:1]), torch.from_numpy(b[:1])))
    assert one.shape == (1,) and one.item() == pytest.approx(bound[0], abs=1e-12)


def test_rdc_lower_bound_that_cannot_be_evaluated_is_minus_one():
    """Overflowing coefficients make the correlation inf/inf: such a bound certifies nothing (-1, as for a
    degenerate direction), never a value above the RDC."""
    X, cats = mixed_data(80, seed=11)
    W = projections(cats)
    F = centred_features(torch.from_numpy(X), cats, W)
    a = torch.full((2, W.shape[2]), 1e200, dtype=torch.float64)
    bound = rdc_lower_bounds(F, pair_sides(F, np.array([[0, 2], [1, 3]]), a, a))
    np.testing.assert_array_equal(bound.numpy(), -1.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_paths_match_cpu():
    X, cats = mixed_data(120, seed=12)
    W = projections(cats)
    Xc = torch.from_numpy(X).cuda()
    Zc = whiten(Xc, cats, W)
    Z = whiten(torch.from_numpy(X), cats, W)
    pairs = np.array([[0, 2], [3, 4], [1, 5]])
    R = rdc_from_whitened(Z.dense())
    np.testing.assert_allclose(rdc_from_whitened(Zc.dense()).cpu().numpy(), R.numpy(), atol=1e-9)
    np.testing.assert_allclose(rdc_pairs(Zc.dense(), pairs).cpu().numpy(), rdc_pairs(Z.dense(), pairs).numpy(), atol=1e-9)
    sides = canonical_directions(Zc, pairs)
    Fc = centred_features(Xc, cats, W)
    F = centred_features(torch.from_numpy(X), cats, W)
    np.testing.assert_allclose(
        rdc_lower_bounds(Fc, sides).cpu().numpy(),
        rdc_lower_bounds(F, canonical_directions(Z, pairs)).numpy(),
        atol=1e-6,
    )
    assert dependency_components(rdc_from_whitened(Zc.dense()), 0.3) == dependency_components(R, 0.3)
