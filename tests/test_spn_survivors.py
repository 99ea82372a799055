"""Removal-enabled LearnSPN (duck/deletion/spn.py): properties the certified-removal tests of test_spn.py do not
pin down, each aimed at mutants that survived them (issue 39).

The unlearning report ``last_unlearning_`` is recomputed independently from ``describe()`` before and after a
request (which nodes changed rows, which operations and component / uninformative sets changed); the removal
state's documented invariants (witness rows, RDC directions only for a single component) are checked against
the data; the cheap certification paths (witnesses of the removed rows only, the first-order and direct RDC
lower bounds) are checked to run where their documentation says; refusals are checked with their whole
message, the sampling cap at its boundary.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from refusals import refused
from test_spn import CPU, assert_same, fresh_replay

import duck.deletion.spn as spn_module
from duck.deletion import SPN, learn_spn
from duck.deletion._kmeans_ops import derive_seed, make_generator
from duck.deletion.rdc import draw_projections

HINT = "pass spn.random_state_ (learn_spn(..., replay=spn.random_state_, **spn.learn_params_))"


# ------------------------------------------------------------------------------------------- helpers
def expected_report(before: dict, after: dict, relearn: str = "replay") -> dict[str, Any]:
    """``last_unlearning_`` (without the RDC certification counters) from the two ``describe()`` trees.

    A node whose rows did not change is untouched (Alg. 2 l. 2-3); one whose rows changed is updated (counted),
    and if its operation changed it is relearned whole (Alg. 2 l. 6-9). In place: an SU node whose set of
    uninformative leaves changed relearns its informative rest, else recurses into it (Alg. 5); an SV node
    keeps the children whose scope is still a component and learns the new ones (Alg. 7); an SD node recurses
    into both clusters, a partition change being a cluster that gained rows (Alg. 6). ``updated_paths``: the
    nodes updated (an ``_update`` past Alg. 2 l. 3), in order."""
    report: dict[str, Any] = dict(
        nodes_updated=0, subtrees_relearned=0, rows_relearned=0, operation_changes=[], partitions_changed=0,
        components_changed=0, uninformative_changed=0, updated_paths=[],
    )

    def relearned(n: int) -> None:
        report["subtrees_relearned"] += 1
        report["rows_relearned"] += n

    def walk(b: dict, a: dict) -> None:
        if b["ids"] == a["ids"]:
            return
        report["nodes_updated"] += 1
        report["updated_paths"].append(b["path"])
        if b["op"] != a["op"]:
            report["operation_changes"].append((b["path"], b["op"], a["op"]))
            relearned(a["n"])
        elif b["op"] == "SU":
            if [c["scope"] for c in b["children"][:-1]] != [c["scope"] for c in a["children"][:-1]]:
                report["uninformative_changed"] += 1
                relearned(a["n"])
            else:
                walk(b["children"][-1], a["children"][-1])
        elif b["op"] == "SV":
            old = {tuple(c["scope"]): c for c in b["children"]}
            if set(old) != {tuple(c["scope"]) for c in a["children"]}:
                report["components_changed"] += 1
            for child in a["children"]:
                if tuple(child["scope"]) in old:
                    walk(old[tuple(child["scope"])], child)
                else:
                    relearned(a["n"])
        elif b["op"] == "SD":
            gains = [not set(x["ids"]) <= set(y["ids"]) for y, x in zip(b["children"], a["children"], strict=True)]
            report["partitions_changed"] += any(gains)
            for y, x, gained in zip(b["children"], a["children"], gains, strict=True):
                if relearn == "fresh" and gained:
                    relearned(x["n"])
                else:
                    walk(y, x)

    walk(before, after)
    return report


def unlearn_and_check_report(spn: SPN, request: list[int]) -> dict[str, Any]:
    """``spn.unlearn(request)``; its report equals the one recomputed from ``describe()``. -> the report"""
    before = spn.describe()
    spn.unlearn(request)
    got = dict(spn.last_unlearning_)
    expected = expected_report(before, spn.describe(), spn.params_.relearn)
    expected.pop("updated_paths")
    assert got.pop("n_ids") == len(request)
    assert got.pop("components_bounded") >= 0 and got.pop("components_taylor") >= 0
    got["operation_changes"] = [tuple(change) for change in got["operation_changes"]]
    assert got == expected
    return got


def two_clusters_with_rare_values(n: int = 24) -> np.ndarray:
    """Two clusters 10 apart (rows alternate) over two Gaussian columns; column 2 is 5 in cluster 1 and 0 in
    cluster 0 except row 0 (1); column 3 is 5 in cluster 0 and 0 in cluster 1 except row 1 (1). Inside a
    cluster one of the two columns is constant and the other varies by one row only."""
    rng = np.random.default_rng(0)
    cluster = np.arange(n) % 2
    X = np.column_stack(
        [rng.normal(size=(n, 2)) + 10.0 * cluster[:, None], np.where(cluster == 1, 5.0, 0.0),
         np.where(cluster == 0, 5.0, 0.0)]
    )
    X[0, 2] = X[1, 3] = 1.0
    return X


def three_weak_variables(seed: int = 6, n: int = 30) -> np.ndarray:
    """Two clusters 10 apart over three independent Gaussian columns: with rdc_threshold 0.7 and 3 features
    the RDC components inside a cluster come and go as rows are removed."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)) + 10.0 * (np.arange(n) % 2)[:, None]


# ------------------------------------------------------------------------------------ the unlearning report
def test_report_counts_uninformative_set_changes_and_in_place_updates_of_two_su_nodes():
    """Both clusters are SU nodes; one request makes a variable uninformative in each (two changes, two
    relearned informative children), the next leaves both SU nodes with two unchanged uninformative leaves
    (updated in place, nothing relearned). The report equals the describe() diff every time. (kills
    `_update_split_uninformative` 2, 3, 7, 23, 24, 27 and `_relearned` 1, 2, 5, 6, 7)"""
    X = two_clusters_with_rare_values()
    spn = learn_spn(X, ["gaussian"] * 4, min_instances=3, **CPU)
    assert [c.op for c in spn.root.children] == ["split_uninformative"] * 2
    report = unlearn_and_check_report(spn, [0, 1])
    assert report["uninformative_changed"] == 2 and report["subtrees_relearned"] == 2
    assert [len(c.children) for c in spn.root.children] == [3, 3]  # two uninformative leaves + the rest each
    report = unlearn_and_check_report(spn, [2, 3])
    assert report["uninformative_changed"] == 0
    unlearn_and_check_report(spn, [4])
    assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 4).describe())


def test_report_counts_component_changes_of_split_variables_nodes():
    """SV nodes whose components stay, change in number, change membership at the same number (two at once),
    and both SV nodes changing in one request: the report equals the describe() diff every time. (kills
    `_update_split_variables` 3, 4, 8, 9, 13)"""
    X = three_weak_variables()
    spn = learn_spn(X, ["gaussian"] * 3, seed=6, min_instances=3, rdc_threshold=0.7, rdc_features=3, **CPU)
    assert spn.operation_counts()["SV"] == 2
    changed = []
    for request in ([12, 16], [28, 9], [10, 19], [27, 4], [11, 20], [7, 21]):
        changed.append(unlearn_and_check_report(spn, request)["components_changed"])
    assert changed == [1, 1, 1, 0, 2, 1]
    assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 3).describe())


# --------------------------------------------------------------------------------------- whole messages
RAGGED = [[1.0], [1.0, 2.0]]


def numpy_error(value: Any) -> str:
    """The message of numpy's refusal to make an array of ``value`` (quoted inside ours)."""
    try:
        np.asarray(value)
    except ValueError as e:
        return str(e)
    raise AssertionError("numpy accepted it")


def small_spn() -> tuple[SPN, np.ndarray]:
    """Gaussian columns 0-2, categorical column 3 (K = 4): an SD root over NF clusters."""
    rng = np.random.default_rng(1)
    cluster = np.arange(40) % 2
    X = np.column_stack([rng.normal(size=(40, 3)) + 6.0 * cluster[:, None], rng.integers(0, 4, 40)])
    return learn_spn(X, ["gaussian"] * 3 + ["categorical"], min_instances=10, **CPU), X


