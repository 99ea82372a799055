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


# ---------------------------------------------------------------------------------------------- issue 39
# refusals with their full message, the worst case's geometry, and the releases against the mechanisms
# written out by hand (each kills mutants that the raise-only tests above let through)
def _dist_s(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(((a - b) ** 2).sum() / a.numel()))


@pytest.mark.parametrize("dim,n_spokes", [(1, 1), (1, 2), (2, 3), (2, 5), (4, 5)])
def test_kissing_configuration_has_the_stated_geometry(dim, n_spokes):
    k, r = 2, 0.7
    X, X_moved = kissing_configuration(k, r, n_spokes, dim)
    assert X.shape == (n_spokes * k + 1, dim) and X.dtype == torch.float64
    assert torch.equal(X[0], torch.zeros(dim, dtype=torch.float64))
    for i in range(1, len(X)):  # every spoke record at dist_S 0.99 r from the centre
        assert _dist_s(X[i], X[0]) == pytest.approx(0.99 * r)
    spokes = X[1::k]
    for a in range(n_spokes):  # the k copies of a spoke coincide; different spokes are farther than r apart
        assert torch.equal(X[1 + a * k: 1 + (a + 1) * k], spokes[a].expand(k, dim))
        for b in range(a):
            assert _dist_s(spokes[a], spokes[b]) > r
    assert torch.equal(X_moved[1:], X[1:])
    assert torch.equal(X_moved[0], torch.full((dim,), 1000.0 * r * math.sqrt(dim), dtype=torch.float64))
    assert outlier_count(X, k, r, device="cpu") == 0  # every record an inlier, as the theorem's case needs


def test_kissing_configuration_refuses_spokes_that_cannot_be_apart():
    with pytest.raises(DuckInputError) as e:
        kissing_configuration(2, 1.0, 3, 1)
    assert str(e.value) == "n_spokes=3 clusters cannot be pairwise > r apart here; use <= 2"
    with pytest.raises(DuckInputError) as e:
        kissing_configuration(2, 1.0, 6, 3)
    assert str(e.value) == "n_spokes=6 clusters cannot be pairwise > r apart here; use <= 5"


def test_kissing_numbers_past_the_table_use_the_volume_bound():
    assert kissing_number_upper(5) == 44 and kissing_number_upper(24) == 196560
    assert kissing_number_upper(25) == 3**25 - 1
    assert global_sensitivity_bounds(10**9, 3, 4) == (2 * 3 * 4 + 1, 4 * 12 + 1)
    assert global_sensitivity_bounds(20, 3, 4) == (20, 20)
    assert global_sensitivity_bounds(30, 3, 4) == (25, 30)


def test_global_release_is_the_gaussian_mechanism_at_the_theorem_4_upper_bound():
    from duck.privacy import gaussian_mechanism, gaussian_sigma

    X = synthetic_scenario_1(2)
    count = outlier_count(X, 3, 1.1, device="cpu")
    for calibration, eps in (("classic", 0.5), ("analytic", 2.0)):
        got = dp_outlier_count(X, 3, 1.1, eps, 0.01, mechanism="global", calibration=calibration, seed=7,
                               device="cpu")
        want = gaussian_mechanism(count, 19, eps, 0.01, calibration=calibration, seed=7)  # 3 * K_2 + 1
        assert got.value == want.value and got.sigma == gaussian_sigma(19, eps, 0.01, calibration)
    sub = dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="global", subspace=[1], seed=7, device="cpu")
    want = gaussian_mechanism(outlier_count(X, 3, 1.1, [1], device="cpu"), 7, 0.5, 0.01, seed=7)  # 3 * K_1 + 1
    assert sub.value == want.value


def test_smooth_release_counts_in_the_subspace_it_is_given():
    X = synthetic_scenario_1(3)
    eps, delta = 0.5, 0.01
    _, beta = smooth_gaussian_params(eps, delta)
    got = dp_outlier_count(X, 2, 0.6, eps, delta, subspace=[0], seed=1, device="cpu")
    bound = smooth_sensitivity_bound(X, 2, 0.6, beta, [0], device="cpu")
    want = smooth_gaussian_mechanism(outlier_count(X, 2, 0.6, [0], device="cpu"), bound, eps, delta, seed=1)
    assert got.value == want.value and got.sigma == want.sigma


