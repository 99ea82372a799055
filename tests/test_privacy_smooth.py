"""Smooth upper bound of the outlier count's local sensitivity: upper-bound property against exhaustive
enumeration and brute-force moves, beta-smoothness on random neighbouring data sets, Algorithm 2's early
stop, and an empirical (eps, delta) check of the released count on neighbouring data sets."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from duck.errors import DuckInputError
from duck.privacy import (
    LSHNeighbours,
    ball_count_upper_bound,
    dp_histogram_test,
    global_sensitivity_bounds,
    kissing_configuration,
    local_sensitivity_bound,
    make_generator,
    max_ball_count_exact,
    outlier_count,
    smooth_gaussian_mechanism,
    smooth_gaussian_params,
    smooth_sensitivity_bound,
)
from duck.privacy.mechanisms import gaussian_mechanism
from duck.privacy.smooth_sensitivity import degeneracy, smallest_enclosing_ball, within_graph


def count_np(X: np.ndarray, k: int, r: float) -> int:
    d = np.sqrt(((X[:, None] - X[None]) ** 2).sum(-1) / X.shape[1])
    return int(((d <= r).sum(1) - 1 < k).sum())


def test_degeneracy_matches_definition_on_small_graphs():
    rng = np.random.default_rng(0)
    for _ in range(40):
        n = int(rng.integers(1, 9))
        upper = np.triu(rng.random((n, n)) < rng.random(), 1)
        adj = upper | upper.T
        brute = max(
            int(adj[np.ix_(s, s)].sum(1).min())
            for m in range(1, n + 1)
            for s in map(list, itertools.combinations(range(n), m))
        )
        assert degeneracy(torch.from_numpy(adj)) == brute


def brute_force_seb_radius(P: np.ndarray) -> float:
    """Smallest ball over all supports of <= d+1 points (circumcentre in their affine hull) enclosing P."""
    best = np.inf
    for m in range(1, P.shape[1] + 2):
        for idx in itertools.combinations(range(len(P)), m):
            S = P[list(idx)]
            # centre c = S[0] + B^T lam with |c - S_i| equal for all i: B B^T lam = |B_i|^2 / 2
            B = S[1:] - S[0]
            lam = np.linalg.pinv(B @ B.T) @ ((B**2).sum(1) / 2) if m > 1 else np.zeros(0)
            c = S[0] + lam @ B if m > 1 else S[0]
            radius = np.linalg.norm(P - c, axis=1).max()
            if np.allclose(np.linalg.norm(S - c, axis=1), np.linalg.norm(S[0] - c)):
                best = min(best, radius)
    return float(best)


def test_smallest_enclosing_ball_matches_support_enumeration():
    rng = np.random.default_rng(1)
    for dim in (1, 2, 3):
        for _ in range(5):
            P = rng.normal(size=(8, dim))
            centre, radius = smallest_enclosing_ball(P)
            assert np.linalg.norm(P - centre, axis=1).max() <= radius * (1 + 1e-9)
            assert radius == pytest.approx(brute_force_seb_radius(P), rel=1e-9)


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_clique_bound_is_at_least_exact_ball_count(dim):
    rng = np.random.default_rng(dim)
    for _ in range(25):
        P = rng.uniform(0, 2, size=(int(rng.integers(1, 11)), dim))
        r = float(rng.uniform(0.2, 0.8))
        exact = max_ball_count_exact(P, r)
        bound = ball_count_upper_bound(P, r)
        assert bound >= exact
        if dim == 1:
            assert bound == exact  # interval graphs are chordal: degeneracy + 1 = clique number


def brute_force_local_sensitivity(X: np.ndarray, k: int, r: float, rng: np.random.Generator) -> int:
    """max |q(X) - q(X')| over moves of one record to many candidate positions (a lower estimate of LS)."""
    scale = r * math.sqrt(X.shape[1])
    cands = [X, (X[:, None] + X[None]).reshape(-1, X.shape[1]) / 2, rng.uniform(X.min() - 1, X.max() + 1, (200, X.shape[1]))]
    for direction in np.eye(X.shape[1]):
        cands += [X + 0.999 * scale * direction, X - 0.999 * scale * direction]
    cands = np.vstack(cands)
    base = count_np(X, k, r)
    best = 0
    for i in range(len(X)):
        for y in cands:
            moved = X.copy()
            moved[i] = y
            best = max(best, abs(count_np(moved, k, r) - base))
    return best


def clustered(rng: np.random.Generator, n: int, dim: int, k: int) -> np.ndarray:
    """Small data sets with many degrees close to k (small clusters and loners)."""
    centres = rng.uniform(0, 3 * math.sqrt(dim), size=(max(1, n // (k + 1)), dim))
    return centres[rng.integers(0, len(centres), n)] + rng.normal(0, 0.25, size=(n, dim))


def test_bounds_dominate_brute_force_local_sensitivity_and_exact_enumeration():
    rng = np.random.default_rng(2)
    for _ in range(6):
        dim, k, r = 2, int(rng.integers(1, 4)), 0.5
        X = clustered(rng, 10, dim, k)
        ls_brute = brute_force_local_sensitivity(X, k, r, rng)
        ls_bound = local_sensitivity_bound(X, k, r, device="cpu")
        assert ls_brute <= ls_bound
        for beta in (0.05, 0.5):
            clique = smooth_sensitivity_bound(X, k, r, beta, device="cpu")
            exact = smooth_sensitivity_bound(X, k, r, beta, ball_count="exact", device="cpu")
            assert clique >= exact - 1e-12 and exact >= ls_brute


def full_evaluation(X: np.ndarray, k: int, r: float, beta: float) -> float:
    """max_t e^{-beta t} A_t(X) over every t up to where N e^{-beta t} is negligible (no early stopping)."""
    Z = torch.from_numpy(X / math.sqrt(X.shape[1]))
    N = len(X)
    deg = (((Z[:, None] - Z[None]) ** 2).sum(-1) <= r * r).sum(1) - 1
    best = 0.0
    for t in range(N + int(math.log(N * 1e6) / beta) + 2):
        f = [ball_count_upper_bound(Z[(deg - j).abs() <= t], r) for j in (k, k - 1)]
        best = max(best, math.exp(-beta * t) * min(N, max(f) + t + 1))
    return best


def test_early_stopping_returns_the_full_maximum():
    rng = np.random.default_rng(4)
    for beta in (0.3, 1.0, 3.0):
        X = clustered(rng, 25, 2, 3)
        fast = smooth_sensitivity_bound(X, 3, 0.5, beta, device="cpu", return_details=True)
        assert fast.bound == pytest.approx(full_evaluation(X, 3, 0.5, beta), rel=1e-12)
        assert fast.n_evaluations <= fast.last_t


def neighbour_of(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Replace one record: by a random point, a copy of another record, or the middle of a cluster."""
    Xp = X.copy()
    i = int(rng.integers(len(X)))
    kind = rng.integers(3)
    if kind == 0:
        Xp[i] = rng.uniform(X.min(0) - 1, X.max(0) + 1)
    elif kind == 1:
        Xp[i] = X[rng.integers(len(X))]
    else:
        Xp[i] = X[rng.choice(len(X), 3, replace=False)].mean(0)
    return Xp


@pytest.mark.parametrize("beta", [0.05, 0.4, 1.5])
@pytest.mark.parametrize("lsh", [None, LSHNeighbours(k=2, L=3, w=1.0, seed=7)])
def test_smooth_bound_is_beta_smooth_on_random_neighbours(beta, lsh):
    rng = np.random.default_rng(int(beta * 100))
    for _ in range(40 if lsh is None else 12):
        dim, k = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        X = clustered(rng, int(rng.integers(6, 30)), dim, k)
        Xp = neighbour_of(X, rng)
        s, sp = (smooth_sensitivity_bound(D, k, 0.5, beta, lsh=lsh, device="cpu") for D in (X, Xp))
        assert s <= math.exp(beta) * sp * (1 + 1e-12)
        assert sp <= math.exp(beta) * s * (1 + 1e-12)
        if lsh is None:  # (the LSH count is a different query with its own local sensitivity)
            assert s >= local_sensitivity_bound(X, k, 0.5, device="cpu")


def test_ring_neighbour_stays_smooth():
    """A record moved into the centre of a sparse ring: a centre-restricted bound (max over records p of
    |B(p, 2r)|) jumps from 1 to the ring size + 1; the clique bound rises by one and S stays smooth."""
    k, r, beta = 1, 1.0, 1.0
    angles = 2 * np.pi * np.arange(5) / 5
    ring = 1.9 * np.c_[np.cos(angles), np.sin(angles)]  # in dist_S units: ring points pairwise > 2r apart
    X = math.sqrt(2) * np.vstack([ring, [[50.0, 50.0]]])  # dist_S divides by sqrt(2)
    Xp = math.sqrt(2) * np.vstack([ring, [[0.0, 0.0]]])
    s, sp = (smooth_sensitivity_bound(D, k, r, beta, device="cpu") for D in (X, Xp))
    assert max(s / sp, sp / s) <= math.exp(beta) * (1 + 1e-12)

    def centred(D: np.ndarray) -> int:
        Z = D / math.sqrt(2)
        return max(int((np.linalg.norm(Z - p, axis=1) <= 2 * r).sum()) for p in Z)

    assert (centred(X), centred(Xp)) == (1, 6)
    assert (ball_count_upper_bound(X / math.sqrt(2), r), ball_count_upper_bound(Xp / math.sqrt(2), r)) == (1, 2)


def _released_counts(X: np.ndarray, k: int, r: float, eps: float, delta: float, n: int, seed: int, mech: str):
    """n draws of dp_outlier_count's output distribution (bound computed once; same mechanism code)."""
    count = outlier_count(X, k, r, device="cpu")
    gen = make_generator(seed)
    if mech == "smooth":
        _, beta = smooth_gaussian_params(eps, delta)
        bound = smooth_sensitivity_bound(X, k, r, beta, device="cpu")
        return np.array([smooth_gaussian_mechanism(count, bound, eps, delta, seed=gen).value for _ in range(n)])
    gs = global_sensitivity_bounds(len(X), X.shape[1], k)[1]
    return np.array([gaussian_mechanism(count, gs, eps, delta, seed=gen).value for _ in range(n)])


def _neighbouring_worst_case(k: int) -> tuple[np.ndarray, np.ndarray]:
    X, X_moved = (D.numpy() for D in kissing_configuration(k, 1.0, 5, 2))  # counts differ by 5k + 1
    rng = np.random.default_rng(0)
    filler = rng.normal(10.0, 0.3, size=(30, 2))  # a dense inlier cluster far away
    return np.vstack([X, filler]), np.vstack([X_moved, filler])


def _dp_check(n: int, mech: str) -> None:
    k, eps, delta = 2, 0.5, 0.01
    X, Xp = _neighbouring_worst_case(k)
    assert abs(outlier_count(X, k, 1.0) - outlier_count(Xp, k, 1.0)) == 5 * k + 1
    a = _released_counts(X, k, 1.0, eps, delta, n, 0, mech)
    b = _released_counts(Xp, k, 1.0, eps, delta, n, 1, mech)
    assert dp_histogram_test(a, b, eps, delta)["passed"]


def test_histogram_check_rejects_smooth_noise_without_alpha():
    """Negative control: scaling the noise by S instead of S/alpha violates (eps, delta) here."""
    k, eps, delta, n = 2, 0.5, 0.01, 20_000
    X, Xp = _neighbouring_worst_case(k)
    _, beta = smooth_gaussian_params(eps, delta)
    draws = []
    for seed, D in enumerate((X, Xp)):
        gen = make_generator(seed)
        bound, count = smooth_sensitivity_bound(D, k, 1.0, beta, device="cpu"), outlier_count(D, k, 1.0)
        draws.append(count + bound * torch.randn(n, generator=gen, dtype=torch.float64).numpy())
    assert not dp_histogram_test(draws[0], draws[1], eps, delta)["passed"]


@pytest.mark.parametrize("mech", ["smooth", "global"])
def test_released_count_passes_histogram_dp_check_100k(mech):
    """The issue's target: 100,000 draws per neighbouring data set (the worst-case pair, counts 11 apart)."""
    _dp_check(100_000, mech)


@pytest.mark.parametrize(
    "call",
    [
        lambda X: smooth_sensitivity_bound(X, 2, 1.0, True),
        lambda X: smooth_sensitivity_bound(X, 2, 1.0, float("nan")),
        lambda X: smooth_sensitivity_bound(X, 2, 1.0, "0.1"),
        lambda X: smooth_sensitivity_bound(X, 10**12, 1.0, 0.1),
        lambda X: smooth_sensitivity_bound(X, 2, 1.0, 0.1, ball_count="fast"),
        lambda X: smooth_sensitivity_bound(X, 2, 1.0, 0.1, lsh={"k": 2}),
        lambda X: ball_count_upper_bound(np.array([1.0, 5.0, 10.0]), 1.0),  # 1-D: ambiguous, refused
        lambda X: max_ball_count_exact(np.array([1.0, 5.0, 10.0]), 1.0),
        lambda X: ball_count_upper_bound(np.zeros((0, 2)), -1),  # r checked even for an empty set
        lambda X: ball_count_upper_bound(np.zeros((0, 2)), "x"),
        lambda X: ball_count_upper_bound(X + 0j, 1.0),
        lambda X: max_ball_count_exact([[0, 0], [np.nan, np.nan], [100, 100]], 1.0),
        lambda X: max_ball_count_exact([["a", "b"]], 1.0),
    ],
)
def test_bad_input_raises_input_errors(call):
    X = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(DuckInputError):
        call(X)


def test_one_dimensional_points_as_a_column_and_empty_sets():
    line = np.array([[1.0], [1.5], [5.0], [10.0]])
    assert ball_count_upper_bound(line, 1.0) == max_ball_count_exact(line, 1.0) == 2
    assert ball_count_upper_bound(np.zeros((0, 2)), 1.0) == max_ball_count_exact(np.zeros((0, 2)), 1.0) == 0


def test_tiny_beta_stays_feasible_and_exact():
    """t never needs to pass N - 1 (A_t = N there), so the work does not grow like 1/beta."""
    X = np.random.default_rng(0).normal(size=(20, 2))
    assert smooth_sensitivity_bound(X, 2, 1.0, 1e-300, device="cpu") == 20.0
    assert smooth_sensitivity_bound(X, 2, 1.0, 1e-12, device="cpu") == pytest.approx(20.0)
    assert smooth_sensitivity_bound(X, 2, 1.0, 1e300, device="cpu") >= 1.0
    Y = clustered(np.random.default_rng(5), 25, 2, 3)
    assert smooth_sensitivity_bound(Y, 3, 0.5, 0.02, device="cpu") == pytest.approx(
        full_evaluation(Y, 3, 0.5, 0.02), rel=1e-12
    )


# --- issue 39: the survivors of duck/privacy/smooth_sensitivity.py's first mutation run (each test names them) ----


def test_point_and_parameter_refusals_name_the_value():
    """Kills: the names in point_set's, max_ball_count_exact's and local_sensitivity_bound's messages (defaults
    included), max_points' minimum 0 and its bound (`>=`), and the too-many-points message."""
    from duck.privacy.smooth_sensitivity import point_set

    cases = [
        (lambda: ball_count_upper_bound("abc", 1.0), r"points must be a real-valued numeric array, got dtype <U3"),
        (lambda: point_set(np.zeros(3)), r"points must be a 2-D \(n, d\) array with d >= 1, got shape \(3,\); for n "
                                         r"points on a line pass points.reshape\(-1, 1\)"),
        (lambda: point_set([[1.0, float("nan")]], "X"), r"X contains NaN or inf values; clean or drop those points"),
        (lambda: point_set("ab", "X"), r"X must be a real-valued numeric array, got dtype <U2"),
        (lambda: max_ball_count_exact(np.zeros((3, 2)), 1.0, max_points=-1), r"max_points=-1 must be an integer >= 0"),
        (lambda: max_ball_count_exact(np.zeros((4, 2)), 1.0, max_points=3),
         r"max_ball_count_exact enumerates subsets of 4 points \(exponential\); it accepts at most 3. Use "
         r"ball_count_upper_bound for larger sets"),
        (lambda: local_sensitivity_bound(np.zeros((3, 2)), 0, 1.0), r"k=0 must be an integer >= 1"),
        (lambda: smallest_enclosing_ball(np.zeros(3)), r"points must be an \(m, d\) array, got shape \(3,\)"),
    ]
    for call, message in cases:
        with pytest.raises(DuckInputError, match=f"^{message}$"):
            call()
    assert max_ball_count_exact(np.zeros((0, 2)), 1.0, max_points=0) == 0  # 0 is a valid limit for no points
    assert max_ball_count_exact(np.zeros((3, 2)), 1.0, max_points=3) == 3  # exactly at the limit


def test_empty_sets_have_no_ball():
    """Kills: the empty set's count taken from the dimension (`shape[1]`), and the no-ball radius (-1)."""
    assert ball_count_upper_bound(np.zeros((0, 2)), 1.0) == 0
    assert smallest_enclosing_ball(np.zeros((0, 3))) == (None, -1.0)


def test_integer_points_are_enclosed_in_float64():
    """Kills: the points kept as integers (`dtype=None` or left out): the Gram matrix of int64 coordinates of
    4e9 overflows."""
    centre, radius = smallest_enclosing_ball(np.array([[0, 0], [4_000_000_000, 0]], dtype=np.int64))
    assert radius == 2e9 and centre.tolist() == [2e9, 0.0]
    centre, radius = smallest_enclosing_ball(np.array([[0, 0], [4_000_000_000, 0], [2_000_000_000, 1]],
                                                      dtype=np.int64))
    assert radius == pytest.approx(2e9, rel=1e-12)


def test_a_pair_exactly_one_diameter_apart_fits_one_ball():
    """Kills: the fit test's tolerance turned inside out (`r / (1 + 1e-12)`, `r * (1 - 1e-12)`): two points 2r
    apart have a smallest enclosing ball of radius exactly r."""
    assert max_ball_count_exact(np.array([[0.0, 0.0], [2.0, 0.0], [10.0, 0.0]]), 1.0) == 2


def test_algorithm_1_prunes_supersets_that_cannot_beat_the_best(monkeypatch):
    """Kills: the pruning rule (`or` as `and`, the remaining count added rather than subtracted): with every
    point in one ball the first path finds them all, and no other subset is enclosed (n + 1 ball tests, not
    2^n)."""
    import duck.privacy.smooth_sensitivity as ss

    calls = []
    real = ss.smallest_enclosing_ball
    monkeypatch.setattr(ss, "smallest_enclosing_ball", lambda pts: calls.append(len(pts)) or real(pts))
    X = np.random.default_rng(0).uniform(-0.1, 0.1, size=(10, 2))
    assert ss.max_ball_count_exact(X, 1.0) == 10
    assert len(calls) <= 2 * len(X), len(calls)


def test_local_bound_uses_the_subspace_and_the_default_device():
    """Kills: the subspace dropped, and the default device (`auto`) changed: two clusters far apart in
    coordinate 1 only are one cluster in the subspace of coordinate 0."""
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 50.0], [0.1, 50.0], [0.05, 100.0]])
    full = local_sensitivity_bound(X, 1, 0.5, device="cpu")
    sub = local_sensitivity_bound(X, 1, 0.5, subspace=[0], device="cpu")
    assert full != sub
    assert local_sensitivity_bound(X, 1, 0.5) == full and local_sensitivity_bound(X, 1, 0.5, subspace=[0]) == sub


def test_point_set_messages_and_float64_points():
    """Kills: point_set's shape text for ragged input, its shape and NaN messages, and the cast to float64."""
    from duck.privacy.smooth_sensitivity import point_set

    with pytest.raises(DuckInputError, match=r"^points must be a numeric \(n, d\) array: "):
        point_set([[1.0, 2.0], [3.0]])
    with pytest.raises(DuckInputError, match=r"^points must be a 2-D \(n, d\) array with d >= 1, got shape \(2, 0\); "
                                             r"for n points on a line pass points.reshape\(-1, 1\)$"):
        point_set(np.zeros((2, 0)))
    with pytest.raises(DuckInputError, match=r"^points contains NaN or inf values; clean or drop those points$"):
        point_set([[1.0, float("inf")]])
    assert point_set(np.array([[1, 2]], dtype=np.int32)).dtype == torch.float64
    assert point_set(np.array([[1, 2]], dtype=np.float32)).dtype == torch.float64


def test_within_graph_joins_points_at_the_radius_exactly():
    """Kills: `<=` as `<`, the squared radius as radius / radius, and the radius ignored: distance 2 joined at
    radius 2, not at 1.9; the squared radius wins when given."""
    P = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, 0.0]], dtype=torch.float64)
    assert within_graph(P, 2.0).tolist() == [[False, True, False], [True, False, False], [False, False, False]]
    assert not within_graph(P, 1.9).any()
    assert within_graph(P, 0.0, radius2=9.0).sum() == 4  # 0-1 (d^2 = 4) and 1-2 (d^2 = 9)


