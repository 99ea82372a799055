"""k-means++ seeding + Lloyd iterations as batched torch ops: the baseline and building block of seeds/000.

Ginart et al. (NeurIPS 2019, seeds/000 §5) compare their deletion-efficient algorithms with "the canonical
Lloyd's algorithm initialized by k-means++", whose only exact deletion is to retrain from scratch. This
module is that baseline: :class:`KMeansPP` follows scikit-learn's ``KMeans(init="k-means++", n_init=1,
algorithm="lloyd")`` (greedy seeding with ``2 + floor(ln k)`` candidates, centre-shift tolerance relative
to the mean feature variance, labels-unchanged early stop), with every distance computed as one batched
``||x||^2 - 2 x.c + ||c||^2`` block. ``delete`` retrains on the remaining rows.
"""

from __future__ import annotations

from typing import Any

import torch

from duck.deletion._kmeans_base import DeletableKMeansBase, dtype_name
from duck.deletion._kmeans_ops import kmeans_plusplus, lloyd, make_generator, sklearn_tol, sq_norms
from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int, real_array_tensor


class KMeansPP(DeletableKMeansBase):
    """k-means++ + Lloyd (the baseline of seeds/000 §5); deletion = retrain from scratch.

    Args:
        n_clusters: k.
        max_iter: maximum number of Lloyd updates (the paper's fixed-T baseline uses ``max_iter=10, tol=0``).
        tol: stop when ``sum ||c' - c||^2 <= tol * mean feature variance`` (scikit-learn's rule); 0: off.
            Lloyd also stops when the labels no longer change.
        n_local_trials: greedy k-means++ candidates per centre; None -> ``2 + floor(ln k)``; 1 -> plain.
        seed: all randomness comes from ``torch.Generator``s derived from it (fit: ``(seed, 0)``; the i-th
            retrain after a deletion: ``(seed, i)``).
        device: "auto" | "cpu" | "cuda" | torch.device.
        dtype: torch.float32 or torch.float64.

    Attributes after ``fit``: ``cluster_centers_`` (k, d), ``labels_`` (n,), ``inertia_``, ``n_iter_``,
    ``seed_ids_`` (stable ids of the k-means++ seeds), ``ids_``, ``n_retrains_``.
    """

    _name = "KMeansPP"

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        max_iter: int = 300,
        tol: float = 1e-4,
        n_local_trials: int | None = None,
        seed: int = 0,
        device: str | torch.device | None = "auto",
        dtype: Any = torch.float32,
    ) -> None:
        super().__init__(n_clusters, seed, device, dtype, n_local_trials)
        self.max_iter = check_positive_int(max_iter, "max_iter")
        self.tol = check_number(tol, "tol", 0.0, False)

    def fit(self, X: Any, *, ids: Any = None, sample_weight: Any = None) -> KMeansPP:
        """Seed with k-means++ and run Lloyd on ``X`` (n, d). ``ids``: stable row ids (default ``0..n-1``).

        ``sample_weight``: optional (n,) non-negative finite weights, at least ``n_clusters`` of them positive.
        Bad input raises a ``DuckInputError`` and leaves a fitted model as it was.
        """
        Xt = self._as_data(X, min_rows=self.n_clusters, copy=True, summed=True)
        n = Xt.shape[0]
        row_ids = self._as_fit_ids(ids, n)
        weights, total = self._as_weights(sample_weight, n)
        if total > n:  # weighted potentials and inertia sum up to the total weight of squared distances
            self._check_scale(
                Xt, "X", total, f" weighted by sample_weight (total {total:.3g})",
                "X or sample_weight (the clustering depends only on the weights' ratios)",
            )
        with self._fit_transaction():
            self._store_rows(Xt, row_ids)
            self._weights = weights
            self.n_retrains_ = 0
            self._train(make_generator(self.seed, 0))
        return self

    def _as_weights(self, sample_weight: Any, n: int) -> tuple[torch.Tensor | None, float]:
        """``sample_weight`` as an (n,) tensor of the model's dtype on its device, and its total (0 for None)."""
        if sample_weight is None:
            return None, 0.0
        t = real_array_tensor(sample_weight, "sample_weight", shape="(n,)")
        if t.ndim != 1 or t.shape[0] != n:
            raise DuckInputError(
                f"sample_weight must be a 1-D array of {n} weights (one per row of X), got shape {tuple(t.shape)}"
            )
        w64 = t.to(torch.float64)
        bad = (~torch.isfinite(w64) | (w64 < 0)).nonzero().flatten()[:5].tolist()
        if bad:
            raise DuckInputError(
                f"sample_weight must be finite and >= 0, got {w64[bad].tolist()} at entries {bad}"
            )
        total = float(w64.sum())
        limit = torch.finfo(self.dtype).max
        if not total <= limit:
            raise DuckInputError(
                f"sample_weight sums to {total:.3g}, above the {dtype_name(self.dtype)} maximum {limit:.3g}; "
                "rescale the weights (the clustering depends only on their ratios)"
            )
        w = t.to(device=self.device, dtype=self.dtype, copy=True)
        if int((w > 0).sum()) < self.n_clusters:
            raise DuckInputError(
                f"sample_weight has fewer than n_clusters={self.n_clusters} positive entries"
            )
        return w, total

    def _train(self, generator: torch.Generator) -> None:
        X, w = self._X, self._weights
        x_sq = sq_norms(X)
        seeds = kmeans_plusplus(
            X, self.n_clusters, generator, weights=w, n_local_trials=self.n_local_trials, x_sqnorm=x_sq
        )
        result = lloyd(
            X, X[seeds], max_iter=self.max_iter, tol=sklearn_tol(X, self.tol), weights=w, x_sqnorm=x_sq
        )
        self._seed_ids = torch.from_numpy(self._ids[seeds])
        self._centers = result.centers
        self._labels = result.labels
        self._inertia = result.inertia
        self._n_iter = result.n_iter

    def delete(self, ids: Any) -> bool:
        """Remove rows by stable id and retrain from scratch (the baseline's only exact deletion).

        Returns True (every deletion is a retrain); ``n_retrains_`` counts them.
        """
        rows = self._rows_to_delete(ids)
        if rows.size == 0:
            return False
        if self._weights is not None:
            remaining = self._alive.copy()
            remaining[rows] = False
            if int((self._weights[torch.from_numpy(remaining).to(self.device)] > 0).sum()) < self.n_clusters:
                raise DuckInputError(
                    "deleting these ids would leave fewer positive-weight rows than n_clusters"
                )
        self._mark_deleted(rows)
        keep = self._compact()
        if self._weights is not None:
            self._weights = self._weights[torch.from_numpy(keep).to(self.device)]
        self.n_retrains_ += 1
        self._train(make_generator(self.seed, self.n_retrains_))
        return True

    @property
    def cluster_centers_(self) -> torch.Tensor:
        """(k, d) centroids."""
        self._check_fitted()
        return self._centers

    @property
    def labels_(self) -> torch.Tensor:
        """(n,) cluster of every row in ``ids_``."""
        self._check_fitted()
        return self._labels

    @property
    def inertia_(self) -> float:
        """(Weighted) k-means loss of the centroids on the current rows."""
        self._check_fitted()
        return self._inertia

    @property
    def n_iter_(self) -> int:
        """Number of Lloyd updates of the last (re)training."""
        self._check_fitted()
        return self._n_iter

    @property
    def seed_ids_(self) -> torch.Tensor:
        """Stable ids of the k-means++ seeds of the last (re)training, in seeding order."""
        self._check_fitted()
        return self._seed_ids
