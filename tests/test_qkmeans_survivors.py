"""Q-k-means (duck/deletion/qkmeans.py): documented defaults and exact refusals at both sides of each boundary
(constructor, replayed random states, lattice widths, data scale), the auto lattice width by hand on its phased
half-octave grid (ties, underflow, overflow), Alg. 1 against a naive reference (one and two iterations, equal
phases, a damped mean next to a cell boundary, balance flags at s = m), the exact deletion check against fresh
replayed fits (every verdict and restart iteration, empty clusters, empty requests), re-seeding after deleted
seeds, storage compaction, and the CUDA placement of every stored tensor."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
import torch
from off_host import OffHost
from refusals import refused
from test_kmeans_qkmeans import models_equal, naive_qkmeans  # the reference Alg. 1 and model equality, shared

from duck.deletion import QKMeans
from duck.deletion._kmeans_ops import kmeans_plusplus, make_generator, uniforms
from duck.deletion.qkmeans import balanced_means, check_replay_draws
from duck.utils import resolve_device

F64 = dict(device="cpu", dtype=torch.float64)
LATTICE_ADVICE = (
    "a finer lattice is below the dtype's resolution, a coarser one collapses every centroid to one point or "
    "overflows; choose eps in that range (typically a fraction of the clusters' spread)"
)


def state(seed_ids, phases, eps_phase=0.5, n_reseeds=0) -> dict:
    """A ``random_state_`` dict written by hand (for replayed fits with chosen draws)."""
    return dict(seed_ids=seed_ids, phases=np.asarray(phases, dtype=np.float64), eps_phase=eps_phase, n_reseeds=n_reseeds)


def predicted_deletion(before: dict, eps_before: float, fresh: QKMeans, n_ids: int, seed_deleted: bool) -> dict:
    """``last_deletion_`` as the exact check must report it, read off a fresh fit on the remaining rows that
    replays the same draws: the model is kept iff every iteration's imbalance flags, quantised centroids and
    accept/stop decision are unchanged; otherwise the first changed iteration is the restart point, and the
    reason is the first of (imbalance, centroid, decision) that changed there. A deleted seed or a changed
    auto width restarts at iteration 1."""
    if seed_deleted:
        return dict(n_ids=n_ids, retrained=True, reason="seed", restart_iteration=1)
    if fresh.eps_ != eps_before:
        return dict(n_ids=n_ids, retrained=True, reason="eps", restart_iteration=1)
    after = fresh.metadata_
    for tau in range(1, len(before["accepted"]) + 1):
        if not np.array_equal(after["flags"][tau - 1], before["flags"][tau - 1]):
            return dict(n_ids=n_ids, retrained=True, reason="imbalance", restart_iteration=tau)
        if not np.array_equal(after["centers"][tau], before["centers"][tau]):
            return dict(n_ids=n_ids, retrained=True, reason="centroid", restart_iteration=tau)
        if after["accepted"][tau - 1] != before["accepted"][tau - 1]:
            return dict(n_ids=n_ids, retrained=True, reason="decision", restart_iteration=tau)
    return dict(n_ids=n_ids, retrained=False, reason="", restart_iteration=0)


# ------------------------------------------------------------------------------------------------ constructor
def test_defaults_are_the_documented_ones():
    """k = 8, T = 10 (the paper), gamma 0.2, eps auto with rho 0.5, seed 0, device auto, float32, and
    n_local_trials = 2 (2 + floor(ln k)) unless given (1 = the paper's plain k-means++)."""
    model = QKMeans()
    assert (model.n_clusters, model.n_iter, model.gamma, model.eps, model.eps_scale) == (8, 10, 0.2, "auto", 0.5)
    assert (model.seed, model.dtype, model.device) == (0, torch.float32, resolve_device("auto"))
    assert model.n_local_trials == 2 * (2 + 2)  # ln 8 = 2.08
    assert QKMeans(1).n_local_trials == 2 * 2 and QKMeans(3).n_local_trials == 2 * 3
    assert QKMeans(3, n_local_trials=1).n_local_trials == 1 and QKMeans(3, n_local_trials=5).n_local_trials == 5
    assert QKMeans(3, device="cpu").device == torch.device("cpu")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(n_iter=0), "n_iter=0 must be an integer >= 1"),
        (dict(gamma=0), "gamma must be a finite number > 0.0 and < 1.0, got 0"),
        (dict(gamma=1.0), "gamma must be a finite number > 0.0 and < 1.0, got 1.0"),
        (dict(gamma=1.5), "gamma must be a finite number > 0.0 and < 1.0, got 1.5"),
        (dict(eps=0), "eps must be 'auto' or a finite number > 0, got 0"),
        (dict(eps=-1.0), "eps must be 'auto' or a finite number > 0, got -1.0"),
        (dict(eps="big"), "eps must be 'auto' or a finite number > 0, got 'big'"),
        (dict(eps_scale=0), "eps_scale must be a finite number > 0.0, got 0"),
        (dict(n_local_trials=0), "n_local_trials=0 must be an integer >= 1"),
        (dict(device="bogus"), "device='bogus' is not a device; use cpu, cuda, cuda:N or auto"),
    ],
)
def test_constructor_refusals_have_exact_messages(kwargs, message):
    with refused(message):
        QKMeans(3, **kwargs)