def test_early_stopping_returns_the_full_maximum_on_many_sets():
    """Kills the early stop's and the band sizes' result-changing mutants (the last t, the bins, the horizon, the
    bounds' growth): Algorithm 2 equals the brute-force maximum over every t on random sets of 3-20 records, for
    betas from 0.02 to 20."""
    rng = np.random.default_rng(11)
    for i in range(24):
        dim, k = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        n = int(rng.integers(3, 21))
        X = clustered(rng, n, dim, k)
        beta = (0.02, 0.3, 2.0, 20.0)[i % 4]
        fast = smooth_sensitivity_bound(X, min(k, n), 0.5, beta, device="cpu")
        assert fast == pytest.approx(full_evaluation(X, min(k, n), 0.5, beta), rel=1e-12), (i, n, k, beta)


def test_smooth_bound_checks_name_the_value_and_use_every_setting():
    """Kills: the names in the k / beta / ball_count messages, beta's open lower end, the default device, the
    subspace dropped (from the degrees and the coordinates), and 'exact' read as 'clique'."""
    X = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 50.0], [0.1, 50.0], [0.05, 100.0]])
    for call, message in [
        (lambda: smooth_sensitivity_bound(X, 0, 0.5, 1.0), r"k=0 must be an integer >= 1"),
        (lambda: smooth_sensitivity_bound(X, 1, 0.5, 0.0), r"beta must be a finite number > 0.0, got 0.0"),
        (lambda: smooth_sensitivity_bound(X, 1, 0.5, 1.0, ball_count="greedy"),
         r"ball_count='greedy' is not supported; use 'clique' or 'exact'"),
    ]:
        with pytest.raises(DuckInputError, match=f"^{message}$"):
            call()
    full = smooth_sensitivity_bound(X, 1, 0.5, 1.0, device="cpu")
    assert smooth_sensitivity_bound(X, 1, 0.5, 1.0) == full  # the default device: "auto"
    sub = smooth_sensitivity_bound(X, 1, 0.5, 1.0, subspace=[0], device="cpu")
    assert sub == pytest.approx(full_evaluation(X[:, [0]], 1, 0.5, 1.0), rel=1e-12) and sub != full
    # a square of side 1.9 (in dist_S units, which divide by sqrt 2): its sides are 2r = 2 edges (a 4-cycle, f = 3)
    # but no ball of radius 1 holds three corners (their smallest ball has radius 1.34): the exact count is 2
    square = np.array([[0.0, 0.0], [1.9, 0.0], [0.0, 1.9], [1.9, 1.9]]) * math.sqrt(2)
    corners = square / math.sqrt(2)
    assert ball_count_upper_bound(corners, 1.0) == 3 and max_ball_count_exact(corners, 1.0) == 2
    clique = smooth_sensitivity_bound(square, 1, 1.0, 5.0, device="cpu")
    exact = smooth_sensitivity_bound(square, 1, 1.0, 5.0, ball_count="exact", device="cpu")
    assert exact < clique


