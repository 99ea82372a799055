"""DC-k-means: divide-and-conquer k-means on a w-ary tree, deletion recomputes one leaf-to-root path.

Ginart et al. (NeurIPS 2019), seeds/000 §4.2, Alg. 2; ALGORITHMS.md §6:

* A perfect w-ary tree of height h (``w**h`` leaves). Every row goes to a leaf drawn uniformly at random
  (stored by stable id).
* Every leaf runs k-means (k-means++ seeding + T Lloyd iterations) on its rows. Every internal node runs
  k-means on the centroids of its children, weighted by their cluster masses (*config*
  ``weighted=False``: unweighted, as the authors' prototype did). The root's centroids are the model.
* Delete ``x``: remove it from its leaf and recompute that leaf and each ancestor on its path; every other
  node is untouched.

Exactness statement (tested): after any sequence of deletions the model (every node) equals
``DCKMeans(same parameters).fit(X_remaining, ids=remaining_ids, replay=model.random_state_)``: the same leaf
assignment and the same per-node generators ``(seed, 3, level, index)``, which are independent of the data,
so a recomputed node is a fresh k-means of its new data. Leaves are drawn in stable-id order and a node's
rows are ordered by stable id, so the result does not depend on the order of the rows passed to ``fit``.

Heuristics (no tuning; reasoning in docs/kmeans.md):

* ``height = 1`` (the paper's experiments): deeper trees multiply the merge error and, with a per-node
  Python cost, are slower per deletion for any n this library targets.
* ``width = "auto"``: ``w = floor((n / k) ** (1 / (h + 1)))``. A deletion recomputes one leaf of about
  ``n / w**h`` rows and h internal nodes of about ``w k`` points; these are equal (so their sum, the deletion
  cost, is minimal) at ``w = (n / k)^(1/(h+1))``, i.e. ``sqrt(n / k)`` for h = 1: deletion costs
  ``O(T k d sqrt(n k))`` instead of ``O(T k d n)``. The width is resolved once, from the n of the first fit,
  and kept in ``random_state_`` (it reveals only the row count).
* Leaf-size floor (``min_leaf_per_cluster = 20``): the auto width is capped so that a leaf holds at least
  20 rows per cluster on average (``w**h <= n / (20 k)``). The paper (§4.2) calls w the knob between deletion
  speed and statistical quality; the floor is where quality breaks: a leaf's k-means estimates k centres from
  ``n / (w**h k)`` rows each, and with fewer than a few tens of rows per centre its k-means++ seeding misses or
  splits true clusters often enough that the weighted merge cannot repair it (wine, n = 178, k = 3: 7 leaves
  of ~8 rows per cluster give NMI 0.81 against k-means++'s 0.87; the floor's 2 leaves give 0.86). It binds only
  on small data (wine, digits); the Gaussian mixture (n = 100,000, k = 5) keeps ``sqrt(n / k)`` = 141.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from duck.deletion._kmeans_base import DeletableKMeansBase
from duck.deletion._kmeans_ops import assign, kmeans_plusplus, lloyd, make_generator, sq_norms
from duck.errors import DuckInputError
from duck.utils import check_positive_int, check_seed, int64_array

#: generator tags: leaf assignment (seed, 2); node (level, index): (seed, 3, level, index)
_LEAF_TAG, _NODE_TAG = 2, 3
#: deepest tree accepted: with width >= 2 a height-h tree has 2**h leaves, more than any data's rows beyond 62
_MAX_HEIGHT = 62
#: a replayed fit may keep more leaves than it has rows (the model it replays lost rows to deletions), up to
#: this many: every leaf is a node object and a node solve, so the count must stay feasible
_MAX_REPLAY_LEAVES = 2**20


def _count(value: int) -> str:
    """An exact count, or its order of magnitude when it is huge (for messages)."""
    return str(value) if value < 10**15 else f"about 10^{len(str(value)) - 1}"


def auto_width(n: int, k: int, height: int, min_leaf_per_cluster: int = 1) -> int:
    """``floor((n / k) ** (1 / (height + 1)))`` (equal leaf and internal-node problem sizes), lowered until a
    leaf holds at least ``min_leaf_per_cluster`` rows per cluster on average (``w**h k m <= n``); at least 1."""
    width = max(1, int((n / k) ** (1.0 / (height + 1))))
    while (width + 1) ** (height + 1) * k <= n:  # guard against floating-point undershoot
        width += 1
    while width > 1 and (width ** (height + 1) * k > n or width**height * k * min_leaf_per_cluster > n):
        width -= 1
    return width


class DCKMeans(DeletableKMeansBase):
    """Divide-and-conquer k-means (Ginart et al., NeurIPS 2019, Alg. 2) with exact path-recompute deletion.

    Args:
        n_clusters: k (every node solves for k centroids).
        n_iter: T, the number of Lloyd iterations at every node (paper: 10; a node stops early only when
            its labels stop changing).
        width: w, children per internal node, or "auto" (see the module docstring). A fit refuses more
            leaves (``w**h``) than rows (more than ``max(n, 2**20)`` for a replay).
        min_leaf_per_cluster: the auto width keeps at least this many rows per cluster in a leaf on average
            (default 20; 1 disables the floor). Ignored for a fixed ``width``.
        height: h, number of levels below the root (1 = root + w leaves), at most 62.
        weighted: merge children's centroids weighted by their cluster masses (True) or unweighted.
        n_local_trials: greedy k-means++ candidates (None -> ``2 + floor(ln k)``, 1 -> plain k-means++).
        seed, device, dtype: randomness root, "auto"/"cpu"/"cuda", float32/float64.

    Attributes: ``cluster_centers_`` (the root's centroids), ``labels_`` and ``inertia_`` (computed on
    demand for the current rows), ``width_``, ``n_leaves_``, ``random_state_``, ``n_retrains_`` (always 0: no
    deletion needs a full retrain), ``n_node_fits_`` (node k-means solved since ``fit``, fit included).
    """

    _name = "DCKMeans"

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        n_iter: int = 10,
        width: int | str = "auto",
        height: int = 1,
        min_leaf_per_cluster: int = 20,
        weighted: bool = True,
        n_local_trials: int | None = None,
        seed: int = 0,
        device: str | torch.device | None = "auto",
        dtype: Any = torch.float32,
    ) -> None:
        super().__init__(n_clusters, seed, device, dtype, n_local_trials)
        self.n_iter = check_positive_int(n_iter, "n_iter")
        if isinstance(width, str) and width == "auto":
            self.width: int | str = width
        else:
            try:
                self.width = check_positive_int(width, "width")
            except DuckInputError:
                raise DuckInputError(f"width must be 'auto' or an integer >= 1, got {width!r}") from None
        self.height = check_positive_int(height, "height")
        if self.height > _MAX_HEIGHT:
            raise DuckInputError(
                f"height={height!r} is too deep: at most {_MAX_HEIGHT} levels (a tree of width >= 2 and height h "
                "has 2**h leaves, more than there are rows); the paper uses height=1"
            )
        self.min_leaf_per_cluster = check_positive_int(min_leaf_per_cluster, "min_leaf_per_cluster")
        if not isinstance(weighted, bool):
            raise DuckInputError(f"weighted must be True or False, got {weighted!r}")
        self.weighted = weighted

    # ------------------------------------------------------------------------------------------------ fit
    def fit(self, X: Any, *, ids: Any = None, replay: dict[str, Any] | None = None) -> DCKMeans:
        """Build the tree on ``X`` (n, d) with stable row ids ``ids`` (default ``0..n-1``).

        ``replay``: the ``random_state_`` of a DCKMeans with the same parameters; the fit then reuses its
        width, node-seed root and the leaf of every id (all ids must be in it) instead of drawing them.
        Bad input raises a ``DuckInputError`` and leaves a fitted model as it was.
        """
        Xt = self._as_data(X, min_rows=self.n_clusters, copy=True, summed=True)
        row_ids = self._as_fit_ids(ids, Xt.shape[0])
        n = Xt.shape[0]
        if replay is None:
            width = (auto_width(n, self.n_clusters, self.height, self.min_leaf_per_cluster)
                     if self.width == "auto" else self.width)
            n_leaves = self._check_leaf_count(width, n, replayed=False)
            node_seed = self.seed
            draws = torch.randint(n_leaves, (n,), generator=make_generator(self.seed, _LEAF_TAG), device="cpu").numpy()
            leaves = np.empty_like(draws)
            leaves[np.argsort(row_ids, kind="stable")] = draws  # the i-th smallest id takes draw i: any row order
        else:
            width, node_seed, leaves = self._parse_replay(replay, row_ids)
        with self._fit_transaction():
            self._build(Xt, row_ids, width, node_seed, leaves)
        return self

    def _build(self, X: torch.Tensor, row_ids: np.ndarray, width: int, node_seed: int, leaves: np.ndarray) -> None:
        """Store the rows with their leaves and solve every node, leaves first."""
        self._store_rows(X, row_ids)
        self._width, self._node_seed = width, node_seed
        self._n_leaves = width**self.height
        self._leaf_of_row = leaves.astype(np.int64)  # (N,) leaf of every stored row
        order = np.lexsort((row_ids, self._leaf_of_row))  # rows grouped by leaf, by id inside a leaf
        bounds = np.searchsorted(self._leaf_of_row[order], np.arange(self._n_leaves + 1))
        self._leaf_rows = [order[bounds[i] : bounds[i + 1]] for i in range(self._n_leaves)]
        # node outputs per level: level h = leaves ... level 0 = root; each (centers (c, d), masses (c,))
        self._nodes: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(self.height + 1)]
        self.n_retrains_ = 0
        self._n_node_fits = 0
        self._nodes[self.height] = [self._solve_leaf(i) for i in range(self._n_leaves)]
        for level in range(self.height - 1, -1, -1):
            self._nodes[level] = [self._solve_internal(level, i) for i in range(width**level)]
        self._cache: dict[str, Any] = {}

    def _check_leaf_count(self, width: int, n: int, replayed: bool) -> int:
        """``width**height`` if feasible for ``n`` rows, else a ``DuckInputError``.

        A fresh fit puts every row in a uniformly drawn leaf, so leaves beyond n are necessarily empty: at most
        n leaves. A replayed fit may hold fewer rows than leaves (the replayed model lost rows to deletions) but
        never more than ``max(n, 2**20)`` leaves (each is a node to store and solve).
        """
        n_leaves = width**self.height
        limit = max(n, _MAX_REPLAY_LEAVES) if replayed else n
        if n_leaves > limit:
            source = "replay['width']" if replayed else "width"
            cap = f"max(n, 2**20) = {limit}" if replayed else f"the {n} rows of X (more leaves are always empty)"
            raise DuckInputError(
                f"{source}={width} with height={self.height} gives {_count(n_leaves)} leaves, more than {cap}; "
                "use a smaller width or height (or width='auto')"
            )
        return n_leaves

    def _parse_replay(self, replay: dict[str, Any], row_ids: np.ndarray) -> tuple[int, int, np.ndarray]:
        """Validate a ``random_state_`` whole (types, shapes, ranges) and return (width, node seed, leaf of
        every row of ``row_ids``)."""
        if not isinstance(replay, dict) or {"width", "seed", "leaf_ids", "leaves"} - set(replay):
            raise DuckInputError(
                "replay must be a DCKMeans.random_state_ dict (keys width, seed, leaf_ids, leaves)"
            )
        width = check_positive_int(replay["width"], "replay['width']")
        if self.width != "auto" and width != self.width:
            raise DuckInputError(f"replay width {width} differs from this model's width={self.width}")
        n_leaves = self._check_leaf_count(width, row_ids.size, replayed=True)
        node_seed = check_seed(replay["seed"], "replay['seed']")
        stored_ids = int64_array(replay["leaf_ids"], "replay['leaf_ids']")
        stored_leaves = int64_array(replay["leaves"], "replay['leaves']")
        if stored_leaves.size != stored_ids.size:
            raise DuckInputError(
                f"replay['leaves'] has {stored_leaves.size} entries but replay['leaf_ids'] has {stored_ids.size}; "
                "replay pairs one leaf with every id"
            )
        if np.unique(stored_ids).size != stored_ids.size:
            raise DuckInputError("replay['leaf_ids'] contains duplicates; replay gives each id one leaf")
        if stored_leaves.size and (stored_leaves.min() < 0 or stored_leaves.max() >= n_leaves):
            raise DuckInputError(f"replay leaves must lie in [0, {n_leaves}) for width {width}")
        order = np.argsort(stored_ids, kind="stable")
        pos = np.searchsorted(stored_ids[order], row_ids).clip(max=max(stored_ids.size - 1, 0))
        found = stored_ids[order][pos] == row_ids if stored_ids.size else np.zeros(row_ids.size, dtype=bool)
        if not found.all():
            raise DuckInputError(
                f"ids {row_ids[~found][:10].tolist()} have no leaf in replay; "
                "replay needs the leaf of every row"
            )
        return width, node_seed, stored_leaves[order][pos]

    # ---------------------------------------------------------------------------------------------- nodes
    def _solve(self, level: int, index: int, points: torch.Tensor, weights: torch.Tensor | None) -> tuple:
        """k-means at node (level, index) on ``points`` (m, d) with optional ``weights`` (m,).

        Returns (centers (c, d), masses (c,)). With at most k points of positive weight, every point is its
        own cluster. Non-root nodes drop empty clusters (they carry no mass to the parent).
        """
        self._n_node_fits += 1
        k = self.n_clusters
        if weights is not None:
            positive = weights > 0
            if not bool(positive.all()):
                points, weights = points[positive], weights[positive]
        m = points.shape[0]
        if m <= k:
            masses = weights if weights is not None else torch.ones(m, dtype=self.dtype, device=self.device)
            return points, masses
        generator = make_generator(self._node_seed, _NODE_TAG, level, index)
        x_sq = sq_norms(points)
        seeds = kmeans_plusplus(
            points, k, generator, weights=weights, n_local_trials=self.n_local_trials, x_sqnorm=x_sq
        )
        result = lloyd(points, points[seeds], max_iter=self.n_iter, tol=0.0, weights=weights, x_sqnorm=x_sq)
        w = weights if weights is not None else torch.ones(m, dtype=self.dtype, device=self.device)
        masses = torch.zeros(k, dtype=self.dtype, device=self.device).index_add_(0, result.labels, w)  # (k,)
        if level == 0:
            return result.centers, masses
        keep = masses > 0
        return result.centers[keep], masses[keep]

    def _solve_leaf(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rows = self._leaf_rows[index]
        points = self._X[torch.from_numpy(rows).to(self.device)]  # (m, d), ordered by id
        return self._solve(self.height, index, points, None)

    def _solve_internal(self, level: int, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        children = self._nodes[level + 1][index * self._width : (index + 1) * self._width]
        points = torch.cat([c for c, _ in children])  # (sum c_i, d) in child order
        masses = torch.cat([w for _, w in children])
        return self._solve(level, index, points, masses if self.weighted else None)

    # ------------------------------------------------------------------------------------------- deletion
    def delete(self, ids: Any) -> bool:
        """Delete rows by stable id: recompute their leaves and the ancestors of those leaves only.

        Returns False (DC-k-means never needs a full retrain); ``n_node_fits_`` counts recomputed nodes.
        """
        rows = self._rows_to_delete(ids)
        if rows.size == 0:
            return False
        self._mark_deleted(rows)
        touched = sorted(set(self._leaf_of_row[rows].tolist()))
        for leaf in touched:
            leaf_rows = self._leaf_rows[leaf]
            self._leaf_rows[leaf] = leaf_rows[self._alive[leaf_rows]]
            self._nodes[self.height][leaf] = self._solve_leaf(leaf)
        for level in range(self.height - 1, -1, -1):
            touched = sorted({index // self._width for index in touched})
            for index in touched:
                self._nodes[level][index] = self._solve_internal(level, index)
        self._cache = {}
        return False

    # ------------------------------------------------------------------------------------------ accessors
    @property
    def cluster_centers_(self) -> torch.Tensor:
        """(k, d) centroids of the root (fewer only when there are fewer than k distinct weighted points)."""
        self._check_fitted()
        return self._nodes[0][0][0]

    def _assignment(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Nearest root centroid of every current row and its squared distance (cached until a deletion)."""
        self._check_fitted()
        if "assignment" not in self._cache:
            self._cache["assignment"] = assign(self._X[self._alive_rows()], self.cluster_centers_)
        return self._cache["assignment"]

    @property
    def labels_(self) -> torch.Tensor:
        """(n,) nearest root centroid of every row of ``ids_`` (computed on demand)."""
        return self._assignment()[0]

    @property
    def inertia_(self) -> float:
        """k-means loss of the root centroids on the current rows."""
        return float(self._assignment()[1].sum())

    @property
    def width_(self) -> int:
        """w, the tree's width (resolved from the first fit's n when ``width="auto"``)."""
        self._check_fitted()
        return self._width

    @property
    def n_leaves_(self) -> int:
        """``width_ ** height`` leaves."""
        self._check_fitted()
        return self._n_leaves

    @property
    def n_node_fits_(self) -> int:
        """Node k-means solved since ``fit`` (fit included)."""
        self._check_fitted()
        return self._n_node_fits

    @property
    def node_outputs_(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Per level (0 = root .. h = leaves), per node: (centroids (c, d), masses (c,))."""
        self._check_fitted()
        return [list(level) for level in self._nodes]

    @property
    def random_state_(self) -> dict[str, Any]:
        """The random structure for ``fit(..., replay=...)``: width, node-seed root, leaf of every id."""
        self._check_fitted()
        alive = self._alive
        return {
            "width": self._width,
            "seed": self._node_seed,
            "leaf_ids": torch.from_numpy(self._ids[alive].copy()),
            "leaves": torch.from_numpy(self._leaf_of_row[alive].copy()),
        }
