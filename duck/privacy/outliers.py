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
from typing import Any

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
from duck.privacy.neighbours import (
    LSHNeighbours,
    as_records,
    check_k_records,
    check_lsh,
    check_subspace,
    is_index,
    neighbour_counts,
)
from duck.privacy.smooth_sensitivity import smooth_sensitivity_bound
from duck.utils import check_positive_int, check_radius

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
    if is_index(subspaces):
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
    gs_upper = torch.tensor([global_sensitivity_bounds(Xt.shape[0], len(S), k)[1] for S in subs], dtype=torch.float64,
                            device="cpu")  # beside the counts (never torch's default device: it may be a GPU)
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
    if not is_index(h) or not 1 <= h <= len(subs):
        raise DuckInputError(f"h={h!r} must be an integer between 1 and the number of candidate subspaces ({len(subs)})")
    _, utility = subspace_utilities(Xt, k, r, subs, device=Xt.device)
    picked = top_h_without_replacement(utility, int(h), eps, 1.0, seed=gen)
    return [subs[i] for i in picked]
