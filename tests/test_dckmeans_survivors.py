"""DC-k-means (duck/deletion/dckmeans.py): documented defaults, exact refusals and their boundaries (constructor,
leaf counts, replay states, too few rows, data scale), the auto width's exact integer floor, the tree against a
reference construction from the documented generators, mass conservation, empty clusters, caching, copies."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from refusals import refused

from duck.deletion import DCKMeans
from duck.deletion._kmeans_ops import kmeans_plusplus, lloyd, make_generator
from duck.deletion.dckmeans import auto_width

F64 = dict(device="cpu", dtype=torch.float64)


def all_nodes_equal(a: DCKMeans, b: DCKMeans) -> bool:
    return all(
        torch.equal(ca, cb) and torch.equal(wa, wb)
        for level_a, level_b in zip(a.node_outputs_, b.node_outputs_, strict=True)
        for (ca, wa), (cb, wb) in zip(level_a, level_b, strict=True)
    )


def leaf_sizes(model: DCKMeans) -> np.ndarray:
    """Rows of every leaf among the current rows, from the public ``random_state_``."""
    return np.bincount(model.random_state_["leaves"].numpy(), minlength=model.n_leaves_)


# ------------------------------------------------------------------------------------------------ constructor
def test_defaults_are_the_documented_ones():
    """k = 8, T = 10 (the paper), width auto, height 1, floor 20, weighted, default greedy trials, seed 0."""
    model = DCKMeans()
    assert (model.n_clusters, model.n_iter, model.width, model.height) == (8, 10, "auto", 1)
    assert (model.min_leaf_per_cluster, model.weighted, model.n_local_trials, model.seed) == (20, True, None, 0)
    assert model.dtype == torch.float32
    assert DCKMeans(3, n_local_trials=1).n_local_trials == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(n_iter=0), "n_iter=0 must be an integer >= 1"),
        (dict(width=0), "width must be 'auto' or an integer >= 1, got 0"),
        (dict(width="big"), "width must be 'auto' or an integer >= 1, got 'big'"),
        (dict(width=2.0), "width must be 'auto' or an integer >= 1, got 2.0"),
        (dict(height=0), "height=0 must be an integer >= 1"),
        (
            dict(height=63),
            "height=63 is too deep: at most 62 levels (a tree of width >= 2 and height h has 2**h leaves, more than "
            "there are rows); the paper uses height=1",
        ),
        (dict(min_leaf_per_cluster=0), "min_leaf_per_cluster=0 must be an integer >= 1"),
        (dict(weighted="yes"), "weighted must be True or False, got 'yes'"),
        (dict(n_local_trials=0), "n_local_trials=0 must be an integer >= 1"),
        (dict(device="bogus"), "device='bogus' is not a device; use cpu, cuda, cuda:N or auto"),
    ],
)
def test_constructor_refusals_have_exact_messages(kwargs, message):
    with refused(message):
        DCKMeans(3, **kwargs)


def test_constructor_accepts_the_boundaries():
    """The smallest accepted values and the deepest accepted tree (height 62) are kept as given."""
    model = DCKMeans(1, n_iter=1, width=1, height=62, min_leaf_per_cluster=1, weighted=False, n_local_trials=1)
    assert (model.n_clusters, model.n_iter, model.width, model.height) == (1, 1, 1, 62)
    assert (model.min_leaf_per_cluster, model.weighted, model.n_local_trials) == (1, False, 1)


# ------------------------------------------------------------------------------------------------ auto width
def test_auto_width_is_the_exact_integer_root_despite_rounding():
    """``w = floor((n / k) ** (1 / (h + 1)))`` exactly, where floating point rounds the root down (1000 ** (1/3)
    is 9.999...) or up ((2**60 - 1/3) rounds to 2**60), and for huge n."""
    assert 1000 ** (1 / 3) < 10  # the float root undershoots: the guard must climb to 10
    assert auto_width(1000, 1, 2) == 10  # 10**3 * 1 <= 1000 < 11**3
    assert auto_width(2 * 1000, 2, 2) == 10
    assert int(((3 * 2**60 - 1) / 3) ** 0.5) == 2**30  # the float root overshoots: the guard must step down
    assert auto_width(3 * 2**60 - 1, 3, 1) == 2**30 - 1
    assert auto_width(3 * 2**60, 3, 1) == 2**30
    assert auto_width(10**30, 1, 1) == 10**15


def test_auto_width_boundaries_are_inclusive():
    """``w**(h+1) k <= n`` and ``w**h k m <= n`` are both accepted with equality."""
    assert auto_width(8, 2, 1) == 2  # 2**2 * 2 == 8
    assert auto_width(7, 2, 1) == 1
    assert auto_width(54, 2, 2) == 3  # 3**3 * 2 == 54
    assert auto_width(53, 2, 2) == 2
    assert auto_width(120, 3, 1, 20) == 2  # 2 * 3 * 20 == 120 (6 without the floor)
    assert auto_width(119, 3, 1, 20) == 1
    assert auto_width(120, 3, 1) == 6


# ---------------------------------------------------------------------------------------------- leaf counts
def test_fresh_fit_leaf_count_boundary_and_messages():
    """A fresh fit accepts as many leaves as rows and refuses one more, naming the rows as the cap."""
    X = np.random.default_rng(0).normal(size=(9, 2))
    assert DCKMeans(2, width=7, seed=0, **F64).fit(X[:7]).n_leaves_ == 7
    assert DCKMeans(2, width=3, height=2, seed=0, **F64).fit(X).n_leaves_ == 9
    with refused(
        "width=8 with height=1 gives 8 leaves, more than the 7 rows of X (more leaves are always empty); "
        "use a smaller width or height (or width='auto')"
    ):
        DCKMeans(2, width=8, **F64).fit(X[:7])
    with refused(
        "width=3 with height=2 gives 9 leaves, more than the 8 rows of X (more leaves are always empty); "
        "use a smaller width or height (or width='auto')"
    ):
        DCKMeans(2, width=3, height=2, **F64).fit(X[:8])


@pytest.mark.parametrize(
    ("width", "height", "count"),
    [
        (10**15 - 1, 1, "999999999999999"),  # exact below 10**15
        (10**15, 1, "about 10^15"),  # order of magnitude from 10**15 on
        (10**8, 2, "about 10^16"),
        (123_456_789, 2, "about 10^16"),  # 15241578750190521
    ],
    ids=["just-below-10^15", "10^15", "10^16", "1.5e16"],
)
def test_huge_leaf_counts_are_written_as_an_order_of_magnitude(width, height, count):
    X = np.random.default_rng(0).normal(size=(7, 2))
    with refused(
        f"width={width} with height={height} gives {count} leaves, more than the 7 rows of X (more leaves are "
        "always empty); use a smaller width or height (or width='auto')"
    ):
        DCKMeans(2, width=width, height=height, **F64).fit(X)


def test_replay_may_keep_more_leaves_than_rows_up_to_2_to_the_20():
    """A replayed model that lost rows keeps its 8 leaves for 5 rows; a replayed width beyond 2**20 leaves is
    refused naming ``max(n, 2**20)``."""
    X = np.random.default_rng(1).normal(size=(40, 2))
    model = DCKMeans(2, width=8, seed=0, **F64).fit(X)
    model.delete(np.arange(35))
    fresh = DCKMeans(2, width=8, **F64).fit(X[35:], ids=np.arange(35, 40), replay=model.random_state_)
    assert fresh.n_leaves_ == 8 and all_nodes_equal(model, fresh)
    auto = DCKMeans(2, seed=0, **F64).fit(X)
    state = {**auto.random_state_, "width": 2**20 + 1}
    with refused(
        "replay['width']=1048577 with height=1 gives 1048577 leaves, more than max(n, 2**20) = 1048576; "
        "use a smaller width or height (or width='auto')"
    ):
        DCKMeans(2, **F64).fit(X, replay=state)
    state = {**auto.random_state_, "width": 10**8}
    with refused(
        "replay['width']=100000000 with height=2 gives about 10^16 leaves, more than max(n, 2**20) = 1048576; "
        "use a smaller width or height (or width='auto')"
    ):
        DCKMeans(2, height=2, **F64).fit(X, replay=state)


# ------------------------------------------------------------------------------------------------ replay
@pytest.fixture(scope="module")
def fitted():
    X = np.random.default_rng(2).normal(size=(40, 2))
    model = DCKMeans(2, width=4, seed=0, **F64).fit(X)
    return X, model, model.random_state_


def test_replay_structure_refusals(fitted):
    X, _, state = fitted
    message = "replay must be a DCKMeans.random_state_ dict (keys width, seed, leaf_ids, leaves)"
    for replay in ([1, 2], {"width": 4, "seed": 0, "leaf_ids": state["leaf_ids"]}, {"width": 4}):
        with refused(message):
            DCKMeans(2, width=4, **F64).fit(X, replay=replay)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("width", "x", "replay['width']='x' must be an integer >= 1"),
        ("width", 0, "replay['width']=0 must be an integer >= 1"),
        ("width", 3, "replay width 3 differs from this model's width=4"),
        ("seed", "x", "replay['seed']='x' must be an integer >= 0"),
        ("seed", -1, "replay['seed']=-1 must be an integer >= 0"),
        ("leaf_ids", np.zeros((1, 40), dtype=np.int64), "replay['leaf_ids'] has shape (1, 40); give a flat (1-D) "
         "sequence of integer ids"),
        ("leaves", np.zeros((1, 40), dtype=np.int64), "replay['leaves'] has shape (1, 40); give a flat (1-D) "
         "sequence of integer ids"),
        ("leaves", np.zeros(5, dtype=np.int64), "replay['leaves'] has 5 entries but replay['leaf_ids'] has 40; "
         "replay pairs one leaf with every id"),
        ("leaf_ids", np.zeros(40, dtype=np.int64), "replay['leaf_ids'] contains duplicates; replay gives each id one leaf"),
    ],
)
def test_replay_field_refusals(fitted, key, value, message):
    X, _, state = fitted
    with refused(message):
        DCKMeans(2, width=4, **F64).fit(X, replay={**state, key: value})


def test_replay_leaves_must_lie_in_range_both_ends(fitted):
    """Leaves in [0, w**h): 0 and 3 are accepted for 4 leaves, -1 and 4 are refused (each alone)."""
    X, _, state = fitted
    leaves = state["leaves"].numpy()
    for position, leaf, ok in [(0, 0, True), (0, 3, True), (0, -1, False), (1, 4, False)]:
        bad = leaves.copy()
        bad[position] = leaf
        replay = {**state, "leaves": bad}
        if ok:
            assert DCKMeans(2, width=4, **F64).fit(X, replay=replay).n_leaves_ == 4
        else:
            with refused("replay leaves must lie in [0, 4) for width 4"):
                DCKMeans(2, width=4, **F64).fit(X, replay=replay)


def test_replay_names_the_first_ten_ids_without_a_leaf(fitted):
    X, _, state = fitted
    keep = state["leaf_ids"].numpy() >= 12  # ids 0..11 lose their leaf
    replay = {**state, "leaf_ids": state["leaf_ids"][keep], "leaves": state["leaves"][keep]}
    with refused("ids [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] have no leaf in replay; replay needs the leaf of every row"):
        DCKMeans(2, width=4, **F64).fit(X, replay=replay)
    ids = np.arange(40)
    ids[-1] = 99  # beyond every stored id
    with refused("ids [99] have no leaf in replay; replay needs the leaf of every row"):
        DCKMeans(2, width=4, **F64).fit(X, ids=ids, replay=state)
    empty = {**state, "leaf_ids": [], "leaves": []}
    with refused("ids [0, 1, 2, 3, 4, 5, 6, 7, 8, 9] have no leaf in replay; replay needs the leaf of every row"):
        DCKMeans(2, width=4, **F64).fit(X, replay=empty)
    single = {"width": 1, "seed": 0, "leaf_ids": [5], "leaves": [0]}
    with refused("ids [9] have no leaf in replay; replay needs the leaf of every row"):
        DCKMeans(1, **F64).fit(X[:2], ids=[5, 9], replay=single)
    with refused("ids [3] have no leaf in replay; replay needs the leaf of every row"):
        DCKMeans(1, **F64).fit(X[:2], ids=[3, 5], replay=single)
    assert DCKMeans(1, **F64).fit(X[:1], ids=[5], replay=single).n_leaves_ == 1


# --------------------------------------------------------------------------------------------- fit input
def test_fit_needs_at_least_k_rows():
    X = np.random.default_rng(3).normal(size=(3, 2))
    with refused("X has 2 rows but n_clusters=3; pass at least n_clusters rows or lower n_clusters"):
        DCKMeans(3, **F64).fit(X[:2])
    assert DCKMeans(3, **F64).fit(X).cluster_centers_.shape == (3, 2)


def test_fit_checks_squared_distances_summed_over_all_rows():
    """Training data is checked for sums of squared distances over its n rows (each alone would fit)."""
    X = np.full((100, 1), 1e18)
    X[::2] = 9e17
    with refused(
        "X values are too large for float32 (largest squared row norm 1e+36: squared distances summed over 100 rows "
        "can reach 4e+38, above the float32 maximum 3.4e+38); rescale X (e.g. divide it by its largest absolute "
        "value) or use dtype=torch.float64"
    ):
        DCKMeans(2, device="cpu").fit(X)


def test_fit_copies_the_callers_array():
    """Deleting rows erases the model's own copy, never the caller's array (float64 input, float64 model)."""
    X = np.random.default_rng(4).normal(size=(30, 2))
    before = X.copy()
    t = torch.from_numpy(X)
    model = DCKMeans(2, width=2, seed=0, **F64).fit(t)
    model.delete([0, 1, 2])
    np.testing.assert_array_equal(X, before)


# ------------------------------------------------------------------------------------------------ the tree
def reference_tree(X, ids, k, width, height, seed, n_iter, n_local_trials, leaf_seed=None):
    """The documented construction: leaf draws from generator (seed, 2) in id order, node (level, index) solved
    by k-means++ + Lloyd (tol 0) with generator (seed, 3, level, index), weighted merge, empty clusters dropped
    below the root, at most k points kept as they are. ``leaf_seed``: the leaves' seed when it differs (a replay)."""
    X = torch.as_tensor(X, dtype=torch.float64)
    n_leaves = width**height
    leaf_generator = make_generator(seed if leaf_seed is None else leaf_seed, 2)
    draws = torch.randint(n_leaves, (len(ids),), generator=leaf_generator).numpy()
    leaf_of = np.empty(len(ids), dtype=np.int64)
    leaf_of[np.argsort(ids)] = draws

    def node(level, index, points, weights):
        m = points.shape[0]
        w = torch.ones(m, dtype=torch.float64) if weights is None else weights
        if m <= k:
            return points, w
        gen = make_generator(seed, 3, level, index)
        seeds = kmeans_plusplus(points, k, gen, weights=weights, n_local_trials=n_local_trials)
        result = lloyd(points, points[seeds], max_iter=n_iter, tol=0.0, weights=weights)
        masses = torch.zeros(k, dtype=torch.float64).index_add_(0, result.labels, w)
        keep = masses > 0 if level > 0 else masses >= 0
        return result.centers[keep], masses[keep]

    levels = [[] for _ in range(height + 1)]
    for i in range(n_leaves):
        rows = np.flatnonzero(leaf_of == i)
        rows = rows[np.argsort(ids[rows])]
        levels[height].append(node(height, i, X[torch.from_numpy(rows)], None))
    for level in range(height - 1, -1, -1):
        for i in range(width**level):
            children = levels[level + 1][i * width : (i + 1) * width]
            points = torch.cat([c for c, _ in children])
            levels[level].append(node(level, i, points, torch.cat([m for _, m in children])))
    return leaf_of, levels


