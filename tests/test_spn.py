"""Removal-enabled LearnSPN / UnlearnSPN (seeds/001, ALGORITHMS.md §7).

The heart is the certified-removal property (Theorem 2 with the random draws made explicit): after any
sequence of removals, the SPN equals ``learn_spn`` on the remaining rows replaying ``random_state_``. The data
generators force every kind of change: operations that flip (SD -> NF when a node falls to t rows, NF -> SU /
SD -> SU when a variable becomes uninformative, SD <-> SV), Q-k-means partitions that move rows between
clusters, and RDC components that change. Inference is checked against a brute-force per-row recursion,
normalisation by enumeration / integration, and sampling against the exact distribution.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch

from duck.deletion import SPN, learn_spn
from duck.deletion._spn_rules import (
    CREATE_LEAF,
    NAIVE_FACTORIZATION,
    OPERATIONS,
    SPLIT_DATA,
    SPLIT_UNINFORMATIVE,
    SPLIT_VARIABLES,
    learnspn_operation,
    revise_operation,
)
from duck.deletion.spn import MAX_CATEGORIES
from duck.errors import DuckInputError

CPU = dict(device="cpu")


# ------------------------------------------------------------------------------------------- helpers
def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Structures equal exactly, floats to rounding."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), (where, len(a), len(b))
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, rel=1e-9, abs=1e-9), where
    else:
        assert a == b, (where, a, b)


def fresh_replay(spn: SPN, X: np.ndarray, types: list[str]) -> SPN:
    """learn_spn on the SPN's remaining rows, replaying its random draws (the certified-removal reference)."""
    ids = spn.ids_
    return learn_spn(X[ids], types, ids=ids, replay=spn.random_state_, **spn.learn_params_, **CPU)


def synthetic(seed: int, n: int = 90) -> tuple[np.ndarray, list[str]]:
    """Two Gaussian clusters over two correlated variables, an independent block, categorical variables,
    a near-constant column (rare rows differ: removing them makes it uninformative) and, sometimes, a constant
    column."""
    rng = np.random.default_rng(seed)
    cluster = rng.integers(0, 2, n)
    a = rng.normal(size=n) + 3.0 * cluster
    b = a + 0.5 * rng.normal(size=n)
    indep = rng.normal(size=n)
    cat = (cluster + (rng.random(n) < 0.2)) % 2 + 2 * (rng.random(n) < 0.1)  # codes 0..3
    rare = np.zeros(n)
    rare[rng.choice(n, int(rng.integers(1, 4)), replace=False)] = 1.0
    cols = [a, b, indep, cat, rare]
    types = ["gaussian", "gaussian", "gaussian", "categorical", "categorical"]
    if seed % 3 == 0:
        cols.append(np.full(n, 2.5))
        types.append("gaussian")
    if seed % 2 == 0:
        cols.append(rng.integers(0, 3, n).astype(float))
        types.append("categorical")
    return np.column_stack(cols), types


def removal_plan(X: np.ndarray, rng: np.random.Generator, n_steps: int) -> list[list[int]]:
    """Random single and batch removals; rows that make the near-constant column non-constant go early."""
    rare_rows = np.flatnonzero(X[:, 4] != 0).tolist()
    others = [int(i) for i in rng.permutation(np.flatnonzero(X[:, 4] == 0))]
    order = rare_rows[: max(len(rare_rows) - 1, 0)] + others
    plan, i = [], 0
    for _ in range(n_steps):
        size = 1 if rng.random() < 0.6 else int(rng.integers(2, 6))
        plan.append(order[i : i + size])
        i += size
    return plan


# ------------------------------------------------------------------------------------- the revision rule
class Conditions:
    def __init__(self, n_vars, n, exist, all_, indep, clusters):
        self.n_vars, self.n = n_vars, n
        self.exist_uninformative, self.all_uninformative = exist, all_
        self.independencies, self.clusters = indep, clusters


