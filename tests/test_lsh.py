"""LSH index: buckets and queries against a brute-force numpy reference, exact deletion (bucket contents equal
a fresh build), sampler distributions against their closed forms, batching, seeding and bad input."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pytest
import torch

from duck.deletion import LSHIndex
from duck.deletion.lsh import MAX_APPROX_DELTA, approx_acceptance
from duck.errors import DuckInputError


def clustered_points(seed: int, n: int = 400, dim: int = 8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 3, size=(6, dim))
    return centres[rng.integers(0, 6, n)] + rng.normal(0, 1, size=(n, dim))


def reference_buckets(index: LSHIndex, X: np.ndarray) -> np.ndarray:
    """k-tuples of every point in every table, (n, L, k), computed in numpy from the index's hash functions."""
    A, b = index.projections.cpu().numpy(), index.offsets.cpu().numpy()
    return np.floor((X @ A.T + b) / index.w).astype(np.int64).reshape(len(X), index.L, index.k)


def reference_neighbourhood(index: LSHIndex, X: np.ndarray, q: np.ndarray, r: float) -> tuple[list, list]:
    """Brute force: M(q) and each member's degree (number of tables where it shares q's k-tuple)."""
    codes, qcodes = reference_buckets(index, X), reference_buckets(index, q)
    members, degrees = [], []
    for j in range(len(q)):
        same = (codes == qcodes[j][None]).all(-1)  # (n, L)
        near = np.linalg.norm(X - q[j], axis=1) <= r
        ids = np.nonzero(same.any(1) & near)[0]
        members.append(ids)
        degrees.append(same[ids].sum(1))
    return members, degrees


def test_keys_encode_the_k_tuples_exactly():
    X = clustered_points(0)
    index = LSHIndex(8, k=3, L=6, w=2.0, seed=1, device="cpu")
    index.add(X)
    codes = reference_buckets(index, X)
    keys = index.hash(torch.as_tensor(X)).numpy()
    for table in range(index.L):
        by_tuple, by_key = defaultdict(set), defaultdict(set)
        for i in range(len(X)):
            by_tuple[tuple(codes[i, table])].add(i)
            by_key[keys[i, table]].add(i)
        assert sorted(map(sorted, by_tuple.values())) == sorted(map(sorted, by_key.values()))
        tkeys, tids = index.table(table)
        assert (tkeys[1:] >= tkeys[:-1]).all() and sorted(tids.tolist()) == list(range(len(X)))


def test_query_matches_brute_force_neighbourhood():
    X = clustered_points(1)
    rng = np.random.default_rng(1)
    q = X[rng.choice(len(X), 20, replace=False)] + rng.normal(0, 0.3, size=(20, 8))
    index = LSHIndex(8, k=4, L=10, w=3.0, seed=2, device="cpu")
    index.add(X)
    expected, _ = reference_neighbourhood(index, X, q, 2.5)
    found = index.query(q, 2.5)
    assert [f.tolist() for f in found] == [e.tolist() for e in expected]
    assert sum(len(e) for e in expected) > 40


def test_remove_is_exact_bucket_contents_equal_a_fresh_build():
    X = clustered_points(2, n=300)
    index = LSHIndex(8, k=3, L=7, w=2.5, seed=3, device="cpu")
    index.add(X[:200])
    index.add(X[200:])
    rng = np.random.default_rng(0)
    removed = rng.choice(300, 90, replace=False)
    index.remove(removed[:40])
    index.remove(torch.as_tensor(removed[40:]))
    keep = np.setdiff1d(np.arange(300), removed)
    fresh = LSHIndex(8, k=3, L=7, w=2.5, seed=3, device="cpu")
    fresh.add(X[keep])
    assert len(index) == len(fresh) == 210 and index.ids.tolist() == keep.tolist()
    for table in range(7):
        keys, ids = index.table(table)
        fkeys, fids = fresh.table(table)
        assert torch.equal(keys, fkeys)
        assert torch.equal(ids, torch.as_tensor(keep)[fids])  # same buckets, same order
    assert (index._points[removed] == 0).all()  # the deleted vectors are erased
    q = X[:5] + 0.1
    assert [a.tolist() for a in index.query(q, 3.0)] == [keep[b.numpy()].tolist() for b in fresh.query(q, 3.0)]


def test_bad_ids_raise_and_leave_the_index_unchanged():
    X = clustered_points(3, n=50)
    index = LSHIndex(8, k=2, L=3, w=2.0, seed=0, device="cpu")
    index.add(X)
    index.remove([4])
    before = [t.clone() for t in index.table(0)]
    for bad in ([4], [50], [-1], [1, 1], [0.5], [2, 4]):
        with pytest.raises(DuckInputError):
            index.remove(bad)
        assert all(torch.equal(a, b) for a, b in zip(before, index.table(0), strict=True))
    with pytest.raises(DuckInputError, match="removed"):
        index.query(np.array([4]), 1.0)
    with pytest.raises(DuckInputError, match="removed"):
        index.sample([3, 4], 1.0)
    assert index.query(np.array([3]), 1.0)[0].tolist().count(3) == 1  # a stored point finds itself


