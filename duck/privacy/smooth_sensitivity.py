r"""beta-smooth upper bound on the local sensitivity of the outlier count (Okada et al., seeds/004 §4.2-4.3).

Notation (paper eqs. 19-21, 30-32): ``deg(x)`` is the number of other records within ``r`` of ``x``;
``V(j)`` the records of degree exactly ``j``; for a level ``j`` and ``t >= 0`` the *band*
``P_t^j = U_{i=-t..t} V(j+i) = {x : |deg(x) - j| <= t}``; ``M(P) = max_{c in R^d} |B(c, r) ∩ P|`` the
largest number of points of ``P`` one closed ball of radius ``r`` can hold. Theorem 6 and Proposition 1:

    LS^(t)(X) <= A_t(X) := min(N, max(M(P_t^k), M(P_t^{k-1})) + t + 1),

and the smooth sensitivity ``S*(X) = max_t e^{-beta t} LS^(t)(X)`` (eq. 29) is bounded by
``S(X) = max_{t>=0} e^{-beta t} A_t(X)``.

The paper evaluates ``M`` by enumerating subsets with smallest-enclosing-ball tests (Algorithm 1,
exponential; kept here as :func:`max_ball_count_exact` for reference and tests). We replace ``M`` with a
polynomial-time bound ``f``:

    f(P) = 1 + degeneracy(G_{2r}(P))   (0 for empty P),

where ``G_{2r}(P)`` joins two points of ``P`` at distance ``<= 2r`` and the degeneracy is the largest
minimum degree over its subgraphs (computed by peeling minimum-degree vertices, O(|P|^2)).

**Proof that f is an upper bound.** Let ``C = B(c, r) ∩ P``. Any two points of ``C`` are within ``2r`` of
each other (both lie within ``r`` of ``c``), so ``C`` is a clique of ``G_{2r}(P)``. In the subgraph induced
by a clique every vertex has degree ``|C| - 1``, so ``degeneracy >= |C| - 1`` and ``f(P) >= |C|``. Taking
the maximum over centres ``c``: ``f(P) >= M(P)``. Hence ``A_t`` computed with ``f`` is still an upper bound
on ``LS^(t)`` and ``S(X) >= S*(X) >= LS(X)`` (Definition 4, eq. 6). (In 1-d, ``G_{2r}`` is an interval
graph, which is chordal, so ``f = M`` exactly there.)

**Proof that S is beta-smooth (eq. 7).** Two properties of ``f``:
(i) *monotone*: ``P ⊆ Q => f(P) <= f(Q)`` (every subgraph of ``G_{2r}(P)`` is one of ``G_{2r}(Q)``);
(ii) *insertion-Lipschitz*: ``f(P ∪ {y}) <= f(P) + 1`` (in a subgraph ``H`` containing ``y``, ``H - y`` is a
subgraph of ``G_{2r}(P)`` and has a vertex of degree ``<= degeneracy(G_{2r}(P))``; adding ``y`` raises that
degree by at most one). Let ``X' `` be ``X`` with one record ``x0`` replaced. For every other record ``y``,
removing ``x0`` and adding its replacement change ``deg(y)`` by at most 1, so ``|deg_X(y) - j| <= t`` implies
``|deg_X'(y) - j| <= t + 1``: ``P_t^j(X) \ {x0} ⊆ P_{t+1}^j(X')``. By (ii) then (i),
``f(P_t^j(X)) <= f(P_t^j(X) \ {x0}) + 1 <= f(P_{t+1}^j(X')) + 1``, hence ``A_t(X) <= A_{t+1}(X')`` and

    S(X) = max_t e^{-beta t} A_t(X) <= max_t e^{-beta t} A_{t+1}(X') = e^{beta} max_{t>=1} e^{-beta t} A_t(X')
         <= e^{beta} S(X').

(The centre-restricted bound ``max_{p in P} |B(p, 2r) ∩ P|`` is an upper bound too but violates (ii): a
record moved into the middle of a sparse ring becomes a centre that sees the whole ring. That is why the
clique/degeneracy form is used.)

**Early stopping (Algorithm 2, Proposition 2) returns S(X) exactly.** After evaluating ``f`` at ``t = T``,
(i) and (ii) give ``f(P_t^j) <= f(P_T^j) + |P_t^j \ P_T^j|`` for ``t > T`` (the ``U_T^(t)`` of eq. 48), and
``A_t <= N``. The loop skips every ``t`` whose bound ``e^{-beta t} min(N, ...)`` cannot exceed the running
maximum and stops when no later ``t`` can; skipped terms cannot change the maximum, so the value returned is
the deterministic function ``S(X)`` above and the smoothness proof applies to it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from duck.errors import DuckInputError
from duck.privacy.neighbours import (
    LSHNeighbours,
    as_records,
    check_k_records,
    check_lsh,
    check_subspace,
    count_within,
    neighbour_counts,
    squared_radius,
    subspace_coordinates,
)
from duck.utils import check_number, check_positive_int, check_radius, real_array_tensor


def degeneracy(adjacency: torch.Tensor | np.ndarray) -> int:
    """Degeneracy of a simple graph given as a symmetric (n, n) bool matrix without self-loops (-1 if n = 0).

    Matula & Beck (1983) peeling: repeatedly delete a vertex of minimum remaining degree; the degeneracy
    is the largest degree seen at deletion. n numpy steps of O(n) each (O(n^2), no per-edge Python work).
    """
    adj = adjacency.cpu().numpy() if isinstance(adjacency, torch.Tensor) else np.asarray(adjacency)
    n = adj.shape[0]
    if n == 0:
        return -1
    adj = adj.astype(np.int32, copy=False)
    remaining = adj.sum(1).astype(np.int64)  # (n,) degree among the vertices not yet deleted
    deleted = np.int64(4 * n + 4)  # larger than any degree even after the decrements below
    level = 0
    for _ in range(n):
        v = int(np.argmin(remaining))
        level = max(level, int(remaining[v]))
        remaining -= adj[v]  # neighbours lose one (deleted vertices stay far above any real degree)
        remaining[v] = deleted
    return level


def within_graph(points: torch.Tensor, radius: float, *, radius2: float | None = None) -> torch.Tensor:
    """(n, n) bool adjacency: distinct points at Euclidean distance <= radius (squared distance <= ``radius2``
    when given: exact for integer data). points (n, d)."""
    diff = points[:, None, :] - points[None, :, :]  # (n, n, d)
    adj = diff.square().sum(-1) <= (radius * radius if radius2 is None else radius2)
    adj.fill_diagonal_(False)
    return adj


def point_set(points: Any, name: str = "points") -> torch.Tensor:
    """Points as a float64 (n, d) tensor (n may be 0; torch input stays on its device).

    A 1-D array is refused rather than guessed at (n values of dimension 1 or one point of dimension n?):
    pass ``points.reshape(-1, 1)`` for n points on a line. Non-numeric, complex, boolean or non-finite
    input raises :class:`DuckInputError`.
    """
    P = real_array_tensor(points, name, "(n, d)")
    if P.ndim != 2 or P.shape[1] == 0:
        raise DuckInputError(
            f"{name} must be a 2-D (n, d) array with d >= 1, got shape {tuple(P.shape)}; "
            "for n points on a line pass points.reshape(-1, 1)"
        )
    P = P.to(torch.float64)
    if not torch.isfinite(P).all():
        raise DuckInputError(f"{name} contains NaN or inf values; clean or drop those points")
    return P


def ball_count_upper_bound(points: Any, r: float) -> int:
    """``f(P) = 1 + degeneracy(G_2r(P))`` >= the most points one radius-r ball holds (module docstring).

    ``points`` (n, d), ``n >= 0`` (0 for an empty set); ``r`` a finite radius > 0.
    """
    r = check_radius(r)
    P = point_set(points)
    if P.shape[0] == 0:
        return 0
    return _ball_count_upper_bound2(P, r * r)


def _ball_count_upper_bound2(P: torch.Tensor, r2: float) -> int:
    """:func:`ball_count_upper_bound` for a squared radius ``r2`` (the 2r graph: squared distance <= 4 r2)."""
    return 1 + degeneracy(within_graph(P, 0.0, radius2=4.0 * r2))


def smallest_enclosing_ball(points: np.ndarray) -> tuple[np.ndarray | None, float]:
    """Centre and radius of the smallest ball enclosing ``points`` (m, d) (Welzl 1991; for small m only);
    ``(None, -1.0)`` for no points."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2:
        raise DuckInputError(f"points must be an (m, d) array, got shape {pts.shape}")
    dim = pts.shape[1]

    def circumball(support: list[np.ndarray]) -> tuple[np.ndarray | None, float]:
        if not support:
            return None, -1.0
        p0 = support[0]
        if len(support) == 1:
            return p0.copy(), 0.0
        A = np.stack(support[1:]) - p0  # (m-1, d)
        gram = A @ A.T
        lam = np.linalg.lstsq(2.0 * gram, np.diag(gram), rcond=None)[0]
        centre = p0 + lam @ A
        return centre, float(np.linalg.norm(centre - p0))

    def welzl(n: int, support: list[np.ndarray]) -> tuple[np.ndarray | None, float]:
        if n == 0 or len(support) == dim + 1:
            return circumball(support)
        centre, radius = welzl(n - 1, support)
        p = pts[n - 1]
        if centre is not None and np.linalg.norm(p - centre) <= radius * (1 + 1e-12) + 1e-12:
            return centre, radius
        return welzl(n - 1, support + [p])

    return welzl(len(pts), [])