@pytest.mark.parametrize(
    ("k", "width", "height", "seed", "n_iter", "n_local_trials"),
    [(3, 2, 1, 5, 10, None), (3, 4, 1, 7, 1, 1), (2, 2, 2, 11, 2, 1), (3, 3, 1, 0, 10, 2)],
)
def test_tree_equals_the_reference_construction(k, width, height, seed, n_iter, n_local_trials):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(150, 2))
    X[:50] += 1.5
    ids = rng.permutation(1000)[:150]
    model = DCKMeans(k, width=width, height=height, seed=seed, n_iter=n_iter, n_local_trials=n_local_trials, **F64)
    model.fit(X, ids=ids)
    leaf_of, levels = reference_tree(X, ids, k, width, height, seed, n_iter, n_local_trials)
    state = model.random_state_
    by_id = dict(zip(state["leaf_ids"].tolist(), state["leaves"].tolist(), strict=True))
    assert [by_id[i] for i in ids.tolist()] == leaf_of.tolist()
    outputs = model.node_outputs_
    assert len(outputs) == height + 1  # one list per level, root .. leaves
    for level in range(height + 1):
        assert len(outputs[level]) == width**level
        for (c, m), (rc, rm) in zip(outputs[level], levels[level], strict=True):
            assert torch.equal(c, rc) and torch.equal(m, rm), (level, c, rc)


