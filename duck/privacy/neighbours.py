"""Records, subspaces and neighbour counts (Okada et al., seeds/004 §3.1): the definitions that the outlier
count (:mod:`duck.privacy.outliers`), its smooth-sensitivity bound (:mod:`duck.privacy.smooth_sensitivity`) and
the shareable statistics (:mod:`duck.privacy.shareable`) share.

In a subspace ``S`` (a set of coordinate indices) the distance is
``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)`` and the degree of a record is
``deg(x) = |{y in X, y != x : dist_S(x, y) <= r}|`` (paper eq. 19).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from duck.errors import DuckInputError
from duck.utils import as_tensor, check_device, check_number, check_positive_int, check_radius, check_seed, real_array_tensor


def as_records(X: Any, device: Any = "auto", name: str = "X") -> torch.Tensor:
    """Data set as a float64 (N, d) tensor on ``device``; non-numeric, complex or boolean data, bad shapes,
    NaN/inf and unknown devices raise :class:`DuckInputError`."""
    dev = check_device(device, "device")
    t = real_array_tensor(X, name, "(N, d)")
    try:
        t = as_tensor(t, device=dev, dtype=torch.float64, name=name)  # refuses NaN/inf, naming the rows
    except ValueError as e:
        raise DuckInputError(str(e)) from None
    if t.ndim != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise DuckInputError(f"{name} must be a non-empty 2-D array (N records, d features), got {tuple(t.shape)}")
    return t


def is_index(value: Any) -> bool:
    """True for a Python or numpy integer (not a bool)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_subspace(subspace: Iterable[int] | None, dim: int) -> tuple[int, ...]:
    """Validate coordinate indices of a subspace (None = the full space); sorted tuple of distinct ints.

    A subspace is a sequence (list, tuple, 1-D array) of Python or numpy integers; bools, floats and
    strings are refused rather than converted.
    """
    if subspace is None:
        return tuple(range(dim))
    if isinstance(subspace, (str, bytes)) or not isinstance(subspace, Iterable):
        raise DuckInputError(
            f"subspace={subspace!r} must be a sequence of integer coordinate indices such as [0, 2] (or None)"
        )
    items = list(subspace)
    wrong = [i for i in items if not is_index(i)]
    if wrong:
        raise DuckInputError(
            f"subspace={subspace!r} holds non-integer entries {wrong[:5]}; coordinate indices are integers "
            "such as [0, 2]"
        )
    idx = [int(i) for i in items]
    if not idx:
        raise DuckInputError("subspace is empty; give at least one coordinate index (or None for all)")
    bad = [i for i in idx if not 0 <= i < dim]
    if bad:
        raise DuckInputError(f"subspace indices {bad} are out of range for data of dimension {dim} (valid: 0..{dim - 1})")
    if len(set(idx)) != len(idx):
        raise DuckInputError(f"subspace={list(subspace)} repeats a coordinate; list each index once")
    return tuple(sorted(idx))


def subspace_coordinates(X: torch.Tensor, subspace: tuple[int, ...]) -> torch.Tensor:
    """``X[:, S]`` (N, |S|), unscaled: ``dist_S(x, y) <= r`` (paper §3.1) is tested as
    ``sum_S (x_i - y_i)^2 <= r^2 |S|`` (:func:`squared_radius`), which is exact for integer data and an integer
    r. Scaling the coordinates by ``1/sqrt(|S|)`` instead rounded exact ties (dist_S = r) to "not within" in
    58 of 168 integer cases."""
    return X[:, list(subspace)]


def squared_radius(r: float, subspace: tuple[int, ...]) -> float:
    """``r^2 |S|``: the squared Euclidean radius on :func:`subspace_coordinates` that means ``dist_S <= r``."""
    return r * r * len(subspace)


