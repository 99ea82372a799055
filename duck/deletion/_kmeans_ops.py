"""Batched torch building blocks shared by the k-means family (k-means++, Q-k-means, DC-k-means).

Everything here is a pure function of its tensor arguments and of an explicit ``torch.Generator``:
no global random state, no Python loop over points. Random numbers are always drawn on the CPU in
float64 and then moved to the data's device, so a given seed produces the same draws on CPU and GPU.
Sampling from a discrete distribution is done by inverse-CDF lookup (``searchsorted`` on a float64
cumulative sum) of those uniforms, which makes every random choice replayable from the stored uniforms.

References: Arthur & Vassilvitskii, *k-means++* (SODA 2007) for the seeding, with the greedy
``n_local_trials`` variant used by scikit-learn; Lloyd (1982) for the iterations; The Q-k-means
quantiser lives with its algorithm in ``qkmeans.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

#: rows per block of the distance / arg-min / sums pass: about 2**19 values of X (measured on a 2-core Xeon, one
#: thread: 100,000 x 25 partitions in 2.6 ms at 16k-row blocks vs 3.0 ms at 4,096; 784-d data is fastest at
#: 2-4k rows), so a block and its (k, b) distances stay cache-friendly and Python overhead stays small
_BLOCK_VALUES, _MIN_BLOCK_ROWS, _MAX_BLOCK_ROWS = 2**19, 4096, 32768


def _block_rows(d: int) -> int:
    """Rows per block for ``d`` features."""
    return int(min(_MAX_BLOCK_ROWS, max(_MIN_BLOCK_ROWS, _BLOCK_VALUES // max(1, d))))

#: cluster sums by a (k, b) membership-matrix product up to this many clusters, by index_add_ above
_ONE_HOT_MAX_K = 8


def derive_seed(*keys: int) -> int:
    """A 63-bit seed derived deterministically from integer ``keys`` (numpy ``SeedSequence``).

    Used for every sub-stream: per-node seeds in DC-k-means, the generator of the i-th re-seeding
    after a deleted k-means++ seed, the i-th baseline retrain.
    """
    state = np.random.SeedSequence([int(k) & 0xFFFFFFFFFFFFFFFF for k in keys]).generate_state(2, np.uint32)
    return int((int(state[0]) << 31) ^ int(state[1])) & 0x7FFFFFFFFFFFFFFF


def make_generator(*keys: int) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed` of ``keys``."""
    return torch.Generator(device="cpu").manual_seed(derive_seed(*keys))


def uniforms(generator: torch.Generator, n: int) -> torch.Tensor:
    """``n`` draws from U[0, 1) as float64 on the CPU."""
    return torch.rand(n, generator=generator, dtype=torch.float64, device="cpu")


def host_take(t: torch.Tensor, index: np.ndarray, dim: int = 0) -> np.ndarray:
    """``t.index_select(dim, index)`` as a host array; a CPU tensor is indexed through its numpy view (a few
    rows of a deletion check: no device-op overhead). Indexing, not ``np.take``: ``np.take`` first copies a
    non-contiguous array whole (the stored rows may be column-major, as the SPN's column gathers are)."""
    if t.is_cpu:
        return t.numpy()[(slice(None),) * dim + (index,)]
    return t.index_select(dim, torch.from_numpy(np.asarray(index)).to(t.device)).cpu().numpy()


def sq_norms(X: torch.Tensor) -> torch.Tensor:
    """Squared row norms ``||x_i||^2``. (n, d) -> (n,)

    ``vecdot``, not ``einsum``: einsum's Python-side parsing costs ~10 us per call, which dominated the
    many small calls of a DC-k-means deletion."""
    return torch.linalg.vecdot(X, X)


def sq_dists(X: torch.Tensor, C: torch.Tensor, x_sqnorm: torch.Tensor | None = None) -> torch.Tensor:
    """Squared Euclidean distances ``||x||^2 - 2 x.c + ||c||^2`` (clamped at 0). (n, d), (k, d) -> (n, k)"""
    if x_sqnorm is None:
        x_sqnorm = sq_norms(X)
    d2 = torch.addmm(sq_norms(C)[None, :], X, C.T, alpha=-2.0)  # (n, k)
    return d2.add_(x_sqnorm[:, None]).clamp_min_(0.0)