def test_node_seed_comes_from_the_replayed_state():
    """A replay keeps the replayed leaves and solves every node with generators (replay['seed'], 3, level, index)."""
    X = np.random.default_rng(6).normal(size=(120, 2))
    model = DCKMeans(3, width=3, seed=1, n_iter=1, n_local_trials=1, **F64).fit(X)
    other = DCKMeans(3, width=3, n_iter=1, n_local_trials=1, **F64).fit(X, replay={**model.random_state_, "seed": 9})
    _, levels = reference_tree(X, np.arange(120), 3, 3, 1, 9, 1, 1, leaf_seed=1)
    assert other.random_state_["seed"] == 9
    for level in range(2):
        for (c, m), (rc, rm) in zip(other.node_outputs_[level], levels[level], strict=True):
            assert torch.equal(c, rc) and torch.equal(m, rm)


# ----------------------------------------------------------------------------------- masses, empty clusters
def check_masses(model: DCKMeans) -> None:
    """Every leaf's masses sum to its rows; every internal node's to its children's; the root's to n."""
    outputs = model.node_outputs_
    width = model.width_
    sizes = leaf_sizes(model)
    for i, (_, masses) in enumerate(outputs[-1]):
        assert float(masses.sum()) == sizes[i]
    for level in range(len(outputs) - 1):
        for i, (_, masses) in enumerate(outputs[level]):
            children = outputs[level + 1][i * width : (i + 1) * width]
            assert float(masses.sum()) == sum(float(m.sum()) for _, m in children)
    assert float(outputs[0][0][1].sum()) == model.n_samples_


