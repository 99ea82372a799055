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