@pytest.mark.parametrize(
    "call",
    [
        lambda: LSHIndex(8, k=0, L=3, w=1.0),
        lambda: LSHIndex(8, k=2, L=0, w=1.0),
        lambda: LSHIndex(8, k=2, L=3, w=0.0),
        lambda: LSHIndex(0, k=2, L=3, w=1.0),
        lambda: LSHIndex(8, k=2, L=3, w=1.0, seed=1.5),
        lambda: LSHIndex(8, k=2, L=3, w=1.0, seed=True),
        lambda: LSHIndex(8, k=2, L=3, w=1.0, seed=-1),
        lambda: LSHIndex(8, k=2, L=3, w=1.0, seed=2**70),
        lambda: LSHIndex(8, k=2, L=3, w=True),
        lambda: LSHIndex(8, k=2, L=3, w="4"),
        lambda: LSHIndex(8, k=2, L=3, w=float("inf")),
        lambda: LSHIndex(8, k=2, L=3, w=1.0, device="gpu"),
        lambda: LSHIndex(4, k=10**6, L=10**6, w=1.0),  # 32 TB of projections: refused before allocating
        pytest.param(lambda: LSHIndex(8, k=2, L=3, w=1.0, device="cuda"),
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available")),
    ],
)
def test_bad_construction_raises(call):
    with pytest.raises(DuckInputError):
        call()


def test_bad_query_arguments_raise():
    index = LSHIndex(8, k=2, L=3, w=2.0, seed=0, device="cpu")
    index.add(clustered_points(4, n=30))
    q = np.zeros((2, 8))
    for call in (
        lambda: index.query(q, 0.0),
        lambda: index.query(q, -1.0),
        lambda: index.query(np.zeros((2, 7)), 1.0),
        lambda: index.query(np.zeros(8), 1.0),
        lambda: index.add(np.zeros((2, 7))),
        lambda: index.add(np.full((2, 8), np.nan)),
        lambda: index.sample(q, 1.0, method="nearest"),
        lambda: index.sample(q, 1.0, n_samples=-1),
        lambda: index.sample(q, 1.0, n_samples=[1, 2, 3]),
        lambda: index.sample(q, 1.0, method="approx_degree", approx_delta=2, gamma=0.1),
        lambda: index.sample(q, 1.0, method="approx_degree", gamma=1.5),
        lambda: index.sample(q, 1.0, method="approx_degree", probes="lookup"),
    ):
        with pytest.raises(DuckInputError):
            call()


def small_index() -> tuple[LSHIndex, np.ndarray]:
    X = clustered_points(8, n=60, dim=4)
    index = LSHIndex(4, k=2, L=4, w=4.0, seed=0, device="cpu")
    index.add(X)
    index.remove([7])
    return index, X


def index_state(index: LSHIndex, X: np.ndarray) -> tuple:
    """Everything a failed call must leave alone: stored ids, every table, query results."""
    tables = [tuple(t.tolist() for t in index.table(i)) for i in range(index.L)]
    return len(index), index.ids.tolist(), tables, [m.tolist() for m in index.query(X[:6], 2.0)]


MALFORMED_IDS = [
    ["1"], "1", None, [None], [[1], [2, 3]], [[1, 2]], np.array([1 + 0j]), torch.tensor([1 + 0j]), 1.5, [1e20],
    np.array([1.0]), True, [True, False], torch.tensor([True]), np.array([2**63], dtype=np.uint64),
    np.array([2**64 - 1], dtype=np.uint64), [2**70], [7], [60], [-1],
]


@pytest.mark.parametrize("ids", MALFORMED_IDS, ids=lambda v: " ".join(repr(v).split())[:30])
@pytest.mark.parametrize("call", ["remove", "query", "sample"])
def test_malformed_ids_raise_cleanly_and_leave_the_index_unchanged(call, ids):
    index, X = small_index()
    before = index_state(index, X)
    with pytest.raises(DuckInputError):
        if call == "remove":
            index.remove(ids)
        elif call == "query":
            index.query(ids, 2.0)
        else:
            index.sample(ids, 2.0, n_samples=2, seed=0)
    assert index_state(index, X) == before


def test_valid_id_forms_still_work():
    index, X = small_index()
    index.remove(np.array([1], dtype=np.uint64))
    index.remove(torch.tensor([2], dtype=torch.int32))
    index.remove(np.int64(3))
    index.remove([])
    assert len(index) == 56 and not set(index.ids.tolist()) & {1, 2, 3, 7}
    assert index.query(np.array([0], dtype=np.uint8), 2.0)[0].tolist().count(0) == 1


@pytest.mark.parametrize(
    "data",
    [np.ones((2, 4)) + 1j, torch.ones(2, 4, dtype=torch.complex64), np.ones((2, 4), dtype=bool),
     torch.ones(2, 4, dtype=torch.bool), [["a", "b", "c", "d"]], None, [[1.0, 2.0, 3.0, 4.0], [1.0]]],
    ids=["complex", "complex-tensor", "bool", "bool-tensor", "text", "None", "ragged"],
)
def test_add_refuses_complex_bool_and_non_numeric_data(data):
    index, X = small_index()
    before = index_state(index, X)
    with pytest.raises(DuckInputError, match="X"):
        index.add(data)
    with pytest.raises(DuckInputError, match="queries"):
        index.query(data, 2.0)
    assert index_state(index, X) == before
    assert index.add(np.ones((2, 4), dtype=np.int32)).tolist() == [60, 61]  # integer data is real data


@pytest.mark.parametrize("bad", ["a", 1.7, True, -1, 4, None, np.float64(0.0)])
def test_table_number_must_be_an_int_below_L(bad):
    index, _ = small_index()
    with pytest.raises(DuckInputError, match=r"table index .* integer in 0\.\.3"):
        index.table(bad)
    assert torch.equal(index.table(np.int64(3))[1], index.table(3)[1])


@pytest.mark.parametrize(
    "kwargs",
    [
        {"r": True}, {"r": "1.5"}, {"r": float("nan")},
        {"seed": "abc"}, {"seed": [1]}, {"seed": 1.5}, {"seed": True}, {"seed": -1}, {"seed": 2**63},
        {"max_proposals": "x"}, {"max_proposals": 1.5}, {"max_proposals": 0}, {"max_proposals": True},
        {"n_samples": "2"}, {"n_samples": None}, {"n_samples": 1 + 0j}, {"n_samples": True}, {"n_samples": 2.0},
        {"n_samples": [[1]]}, {"n_samples": np.uint64(2**64 - 1)}, {"n_samples": 10**12},
        {"n_samples": [2**62, 2**62]},  # the total, not each count, is capped (no int64 overflow in the sum)
        {"method": "approx_degree", "gamma": 5e-324}, {"method": "approx_degree", "gamma": 1e-30},
        {"method": "approx_degree", "gamma": True}, {"method": "approx_degree", "gamma": "0.1"},
        {"method": "approx_degree", "gamma": 0.0}, {"method": "approx_degree", "gamma": 1.0},
        {"method": "approx_degree", "gamma": float("nan")},
        {"method": "approx_degree", "approx_delta": 10**12}, {"method": "approx_degree", "approx_delta": MAX_APPROX_DELTA + 1},
        {"method": "approx_degree", "approx_delta": 1.5}, {"method": "approx_degree", "approx_delta": True},
        {"method": "approx_degree", "approx_delta": "x", "gamma": 0.1}, {"method": ["uniform"]},
    ],
    ids=lambda kw: " ".join(f"{k}={v!r}"[:24] for k, v in kw.items()),
)
def test_bad_sample_and_query_arguments_raise_before_any_work(kwargs):
    index, X = small_index()
    before = index_state(index, X)
    kwargs = {"r": 2.0, **kwargs}
    with pytest.raises(DuckInputError):
        index.sample(X[:2], **kwargs)
    if set(kwargs) == {"r"}:
        with pytest.raises(DuckInputError, match="r must be"):
            index.query(X[:2], kwargs["r"])
    assert index_state(index, X) == before


def test_largest_approx_delta_and_smallest_gamma_run_quickly():
    index, X = small_index()
    for kwargs in ({"approx_delta": MAX_APPROX_DELTA}, {"gamma": 1e-26}, {"gamma": 1e-26, "probes": "tables"}):
        out = index.sample(X[:2], 2.0, "approx_degree", 20, seed=0, **kwargs)
        assert out.shape == (2, 20) and (out >= 0).all()
    assert index.last_sample_stats.proposals < 200_000


def acceptance_heuristic(degree: np.ndarray, L: int, delta: int) -> np.ndarray:
    """E[min(1, i/(L Delta))] for i ~ Geometric(d/L) (the paper's §5 degree approximation, capped)."""
    m = np.arange(L * delta)
    return ((1 - degree[:, None] / L) ** m[None]).sum(1) / (L * delta)


def acceptance_lemma37(degree: np.ndarray, L: int, delta: int) -> np.ndarray:
    """E[Z] of Lemma 3.7: Z = min(1, i/(L Delta)) if the first hit i <= L Delta + 1, else 0."""
    p = degree[:, None] / L
    m = np.arange(L * delta)[None]
    return ((1 - p) ** m * (1 - (1 - p) ** (L * delta + 1 - m))).sum(1) / (L * delta)


def test_approx_acceptance_closed_form_matches_the_sums():
    """approx_acceptance against the explicit sums over m of P(i > m) (and Lemma 3.7's P(m < i <= L Delta + 1))."""
    degree = np.arange(1, 13)
    for L, delta in ((12, 1), (12, 3), (40, 2)):
        d = degree[degree <= L]
        for lemma37, reference in ((False, acceptance_heuristic), (True, acceptance_lemma37)):
            got = approx_acceptance(torch.as_tensor(d), L, delta, lemma37).numpy()
            np.testing.assert_allclose(got, reference(d.astype(float), L, delta), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize(
    ("method", "probes"),
    [("uniform", None), ("weighted", None), ("exact_degree", None), ("approx_degree", "closed_form"),
     ("approx_degree", "tables"), ("lemma37", "closed_form"), ("lemma37", "tables")],
)
def test_sampler_distributions_match_closed_forms(method, probes):
    X = clustered_points(5, n=300, dim=4)
    index = LSHIndex(4, k=2, L=8, w=3.0, seed=4, device="cpu")
    index.add(X)
    q = X[:1] + 0.05
    r = 2.5
    members, degrees = reference_neighbourhood(index, X, q, r)
    ids, deg = members[0], degrees[0].astype(float)
    assert len(ids) >= 10 and deg.min() < deg.max()  # a neighbourhood with varied degrees
    if method == "uniform":
        codes, qcodes = reference_buckets(index, X), reference_buckets(index, q)[0]
        same = (codes == qcodes[None]).all(-1)  # (n, L)
        sizes = same.sum(0)
        weights = (same[ids] / np.maximum(sizes, 1)[None]).sum(1)  # sum over q's buckets holding p of 1/|B|
    elif method == "weighted":
        weights = deg
    elif method == "exact_degree":
        weights = np.ones_like(deg)
    elif method == "approx_degree":
        weights = deg * acceptance_heuristic(deg, index.L, 1)
    else:
        weights = deg * acceptance_lemma37(deg, index.L, 5)
    expected = weights / weights.sum()
    n = 50_000 if method == "lemma37" else 100_000
    kwargs = {"gamma": 0.3} if method == "lemma37" else {}  # Delta = ceil(ln 1/0.3) + 4 = 6 - 1 = 5
    if probes is not None:
        kwargs["probes"] = probes
    samples = index.sample(q, r, "approx_degree" if method == "lemma37" else method, n, seed=0, **kwargs)[0]
    freq = np.bincount(np.searchsorted(ids, samples.numpy()), minlength=len(ids)) / n
    assert np.isin(samples.numpy(), ids).all()
    assert np.abs(freq - expected).max() < 5 * np.sqrt(expected * (1 - expected) / n).max()


def test_sampling_is_batched_seeded_and_pads_empty_neighbourhoods():
    X = clustered_points(6, n=200)
    index = LSHIndex(8, k=3, L=6, w=3.0, seed=0, device="cpu")
    index.add(X)
    q = np.vstack([X[:3] + 0.01, np.full((1, 8), 100.0)])  # the last query has no neighbour
    counts = torch.tensor([5, 0, 7, 4])
    out = index.sample(q, 2.5, "approx_degree", counts, seed=11)
    assert out.shape == (4, 7)
    assert (out[0, :5] >= 0).all() and (out[0, 5:] == -1).all() and (out[1] == -1).all()
    assert (out[2] >= 0).all() and (out[3] == -1).all()
    assert torch.equal(out, index.sample(q, 2.5, "approx_degree", counts, seed=11))
    by_id = index.sample(np.array([0, 1]), 2.5, "uniform", 3, seed=0)
    assert by_id.shape == (2, 3) and (by_id >= 0).all()
    members = index.query(q, 2.5)
    for row, m in zip(out[:3], members[:3], strict=True):
        assert torch.isin(row[row >= 0], m).all()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_index_matches_cpu():
    X = clustered_points(7)
    cpu, gpu = (LSHIndex(8, k=3, L=6, w=2.0, seed=5, device=d) for d in ("cpu", "cuda"))
    cpu.add(X)
    gpu.add(X)
    assert [a.tolist() for a in cpu.query(X[:10], 2.0)] == [a.cpu().tolist() for a in gpu.query(X[:10], 2.0)]
    gpu.remove([1, 2, 3])
    assert gpu.sample(X[:2], 2.0, "exact_degree", 10, seed=0).shape == (2, 10)


# ---------------------------------------------------------------------------------------------- issue 39
def test_preview_is_one_line_and_cut_to_sixty_characters():
    from duck.deletion.lsh import _preview

    arr = np.arange(12).reshape(2, 6)  # numpy's repr spans two lines
    assert _preview(arr) == " ".join(repr(arr).split()) and "\n" not in _preview(arr)
    assert _preview("x" * 58) == repr("x" * 58)  # 60 characters with the quotes: kept whole
    long = "y" * 59  # 61 characters: cut to 57 and an ellipsis, 60 in all
    assert _preview(long) == repr(long)[:57] + "..." and len(_preview(long)) == 60


def test_id_refusals_name_the_ids_the_range_and_what_to_do():
    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    with pytest.raises(DuckInputError) as e:
        index.remove([0])
    assert str(e.value) == "ids [0] were never added (the index is empty)"
    index.add(np.random.default_rng(0).normal(size=(10, 2)))
    with pytest.raises(DuckInputError) as e:
        index.remove([10, 11, 12, 13, 14, 15, -1])  # seven bad ids: the first five are named
    assert str(e.value) == "ids [10, 11, 12, 13, 14] were never added (valid ids: 0..9)"
    with pytest.raises(DuckInputError) as e:
        index.remove([1.0])  # a float id is refused, not rounded
    assert str(e.value) == "ids must hold integer ids, got non-integer floats [1.0]; pass point ids as returned by add"
    index.remove([0, 1, 2, 3, 4, 5])
    with pytest.raises(DuckInputError) as e:
        index.remove([0, 1, 2, 3, 4, 5])
    assert str(e.value) == "ids [0, 1, 2, 3, 4] refer to removed points; they can no longer be used"
    with pytest.raises(DuckInputError) as e:
        index.remove([7, 7])
    assert str(e.value) == "ids lists a point twice; pass each id once"


def test_removed_points_are_erased_from_the_index_state():
    """"Their vectors and keys are erased": the stored vector is zeroed and every key set to -1 (no hash value:
    hashes are non-negative bucket numbers), so nothing of the point remains to be read back."""
    index = LSHIndex(dim=3, k=2, L=4, w=0.5, seed=1, device="cpu")
    X = np.random.default_rng(1).normal(size=(20, 3)) * 5
    index.add(X)
    assert int(index._keys.min()) >= 0
    index.remove([3, 8])
    assert torch.equal(index._points[[3, 8]], torch.zeros(2, 3, dtype=torch.float64))
    assert (index._keys[[3, 8]] == -1).all() and int(index._keys[[0, 1, 2]].min()) >= 0
    for t in range(4):
        keys, ids = index.table(t)
        assert not torch.isin(ids, torch.tensor([3, 8])).any() and len(ids) == 18


def test_sample_refusals_name_the_setting_and_its_range(monkeypatch):
    import duck.deletion.lsh as lsh_mod

    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(0).normal(size=(20, 2)))
    q = np.zeros((2, 2))
    cases = [
        ({"n_samples": [1, 2, 3]}, "n_samples must be >= 0 and give one count per query (2), got [1, 2, 3]"),
        ({"n_samples": -1}, "n_samples must be >= 0 and give one count per query (2), got -1"),
        ({"n_samples": 1.5}, "n_samples must hold integer ids, got non-integer floats [1.5]; pass an int or one int "
                             "per query"),
        ({"method": "approx_degree", "approx_delta": 0}, "approx_delta=0 must be an integer >= 1"),
        ({"method": "approx_degree", "approx_delta": 65}, "approx_delta=65 is too large: at most 64 (each sample costs "
         "about deg * Delta proposals, and beyond ~38 the distribution no longer changes in float64)"),
        ({"method": "approx_degree", "approx_delta": 2, "gamma": 0.5},
         "pass either approx_delta (heuristic) or gamma (Lemma 3.7, which fixes Delta), not both"),
        ({"method": "approx_degree", "gamma": 0.0}, "gamma must be a finite number > 0.0 and < 1.0, got 0.0"),
        ({"method": "approx_degree", "gamma": 1e-30}, "gamma=1e-30 is too small: Delta = ceil(ln 1/gamma) + 4 must be "
         "at most 64; use gamma >= 1e-26 (the guarantee is below float64 precision from about 1e-16 on)"),
        ({"seed": -1}, "seed=-1 must be an integer >= 0"),
    ]
    for kwargs, message in cases:
        with pytest.raises(DuckInputError) as e:
            index.sample(q, 1.0, **kwargs)
        assert str(e.value) == message, kwargs
    assert index.sample(q, 1.0, "approx_degree", approx_delta=64, seed=0).shape == (2, 1)  # the largest Delta
    monkeypatch.setattr(lsh_mod, "MAX_SAMPLES_PER_CALL", 10)  # the cap (2^28: 2 GiB of ids) at a testable size
    assert index.sample(q, 1.0, "uniform", [4, 6], seed=0).shape[0] == 2  # exactly the cap: allowed
    with pytest.raises(DuckInputError) as e:
        index.sample(q, 1.0, "uniform", [5, 6], seed=0)
    assert str(e.value) == ("n_samples asks for 11 samples in one call; at most 10 (their ids alone take 2 GiB): draw "
                            "in several calls")


def test_sample_draws_from_a_generator_it_is_given():
    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(1).normal(size=(30, 2)))
    q = np.zeros((1, 2))
    a = index.sample(q, 2.0, "uniform", 50, seed=torch.Generator().manual_seed(9))
    b = index.sample(q, 2.0, "uniform", 50, seed=9)
    assert torch.equal(a, b)  # a CPU generator on a CPU index is used as it is