def test_weighted_merge_conserves_mass_with_singleton_clusters_and_tiny_nodes():
    """A singleton cluster (an outlier) and a node with at most k points keep their masses up to the root."""
    rng = np.random.default_rng(7)
    X = np.vstack([rng.normal(size=(10, 2)), [[100.0, 100.0]]])
    one_leaf = DCKMeans(2, width=1, seed=0, **F64).fit(X)
    leaf_centers, leaf_masses = one_leaf.node_outputs_[1][0]
    assert sorted(leaf_masses.tolist()) == [1.0, 10.0]  # the outlier is its own cluster
    root_centers, root_masses = one_leaf.node_outputs_[0][0]
    assert torch.equal(root_centers, leaf_centers) and torch.equal(root_masses, leaf_masses)  # 2 points: kept as is
    check_masses(one_leaf)
    X = rng.normal(size=(60, 2))
    tree = DCKMeans(2, width=3, height=2, seed=3, **F64).fit(X)
    check_masses(tree)
    state = tree.random_state_
    sizes = leaf_sizes(tree)
    leaf = int(np.argmax(sizes))
    doomed = state["leaf_ids"].numpy()[state["leaves"].numpy() == leaf][1:]  # leave one row in the largest leaf
    tree.delete(doomed)
    assert leaf_sizes(tree)[leaf] == 1
    check_masses(tree)