def test_count_refusals_name_the_option_and_the_choices():
    X = synthetic_scenario_1(0)
    with pytest.raises(DuckInputError) as e:
        dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="laplace")
    assert str(e.value) == "mechanism='laplace' is not supported; use 'smooth' or 'global'"
    with pytest.raises(DuckInputError) as e:
        dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="global", lsh=LSHNeighbours(k=2, L=2, w=1.0))
    assert str(e.value) == ("the global-sensitivity bound (Theorem 4) does not hold for LSH neighbour counts; "
                            "use mechanism='smooth' or exact counts (lsh=None)")
    with pytest.raises(DuckInputError, match="eps"):  # the classic calibration's eps < 1, before any counting
        dp_outlier_count(X, 3, 1.1, 1.5, 0.01, mechanism="global")


def test_subspace_refusals_name_the_value_and_what_to_pass():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(DuckInputError) as e:
        subspace_outlier_counts(X, 2, 1.0, 4)
    assert str(e.value) == "subspace size 4 exceeds the data dimension 3"
    assert len(subspace_outlier_counts(X, 2, 1.0, 3)[0]) == 1  # size == dim: the full space
    with pytest.raises(DuckInputError) as e:
        subspace_outlier_counts(X, 2, 1.0, "01")
    assert str(e.value) == ("subspaces='01' must be an int c (all c-dim subspaces) or a list of index lists such "
                            "as [[0], [1, 2]]")
    with pytest.raises(DuckInputError, match="must be an int c"):
        subspace_outlier_counts(X, 2, 1.0, b"01")
    with pytest.raises(DuckInputError) as e:
        subspace_outlier_counts(X, 2, 1.0, [])
    assert str(e.value) == "subspaces is empty; pass an int c (all c-dim subspaces) or a list of index lists"
    with pytest.raises(DuckInputError) as e:
        subspace_outlier_counts(X, 2, 1.0, [[0, 1], [1, 0]])
    assert str(e.value) == "subspaces lists the same subspace twice; give each candidate once"
    for h in (0, 4, 1.0, True):
        with pytest.raises(DuckInputError) as e:
            dp_top_subspaces(X, 2, 1.0, h, 1.0, 1)
        assert str(e.value) == f"h={h!r} must be an integer between 1 and the number of candidate subspaces (3)"
    assert len(dp_top_subspaces(X, 2, 1.0, np.int64(3), 1.0, 1, seed=0, device="cpu")) == 3


def test_subspace_counts_and_utilities_by_hand():
    from duck.privacy.outliers import subspace_utilities

    rng = np.random.default_rng(4)
    X = np.vstack([rng.normal(size=(30, 3)), [[9.0, 0.0, 0.0], [0.0, 9.0, 9.0]]])
    subs, counts = subspace_outlier_counts(X, 2, 0.5, [[0], [1, 2], [0, 1, 2]], device="cpu")
    assert subs == [(0,), (1, 2), (0, 1, 2)] and counts.dtype == torch.int64
    want = [brute_force_outliers(X, 2, 0.5, s) for s in subs]
    assert counts.tolist() == want
    _, util = subspace_utilities(X, 2, 0.5, subs, device="cpu")
    n = len(X)
    gs = [min(n, 2 * kissing_number_upper(len(s)) + 1) for s in subs]  # Theorem 4's upper bound per size
    np.testing.assert_allclose(util.numpy(), np.array(want) / np.array(gs), rtol=1e-15)
    assert util.dtype == torch.float64


def test_top_subspaces_are_exponential_draws_on_the_normalised_utility():
    from duck.privacy import top_h_without_replacement
    from duck.privacy.outliers import subspace_utilities

    X = synthetic_scenario_1(5)
    cands = [[0], [1], [0, 1]]
    _, util = subspace_utilities(X, 3, 0.8, cands, device="cpu")
    for seed in range(5):
        got = dp_top_subspaces(X, 3, 0.8, 2, 0.7, cands, seed=seed, device="cpu")
        picked = top_h_without_replacement(util, 2, 0.7, 1.0, seed=seed)
        assert got == [tuple(cands[i]) for i in picked]