def algorithm_2_schedule(X: np.ndarray, k: int, r: float, beta: float, degrees: np.ndarray | None = None
                         ) -> tuple[float, list[int], int]:
    """Algorithm 2 stated term by term (numpy, no vectorised horizon): the term ``t`` is evaluated exactly when
    Proposition 2's bound from the last evaluated term ``T``, ``e^{-beta t} min(N, max_j(f_j(T) + |V_t(j)| -
    |V_T(j)|) + t + 1)``, exceeds the running maximum; the run stops at the first ``t`` where no term up to
    ``N - 1`` can. Returns ``(maximum, evaluated terms, the t it stopped at)``."""
    Z = torch.from_numpy(X / math.sqrt(X.shape[1]))
    N = len(X)
    deg = (((Z[:, None] - Z[None]) ** 2).sum(-1) <= r * r).sum(1).numpy() - 1 if degrees is None else degrees
    dist = {j: np.abs(deg - j) for j in (k, k - 1)}

    def size(j: int, t: int) -> int:
        return int((dist[j] <= t).sum())

    def f(j: int, t: int) -> int:
        return ball_count_upper_bound(Z[torch.from_numpy(dist[j] <= t)], r)

    best, evaluated, reference, t = 0.0, [], None, 0
    while t <= N - 1:
        if reference is not None:
            T, fT = reference
            later = [u for u in range(t, N) if math.exp(-beta * u) * min(
                N, max(fT[j] + size(j, u) - size(j, T) for j in (k, k - 1)) + u + 1) > best]
            if not later:
                break
            t = later[0]
        fT = {j: f(j, t) for j in (k, k - 1)}
        evaluated.append(t)
        best = max(best, math.exp(-beta * t) * min(N, max(fT.values()) + t + 1))
        reference = (t, fT)
        t += 1
    return best, evaluated, t


