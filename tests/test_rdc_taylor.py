"""The first-order certificate of the RDC lower bound after removals (duck/deletion/rdc_taylor.py) against the
bound recomputed from scratch on the rows actually left: never above it, close to it for a few removals."""

from __future__ import annotations

import numpy as np
import torch

from duck.deletion.rdc import (
    FeatureMap,
    canonical_directions,
    draw_projections,
    ecdf_counts,
    pair_sides,
    rdc_lower_bounds,
)
from duck.deletion.rdc_taylor import TaylorReference


def data(n: int, seed: int) -> tuple[np.ndarray, list[int]]:
    """Dependent Gaussian columns (one with many ties), a categorical function of them, an independent one."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=n)
    X = np.column_stack(
        [
            x,
            np.sin(2 * x) + 0.3 * rng.normal(size=n),
            np.round(x + 0.5 * rng.normal(size=n), 1),  # ties
            (x > -0.3).astype(float) + (x > 0.8),  # categories 0..2 of a 4-category domain
            rng.integers(0, 3, n),
        ]
    )
    return X, [0, 0, 0, 4, 3]


def features(fmap: FeatureMap, X: np.ndarray):
    Xt = torch.from_numpy(X)
    return fmap(Xt, ecdf_counts(Xt.index_select(1, fmap.g_index)))


def test_first_order_bound_never_exceeds_the_recomputed_bound_and_is_tight():
    rng = np.random.default_rng(0)
    pairs = np.array([[0, 1], [0, 2], [1, 3], [2, 3], [3, 4], [0, 4]])
    gaps = []
    for trial in range(6):
        X, cats = data(150, seed=trial)
        W = draw_projections(torch.Generator().manual_seed(trial), cats, 10)
        fmap = FeatureMap.build(cats, W, 1 / 6, torch.from_numpy(X))
        F = features(fmap, X)
        rows = np.arange(X.shape[0]) * 3 + 5  # storage positions of the rows (ascending)
        random_a, random_b = torch.randn(2, len(pairs), 10, dtype=torch.float64)
        for sides in (canonical_directions(F.whitened(), pairs), pair_sides(F, pairs, random_a, random_b)):
            ref = TaylorReference.build(fmap, F, sides, rows)
            same = ref.bounds(np.arange(X.shape[0]), F.gauss_counts)
            direct = rdc_lower_bounds(F, sides).numpy()
            positive = direct > 0  # (a non-positive correlation certifies nothing: -1)
            np.testing.assert_allclose(same[positive], direct[positive], atol=1e-9)  # no move: the same bound
            assert (same[~positive] == -1.0).all()
            for m in (1, 2, 3, 5, 10, 25):
                if trial % 2:  # adversarial: the largest values of a Gaussian column (every rank moves)
                    gone = np.argsort(X[:, int(rng.integers(0, 3))])[-m:]
                else:
                    gone = rng.choice(X.shape[0], m, replace=False)
                kept = np.setdiff1d(np.arange(X.shape[0]), gone)
                F_new = features(fmap, X[kept])
                exact = rdc_lower_bounds(F_new, sides).numpy()
                bound = ref.bounds(kept, F_new.gauss_counts)
                assert (bound <= exact + 1e-12).all(), (trial, m, (bound - exact).max())
                useful = exact > 0.05
                if m <= 3 and useful.any():
                    gaps.append(float((exact - bound)[useful].max()))
    assert max(gaps) < 0.01, max(gaps)  # second order in the rank moves: a few removals cost ~1e-3


def test_degenerate_direction_certifies_nothing():
    X, cats = data(80, seed=1)
    W = draw_projections(torch.Generator().manual_seed(0), cats, 10)
    fmap = FeatureMap.build(cats, W, 1 / 6, torch.from_numpy(X))
    F = features(fmap, X)
    a = torch.ones(2, 10, dtype=torch.float64)
    sides = pair_sides(F, np.array([[0, 1], [3, 2]]), a, torch.zeros_like(a))  # v = 0
    ref = TaylorReference.build(fmap, F, sides, np.arange(80))
    kept = np.arange(1, 80)
    assert (ref.bounds(kept, features(fmap, X[kept]).gauss_counts) == -1.0).all()


# ---------------------------------------------------------------------------------------------- issue 39
def certificate_by_hand(fmap: FeatureMap, F, F_new, sides, kept: np.ndarray) -> np.ndarray:
    """The module docstring's certificate written out side by side, from the sine features' definition
    ``g(p) = sum_k a_k sin(w0_k + w1_k p)``: Gaussian sides predicted to first order, ``u = g(p) + g'(p) D``
    centred over the kept rows, with ``rho = (max_R |g''| + max |D| sum_k |a_k| |w1_k|^3) sqrt(sum D^4) / 2`` and
    the trace ``(sqrt(T) + |w1| |D|)^2``; categorical sides exact (recomputed on the kept rows, no error term);
    then per pair ``low = A.B - rho_x |B| - rho_y |A| - rho_x rho_y``, ``q >= low / ((|A| + rho_x)(|B| + rho_y))``,
    ``eps = sqrt(2 EIG_RCOND |a|^2) sqrt(trace) / (|A| - rho)`` and ``q - eps_x - eps_y - eps_x eps_y``; -1 where
    ``low <= 0`` or a side's ``|A| - rho <= 0``."""
    from duck.deletion.rdc import EIG_RCOND

    kind, coef = sides.kind_index.numpy(), sides.coef.numpy()
    Vg, n = F.gauss.size, kept.size
    g_ref = F.projected(sides).numpy()  # (2P, N): centred g(p_i) at the reference
    g_new = F_new.projected(sides).numpy()  # exact values on the kept rows (used for categorical sides only)
    t_ref, t_new = F.sq_sums_by_kind().numpy(), F_new.sq_sums_by_kind().numpy()
    A, rho, trace = [], [], []
    for s in range(coef.shape[0]):
        v, a = int(kind[s]), coef[s]
        if v < Vg:
            w0, w1 = fmap.Wg[v, 0, :, 0].numpy(), fmap.Wg[v, 1, :, 0].numpy()
            p_all = F.gauss_counts[:, v].numpy() / F.n
            p_new = F_new.gauss_counts[:, v].numpy() / n
            D = p_new - p_all[kept]
            g1 = [float(sum(a[k] * w1[k] * np.cos(w0[k] + w1[k] * p) for k in range(a.size))) for p in p_all[kept]]
            g2 = [abs(float(sum(a[k] * w1[k] ** 2 * np.sin(w0[k] + w1[k] * p) for k in range(a.size))))
                  for p in p_all]
            u = g_ref[s, kept] + np.array(g1) * D
            u = u - u.mean()
            r = (max(g2) + np.abs(D).max() * float(np.sum(np.abs(a) * np.abs(w1) ** 3))) * np.sqrt(np.sum(D**4)) / 2
            tr = (np.sqrt(t_ref[v]) + np.linalg.norm(w1) * np.linalg.norm(D)) ** 2
        else:
            u, r, tr = g_new[s], 0.0, t_new[v]
        A.append(u)
        rho.append(r)
        trace.append(tr)
    P = coef.shape[0] // 2
    out = []
    for p in range(P):
        x, y = p, P + p
        nx, ny = np.linalg.norm(A[x]), np.linalg.norm(A[y])
        low = float(A[x] @ A[y]) - rho[x] * ny - rho[y] * nx - rho[x] * rho[y]
        if low <= 0 or nx - rho[x] <= 0 or ny - rho[y] <= 0:
            out.append(-1.0)
            continue
        q = low / ((nx + rho[x]) * (ny + rho[y]))
        ex = np.sqrt(2 * EIG_RCOND * np.sum(coef[x] ** 2)) * np.sqrt(trace[x]) / (nx - rho[x])
        ey = np.sqrt(2 * EIG_RCOND * np.sum(coef[y] ** 2)) * np.sqrt(trace[y]) / (ny - rho[y])
        out.append(q - ex - ey - ex * ey)
    return np.array(out)


