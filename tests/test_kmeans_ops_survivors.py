"""The shared k-means ops (duck/deletion/_kmeans_ops.py) against independent references: seeds and generators
(same keys, same draws; float64 uniforms in [0, 1)), host_take as numpy indexing on every dim, squared distances
and the blocked arg-min against brute force for blocks of any size (ties to the first centre, no resized
buffers), the supplied ``||x||^2`` cache honoured by assign / partition / lloyd, the one-hot and index_add sums
with weights and excluded rows, the exact partition in float64, inverse-CDF sampling at its boundaries, greedy
k-means++ against a numpy replay of the same uniforms (and its exact refusals), Lloyd against a numpy Lloyd with
scikit-learn's stopping rule (iteration counts, empty and singleton clusters, the inclusive tolerance), and
scikit-learn's tolerance scaling. One CUDA test checks that every op keeps its tensors on the data's device."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from off_host import OffHost

import duck.deletion._kmeans_ops as ops
from duck.deletion._kmeans_ops import (
    _inverse_cdf,
    assign,
    default_local_trials,
    derive_seed,
    host_take,
    kmeans_plusplus,
    lloyd,
    make_generator,
    partition,
    partition_exact,
    sklearn_tol,
    sq_dists,
    sq_norms,
    uniforms,
)


def brute_force(X: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Nearest centre (first on ties) and squared distance by explicit differences."""
    d2 = ((X[:, None, :] - C[None, :, :]) ** 2).sum(-1)
    return d2.argmin(1), d2.min(1)


def blobs(n: int, d: int, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=6.0, size=(k, d))
    return centres[rng.integers(0, k, size=n)] + rng.normal(size=(n, d))


# ------------------------------------------------------------------------------------------ seeds, generators
def test_derive_seed_is_the_documented_63_bit_mix_of_a_seed_sequence():
    for keys in [(0,), (1, 2), (7, 0, 3), (-1,), (2**70 + 5, 3)]:
        words = np.random.SeedSequence([k & (2**64 - 1) for k in keys]).generate_state(2, np.uint32)
        expected = ((int(words[0]) << 31) ^ int(words[1])) & (2**63 - 1)
        assert derive_seed(*keys) == expected and 0 <= expected < 2**63
    assert derive_seed(1, 2) != derive_seed(2, 1) and derive_seed(0) != derive_seed(1)


def test_generators_from_the_same_keys_draw_the_same_float64_uniforms():
    a, b, c = make_generator(3, 1), make_generator(3, 1), make_generator(3, 2)
    assert a.device == torch.device("cpu")
    ua, ub, uc = uniforms(a, 1000), uniforms(b, 1000), uniforms(c, 1000)
    for u in (ua, ub, uc):
        assert u.dtype == torch.float64 and u.device == torch.device("cpu") and u.shape == (1000,)
        assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    assert torch.equal(ua, ub) and not torch.equal(ua, uc)
    # float64 draws use all 53 bits: float32 uniforms would all be multiples of 2**-24
    assert (ua * 2**24 != torch.floor(ua * 2**24)).any()
    assert torch.equal(uniforms(make_generator(3, 1), 5), ua[:5])  # a stream, replayable from its keys


def test_default_local_trials_is_2_plus_floor_ln_k():
    for k, trials in [(1, 2), (2, 2), (7, 3), (8, 4), (20, 4), (21, 5), (1000, 8)]:
        assert default_local_trials(k) == 2 + math.floor(math.log(k)) == trials


# ----------------------------------------------------------------------------------------------- host_take
def test_host_take_equals_numpy_indexing_on_every_dim():
    a = np.arange(2 * 3 * 4, dtype=np.float64).reshape(2, 3, 4)
    t = torch.from_numpy(a)
    for dim, index in [(0, np.array([1, 0, 1])), (1, np.array([2, 0])), (2, np.array([3, 3, 0, 1])), (1, np.array([], int))]:
        expected = np.take(a, index, axis=dim)
        got = host_take(t, index, dim)
        assert isinstance(got, np.ndarray) and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    cols = torch.from_numpy(np.asfortranarray(a[0]))  # column-major storage, as the SPN's column gathers
    np.testing.assert_array_equal(host_take(cols, np.array([3, 1]), 1), a[0][:, [3, 1]])


