"""Distance-based outliers and their differentially private count and subspace discovery (seeds/004).

Definitions (paper §3.1, Definitions 7-8): in a subspace ``S`` (a set of coordinate indices) the distance is
``dist_S(x, y) = sqrt(sum_{i in S} (x_i - y_i)^2 / |S|)``; a record ``x`` of the data set ``X`` is an outlier
when fewer than ``k`` *other* records lie within ``r``: ``|{y in X, y != x : dist_S(x, y) <= r}| < k``.
``q_count(X, k, r, S)`` is the number of outliers (eq. 14).

Neighbouring data sets differ in one record (Hamming distance 1, same size N), as in the paper.

* :func:`global_sensitivity_bounds` -- Theorem 4: ``min(N, 2dk+1) <= GS <= min(N, k K_d + 1)`` with the
  kissing number ``K_d`` (table of known values / rigorous upper bounds, :data:`KISSING_NUMBER_UPPER`).
* :func:`dp_outlier_count` -- Gaussian mechanism with the global-sensitivity upper bound, or with the
  beta-smooth upper bound of :mod:`duck.privacy.smooth_sensitivity` (paper §4).
* :func:`dp_top_subspaces` -- exponential mechanism with utility ``q_count(S) / GS_UB_{|S|}(k)``
  (eq. 51, sensitivity <= 1), h draws without replacement, eps/h each (Algorithm 3).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch

from duck.errors import DuckInputError
from duck.privacy.mechanisms import (
    DPRelease,
    Seed,
    check_calibration,
    check_delta,
    check_eps,
    gaussian_mechanism,
    gaussian_sigma,
    make_generator,
    smooth_gaussian_mechanism,
    smooth_gaussian_params,
    top_h_without_replacement,
)
from duck.utils import (
    as_tensor,
    check_device,
    check_number,
    check_positive_int,
    check_radius,
    check_seed,
    real_array_tensor,
)

# Kissing numbers: exact for d in {1, 2, 3, 4, 8, 24}; elsewhere the rigorous semidefinite-programming
# upper bounds of Mittelmann & Vallentin (2010, Table 1, rounded down), the paper's reference [19].
# Any upper bound keeps the global-sensitivity bound valid (it is only used as an upper bound).
KISSING_NUMBER_UPPER: dict[int, int] = {
    1: 2, 2: 6, 3: 12, 4: 24, 5: 44, 6: 78, 7: 134, 8: 240, 9: 364, 10: 554, 11: 870, 12: 1357,
    13: 2069, 14: 3183, 15: 4866, 16: 7355, 17: 11072, 18: 16572, 19: 24812, 20: 36764, 21: 54584,
    22: 82340, 23: 124416, 24: 196560,
}  # fmt: skip


def kissing_number_upper(d: int) -> int:
    """An upper bound on the kissing number ``K_d``: the table above, else the volume bound ``3^d - 1``.

    Volume bound: the kissing unit balls are disjoint, disjoint from the central unit ball, and lie in the
    ball of radius 3 around its centre, so ``K_d (vol B_1) <= (3^d - 1) vol B_1``.
    """
    d = check_positive_int(d, "d")
    return KISSING_NUMBER_UPPER.get(d, 3**d - 1)


def global_sensitivity_bounds(n_records: int, dim: int, k: int) -> tuple[int, int]:
    """Theorem 4: ``(min(N, 2 d k + 1), min(N, k K_d + 1))`` for ``q_count`` in a ``dim``-dimensional subspace."""
    n_records = check_positive_int(n_records, "N")
    dim = check_positive_int(dim, "dim")
    k = check_positive_int(k, "k")
    return min(n_records, 2 * dim * k + 1), min(n_records, k * kissing_number_upper(dim) + 1)


def kissing_configuration(k: int, r: float, n_spokes: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Theorem 4's worst case: neighbouring data sets whose outlier counts differ by ``n_spokes k + 1``.

    ``X`` holds a centre record x0 and ``n_spokes`` clusters of k identical records at dist_S ``0.99 r`` from
    it, the clusters pairwise farther than ``r`` apart (needs ``n_spokes <= 2`` in 1-d and ``<= 5`` on a
    circle in higher dimensions). Every record is an inlier; moving x0 far away (``X_moved``) turns all
    ``n_spokes k + 1`` records into outliers. Returns ``(X, X_moved)``, each (n_spokes k + 1, dim) float64.
    """
    k, dim, n_spokes = check_positive_int(k, "k"), check_positive_int(dim, "dim"), check_positive_int(n_spokes, "n_spokes")
    if n_spokes > (2 if dim == 1 else 5):
        raise DuckInputError(f"n_spokes={n_spokes} clusters cannot be pairwise > r apart here; use <= {2 if dim == 1 else 5}")
    if dim == 1:
        spokes = torch.tensor([[-1.0], [1.0]], dtype=torch.float64)[:n_spokes]
    else:
        angles = 2 * math.pi * torch.arange(n_spokes, dtype=torch.float64) / n_spokes
        spokes = torch.zeros((n_spokes, dim), dtype=torch.float64)
        spokes[:, 0], spokes[:, 1] = torch.cos(angles), torch.sin(angles)
    # dist_S divides by sqrt(|S|): Euclidean radius r sqrt(dim) is dist_S radius r
    clusters = torch.repeat_interleave(0.99 * check_radius(r) * math.sqrt(dim) * spokes, k, dim=0)
    X = torch.cat([torch.zeros((1, dim), dtype=torch.float64), clusters])
    X_moved = X.clone()
    X_moved[0] = 1000.0 * check_radius(r) * math.sqrt(dim)
    return X, X_moved


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