def test_revision_function_is_learnspn_on_the_remaining_rows():
    """Theorem 1 for Def. 3: for every consistent old/new condition pair (uninformative variables stay
    uninformative, |X'| < |X|), rev(op of LearnSPN(X)) equals the op of LearnSPN(X')."""
    t = 10
    checked = Counter()
    flags = [False, True]
    for n_vars in (1, 3):
        for n_old in (9, 10, 11, 12):
            for old in itertools.product(flags, flags, flags, flags):
                if old[1] and not old[0]:
                    continue
                c_old = Conditions(n_vars, n_old, *old)
                op_old = learnspn_operation(c_old, t)
                for removed in (1, 2):
                    for new in itertools.product(flags, flags, flags, flags):
                        exist, all_ = new[0], new[1]
                        if (all_ and not exist) or (old[0] and not exist) or (old[1] and not all_):
                            continue
                        c_new = Conditions(n_vars, n_old - removed, *new)
                        op_new = learnspn_operation(c_new, t)
                        assert revise_operation(op_old, c_old, c_new, t) == op_new, (op_old, old, new)
                        checked[(op_old, op_new)] += 1
    # every operation appears, and every change the paper lists happens
    assert {o for o, _ in checked} == set(OPERATIONS)
    for change in [
        (SPLIT_DATA, SPLIT_VARIABLES),
        (SPLIT_VARIABLES, SPLIT_DATA),
        (SPLIT_DATA, SPLIT_UNINFORMATIVE),
        (NAIVE_FACTORIZATION, SPLIT_DATA),
        (NAIVE_FACTORIZATION, SPLIT_UNINFORMATIVE),
        (SPLIT_DATA, NAIVE_FACTORIZATION),
        (SPLIT_UNINFORMATIVE, NAIVE_FACTORIZATION),
    ]:
        assert checked[change] > 0, change
    assert revise_operation(CREATE_LEAF, c_old, c_new, t) == CREATE_LEAF
    with pytest.raises(ValueError) as e:
        revise_operation("split_rows", c_old, c_new, t)
    assert str(e.value) == f"unknown operation 'split_rows'; expected one of {OPERATIONS}"


# ------------------------------------------------------------------------------------- certified removal
def test_certified_removal_after_any_sequence_of_removals():
    """The core property: unlearned SPN == fresh LearnSPN on the remaining rows replaying the draws (same
    paths, operations, scopes, row ids, flags, components, Q-k-means centroids; parameters to rounding),
    checked after every request, over removal sequences that flip operations and change analyses, and whose
    unchanged components are certified every way (first-order and direct RDC lower bounds, whitened certificate
    pairs); uninformative-variable flags come from witnesses or from the data."""
    seen = Counter()
    for seed in range(8):
        X, types = synthetic(seed)
        rng = np.random.default_rng(seed)
        spn = learn_spn(X, types, seed=seed, min_instances=int(rng.integers(15, 35)), **CPU)
        assert_same(spn.describe(), fresh_replay(spn, X, types).describe())  # a replay of itself
        for request in removal_plan(X, rng, n_steps=12):
            spn.unlearn(request)
            assert_same(spn.describe(), fresh_replay(spn, X, types).describe(), f"seed {seed}")
            info = spn.last_unlearning_
            seen.update(f"{a}->{b}" for _, a, b in info["operation_changes"])
            seen.update(
                {
                    k: info[k]
                    for k in (
                        "partitions_changed", "components_changed", "uninformative_changed", "components_bounded",
                        "components_taylor",
                    )
                }
            )
    # the sequences did exercise every kind of change
    assert seen["SD->NF"] + seen["SV->NF"] > 0, seen
    assert sum(v for k, v in seen.items() if k.endswith("->SU")) + seen["uninformative_changed"] > 0, seen
    assert seen["partitions_changed"] > 0 and seen["components_changed"] > 0, seen
    assert seen["components_taylor"] > 0, seen  # components certified by the first-order RDC bound, no features
    assert seen["components_bounded"] > 0, seen  # ... and by the lower bound with stored or fresh directions