@pytest.mark.parametrize(("method", "kw"), [("uniform", {}), ("weighted", {}), ("exact_degree", {}),
                                            ("approx_degree", {"approx_delta": 2}),
                                            ("approx_degree", {"approx_delta": 2, "probes": "tables"})])
def test_a_seeded_sample_ignores_the_global_generator(method, kw):
    """Every random number of a seeded call comes from the call's own generator: the global one, moved
    between two calls, changes nothing (the proposals, the coins, the probes' tables)."""
    index = LSHIndex(dim=2, k=2, L=4, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(2).normal(size=(40, 2)))
    q = np.zeros((2, 2))
    torch.manual_seed(1)
    a = index.sample(q, 1.5, method, 64, seed=11, **kw)
    torch.manual_seed(2)
    torch.rand(100)
    b = index.sample(q, 1.5, method, 64, seed=11, **kw)
    assert torch.equal(a, b)


def test_sample_refuses_an_unknown_method_probe_mode_or_round_size_with_the_choices():
    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(0).normal(size=(20, 2)))
    q = np.zeros((2, 2))
    for kwargs, message in (
        ({"method": "bogus"}, "method='bogus' is not supported; use one of uniform, weighted, exact_degree, "
                              "approx_degree"),
        ({"probes": "maybe"}, "probes='maybe' is not supported; use one of closed_form, tables"),
        ({"max_proposals": 0}, "max_proposals=0 must be an integer >= 1"),
    ):
        with pytest.raises(DuckInputError) as e:
            index.sample(q, 1.0, **kwargs)
        assert str(e.value) == message