def max_ball_count_exact(points: Any, r: float, max_points: int = 20) -> int:
    """``M(P)``: largest subset of ``P`` enclosed by a ball of radius ``r`` -- the paper's Algorithm 1.

    Depth-first enumeration of subsets with smallest-enclosing-ball tests, pruning supersets of a subset
    that does not fit (``seb(C1) <= seb(C2)`` for ``C1 ⊆ C2``). Exponential in |P|: reference for tests.
    ``points`` (n, d) as for :func:`ball_count_upper_bound`.
    """
    r = check_radius(r)
    max_points = check_positive_int(max_points, "max_points", 0)
    P = point_set(points).cpu().numpy()
    if len(P) > max_points:
        raise DuckInputError(
            f"max_ball_count_exact enumerates subsets of {len(P)} points (exponential); it accepts at most "
            f"{max_points}. Use ball_count_upper_bound for larger sets"
        )
    best = 0

    def explore(chosen: list[int], i: int) -> None:
        nonlocal best
        if chosen and smallest_enclosing_ball(P[chosen])[1] > r * (1 + 1e-12):
            return
        best = max(best, len(chosen))
        if i == len(P) or len(chosen) + (len(P) - i) <= best:
            return
        explore(chosen + [i], i + 1)
        explore(chosen, i + 1)

    explore([], 0)
    return best