def test_algorithm_2_evaluates_exactly_the_terms_proposition_2_cannot_rule_out():
    """Algorithm 2's work and its diagnostics, against the term-by-term statement above and brute force on 32
    random sets of 3-20 records, betas 0.02-20: the same terms evaluated (their number) and the same stopping
    t (neither more cautious nor earlier: a later horizon, a larger upper bound, `>=` for `>`, a stop one term
    early all change them), the first maximiser of ``e^{-beta t} A_t`` over every t as ``argmax_t`` and ``A_0``
    equal to :func:`local_sensitivity_bound`."""
    rng = np.random.default_rng(21)
    for i in range(32):
        dim, n = int(rng.integers(1, 4)), int(rng.integers(3, 21))
        k = min(int(rng.integers(1, 4)), n)
        X = clustered(rng, n, dim, k)
        beta = (0.02, 0.3, 2.0, 20.0)[i % 4]
        got = smooth_sensitivity_bound(X, k, 0.5, beta, device="cpu", return_details=True)
        best, evaluated, stop = algorithm_2_schedule(X, k, 0.5, beta)
        assert got.bound == pytest.approx(best, rel=1e-12), (i, n, k, beta)
        assert (got.n_evaluations, got.last_t) == (len(evaluated), stop), (i, n, k, beta, evaluated)
        Z = torch.from_numpy(X / math.sqrt(dim))
        deg = ((((Z[:, None] - Z[None]) ** 2).sum(-1) <= 0.25).sum(1) - 1).numpy()
        terms = [math.exp(-beta * t) * min(n, max(ball_count_upper_bound(Z[torch.from_numpy(np.abs(deg - j) <= t)],
                                                                         0.5) for j in (k, k - 1)) + t + 1)
                 for t in range(n)]
        assert got.argmax_t == int(np.argmax(terms)) and terms[got.argmax_t] == pytest.approx(got.bound, rel=1e-12)
        assert got.local_sensitivity_bound == local_sensitivity_bound(X, k, 0.5, device="cpu") == terms[0]