# ---------------------------------------------------------------------------------------------- neighbours.py
def test_record_and_subspace_refusals_state_the_value_and_the_fix():
    from duck.privacy.neighbours import as_records, check_k_records, check_lsh, check_subspace

    with pytest.raises(DuckInputError) as e:
        as_records(np.zeros((0, 3)), "cpu")
    assert str(e.value) == "X must be a non-empty 2-D array (N records, d features), got (0, 3)"
    with pytest.raises(DuckInputError) as e:
        as_records(np.zeros((4, 0)), "cpu", name="data")
    assert str(e.value) == "data must be a non-empty 2-D array (N records, d features), got (4, 0)"
    t = as_records([[1, 2], [3, 4]], "cpu")
    assert t.dtype == torch.float64 and t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert check_subspace(None, 3) == (0, 1, 2)
    assert check_subspace([2, np.int32(0)], 3) == (0, 2)  # sorted, numpy integers accepted
    assert check_subspace([2], 3) == (2,) and check_subspace([0], 1) == (0,)
    cases = {
        "01": "subspace='01' must be a sequence of integer coordinate indices such as [0, 2] (or None)",
        5: "subspace=5 must be a sequence of integer coordinate indices such as [0, 2] (or None)",
        (0, 1.0, True): ("subspace=(0, 1.0, True) holds non-integer entries [1.0, True]; coordinate indices are "
                         "integers such as [0, 2]"),
        (): "subspace is empty; give at least one coordinate index (or None for all)",
        (0, 3, -1): "subspace indices [3, -1] are out of range for data of dimension 3 (valid: 0..2)",
        (1, 2, 1): "subspace=[1, 2, 1] repeats a coordinate; list each index once",
    }
    for value, message in cases.items():
        with pytest.raises(DuckInputError) as e:
            check_subspace(value, 3)
        assert str(e.value) == message
    assert check_k_records(5, 5) == 5
    with pytest.raises(DuckInputError) as e:
        check_k_records(6, 5)
    assert str(e.value) == "k=6 exceeds the number of records N=5; use k <= N"
    lsh = LSHNeighbours(k=2, L=3, w=0.5)
    assert check_lsh(None) is None and check_lsh(lsh) is lsh
    assert check_lsh({"k": 2, "L": 3, "w": 0.5}) == lsh
    with pytest.raises(DuckInputError) as e:
        check_lsh({"k": 2, "w": 0.5, "width": 1, "bits": 2})
    assert str(e.value) == ("lsh={'k': 2, 'w': 0.5, 'width': 1, 'bits': 2}: unknown keys ['bits', 'width'], "
                            "missing keys ['L']; give k, L, w (and seed)")
    with pytest.raises(DuckInputError) as e:
        check_lsh([2, 3, 0.5])
    assert str(e.value) == ("lsh=[2, 3, 0.5] must be None, LSHNeighbours(k=..., L=..., w=..., seed=...) or a dict "
                            "with those keys")
    for bad in ({"k": 0, "L": 1, "w": 1.0}, {"k": 1, "L": 0, "w": 1.0}, {"k": 1, "L": 1, "w": 0.0},
                {"k": 1, "L": 1, "w": 1.0, "seed": -1}):
        with pytest.raises(DuckInputError):
            LSHNeighbours(**bad)


def test_count_within_is_inclusive_and_the_same_in_any_block_size():
    from duck.privacy.neighbours import count_within, squared_radius

    assert squared_radius(1.5, (0, 2)) == 1.5 * 1.5 * 2
    rng = np.random.default_rng(9)
    q = torch.from_numpy(rng.integers(-3, 4, size=(37, 2)).astype(np.float64))
    p = torch.from_numpy(rng.integers(-3, 4, size=(23, 2)).astype(np.float64))
    want = torch.tensor([int(sum((a - b).square().sum() <= 5.0 for b in p)) for a in q])  # integer ties at 5
    for block in (1, 46, 92, 135, 1 << 24):  # 1, 1, 2, 2 rows of 46 numbers per block, then all at once
        assert torch.equal(count_within(q, p, 5.0, block_elems=block), want), block