def test_certified_removal_with_fresh_relearning_and_batches():
    """relearn="fresh" (Alg. 6 literally: a cluster that gained rows is relearned from (seed, path) draws) is
    exact as well; batch requests equal the same rows removed at once in the reference."""
    for seed in (11, 12):
        X, types = synthetic(seed, n=80)
        spn = learn_spn(X, types, seed=seed, min_instances=12, relearn="fresh", **CPU)
        rng = np.random.default_rng(seed)
        for _ in range(4):
            spn.unlearn(rng.choice(spn.ids_, 6, replace=False).tolist())
            assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


def test_unlearn_is_a_no_op_when_replayed_model_is_itself_and_ids_are_stable():
    X, types = synthetic(5, n=60)
    ids = np.arange(60) * 7 + 1000  # arbitrary stable ids
    spn = learn_spn(X, types, ids=ids, min_instances=20, **CPU)
    spn.unlearn([1000, 1007])
    spn.unlearn(np.array([1014]))
    np.testing.assert_array_equal(spn.ids_, ids[3:])
    fresh = learn_spn(X[3:], types, ids=ids[3:], replay=spn.random_state_, **spn.learn_params_, **CPU)
    assert_same(spn.describe(), fresh.describe())
    x = np.nan_to_num(X[:20])
    torch.testing.assert_close(spn.log_likelihood(x), fresh.log_likelihood(x), rtol=1e-10, atol=1e-10)
    spn.unlearn([])  # an empty request changes nothing
    assert spn.last_unlearning_["n_ids"] == 0


def test_removed_rows_leave_no_values_in_the_model_storage():
    """After unlearn the SPN's row storage holds zeros for the removed rows (the update that needs them has
    run); the remaining rows are untouched."""
    X, types = synthetic(6, n=70)
    spn = learn_spn(X, types, min_instances=20, **CPU)
    spn.unlearn([3, 10])
    stored = spn._X.cpu().numpy()
    assert not stored[[3, 10]].any()
    np.testing.assert_array_equal(stored[spn.ids_], X[spn.ids_])
    # a deep copy unlearns into its own storage (no stale views), leaving the original untouched
    twin = copy.deepcopy(spn)
    twin.unlearn([20])
    assert not twin._X.cpu().numpy()[20].any() and spn._X.cpu().numpy()[20].any()
    assert_same(twin.describe(), fresh_replay(twin, X, types).describe())


def test_operations_flip_as_rows_go():
    """Removing rows walks a node through Alg. 1's cases: SD while |X| > t, NF at |X| <= t; a variable whose
    only non-zero rows are removed becomes uninformative (SU)."""
    rng = np.random.default_rng(0)
    n = 60
    cluster = rng.integers(0, 2, n)
    X = np.column_stack([rng.normal(size=n) + 4 * cluster, rng.normal(size=n) + 4 * cluster, np.zeros(n)])
    X[[3, 7], 2] = 1.0
    types = ["gaussian", "gaussian", "categorical"]
    spn = learn_spn(X, types, min_instances=40, **CPU)
    first = spn.root.op
    assert first in (SPLIT_DATA, SPLIT_VARIABLES)
    spn.unlearn([3])
    assert spn.root.op == first
    spn.unlearn([7])  # column 2 is now constant
    assert spn.root.op == SPLIT_UNINFORMATIVE
    assert spn.last_unlearning_["operation_changes"][0][2] == "SU"
    spn.unlearn(spn.ids_[:15].tolist())  # 43 rows left > t: SU over an SD child
    assert spn.root.children[-1].op == SPLIT_DATA
    spn.unlearn(spn.ids_[:3].tolist())  # 40 rows = t: the informative child is naively factorised
    assert spn.root.children[-1].op == NAIVE_FACTORIZATION
    assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