def test_the_smooth_bound_counts_with_the_lsh_degrees_it_is_given():
    """With ``lsh`` the degrees are the LSH index's (lower than the exact ones: missed neighbours), and the
    bound is Algorithm 2 on those degrees, not on the exact ones."""
    from duck.privacy.neighbours import neighbour_counts

    X = clustered(np.random.default_rng(0), 16, 2, 3)
    lsh = LSHNeighbours(k=3, L=1, w=0.3, seed=1)
    deg_lsh = neighbour_counts(X, 0.5, lsh=lsh, device="cpu").numpy()
    deg = neighbour_counts(X, 0.5, device="cpu").numpy()
    assert (deg_lsh <= deg).all() and (deg_lsh < deg).any()  # the index misses some neighbours here
    for beta in (0.3, 2.0):
        got = smooth_sensitivity_bound(X, 3, 0.5, beta, lsh=lsh, device="cpu")
        exact = smooth_sensitivity_bound(X, 3, 0.5, beta, device="cpu")
        assert got == pytest.approx(algorithm_2_schedule(X, 3, 0.5, beta, degrees=deg_lsh)[0], rel=1e-12)
        assert got != exact


def test_the_band_graph_joins_records_exactly_2r_apart():
    """Three 1-D records with no neighbour within r = 0.5 (degree 0: all in the band of k - 1 = 0 at t = 0), two of
    them exactly 2r apart: the 2r graph has that edge, f = 1 + 1 = 2 and A_0 = min(3, 2 + 1) = 3 (2 without the
    edge); a large beta leaves A_0 as the bound."""
    X = np.array([[0.0], [1.0], [10.0]])
    assert local_sensitivity_bound(X, 1, 0.5, device="cpu") == 3
    assert smooth_sensitivity_bound(X, 1, 0.5, 50.0, device="cpu") == 3.0