def test_lsh_degrees_are_the_index_neighbours_in_dist_s_units_over_many_query_batches():
    """More than 1,024 records (two query batches); with buckets far wider than the data every record shares a
    bucket with every other, so the LSH degrees equal the exact ones, in the subspace's dist_S units."""
    rng = np.random.default_rng(10)
    X = rng.normal(size=(1100, 3))
    exact = neighbour_counts(X, 0.2, [0, 2], device="cpu")
    wide = neighbour_counts(X, 0.2, [0, 2], lsh={"k": 1, "L": 1, "w": 1e4, "seed": 0}, device="cpu")
    assert wide.dtype == torch.int64 and torch.equal(wide, exact)
    assert exact.sum() > 0


@pytest.mark.parametrize("call,message", [
    (lambda X: outlier_count(X, 0, 1.0), "k=0 must be an integer >= 1"),
    (lambda X: dp_outlier_count(X, 0, 1.0, 0.5, 0.01), "k=0 must be an integer >= 1"),
    (lambda X: dp_top_subspaces(X, 0, 1.0, 1, 1.0, 1), "k=0 must be an integer >= 1"),
    (lambda X: subspace_outlier_counts(X, 0, 1.0, 1), "k=0 must be an integer >= 1"),
    (lambda X: subspace_outlier_counts(X, 2, 1.0, 0), "subspace size=0 must be an integer >= 1"),
    (lambda X: global_sensitivity_bounds(0, 2, 3), "N=0 must be an integer >= 1"),
    (lambda X: global_sensitivity_bounds(5, 0, 3), "dim=0 must be an integer >= 1"),
    (lambda X: global_sensitivity_bounds(5, 2, 0), "k=0 must be an integer >= 1"),
    (lambda X: kissing_number_upper(0), "d=0 must be an integer >= 1"),
    (lambda X: kissing_configuration(0, 1.0, 2, 2), "k=0 must be an integer >= 1"),
    (lambda X: kissing_configuration(2, 1.0, 2, 0), "dim=0 must be an integer >= 1"),
    (lambda X: kissing_configuration(2, 1.0, 0, 2), "n_spokes=0 must be an integer >= 1"),
])
def test_each_integer_refusal_names_its_own_argument(call, message):
    with pytest.raises(DuckInputError) as e:
        call(np.random.default_rng(0).normal(size=(10, 3)))
    assert str(e.value) == message


def test_all_subspaces_names_the_dimension():
    from duck.privacy.outliers import all_subspaces

    with pytest.raises(DuckInputError) as e:
        all_subspaces(0, 1)
    assert str(e.value) == "dim=0 must be an integer >= 1"
    assert all_subspaces(3, 2) == [(0, 1), (0, 2), (1, 2)]


@pytest.mark.parametrize("dim,n_spokes", [(1, 2), (2, 5), (3, 3)])
def test_kissing_configuration_is_computed_in_float64(dim, n_spokes):
    X, _ = kissing_configuration(3, 0.7, n_spokes, dim)
    scale = 0.99 * 0.7 * math.sqrt(dim)
    if dim == 1:
        spokes = [[-1.0], [1.0]][:n_spokes]
    else:
        spokes = [[math.cos(2 * math.pi * a / n_spokes), math.sin(2 * math.pi * a / n_spokes)] + [0.0] * (dim - 2)
                  for a in range(n_spokes)]
    want = torch.tensor([[scale * c for c in s] for s in spokes for _ in range(3)], dtype=torch.float64)
    torch.testing.assert_close(X[1:], want, rtol=1e-15, atol=1e-15)