def _everything_near() -> LSHIndex:
    """Every stored point collides with the query 0 in some table and lies within r = 100 of it: every proposal
    of ``uniform`` is accepted (acceptance rate 1)."""
    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(0).normal(size=(20, 2)))
    return index


def test_sample_rounds_follow_the_rate_estimate_and_the_round_cap():
    """The proposal schedule of SampleStats: a round proposes ceil(1.2 · remaining / rate) per query, the rate
    estimate starting at 1/2 and then the observed acceptance share; ``max_proposals`` caps a round (at least one
    proposal per unfinished query). With every proposal accepted: one round of 2 · ceil(1.2 · 10 / 0.5) = 48
    proposals for two queries of 10; capped at 3, a query of 20 takes 7 rounds (6 · 3 + the last round's
    ceil(1.2 · 2 / 1) = 3) and 21 proposals. The times are the call's own (issue 39: the schedule and the counters
    survived)."""
    index = _everything_near()
    q = np.zeros((2, 2))
    out = index.sample(q, 100.0, "uniform", 10, seed=0)
    stats = index.last_sample_stats
    assert (out >= 0).all() and (stats.rounds, stats.proposals, stats.probes) == (1, 2 * math.ceil(1.2 * 10 / 0.5), 0)
    assert 0.0 <= stats.scan_seconds < 60.0 and 0.0 <= stats.draw_seconds < 60.0
    out = index.sample(q[:1], 100.0, "uniform", 20, seed=0, max_proposals=3)
    stats = index.last_sample_stats
    assert (out >= 0).all() and (stats.rounds, stats.proposals) == (7, 6 * 3 + math.ceil(1.2 * 2 / 1.0))
    out = index.sample(q, 100.0, "uniform", [20, 1], seed=0, max_proposals=5)
    stats = index.last_sample_stats
    # round 1 asks ceil(1.2 · 20 / 0.5) + ceil(1.2 · 1 / 0.5) = 48 + 3 > 5: scaled to 5 · 48 // 51 = 4 and
    # max(1, 5 · 3 // 51) = 1; the second query is done. Then, at rate 1: ceil(1.2 · 16) = 20 -> 5, ceil(13.2) -> 5,
    # ceil(7.2) -> 5, and the last sample from ceil(1.2 · 1) = 2 proposals
    assert (out[0] >= 0).all() and out[1, 0] >= 0 and (out[1, 1:] == -1).all()
    assert (stats.rounds, stats.proposals) == (5, 4 + 1 + 5 + 5 + 5 + 2)