def test_algorithm_1_stops_a_branch_that_can_at_most_tie_the_best(monkeypatch):
    """Two points share a ball of radius r, the third is far: Algorithm 1 tests {a}, {a, b}, {a, b, c}, {a, b} (c
    left out), {a} (b left out) and then stops: a branch whose chosen points plus all the remaining ones can only
    equal the best (2) is not explored (5 ball tests; 'cannot beat' read as 'cannot reach' explores more)."""
    import duck.privacy.smooth_sensitivity as ss

    calls = []
    real = ss.smallest_enclosing_ball
    monkeypatch.setattr(ss, "smallest_enclosing_ball", lambda pts: calls.append(len(pts)) or real(pts))
    assert ss.max_ball_count_exact(np.array([[0.0, 0.0], [0.5, 0.0], [9.0, 0.0]]), 1.0) == 2
    assert calls == [1, 2, 3, 2, 1]


def test_algorithm_1_refuses_more_than_20_points_by_default():
    with pytest.raises(DuckInputError, match="it accepts at most 20"):
        max_ball_count_exact(np.zeros((21, 2)), 1.0)
    assert max_ball_count_exact(np.zeros((20, 2)), 1.0) == 20


def test_the_smallest_ball_of_large_integer_points_is_computed_in_float64():
    """An acute triangle with integer corners of 4e9 (its ball needs all three: the circumcircle, centre (2e9, 5e9 / 6)
    by hand): the Gram matrix of its edges (1.6e19) overflows int64 unless the points become float64."""
    centre, radius = smallest_enclosing_ball(np.array([[0, 0], [4_000_000_000, 0], [2_000_000_000, 3_000_000_000]]))
    assert centre == pytest.approx([2e9, 5e9 / 6], rel=1e-12)
    assert radius == pytest.approx(math.hypot(2e9, 5e9 / 6), rel=1e-12)