def _is_index(value: Any) -> bool:
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
    wrong = [i for i in items if not _is_index(i)]
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


def outlier_count(
    X: Any,
    k: int,
    r: float,
    subspace: Iterable[int] | None = None,
    *,
    lsh: LSHNeighbours | Mapping[str, Any] | None = None,
    device: Any = "auto",
) -> int:
    """``q_count(X, k, r, S)``: number of records with fewer than ``k`` other records within ``r`` (eq. 14)."""
    k = check_positive_int(k, "k")
    return int((neighbour_counts(X, r, subspace, lsh=lsh, device=device) < k).sum())


def dp_outlier_count(
    X: Any,
    k: int,
    r: float,
    eps: float,
    delta: float,
    mechanism: str = "smooth",
    subspace: Iterable[int] | None = None,
    *,
    calibration: str = "classic",
    lsh: LSHNeighbours | Mapping[str, Any] | None = None,
    seed: Seed = None,
    device: Any = "auto",
) -> DPRelease:
    """(eps, delta)-DP count of distance-based outliers (paper §4, Scenario 1).

    ``mechanism="global"``: Gaussian noise calibrated to the *upper* bound ``min(N, k K_d + 1)`` of
    Theorem 4 (the lower bound is not a valid calibration). ``mechanism="smooth"``: Gaussian noise scaled
    by ``S/alpha`` with ``S`` the beta-smooth upper bound of :func:`~duck.privacy.smooth_sensitivity.
    smooth_sensitivity_bound` (Theorem 2; needs eps <= 1 and k <= N). Only ``.value`` of the result is
    private; with the smooth mechanism ``.sigma`` is data-dependent and must not be published. ``lsh`` counts
    neighbours with an LSH index (smooth mechanism only; see :class:`LSHNeighbours`). ``calibration``
    ('classic' or 'analytic') applies to the global mechanism; every option is validated before any work.
    """
    from duck.privacy.smooth_sensitivity import smooth_sensitivity_bound

    if not isinstance(mechanism, str) or mechanism not in ("smooth", "global"):
        raise DuckInputError(f"mechanism={mechanism!r} is not supported; use 'smooth' or 'global'")
    calibration = check_calibration(calibration)
    lsh = check_lsh(lsh)
    k = check_positive_int(k, "k")
    r = check_radius(r)
    eps = check_eps(eps)
    delta = check_delta(delta)
    gen = make_generator(seed)
    Xt = as_records(X, device)
    S = check_subspace(subspace, Xt.shape[1])
    if mechanism == "global":
        if lsh is not None:
            raise DuckInputError(
                "the global-sensitivity bound (Theorem 4) does not hold for LSH neighbour counts; "
                "use mechanism='smooth' or exact counts (lsh=None)"
            )
        _, gs_upper = global_sensitivity_bounds(Xt.shape[0], len(S), k)
        gaussian_sigma(gs_upper, eps, delta, calibration)  # refuses eps >= 1 (classic) before counting
        true_count = outlier_count(Xt, k, r, S, device=Xt.device)
        return gaussian_mechanism(true_count, gs_upper, eps, delta, calibration=calibration, seed=gen)
    _, beta = smooth_gaussian_params(eps, delta)
    k = check_k_records(k, Xt.shape[0])
    true_count = outlier_count(Xt, k, r, S, lsh=lsh, device=Xt.device)
    bound = smooth_sensitivity_bound(Xt, k, r, beta, S, lsh=lsh, device=Xt.device)
    return smooth_gaussian_mechanism(true_count, bound, eps, delta, seed=gen)