def test_the_certificate_is_the_documented_formula_term_by_term():
    """Not only sound (above): equal, after removals that move every rank, to the certificate computed side by
    side from the features' definition, so each error term has the size the docstring states."""
    pairs = np.array([[0, 1], [0, 2], [1, 2], [1, 3], [2, 3], [3, 4], [0, 4]])
    checked = 0
    for trial in range(3):
        X, cats = data(120, seed=10 + trial)
        W = draw_projections(torch.Generator().manual_seed(trial), cats, 8)
        fmap = FeatureMap.build(cats, W, 1 / 6, torch.from_numpy(X))
        F = features(fmap, X)
        a, b = torch.randn(2, len(pairs), 8, dtype=torch.float64, generator=torch.Generator().manual_seed(trial))
        for sides in (canonical_directions(F.whitened(), pairs), pair_sides(F, pairs, a, b)):
            ref = TaylorReference.build(fmap, F, sides, np.arange(X.shape[0]))
            for m in (1, 4, 12):
                kept = np.setdiff1d(np.arange(X.shape[0]), np.argsort(X[:, trial])[-m:])  # the largest values
                F_new = features(fmap, X[kept])
                got = ref.bounds(kept, F_new.gauss_counts)
                want = certificate_by_hand(fmap, F, F_new, sides, kept)
                np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
                checked += int((want > 0).sum())
    assert checked > 20  # most pairs certified: the formula is compared where it matters