# ------------------------------------------------------------------------------------ distances and arg-min
def test_sq_norms_and_sq_dists_match_brute_force_and_are_never_negative():
    rng = np.random.default_rng(1)
    X, C = rng.normal(size=(40, 5)), rng.normal(size=(6, 5))
    Xt, Ct = torch.from_numpy(X), torch.from_numpy(C)
    np.testing.assert_allclose(sq_norms(Xt).numpy(), (X**2).sum(1), rtol=1e-14)
    ref = ((X[:, None] - C[None]) ** 2).sum(-1)
    np.testing.assert_allclose(sq_dists(Xt, Ct).numpy(), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sq_dists(Xt, Ct, sq_norms(Xt)).numpy(), ref, rtol=1e-12, atol=1e-12)
    # a supplied ||x||^2 is used as given: shifting it shifts every distance by the same amount
    np.testing.assert_allclose(sq_dists(Xt, Ct, sq_norms(Xt) + 3.0).numpy(), ref + 3.0, rtol=1e-12)
    near = torch.from_numpy(X[:5] * 1e-3)  # distances far below 1, still exact to rounding
    np.testing.assert_allclose(sq_dists(near, near).numpy(), ((X[:5, None] - X[None, :5]) ** 2).sum(-1) * 1e-6, atol=1e-15)
    far = torch.from_numpy(X[:8] + 1e7)  # the expansion cancels badly here; distances are clamped at 0
    assert float(sq_dists(far, far).min()) >= 0.0


@pytest.mark.parametrize("block", [1, 3, 7, 64, 1000])
def test_blocked_arg_min_equals_brute_force_for_any_block_size(monkeypatch, block):
    """Blocks of any size (the last one partial, or one block larger than the data) give brute force's labels,
    with ties to the first centre, and never resize an output buffer (no warning at all)."""
    rng = np.random.default_rng(2)
    X = rng.integers(0, 3, size=(150, 4)).astype(np.float64)  # integer data: exact distances, many ties
    C = np.concatenate([X[:5], X[4:5]])  # centre 5 duplicates centre 4
    ref_labels, ref_d2 = brute_force(X, C)
    d2_all = ((X[:, None] - C[None]) ** 2).sum(-1)
    assert (np.sort(d2_all, 1)[:, 0] == np.sort(d2_all, 1)[:, 1]).mean() > 0.1  # ties are really exercised
    monkeypatch.setattr(ops, "_block_rows", lambda d: block)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        labels, d2 = assign(torch.from_numpy(X), torch.from_numpy(C))
        part = partition(torch.from_numpy(X), torch.from_numpy(C))
    np.testing.assert_array_equal(labels.numpy(), ref_labels)
    np.testing.assert_array_equal(d2.numpy(), ref_d2)
    np.testing.assert_array_equal(part.labels.numpy(), ref_labels)
    np.testing.assert_array_equal(part.min_sq_dist.numpy(), ref_d2)
    np.testing.assert_array_equal(part.masses.numpy(), np.bincount(ref_labels, minlength=6))
    np.testing.assert_array_equal(part.sums.numpy(), np.stack([X[ref_labels == j].sum(0) for j in range(6)]))


def test_assign_and_partition_use_the_supplied_row_norms():
    """The arg-min does not depend on ``||x||^2``; the returned distances are the minima plus the supplied norms
    (a cached ``x_sqnorm`` is used as given, not recomputed)."""
    X = blobs(60, 3, 4, seed=3)
    C = X[:4]
    Xt, Ct = torch.from_numpy(X), torch.from_numpy(C)
    ref_labels, ref_d2 = brute_force(X, C)
    shifted = sq_norms(Xt) + 5.0
    labels, d2 = assign(Xt, Ct, shifted)
    np.testing.assert_array_equal(labels.numpy(), ref_labels)
    np.testing.assert_allclose(d2.numpy(), ref_d2 + 5.0, rtol=1e-12)
    part = partition(Xt, Ct, shifted)
    np.testing.assert_array_equal(part.labels.numpy(), ref_labels)
    np.testing.assert_allclose(part.min_sq_dist.numpy(), ref_d2 + 5.0, rtol=1e-12)


