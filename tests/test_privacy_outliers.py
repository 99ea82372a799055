"""Outlier counts against a brute-force numpy count, global-sensitivity bounds against explicit worst-case
configurations, DP count / top-h subspace releases, and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from duck.errors import DuckInputError
from duck.privacy import (
    LSHNeighbours,
    dp_outlier_count,
    dp_top_subspaces,
    global_sensitivity_bounds,
    kissing_configuration,
    kissing_number_upper,
    neighbour_counts,
    outlier_count,
    smooth_gaussian_mechanism,
    smooth_gaussian_params,
    smooth_sensitivity_bound,
    subspace_outlier_counts,
)


def brute_force_outliers(X: np.ndarray, k: int, r: float, subspace=None) -> int:
    """Paper Definitions 7-8 written literally with Python loops."""
    S = list(range(X.shape[1])) if subspace is None else list(subspace)
    n_out = 0
    for i in range(len(X)):
        neighbours = 0
        for j in range(len(X)):
            if i != j and math.sqrt(sum((X[i, s] - X[j, s]) ** 2 for s in S) / len(S)) <= r:
                neighbours += 1
        n_out += neighbours < k
    return n_out


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 40),
    dim=st.integers(1, 5),
    k=st.integers(1, 6),
    r=st.floats(0.05, 2.0),
    seed=st.integers(0, 10_000),
    duplicates=st.booleans(),
)
def test_outlier_count_matches_brute_force(n, dim, k, r, seed, duplicates):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, dim))
    if duplicates:
        X[: n // 2] = X[0]  # repeated records count as neighbours of each other
    sub = sorted(rng.choice(dim, size=rng.integers(1, dim + 1), replace=False).tolist())
    assert outlier_count(X, k, r, sub, device="cpu") == brute_force_outliers(X, k, r, sub)
    assert outlier_count(X, k, r, device="cpu") == brute_force_outliers(X, k, r)


def test_neighbour_counts_and_subspace_counts_agree_with_definition():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 4))
    deg = neighbour_counts(X, 0.6, [0, 2], device="cpu").numpy()
    Z = X[:, [0, 2]]
    d = np.sqrt(((Z[:, None] - Z[None]) ** 2).sum(-1) / 2)
    assert (deg == (d <= 0.6).sum(1) - 1).all()
    subs, counts = subspace_outlier_counts(X, 2, 0.3, 1, device="cpu")
    assert subs == [(0,), (1,), (2,), (3,)]
    assert counts.tolist() == [brute_force_outliers(X, 2, 0.3, [s]) for s in range(4)]


@pytest.mark.parametrize("dim,n_spokes", [(1, 2), (2, 5), (3, 5)])
def test_global_sensitivity_bounds_contain_worst_case_configurations(dim, n_spokes):
    k, r = 3, 1.0
    X, X_moved = kissing_configuration(k, r, n_spokes, dim)
    change = abs(outlier_count(X, k, r, device="cpu") - outlier_count(X_moved, k, r, device="cpu"))
    assert change == n_spokes * k + 1
    lower, upper = global_sensitivity_bounds(10_000, dim, k)
    assert change <= upper
    if dim == 1:
        assert lower == upper == change  # the bound is tight in one dimension (paper §4.1)


def test_kissing_table_and_global_bounds():
    assert [kissing_number_upper(d) for d in (1, 2, 3, 4, 8, 24)] == [2, 6, 12, 24, 240, 196560]
    assert kissing_number_upper(30) == 3**30 - 1
    assert global_sensitivity_bounds(50, 2, 3) == (13, 19)
    assert global_sensitivity_bounds(50, 10, 3) == (50, 50)  # capped by N


def synthetic_scenario_1(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([rng.normal(size=(45, 2)), rng.normal(20.0, 10.0, size=(5, 2))])


def test_dp_outlier_count_global_and_smooth_releases():
    X = synthetic_scenario_1(0)
    eps, delta = 0.5, 0.01
    glob = dp_outlier_count(X, 3, 1.1, eps, delta, mechanism="global", seed=0, device="cpu")
    assert glob.sigma == pytest.approx(19 * math.sqrt(2 * math.log(2 / delta)) / eps)  # GS_UB = 3*6+1
    smooth = dp_outlier_count(X, 3, 1.1, eps, delta, mechanism="smooth", seed=0, device="cpu")
    alpha, beta = smooth_gaussian_params(eps, delta)
    bound = smooth_sensitivity_bound(X, 3, 1.1, beta, device="cpu")
    reference = smooth_gaussian_mechanism(outlier_count(X, 3, 1.1, device="cpu"), bound, eps, delta, seed=0)
    assert smooth.value == reference.value and smooth.sigma == pytest.approx(bound / alpha)
    with pytest.raises(DuckInputError):
        dp_outlier_count(X, 3, 1.1, eps, delta, mechanism="laplace")


def test_dp_top_subspaces_finds_planted_outlier_dimensions():
    rng = np.random.default_rng(0)
    inliers = rng.normal(size=(490, 10))
    outliers = np.hstack([rng.normal(20.0, 10.0, size=(10, 2)), rng.normal(size=(10, 8))])
    X = np.vstack([inliers, outliers])
    _, counts = subspace_outlier_counts(X, 3, 0.3, 1, device="cpu")
    assert counts[:2].min() > counts[2:].max()
    picked = dp_top_subspaces(X, 3, 0.3, 2, 500.0, 1, seed=0, device="cpu")  # huge eps: near-argmax
    assert sorted(picked) == [(0,), (1,)]
    picked = dp_top_subspaces(X, 3, 0.13, 3, 1.0, [[0, 1], [2, 3], [4]], seed=0, device="cpu")
    assert len(set(picked)) == 3


@pytest.mark.parametrize(
    "call",
    [
        lambda X: outlier_count(X, 0, 1.0),
        lambda X: outlier_count(X, 2.5, 1.0),
        lambda X: outlier_count(X, 2, 0.0),
        lambda X: outlier_count(X, 2, -1.0),
        lambda X: outlier_count(X, 2, float("inf")),
        lambda X: outlier_count(X, 2, 1.0, [0, 5]),
        lambda X: outlier_count(X, 2, 1.0, [-1]),
        lambda X: outlier_count(X, 2, 1.0, []),
        lambda X: outlier_count(X, 2, 1.0, [1, 1]),
        lambda X: outlier_count(X[:, 0], 2, 1.0),
        lambda X: outlier_count(np.full((3, 2), np.nan), 2, 1.0),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.0, 0.01),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 1.0),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 0.0),
        lambda X: dp_top_subspaces(X, 2, 1.0, 0, 1.0, 1),
        lambda X: dp_top_subspaces(X, 2, 1.0, 4, 1.0, 1),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, [[0], [3]]),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, 4),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, [[0], [0]]),
        # r^2 overflows float64: counted every pair as a neighbour (inf <= inf) or raised a bare OverflowError
        lambda X: outlier_count(np.array([[0.0], [1e300]]), 1, 1e160),
        lambda X: dp_outlier_count(X, 2, 1e155, 0.5, 0.01, seed=0),
    ],
)
def test_bad_input_raises_clear_errors(call):
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(DuckInputError):
        call(X)


def test_error_names_the_value_at_fault():
    """A subnormal delta overflows ln(2 / delta); the message blamed eps before. An overflowing r^2 made
    ``outlier_count`` count every pair as neighbours (inf <= inf)."""
    X = np.random.default_rng(0).normal(size=(10, 2))
    with pytest.raises(DuckInputError, match="delta=1e-320 is below the smallest normal"):
        dp_outlier_count(X, 2, 1.0, 0.5, 1e-320, seed=0)
    with pytest.raises(DuckInputError, match="r=1e.160 is too large"):
        outlier_count(X, 1, 1e160)


def test_lsh_neighbour_counts_never_exceed_exact_and_match_with_wide_buckets():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 6))
    exact = neighbour_counts(X, 0.5, device="cpu")
    narrow = neighbour_counts(X, 0.5, lsh=LSHNeighbours(k=6, L=4, w=1.0, seed=0), device="cpu")
    assert (narrow <= exact).all() and (narrow < exact).any()  # missed neighbours only
    wide = neighbour_counts(X, 0.5, [1, 4], lsh=LSHNeighbours(k=1, L=8, w=200.0, seed=0), device="cpu")
    assert torch.equal(wide, neighbour_counts(X, 0.5, [1, 4], device="cpu"))
    assert outlier_count(X, 3, 0.5, lsh=LSHNeighbours(k=6, L=4, w=1.0), device="cpu") >= outlier_count(X, 3, 0.5)


def test_lsh_counts_work_with_the_smooth_mechanism_only():
    X = synthetic_scenario_1(1)
    lsh = LSHNeighbours(k=2, L=6, w=4.0, seed=3)
    release = dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="smooth", lsh=lsh, seed=0, device="cpu")
    assert np.isfinite(release.value)
    with pytest.raises(DuckInputError, match="LSH"):
        dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="global", lsh=lsh)


@pytest.mark.parametrize(
    "call",
    [
        lambda X: outlier_count("abc", 2, 1.0),
        lambda X: outlier_count(None, 2, 1.0),
        lambda X: outlier_count(X + 0j, 2, 1.0),  # complex data is not truncated to its real part
        lambda X: outlier_count(X > 0, 2, 1.0),  # boolean data is not a point set
        lambda X: outlier_count(X, 2, 1.0, device="gpu"),
        lambda X: outlier_count(X, 2, 1.0, lsh={"k": 2}),
        lambda X: outlier_count(X, 2, 1.0, lsh={"k": 2, "L": 2, "w": 1.0, "width": 3}),
        lambda X: outlier_count(X, 2, 1.0, lsh="yes"),
        lambda X: LSHNeighbours(k=0, L=2, w=1.0),
        lambda X: outlier_count(X, 2, 1.0, [0.7]),
        lambda X: outlier_count(X, 2, 1.0, [True]),
        lambda X: outlier_count(X, 2, 1.0, "01"),
        lambda X: outlier_count(X, 2, 1.0, 1),
        lambda X: subspace_outlier_counts(X, 2, 1.0, 2.0),
        lambda X: subspace_outlier_counts(X, 2, 1.0, True),
        lambda X: subspace_outlier_counts(X, 2, 1.0, None),
        lambda X: subspace_outlier_counts(X, 2, 1.0, "01"),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, 2.0),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, None),
        lambda X: dp_top_subspaces(X, 2, 1.0, 1, 1.0, 1, seed=2**70),
        lambda X: dp_outlier_count("abc", 2, 1.0, 0.5, 1e-5),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 1e-5, device="gpu"),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 1e-5, "smooth", calibration="x"),
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 1e-5, "laplace"),
        lambda X: dp_outlier_count(X, 10**12, 1.0, 0.5, 1e-5),  # smooth bound needs k <= N
        lambda X: dp_outlier_count(X, 2, 1.0, 0.5, 1e-5, seed=-1),
    ],
)
def test_bad_data_and_options_raise_input_errors(call):
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(DuckInputError):
        call(X)


def test_numpy_integer_subspaces_and_lsh_dicts_mean_the_same_as_python_ones():
    X = np.random.default_rng(1).normal(size=(40, 3))
    assert subspace_outlier_counts(X, 2, 0.8, np.int64(2), device="cpu")[0] == [(0, 1), (0, 2), (1, 2)]
    assert outlier_count(X, 2, 0.8, np.array([0, 2]), device="cpu") == outlier_count(X, 2, 0.8, [0, 2])
    lsh = {"k": 2, "L": 3, "w": 1.0, "seed": 4}
    assert torch.equal(neighbour_counts(X, 0.8, lsh=lsh, device="cpu"),
                       neighbour_counts(X, 0.8, lsh=LSHNeighbours(**lsh), device="cpu"))


def test_exact_ties_at_r_are_neighbours_in_every_subspace_size():
    """``dist_S(x, y) <= r`` is inclusive (ALGORITHMS.md §9): two records differing by v in each of m
    coordinates are exactly v apart in dist_S. Scaling the coordinates by 1/sqrt(|S|) used to round 58 of these
    168 ties to "not a neighbour"; the literal formula is the reference."""

    from duck.privacy import local_sensitivity_bound, smooth_sensitivity_bound
    from duck.privacy.smooth_sensitivity import max_ball_count_exact

    for m in range(1, 25):
        for v in range(1, 8):
            X = np.zeros((2, m))
            X[1] = v
            literal = math.sqrt(((X[0] - X[1]) ** 2).sum() / m) <= v
            assert literal
            assert neighbour_counts(X, float(v)).tolist() == [1, 1], (m, v)
    # the smooth bound's 2r graph: two records exactly 2r apart fit in one closed radius-r ball
    X = np.array([[0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [10.0, 10.0, 10.0], [20.0, 20.0, 20.0], [30.0, 30.0, 30.0]])
    clique = smooth_sensitivity_bound(X, 1, 1.0, beta=0.5)
    exact = smooth_sensitivity_bound(X, 1, 1.0, beta=0.5, ball_count="exact")
    assert clique >= exact  # the documented invariant (was 4.0 < 5.0)
    assert max_ball_count_exact(X[:2] / math.sqrt(3), 1.0) == 2
    assert local_sensitivity_bound(X, 1, 1.0) >= 2