def test_closed_form_makes_no_probe_and_the_tables_do_with_lemma_3_7_probing_further():
    """approx_degree: the closed form decides from deg(p) alone (SampleStats.probes = 0); ``probes="tables"``
    probes; with gamma (Lemma 3.7) the points the heuristic accepts are probed again up to L·Δ + 1, so the same
    seed and the same Δ make more probes than the plain heuristic, and the closed form accepts less often (another
    sample from the same seed)."""
    index = LSHIndex(dim=2, k=2, L=4, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(2).normal(size=(40, 2)))
    q = np.zeros((2, 2))
    index.sample(q, 1.5, "approx_degree", 200, approx_delta=5, seed=3)
    assert index.last_sample_stats.probes == 0
    plain = index.sample(q, 1.5, "approx_degree", 200, approx_delta=5, probes="tables", seed=3)
    plain_probes = index.last_sample_stats.probes
    gamma = float(np.exp(-0.5))  # Δ = ceil(ln 1/γ) + 4 = 5, as above
    lemma = index.sample(q, 1.5, "approx_degree", 200, gamma=gamma, probes="tables", seed=3)
    assert plain_probes > 0 and index.last_sample_stats.probes > plain_probes
    assert not torch.equal(plain, lemma)
    closed_plain = index.sample(q, 1.5, "approx_degree", 200, approx_delta=5, seed=3)
    closed_lemma = index.sample(q, 1.5, "approx_degree", 200, gamma=gamma, seed=3)
    assert not torch.equal(closed_plain, closed_lemma)