def test_non_root_nodes_drop_empty_clusters_the_root_keeps_k():
    """Identical rows: k-means++ seeds coincide, one cluster stays empty. A leaf drops it (it carries no mass);
    the root keeps its k centroids, the empty one with mass 0."""
    X = np.tile([[1.0, 2.0]], (6, 1))
    one_leaf = DCKMeans(2, width=1, seed=0, **F64).fit(X)
    centers, masses = one_leaf.node_outputs_[1][0]
    assert centers.tolist() == [[1.0, 2.0]] and masses.tolist() == [6.0]
    X = np.tile([[1.0, 2.0]], (30, 1))
    model = DCKMeans(2, width=3, seed=0, **F64).fit(X)
    for (c, m), rows in zip(model.node_outputs_[1], leaf_sizes(model), strict=True):
        if rows > 2:  # k-means on identical rows: one cluster holds them all, the other is dropped
            assert c.tolist() == [[1.0, 2.0]] and m.tolist() == [float(rows)]
        else:  # at most k rows: every row is its own cluster
            assert c.tolist() == [[1.0, 2.0]] * rows and m.tolist() == [1.0] * rows
    root_centers, root_masses = model.node_outputs_[0][0]
    assert root_centers.tolist() == [[1.0, 2.0], [1.0, 2.0]]
    assert root_masses.tolist() == [30.0, 0.0]