def test_log_likelihood_refusals_name_x_in_full():
    """An empty, infinite, too narrow or out-of-domain query is refused with its whole message naming X; NaN is
    marginalised. (kills `SPN.log_likelihood` 3, 8, 9, 15, 16, 19, 23, 24 and `_as_matrix` 21, 26)"""
    spn, X = small_spn()
    with refused("X must be a non-empty 2-D (n_rows, n_variables) array, got shape (0, 4)"):
        spn.log_likelihood(np.zeros((0, 4)))
    bad = X[:3].copy()
    bad[1, 0] = np.inf
    with refused("X contains inf values (first bad rows: [1]); clean those rows"):
        spn.log_likelihood(bad)
    bad[1, 0] = np.nan  # NaN is a missing value at inference: marginalised (an all-NaN row has log-density 0)
    assert torch.isfinite(spn.log_likelihood(bad)).all()
    assert spn.log_likelihood(np.full((1, 4), np.nan)).item() == 0.0
    with refused(
        "X has 3 columns but this SPN models 4 variables; pass rows with the training columns in the training order"
    ):
        spn.log_likelihood(X[:, :3])
    bad = X[:3].copy()
    bad[2, 3] = 4.0  # one past the domain 0..3
    with refused(
        "X column 3 is categorical with 4 categories (codes 0..3) but holds [4.0]; encode categories as integers "
        "0..K-1 and declare K with n_categories (a value outside the declared domain has no probability mass)"
    ):
        spn.log_likelihood(bad)
    bad[2, 3] = 3.0  # the last code of the domain
    assert torch.isfinite(spn.log_likelihood(bad)).all()


def test_sample_cap_is_refused_just_above_it_and_allowed_at_it(monkeypatch: pytest.MonkeyPatch):
    """With the cap lowered to 20 values, 4 rows of 4 variables (16) and 5 rows (20) are drawn, 6 rows (24) are
    refused with the whole message. (kills `SPN.sample` 9, 10, 12)"""
    spn, _ = small_spn()
    monkeypatch.setattr(spn_module, "MAX_SAMPLE_VALUES", 20)
    assert spn.sample(5).shape == (5, 4)
    with refused(
        "n=6 rows of 4 variables is more than 20 values (2 GiB of float64) in one call; draw them in several "
        "calls with different seeds"
    ):
        spn.sample(6)


def test_sample_seed_defaults_to_zero_and_is_checked_by_name():
    """``sample(n)`` draws with seed 0 (another seed gives other rows); a negative seed is refused naming
    ``seed``. (kills `SPN.sample` 1, 20)"""
    spn, _ = small_spn()
    assert torch.equal(spn.sample(30), spn.sample(30, seed=0))
    assert not torch.equal(spn.sample(30), spn.sample(30, seed=1))
    with refused("seed=-1 must be an integer >= 0"):
        spn.sample(2, seed=-1)


def test_compiled_circuit_and_samples_stay_on_the_spns_device_whatever_torchs_default():
    """Under another default device (``meta`` stands in for a ``torch.set_default_device("cuda")`` session) a
    CPU SPN compiles its circuit on the CPU and samples there: the same values as outside. (kills
    `SPN._compile` 28 and `SPN.sample` 25)"""
    _, X = small_spn()
    X = X[:, :3]  # Gaussian columns only (the categorical code check is not what this test is about)
    spn, twin = (learn_spn(X, ["gaussian"] * 3, min_instances=10, **CPU) for _ in range(2))
    expected_ll, expected_samples = twin.log_likelihood(X), twin.sample(20, seed=4)
    with torch.device("meta"):
        ll = spn.log_likelihood(X)  # the first call compiles
        samples = spn.sample(20, seed=4)
    assert ll.device == samples.device == torch.device("cpu")
    assert torch.equal(ll, expected_ll) and torch.equal(samples, expected_samples)


# ------------------------------------------------------------------------------------------ replay refusals
def test_replay_refusals_are_whole_messages():
    """Every malformed part of a replay is refused with its whole message: the container (a list, a mapping
    with other keys), the seed, the nodes mapping, a node entry (not a mapping, an unknown key, a path that is
    not a string), projections of another shape (one variable too many, none) or not finite, a Q-k-means
    state with other keys or of another type, or phases for another n_iter. Projections for exactly the
    model's variables, and draws of a single variable for a path the model lacks, are accepted. (kills
    `_keys_or_type` 1, 2, 3, 9, `_check_qkmeans_replay` 5, 6, 7, 11, 16 and `_check_replay` mutants)"""
    spn, X = small_spn()
    types = ["gaussian"] * 3 + ["categorical"]
    kwargs = {**spn.learn_params_, "qkmeans": {"n_iter": 4}}
    spn = learn_spn(X, types, **kwargs, **CPU)
    state = spn.random_state_
    assert spn.root.op == "split_data" and set(state["nodes"][""]) == {"rdc_projections", "qkmeans"}
    W, qk = state["nodes"][""]["rdc_projections"], state["nodes"][""]["qkmeans"]
    assert W.shape == (4, 5, 10)

    def with_root(entry: Any) -> dict[str, Any]:
        return {"seed": 0, "nodes": {**state["nodes"], "": entry}}

    keys = "['seed_ids', 'phases', 'eps_phase', 'n_reseeds']"
    where = "replay['nodes']['']"
    cases = [
        ([1], f"replay must be a dict with exactly the keys 'seed' and 'nodes', got list; {HINT}"),
        ({"seed": 0}, f"replay must be a dict with exactly the keys 'seed' and 'nodes', got ['seed']; {HINT}"),
        ({**state, "seed": -1}, "replay['seed']=-1 must be an integer >= 0"),
        (
            {**state, "seed": 3},
            "replay was drawn with seed=3 but seed=0; pass the same seed "
            "(e.g. learn_spn(..., replay=spn.random_state_, **spn.learn_params_))",
        ),
        ({**state, "nodes": None}, f"replay['nodes'] must be a dict from node path to its draws, got NoneType; {HINT}"),
        ({**state, "nodes": [1]}, f"replay['nodes'] must be a dict from node path to its draws, got list; {HINT}"),
        (
            with_root([1]),
            f"{where} must be a dict with keys among ['rdc_projections', 'qkmeans'] under a path string, "
            f"got list; {HINT}",
        ),
        (
            with_root({"qkmeans": qk, "other": 1}),
            f"{where} must be a dict with keys among ['rdc_projections', 'qkmeans'] under a path string, "
            f"got ['other', 'qkmeans']; {HINT}",
        ),
        (
            {"seed": 0, "nodes": {7: {}}},
            "replay['nodes'][7] must be a dict with keys among ['rdc_projections', 'qkmeans'] under a path "
            f"string, got []; {HINT}",
        ),
        (
            with_root({"rdc_projections": torch.zeros(5, 5, 10)}),
            f"{where}['rdc_projections'] has shape (5, 5, 10), not (s <= 4, 5, 10) as this SPN's n_categories "
            "and rdc_features=10 draw; replay the state of an SPN learned with the same parameters on these "
            "columns",
        ),
        (
            with_root({"rdc_projections": torch.zeros(0, 5, 10)}),
            f"{where}['rdc_projections'] has shape (0, 5, 10), not (s <= 4, 5, 10) as this SPN's n_categories "
            "and rdc_features=10 draw; replay the state of an SPN learned with the same parameters on these "
            "columns",
        ),
        (with_root({"rdc_projections": W * np.inf}), f"{where}['rdc_projections'] contains NaN or inf values; {HINT}"),
        (
            with_root({"rdc_projections": RAGGED}),
            f"{where}['rdc_projections'] must be a numeric (s, Dmax+1, k) array: {numpy_error(RAGGED)}",
        ),
        (
            with_root({"rdc_projections": "abc"}),
            f"{where}['rdc_projections'] must be a real-valued numeric array, got dtype <U3",
        ),
        (
            with_root({"qkmeans": {**qk, "extra": 1}}),
            f"{where}['qkmeans'] must be a QKMeans.random_state_ dict with keys {keys}, got "
            "['eps_phase', 'extra', 'n_reseeds', 'phases', 'seed_ids']",
        ),
        (with_root({"qkmeans": [1]}), f"{where}['qkmeans'] must be a QKMeans.random_state_ dict, got list"),
        (
            with_root({"qkmeans": {**qk, "phases": torch.zeros(10, 4)}}),
            f"{where}['qkmeans'] phases have shape (10, 4) but n_iter=4; replay the random_state_ of a model "
            "with the same options",
        ),
    ]
    for replay, message in cases:
        with refused(message):
            learn_spn(X, types, replay=replay, **kwargs, **CPU)
    replayed = learn_spn(X, types, replay=with_root({"rdc_projections": W, "qkmeans": qk}), **kwargs, **CPU)
    assert_same(replayed.describe(), spn.describe())
    # draws of 1 to V variables pass the whole-replay check (which node uses which is checked where used)
    for s in (1, 4):
        extra = {"seed": 0, "nodes": {**state["nodes"], "/elsewhere": {"rdc_projections": torch.zeros(s, 5, 10)}}}
        assert_same(learn_spn(X, types, replay=extra, **kwargs, **CPU).describe(), spn.describe())