def test_probe_counts_every_probe_within_the_budget_and_hits_where_the_point_is():
    """_probe: a point in none of its buckets is probed exactly its budget (across the doubling chunks: 1, 4, 5, 13
    probes), never beyond; a point in every bucket is found, one with budget 0 is not probed."""
    index = LSHIndex(dim=2, k=2, L=4, w=1.0, seed=0, device="cpu")
    gen = torch.Generator().manual_seed(0)
    budget = torch.tensor([1, 4, 5, 13, 0])
    pairs = torch.arange(5)
    never = torch.zeros(5 * 4, dtype=torch.bool)
    hit, probes = index._probe(pairs, budget, never, gen)
    assert not bool(hit.any()) and probes == int(budget.sum())
    always = torch.ones(5 * 4, dtype=torch.bool)
    hit, probes = index._probe(pairs, budget, always, gen)
    assert hit.tolist() == [True, True, True, True, False] and probes <= 4 * 4


@pytest.mark.parametrize("L", [256, 257, 300])
def test_table_probes_reach_every_table_beyond_256(L):
    """Table indices are drawn as uint8 only while they fit (L <= 256); with more tables every table must be
    drawable: a point stored in the last table alone is found."""
    index = LSHIndex(dim=2, k=1, L=L, w=1.0, seed=0, device="cpu")
    gen = torch.Generator().manual_seed(1)
    member = torch.zeros(L, dtype=torch.bool)
    member[L - 1] = True
    hit, probes = index._probe(torch.tensor([0]), torch.tensor([50 * L]), member, gen)
    assert bool(hit[0]) and 0 < probes <= 2 * 50 * L