# ------------------------------------------------------------------------------------------- inference
def brute_force_log_likelihood(node: dict, x: np.ndarray) -> float:
    """Per-row recursion over ``describe()`` (an independent evaluator of Def. 1, NaN = marginalised)."""
    if node["op"] == "CL":
        v = node["scope"][0]
        if np.isnan(x[v]):
            return 0.0
        leaf = node["leaf"]
        if leaf["type"] == "gaussian":
            z = (x[v] - leaf["mean"]) / leaf["std"]
            return -0.5 * z * z - math.log(leaf["std"]) - 0.5 * math.log(2 * math.pi)
        return math.log(leaf["probs"][int(x[v])])
    values = [brute_force_log_likelihood(c, x) for c in node["children"]]
    if node["op"] == "SD":
        terms = [math.log(w) + v for w, v in zip(node["weights"], values, strict=True)]
        top = max(terms)
        return top + math.log(sum(math.exp(t - top) for t in terms))
    return sum(values)


def test_log_likelihood_matches_per_row_recursion_with_missing_values():
    X, types = synthetic(6, n=120)
    spn = learn_spn(X, types, min_instances=20, **CPU)
    rng = np.random.default_rng(1)
    Q = X[rng.choice(120, 40)].copy()
    Q[rng.random(Q.shape) < 0.2] = np.nan
    expected = np.array([brute_force_log_likelihood(spn.describe(), q) for q in Q])
    np.testing.assert_allclose(spn.log_likelihood(Q).numpy(), expected, rtol=1e-10, atol=1e-10)
    assert spn.log_likelihood(np.full((3, X.shape[1]), np.nan)).abs().max() == 0  # everything marginalised


def test_categorical_spn_is_normalised_and_marginalises_exactly():
    rng = np.random.default_rng(2)
    n = 300
    z = rng.integers(0, 2, n)
    X = np.column_stack(
        [(z + (rng.random(n) < 0.2)) % 2, (2 * z + rng.integers(0, 2, n)) % 3, rng.integers(0, 4, n)]
    )
    spn = learn_spn(X, ["categorical"] * 3, min_instances=30, **CPU)
    grid = np.array(
        list(itertools.product(range(2), range(3), range(4))), dtype=float
    )  # all 24 configurations
    ll = spn.log_likelihood(grid)
    assert torch.logsumexp(ll, 0).item() == pytest.approx(0.0, abs=1e-12)
    marg = grid[::4].copy()
    marg[:, 2] = np.nan  # P(x0, x1) = sum over x2
    torch.testing.assert_close(
        spn.log_likelihood(marg), torch.logsumexp(ll.reshape(6, 4), 1), rtol=1e-12, atol=1e-12
    )


def test_gaussian_marginal_integrates_to_one():
    X, types = synthetic(3, n=150)
    spn = learn_spn(X, types, min_instances=25, **CPU)
    grid = np.linspace(-8, 14, 20001)
    Q = np.full((grid.size, X.shape[1]), np.nan)
    Q[:, 0] = grid
    density = spn.log_likelihood(Q).exp().numpy()
    assert np.trapezoid(density, grid) == pytest.approx(1.0, abs=1e-6)


def test_leaf_parameters_are_the_smoothed_maximum_likelihood_estimates():
    rng = np.random.default_rng(4)
    X = np.column_stack([rng.normal(3, 2, 50), rng.integers(0, 3, 50), np.full(50, 1.5)])
    spn = learn_spn(
        X,
        ["gaussian", "categorical", "gaussian"],
        n_categories=[None, 5, None],
        alpha=0.5,
        min_std=1e-2,
        min_instances=100,
        **CPU,
    )
    d = (
        spn.describe()
    )  # |X| <= t and column 2 constant: SU of a constant leaf and an NF... here all NF/SU leaves
    leaves = {}

    def collect(node):
        if node["op"] == "CL":
            leaves[node["scope"][0]] = node["leaf"]
        for c in node.get("children", []):
            collect(c)

    collect(d)
    assert leaves[0]["mean"] == pytest.approx(X[:, 0].mean()) and leaves[0]["std"] == pytest.approx(
        X[:, 0].std()
    )
    counts = np.bincount(X[:, 1].astype(int), minlength=5)
    np.testing.assert_allclose(leaves[1]["probs"], (counts + 0.5) / (50 + 0.5 * 5))
    assert leaves[2] == {
        "type": "gaussian",
        "mean": pytest.approx(1.5),
        "std": 1e-2,
    }  # zero variance: min_std
    # naive factorisation: the log-likelihood is the sum of the independent marginals
    x = np.array([[2.0, 4.0, 1.5]])
    expected = (
        -0.5 * ((2.0 - X[:, 0].mean()) / X[:, 0].std()) ** 2
        - math.log(X[:, 0].std() * math.sqrt(2 * math.pi))
        + math.log(0.5 / 52.5)
        - math.log(1e-2 * math.sqrt(2 * math.pi))
    )
    assert spn.log_likelihood(x).item() == pytest.approx(expected, rel=1e-12)