def test_report_with_fresh_relearning_counts_the_clusters_that_gained_rows():
    """relearn="fresh": a cluster that gained rows is relearned whole (counted with its rows), one that only
    lost rows is updated; the report equals the describe() diff. (kills `_update_split_data` 69-72)"""
    X = two_clusters_with_rare_values()
    for relearn in ("replay", "fresh"):
        spn = learn_spn(X, ["gaussian"] * 4, min_instances=3, relearn=relearn, **CPU)
        partitions = sum(unlearn_and_check_report(spn, r)["partitions_changed"] for r in ([0, 1], [2, 3], [4]))
        assert partitions > 0  # rows did move between clusters
        assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 4).describe())


# ------------------------------------------------------------------------------------ unlearn refusals
def test_unlearn_refusals_are_whole_messages_at_their_boundaries():
    """Ids of another shape, duplicates, ids one outside either end of the learned ones, ids removed before,
    and a request that would leave no row are refused whole; the same request minus one row is done. A message
    lists the first 10 offending ids. (kills `SPN._positions_to_remove` 3, 6, 7, 14, 29, 31, 33, 34, 36, 37, 39,
    41, 42)"""
    spn, _ = small_spn()
    with refused(f"ids to remove contain duplicates: {list(range(10))}; pass each id once"):
        spn.unlearn(list(range(11)) + [0])
    with refused(
        f"unknown ids {list(range(100, 110))}: not among the ids this SPN was learned on (ids run from 0 to 39)"
    ):
        spn.unlearn([1] + list(range(100, 111)))
    with refused("ids has shape (1, 2); give a flat (1-D) sequence of integer ids"):
        spn.unlearn([[1, 2]])
    with refused("ids to remove contain duplicates: [5, 5]; pass each id once"):
        spn.unlearn([5, 5])
    for outside in (-1, 40):
        with refused(
            f"unknown ids [{outside}]: not among the ids this SPN was learned on (ids run from 0 to 39)"
        ):
            spn.unlearn([outside])
    spn.unlearn([0, 39])
    with refused("ids [39] were already removed; each row can be removed once"):
        spn.unlearn([39, 1])
    rest = spn.ids_.tolist()
    with refused("removing 38 rows would leave the SPN without data (38 rows left); an SPN needs at least one row"):
        spn.unlearn(rest)
    spn.unlearn(rest[1:])
    assert spn.ids_.tolist() == rest[:1] and spn.n_samples_ == 1
    with refused(f"ids {rest[1:11]} were already removed; each row can be removed once"):
        spn.unlearn(rest[1:13])


def test_member_is_isin_for_ascending_unique_rows():
    """``_member(a, b)`` is ``np.isin(a, b)`` (a boolean array), also for an empty ``b`` and ``a``. (kills
    `_member` 3, 4, 5, 6)"""
    rng = np.random.default_rng(0)
    for size_a, size_b in [(10, 0), (0, 0), (0, 4), (12, 5), (7, 30)]:
        a = np.sort(rng.choice(40, size_a, replace=False))
        b = np.sort(rng.choice(40, size_b, replace=False))
        got = spn_module._member(a, b)
        assert got.dtype == bool and got.shape == (size_a,)
        np.testing.assert_array_equal(got, np.isin(a, b))


def test_learn_params_give_back_the_declared_domains():
    """``learn_params_["n_categories"]`` is None for Gaussian columns and the declared K for categorical ones,
    K = 1 included (whose code 1 is refused); learning again with them gives the same model. (kills
    `_Params.as_kwargs` 18, 19, 20 and `_check_codes` 4)"""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=30), np.zeros(30), rng.integers(0, 3, 30)])
    types = ["gaussian", "categorical", "categorical"]
    spn = learn_spn(X, types, n_categories=[None, 1, 5], min_instances=8, **CPU)
    assert spn.learn_params_["n_categories"] == [None, 1, 5]
    with refused(  # a one-category column is checked too: code 1 is outside its domain
        "X column 1 is categorical with 1 categories (codes 0..0) but holds [1.0]; encode categories as integers "
        "0..K-1 and declare K with n_categories (a value outside the declared domain has no probability mass)"
    ):
        spn.log_likelihood([[0.0, 1.0, 0.0]])
    again = learn_spn(X, types, **spn.learn_params_, **CPU)
    assert again.n_categories_ == (0, 1, 5)
    assert_same(again.describe(), spn.describe())


# ------------------------------------------------------------------------------- removal-state invariants
def node_snapshot(spn: SPN) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """Per internal node: (rows, scope, witnesses) copies."""
    return {
        node.path: (node.rows.copy(), node.scope.copy(), None if node.witnesses is None else node.witnesses.copy())
        for node in spn._nodes()
        if node.children
    }


def assert_witnesses_hold(spn: SPN, X: np.ndarray) -> None:
    """Every stored witness pair is a row of the node holding its variable's largest and smallest value, or
    -1 twice for a variable constant on the node's rows (storage positions are the ids here)."""
    for node in spn._nodes():
        if node.witnesses is None:
            continue
        for j, v in enumerate(node.scope.tolist()):
            column = X[node.rows, v]
            top, bottom = node.witnesses[:, j].tolist()
            if column.min() == column.max():
                assert top == bottom == -1, (node.path, v)
            else:
                assert top in node.rows and bottom in node.rows, (node.path, v)
                assert X[top, v] == column.max() and X[bottom, v] == column.min(), (node.path, v)


def test_witnesses_are_refreshed_for_exactly_the_variables_that_lost_one(monkeypatch: pytest.MonkeyPatch):
    """On an update that only removes rows, the columns re-evaluated at a node (``_refreshed_witnesses``) are
    exactly the variables with a witness among the removed rows (none for a removal of more than 32 rows, where
    the flags come from the data); afterwards every witness holds (a variable made constant gets -1 twice).
    (kills `_witnesses_lost` 1, 3, 6, 8, 12 and `_refreshed_witnesses` 25, 28, 34, 35)"""
    calls: list[tuple[str, tuple[int, ...]]] = []
    refresh = spn_module._Conditions._refreshed_witnesses

    def spy(self, w, cols):
        calls.append((self.path, tuple(self.scope[cols].tolist())))
        return refresh(self, w, cols)

    monkeypatch.setattr(spn_module._Conditions, "_refreshed_witnesses", spy)
    X = two_clusters_with_rare_values()
    spn = learn_spn(X, ["gaussian"] * 4, min_instances=3, **CPU)
    seen = 0
    for request in ([6, 7], [0, 1], [2, 5], [8], [9, 10, 11, 12]):
        before, tree = node_snapshot(spn), spn.describe()
        calls.clear()
        spn.unlearn(request)
        expected = []
        for path in expected_report(tree, spn.describe())["updated_paths"]:
            if path not in before:  # a leaf
                continue
            rows, scope, witnesses = before[path]
            node = next(n for n in spn._nodes() if n.path == path)
            if witnesses is None:
                continue
            lost = np.setdiff1d(rows, node.rows)
            if np.setdiff1d(node.rows, rows).size or lost.size > 32:
                continue
            hit = np.isin(witnesses, lost).any(0)
            if hit.any():
                expected.append((path, tuple(scope[hit].tolist())))
        assert sorted(calls) == sorted(expected), request
        seen += len(expected)
        assert_witnesses_hold(spn, X)
    assert seen >= 3