# ------------------------------------------------------------------------------------ deletion, caching
def test_empty_deletion_changes_nothing():
    X = np.random.default_rng(8).normal(size=(40, 2))
    model = DCKMeans(2, width=4, seed=0, **F64).fit(X)
    before, fits = model.node_outputs_, model.n_node_fits_
    assert model.delete([]) is False
    assert model.n_node_fits_ == fits
    after = model.node_outputs_
    assert all(a is b for la, lb in zip(after, before, strict=True) for a, b in zip(la, lb, strict=True))


def test_labels_and_inertia_are_cached_until_a_deletion():
    """``labels_`` is computed once (the same tensor on every read) and recomputed after a deletion; both
    match a brute-force nearest-centroid assignment of the current rows."""
    X = np.random.default_rng(9).normal(size=(50, 2))
    model = DCKMeans(3, width=2, seed=0, **F64).fit(X)
    labels = model.labels_
    assert model.labels_ is labels
    model.delete([0, 1])
    after = model.labels_
    assert after is not labels and model.labels_ is after
    C = model.cluster_centers_.numpy()
    d2 = ((X[2:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(after.numpy(), d2.argmin(1))
    assert model.inertia_ == pytest.approx(d2.min(1).sum(), rel=1e-12)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tree_stays_on_the_device_and_conserves_mass():
    """On CUDA every node (tiny leaves included, weighted and unweighted) lives on the device, before and after
    a deletion, and the masses add up as on the CPU."""
    X = np.random.default_rng(10).normal(size=(60, 2))
    for weighted in (True, False):
        model = DCKMeans(2, width=6, weighted=weighted, seed=0, device="cuda", dtype=torch.float64).fit(X)
        state = model.random_state_
        leaf = int(np.argmax(leaf_sizes(model)))
        model.delete(state["leaf_ids"].numpy()[state["leaves"].numpy() == leaf][1:])  # one row left in that leaf
        for level in model.node_outputs_:
            assert all(c.is_cuda and m.is_cuda for c, m in level)
        if weighted:
            check_masses(model)
        assert model.labels_.is_cuda and model.labels_.shape == (model.n_samples_,)