# ---------------------------------------------------------------------------------------------- partitions
def reference_partition(X, C, w=None, active=None):
    """labels (k for excluded rows), distances (0 for them), weighted sums and masses, by brute force."""
    k = len(C)
    labels, d2 = brute_force(X, C)
    keep = np.ones(len(X), bool) if active is None else active
    labels, d2 = np.where(keep, labels, k), np.where(keep, d2, 0.0)
    w = np.ones(len(X)) if w is None else w
    sums = np.stack([(w[labels == j, None] * X[labels == j]).sum(0) for j in range(k)])
    masses = np.array([w[labels == j].sum() for j in range(k)])
    return labels, d2, sums, masses


@pytest.mark.parametrize("k", [2, 8, 9, 12])  # both sides of the one-hot / index_add switch at k = 8
def test_partition_sums_with_weights_and_excluded_rows(monkeypatch, k):
    rng = np.random.default_rng(k)
    X = rng.normal(size=(90, 3))
    C = X[rng.choice(90, k, replace=False)] + 0.01
    w = rng.uniform(0.5, 3.0, size=90)
    active = rng.uniform(size=90) > 0.3
    Xt, Ct = torch.from_numpy(X), torch.from_numpy(C)
    for block in (1000, 13):
        monkeypatch.setattr(ops, "_block_rows", lambda d, b=block: b)
        for weights, act in [(None, None), (w, None), (None, active), (w, active)]:
            part = partition(
                Xt,
                Ct,
                weights=None if weights is None else torch.from_numpy(weights),
                active=None if act is None else torch.from_numpy(act),
            )
            labels, d2, sums, masses = reference_partition(X, C, weights, act)
            np.testing.assert_array_equal(part.labels.numpy(), labels)
            np.testing.assert_allclose(part.min_sq_dist.numpy(), d2, rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(part.sums.numpy(), sums, rtol=1e-10, atol=1e-12)
            assert part.sums.shape == (k, 3) and part.masses.shape == (k,)
            if weights is None:
                assert part.masses.dtype == torch.int64
                np.testing.assert_array_equal(part.masses.numpy(), masses)
            else:
                assert part.masses.dtype == torch.float64
                np.testing.assert_allclose(part.masses.numpy(), masses, rtol=1e-12)


@pytest.mark.parametrize("block_elems", [1, 2, 5, 1 << 22])
def test_partition_exact_is_the_float64_brute_force_for_any_block(block_elems):
    X = blobs(37, 3, 3, seed=4)
    C = X[[0, 10, 20]] + 0.25
    X[5] = C[1]  # a row on a centre: distance exactly 0
    active = np.arange(37) % 4 != 1
    ref_labels, ref_d2 = brute_force(X, C)
    part = partition_exact(torch.from_numpy(X), torch.from_numpy(C), block_elems=block_elems)
    assert part.min_sq_dist.dtype == torch.float64 and part.labels.dtype == torch.int64
    np.testing.assert_array_equal(part.labels.numpy(), ref_labels)
    np.testing.assert_allclose(part.min_sq_dist.numpy(), ref_d2, rtol=1e-15, atol=0)
    assert float(part.min_sq_dist[5]) == 0.0
    np.testing.assert_array_equal(part.masses.numpy(), np.bincount(ref_labels, minlength=3))
    masked = partition_exact(torch.from_numpy(X), torch.from_numpy(C), active=torch.from_numpy(active), block_elems=block_elems)
    labels, d2, sums, masses = reference_partition(X, C, active=active)
    np.testing.assert_array_equal(masked.labels.numpy(), labels)
    np.testing.assert_allclose(masked.min_sq_dist.numpy(), d2, rtol=1e-15, atol=0)
    np.testing.assert_allclose(masked.sums.numpy(), sums, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(masked.masses.numpy(), masses)
    empty_last = partition_exact(torch.from_numpy(X), torch.from_numpy(np.concatenate([C, C[:1] + 1e6])), block_elems=block_elems)
    np.testing.assert_array_equal(empty_last.masses.numpy(), np.append(np.bincount(ref_labels, minlength=3), 0))
    np.testing.assert_array_equal(empty_last.sums[3].numpy(), [0.0, 0.0, 0.0])
    # ties go to the first centre, and the distances do not depend on the data's offset
    tie = torch.tensor([[0.0], [1.0], [2.0]], dtype=torch.float64)
    np.testing.assert_array_equal(partition_exact(tie, torch.tensor([[0.5], [1.5]], dtype=torch.float64)).labels, [0, 0, 1])
    far = partition_exact(tie + 1e9, torch.tensor([[0.5], [1.5]], dtype=torch.float64) + 1e9, block_elems=block_elems)
    np.testing.assert_array_equal(far.labels.numpy(), [0, 0, 1])
    np.testing.assert_array_equal(far.min_sq_dist.numpy(), [0.25, 0.25, 0.25])


# ----------------------------------------------------------------------------------------------- sampling
def test_inverse_cdf_returns_the_item_whose_cell_holds_u_and_never_a_zero_mass_item():
    cum = torch.tensor([0.0, 1.0, 1.0, 3.0, 4.0, 4.0], dtype=torch.float64)  # masses 0, 1, 0, 2, 1, 0
    u = torch.tensor([0.0, 0.1, 0.25 - 1e-12, 0.25, 0.5, 0.75 - 1e-12, 0.75, 1.0 - 2**-53, 1.0], dtype=torch.float64)
    np.testing.assert_array_equal(_inverse_cdf(cum, u).numpy(), [1, 1, 1, 3, 3, 3, 4, 4, 4])
    mass = np.diff(np.concatenate([[0.0], cum.numpy()]))
    for x in torch.linspace(0.0, 1.0, 101, dtype=torch.float64):  # any u in [0, 1] lands on a positive item
        assert mass[int(_inverse_cdf(cum, x[None]))] > 0
    assert int(_inverse_cdf(torch.tensor([2.0], dtype=torch.float64), torch.tensor([0.7], dtype=torch.float64))) == 0


def numpy_inverse_cdf(cum: np.ndarray, u: np.ndarray) -> np.ndarray:
    total = cum[-1]
    return np.minimum(np.searchsorted(cum, u * total, side="right"), np.searchsorted(cum, total, side="left"))


def numpy_kmeans_plusplus(
    X: np.ndarray, k: int, keys: tuple, trials: int, w: np.ndarray | None = None, offset: float = 0.0
) -> list[int]:
    """Greedy k-means++ as documented, in numpy, replaying the uniforms of ``make_generator(*keys)``: one draw
    for the first centre (by weight), then ``trials`` draws per further centre (candidates by w D^2, keep the
    one of least potential; a fresh row by weight when the potential is 0). ``offset`` is added to every
    squared distance (what a supplied ``x_sqnorm`` shifted by ``offset`` gives)."""
    g = make_generator(*keys)
    n = len(X)
    wt = np.ones(n) if w is None else w
    first = int(numpy_inverse_cdf(np.cumsum(wt), uniforms(g, 1).numpy())[0])
    chosen, taken = [first], np.zeros(n, bool)
    taken[first] = True
    closest = np.where(taken, 0.0, ((X - X[first]) ** 2).sum(1) + offset)
    for _ in range(1, k):
        u = uniforms(g, trials).numpy()
        cum = np.cumsum(closest * wt)
        if cum[-1] <= 0.0:
            row = int(numpy_inverse_cdf(np.cumsum((~taken) * wt), u[:1])[0])
            new = np.minimum(closest, ((X - X[row]) ** 2).sum(1) + offset)
        else:
            cand = numpy_inverse_cdf(cum, u)
            cand_d2 = np.minimum(closest[:, None], ((X[:, None, :] - X[cand][None]) ** 2).sum(-1) + offset)
            best = int(np.argmin((cand_d2 * wt[:, None]).sum(0)))
            row, new = int(cand[best]), cand_d2[:, best]
        chosen.append(row)
        taken[row] = True
        closest = np.where(taken, 0.0, new)
    return chosen


@pytest.mark.parametrize("trials", [None, 1, 3])
def test_kmeans_plusplus_replays_a_numpy_greedy_kmeans_plusplus(trials):
    X = blobs(80, 2, 5, seed=5)
    w = np.random.default_rng(6).uniform(0.1, 4.0, size=80)
    w[::7] = 0.0  # rows of weight 0 are never chosen
    Xt = torch.from_numpy(X)
    for k in (1, 2, 6):
        n_trials = default_local_trials(k) if trials is None else trials
        for s in range(4):
            rows = kmeans_plusplus(Xt, k, make_generator(9, s), n_local_trials=trials)
            assert rows == numpy_kmeans_plusplus(X, k, (9, s), n_trials) and len(set(rows)) == k
            rows_w = kmeans_plusplus(Xt, k, make_generator(9, s), weights=torch.from_numpy(w), n_local_trials=trials)
            assert rows_w == numpy_kmeans_plusplus(X, k, (9, s), n_trials, w) and all(w[r] > 0 for r in rows_w)
            assert kmeans_plusplus(Xt, k, make_generator(9, s), n_local_trials=trials, x_sqnorm=sq_norms(Xt)) == rows
            # a supplied x_sqnorm is used as given: shifted norms shift every D^2 by the same amount
            shifted = kmeans_plusplus(Xt, k, make_generator(9, s), n_local_trials=trials, x_sqnorm=sq_norms(Xt) + 50.0)
            assert shifted == numpy_kmeans_plusplus(X, k, (9, s), n_trials, offset=50.0)
    small = X * 1e-3  # potentials far below 1 still go to the D^2 sampling, not to the zero-potential rule
    for s in range(4):
        rows = kmeans_plusplus(torch.from_numpy(small), 6, make_generator(9, s), n_local_trials=trials)
        assert rows == numpy_kmeans_plusplus(small, 6, (9, s), default_local_trials(6) if trials is None else trials)


def test_kmeans_plusplus_samples_in_float64_whatever_the_dtypes():
    """Integer data (exact squared distances in float32) and dyadic weights give the same seeds in float32 and
    float64: the cumulative sums and the draws are float64 throughout."""
    rng = np.random.default_rng(12)
    X = rng.integers(-20, 21, size=(60, 3)).astype(np.float64)
    w = rng.integers(1, 9, size=60) / 4.0
    for s in range(5):
        ref = kmeans_plusplus(torch.from_numpy(X), 5, make_generator(1, s), weights=torch.from_numpy(w))
        assert ref == numpy_kmeans_plusplus(X, 5, (1, s), default_local_trials(5), w)
        X32, w32 = torch.from_numpy(X).float(), torch.from_numpy(w).float()
        assert kmeans_plusplus(X32, 5, make_generator(1, s), weights=w32) == ref
        assert kmeans_plusplus(torch.from_numpy(X), 5, make_generator(1, s), weights=w32) == ref
        assert kmeans_plusplus(X32, 5, make_generator(1, s)) == kmeans_plusplus(torch.from_numpy(X), 5, make_generator(1, s))


def test_kmeans_plusplus_on_duplicates_picks_fresh_rows_by_weight():
    X = np.repeat(np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]]), [3, 2, 4], axis=0)  # 3 distinct points, 9 rows
    w = np.array([1.0, 0.0, 2.0, 1.0, 3.0, 0.5, 0.0, 1.0, 2.0])
    for s in range(6):
        for k in (3, 5, 7):
            rows = kmeans_plusplus(torch.from_numpy(X), k, make_generator(4, s), n_local_trials=2)
            assert rows == numpy_kmeans_plusplus(X, k, (4, s), 2) and len(set(rows)) == k
            assert len({tuple(X[r]) for r in rows}) == 3  # the 3 distinct points come first (positive potential)
        rows_w = kmeans_plusplus(torch.from_numpy(X), 7, make_generator(4, s), weights=torch.from_numpy(w), n_local_trials=2)
        assert rows_w == numpy_kmeans_plusplus(X, 7, (4, s), 2, w) and sorted(rows_w) == [0, 2, 3, 4, 5, 7, 8]
    pair = torch.tensor([[0.0], [0.0], [0.0], [1.0]], dtype=torch.float64)  # 2 distinct points: both are seeds
    for s in range(8):
        assert sorted(pair[kmeans_plusplus(pair, 2, make_generator(6, s))].flatten().tolist()) == [0.0, 1.0]
    same = torch.zeros(3, 2, dtype=torch.float64)  # identical rows: the centres are the rows of positive weight
    firsts = set()
    for s in range(8):
        rows = kmeans_plusplus(same, 2, make_generator(5, s), weights=torch.tensor([1.0, 0.0, 1.0], dtype=torch.float64))
        assert sorted(rows) == [0, 2]
        firsts.add(rows[0])
    assert firsts == {0, 2}  # both orders happen: the last row is sometimes the only free one