def test_construction_refusals_name_the_setting_and_the_projection_cap_is_inclusive(monkeypatch):
    """Each constructor argument's refusal in full; L·k·dim may equal the cap, not exceed it (issue 39: the
    names in these messages and the cap's comparison survived)."""
    import duck.deletion.lsh as lsh_mod

    cases = [
        ({"dim": 0, "k": 1, "L": 1, "w": 1.0}, "dim=0 must be an integer >= 1"),
        ({"dim": 2, "k": 0, "L": 1, "w": 1.0}, "k=0 must be an integer >= 1"),
        ({"dim": 2, "k": 1, "L": 0, "w": 1.0}, "L=0 must be an integer >= 1"),
        ({"dim": 2, "k": 1, "L": 1, "w": 0.0}, "w (bucket width) must be a finite number > 0.0, got 0.0"),
        ({"dim": 2, "k": 1, "L": 1, "w": 1.0, "seed": -1}, "seed=-1 must be an integer >= 0"),
        ({"dim": 2, "k": 1, "L": 1, "w": 1.0, "device": "tpu"},
         "device='tpu' is not a device; use cpu, cuda, cuda:N or auto"),
    ]
    for kwargs, message in cases:
        with pytest.raises(DuckInputError) as e:
            LSHIndex(**kwargs)
        assert str(e.value) == message
    monkeypatch.setattr(lsh_mod, "MAX_PROJECTION_VALUES", 24)
    assert LSHIndex(dim=2, k=3, L=4, w=1.0, device="cpu").projections.shape == (12, 2)  # 24: exactly the cap
    with pytest.raises(DuckInputError) as e:
        LSHIndex(dim=2, k=5, L=3, w=1.0, device="cpu")
    assert str(e.value) == ("L * k * dim = 3 * 5 * 2 projection coefficients is more than 24 (2 GiB of float64); "
                            "lower k or L")


def test_a_fresh_index_is_empty_float64_hashing_with_offsets_in_the_bucket_width():
    """The hash functions are float64 (offsets b ~ U[0, w) as in Datar et al.'s h(x) = floor((a·x + b) / w)); the
    stored state starts empty with int64 keys, and the stored keys are the points' hashes, one row per point
    (-1 once removed)."""
    index = LSHIndex(dim=3, k=4, L=50, w=40.0, seed=2, device="cpu")
    assert index.projections.dtype == torch.float64 and index.offsets.dtype == torch.float64
    assert float(index.offsets.min()) >= 0.0 and float(index.offsets.max()) < 40.0
    assert float(index.offsets.max()) > 20.0  # 200 draws from U[0, 40): spread over the width, not over [0, 1)
    assert index._points.shape == (0, 3) and index._points.dtype == torch.float64
    assert index._keys.shape == (0, 50) and index._keys.dtype == torch.int64
    assert index._sorted_keys.dtype == torch.int64 and index._sorted_keys.shape == (50, 0)
    assert index._sorted_ids.dtype == torch.int64 and index._alive.dtype == torch.bool
    from duck.deletion.lsh import SampleStats

    assert index.last_sample_stats == SampleStats()
    X = np.random.default_rng(0).normal(size=(7, 3)) * 30
    index.add(X)
    assert index._keys.dtype == torch.int64 and torch.equal(index._keys, index.hash(torch.as_tensor(X)))
    assert index._points.dtype == torch.float64 and index._alive.tolist() == [True] * 7