def test_gaussian_leaves_keep_their_precision_far_from_zero():
    """Centred leaf sums: values around 1e9 with std ~1 (E[x^2] - E[x]^2 in float64 keeps no correct digit)
    give numpy's mean and std, before and after removals."""
    rng = np.random.default_rng(0)
    X = 1e9 + rng.normal(size=(60, 1))
    spn = learn_spn(X, ["gaussian"], **CPU)
    leaf = spn.describe()["leaf"]
    assert leaf["mean"] == pytest.approx(X.mean(), rel=1e-15) and leaf["std"] == pytest.approx(X.std(), rel=1e-9)
    spn.unlearn([0, 5, 7])
    rest = np.delete(X, [0, 5, 7], axis=0)
    leaf = spn.describe()["leaf"]
    assert leaf["mean"] == pytest.approx(rest.mean(), rel=1e-15) and leaf["std"] == pytest.approx(rest.std(), rel=1e-9)


def test_sampling_follows_the_spn_distribution():
    rng = np.random.default_rng(5)
    n = 400
    z = rng.integers(0, 2, n)
    X = np.column_stack([(z + (rng.random(n) < 0.1)) % 2, (2 * z + rng.integers(0, 2, n)) % 3])
    spn = learn_spn(X, ["categorical"] * 2, min_instances=40, **CPU)
    samples = spn.sample(40_000, seed=1).numpy()
    grid = np.array(list(itertools.product(range(2), range(3))), dtype=float)
    p = spn.log_likelihood(grid).exp().numpy()
    freq = np.array([np.mean((samples == g).all(1)) for g in grid])
    assert np.abs(freq - p).max() < 4 * np.sqrt(p * (1 - p) / 40_000).max()
    torch.testing.assert_close(spn.sample(10, seed=3), spn.sample(10, seed=3))
    Xg, types = synthetic(9, n=120)
    g = learn_spn(Xg, types, min_instances=30, **CPU)
    s = g.sample(20_000, seed=0).numpy()
    grid = np.linspace(-10, 16, 8001)
    Q = np.full((grid.size, Xg.shape[1]), np.nan)
    Q[:, 0] = grid
    mean = np.trapezoid(grid * g.log_likelihood(Q).exp().numpy(), grid)
    assert s[:, 0].mean() == pytest.approx(mean, abs=4 * s[:, 0].std() / np.sqrt(20_000))


def test_stateless_learnspn_is_the_same_model_without_removal_state():
    X, types = synthetic(7, n=100)
    full = learn_spn(X, types, min_instances=20, **CPU)
    bare = learn_spn(X, types, min_instances=20, removal_enabled=False, **CPU)
    torch.testing.assert_close(full.log_likelihood(X), bare.log_likelihood(X), rtol=0, atol=0)
    with pytest.raises(DuckInputError, match="removal_enabled=False"):
        bare.unlearn([0])