def _argmin_workspace(C: torch.Tensor, block_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Buffers of :func:`_block_argmin`: a ``(k, block_rows)`` membership matrix and the ``(2, k)`` matrix
    ``[0, 1, ..., k-1; 1, ..., 1]`` that reads labels and numbers of minima off it."""
    k = C.shape[0]
    index_ones = torch.stack([torch.arange(k, device=C.device), torch.ones(k, device=C.device)]).to(C.dtype)
    return torch.empty(k, block_rows, dtype=C.dtype, device=C.device), index_ones


def _block_argmin(
    xb: torch.Tensor,
    C: torch.Tensor,
    c_sqnorm: torch.Tensor,
    out: tuple[torch.Tensor, torch.Tensor],
    workspace: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """Write ``min_j ||c_j||^2 - 2 x.c_j`` and its arg-min (the first one on ties) for a block of rows into
    ``out``; return the block's ``(k, b)`` membership matrix (1 at the arg-min, in ``xb``'s dtype; a view of
    the workspace, valid until the next call).

    ``torch.min(dim=0)`` / ``argmin`` with indices are slow on CPU for a short reduced axis (measured 1.5 ms
    and 14 ms per 100,000 x 5 values, against 0.07 ms for ``amin``), so the arg-min is read off the
    membership matrix ``D == min``: one small matrix product gives every column's label and its number of
    minima, and the rare ties (> 1 minimum) are resolved to the first index, as ``torch.argmin`` does.
    (b, d) -> (k, b)
    """
    vals, labels = out
    buffer, index_ones = workspace
    dist = torch.addmm(c_sqnorm[:, None], C, xb.T, alpha=-2.0)  # (k, b)
    torch.amin(dist, dim=0, out=vals)
    member = buffer[:, : xb.shape[0]]
    torch.eq(dist, vals[None, :], out=member)  # (k, b) 1.0 where the distance is minimal
    lab_count = index_ones @ member  # (2, b): sum of the minimising indices, number of minima
    labels.copy_(lab_count[0])
    ties = (lab_count[1] > 1.5).nonzero().flatten()
    if len(ties):
        first = dist[:, ties].argmin(dim=0)
        labels[ties] = first
        member[:, ties] = (index_ones[0, :, None] == first[None, :].to(C.dtype)).to(C.dtype)
    return member


def _argmin_blocks(
    X: torch.Tensor, C: torch.Tensor, x_sqnorm: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Iterator[tuple[int, int, torch.Tensor]]]:
    """The blocked arg-min pass shared by :func:`assign` and :func:`partition`.

    Returns ``(labels (n,), partial (n,), x_sqnorm (n,), blocks)``; iterating ``blocks`` fills ``labels`` and
    ``partial`` (``min_j ||c_j||^2 - 2 x.c_j``) block by block and yields ``(start, stop, membership (k, b))``.
    """
    n = X.shape[0]
    if x_sqnorm is None:
        x_sqnorm = sq_norms(X)
    c_sqnorm = sq_norms(C)
    labels = torch.empty(n, dtype=torch.long, device=X.device)
    partial = torch.empty(n, dtype=X.dtype, device=X.device)
    rows = _block_rows(X.shape[1])
    workspace = _argmin_workspace(C, min(n, rows))

    def blocks() -> Iterator[tuple[int, int, torch.Tensor]]:
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            out = (partial[start:stop], labels[start:stop])
            yield start, stop, _block_argmin(X[start:stop], C, c_sqnorm, out, workspace)

    return labels, partial, x_sqnorm, blocks()


def assign(
    X: torch.Tensor, C: torch.Tensor, x_sqnorm: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nearest centroid of every row and its squared distance, in row blocks (bounded memory, in cache).

    The arg-min only needs ``||c||^2 - 2 x.c``; ``||x||^2`` is added to the (n,) minima afterwards.
    (n, d), (k, d) -> labels (n,) int64, min squared distance (n,)
    """
    labels, partial, x_sqnorm, blocks = _argmin_blocks(X, C, x_sqnorm)
    for _ in blocks:
        pass
    return labels, partial.add_(x_sqnorm).clamp_min_(0.0)


@dataclass
class Partition:
    """Nearest-centre partition of the rows and its per-cluster statistics (one pass over the data)."""

    labels: torch.Tensor  # (n,) nearest centre (k for rows excluded by ``active``)
    min_sq_dist: torch.Tensor  # (n,) squared distance to it (0 for excluded rows)
    sums: torch.Tensor  # (k, d) (weighted) sum of the rows of each cluster
    masses: torch.Tensor  # (k,) int64 counts, or sums of weights in the data's dtype