def test_constructor_accepts_the_boundaries():
    """The open intervals' nearest values are kept as given."""
    model = QKMeans(1, n_iter=1, gamma=1e-12, eps=5e-324, eps_scale=5e-324)
    assert (model.n_iter, model.gamma, model.eps, model.eps_scale) == (1, 1e-12, 5e-324, 5e-324)
    assert QKMeans(1, gamma=1 - 2**-53).gamma == 1 - 2**-53


# ------------------------------------------------------------------------------------------ replayed states
def test_check_replay_draws_returns_the_checked_draws():
    """Seed ids as int64, phases as float64 CPU (from float32 input too), phases and eps phase may be 0."""
    phases = np.array([[0.0, 0.25], [0.5, 0.75], [0.125, 0.0]], dtype=np.float32)
    seed_ids, out, eps_phase, n_reseeds = check_replay_draws(
        dict(seed_ids=[7, 3], phases=phases, eps_phase=0.0, n_reseeds=3), 2, 3, 2
    )
    assert seed_ids.dtype == np.int64 and seed_ids.tolist() == [7, 3]
    assert out.dtype == torch.float64 and out.device.type == "cpu"
    assert out.tolist() == phases.astype(np.float64).tolist()
    assert (eps_phase, n_reseeds) == (0.0, 3)
    _, _, eps_phase, _ = check_replay_draws(dict(seed_ids=[1], phases=[[0.5]], eps_phase=1 - 2**-53, n_reseeds=0), 1, 1)
    assert eps_phase == 1 - 2**-53


def _ragged_detail() -> str:
    try:
        np.asarray([[0.1], [0.2, 0.3]])
    except ValueError as e:
        return str(e)
    raise AssertionError("numpy accepted a ragged list")  # pragma: no cover


GOOD = dict(seed_ids=[0, 1], phases=[[0.5, 0.5]] * 3, eps_phase=0.5, n_reseeds=0)
SHAPE_ADVICE = "; replay the random_state_ of a model with the same options"
PHASE_ADVICE = "; replay the random_state_ of a QKMeans"