def test_kmeans_plusplus_refusals_are_exact():
    X = torch.from_numpy(blobs(5, 2, 2, seed=7))
    for k in (0, 6, -1):
        with pytest.raises(ValueError, match=f"^{re.escape(f'k-means++ needs 1 <= k <= n, got k={k}, n=5')}$"):
            kmeans_plusplus(X, k, make_generator(0))
    assert len(set(kmeans_plusplus(X, 5, make_generator(0)))) == 5 and len(kmeans_plusplus(X, 1, make_generator(0))) == 1
    w = torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64)
    assert sorted(kmeans_plusplus(X, 2, make_generator(0), weights=w)) == [0, 1]
    with pytest.raises(ValueError, match="^k-means\\+\\+: fewer rows with positive weight than centres requested$"):
        kmeans_plusplus(X, 3, make_generator(0), weights=w)
    huge = torch.tensor([[0.0], [1e20]], dtype=torch.float32)  # ||x||^2 = 1e40 overflows float32
    message = "k-means++: the potential sum w(x) D(x)^2 is inf; the values overflow torch.float32"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        kmeans_plusplus(huge, 2, make_generator(0))


# -------------------------------------------------------------------------------------------------- Lloyd
def numpy_lloyd(X, C, max_iter, tol=0.0, w=None):
    """Lloyd with scikit-learn's stopping rule: stop when the labels no longer change, or after an update whose
    squared centre shift is <= tol; an empty cluster keeps its centre. Returns (centres, labels, d2, inertia,
    n_iter, converged) of the returned centres."""
    w = np.ones(len(X)) if w is None else w
    C = C.copy()
    labels, d2 = brute_force(X, C)
    n_iter, converged = 0, False
    for _ in range(max_iter):
        new = C.copy()
        for j in range(len(C)):
            mass = w[labels == j].sum()
            if mass > 0:
                new[j] = (w[labels == j, None] * X[labels == j]).sum(0) / mass
        shift = ((new - C) ** 2).sum()
        C, n_iter = new, n_iter + 1
        new_labels, d2 = brute_force(X, C)
        if (new_labels == labels).all():
            converged = True
            break
        labels = new_labels
        if shift <= tol:
            converged = True
            break
    return C, labels, d2, float((w * d2).sum()), n_iter, converged