def count_within(
    queries: torch.Tensor, points: torch.Tensor, r2: float, *, block_elems: int = 1 << 24
) -> torch.Tensor:
    """For each query row, the number of ``points`` rows whose squared Euclidean distance is at most ``r2``
    (inclusive; ``r2 = r^2`` for plain Euclidean radius r, :func:`squared_radius` for dist_S).

    Exact differences (no ``|x|^2 + |y|^2 - 2xy`` expansion) in blocks of about ``block_elems`` numbers.
    queries (Q, d), points (N, d) -> (Q,) int64.
    """
    n_q, d = queries.shape
    counts = torch.empty(n_q, dtype=torch.int64, device=queries.device)
    rows = max(1, block_elems // max(1, points.shape[0] * d))
    for s in range(0, n_q, rows):
        diff = queries[s : s + rows, None, :] - points[None, :, :]  # (B, N, d)
        counts[s : s + rows] = (diff.square().sum(-1) <= r2).sum(1)
    return counts


@dataclass(frozen=True)
class LSHNeighbours:
    """Count neighbours with an :class:`~duck.deletion.LSHIndex` instead of all pairs (large N).

    A neighbour is then a record within ``r`` that also shares one of the ``L`` buckets (``k`` hashes of
    width ``w``, in dist_S units) with the record: degrees can only be lower than the exact ones (missed
    neighbours make extra outliers). ``seed`` must not depend on the data.

    Effect on the guarantee: with hash functions drawn independently of the data, replacing one record still
    changes every other record's degree by at most one, and every record whose status flips lies within
    ``r`` of the replaced record's old or new position. Theorems 5-6 and the smooth bound of
    :mod:`duck.privacy.smooth_sensitivity` only use these two facts, so the smooth mechanism stays
    (eps, delta)-DP for the LSH count (for every fixed hash draw). Theorem 4's kissing-number bound does
    not: it needs all records within r of each other to be neighbours, so ``mechanism="global"`` refuses
    LSH counts.
    """

    k: int
    L: int
    w: float
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive_int(self.k, "LSHNeighbours.k")
        check_positive_int(self.L, "LSHNeighbours.L")
        check_number(self.w, "LSHNeighbours.w (bucket width)", 0.0, True)
        check_seed(self.seed, "LSHNeighbours.seed")


def check_lsh(lsh: Any) -> LSHNeighbours | None:
    """The ``lsh`` option: None (exact counts), an :class:`LSHNeighbours`, or a mapping of its fields
    (``k``, ``L``, ``w`` and optionally ``seed``), else a :class:`DuckInputError`."""
    if lsh is None or isinstance(lsh, LSHNeighbours):
        return lsh
    if isinstance(lsh, Mapping):
        names = [f.name for f in fields(LSHNeighbours)]
        unknown = sorted(str(key) for key in lsh if key not in names)
        missing = [name for name in ("k", "L", "w") if name not in lsh]
        if unknown or missing:
            raise DuckInputError(
                f"lsh={dict(lsh)!r}: unknown keys {unknown}, missing keys {missing}; give k, L, w (and seed)"
            )
        return LSHNeighbours(**lsh)
    raise DuckInputError(
        f"lsh={lsh!r} must be None, LSHNeighbours(k=..., L=..., w=..., seed=...) or a dict with those keys"
    )


def check_k_records(k: Any, n_records: int) -> int:
    """``k`` as an int in ``[1, N]``: with ``k >= N`` every record is already an outlier (``deg <= N - 1``),
    and the smooth bound's work grows with ``k``."""
    k = check_positive_int(k, "k")
    if k > n_records:
        raise DuckInputError(f"k={k} exceeds the number of records N={n_records}; use k <= N")
    return k


def neighbour_counts(
    X: Any,
    r: float,
    subspace: Iterable[int] | None = None,
    *,
    lsh: LSHNeighbours | Mapping[str, Any] | None = None,
    device: Any = "auto",
) -> torch.Tensor:
    """``deg(x) = |{y != x : dist_S(x, y) <= r}|`` for every record (paper eq. 19), as an (N,) int64 tensor.

    Exact (batched pairwise differences) by default; with ``lsh`` the neighbours found in the record's
    LSH buckets (see :class:`LSHNeighbours`).
    """
    lsh = check_lsh(lsh)
    r = check_radius(r)
    Xt = as_records(X, device)
    S = check_subspace(subspace, Xt.shape[1])
    Z = subspace_coordinates(Xt, S)
    if lsh is None:
        return count_within(Z, Z, squared_radius(r, S)) - 1  # the record itself is at distance 0
    from duck.deletion.lsh import LSHIndex

    Z = Z / math.sqrt(len(S))  # the index works in dist_S units (its w is one)
    index = LSHIndex(Z.shape[1], lsh.k, lsh.L, lsh.w, lsh.seed, device=Z.device)
    ids = index.add(Z)
    found = [m.numel() - 1 for s in range(0, len(ids), 1024) for m in index.query(ids[s : s + 1024], r)]
    return torch.tensor(found, dtype=torch.int64, device=Z.device)
