"""Input validation, stable row ids and the shared public surface of the deletable k-means models.

Every model stores its training rows (needed to retrain) together with a *stable id* per row: the ids
passed to ``fit(X, ids=...)`` (default ``0..n-1``). ``delete`` takes ids, never positions, so ids stay
valid across deletions and retrains. Deleted rows are only marked dead (O(1)); the arrays are compacted
when a model retrains anyway. Every error raised for bad input is a :class:`DuckInputError` raised before
any state is touched, so a failed call leaves the model unchanged; ``fit`` additionally runs under
:meth:`DeletableKMeansBase._fit_transaction`, which restores the previous model if the fit fails midway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from duck.deletion._kmeans_ops import assign, sq_norms
from duck.errors import DuckInputError
from duck.utils import check_device, check_positive_int, check_seed, int64_array, real_array_tensor

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def resolve_dtype(dtype: Any) -> torch.dtype:
    """``torch.float32`` / ``torch.float64`` from a torch dtype or its name; ``DuckInputError`` otherwise."""
    if isinstance(dtype, str) and dtype in _DTYPES:
        return _DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in _DTYPES.values():
        return dtype
    raise DuckInputError(
        f"dtype must be torch.float32 or torch.float64 (or 'float32'/'float64'), got {dtype!r}"
    )


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32`` (for messages)."""
    return str(dtype).removeprefix("torch.")


#: largest rounding error of a squared distance accepted at fit, as a fraction of the data's total variance
_OFFSET_TOLERANCE = 1e-2