@pytest.mark.parametrize("n_removed", [32, 33])
def test_witnesses_of_up_to_32_removed_rows_are_compared_not_searched(monkeypatch: pytest.MonkeyPatch, n_removed):
    """32 removed rows are compared with the witnesses (the variables that lost one are re-evaluated), 33 are
    not (the flags come from the data). (kills `_witnesses_lost` 4)"""
    rng = np.random.default_rng(2)
    X = np.column_stack([rng.normal(size=60), rng.normal(size=60)])
    X[:, 1] += X[:, 0]
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=60, **CPU)
    assert spn.root.op == "naive_factorization"
    spn.unlearn([59])  # the root now keeps witnesses
    top = int(spn.root.witnesses[0, 0])
    request = [top] + [i for i in range(59) if i != top][: n_removed - 1]
    calls = []
    refresh = spn_module._Conditions._refreshed_witnesses
    def spy(self, w, cols):
        calls.append(cols)
        return refresh(self, w, cols)

    monkeypatch.setattr(spn_module._Conditions, "_refreshed_witnesses", spy)
    spn.unlearn(request)
    assert len(calls) == (1 if n_removed == 32 else 0)
    assert_witnesses_hold(spn, X)


def test_rdc_directions_are_kept_only_for_a_single_component():
    """A node's stored canonical directions and first-order reference certify a single component (a spanning
    forest): every node with more than one component keeps neither, after every request. (kills `_directions`
    1)"""
    X = three_weak_variables()
    spn = learn_spn(X, ["gaussian"] * 3, seed=6, min_instances=3, rdc_threshold=0.7, rdc_features=3, **CPU)
    multi = 0
    for request in ([12, 16], [28, 9], [10, 19], [27, 4], [11, 20], [7, 21]):
        spn.unlearn(request)
        for node in spn._nodes():
            if node.rdc is not None and len(node.rdc.components) > 1:
                multi += 1
                assert node.rdc.directions is None and node.rdc.taylor is None, node.path
    assert multi > 0


def test_many_components_keep_no_certificate_and_still_unlearn():
    """Six independent variables: more than 2V pairs cross the components, so no certificate is kept (the full
    matrix is recomputed on an update) and no directions either; the update is still exact. (kills
    `_directions` 2)"""
    X = np.random.default_rng(0).normal(size=(40, 6))
    types = ["gaussian"] * 6
    spn = learn_spn(X, types, min_instances=5, rdc_threshold=0.7, rdc_features=3, **CPU)
    for request in ([3], [5, 6]):
        spn.unlearn(request)
        assert len(spn.root.rdc.components) == 6
        assert spn.root.rdc.certificate is None and spn.root.rdc.directions is None
        assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


# ------------------------------------------------------------------------------- certification by bounds
def dependent_pair() -> tuple[SPN, np.ndarray]:
    """Two strongly dependent Gaussian variables (RDC far above 0.3) in two clusters: an SD root over NF
    clusters (min_instances 14 of 24 rows)."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=24) + 4.0 * (np.arange(24) % 2)
    X = np.column_stack([a, a + 0.1 * rng.normal(size=24)])
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=14, **CPU)
    assert spn.root.op == "split_data" and [c.op for c in spn.root.children] == ["naive_factorization"] * 2
    return spn, X


def test_a_dependent_pair_is_certified_by_the_bound_then_by_its_first_order_reference():
    """The root's single component (one forest edge) is re-certified without the pairwise test: on the first
    removal by the lower bound with fresh canonical directions, afterwards by the first-order reference those
    directions left. (kills `_directions` 7, 11)"""
    spn, X = dependent_pair()
    counts = []
    for request in ([3], [5], [7]):
        spn.unlearn(request)
        counts.append((spn.last_unlearning_["components_bounded"], spn.last_unlearning_["components_taylor"]))
        assert spn.root.rdc.directions is not None and spn.root.rdc.taylor is not None
    assert counts == [(1, 0), (0, 1), (0, 1)]
    assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 2).describe())


def update_conditions(spn: SPN, rows: np.ndarray, gained: bool = False) -> Any:
    """The root's ``_Conditions`` for an update to ``rows`` (a subset of its rows)."""
    root = spn.root
    kept = np.isin(root.rows, rows)
    lost = root.rows[~kept]
    return spn_module._Conditions(
        spn, rows, root.scope, root.path, prior=root, lost_ids=spn._ids[lost], gained=gained, kept=kept, lost=lost
    )


def test_first_order_bounds_apply_to_any_subset_of_two_or_more_reference_rows():
    """``_taylor_bounds``: for rows that are a subset of the reference's (removals only) with their ECDF counts,
    the bounds are the reference's at those rows' positions (found by brute force), also for the last row
    kept and for two rows; None for one row, for rows that gained, for a row outside the reference and for
    Gaussian variables without counts. (kills `_taylor_bounds` 2, 3, 4, 17)"""
    spn, _ = dependent_pair()
    spn.unlearn([3])
    spn.unlearn([5])
    root = spn.root
    reference, fmap = root.rdc.taylor, root.rdc.feature_map
    assert np.setdiff1d(root.rows, reference.rows).size == 0 and root.rows[-1] == reference.rows[-1]
    for rows in (root.rows[root.rows != 10], root.rows[:2], root.rows[-2:], root.rows):
        cond = update_conditions(spn, rows)
        counts = cond._updated_counts(root.rdc) if rows.size < root.rows.size else root.rdc.gauss_counts
        positions = np.array([reference.rows.tolist().index(r) for r in rows.tolist()])
        bounds = cond._taylor_bounds(reference, counts, fmap)
        assert bounds is not None, rows
        np.testing.assert_array_equal(bounds, reference.bounds(positions, counts))
    one = update_conditions(spn, root.rows[:1])
    assert one._taylor_bounds(reference, one._updated_counts(root.rdc), fmap) is None
    rows = root.rows[root.rows != 10]
    cond = update_conditions(spn, rows)
    counts = cond._updated_counts(root.rdc)
    assert update_conditions(spn, rows, gained=True)._taylor_bounds(reference, counts, fmap) is None
    assert cond._taylor_bounds(reference, None, fmap) is None
    outside = spn_module._Conditions(spn, np.array([3, 10, 11]), root.scope, root.path, prior=root)
    assert outside._taylor_bounds(reference, counts[:3], fmap) is None  # row 3 was removed before


def test_fresh_directions_certify_exactly_from_threshold_plus_guard():
    """``_certifying``: the fresh directions certify when their smallest bound is >= rdc_threshold + 1e-4, at
    equality included, and not when the threshold is one float step higher. (kills `_certifying` 18, 19)"""
    spn, _ = dependent_pair()
    spn.unlearn([3])
    root = spn.root
    cond = update_conditions(spn, root.rows[root.rows != 10])
    counts = cond._updated_counts(root.rdc)
    F = root.rdc.feature_map(cond.data, counts)
    directions = cond._directions(F.whitened(), root.rdc.certificate)
    smallest = cond._certifying(root.rdc.feature_map, F, directions)[2]
    guard = spn_module._BOUND_GUARD
    threshold = smallest - guard
    for _ in range(64):  # the threshold whose sum with the guard is the bound exactly
        if threshold + guard == smallest:
            break
        threshold = np.nextafter(threshold, 1.0 if threshold + guard < smallest else 0.0)
    assert threshold + guard == smallest
    for th, certified in ((threshold, True), (np.nextafter(threshold, 1.0), False)):
        spn.params_ = dataclasses.replace(spn.params_, rdc_threshold=float(th))
        got = cond._certifying(root.rdc.feature_map, F, directions)
        assert (got[0] is not None, got[1] is not None, got[2]) == (certified, certified, smallest)


# ------------------------------------------------------------------------------------------ SplitData
@pytest.mark.parametrize("m,request_", [(2, [20]), (6, [20, 21, 22])])
def test_a_kept_partition_updates_a_small_cluster_by_exactly_its_removed_rows(m, request_):
    """A cluster of ``m`` near-identical rows far from 20 others: removing half of it keeps the Q-k-means
    model (the same partition), and that cluster's leaves then describe exactly its remaining rows (mean by
    hand), as a fresh replay does. (kills `_update_split_data` 21, 25)"""
    rng = np.random.default_rng(m)
    a = rng.normal(size=20)
    X = np.vstack([np.column_stack([a, a + 0.3 * rng.normal(size=20)]), 10 + 1e-3 * rng.normal(size=(m, 2))])
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=8, **CPU)
    assert [c.n for c in spn.root.children] == [m, 20]
    spn.unlearn(request_)
    assert spn.last_unlearning_["partitions_changed"] == 0
    small = spn.describe()["children"][0]
    rest = np.setdiff1d(np.arange(20, 20 + m), request_)
    assert small["ids"] == rest.tolist()
    means = [leaf["leaf"]["mean"] for leaf in small["children"]]
    np.testing.assert_allclose(means, X[rest].mean(0), rtol=1e-12)
    assert_same(spn.describe(), fresh_replay(spn, X, ["gaussian"] * 2).describe())