class _BandGraph:
    """Records ordered by their distance to the bands; 2r-adjacency grown lazily for the prefix in use."""

    def __init__(self, coords: torch.Tensor, band_distance: torch.Tensor, r2: float) -> None:
        self.order = torch.argsort(band_distance, stable=True)
        self.sorted_band = band_distance[self.order].cpu()
        self.coords = coords[self.order]  # (N, d) in band order
        self.radius2 = 4.0 * r2  # within 2r: squared distance <= (2r)^2 = 4 r2
        self.adjacency = np.zeros((0, 0), dtype=bool)  # (m, m) for the first m records, on the CPU

    def prefix_adjacency(self, t: int) -> tuple[np.ndarray, torch.Tensor]:
        """Adjacency of the records whose band distance is <= t, and their original indices."""
        n = int(torch.searchsorted(self.sorted_band, torch.tensor(t, device="cpu"), right=True))
        m = self.adjacency.shape[0]
        if n > m:
            grown = np.zeros((n, n), dtype=bool)
            grown[:m, :m] = self.adjacency
            rows = max(1, (1 << 22) // max(1, n * self.coords.shape[1]))  # block of ~4M differences
            for s in range(m, n, rows):
                block = self.coords[s : min(n, s + rows)]  # (b, d)
                diff = block[:, None, :] - self.coords[None, :n, :]  # (b, n, d)
                cross = (diff.square().sum(-1) <= self.radius2).cpu().numpy()  # (b, n)
                grown[s : s + len(block), :n] = cross
                grown[:n, s : s + len(block)] = cross.T
            np.fill_diagonal(grown, False)
            self.adjacency = grown
        return self.adjacency[:n, :n], self.order[:n]


@dataclass(frozen=True)
class SmoothBoundDetails:
    """Diagnostics of :func:`smooth_sensitivity_bound` (data-dependent: never publish them)."""

    bound: float
    argmax_t: int
    local_sensitivity_bound: int
    last_t: int
    n_evaluations: int


def smooth_sensitivity_bound(
    X: Any,
    k: int,
    r: float,
    beta: float,
    subspace: Any = None,
    *,
    ball_count: str = "clique",
    lsh: LSHNeighbours | Mapping[str, Any] | None = None,
    device: Any = "auto",
    return_details: bool = False,
) -> float | SmoothBoundDetails:
    """``S(X) = max_t e^{-beta t} A_t(X)`` with Algorithm 2's early stopping (module docstring for proofs).

    ``ball_count="clique"`` uses the polynomial bound ``f``; ``"exact"`` uses the paper's exponential
    enumeration (tiny data only; for tests). ``lsh``: degrees from an LSH index (the bound stays valid and
    beta-smooth, see :class:`~duck.privacy.neighbours.LSHNeighbours`). Returns a float or
    :class:`SmoothBoundDetails`.

    ``k`` is an integer in ``[1, N]``; ``beta`` any finite number > 0. The work does not grow with
    ``1/beta``: ``A_t = N`` for ``t >= N - 1``, so ``t`` never needs to go beyond ``N - 1``.
    """
    k = check_positive_int(k, "k")
    r = check_radius(r)
    beta = check_number(beta, "beta", 0.0, True)
    if not isinstance(ball_count, str) or ball_count not in ("clique", "exact"):
        raise DuckInputError(f"ball_count={ball_count!r} is not supported; use 'clique' or 'exact'")
    lsh = check_lsh(lsh)
    Xt = as_records(X, device)
    k = check_k_records(k, Xt.shape[0])
    S = check_subspace(subspace, Xt.shape[1])
    coords = subspace_coordinates(Xt, S)  # (N, |S|): dist_S <= r  <=>  squared distance <= r2
    r2 = squared_radius(r, S)
    n_records = coords.shape[0]
    degree = neighbour_counts(Xt, r, S, lsh=lsh, device=Xt.device)  # (N,)
    levels = (k, k - 1)
    band_dist = {j: (degree - j).abs() for j in levels}  # (N,) each
    # |V_t(j)| for t = 0 .. N - 1 (the only t Algorithm 2 visits: t <= last below) at index t
    cumulative = {j: torch.bincount(band_dist[j], minlength=n_records).cumsum(0).cpu() for j in levels}
    graph = _BandGraph(coords, torch.minimum(band_dist[k], band_dist[k - 1]), r2)

    cache: dict[tuple[int, int], int] = {}  # f depends on the band set only, i.e. on (level, its size)

    def f_band(j: int, t: int) -> int:
        key = (j, int(band_size(j, t)))
        if key not in cache:
            adjacency, members = graph.prefix_adjacency(t)
            in_band = (band_dist[j][members] <= t).cpu().numpy()
            if ball_count == "exact":
                cache[key] = max_ball_count_exact(coords[members[torch.from_numpy(in_band).to(members.device)]],
                                                  math.sqrt(r2))
            else:
                cache[key] = 1 + degeneracy(adjacency[np.ix_(in_band, in_band)])
        return cache[key]

    def band_size(j: int, t: int | torch.Tensor) -> torch.Tensor:
        return cumulative[j][t]  # on the CPU, as every t below (never torch's default device: it may be a GPU)

    best, argmax_t, ls0, n_eval = 0.0, 0, 0, 0
    reference: tuple[int, int, int] | None = None
    last = n_records - 1  # A_t = N for t >= N - 1 (f >= 0): later terms e^{-beta t} N are no larger
    t = 0
    while True:
        if t > last or (best > 0 and n_records * math.exp(-beta * t) <= best):
            break  # A_t <= N: no later term can exceed the running maximum
        if reference is not None:
            T, fk_T, fk1_T = reference
            horizon = math.log(n_records / best) / beta  # N e^{-beta t'} <= best beyond (inf for tiny beta)
            t_end = max(t, last if horizon >= last else math.ceil(horizon))
            ts = torch.arange(t, t_end + 1, device="cpu")
            grow_k = band_size(k, ts) - band_size(k, T)
            grow_k1 = band_size(k - 1, ts) - band_size(k - 1, T)
            upper = torch.clamp(torch.maximum(fk_T + grow_k, fk1_T + grow_k1) + ts + 1, max=n_records)
            tail = torch.exp(-beta * ts.double()) * upper.double()
            exceeds = (tail > best).nonzero().flatten()
            if exceeds.numel() == 0:
                break  # Proposition 2: sup_{t' >= t} of the bound is <= the running maximum
            t = int(ts[exceeds[0]])  # terms before it cannot raise the maximum
        fk, fk1 = f_band(k, t), f_band(k - 1, t)
        n_eval += 1
        a_t = min(n_records, max(fk, fk1) + t + 1)
        if t == 0:
            ls0 = a_t
        value = math.exp(-beta * t) * a_t
        if value > best:
            best, argmax_t = value, t
        reference = (t, fk, fk1)
        t += 1
    if return_details:
        return SmoothBoundDetails(best, argmax_t, ls0, t, n_eval)
    return best


def local_sensitivity_bound(X: Any, k: int, r: float, subspace: Any = None, *, device: Any = "auto") -> int:
    """``A_0(X) = min(N, max(f(V(k)), f(V(k-1))) + 1)`` >= LS(X) (Theorem 5 with the clique bound)."""
    k = check_positive_int(k, "k")
    r = check_radius(r)
    Xt = as_records(X, device)
    S = check_subspace(subspace, Xt.shape[1])
    coords = subspace_coordinates(Xt, S)
    r2 = squared_radius(r, S)
    degree = count_within(coords, coords, r2) - 1
    fs = [_ball_count_upper_bound2(coords[degree == j], r2) for j in (k, k - 1)]
    return min(coords.shape[0], max(fs) + 1)


__all__ = [
    "SmoothBoundDetails",
    "ball_count_upper_bound",
    "degeneracy",
    "local_sensitivity_bound",
    "max_ball_count_exact",
    "point_set",
    "smallest_enclosing_ball",
    "smooth_sensitivity_bound",
    "within_graph",
]