def test_isolated_records_with_k_equal_to_n_reach_their_maximum_at_the_last_term():
    """N = 4 records far apart (degree 0) and k = N: both bands stay empty up to t = N - 2 (|0 - k| = 4 and
    |0 - (k - 1)| = 3), so A_t = t + 1 for t <= 2 and A_3 = N; with beta = 0.02 the terms grow and the maximum is
    the last one, e^{-3 beta} 4, reached only by evaluating t = N - 1."""
    X = np.array([[0.0], [10.0], [20.0], [30.0]])
    got = smooth_sensitivity_bound(X, 4, 0.5, 0.02, device="cpu", return_details=True)
    assert got.bound == pytest.approx(4 * math.exp(-0.06), rel=1e-12) and got.argmax_t == 3
    assert (got.n_evaluations, got.last_t) == (4, 4) and got.local_sensitivity_bound == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_records_give_the_cpu_bounds():
    """On a GPU machine: the records, degrees and band members stay on the CUDA device and the bounds equal the
    CPU ones (the device mutants listed as equivalent on CPU-only machines in mutation/equivalent.toml)."""
    X = clustered(np.random.default_rng(3), 14, 2, 2)
    for ball_count in ("clique", "exact"):
        assert (smooth_sensitivity_bound(X, 2, 0.5, 0.4, ball_count=ball_count, device="cuda")
                == smooth_sensitivity_bound(X, 2, 0.5, 0.4, ball_count=ball_count, device="cpu"))
    assert local_sensitivity_bound(X, 2, 0.5, device="cuda") == local_sensitivity_bound(X, 2, 0.5, device="cpu")
    adjacency = within_graph(torch.from_numpy(X).cuda(), 1.0)
    assert degeneracy(adjacency) == degeneracy(adjacency.cpu().numpy())