def test_a_relearned_node_keeps_the_draws_its_revision_used():
    """An SPN learned from a replay whose RDC projections are not the (seed, path) draws: when a removal
    changes a node's operation (SV -> SD here), the relearned node stores the projections the revision
    evaluated (the replayed ones), the nodes learned below it draw from (seed, path) (a replay serves only the
    learning call it is passed to), and the model stays a replay of its random_state_. (kills `SPN._update` 88,
    92)"""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30, 3)) + 10.0 * (np.arange(30) % 2)[:, None]
    types = ["gaussian"] * 3
    kwargs = dict(seed=5, min_instances=3, rdc_threshold=0.7, rdc_features=3)
    state = learn_spn(X, types, **kwargs, **CPU).random_state_
    generator = torch.Generator().manual_seed(99)
    for entry in state["nodes"].values():
        if "rdc_projections" in entry:
            shape = entry["rdc_projections"].shape
            entry["rdc_projections"] = torch.randn(shape, generator=generator, dtype=torch.float64) / 6
    for path in ("/d0/d0", "/d0/d1"):  # nodes the first learn does not make (/d0 is an SV node there)
        state["nodes"][path] = {"rdc_projections": torch.randn((3, 2, 3), generator=generator, dtype=torch.float64)}
    spn = learn_spn(X, types, replay=state, **kwargs, **CPU)
    assert spn.root.children[0].op == "split_variables"
    rng = np.random.default_rng(5)
    for _ in range(7):
        spn.unlearn(rng.choice(spn.ids_, 2, replace=False).tolist())
    assert spn.last_unlearning_["operation_changes"] == [("/d0", "SV", "SD")]
    # the nodes learned below it draw from (seed, path), not from the replay (it served the first learn only)
    below = [n for n in spn._nodes() if n.path.startswith("/d0/") and n.rdc is not None]
    assert any(n.path in ("/d0/d0", "/d0/d1") for n in below)
    for node in below:
        h = spn_module._path_hash(node.path)
        W = draw_projections(make_generator(5, 11, h), (0, 0, 0), 3)[torch.from_numpy(node.scope)]
        torch.testing.assert_close(node.rdc.projections, W, rtol=0, atol=0)
    torch.testing.assert_close(
        spn.random_state_["nodes"]["/d0"]["rdc_projections"], state["nodes"]["/d0"]["rdc_projections"], rtol=0, atol=0
    )
    assert_same(spn.describe(), fresh_replay(spn, X, types).describe())


# --------------------------------------------------------------------------------------- learn_spn refusals
def mixed_columns() -> tuple[np.ndarray, list[str]]:
    """30 rows: two Gaussian columns and a categorical one with codes 0..3."""
    rng = np.random.default_rng(7)
    return np.column_stack([rng.normal(size=(30, 2)), rng.integers(0, 4, 30)]), ["gaussian", "gaussian", "categorical"]


def test_learn_spn_data_refusals_are_whole_messages():
    """Data, types and domains are refused with their whole messages (first five bad rows or values, sorted
    values); the accepted side of each boundary learns. (learn_spn's data checks)"""
    X, types = mixed_columns()
    bad = X.copy()
    bad[[3, 5, 8, 9, 12, 20], 0] = np.nan
    with refused(
        "X contains NaN or inf values (first bad rows: [3, 5, 8, 9, 12]) (NaN marks a missing value only at "
        "inference: log_likelihood marginalises it); clean those rows"
    ):
        learn_spn(bad, types, **CPU)
    with refused(f"X must be a numeric (n, V) array: {numpy_error(RAGGED)}"):
        learn_spn(RAGGED, types, **CPU)
    with refused("X must be a real-valued numeric array, got dtype <U1"):
        learn_spn([["a", "b", "c"]], types, **CPU)
    for shape, shown in (((0, 3), "(0, 3)"), ((5,), "(5,)")):
        with refused(f"X must be a non-empty 2-D (n_rows, n_variables) array, got shape {shown}"):
            learn_spn(np.zeros(shape), types, **CPU)
    with refused(
        "types must be a sequence with one of ('gaussian', 'categorical') per column, got 'gaussian'; "
        "e.g. ['gaussian'] * 3"
    ):
        learn_spn(X, "gaussian", **CPU)
    with refused("types has 2 entries but X has 3 columns; give one type per column"):
        learn_spn(X, types[:2], **CPU)
    with refused("unknown variable types ['Gaussian', 'poisson'] in types; use 'gaussian' or 'categorical'"):
        learn_spn(X, ["poisson", "Gaussian", "categorical"], **CPU)
    sequence = (
        "n_categories must be a sequence with one entry per column (an int K for a categorical column, None for "
        "a Gaussian one), got "
    )
    for value in ("abc", [None, None], 4):
        with refused(sequence + repr(value)):
            learn_spn(X, types, n_categories=value, **CPU)
    with refused("n_categories[1] = 3 but column 1 is Gaussian; use None"):
        learn_spn(X, types, n_categories=[None, 3, None], **CPU)
    with refused("n_categories[2]=0 must be an integer >= 1"):
        learn_spn(X, types, n_categories=[0, None, 0], **CPU)
    for value in (-1.0, 1.5):
        bad = X.copy()
        bad[4, 2] = value
        with refused(
            "X column 2 is categorical but holds non-integer or negative values; encode its categories as "
            "integers 0..K-1"
        ):
            learn_spn(bad, types, **CPU)
    big = X.copy()
    big[0, 2] = 65536
    with refused(
        "X column 2 is categorical with codes up to 65536 (65537 categories), more than the 65536 categories a "
        "variable may have; model column 2 as 'gaussian' or merge its categories into fewer codes 0..K-1"
    ):
        learn_spn(big, types, rdc_features=1, **CPU)
    with refused(
        "n_categories[2]=65537, more than the 65536 categories a variable may have; model column 2 as 'gaussian' "
        "or merge its categories into fewer codes 0..K-1"
    ):
        learn_spn(X, types, n_categories=[None, None, 65537], rdc_features=1, **CPU)
    bad = X.copy()
    bad[[1, 2, 3, 4, 5, 6], 2] = [7.0, 5.0, 2.5, 5.0, 9.0, 11.0]
    with refused(
        "X column 2 is categorical with 5 categories (codes 0..4) but holds [2.5, 5.0, 7.0, 9.0]; encode "
        "categories as integers 0..K-1 and declare K with n_categories (a value outside the declared domain has "
        "no probability mass)"
    ):
        learn_spn(bad, types, n_categories=[None, None, 5], **CPU)
    spn = learn_spn(X, types, n_categories=[0, None, 4], min_instances=40, **CPU)
    assert spn.n_categories_ == (0, 0, 4)