# --------------------------------------------------------------------------------------------- bad input
def test_bad_input_is_rejected_with_clear_messages_and_no_state_change():
    X, types = synthetic(1, n=50)
    with pytest.raises(DuckInputError, match="unknown variable types"):
        learn_spn(X, types[:-1] + ["poisson"], **CPU)
    with pytest.raises(DuckInputError, match="one type per column"):
        learn_spn(X, types[:-1], **CPU)
    bad = X.copy()
    bad[3, 0] = np.nan
    with pytest.raises(DuckInputError, match="NaN"):
        learn_spn(bad, types, **CPU)
    bad = X.copy()
    bad[0, 3] = 1.5
    with pytest.raises(DuckInputError, match="column 3 is categorical"):
        learn_spn(bad, types, **CPU)
    with pytest.raises(DuckInputError, match="ids must be unique"):
        learn_spn(X, types, ids=np.zeros(50, dtype=int), **CPU)
    with pytest.raises(DuckInputError, match="min_instances"):
        learn_spn(X, types, min_instances=0, **CPU)
    with pytest.raises(DuckInputError, match="qkmeans"):
        learn_spn(X, types, qkmeans={"k": 3}, **CPU)

    spn = learn_spn(X, types, min_instances=15, **CPU)
    spn.unlearn([4])
    before = spn.describe()
    for request, message in [
        ([4], "already removed"),
        ([50], "unknown ids"),
        ([-1], "unknown ids"),
        ([5, 5], "duplicates"),
        (spn.ids_.tolist(), "without data"),
        ([1.5], "integer ids"),
    ]:
        with pytest.raises(DuckInputError, match=message):
            spn.unlearn(request)
        assert_same(spn.describe(), before)
    with pytest.raises(DuckInputError, match="columns"):
        spn.log_likelihood(X[:, :-1])
    unseen = X[:2].copy()
    unseen[0, 3] = 7  # outside the declared domain 0..3
    with pytest.raises(DuckInputError, match="categorical with 4 categories"):
        spn.log_likelihood(unseen)
    with pytest.raises(DuckInputError, match="seed"):
        learn_spn(X, types, replay=spn.random_state_, seed=99, **CPU)


def test_categorical_domains_beyond_the_cap_are_refused_before_any_allocation():
    """A huge code or declared domain (or rdc_features) would size (V, Kmax+1, k) projections and (leaves, Kmax)
    tables beyond memory: refused with a hint; a domain of exactly MAX_CATEGORIES works end to end."""
    X, types = synthetic(1, n=50)
    huge = X.copy()
    huge[0, 3] = 1e12
    with pytest.raises(DuckInputError, match=r"column 3 is categorical with codes up to 1000000000000 .*gaussian"):
        learn_spn(huge, types, **CPU)
    cats: list[int | None] = [None] * X.shape[1]
    cats[3] = 10**12
    with pytest.raises(DuckInputError, match=r"n_categories\[3\]=1000000000000, more than the 65536"):
        learn_spn(X, types, n_categories=cats, **CPU)
    with pytest.raises(DuckInputError, match="reduce rdc_features"):
        learn_spn(X, types, rdc_features=10**12, **CPU)
    rng = np.random.default_rng(0)
    Xc = np.column_stack([rng.normal(size=30), rng.integers(0, 5, 30)])
    spn = learn_spn(Xc, ["gaussian", "categorical"], n_categories=[None, MAX_CATEGORIES], **CPU)
    assert spn.n_categories_ == (0, MAX_CATEGORIES)
    assert torch.isfinite(spn.log_likelihood(Xc)).all()
    assert spn.sample(2000, seed=1)[:, 1].max() < MAX_CATEGORIES  # O(leaves x n) memory, not x Kmax


def test_learn_spn_options_are_checked_by_type():
    X, types = synthetic(1, n=50)
    for kwargs, message in [
        (dict(removal_enabled="no"), "removal_enabled must be True or False"),
        (dict(removal_enabled=1), "removal_enabled must be True or False"),
        (dict(seed=2**70), "seed.*too large"),
        (dict(seed="1"), "seed"),
        (dict(seed=1.0), "seed"),
        (dict(device="tpu"), "device='tpu'"),
        (dict(device=3.5), "device=3.5"),
        (dict(relearn=["replay"]), "relearn"),
        (dict(rdc_features=True), "rdc_features"),
        (dict(qkmeans=[1]), "qkmeans must be a dict"),
        (dict(qkmeans={"gamma": "x"}), "gamma"),
        (dict(qkmeans={"eps_scale": math.inf}), "eps_scale"),
        (dict(ids=[[0], [1, 2]] + [[i] for i in range(3, 50)]), "flat 1-D sequence"),
    ]:
        with pytest.raises(DuckInputError, match=message):
            learn_spn(X, types, min_instances=15, **{**CPU, **kwargs})
    bare = learn_spn(X, types, min_instances=15, removal_enabled=np.bool_(False), **CPU)
    assert bare.removal_enabled is False