def partition(
    X: torch.Tensor,
    C: torch.Tensor,
    x_sqnorm: torch.Tensor | None = None,
    *,
    weights: torch.Tensor | None = None,
    active: torch.Tensor | None = None,
) -> Partition:
    """Assign every row to its nearest centre and accumulate the cluster sums in the same blocked pass.

    ``active`` (n,) bool excludes rows (label k, distance 0, no contribution): Q-k-means keeps deleted rows
    in storage until compaction. Sums use a (k, b) membership-matrix product per block for small k (fast,
    deterministic on GPU) and ``index_add_`` otherwise. (n, d), (k, d) -> :class:`Partition`
    """
    d = X.shape[1]
    k = C.shape[0]
    one_hot = k <= _ONE_HOT_MAX_K
    sums = torch.zeros(k if one_hot else k + 1, d, dtype=X.dtype, device=X.device)  # row k: excluded rows
    labels, partial, x_sqnorm, blocks = _argmin_blocks(X, C, x_sqnorm)
    for start, stop, member in blocks:
        xb, lab = X[start:stop], labels[start:stop]
        if active is not None:
            inactive = ~active[start:stop]
            lab.masked_fill_(inactive, k)
            member.masked_fill_(inactive[None, :], 0.0)
        wb = None if weights is None else weights[start:stop]
        if one_hot:
            sums.addmm_(member if wb is None else member * wb[None, :], xb)
        else:
            sums.index_add_(0, lab, xb if wb is None else xb * wb[:, None])
    d2 = partial.add_(x_sqnorm).clamp_min_(0.0)
    if active is not None:
        d2.masked_fill_(~active, 0.0)
    if weights is None:
        masses = torch.bincount(labels, minlength=k + 1)[:k]
    else:
        masses = torch.zeros(k + 1, dtype=X.dtype, device=X.device).index_add_(0, labels, weights)[:k]
    return Partition(labels, d2, sums[:k], masses)