def test_learn_spn_option_refusals_are_whole_messages(monkeypatch: pytest.MonkeyPatch):
    """Options, ids and the RDC projection size are refused with their whole messages (a value shown on one
    line, long ones elided: kills `_brief` 2, 3); the projection cap is
    checked at its boundary (lowered to 150 values: 3 x 5 x 10 pass, 3 x 5 x 11 are refused; without a
    categorical column 3 x 2 x 25 pass, 3 x 2 x 26 are refused).
    (learn_spn's option checks)"""
    X, types = mixed_columns()
    qk_keys = "['n_iter', 'gamma', 'eps', 'eps_scale', 'n_local_trials']"
    for kwargs, message in [
        (dict(relearn="Fresh"), "relearn must be 'replay' or 'fresh', got 'Fresh'"),
        (dict(relearn="fresh  mode"), "relearn must be 'replay' or 'fresh', got 'fresh mode'"),  # one line
        (dict(relearn=list(range(20))), "relearn must be 'replay' or 'fresh', got [0, 1, 2, 3, 4, 5, ...]"),
        (dict(removal_enabled="no"), "removal_enabled must be True or False, got 'no'"),
        (dict(qkmeans=[1]), f"qkmeans must be a dict of Q-k-means options (keys among {qk_keys}) or None, got [1]"),
        (dict(qkmeans={"k": 3, "gamma": 0.2}), f"unknown qkmeans options ['k']; allowed: {qk_keys}"),
        (dict(seed=-1), "seed=-1 must be an integer >= 0"),
        (dict(min_instances=0), "min_instances=0 must be an integer >= 1"),
        (dict(rdc_threshold=0.0), "rdc_threshold must be a finite number > 0.0 and <= 1.0, got 0.0"),
        (dict(rdc_threshold=1.5), "rdc_threshold must be a finite number > 0.0 and <= 1.0, got 1.5"),
        (dict(rdc_features=0), "rdc_features=0 must be an integer >= 1"),
        (dict(rdc_scale=0.0), "rdc_scale must be a finite number > 0.0, got 0.0"),
        (dict(alpha=-1.0), "alpha must be a finite number >= 0.0, got -1.0"),
        (dict(min_std=0.0), "min_std must be a finite number > 0.0, got 0.0"),
        (dict(ids=[1, 2]), "ids has 2 entries but X has 30 rows; pass one id per row"),
        (dict(ids=[0] * 30), "ids must be unique (one stable id per row); found duplicates"),
        (dict(ids=np.zeros((30, 1), dtype=int)), "ids has shape (30, 1); give a flat (1-D) sequence of integer ids"),
    ]:
        with refused(message):
            learn_spn(X, types, **kwargs, **CPU)
    spn = learn_spn(X, types, rdc_threshold=1.0, alpha=0.0, removal_enabled=np.bool_(True), qkmeans=None, **CPU)
    assert spn.params_.qkmeans == {"eps_scale": 4.0} and spn.removal_enabled is True
    monkeypatch.setattr(spn_module, "MAX_PROJECTION_ENTRIES", 150)
    learn_spn(X, types, rdc_features=10, min_instances=40, **CPU)
    with refused(
        "rdc_features=11 with 3 variables and up to 4 categories needs 165 RDC projection values per node (at most "
        "150); reduce rdc_features or the largest categorical domain"
    ):
        learn_spn(X, types, rdc_features=11, **CPU)
    gaussian = np.column_stack([X[:, :2], X[:, 0] ** 2])  # no categorical column: Kmax + 1 = 2
    with refused(
        "rdc_features=26 with 3 variables and up to 1 categories needs 156 RDC projection values per node (at most "
        "150); reduce rdc_features or the largest categorical domain"
    ):
        learn_spn(gaussian, ["gaussian"] * 3, rdc_features=26, **CPU)
    learn_spn(gaussian, ["gaussian"] * 3, rdc_features=25, min_instances=40, **CPU)  # 3 x 2 x 25 = 150


# ------------------------------------------------------------------------------- describe() and the draws
def check_describe(d: dict, spn: SPN, X: np.ndarray) -> None:
    """One ``describe()`` node against the data of its ids (ids = storage order here): counts, leaf
    parameters by numpy (min_std, alpha smoothing), flags from the columns, SD weights from the children's
    sizes, children's row sets, components and centroids from the node's analyses; recursively."""
    ids = np.array(d["ids"], dtype=int)
    assert d["n"] == ids.size and d["ids"] == sorted(d["ids"])
    cols = X[np.ix_(ids, d["scope"])]
    if d["op"] == "CL":
        assert set(d) == {"path", "op", "scope", "n", "ids", "leaf"} and len(d["scope"]) == 1
        K = spn.n_categories_[d["scope"][0]]
        if K:
            counts = np.bincount(cols[:, 0].astype(int), minlength=K)
            p = spn.params_
            probs = (counts + p.alpha) / (ids.size + p.alpha * K)
            assert d["leaf"] == {"type": "categorical", "probs": pytest.approx(probs)}
        else:
            std = max(cols[:, 0].std(), spn.params_.min_std)
            mean = cols[:, 0].mean()
            assert d["leaf"] == {"type": "gaussian", "mean": pytest.approx(mean), "std": pytest.approx(std)}
        return
    constant = cols.min(0) == cols.max(0)
    assert d["exist_uninformative"] == bool(constant.any()) and d["all_uninformative"] == bool(constant.all())
    children = d["children"]
    if d["op"] == "SD":
        assert [c["ids"] for c in children] == [sorted(set(c["ids"])) for c in children]
        assert sorted(children[0]["ids"] + children[1]["ids"]) == d["ids"]
        assert d["weights"] == pytest.approx([len(c["ids"]) / ids.size for c in children])
        assert d["clusters"] is True and len(d["qkmeans_centers"]) == 2
    else:
        assert all(c["ids"] == d["ids"] for c in children) and "weights" not in d
        assert sorted(v for c in children for v in c["scope"]) == d["scope"]
    node = next(n for n in spn._nodes() if n.path == d["path"])
    if node.rdc is not None:
        assert d["components"] == [[int(node.scope[i]) for i in comp] for comp in node.rdc.components]
        assert d["independencies"] == (len(node.rdc.components) > 1)
    else:
        assert "components" not in d and d["independencies"] is None
    if node.qkmeans is not None:
        assert d["qkmeans_centers"] == node.qkmeans.cluster_centers_.tolist()
    else:
        assert "qkmeans_centers" not in d and d["clusters"] is None
    if d["op"] == "SV":
        assert [c["scope"] for c in children] == d["components"]
    path = d["path"]
    if d["op"] == "SD":
        assert [c["path"] for c in children] == [f"{path}/d0", f"{path}/d1"]
    elif d["op"] == "SV":
        assert [c["path"] for c in children] == [f"{path}/v{spn_module._scope_label(c['scope'])}" for c in children]
    else:  # NF: a leaf per variable; SU: a leaf per uninformative variable, then the informative rest
        leaves = children if d["op"] == "NF" else children[:-1]
        assert [c["path"] for c in leaves] == [f"{path}/x{c['scope'][0]}" for c in leaves]
        assert all(c["op"] == "CL" for c in leaves)
        if d["op"] == "SU":
            assert children[-1]["path"] == f"{path}/u"
    for child in children:
        check_describe(child, spn, X)


def test_describe_is_the_model_computed_from_the_data_before_and_after_removals():
    """Every node of ``describe()`` checked against numpy on its ids (see ``check_describe``), on an SPN with
    SD, SV, SU, NF and leaves, before and after removals. (kills `SPN.describe` 2, 3, 8-11, 37-44, 46-48,
    56-58)"""
    X = two_clusters_with_rare_values()
    X = np.column_stack([X, np.arange(24) % 3])
    types = ["gaussian"] * 4 + ["categorical"]
    spn = learn_spn(X, types, min_instances=3, alpha=0.5, min_std=0.05, **CPU)
    check_describe(spn.describe(), spn, X)
    for request in ([6, 7], [0, 1], [2, 3, 5]):
        spn.unlearn(request)
        check_describe(spn.describe(), spn, X)
    X = three_weak_variables()
    spn = learn_spn(X, ["gaussian"] * 3, seed=6, min_instances=3, rdc_threshold=0.7, rdc_features=3, **CPU)
    assert spn.operation_counts() == {"CL": 6, "NF": 0, "SU": 0, "SD": 1, "SV": 2}
    check_describe(spn.describe(), spn, X)
    spn.unlearn([12, 16])
    check_describe(spn.describe(), spn, X)


def test_rows_are_kept_in_stable_id_order_whatever_order_they_come_in():
    """Rows given with shuffled ids build the same SPN as the same rows sorted by id: node ids ascending, the
    same model, the same unlearning. (SPN.__init__'s id order)"""
    X = two_clusters_with_rare_values()
    types = ["gaussian"] * 4
    perm = np.random.default_rng(0).permutation(24)
    ids = 100 + 3 * perm
    shuffled = learn_spn(X, types, ids=ids, min_instances=3, **CPU)
    order = np.argsort(ids)
    ordered = learn_spn(X[order], types, ids=ids[order], min_instances=3, **CPU)
    assert_same(shuffled.describe(), ordered.describe())
    np.testing.assert_array_equal(shuffled.ids_, np.sort(ids))
    for spn in (shuffled, ordered):
        spn.unlearn([100, 103, 130])
    assert_same(shuffled.describe(), ordered.describe())
    torch.testing.assert_close(shuffled.log_likelihood(X), ordered.log_likelihood(X), rtol=0, atol=0)