@pytest.mark.parametrize(
    ("change", "d", "message"),
    [
        (None, None, "replay must be a QKMeans.random_state_ dict, got list"),
        (dict(phases=None), None, "replay must be a QKMeans.random_state_ dict; missing keys ['phases']"),
        (
            dict(eps_phase=None, n_reseeds=None),
            None,
            "replay must be a QKMeans.random_state_ dict; missing keys ['eps_phase', 'n_reseeds']",
        ),
        (
            dict(seed_ids=[[0, 1]]),
            None,
            "replay['seed_ids'] has shape (1, 2); give a flat (1-D) sequence of integer ids",
        ),
        (
            dict(seed_ids=[0]),
            None,
            "replay holds seeds [0] but n_clusters=2; replay the random_state_ of a model with the same k",
        ),
        (
            dict(seed_ids=[4, 4]),
            None,
            "replay holds seeds [4, 4] but n_clusters=2; replay the random_state_ of a model with the same k",
        ),
        (dict(phases="abc"), None, "replay['phases'] must be a real-valued numeric array, got dtype <U3"),
        (
            dict(phases=[[0.1], [0.2, 0.3]]),
            None,
            f"replay['phases'] must be a numeric (n_iter, n_features) array: {_ragged_detail()}",
        ),
        (dict(phases=[[0.5, 0.5]] * 2), None, "replay phases have shape (2, 2) but n_iter=3" + SHAPE_ADVICE),
        (
            dict(phases=[[0.5, 0.5]] * 2),
            2,
            "replay phases have shape (2, 2) but n_iter=3 and X has 2 features" + SHAPE_ADVICE,
        ),
        (dict(phases=[0.5, 0.5, 0.5]), None, "replay phases have shape (3,) but n_iter=3" + SHAPE_ADVICE),
        (dict(phases=np.full((3, 2, 1), 0.5)), None, "replay phases have shape (3, 2, 1) but n_iter=3" + SHAPE_ADVICE),
        (dict(phases=np.zeros((3, 0))), None, "replay phases have shape (3, 0) but n_iter=3" + SHAPE_ADVICE),
        (
            dict(phases=[[0.5, 0.5]] * 3),
            3,
            "replay phases have shape (3, 2) but n_iter=3 and X has 3 features" + SHAPE_ADVICE,
        ),
        (
            dict(phases=[[0.5, 1.0], [0.5, 0.5], [0.5, 0.5]]),
            None,
            "replay['phases'] must be uniform draws in [0, 1), got [1.0]" + PHASE_ADVICE,
        ),
        (
            dict(phases=[[-0.5, 0.5], [math.nan, 0.5], [0.5, 1.5]]),
            None,
            "replay['phases'] must be uniform draws in [0, 1), got [-0.5, nan, 1.5]" + PHASE_ADVICE,
        ),
        (
            dict(phases=[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
            None,
            "replay['phases'] must be uniform draws in [0, 1), got [1.0, 2.0, 3.0, 4.0, 5.0]" + PHASE_ADVICE,
        ),
        (dict(eps_phase=1.0), None, "replay['eps_phase'] must be a finite number >= 0.0 and < 1.0, got 1.0"),
        (dict(eps_phase=-0.25), None, "replay['eps_phase'] must be a finite number >= 0.0 and < 1.0, got -0.25"),
        (dict(n_reseeds=-1), None, "replay['n_reseeds']=-1 must be an integer >= 0"),
    ],
)
def test_check_replay_draws_refusals_have_exact_messages(change, d, message):
    if change is None:
        bad = [GOOD]
    else:
        bad = {key: value for key, value in {**GOOD, **change}.items() if value is not None}
    with refused(message):
        check_replay_draws(bad, 2, 3, d)


def test_check_replay_draws_names_its_argument():
    with refused("state must be a QKMeans.random_state_ dict, got int"):
        check_replay_draws(3, 2, 3, name="state")
    with refused("state['eps_phase'] must be a finite number >= 0.0 and < 1.0, got 2"):
        check_replay_draws({**GOOD, "eps_phase": 2}, 2, 3, name="state")


def test_replayed_fit_refuses_seeds_or_phases_that_do_not_fit_x():
    X = np.arange(20.0).reshape(10, 2)
    model = QKMeans(2, n_iter=3, **F64)
    with refused("replay seed ids [999] are not among the ids of X; a replayed fit needs every stored seed row"):
        model.fit(X, replay=state([0, 999], np.full((3, 2), 0.5)))  # 999 sorts after every id
    with refused("replay seed ids [-5] are not among the ids of X; a replayed fit needs every stored seed row"):
        model.fit(X, ids=np.arange(10) * 3, replay=state([-5, 3], np.full((3, 2), 0.5)))
    with refused("replay phases have shape (3, 3) but n_iter=3 and X has 2 features" + SHAPE_ADVICE):
        model.fit(X, replay=state([0, 1], np.full((3, 3), 0.5)))
    assert model._X is None  # nothing was fitted


# ------------------------------------------------------------------------------------------- training data
def test_fit_refuses_fewer_rows_than_clusters():
    with refused("X has 2 rows but n_clusters=3; pass at least n_clusters rows or lower n_clusters"):
        QKMeans(3, **F64).fit(np.zeros((2, 2)))
    model = QKMeans(3, eps=1.0, **F64).fit(np.eye(3))  # exactly k rows
    assert model.n_samples_ == 3


def test_fit_refuses_data_whose_summed_squared_distances_overflow():
    """One squared distance of these rows fits float32, the sum over 100 rows does not."""
    X = np.full((100, 1), 1e18)
    largest = float(np.float32(1e18) * np.float32(1e18))
    bound = 4.0 * 100 * largest
    limit = torch.finfo(torch.float32).max
    assert 4.0 * largest <= limit < bound
    with refused(
        f"X values are too large for float32 (largest squared row norm {largest:.3g}: squared distances summed over "
        f"100 rows can reach {bound:.3g}, above the float32 maximum {limit:.3g}); rescale X (e.g. divide it by its "
        "largest absolute value) or use dtype=torch.float64"
    ):
        QKMeans(2, device="cpu").fit(X)


# ------------------------------------------------------------------------------------------- lattice widths
def usable_widths(X: np.ndarray, dtype: torch.dtype) -> tuple[float, float, float]:
    """``(lo, hi, max |x|)``: ``max|x| r <= eps <= max|x| / r`` (r the dtype's resolution), and eps small enough
    that n squared distances between points within ``max||x|| + sqrt(d) eps`` of the origin stay finite:
    ``n (2 (max||x|| + sqrt(d) eps))^2 <= max``."""
    fi = torch.finfo(dtype)
    n, d = X.shape
    largest = float(np.abs(X).max())
    overflow = (math.sqrt(fi.max / (4.0 * n)) - math.sqrt(float((X * X).sum(1).max()))) / math.sqrt(d)
    hi = min(largest / fi.eps, overflow) if largest > 0 else overflow
    return max(fi.tiny, largest * fi.eps), hi, largest


def lattice_refusal(given: str, X: np.ndarray, auto: bool) -> str:
    lo, hi, largest = usable_widths(X, torch.float64)
    return (
        f"{given} outside the lattice widths [{lo:.3g}, {hi:.3g}] usable for this X (max |x| = {largest:.3g}) in "
        f"float64: {LATTICE_ADVICE}" + (" or a different eps_scale" if auto else "")
    )


def test_lattice_widths_from_the_resolution_at_both_ends():
    """max |x| = 4 comes from a negative value: eps in [4 * 2^-52, 4 * 2^52] exactly, ends included."""
    X = np.array([[-4.0], [1.0], [0.5]])
    lo, hi, largest = usable_widths(X, torch.float64)
    assert (lo, hi, largest) == (2.0**-50, 2.0**54, 4.0)
    for eps in (lo, hi):
        assert QKMeans(1, eps=eps, **F64).fit(X).eps_ == eps
    for eps in (math.nextafter(lo, 0.0), math.nextafter(hi, math.inf)):
        with refused(lattice_refusal(f"eps={eps!r} is", X, auto=False)):
            QKMeans(1, eps=eps, **F64).fit(X)


def test_lattice_widths_when_max_abs_x_is_at_most_one():
    """max |x| = 1: the coarsest usable lattice is 2^52 (the resolution bound, not the overflow bound)."""
    X = np.array([[-1.0], [0.5], [0.25]])
    assert usable_widths(X, torch.float64)[1] == 2.0**52
    assert QKMeans(1, eps=2.0**52, **F64).fit(X).eps_ == 2.0**52
    eps = math.nextafter(2.0**52, math.inf)
    with refused(lattice_refusal(f"eps={eps!r} is", X, auto=False)):
        QKMeans(1, eps=eps, **F64).fit(X)


def test_lattice_widths_bounded_by_overflow_for_huge_rows():
    """Rows of norm 2^500: the overflow bound (not the resolution) limits eps; at the bound the fit's losses are
    finite, one float above it is refused."""
    X = 2.0**500 * np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    _, hi, largest = usable_widths(X, torch.float64)
    assert hi == (math.sqrt(torch.finfo(torch.float64).max / 16) - 2.0**500) / math.sqrt(2) < largest / 2**-52
    model = QKMeans(1, eps=hi, **F64).fit(X)
    assert model.eps_ == hi and np.isfinite(model.metadata_["losses"]).all()
    eps = math.nextafter(hi, math.inf)
    with refused(lattice_refusal(f"eps={eps!r} is", X, auto=False)):
        QKMeans(1, eps=eps, **F64).fit(X)


@pytest.mark.parametrize("eps", [1.0, "auto"])
def test_all_zero_data_is_usable(eps):
    """max |x| = 0: only the overflow bound applies. Seeds and means are 0; the first quantised step moves off 0
    and raises the loss, so the model is the seeds."""
    model = QKMeans(2, eps=eps, **F64).fit(np.zeros((5, 2)))
    assert model.n_iter_ == 0 and model.inertia_ == 0.0
    assert torch.equal(model.cluster_centers_, torch.zeros(2, 2, dtype=torch.float64))
    if eps == "auto":
        assert 0.5 * 2**-0.25 <= model.eps_ <= 0.5 * 2**0.25  # zero spread: eps = rho on the grid


# ----------------------------------------------------------------------------------------- auto lattice width
TWO = np.array([[0.0], [2.0]])  # k = 1: L0 = 4 whichever row is the seed, sigma^2 = 4 / (2 * 2 * 1) = 1


@pytest.mark.parametrize(
    ("X", "k", "eps_phase", "expected"),
    [
        (TWO, 1, 0.5, 0.5),  # raw = 0.5 sqrt(1) = 2^-1, on the grid 0.5 j: eps = raw
        (TWO, 1, 0.25, 2.0**-0.875),  # grid 0.5 j + 0.125: -1 is nearest to -0.875
        (TWO, 1, 0.0, 2.0**-0.75),  # grid 0.5 j + 0.25: -1 halfway between -1.25 and -0.75; index -2.5 -> -2 (even)
        (np.array([[0.0], [1.0]]), 1, 0.5, 0.25),  # sigma^2 = 1/4 < 1: raw = 0.5 * 0.5
        (np.array([[0.0], [0.0], [1.0], [1.0]]), 2, 0.5, 0.5),  # L0 = 0: raw = rho
    ],
)
def test_auto_eps_by_hand(X, k, eps_phase, expected):
    """eps = rho sigma_hat with sigma_hat^2 = L0 / (2 n d), rounded in log2 to the grid 0.5 (j - shift),
    shift = eps_phase - 1/2 (round half to even on the grid index)."""
    seeds = [0] if k == 1 else [0, 2]
    model = QKMeans(k, n_iter=2, **F64).fit(X, replay=state(seeds, np.full((2, 1), 0.5), eps_phase=eps_phase))
    assert model.eps_ == expected


@pytest.mark.parametrize(
    ("X", "eps_scale", "eps_phase", "shown"),
    [
        (np.array([[0.0], [4.0]]), 1e308, 0.5, "inf"),  # raw = 1e308 * 2 overflows
        (TWO, 1.7e308, 0.5, "inf"),  # raw finite, log2 raw = 1023.91 rounds to exponent 1024: 2^1024 overflows
        (np.array([[0.0], [0.5]]), 5e-324, 0.5, "0"),  # raw = 5e-324 * 0.25 underflows to 0
    ],
)
def test_auto_eps_out_of_range_is_refused_with_its_scale(X, eps_scale, eps_phase, shown):
    given = f"eps_scale={eps_scale} gives eps={shown},"
    with refused(lattice_refusal(given, X, auto=True)):
        QKMeans(1, eps_scale=eps_scale, **F64).fit(X, replay=state([0], np.full((10, 1), 0.5), eps_phase=eps_phase))


# ------------------------------------------------------------------------------------------------- Alg. 1
def test_balanced_means_singleton_above_a_small_m():
    """m = 0.5: a cluster of one row is balanced (its mean is the row), an empty one keeps its centre."""
    sums = np.array([[3.0, -3.0], [0.0, 0.0]])
    sizes = np.array([[1.0], [0.0]])
    prev = np.array([[9.0, 9.0], [5.0, -5.0]])
    expected = np.array([[3.0, -3.0], [5.0, -5.0]])
    np.testing.assert_array_equal(balanced_means(sums, sizes, prev, 0.5), expected)
    out = balanced_means(torch.from_numpy(sums), torch.from_numpy(sizes), torch.from_numpy(prev), 0.5)
    np.testing.assert_array_equal(out.numpy(), expected)


def test_draws_come_from_one_generator_in_the_documented_order():
    """One generator(seed): T x d phases, then the eps phase, then greedy k-means++ with 2 (2 + floor(ln k))
    candidates."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(4, 2))[rng.integers(0, 4, 60)] * 2 + rng.normal(size=(60, 2))
    model = QKMeans(4, n_iter=3, seed=5, **F64).fit(X)
    generator = make_generator(5)
    phases = uniforms(generator, 6).reshape(3, 2)
    eps_phase = float(uniforms(generator, 1).item())
    seeds = kmeans_plusplus(torch.from_numpy(X), 4, generator, n_local_trials=6)
    drawn = model.random_state_
    assert torch.equal(drawn["phases"], phases) and drawn["eps_phase"] == eps_phase
    assert drawn["seed_ids"].tolist() == seeds and drawn["n_reseeds"] == 0


@pytest.mark.parametrize("n_iter", [1, 2])
def test_short_runs_match_the_naive_algorithm(n_iter):
    """T = 1 and T = 2 on well separated blobs: every allowed step lowers the loss."""
    rng = np.random.default_rng(1)
    X = np.array([[0.0, 0.0], [8.0, 0.0], [0.0, 8.0]])[rng.integers(0, 3, 90)] + rng.normal(size=(90, 2))
    model = QKMeans(3, n_iter=n_iter, eps=0.05, seed=2, **F64).fit(X)
    st = model.random_state_
    centers, labels, accepted = naive_qkmeans(X, st["seed_ids"].numpy(), st["phases"].numpy(), 0.05, 0.2, n_iter)
    assert model.n_iter_ == accepted == n_iter
    np.testing.assert_allclose(model.cluster_centers_.numpy(), centers, atol=1e-12)
    np.testing.assert_array_equal(model.labels_.numpy(), labels)


def two_blobs() -> np.ndarray:
    rng = np.random.default_rng(4)
    return np.concatenate([rng.normal(size=(20, 2)), rng.normal(size=(20, 2)) + [15.0, 0.0]])


def test_equal_phases_stop_at_the_repeated_step():
    """With the same phase at every iteration and a partition that does not change, step 2 repeats step 1
    exactly: L^2 = L^1 is no improvement, so Alg. 1 stops with one accepted iteration (decision False). A
    deletion that moves nothing keeps the model: the tie stays a tie."""
    X = two_blobs()
    model = QKMeans(2, n_iter=5, eps=0.1, **F64).fit(X, replay=state([0, 20], np.full((5, 2), 0.3)))
    md = model.metadata_
    assert model.n_iter_ == 1 and md["accepted"].tolist() == [True, False]
    assert md["losses"][2] == md["losses"][1] and np.array_equal(md["centers"][2], md["centers"][1])
    before, eps_before = model.metadata_, model.eps_
    victim = int(np.argmin(((X[:20] - X[:20].mean(0)) ** 2).sum(1)))  # the row nearest its cluster's mean
    assert victim not in (0, 20)
    assert model.delete([victim]) is False
    left = np.setdiff1d(np.arange(40), [victim])
    fresh = QKMeans(2, n_iter=5, eps=0.1, **F64).fit(X[left], ids=left, replay=model.random_state_)
    assert predicted_deletion(before, eps_before, fresh, 1, False)["retrained"] is False
    assert models_equal(model, fresh)


def test_balance_flags_at_s_equal_m():
    """gamma n / k = 0.5 * 40 / 2 = 10: a cluster of exactly 10 rows is not imbalanced (s < m is strict); flags
    and decisions are stored as booleans."""
    rng = np.random.default_rng(2)
    X = np.concatenate([rng.normal(size=(10, 1)), rng.normal(size=(30, 1)) + 20.0])
    model = QKMeans(2, n_iter=3, gamma=0.5, eps=0.1, seed=0, **F64).fit(X)
    md = model.metadata_
    assert sorted(md["sizes"][0].tolist()) == [10.0, 30.0]
    assert md["flags"].dtype == np.bool_ and md["accepted"].dtype == np.bool_
    assert not md["flags"].any()
    np.testing.assert_array_equal(md["flags"], md["sizes"] < 10.0)
    np.testing.assert_array_equal(md["accepted"], np.diff(md["losses"]) < 0)


def test_damped_mean_next_to_a_cell_boundary_is_quantised_in_float64():
    """float64 makes the model bit-exact: a damped singleton (s = 1 < m = 3, mean (10, -10)) placed 1e-12 cells
    below a lattice boundary in each coordinate by the phase stays in its cell, as in the float64 reference
    (a float32 rounding of s/m would move it by ~1e-7 cells)."""
    blob = [[0, 0], [0.5, 0], [-0.5, 0], [0, 0.5], [0, -0.5], [0.5, 0.5], [-0.5, -0.5], [0.5, -0.5], [-0.5, 0.5]]
    X = np.array([*blob, [10.0, -10.0]])
    phases = np.full((1, 2), 1 - 1e-12)
    model = QKMeans(2, n_iter=1, gamma=0.6, eps=1.0, **F64).fit(X, replay=state([0, 9], phases))
    assert model.metadata_["flags"].tolist() == [[False, True]]
    # blob: mean 0, cell round(0 + theta - 1/2) = 0; singleton: (1/3) b + (2/3) b = b, cell round(b + 1/2 - 1e-12) = b;
    # Q = eps (cell - theta + 1/2)
    np.testing.assert_allclose(model.metadata_["centers"][1], [[-0.5, -0.5], [9.5, -10.5]], rtol=0, atol=1e-9)


# --------------------------------------------------------------------------------------------- deletion
def test_verdicts_match_fresh_replayed_fits():
    """Every deletion's ``last_deletion_`` (kept, or retrained from the first changed iteration with its reason)
    is the one read off a fresh fit on the remaining rows replaying the draws; the model then equals that fit.
    The sequences cover fixed and auto widths, damped clusters, and every reason."""
    rng = np.random.default_rng(0)
    seen = Counter()
    for trial in range(12):
        params = dict(eps=["auto", 0.3, "auto", 1.0][trial % 4], gamma=[0.2, 0.9, 0.6][trial % 3], n_iter=5)
        n, d, k = int(rng.integers(20, 60)), int(rng.integers(1, 3)), int(rng.integers(2, 4))
        X = rng.normal(size=(k, d))[rng.integers(0, k, n)] * 3 + rng.normal(size=(n, d))
        model = QKMeans(k, seed=trial, **params, **F64).fit(X)
        assert model.last_deletion_ is None
        alive = list(range(n))
        for _ in range(12):
            if len(alive) < k + 4:
                break
            batch = [alive[i] for i in rng.choice(len(alive), int(rng.integers(1, 3)), replace=False)]
            before, eps_before, seeds = model.metadata_, model.eps_, model.seed_ids_.tolist()
            predicted = model.deletion_changes_model(batch)
            retrained = model.delete(batch)
            alive = [a for a in alive if a not in batch]
            fresh = QKMeans(k, **params, **F64).fit(X[alive], ids=alive, replay=model.random_state_)
            expected = predicted_deletion(before, eps_before, fresh, len(batch), any(b in seeds for b in batch))
            assert model.last_deletion_ == expected, (trial, batch)
            assert predicted == retrained == expected["retrained"]
            assert models_equal(model, fresh)
            seen[expected["reason"]] += 1
    assert min(seen[reason] for reason in ("", "seed", "eps", "imbalance", "centroid", "decision")) >= 5, seen


def test_empty_cluster_keeps_harmless_deletions():
    """A model with an empty cluster at iteration 1 (its mean is its previous centre): the check's verdict for
    every single row and some pairs is the one read off fresh replayed fits."""
    rng = np.random.default_rng(210)
    X = rng.normal(size=(2, 1))[rng.integers(0, 2, 30)] * 3 + rng.normal(size=(30, 1))
    params = dict(eps=1.0, gamma=0.2, n_iter=6)
    model = QKMeans(6, seed=210, **params, **F64).fit(X)
    before, eps_before, seeds = model.metadata_, model.eps_, model.seed_ids_.tolist()
    assert (before["sizes"][1:] == 0).any()  # an empty cluster in a stored partition
    kept = 0
    requests = [[r] for r in range(30)] + [[r, r + 1] for r in range(0, 28, 3)]
    for request in requests:
        left = np.setdiff1d(np.arange(30), request)
        seed_deleted = any(r in seeds for r in request)
        if seed_deleted:
            assert model.deletion_changes_model(request)
            continue
        fresh = QKMeans(6, **params, **F64).fit(X[left], ids=left, replay=model.random_state_)
        expected = predicted_deletion(before, eps_before, fresh, len(request), False)
        assert model.deletion_changes_model(request) == expected["retrained"], request
        kept += not expected["retrained"]
    assert kept >= 5
    victim = next(r for r in range(30) if r not in seeds and not model.deletion_changes_model([r]))
    assert model.delete([victim]) is False
    assert model.last_deletion_ == dict(n_ids=1, retrained=False, reason="", restart_iteration=0)


def test_empty_request_changes_nothing():
    """``delete([])`` returns False and records nothing; ``deletion_changes_model([])`` is False, also for a
    float32 model whose float64 re-check of its cell (mean 5/6 rounded to float32, 0.5 exactly on a boundary
    in float32, just above it in float64) would disagree: an empty request is never checked."""
    X = np.array([[0.0], [1.0], [1.0], [1.0], [1.0], [1.0]])
    phase = float(np.float32(0.1666666865348816))
    model = QKMeans(1, n_iter=1, eps=1.0, device="cpu").fit(X, replay=state([0], [[phase]]))
    assert not model._check(np.array([], dtype=np.int64)).keep  # the precondition: the re-check disagrees
    assert model.deletion_changes_model([]) is False
    assert model.delete([]) is False
    assert model.last_deletion_ is None and model.n_samples_ == 6 and model.n_retrains_ == 0


def test_reseeding_and_compaction():
    """Each deleted seed redraws all k seeds from generator (seed, 1, i) for the i-th re-seeding; retrains are
    counted; deleted rows stay in storage until they are more than half of it, then a retrain compacts."""
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(size=(10, 1)), rng.normal(size=(10, 1)) + 10.0])
    params = dict(n_iter=4, eps=0.5)
    model = QKMeans(2, seed=3, **params, **F64).fit(X)
    trials = model.n_local_trials
    for i, n_deleted in enumerate((10, 1)):
        seeds = model.seed_ids_.tolist()
        others = [r for r in model.ids_.tolist() if r not in seeds]
        batch = [seeds[0]] + others[: n_deleted - 1]
        assert model.delete(batch) is True
        assert model.last_deletion_ == dict(n_ids=n_deleted, retrained=True, reason="seed", restart_iteration=1)
        left = model.ids_.numpy()
        drawn = kmeans_plusplus(torch.from_numpy(X[left]), 2, make_generator(3, 1, i), n_local_trials=trials)
        assert model.seed_ids_.tolist() == left[drawn].tolist()
        assert model.n_retrains_ == i + 1 and model.random_state_["n_reseeds"] == i + 1
        fresh = QKMeans(2, **params, **F64).fit(X[left], ids=left, replay=model.random_state_)
        assert models_equal(model, fresh)
        # 10 of 20 rows deleted: exactly half, kept in storage; 11 of 20: compacted to the 9 remaining rows
        assert model._X.shape[0] == (20 if i == 0 else 9)


def test_deletion_completes_when_the_remaining_rows_would_refuse_the_width():
    """The lattice check is fit's: a validated deletion never raises. Deleting the only row of magnitude 1 leaves
    rows below 1e-8, for which eps = 1e8 exceeds max|x| / 2^-52; the retrain still runs Alg. 1 with that eps."""
    X = np.array([[1.0]] + [[i * 1e-9] for i in range(1, 11)])
    model = QKMeans(2, n_iter=3, eps=1e8, seed=0, **F64).fit(X)
    assert 0 in model.seed_ids_.tolist()
    assert model.delete([0]) is True
    st = model.random_state_
    left = X[1:]
    seed_rows = st["seed_ids"].numpy() - 1
    centers, labels, accepted = naive_qkmeans(left, seed_rows, st["phases"].numpy(), 1e8, 0.2, 3)
    assert model.n_iter_ == accepted and model.n_samples_ == 10
    np.testing.assert_array_equal(model.cluster_centers_.numpy(), centers)
    np.testing.assert_array_equal(model.labels_.numpy(), labels)


class ExactQKMeans(QKMeans):
    """Distances as sums of squared differences (the SPN's SplitData setting)."""

    exact_distances = True


def test_exact_distances_fit_and_retrain_with_masked_rows():
    """With ``exact_distances`` the fit is Alg. 1, and a retrain with deleted rows still in storage (masked)
    equals a fresh replayed fit on the remaining rows."""
    X = two_blobs()
    model = ExactQKMeans(2, n_iter=4, eps=0.2, seed=1, **F64).fit(X)
    st = model.random_state_
    centers, labels, accepted = naive_qkmeans(X, st["seed_ids"].numpy(), st["phases"].numpy(), 0.2, 0.2, 4)
    assert model.n_iter_ == accepted
    np.testing.assert_allclose(model.cluster_centers_.numpy(), centers, atol=1e-12)
    np.testing.assert_array_equal(model.labels_.numpy(), labels)
    non_seed = next(r for r in range(40) if r not in st["seed_ids"].tolist())
    model.delete([non_seed])
    model.delete([int(model.seed_ids_[0])])  # a retrain from iteration 1 with two masked rows
    assert model._X.shape[0] == 40
    left = model.ids_.numpy()
    fresh = ExactQKMeans(2, n_iter=4, eps=0.2, **F64).fit(X[left], ids=left, replay=model.random_state_)
    assert models_equal(model, fresh)
    assert model.inertia_ == pytest.approx(((X[left] - model.cluster_centers_.numpy()[model.labels_.numpy()]) ** 2).sum())


# ------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_model_keeps_its_state_on_the_device_and_matches_cpu():
    """On CUDA every stored tensor (rows, partitions, phases) lives on the device; deletions (kept and retrained)
    erase the rows' squared norms and partitions there, and the model equals the CPU model; replayed phases
    given as CUDA tensors come back as float64 CPU draws."""
    X = two_blobs()
    cuda = QKMeans(2, n_iter=4, eps=0.2, seed=1, device="cuda", dtype=torch.float64).fit(X)
    cpu = QKMeans(2, n_iter=4, eps=0.2, seed=1, **F64).fit(X)
    assert cuda.labels_.device.type == "cuda" and cuda._labels_hist.device.type == "cuda"
    seeds = cuda.seed_ids_.tolist()
    victim = next(r for r in range(40) if r not in seeds and not cuda.deletion_changes_model([r]))
    for request in ([victim], [seeds[0]]):
        assert cuda.delete(request) == cpu.delete(request)
        assert float(cuda._x_sqnorm[request[0]]) == 0.0 and bool((cuda._labels_hist[:, request[0]] == 2).all())
        assert torch.equal(cuda.cluster_centers_.cpu(), cpu.cluster_centers_)
        assert torch.equal(cuda.labels_.cpu(), cpu.labels_) and cuda.metadata_["n_accepted"] == cpu.n_iter_
        np.testing.assert_allclose(cuda.metadata_["losses"], cpu.metadata_["losses"], rtol=1e-9)
    phases = torch.full((4, 2), 0.5, device="cuda")
    _, out, _, _ = check_replay_draws(dict(seed_ids=[0, 1], phases=phases, eps_phase=0.5, n_reseeds=0), 2, 4, 2)
    assert out.device.type == "cpu" and out.dtype == torch.float64


def test_deletions_erase_the_rows_through_the_device_storage_path():
    """Stored on a device (the rows' squared norms and partitions not numpy views), a deletion erases the deleted
    rows' squared norms (0) and their label in every stored partition (k) with torch indexing: the state equals
    the host path's after a kept deletion and after a retrain."""
    X = two_blobs()
    host = QKMeans(2, n_iter=4, eps=0.2, seed=1, **F64).fit(X)
    dev = QKMeans(2, n_iter=4, eps=0.2, seed=1, **F64).fit(X)
    dev._x_sqnorm = dev._x_sqnorm.as_subclass(OffHost)
    dev._labels_hist = dev._labels_hist.as_subclass(OffHost)
    seeds = host.seed_ids_.tolist()
    victim = next(r for r in range(40) if r not in seeds and not host.deletion_changes_model([r]))
    for request in ([victim], [seeds[0]]):
        assert dev.delete(request) == host.delete(request)
        assert float(dev._x_sqnorm[request[0]]) == 0.0
        assert bool((dev._labels_hist[:, request[0]] == 2).all())
        assert torch.equal(dev._x_sqnorm.as_subclass(torch.Tensor), host._x_sqnorm)
        assert torch.equal(dev._labels_hist.as_subclass(torch.Tensor), host._labels_hist)
        assert torch.equal(dev.cluster_centers_, host.cluster_centers_) and torch.equal(dev.labels_, host.labels_)