def test_hash_over_several_blocks_equals_the_rows_hashed_alone():
    """hash() works in blocks of about 2^20 codes: with L·k = 4,096 a block is 256 rows, so 600 rows span three
    blocks, and every row's keys must equal those of the row hashed alone."""
    index = LSHIndex(dim=2, k=64, L=64, w=1.0, seed=0, device="cpu")
    X = torch.as_tensor(np.random.default_rng(1).normal(size=(600, 2)))
    keys = index.hash(X)
    for i in (0, 255, 256, 511, 512, 599):
        assert torch.equal(keys[i], index.hash(X[i : i + 1])[0]), i


def test_queries_as_integer_points_and_the_query_refusals_in_full():
    """A 2-D integer array is points (only a 1-D integer array is ids); each malformed query is refused naming
    `queries` and the shape it needs."""
    index = LSHIndex(dim=2, k=1, L=2, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(3).normal(size=(30, 2)))
    as_int = index.sample(np.array([[0, 0]]), 1.5, "uniform", 20, seed=4)
    as_float = index.sample(np.array([[0.0, 0.0]]), 1.5, "uniform", 20, seed=4)
    assert torch.equal(as_int, as_float)
    for queries, message in (
        (np.zeros(2), "queries must be (Q, dim) points or a 1-D integer array of ids; use q[None] for one point"),
        (np.zeros((1, 3)), "queries must have shape (n, 2), got (1, 3); pass X[None] for one point"),
        ([[1.0, 2.0], [3.0]], "queries must be a numeric (Q, 2) array: "),  # then numpy's own reason
    ):
        with pytest.raises(DuckInputError) as e:
            index.sample(queries, 1.0)
        assert str(e.value) == message or (message.endswith(": ") and str(e.value).startswith(message))
    for X, message in (
        (np.zeros((2, 3)), "X must have shape (n, 2), got (2, 3); pass X[None] for one point"),
        ([[1.0, 2.0], [3.0]], "X must be a numeric (n, 2) array: "),  # then numpy's own reason
        (np.array([[np.inf, 0.0]]), "X contains NaN or inf values (first bad rows: [0]); clean or drop those rows"),
    ):
        with pytest.raises(DuckInputError) as e:
            index.add(X)
        assert str(e.value) == message or (message.endswith(": ") and str(e.value).startswith(message))
    with pytest.raises(DuckInputError) as e:
        index.sample(np.array([99]), 1.0)
    assert "query ids" in str(e.value)


def test_a_point_at_exactly_distance_r_is_in_the_neighbourhood():
    """M(q) = {p : |p − q| <= r}: a stored point at distance exactly r (3-4-5, exact in float64) is sampled, one
    just beyond is not."""
    index = LSHIndex(dim=2, k=1, L=8, w=100.0, seed=0, device="cpu")  # wide buckets: every point collides
    index.add(np.array([[3.0, 4.0], [6.0, 8.0 + 1e-9]]))  # distances 5 and just above 10
    ids = index.sample(np.zeros((1, 2)), 5.0, "uniform", 50, seed=0)
    assert set(ids.flatten().tolist()) == {0}
    ids = index.sample(np.zeros((1, 2)), 10.0, "uniform", 50, seed=0)
    assert set(ids.flatten().tolist()) == {0}  # 10 + 1e-9 > 10: outside


def test_no_query_gives_an_empty_result_and_a_low_acceptance_rate_is_learnt_in_one_round():
    """Zero queries: a (0, 0) array, no round. A neighbourhood where about a fifth of the bucket entries are within
    r: the first round (rate estimate 1/2) falls short, the second proposes from the observed rate and finishes,
    for every seed tried (issue 39: the empty case and the rate update survived)."""
    index = LSHIndex(dim=2, k=2, L=3, w=1.0, seed=0, device="cpu")
    index.add(np.random.default_rng(0).normal(size=(200, 2)))
    out = index.sample(np.zeros((0, 2)), 1.0, "uniform", 3, seed=0)
    assert out.shape == (0, 0) and index.last_sample_stats.rounds == 0
    for seed in range(4):
        out = index.sample(np.zeros((1, 2)), 0.5, "uniform", 100, seed=seed)
        assert (out >= 0).all() and index.last_sample_stats.rounds == 2, seed


def test_index_defaults_are_seed_0_and_the_automatic_device():
    """``LSHIndex(dim, k, L, w)`` is the seed-0 index on the device "auto" picks (the CPU here): the same hash
    functions as with both stated."""
    plain, stated = LSHIndex(4, 3, 5, 1.0), LSHIndex(4, 3, 5, 1.0, seed=0, device="auto")
    assert plain.seed == 0 and plain.device == stated.device
    for name in ("projections", "offsets", "multipliers"):
        assert torch.equal(getattr(plain, name), getattr(stated, name)), name
    assert not torch.equal(plain.projections, LSHIndex(4, 3, 5, 1.0, seed=1).projections)