def test_every_draw_is_the_documented_function_of_seed_and_path():
    """The RDC projections of the node at path p are ``draw_projections(make_generator(seed, 11, h(p)))`` rows
    of its scope and its Q-k-means seed is ``derive_seed(seed, 12, h(p))``, with h(p) the little-endian
    8-byte blake2b of the path (module docstring); SV children are named by their scope labels. (kills
    `_path_hash`, `_projections`, `_fit_qkmeans` and `_sv_child_path` mutants)"""
    import hashlib

    X = three_weak_variables()
    spn = learn_spn(X, ["gaussian"] * 3, seed=6, min_instances=3, rdc_threshold=0.7, rdc_features=3, **CPU)
    seen = {"rdc": 0, "qk": 0, "sv": 0}
    for node in spn._nodes():
        h = int.from_bytes(hashlib.blake2b(node.path.encode(), digest_size=8).digest(), "little")
        if node.rdc is not None:
            W = draw_projections(make_generator(6, 11, h), (0, 0, 0), 3)[torch.from_numpy(node.scope)]
            torch.testing.assert_close(node.rdc.projections, W, rtol=0, atol=0)
            seen["rdc"] += 1
        if node.qkmeans is not None:
            assert node.qkmeans.seed == derive_seed(6, 12, h)
            assert node.qkmeans.n_iter == 10 and node.qkmeans.eps_scale == 4.0 and node.qkmeans.exact_distances
            seen["qk"] += 1
        if node.op == "split_variables":
            for child in node.children:
                label = spn_module._scope_label(child.scope.tolist())
                assert child.path == f"{node.path}/v{label}"
                seen["sv"] += 1
    assert min(seen.values()) > 0


def test_scope_labels_compress_runs():
    """``_scope_label``: runs of consecutive variables as ``a-b``, others alone, comma-separated. (kills
    `_scope_label` 6, 9, 13-15, 18-28)"""
    label = spn_module._scope_label
    assert label([0, 1, 2, 3, 7]) == "0-3,7"
    assert label([5]) == "5"
    assert label([0, 2, 4]) == "0,2,4"
    assert label([1, 2]) == "1-2"
    assert label([0, 1, 3, 4, 5, 9, 11, 12]) == "0-1,3-5,9,11-12"
    assert label([]) == ""


def test_a_stateless_spn_refuses_everything_that_needs_the_state_by_its_whole_message():
    """removal_enabled=False: unlearn, describe, random_state_ and ids_ are refused whole; inference works.
    (kills `SPN._check_state` 2-8 and `SPN.unlearn` 3, 6, 7, 8)"""
    X, types = mixed_columns()
    bare = learn_spn(X, types, removal_enabled=False, min_instances=10, **CPU)
    state = "this SPN was learned with removal_enabled=False and keeps no removal state; "
    with refused(state + "learn it with removal_enabled=True (the default) to unlearn rows"):
        bare.unlearn([0])
    for read in (lambda: bare.describe(), lambda: bare.random_state_, lambda: bare.ids_):
        with refused(state + "learn it with removal_enabled=True (the default)"):
            read()
    assert bare.n_samples_ == 30 and bare._X is None and all(n.rows is None for n in bare._nodes())
    full = learn_spn(X, types, min_instances=10, **CPU)
    torch.testing.assert_close(bare.log_likelihood(X), full.log_likelihood(X), rtol=0, atol=0)


def test_replayed_projections_must_fit_the_node_and_are_copied():
    """A replay's projections with fewer variables than the node's scope are refused when that node is learned
    (root named ``/``); accepted ones are copied: changing the caller's tensor afterwards changes nothing.
    (`SPN._projections`)"""
    X, types = mixed_columns()
    spn = learn_spn(X, types, min_instances=10, **CPU)
    state = spn.random_state_
    W = state["nodes"][""]["rdc_projections"]
    narrow = {"seed": 0, "nodes": {**state["nodes"], "": {**state["nodes"][""], "rdc_projections": W[:2]}}}
    with refused(
        "replay projections of node / have shape (2, 5, 10), which does not fit its 3 variables; replay the "
        "state of an SPN learned with the same parameters on these rows"
    ):
        learn_spn(X, types, replay=narrow, **spn.learn_params_, **CPU)
    mine = W.clone()
    replay = {"seed": 0, "nodes": {**state["nodes"], "": {**state["nodes"][""], "rdc_projections": mine}}}
    replayed = learn_spn(X, types, replay=replay, **spn.learn_params_, **CPU)
    mine.zero_()
    torch.testing.assert_close(replayed.random_state_["nodes"][""]["rdc_projections"], W, rtol=0, atol=0)


def test_inputs_of_other_dtypes_give_the_float64_model():
    """float32 and integer rows, float32 numpy replay projections and float32 queries give exactly what their
    float64 values give. (`_as_matrix`, `_check_replay` conversions)"""
    X, types = mixed_columns()
    X32 = X.astype(np.float32)
    a = learn_spn(X32, types, min_instances=10, **CPU)
    b = learn_spn(X32.astype(np.float64), types, min_instances=10, **CPU)
    assert_same(a.describe(), b.describe())
    torch.testing.assert_close(a.log_likelihood(X32), b.log_likelihood(X32.astype(np.float64)), rtol=0, atol=0)
    assert a.log_likelihood(X32).dtype == torch.float64
    ints = np.round(X * 3).astype(np.int64)
    ints[:, 2] = X[:, 2]
    assert_same(learn_spn(ints, types, **CPU).describe(), learn_spn(ints.astype(float), types, **CPU).describe())
    state = b.random_state_
    W32 = state["nodes"][""]["rdc_projections"].numpy().astype(np.float32)
    replay = {"seed": 0, "nodes": {**state["nodes"], "": {**state["nodes"][""], "rdc_projections": W32}}}
    c = learn_spn(X, types, replay=replay, **b.learn_params_, **CPU)
    W = c.random_state_["nodes"][""]["rdc_projections"]
    assert W.dtype == torch.float64
    torch.testing.assert_close(W, torch.from_numpy(W32.astype(np.float64)), rtol=0, atol=0)


def test_learn_options_reach_the_model():
    """Types come back as a tuple, inferred domains are max code + 1, user Q-k-means options override the
    default eps_scale and reach every node's model. (`_check_types`, `_resolve_categories`,
    `_check_qkmeans_options`)"""
    X, types = mixed_columns()
    spn = learn_spn(X, types, qkmeans={"eps_scale": 2.0, "n_iter": 3}, min_instances=10, **CPU)
    assert spn.types_ == ("gaussian", "gaussian", "categorical") and spn.n_categories_ == (0, 0, 4)
    assert spn.params_.qkmeans == {"eps_scale": 2.0, "n_iter": 3}
    models = [n.qkmeans for n in spn._nodes() if n.qkmeans is not None]
    assert models and all(m.eps_scale == 2.0 and m.n_iter == 3 for m in models)
    spn = learn_spn(X, tuple(types), min_instances=10, **CPU)
    assert spn.params_.qkmeans == {"eps_scale": 4.0}


@pytest.mark.parametrize("n_removed", [32, 33])
def test_ecdf_counts_follow_up_to_32_removed_rows(n_removed):
    """Up to 32 rows removed from a node, its Gaussian ECDF counts are updated from the stored ones, so the
    first-order reference certifies the root's component (components_taylor); 33 rows make the counts be
    recomputed, and the first-order bound, which needs them, gives way to the direct bound
    (components_bounded). Either way the counts stored are those of the remaining rows. (`_updated_counts`)"""
    rng = np.random.default_rng(0)
    a = rng.normal(size=80) + 4.0 * (np.arange(80) % 2)
    X = np.column_stack([a, a + 0.1 * rng.normal(size=80)])
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=40, **CPU)
    spn.unlearn([3])
    spn.unlearn(list(range(10, 10 + n_removed)))
    report = spn.last_unlearning_
    taylor = n_removed <= 32
    assert (report["components_taylor"], report["components_bounded"]) == ((1, 0) if taylor else (0, 1))
    root = spn.root
    rows = X[root.rows]
    ecdf = (rows[None, :, :] <= rows[:, None, :]).sum(1)  # (n, 2): rows at or below each row's value
    np.testing.assert_array_equal(root.rdc.gauss_counts.numpy(), ecdf)


def test_learn_spn_defaults_are_the_documented_ones():
    """Without options: seed 0, t = 100, SPFlow's RDC threshold 0.3 with 10 features at scale 1/6, alpha 1,
    min_std 1e-3, relearn "replay", removal enabled, declared domains inferred. (learn_spn's defaults)"""
    X, types = mixed_columns()
    spn = learn_spn(X, types, **CPU)
    assert spn.learn_params_ == {
        "seed": 0, "min_instances": 100, "rdc_threshold": 0.3, "rdc_features": 10, "rdc_scale": 1.0 / 6.0,
        "alpha": 1.0, "min_std": 1e-3, "n_categories": [None, None, 4], "qkmeans": {"eps_scale": 4.0},
        "relearn": "replay",
    }
    assert spn.removal_enabled is True and spn.device == torch.device("cpu")
    assert learn_spn(X, types).device == spn_module.check_device("auto")