def all_subspaces(dim: int, size: int) -> list[tuple[int, ...]]:
    """All ``size``-dimensional coordinate subspaces of a ``dim``-dimensional space (the paper's F_c)."""
    dim = check_positive_int(dim, "dim")
    size = check_positive_int(size, "subspace size")
    if size > dim:
        raise DuckInputError(f"subspace size {size} exceeds the data dimension {dim}")
    return list(itertools.combinations(range(dim), size))


def resolve_subspaces(subspaces: int | Sequence[Iterable[int]], dim: int) -> list[tuple[int, ...]]:
    """An int ``c`` (Python or numpy) means all c-dimensional subspaces; otherwise a sequence of index
    sequences, each validated by :func:`check_subspace`."""
    if _is_index(subspaces):
        return all_subspaces(dim, subspaces)
    if isinstance(subspaces, (str, bytes)) or not isinstance(subspaces, Iterable):
        raise DuckInputError(
            f"subspaces={subspaces!r} must be an int c (all c-dim subspaces) or a list of index lists such as "
            "[[0], [1, 2]]"
        )
    resolved = [check_subspace(s, dim) for s in subspaces]
    if not resolved:
        raise DuckInputError("subspaces is empty; pass an int c (all c-dim subspaces) or a list of index lists")
    if len(set(resolved)) != len(resolved):
        raise DuckInputError("subspaces lists the same subspace twice; give each candidate once")
    return resolved


def subspace_outlier_counts(
    X: Any, k: int, r: float, subspaces: int | Sequence[Iterable[int]], *, device: Any = "auto"
) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """True ``q_count`` of every candidate subspace: ``(subspaces, counts (n_subspaces,) int64)``."""
    k = check_positive_int(k, "k")
    r = check_radius(r)
    Xt = as_records(X, device)
    subs = resolve_subspaces(subspaces, Xt.shape[1])
    counts = torch.stack([(neighbour_counts(Xt, r, S, device=Xt.device) < k).sum() for S in subs])
    return subs, counts.cpu()


def subspace_utilities(
    X: Any, k: int, r: float, subspaces: int | Sequence[Iterable[int]], *, device: Any = "auto"
) -> tuple[list[tuple[int, ...]], torch.Tensor]:
    """Utility ``u(S) = q_count(X, k, r, S) / GS_UB_{|S|}(k)`` of every candidate (eq. 51; sensitivity <= 1)."""
    Xt = as_records(X, device)
    subs, counts = subspace_outlier_counts(Xt, k, r, subspaces, device=Xt.device)
    gs_upper = torch.tensor([global_sensitivity_bounds(Xt.shape[0], len(S), k)[1] for S in subs], dtype=torch.float64)
    return subs, counts.double() / gs_upper


def dp_top_subspaces(
    X: Any,
    k: int,
    r: float,
    h: int,
    eps: float,
    subspaces: int | Sequence[Iterable[int]],
    *,
    seed: Seed = None,
    device: Any = "auto",
) -> list[tuple[int, ...]]:
    """eps-DP top-h subspaces holding the most outliers (paper §5.1, Algorithm 3, Scenario 2).

    Utility ``u(S) = q_count(X, k, r, S) / GS_UB_{|S|}(k)`` (eq. 51) has sensitivity <= 1 whatever the
    subspace size (Theorem 7), so each of the h draws without replacement is the exponential mechanism with
    budget eps/h (``exp(eps u / (2h))``) and the whole release is eps-DP. (The paper's ``exp(eps u)``
    parametrisation is 2 eps-DP; ours at eps equals theirs at eps/2.) ``subspaces``: an int c (all
    c-dimensional coordinate subspaces) or a list of coordinate-index lists.
    """
    k = check_positive_int(k, "k")
    r = check_radius(r)
    eps = check_eps(eps)
    gen = make_generator(seed)
    Xt = as_records(X, device)
    subs = resolve_subspaces(subspaces, Xt.shape[1])
    if not _is_index(h) or not 1 <= h <= len(subs):
        raise DuckInputError(f"h={h!r} must be an integer between 1 and the number of candidate subspaces ({len(subs)})")
    _, utility = subspace_utilities(Xt, k, r, subs, device=Xt.device)
    picked = top_h_without_replacement(utility, int(h), eps, 1.0, seed=gen)
    return [subs[i] for i in picked]