class DeletableKMeansBase:
    """Shared state and checks: the stored rows, their ids, the alive mask, ``predict``, bad-input errors."""

    #: model name used in error messages
    _name = "model"
    #: refuse training data whose distances the matrix-product expansion cannot resolve (``_check_offset``)
    check_offset = True
    #: Q-k-means: distances as sums of squared differences (``_kmeans_ops.partition_exact``) instead of the
    #: expansion, which makes the offset check moot; the SPN's SplitData clusterings (k = 2) use it, so that
    #: rows far from the origin or near-identical rows split the same way after deletions as in a fresh fit
    exact_distances = False

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
        self.seed = check_seed(seed, "seed")
        self.device = check_device(device, "device")
        self.dtype = resolve_dtype(dtype)
        self.n_retrains_ = 0
        self._X: torch.Tensor | None = None

    # ----------------------------------------------------------------------------------------------- inputs
    def _as_data(
        self, X: Any, name: str = "X", min_rows: int | None = None, copy: bool = False, summed: bool = False
    ) -> torch.Tensor:
        """(n, d) finite float tensor on the model's device; clear errors for everything else.

        ``copy=True`` (used by ``fit``) guarantees the model never shares memory with the caller's array.
        ``summed=True`` (training data) also requires sums of squared distances over all rows to stay finite
        (see :meth:`_check_scale`); otherwise only single squared distances must.
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
        source = t
        t = t.to(device=self.device, dtype=self.dtype, copy=copy)
        if not bool(torch.isfinite(t.sum())):  # any NaN/inf makes the sum non-finite; then find the rows
            finite = torch.isfinite(t).all(dim=1)
            if not bool(finite.all()):
                bad = (~finite).nonzero().flatten()[:5].tolist()
                if source.is_floating_point() and bool(torch.isfinite(source[bad]).all()):
                    raise self._too_large(name, f"rows {bad} overflow {dtype_name(self.dtype)}")
                raise DuckInputError(
                    f"{name} contains NaN or inf values (first bad rows: {bad}); clean or drop those rows"
                )
        if min_rows is not None and t.shape[0] < min_rows:
            raise DuckInputError(
                f"{name} has {t.shape[0]} rows but n_clusters={self.n_clusters}; "
                f"pass at least n_clusters rows or lower n_clusters"
            )
        if summed:
            self._check_scale(t, name, t.shape[0], f" summed over {t.shape[0]} rows")
            if self.check_offset and not self.exact_distances:
                self._check_offset(source, name)
        else:
            self._check_scale(t, name, 1)
        return t

    def _check_offset(self, X: torch.Tensor, name: str) -> None:
        """Refuse training data far from the origin compared with its spread, where the expansion
        ``||x||^2 - 2 x.c + ||c||^2`` behind every distance of these models (one matrix product) loses the
        distances to cancellation: its rounding error is about ``u max||x||^2`` (u: the dtype's unit roundoff),
        against squared distances of the order of the total variance V. Refused when that error exceeds
        ``_OFFSET_TOLERANCE`` V (float32: a mean more than about 400 standard deviations from 0 per coordinate;
        float64: about 1e7). Checked on the caller's values (``X`` before the cast to the model's dtype).

        Centring is left to the caller: a stored mean of the training rows would keep information about rows
        deleted later (these models must forget them entirely)."""
        if X.shape[0] < 2:
            return
        X64 = X.to(torch.float64)  # the caller's values: a cast to float32 may already have rounded the spread away
        total_variance = float(X64.var(dim=0, correction=0).sum())
        largest = float(sq_norms(X64).max())
        error = 0.5 * torch.finfo(self.dtype).eps * largest
        if total_variance == 0.0 or error <= _OFFSET_TOLERANCE * total_variance:  # (V = 0: identical rows)
            return
        in_float64 = error * torch.finfo(torch.float64).eps / torch.finfo(self.dtype).eps
        hint = " or use dtype=torch.float64" if in_float64 <= _OFFSET_TOLERANCE * total_variance else ""
        raise DuckInputError(
            f"{name} lies far from the origin compared with its spread (largest squared row norm {largest:.3g}, "
            f"total variance {total_variance:.3g}): the squared distances, computed as ||x||^2 - 2 x.c + ||c||^2 in "
            f"{dtype_name(self.dtype)}, would carry rounding errors of {error / total_variance:.2g} times the "
            f"variance; centre {name} first (subtract its column means, and the same vector from every row "
            f"passed to predict){hint}"
        )

    def _too_large(self, name: str, detail: str, rescale: str | None = None) -> DuckInputError:
        """The error for data beyond the dtype's range; ``rescale`` says what to rescale (default: ``name``)."""
        hint = " or use dtype=torch.float64" if self.dtype == torch.float32 else ""
        rescale = rescale or f"{name} (e.g. divide it by its largest absolute value)"
        return DuckInputError(
            f"{name} values are too large for {dtype_name(self.dtype)} ({detail}); rescale {rescale}{hint}"
        )

    def _check_scale(
        self, X: torch.Tensor, name: str, mass: float, summed: str = "", rescale: str | None = None
    ) -> None:
        """Refuse data whose squared distances, summed with total weight ``mass`` (``summed`` says how, for the
        message; a row count or a total sample weight), overflow the model's dtype (``rescale``: the advice).

        Every centre of these models lies in the convex hull of the rows (Q-k-means' lattice adds at most
        ``eps`` per coordinate, checked at fit), so a squared distance is at most ``(2 max ||x||)^2`` and the
        ``||x||^2 - 2 x.c + ||c||^2`` terms stay below that bound too; k-means++ potentials, Lloyd inertias and
        Q-k-means losses sum at most ``mass`` of them. Beyond the dtype's maximum, k-means++ samples from an
        infinite potential (raw IndexErrors) and losses become inf/NaN.
        """
        largest = float(sq_norms(X).max())  # in the model's dtype: inf when a squared row norm overflows
        bound = 4.0 * float(mass) * largest
        limit = torch.finfo(self.dtype).max
        if not bound <= limit:
            raise self._too_large(
                name,
                f"largest squared row norm {largest:.3g}: squared distances{summed} can reach {bound:.3g}, "
                f"above the {dtype_name(self.dtype)} maximum {limit:.3g}",
                rescale,
            )

    def _as_fit_ids(self, ids: Any, n: int) -> np.ndarray:
        if ids is None:
            return np.arange(n, dtype=np.int64)
        arr = np.array(int64_array(ids, "ids"))  # a copy: the model never shares memory with the caller's ids
        if arr.size != n:
            raise DuckInputError(f"ids has {arr.size} entries but X has {n} rows; pass one id per row")
        if np.unique(arr).size != n:
            raise DuckInputError("ids must be unique (one stable id per row); found duplicates")
        return arr

    @contextmanager
    def _fit_transaction(self) -> Iterator[None]:
        """Run a fit's state changes; on any exception restore every attribute to its value before.

        A fit only assigns fresh objects to attributes (it never mutates the previous model's arrays in place),
        so restoring the attribute dict restores the previous model exactly.
        """
        saved = dict(self.__dict__)
        try:
            yield
        except BaseException:
            self.__dict__.clear()
            self.__dict__.update(saved)
            raise

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
            if ids.size and ids.min() >= 0 and ids.max() < self._row_table.size:  # all inside the table
                return self._row_table[ids]
            inside = (ids >= 0) & (ids < self._row_table.size)
            return np.where(inside, self._row_table[np.where(inside, ids, 0)], -1)
        pos = np.minimum(np.searchsorted(self._sorted_ids, ids), self._sorted_ids.size - 1)
        return np.where(self._sorted_ids[pos] == ids, self._sort_order[pos], -1)

    def _rows_to_delete(self, ids: Any) -> np.ndarray:
        """Validate a deletion request and return its rows. Raises before touching any state."""
        self._check_fitted()
        req = int64_array(ids, "ids")
        if req.size > 1 and np.unique(req).size != req.size:
            raise DuckInputError(f"ids to delete contain duplicates: {req[:10].tolist()}; pass each id once")
        rows = self._rows_of(req)
        if rows.size and rows.min() < 0:  # ids not stored (any more): deleted before compaction, or unknown
            gone = [i for i in req[rows < 0].tolist() if i in self._deleted_ids]
            if gone:
                raise DuckInputError(f"ids {gone[:10]} were already deleted; each row can be deleted once")
            raise DuckInputError(
                f"unknown ids {req[rows < 0][:10].tolist()}: not among the ids this {self._name} "
                "was fitted on"
            )
        if not self._alive[rows].all():
            dead = ~self._alive[rows]
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
        if self._X.is_cpu:
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
