"""Input validation, stable row ids and the shared public surface of the deletable k-means models.

Every model stores its training rows (needed to retrain) together with a *stable id* per row: the ids
passed to ``fit(X, ids=...)`` (default ``0..n-1``). ``delete`` takes ids, never positions, so ids stay
valid across deletions and retrains. Deleted rows are only marked dead (O(1)); the arrays are compacted
when a model retrains anyway. Every error raised for bad input is a :class:`DuckInputError` raised before
any state is touched, so a failed call leaves the model unchanged.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from duck.deletion._kmeans_ops import assign
from duck.errors import DuckInputError
from duck.utils import check_positive_int, real_array_tensor, resolve_device

_DTYPES = {torch.float32, torch.float64}



def resolve_dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, str):
        dtype = {"float32": torch.float32, "float64": torch.float64}.get(dtype, dtype)
    if dtype not in _DTYPES:
        raise DuckInputError(
            f"dtype must be torch.float32 or torch.float64 (or 'float32'/'float64'), got {dtype!r}"
        )
    return dtype


def to_ids(ids: Any, name: str = "ids") -> np.ndarray:
    """A 1-D int64 numpy array of ids from an int / list / numpy array / tensor; integers only."""
    if isinstance(ids, (int, np.integer)) and not isinstance(ids, bool):
        return np.array([ids], dtype=np.int64)
    arr = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) else np.asarray(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise DuckInputError(f"{name} must be a 1-D sequence of integer ids, got shape {arr.shape}")
    if arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise DuckInputError(f"{name} must be integer ids, got {arr.dtype} values {arr[:5].tolist()}")


class DeletableKMeansBase:
    """Shared state and checks: the stored rows, their ids, the alive mask, ``predict``, bad-input errors."""

    #: model name used in error messages
    _name = "model"

    def __init__(
        self,
        n_clusters: int,
        seed: int,
        device: str | torch.device | None,
        dtype: Any,
        n_local_trials: int | None = None,
    ) -> None:
        self.n_clusters = check_positive_int(n_clusters, "n_clusters")
        #: greedy k-means++ candidates per centre (None: the algorithm's default)
        self.n_local_trials = (
            None if n_local_trials is None else check_positive_int(n_local_trials, "n_local_trials")
        )
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise DuckInputError(f"seed must be an integer, got {seed!r}")
        self.seed = int(seed)
        try:
            self.device = resolve_device(device)
        except (RuntimeError, ValueError) as e:
            raise DuckInputError(str(e)) from None
        self.dtype = resolve_dtype(dtype)
        self.n_retrains_ = 0
        self._X: torch.Tensor | None = None

    # ----------------------------------------------------------------------------------------------- inputs
    def _as_data(
        self, X: Any, name: str = "X", min_rows: int | None = None, copy: bool = False
    ) -> torch.Tensor:
        """(n, d) finite float tensor on the model's device; clear errors for everything else.

        ``copy=True`` (used by ``fit``) guarantees the model never shares memory with the caller's array.
        """
        t = real_array_tensor(X, name)
        if t.numel() == 0:
            raise DuckInputError(
                f"{name} is empty (shape {tuple(t.shape)}); pass at least one row and one feature"
            )
        if t.ndim != 2:
            raise DuckInputError(
                f"{name} must be a 2-D (n_samples, n_features) array, got shape {tuple(t.shape)}"
            )
        if t.is_complex() or t.dtype == torch.bool:
            raise DuckInputError(f"{name} must be real-valued, got dtype {t.dtype}")
        t = t.to(device=self.device, dtype=self.dtype, copy=copy)
        if not bool(torch.isfinite(t.sum())):  # any NaN/inf makes the sum non-finite; then find the rows
            finite = torch.isfinite(t).all(dim=1)
            if not bool(finite.all()):
                bad = (~finite).nonzero().flatten()[:5].tolist()
                raise DuckInputError(
                    f"{name} contains NaN or inf values (first bad rows: {bad}); clean or drop those rows"
                )
        if min_rows is not None and t.shape[0] < min_rows:
            raise DuckInputError(
                f"{name} has {t.shape[0]} rows but n_clusters={self.n_clusters}; "
                f"pass at least n_clusters rows or lower n_clusters"
            )
        return t

    def _as_fit_ids(self, ids: Any, n: int) -> np.ndarray:
        if ids is None:
            return np.arange(n, dtype=np.int64)
        arr = to_ids(ids)
        if arr.size != n:
            raise DuckInputError(f"ids has {arr.size} entries but X has {n} rows; pass one id per row")
        if np.unique(arr).size != n:
            raise DuckInputError("ids must be unique (one stable id per row); found duplicates")
        return arr

    # ------------------------------------------------------------------------------------------ stored rows
    def _store_rows(self, X: torch.Tensor, ids: np.ndarray) -> None:
        """Keep the training rows (device tensor) and, on the CPU, their ids, the alive mask, an id index."""
        self._X = X
        self._ids = ids  # (N,) int64
        self._alive = np.ones(ids.size, dtype=bool)  # (N,)
        self._n_alive = int(ids.size)
        self._deleted_ids: set[int] = set()  # ids removed since fit (for clear errors after compaction)
        lo, hi = int(ids.min()), int(ids.max())
        if lo >= 0 and hi < 4 * ids.size + 1024:  # dense id -> row table, O(1) lookups
            self._row_table: np.ndarray | None = np.full(hi + 1, -1, dtype=np.int64)
            self._row_table[ids] = np.arange(ids.size)
        else:  # sparse ids: binary search in the sorted ids
            self._row_table = None
            self._sort_order = np.argsort(ids, kind="stable")
            self._sorted_ids = ids[self._sort_order]

    def _rows_of(self, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids``; -1 where an id is unknown. (m,) -> (m,)"""
        if self._row_table is not None:
            inside = (ids >= 0) & (ids < self._row_table.size)
            return np.where(inside, self._row_table[np.where(inside, ids, 0)], -1)
        pos = np.minimum(np.searchsorted(self._sorted_ids, ids), self._sorted_ids.size - 1)
        return np.where(self._sorted_ids[pos] == ids, self._sort_order[pos], -1)

    def _rows_to_delete(self, ids: Any) -> np.ndarray:
        """Validate a deletion request and return its rows. Raises before touching any state."""
        self._check_fitted()
        req = to_ids(ids)
        if req.size > 1 and np.unique(req).size != req.size:
            raise DuckInputError(f"ids to delete contain duplicates: {req[:10].tolist()}; pass each id once")
        rows = self._rows_of(req)
        gone = [i for i in req[rows < 0].tolist() if i in self._deleted_ids]
        if gone:
            raise DuckInputError(f"ids {gone[:10]} were already deleted; each row can be deleted once")
        if (rows < 0).any():
            raise DuckInputError(
                f"unknown ids {req[rows < 0][:10].tolist()}: not among the ids this {self._name} "
                "was fitted on"
            )
        dead = ~self._alive[rows]
        if dead.any():
            raise DuckInputError(
                f"ids {req[dead][:10].tolist()} were already deleted; each row can be deleted once"
            )
        if self._n_alive - req.size < self.n_clusters:
            raise DuckInputError(
                f"deleting {req.size} of {self._n_alive} rows would leave fewer rows than "
                f"n_clusters={self.n_clusters}; refit with fewer clusters instead"
            )
        return rows

    def _mark_deleted(self, rows: np.ndarray) -> None:
        """Mask the rows out and erase their values (the model's own copy; a deletion check has read them)."""
        if self._X.device.type == "cpu":
            self._X.numpy()[rows] = 0.0  # the same memory, without a device op
        else:
            self._X[torch.from_numpy(rows).to(self._X.device)] = 0.0
        self._deleted_ids.update(self._ids[rows].tolist())
        self._alive[rows] = False
        self._n_alive -= int(rows.size)

    def _compact(self) -> np.ndarray:
        """Drop dead rows from the stored data; returns the kept old row indices."""
        keep = np.flatnonzero(self._alive)
        if keep.size != self._alive.size:
            new_row = np.full(self._alive.size, -1, dtype=np.int64)
            new_row[keep] = np.arange(keep.size)
            if self._row_table is not None:
                self._row_table[self._ids] = new_row
            else:  # the sorted index stays sorted after filtering: no re-sort
                kept_in_sorted = self._alive[self._sort_order]
                self._sorted_ids = self._sorted_ids[kept_in_sorted]
                self._sort_order = new_row[self._sort_order[kept_in_sorted]]
            self._X = self._X[torch.from_numpy(keep).to(self._X.device)]
            self._ids = self._ids[keep]
            self._alive = np.ones(keep.size, dtype=bool)
        return keep

    def _alive_rows(self) -> torch.Tensor:
        """Rows of the current data, as a device index tensor."""
        return torch.from_numpy(np.flatnonzero(self._alive)).to(self._X.device)

    # --------------------------------------------------------------------------------------------- public
    def _check_fitted(self) -> None:
        if self._X is None:
            raise DuckInputError(f"this {self._name} is not fitted yet; call fit(X) first")

    @property
    def ids_(self) -> torch.Tensor:
        """Stable ids of the rows currently in the model, in the order of ``labels_``."""
        self._check_fitted()
        return torch.from_numpy(self._ids[self._alive])

    @property
    def n_samples_(self) -> int:
        """Number of rows currently in the model (training rows minus deletions)."""
        self._check_fitted()
        return self._n_alive

    @property
    def n_features_in_(self) -> int:
        self._check_fitted()
        return int(self._X.shape[1])

    @property
    def cluster_centers_(self) -> torch.Tensor:  # pragma: no cover - overridden
        raise NotImplementedError

    def predict(self, X: Any) -> torch.Tensor:
        """Index of the nearest centroid for every row of ``X``. (m, d) -> (m,) int64"""
        self._check_fitted()
        Xq = self._as_data(X)
        if Xq.shape[1] != self.n_features_in_:
            raise DuckInputError(
                f"X has {Xq.shape[1]} features but this {self._name} was fitted on {self.n_features_in_}"
            )
        return assign(Xq, self.cluster_centers_)[0]

    def _labels_of_alive(self, centers: torch.Tensor) -> torch.Tensor:
        return assign(self._X[self._alive_rows()], centers)[0]