@pytest.mark.parametrize("n_removed", [5, 33])
def test_the_device_storage_path_gives_the_host_paths_model(monkeypatch: pytest.MonkeyPatch, n_removed):
    """On a GPU the data has no numpy view (``_X_host`` is None) and rows are gathered, erased and their ECDF
    counts updated with torch ops on the device; those ops run on the CPU too. With ``_X_host`` forced to None
    the same learning and removals give the host path's model exactly: the same tree, report, stored data and
    ECDF counts (the remaining rows' counts, by brute force), and log-likelihoods. (the device branches of
    `_gather`, `_erase`, `_gather_host`, `_Conditions._updated_counts`, otherwise CUDA-only)"""
    rng = np.random.default_rng(1)
    a = rng.normal(size=90) + 4.0 * (np.arange(90) % 2)
    X = np.column_stack([a, a + 0.1 * rng.normal(size=90), rng.normal(size=90)])
    types = ["gaussian"] * 3
    removals = ([3], list(range(10, 10 + n_removed)))

    def run() -> tuple[SPN, list[dict]]:
        spn = learn_spn(X, types, min_instances=40, **CPU)
        reports = []
        for ids in removals:
            spn.unlearn(ids)
            reports.append(dict(spn.last_unlearning_))
        return spn, reports

    host, host_reports = run()
    with monkeypatch.context() as m:
        m.setattr(SPN, "_X_host", property(lambda self: None))
        dev, dev_reports = run()
        assert dev._gather_host(np.array([0, 2]), np.array([1])).shape == (2, 1)
    assert dev_reports == host_reports
    assert_same(host.describe(), dev.describe())
    np.testing.assert_array_equal(dev._X.numpy(), host._X.numpy())
    gone = sorted({3, *removals[1]})
    assert not dev._X.numpy()[gone].any()  # erased rows hold zeros
    kept = np.setdiff1d(np.arange(90), gone)
    np.testing.assert_array_equal(dev._X.numpy()[kept], X[kept])
    rows = X[dev.root.rows]
    gauss = dev.root.rdc.feature_map.gauss
    ecdf = (rows[None, :, gauss] <= rows[:, None, gauss]).sum(1)
    np.testing.assert_array_equal(dev.root.rdc.gauss_counts.numpy(), ecdf)
    np.testing.assert_allclose(dev.log_likelihood(X).numpy(), host.log_likelihood(X).numpy(), rtol=1e-12)


def test_first_order_bounds_only_for_rows_inside_the_reference():
    """``_taylor_bounds`` bounds a node's rows through the reference's positions of them, and only when every
    row is one of the reference's: a row past the reference's last (or between two of its rows) gives no bound
    instead of an index error or another row's values (kills ``_taylor_bounds`` 16: the clip at ``size + 1``)."""
    calls = []
    taylor = SimpleNamespace(rows=np.array([1, 3, 5]), bounds=lambda kept, counts: calls.append(kept.tolist()) or 0.5)
    fmap = SimpleNamespace(gauss=np.array([], dtype=np.int64))
    node = lambda rows: SimpleNamespace(gained=False, n=len(rows), rows=np.array(rows))
    taylor_bounds = spn_module._Conditions._taylor_bounds
    assert taylor_bounds(node([1, 5]), taylor, None, fmap) == 0.5 and calls == [[0, 2]]
    assert taylor_bounds(node([3, 9]), taylor, None, fmap) is None
    assert taylor_bounds(node([2, 3]), taylor, None, fmap) is None
    assert calls == [[0, 2]]


@pytest.mark.parametrize("request_", [[20], [20, 21], [20, 21, 22]])
def test_a_kept_partition_hands_each_child_the_mask_of_its_remaining_rows(monkeypatch: pytest.MonkeyPatch, request_):
    """Alg. 6 with an unchanged partition: the child without removed rows is kept as it is (not revisited), the
    child that held them is updated with the mask of its rows that remain (one removed row compared directly,
    several searched), so it never searches its rows again. (kills ``_update_split_data`` 6, 20, 23, 24, 31, 36)"""
    rng = np.random.default_rng(6)
    a = rng.normal(size=20)
    X = np.vstack([np.column_stack([a, a + 0.3 * rng.normal(size=20)]), 10 + 1e-3 * rng.normal(size=(6, 2))])
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=8, **CPU)
    small, big = spn.root.children
    before = small.rows.copy()
    calls = []
    update = SPN._update

    def spy(self, node, rows, kept=None):
        calls.append((node.path, None if kept is None else np.asarray(kept).copy()))
        return update(self, node, rows, kept)

    monkeypatch.setattr(SPN, "_update", spy)
    spn.unlearn(request_)
    assert spn.last_unlearning_["partitions_changed"] == 0
    child_calls = [(path, kept) for path, kept in calls if path == small.path]
    assert [path for path, _ in calls if path == big.path] == [] and spn.root.children[1] is big
    assert len(child_calls) == 1 and child_calls[0][1] is not None
    np.testing.assert_array_equal(child_calls[0][1], ~np.isin(before, request_))


def test_the_clusterings_run_on_the_spns_device_not_the_machines_default(monkeypatch: pytest.MonkeyPatch):
    """Each SplitData node's Q-k-means is built on the SPN's own device: on a machine where ``"auto"`` would
    pick another device (a GPU; ``meta`` stands in here), a CPU SPN still clusters on the CPU. (kills
    ``_fit_qkmeans`` 5, 9)"""
    import duck.deletion._kmeans_base as kmeans_base

    real = kmeans_base.check_device
    monkeypatch.setattr(kmeans_base, "check_device",
                        lambda device, name="device": torch.device("meta") if device in (None, "auto")
                        else real(device, name))
    rng = np.random.default_rng(6)
    a = rng.normal(size=20)
    X = np.vstack([np.column_stack([a, a + 0.3 * rng.normal(size=20)]), 10 + 1e-3 * rng.normal(size=(6, 2))])
    spn = learn_spn(X, ["gaussian"] * 2, min_instances=8, **CPU)
    assert spn.root.qkmeans.device == torch.device("cpu")


def test_a_replay_without_a_nodes_draws_falls_back_to_the_seeds_draws():
    """A replay supplies draws per node path; a node it does not list draws from (seed, path) as without a
    replay: a replay with no nodes, or with only the root's draws, learns the same SPN as none. (kills
    ``_projections`` 8, 10 and ``_fit_qkmeans`` 28, 30: a missing path must not be an error)"""
    rng = np.random.default_rng(6)
    a = rng.normal(size=20)
    X = np.vstack([np.column_stack([a, a + 0.3 * rng.normal(size=20)]), 10 + 1e-3 * rng.normal(size=(6, 2))])
    types = ["gaussian"] * 2
    plain = learn_spn(X, types, min_instances=8, **CPU)
    state = plain.random_state_
    assert len(state["nodes"]) > 1  # draws at the root and below it
    root = {"": state["nodes"][""]}  # the root's path is ""
    for nodes in ({}, root):
        replayed = learn_spn(X, types, min_instances=8, replay={"seed": state["seed"], "nodes": nodes}, **CPU)
        assert_same(replayed.describe(), plain.describe())


def test_a_new_spn_has_no_unlearning_report_and_checks_codes_on_their_device():
    """``last_unlearning_`` is None until the first request (kills ``SPN.__init__`` 28); the categorical codes
    are checked against their domain on the data's own device whatever torch's default (``meta`` stands in for
    a CUDA default; kills ``_check_codes`` 10, 13)."""
    X, types = mixed_columns()
    assert learn_spn(X, types, **CPU).last_unlearning_ is None
    Xt = torch.as_tensor(X, dtype=torch.float64)
    with torch.device("meta"):
        spn_module._check_codes(Xt, [0, 0, 4], "X")
        with refused("X column 2 is categorical with 3 categories (codes 0..2) but holds [3.0]; encode categories "
                     "as integers 0..K-1 and declare K with n_categories (a value outside the declared domain has "
                     "no probability mass)"):
            spn_module._check_codes(Xt, [0, 0, 3], "X")