def test_a_reference_holds_its_rows_and_empty_parts_for_a_missing_kind():
    """Only categorical variables: no ranks, no Taylor terms; only Gaussian ones: no codes. The reference keeps
    its own copy of the rows."""
    rng = np.random.default_rng(3)
    Xc = rng.integers(0, 3, (60, 3)).astype(float)
    Xc[:, 1] = (Xc[:, 0] + rng.integers(0, 2, 60)) % 3
    cats = [3, 3, 3]
    W = draw_projections(torch.Generator().manual_seed(0), cats, 6)
    fmap = FeatureMap.build(cats, W, 1 / 6, torch.from_numpy(Xc))
    F = fmap(torch.from_numpy(Xc))  # no Gaussian variable: no ECDF counts at all (None)
    assert F.gauss_counts is None
    rows = np.arange(60) + 7
    sides = canonical_directions(F.whitened(), np.array([[0, 1], [1, 2]]))
    ref = TaylorReference.build(fmap, F, sides, rows)
    rows[:] = 0
    assert (ref.rows == np.arange(60) + 7).all()
    assert ref.rank.shape == (0, 60) and ref.taylor.shape == (2, 0, 60)
    assert ref.half_g2.shape == ref.L3.shape == ref.w1_norm.shape == (0,)
    kept = np.arange(2, 60)
    F_new = features(fmap, Xc[kept])
    np.testing.assert_allclose(ref.bounds(kept, None), certificate_by_hand(fmap, F, F_new, sides, kept),
                               rtol=1e-9, atol=1e-12)
    Xg = rng.normal(size=(60, 2))
    Xg[:, 1] += Xg[:, 0]
    W = draw_projections(torch.Generator().manual_seed(1), [0, 0], 6)
    fmap = FeatureMap.build([0, 0], W, 1 / 6, torch.from_numpy(Xg))
    F = features(fmap, Xg)
    ref = TaylorReference.build(fmap, F, canonical_directions(F.whitened(), np.array([[0, 1]])), np.arange(60))
    assert ref.codes.shape == (0, 60) and ref.codes.dtype == np.int64 and ref.cat_slot.shape == (0,)