def _malformed_replays(state: dict[str, Any]) -> list[tuple[Any, str]]:
    """(replay, expected message) pairs, each a random_state_ broken in one place."""
    root = next(p for p, e in state["nodes"].items() if "rdc_projections" in e)
    clustered = next(p for p, e in state["nodes"].items() if "qkmeans" in e)

    def edit(change: Any) -> dict[str, Any]:
        replay = {"seed": state["seed"], "nodes": {p: dict(e) for p, e in state["nodes"].items()}}
        change(replay)
        return replay

    def projections(value: Any) -> dict[str, Any]:
        return edit(lambda r: r["nodes"][root].__setitem__("rdc_projections", value))

    def qk(key: str, value: Any) -> dict[str, Any]:
        def change(replay: dict[str, Any]) -> None:
            entry = replay["nodes"][clustered]
            entry["qkmeans"] = {**entry["qkmeans"], key: value}

        return edit(change)

    W = state["nodes"][root]["rdc_projections"]
    return [
        ([1], "replay must be a dict"),
        ({"seed": 0}, "exactly the keys 'seed' and 'nodes'"),
        ({**state, "extra": 1}, "exactly the keys 'seed' and 'nodes'"),
        (edit(lambda r: r.__setitem__("seed", "x")), r"replay\['seed'\]='x'"),
        (edit(lambda r: r.__setitem__("seed", 2**70)), "too large"),
        (edit(lambda r: r.__setitem__("nodes", None)), r"replay\['nodes'\] must be a dict"),
        (edit(lambda r: r.__setitem__("nodes", [1])), r"replay\['nodes'\] must be a dict"),
        (edit(lambda r: r["nodes"].__setitem__(root, [1])), "keys among"),
        (edit(lambda r: r["nodes"][root].__setitem__("other", 1)), "keys among"),
        (projections(torch.zeros(3)), r"rdc_projections'\] has shape \(3,\)"),
        (projections(W[:, :-1]), "has shape"),
        (projections(W * math.nan), "NaN or inf"),
        (projections("abc"), "real-valued numeric array"),
        (edit(lambda r: r["nodes"][clustered].__setitem__("qkmeans", [1])), "QKMeans.random_state_ dict"),
        (qk("seed_ids", [[1], [2, 3]]), "flat 1-D sequence"),
        (qk("seed_ids", [1]), "but n_clusters=2"),
        (qk("phases", torch.zeros(3)), "phases have shape \\(3,\\) but n_iter=10"),
        (qk("phases", state["nodes"][clustered]["qkmeans"]["phases"] * math.nan), r"uniform draws in \[0, 1\)"),
        (qk("eps_phase", "x"), "eps_phase"),
        (qk("n_reseeds", -1), "n_reseeds"),
    ]


def test_malformed_replays_are_refused_before_any_work():
    X, types = synthetic(1, n=50)
    spn = learn_spn(X, types, min_instances=15, **CPU)
    for replay, message in _malformed_replays(spn.random_state_):
        with pytest.raises(DuckInputError, match=message):
            learn_spn(X, types, replay=replay, **spn.learn_params_, **CPU)
    assert_same(fresh_replay(spn, X, types).describe(), spn.describe())  # the well-formed one still replays