def test_lsh_release_uses_the_lsh_count_and_the_lsh_bound():
    X = synthetic_scenario_1(6)
    lsh = LSHNeighbours(k=4, L=2, w=0.6, seed=2)
    eps, delta = 0.5, 0.01
    _, beta = smooth_gaussian_params(eps, delta)
    count = outlier_count(X, 3, 1.1, lsh=lsh, device="cpu")
    bound = smooth_sensitivity_bound(X, 3, 1.1, beta, lsh=lsh, device="cpu")
    assert count != outlier_count(X, 3, 1.1, device="cpu")  # the buckets miss neighbours here
    assert bound != smooth_sensitivity_bound(X, 3, 1.1, beta, device="cpu")
    got = dp_outlier_count(X, 3, 1.1, eps, delta, lsh=lsh, seed=4, device="cpu")
    want = smooth_gaussian_mechanism(count, bound, eps, delta, seed=4)
    assert got.value == want.value and got.sigma == want.sigma


def test_top_subspaces_use_sensitivity_one_and_accept_a_single_draw():
    from duck.privacy import top_h_without_replacement
    from duck.privacy.outliers import subspace_utilities

    X = synthetic_scenario_1(7)
    cands = [[0], [1], [0, 1]]
    _, util = subspace_utilities(X, 3, 0.8, cands)  # the default device
    assert util.max() - util.min() > 0.1
    eps = 12.0 / float(util.max() - util.min())  # utilities matter, but do not decide every draw
    for seed in range(40):
        got = dp_top_subspaces(X, 3, 0.8, 2, eps, cands, seed=seed, device="cpu")
        assert got == [tuple(cands[i]) for i in top_h_without_replacement(util, 2, eps, 1.0, seed=seed)], seed
    assert len(dp_top_subspaces(X, 3, 0.8, 1, 1.0, cands, seed=0, device="cpu")) == 1


def test_every_step_uses_the_device_the_caller_names(monkeypatch):
    """On this machine "auto" is the CPU too, so the device is checked where it is handed on: every helper
    gets the records' own device (a CUDA machine would otherwise move them)."""
    import duck.privacy.outliers as outliers

    seen = []

    def spy(name, real):
        def wrapped(*args, **kwargs):
            seen.append((name, args[1] if name == "as_records" and len(args) > 1 else kwargs.get("device", "MISSING")))
            return real(*args, **kwargs)
        return wrapped

    for name in ("as_records", "neighbour_counts", "outlier_count", "smooth_sensitivity_bound",
                 "subspace_outlier_counts", "subspace_utilities"):
        monkeypatch.setattr(outliers, name, spy(name, getattr(outliers, name)))
    X = synthetic_scenario_1(8)
    outliers.dp_outlier_count(X, 3, 1.1, 0.5, 0.01, seed=0, device="cpu")
    outliers.dp_outlier_count(X, 3, 1.1, 0.5, 0.01, mechanism="global", seed=0, device="cpu")
    outliers.dp_top_subspaces(X, 3, 1.1, 1, 1.0, 1, seed=0, device="cpu")
    outliers.subspace_utilities(X, 3, 1.1, 1, device="cpu")
    cpu = torch.device("cpu")
    assert seen and all(d in ("cpu", cpu) for _, d in seen), [s for s in seen if s[1] not in ("cpu", cpu)]
    assert {n for n, _ in seen} == {"as_records", "neighbour_counts", "outlier_count", "smooth_sensitivity_bound",
                                   "subspace_outlier_counts", "subspace_utilities"}