def partition_exact(
    X: torch.Tensor, C: torch.Tensor, *, active: torch.Tensor | None = None, block_elems: int = 1 << 22
) -> Partition:
    """:func:`partition` with every distance a sum of squared differences ``sum_j (x_j - c_j)^2`` (no
    ``||x||^2 - 2 x.c + ||c||^2`` expansion, whose rounding grows with ``||x||^2``): a row's distances do not
    depend on the data's offset or on which other rows are stored, so a partition of near-identical rows, or
    of rows far from the origin, is the same in a model after deletions and in a fresh fit. O(n k d) work in
    blocks of about ``block_elems`` numbers; ties go to the first centre. For small k (the SPN's k = 2)."""
    n, d = X.shape
    k = C.shape[0]
    labels = torch.empty(n, dtype=torch.long, device=X.device)
    d2 = torch.empty(n, dtype=X.dtype, device=X.device)
    rows = max(1, block_elems // max(1, k * d))
    for s in range(0, n, rows):
        dist = (X[s : s + rows, None, :] - C[None, :, :]).square_().sum(-1)  # (b, k)
        best = dist.min(1)
        labels[s : s + rows], d2[s : s + rows] = best.indices, best.values
    if active is not None:
        labels.masked_fill_(~active, k)
        d2.masked_fill_(~active, 0.0)
    member = torch.nn.functional.one_hot(labels, k + 1)[:, :k].to(X.dtype)  # (n, k); excluded rows: zeros
    return Partition(labels, d2, member.T @ X, torch.bincount(labels, minlength=k + 1)[:k])


def _inverse_cdf(cum: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Indices ``i`` with ``cum[i-1] <= u * cum[-1] < cum[i]`` (items of zero mass are never returned)."""
    total = cum[-1:]
    idx = torch.searchsorted(cum, u.to(cum.device) * total, right=True)
    last_positive = torch.searchsorted(cum, total)  # first index reaching the total mass
    return torch.minimum(idx, last_positive)


def default_local_trials(k: int) -> int:
    """scikit-learn's number of greedy k-means++ candidates, ``2 + floor(ln k)``."""
    return 2 + int(math.log(k))


def kmeans_plusplus(
    X: torch.Tensor,
    k: int,
    generator: torch.Generator,
    *,
    weights: torch.Tensor | None = None,
    n_local_trials: int | None = None,
    x_sqnorm: torch.Tensor | None = None,
) -> list[int]:
    """Greedy k-means++ seeding (Arthur & Vassilvitskii 2007; scikit-learn's variant). Returns k row indices.

    The first centre is drawn proportionally to ``weights`` (uniformly without weights). Each further
    centre: draw ``n_local_trials`` candidates with probability proportional to ``w(x) D(x)^2`` (D the
    distance to the nearest chosen centre) and keep the candidate that minimises the resulting potential
    ``sum_x w(x) D(x)^2``. ``n_local_trials=1`` is the plain k-means++ of the paper.

    When every remaining point already coincides with a centre (zero potential), the next centre is drawn
    among the not-yet-chosen rows by weight.
    """
    n = X.shape[0]
    if not 1 <= k <= n:
        raise ValueError(f"k-means++ needs 1 <= k <= n, got k={k}, n={n}")
    trials = n_local_trials if n_local_trials is not None else default_local_trials(k)
    if x_sqnorm is None:
        x_sqnorm = sq_norms(X)
    w = None if weights is None else weights.to(torch.float64)
    cum = (
        torch.cumsum(w, 0)
        if w is not None
        else torch.arange(1, n + 1, dtype=torch.float64, device=X.device)
    )
    first = int(_inverse_cdf(cum, uniforms(generator, 1)).item())
    chosen = [first]
    taken = torch.zeros(n, dtype=torch.bool, device=X.device)
    taken[first] = True
    closest = sq_dists(X, X[first : first + 1], x_sqnorm)[:, 0].masked_fill(taken, 0.0)
    for _ in range(1, k):
        potential = closest.to(torch.float64) if w is None else closest.to(torch.float64) * w
        cum = torch.cumsum(potential, 0)
        u = uniforms(generator, trials)
        total = cum[-1].item()
        if not math.isfinite(total):  # sampling would run past the last row; the models refuse such data first
            raise ValueError(f"k-means++: the potential sum w(x) D(x)^2 is {total}; the values overflow {X.dtype}")
        if total <= 0.0:  # all remaining mass sits on chosen centres: pick a fresh row by weight
            free = (~taken).to(torch.float64) if w is None else (~taken).to(torch.float64) * w
            cum_free = torch.cumsum(free, 0)
            if cum_free[-1].item() <= 0.0:
                raise ValueError("k-means++: fewer rows with positive weight than centres requested")
            row = int(_inverse_cdf(cum_free, u[:1]).item())
            new_closest = torch.minimum(closest, sq_dists(X, X[row : row + 1], x_sqnorm)[:, 0])
        else:
            cand = _inverse_cdf(cum, u)  # (trials,)
            cand_d2 = torch.minimum(closest[:, None], sq_dists(X, X[cand], x_sqnorm))  # (n, trials)
            pots = cand_d2.sum(0) if weights is None else (cand_d2 * weights[:, None]).sum(0)  # (trials,)
            best = int(torch.argmin(pots).item())
            row = int(cand[best].item())
            new_closest = cand_d2[:, best]
        chosen.append(row)
        taken[row] = True
        closest = new_closest.masked_fill(taken, 0.0)
    return chosen


@dataclass
class LloydResult:
    centers: torch.Tensor  # (k, d)
    labels: torch.Tensor  # (n,) nearest returned centre
    min_sq_dist: torch.Tensor  # (n,) squared distance to it
    inertia: float  # sum_i w_i * min_sq_dist_i
    n_iter: int  # number of centre updates performed
    converged: bool  # labels stopped changing or the centre shift fell below tol


def lloyd(
    X: torch.Tensor,
    centers: torch.Tensor,
    *,
    max_iter: int,
    tol: float = 0.0,
    weights: torch.Tensor | None = None,
    x_sqnorm: torch.Tensor | None = None,
) -> LloydResult:
    """(Weighted) Lloyd iterations from ``centers``; scikit-learn's stopping rule.

    Each iteration moves each centre to the (weighted) mean of its rows (a centre whose cluster is empty
    stays where it is) and reassigns every row to its nearest centre, the assignment and the next sums in one
    blocked pass. Stops after ``max_iter`` updates, when the labels no longer change (strict convergence) or
    when the squared centre shift ``sum ||c' - c||^2`` is at most ``tol``. The returned labels and inertia
    are those of the returned centres.
    """
    if x_sqnorm is None:
        x_sqnorm = sq_norms(X)
    part = partition(X, centers, x_sqnorm, weights=weights)
    n_iter, converged = 0, False
    for _ in range(max_iter):
        m = part.masses.to(X.dtype)[:, None]  # (k, 1)
        new_centers = torch.where(m > 0, part.sums / m.clamp_min(torch.finfo(X.dtype).tiny), centers)
        shift = float(((new_centers - centers) ** 2).sum().item())
        centers = new_centers
        n_iter += 1
        new_part = partition(X, centers, x_sqnorm, weights=weights)
        if torch.equal(new_part.labels, part.labels):
            part, converged = new_part, True
            break
        part = new_part
        if shift <= tol:
            converged = True
            break
    d2 = part.min_sq_dist
    inertia = float(d2.sum().item() if weights is None else (d2 * weights).sum().item())
    return LloydResult(centers, part.labels, d2, inertia, n_iter, converged)


def sklearn_tol(X: torch.Tensor, tol: float) -> float:
    """scikit-learn's absolute tolerance: ``tol`` times the mean per-feature variance of ``X``."""
    if tol == 0.0:
        return 0.0
    return float(tol * X.var(dim=0, unbiased=False).mean().item())