def test_bad_unlearn_and_sample_arguments_leave_the_spn_usable():
    X, types = synthetic(1, n=50)
    spn = learn_spn(X, types, min_instances=15, **CPU)
    before = spn.describe()
    for request in ([[1], [2, 3]], [[1, 2]], "abc", [None]):
        with pytest.raises(DuckInputError, match="ids"):
            spn.unlearn(request)
        assert_same(spn.describe(), before)
    for kwargs, message in [
        (dict(n=2, seed=2**70), "too large"),
        (dict(n=2, seed=True), "seed"),
        (dict(n=0), "n=0"),
        (dict(n=2.0), "n=2.0"),
        (dict(n=2**40), "several calls"),  # terabytes: refused before allocating
    ]:
        with pytest.raises(DuckInputError, match=message):
            spn.sample(**kwargs)
    spn.unlearn([1, 2])
    assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


def test_all_constant_columns_work_as_uninformative_variables():
    rng = np.random.default_rng(3)
    X = np.column_stack([np.zeros(40), rng.normal(size=40), np.full(40, 2.0), rng.integers(0, 2, 40)])
    types = ["gaussian", "gaussian", "categorical", "categorical"]
    spn = learn_spn(X, types, min_instances=10, **CPU)
    assert spn.root.op == SPLIT_UNINFORMATIVE and [c.var for c in spn.root.children[:-1]] == [0, 2]
    assert torch.isfinite(spn.log_likelihood(X)).all()
    spn.unlearn(list(range(10)))
    assert_same(spn.describe(), fresh_replay(spn, X, types).describe())
    only = learn_spn(np.zeros((5, 3)), ["gaussian"] * 3, **CPU)  # everything uninformative: NF
    assert only.root.op == NAIVE_FACTORIZATION and torch.isfinite(only.log_likelihood(np.zeros((2, 3)))).all()
    single = learn_spn(X[:, 1:2], ["gaussian"], **CPU)  # one variable: a leaf
    assert single.root.op == CREATE_LEAF
    single.unlearn([0, 1])
    assert_same(single.describe(), fresh_replay(single, X[:, 1:2], ["gaussian"]).describe())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_and_stays_certified():
    X, types = synthetic(4, n=100)
    cpu = learn_spn(X, types, min_instances=20, **CPU)
    gpu = learn_spn(X, types, min_instances=20, device="cuda")
    torch.testing.assert_close(gpu.log_likelihood(X).cpu(), cpu.log_likelihood(X), rtol=1e-9, atol=1e-9)
    gpu.unlearn([1, 2, 3])
    fresh = learn_spn(
        X[gpu.ids_], types, ids=gpu.ids_, replay=gpu.random_state_, **gpu.learn_params_, device="cuda"
    )
    assert_same(gpu.describe(), fresh.describe())


@pytest.mark.parametrize("offset,spread", [(1e8, 1.0), (1.7e9, 10.0)])
def test_certified_removal_far_from_the_origin(offset, spread):
    """SplitData's Q-k-means computed distances as ||x||^2 - 2x.c + ||c||^2: on columns near 1e8 (timestamps,
    coordinates) the split was rounding noise, which differed between the unlearned SPN and the replayed
    fresh fit (other structure, or a replay that could not be built; 13 of 24 such sequences). Distances are
    sums of squared differences now."""
    for trial in range(3):
        rng = np.random.default_rng(3000 + trial)
        n = 120
        a = rng.normal(size=n) + 3 * rng.integers(0, 2, n)
        X = np.column_stack([offset + spread * a, offset + spread * (a + 0.5 * rng.normal(size=n)),
                             rng.normal(size=n)])
        types = ["gaussian"] * 3
        spn = learn_spn(X, types, seed=trial, min_instances=15, **CPU)
        for i in rng.permutation(n)[:10].tolist():
            spn.unlearn([i])
            assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


def test_certified_removal_on_near_duplicate_rows():
    """Three points with jitter <= 1e-7: the split of a node holding them was rounding noise too."""
    rng = np.random.default_rng(2016)
    n = 40
    X = rng.normal(size=(3, 2))[rng.integers(0, 3, n)] + rng.choice([0, 1e-7, -1e-7, 3e-8], size=(n, 2))
    spn = learn_spn(X, ["gaussian"] * 2, seed=16, min_instances=int(rng.integers(2, 6)), **CPU)
    for i in rng.permutation(n)[:20].tolist():
        spn.unlearn([i])
    assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 2).describe())