@pytest.mark.parametrize("call,message", [
    (lambda: neighbour_counts(np.zeros((3, 2)), 1.0, device="gpu"),
     "device='gpu' is not a device; use cpu, cuda, cuda:N or auto"),
    (lambda: neighbour_counts("abc", 1.0, device="cpu"), "X must be a real-valued numeric array, got dtype <U3"),
    (lambda: neighbour_counts(np.array([[1.0, np.nan], [0.0, 1.0], [2.0, 2.0]]), 1.0, device="cpu"),
     "X contains NaN or inf values (first bad rows: [0]); clean or drop those rows"),
    (lambda: LSHNeighbours(k=0, L=1, w=1.0), "LSHNeighbours.k=0 must be an integer >= 1"),
    (lambda: LSHNeighbours(k=1, L=0, w=1.0), "LSHNeighbours.L=0 must be an integer >= 1"),
    (lambda: LSHNeighbours(k=1, L=1, w=0.0), "LSHNeighbours.w (bucket width) must be a finite number > 0.0, got 0.0"),
    (lambda: LSHNeighbours(k=1, L=1, w=1.0, seed=-1), "LSHNeighbours.seed=-1 must be an integer >= 0"),
    (lambda: outlier_count(np.zeros((4, 2)), 0, 1.0), "k=0 must be an integer >= 1"),
    (lambda: dp_outlier_count(np.zeros((4, 2)), 0, 1.0, 0.5, 0.01), "k=0 must be an integer >= 1"),
])
def test_neighbour_refusals_name_the_argument_the_user_gave(call, message):
    with pytest.raises(DuckInputError) as e:
        call()
    assert str(e.value) == message


def test_records_refusals_name_the_data_set_and_its_shape():
    from duck.privacy.neighbours import as_records, check_k_records

    with pytest.raises(DuckInputError) as e:
        as_records([[1, 2], [3]], "cpu", name="data")
    assert str(e.value).startswith("data must be a numeric (N, d) array: ")
    with pytest.raises(DuckInputError) as e:
        as_records(np.array([[0.0, 1.0], [np.inf, 1.0]]), "cpu", name="data")
    assert str(e.value) == "data contains NaN or inf values (first bad rows: [1]); clean or drop those rows"
    assert as_records([[1, 2]]).device == torch.device("cpu")  # "auto" by default, the CPU here
    with pytest.raises(DuckInputError) as e:
        check_k_records(0, 5)
    assert str(e.value) == "k=0 must be an integer >= 1"
    from duck.privacy.neighbours import check_subspace

    with pytest.raises(DuckInputError) as e:  # the first five bad entries are named
        check_subspace([0.5, 1.5, 2.5, 3.5, 4.5, 5.5], 3)
    assert str(e.value) == ("subspace=[0.5, 1.5, 2.5, 3.5, 4.5, 5.5] holds non-integer entries "
                            "[0.5, 1.5, 2.5, 3.5, 4.5]; coordinate indices are integers such as [0, 2]")


def test_lsh_degrees_depend_on_the_seed_they_are_given():
    from duck.deletion.lsh import LSHIndex

    X = np.random.default_rng(11).normal(size=(200, 2))
    counts = {seed: neighbour_counts(X, 0.6, lsh=LSHNeighbours(k=3, L=1, w=0.5, seed=seed), device="cpu")
              for seed in (1, 2)}
    assert not torch.equal(counts[1], counts[2])
    Z = torch.from_numpy(X) / math.sqrt(2)  # dist_S units
    index = LSHIndex(2, 3, 1, 0.5, 2, device="cpu")
    ids = index.add(Z)
    assert counts[2].tolist() == [m.numel() - 1 for m in index.query(ids, 0.6)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_neighbour_counts_stay_on_the_device_asked_for():
    """The device mutants of neighbours.py that a CPU machine cannot tell apart (mutation/equivalent.toml)."""
    X = torch.from_numpy(np.random.default_rng(12).normal(size=(300, 3)))
    cpu = neighbour_counts(X, 0.5, device="cpu")
    on_gpu = neighbour_counts(X, 0.5, device="cuda")
    assert on_gpu.device.type == "cuda" and torch.equal(on_gpu.cpu(), cpu)
    back = neighbour_counts(X.cuda(), 0.5, device="cpu")  # CUDA records, CPU asked for
    assert back.device.type == "cpu" and torch.equal(back, cpu)
    lsh = LSHNeighbours(k=2, L=2, w=1.0, seed=3)
    lsh_cpu = neighbour_counts(X, 0.5, lsh=lsh, device="cpu")
    lsh_gpu = neighbour_counts(X, 0.5, lsh=lsh, device="cuda")
    assert lsh_gpu.device.type == "cuda" and lsh_cpu.device.type == "cpu"
    assert (lsh_gpu.cpu() <= cpu).all() and (lsh_cpu <= cpu).all()