def test_lloyd_follows_a_numpy_lloyd_iteration_by_iteration():
    X = blobs(120, 2, 4, seed=8)
    w = np.random.default_rng(8).uniform(0.2, 2.0, size=120)
    init = X[:4].copy()
    seen = set()
    for weights in (None, w):
        for max_iter in (0, 1, 2, 3, 100):
            res = lloyd(
                torch.from_numpy(X),
                torch.from_numpy(init),
                max_iter=max_iter,
                weights=None if weights is None else torch.from_numpy(weights),
            )
            C, labels, d2, inertia, n_iter, converged = numpy_lloyd(X, init, max_iter, w=weights)
            assert (res.n_iter, res.converged) == (n_iter, converged)
            seen.add((n_iter, converged))
            np.testing.assert_allclose(res.centers.numpy(), C, rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(res.labels.numpy(), labels)
            np.testing.assert_allclose(res.min_sq_dist.numpy(), d2, rtol=1e-9, atol=1e-9)
            assert res.inertia == pytest.approx(inertia, rel=1e-12)
    # the cases are really exercised: no update, stopped by max_iter more than once, converged by the labels
    assert {(0, False), (1, False), (2, False), (3, False)} <= seen and any(c and i > 3 for i, c in seen)


def test_lloyd_uses_the_supplied_row_norms():
    """``x_sqnorm`` is used as given in every pass: a shifted cache shifts the returned distances and inertia by
    exactly the shift, and leaves the centres and labels alone."""
    X = blobs(50, 2, 3, seed=9)
    Xt, init = torch.from_numpy(X), torch.from_numpy(X[:3].copy())
    for max_iter in (0, 1, 20):
        plain = lloyd(Xt, init, max_iter=max_iter)
        shifted = lloyd(Xt, init, max_iter=max_iter, x_sqnorm=sq_norms(Xt) + 2.0)
        assert torch.equal(plain.centers, shifted.centers) and torch.equal(plain.labels, shifted.labels)
        np.testing.assert_allclose(shifted.min_sq_dist.numpy(), plain.min_sq_dist.numpy() + 2.0, rtol=1e-12)
        assert shifted.inertia == pytest.approx(plain.inertia + 2.0 * 50, rel=1e-12)
        assert (shifted.n_iter, shifted.converged) == (plain.n_iter, plain.converged)


def test_lloyd_keeps_an_empty_cluster_and_moves_a_singleton_onto_its_row():
    X = torch.tensor([[0.0], [1.0], [2.0], [10.0]], dtype=torch.float64)
    init = torch.tensor([[1.0], [9.0], [-100.0]], dtype=torch.float64)  # centre 2 gets no row
    res = lloyd(X, init, max_iter=1)
    np.testing.assert_array_equal(res.centers.numpy(), [[1.0], [10.0], [-100.0]])
    np.testing.assert_array_equal(res.labels.numpy(), [0, 0, 0, 1])
    np.testing.assert_array_equal(res.min_sq_dist.numpy(), [1.0, 0.0, 1.0, 0.0])
    assert (res.inertia, res.n_iter, res.converged) == (2.0, 1, True)
    # a weighted singleton of mass below 1 moves onto its row too
    w = torch.tensor([1.0, 1.0, 1.0, 0.25], dtype=torch.float64)
    assert lloyd(X, init, max_iter=1, weights=w).centers[1, 0] == 10.0
    f32 = lloyd(X.float(), init.float(), max_iter=1)
    assert f32.centers.dtype == torch.float32 and f32.min_sq_dist.dtype == torch.float32
    np.testing.assert_array_equal(f32.centers.numpy(), [[1.0], [10.0], [-100.0]])


def test_lloyd_tolerance_is_inclusive_on_the_squared_centre_shift():
    """From centres 0 and 5, the first update moves them to 1 and 8: squared shift 1 + 9 = 10 (exact), and the
    labels still change (3 moves to the first cluster). tol = 10 stops there; tol just below does not."""
    X = torch.tensor([[0.0], [1.0], [2.0], [3.0], [10.0], [11.0]], dtype=torch.float64)
    init = torch.tensor([[0.0], [5.0]], dtype=torch.float64)
    stop = lloyd(X, init, max_iter=10, tol=10.0)
    assert (stop.n_iter, stop.converged) == (1, True)
    np.testing.assert_array_equal(stop.centers.numpy(), [[1.0], [8.0]])
    np.testing.assert_array_equal(stop.labels.numpy(), [0, 0, 0, 0, 1, 1])
    more = lloyd(X, init, max_iter=10, tol=math.nextafter(10.0, 0.0))
    assert (more.n_iter, more.converged) == (2, True)
    np.testing.assert_array_equal(more.centers.numpy(), [[1.5], [10.5]])
    capped = lloyd(X, init, max_iter=1, tol=9.0)
    assert (capped.n_iter, capped.converged) == (1, False)


def test_sklearn_tol_is_tol_times_the_mean_per_feature_population_variance():
    rng = np.random.default_rng(10)
    X = rng.normal(size=(7, 3)) * np.array([1.0, 5.0, 0.1]) + np.array([0.0, 100.0, -3.0])
    Xt = torch.from_numpy(X)
    for tol in (1e-4, 0.5, 1.0, 3.0):
        assert sklearn_tol(Xt, tol) == pytest.approx(tol * np.mean(np.var(X, axis=0)), rel=1e-12)
    assert sklearn_tol(Xt, 0.0) == 0.0
    from sklearn.cluster import _kmeans  # scikit-learn's own helper, where this version has it

    if hasattr(_kmeans, "_tolerance"):
        assert sklearn_tol(Xt, 1e-4) == pytest.approx(_kmeans._tolerance(X, 1e-4), rel=1e-12)


# ---------------------------------------------------------------------------------------------------- CUDA
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA")
def test_every_op_keeps_the_data_on_its_cuda_device_and_matches_the_cpu():
    dev = torch.device("cuda")
    X = blobs(300, 3, 4, seed=11)
    w = np.random.default_rng(11).uniform(0.5, 2.0, size=300)
    active = np.arange(300) % 5 != 0
    Xc, Xg = torch.from_numpy(X), torch.from_numpy(X).to(dev)
    a = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for dim, index in [(0, np.array([1, 0])), (1, np.array([2, 0, 2])), (2, np.array([3, 1]))]:
        np.testing.assert_array_equal(host_take(torch.from_numpy(a).to(dev), index, dim), np.take(a, index, axis=dim))
    for k in (3, 12):
        C = X[:k] + 0.01
        Cc, Cg = torch.from_numpy(C), torch.from_numpy(C).to(dev)
        labels, d2 = assign(Xg, Cg)
        assert labels.device.type == "cuda" and d2.device.type == "cuda"
        np.testing.assert_array_equal(labels.cpu().numpy(), assign(Xc, Cc)[0].numpy())
        for kwargs in (dict(), dict(weights=w), dict(active=active), dict(weights=w, active=active)):
            cpu = partition(Xc, Cc, **{key: torch.from_numpy(v) for key, v in kwargs.items()})
            gpu = partition(Xg, Cg, **{key: torch.from_numpy(v).to(dev) for key, v in kwargs.items()})
            for field in ("labels", "min_sq_dist", "sums", "masses"):
                assert getattr(gpu, field).device.type == "cuda"
                np.testing.assert_allclose(getattr(gpu, field).cpu().numpy(), getattr(cpu, field).numpy(), rtol=1e-10, atol=1e-10)
        exact_g = partition_exact(Xg, Cg, active=torch.from_numpy(active).to(dev))
        exact_c = partition_exact(Xc, Cc, active=torch.from_numpy(active))
        assert exact_g.labels.device.type == "cuda" and exact_g.min_sq_dist.device.type == "cuda"
        np.testing.assert_array_equal(exact_g.labels.cpu().numpy(), exact_c.labels.numpy())
    res_g = lloyd(Xg, Xg[:4].clone(), max_iter=20, weights=torch.from_numpy(w).to(dev))
    res_c = lloyd(Xc, Xc[:4].clone(), max_iter=20, weights=torch.from_numpy(w))
    assert res_g.centers.device.type == "cuda" and (res_g.n_iter, res_g.converged) == (res_c.n_iter, res_c.converged)
    np.testing.assert_allclose(res_g.centers.cpu().numpy(), res_c.centers.numpy(), rtol=1e-10)
    assert kmeans_plusplus(Xg, 4, make_generator(2)) == kmeans_plusplus(Xc, 4, make_generator(2))


def test_host_take_indexes_a_tensor_off_the_host_on_its_device():
    """Off the host, ``host_take`` gathers with ``index_select`` along ``dim`` and returns the rows (or columns)
    asked for, in the order asked, as a host array: the host path's (numpy view) numbers."""
    t = torch.arange(12.0, dtype=torch.float64).reshape(4, 3)
    off = t.as_subclass(OffHost)
    for dim, index in ((0, np.array([2, 0, 2])), (1, np.array([2, 1]))):
        got = ops.host_take(off, index, dim=dim)
        assert isinstance(got, np.ndarray) and not isinstance(got, torch.Tensor)
        np.testing.assert_array_equal(got, ops.host_take(t, index, dim=dim))
    np.testing.assert_array_equal(ops.host_take(off, np.array([3, 1])), [[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]])
