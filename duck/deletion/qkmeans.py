"""Q-k-means: quantised Lloyd iterations with an exact, usually O(T k d) deletion (seeds/000 §4.1, Alg. 1).

Algorithm (ALGORITHMS.md §5), data ``X`` (n, d), parameters k, T, gamma, eps:

1. k-means++ seeding ``c^0`` (seed rows stored by stable id); partition ``pi^0 = pi(c^0)``, loss ``L^0``.
2. For tau = 1..T: means of ``pi^{tau-1}``; every gamma-imbalanced cluster (size ``s < m = gamma n / k``)
   is pulled toward its previous centroid, ``c_j <- (s/m) c_j + (1 - s/m) c_j^{tau-1}`` (= ``S_j/m +
   (1 - s/m) c_j^{tau-1}`` with ``S_j`` the cluster sum, which also covers empty clusters); quantise with a
   fresh phase, ``c^tau = Q(c; eps, theta_tau)``; ``pi^tau = pi(c^tau)``; ``L^tau`` its loss. Accept if
   ``L^tau < L^{tau-1}``, else stop. The model is the last accepted ``c^tau``.
3. Metadata per iteration (Alg. 1 "save state"): ``c^tau``, phase ``theta_tau``, the partitions, their sizes
   and *sums*, the imbalance flags, the losses and hence the accept/stop decisions.
4. Delete ``x``: if ``x`` is a seed, retrain. Otherwise recompute, for every stored iteration, the sums and
   sizes without ``x`` (``S - x``, ``s - 1``: the exact leave-one-out mean ``(s c - x)/(s - 1)``), the balance
   correction with the new ``n``, re-quantise with the stored phases, and the losses without ``x``'s terms.
   If every quantised centroid, imbalance flag and accept/stop decision is unchanged, the model *is* the
   fit on ``X \\ x`` with the same seeds and phases: update the metadata and keep the centroids. Otherwise
   retrain, restarting at the first iteration whose decision changed (earlier iterations are provably
   identical), which is the same computation as a fresh fit replaying the seeds and phases.

Exactness statement (tested): after any sequence of ``delete`` calls, the model equals
``QKMeans(same parameters).fit(X_remaining, ids=remaining_ids, replay=model.random_state_)``.

Randomness. One ``torch.Generator(seed)`` draws, in this order, the T phases (T, d), the phase of the
``eps`` grid, and the k-means++ seeds. ``random_state_`` holds all of it (seed ids, phases, eps phase,
re-seed counter). When a deletion removes a seed the model is retrained on the remaining rows as the paper
says (ALGORITHMS.md §5.4): all k seeds are drawn afresh (none kept: the seeds drawn after x depend on x)
from the generator ``(seed, 1, i)`` for the i-th such re-seeding; the phases, which do not depend on the
data, are never redrawn.

Parameter heuristics (no tuning; reasoning in docs/kmeans.md):

* ``n_local_trials = 2 (2 + floor(ln k))``: greedy k-means++ with twice scikit-learn's candidates. Q-k-means
  stops at the first quantised step that does not lower the loss, so unlike a long Lloyd run it cannot
  repair a poor seeding; more candidates make poor seedings rare at the cost of k extra distance columns.
* ``gamma = 0.2`` (the authors' value): clusters at least 1/5 of the average size are untouched; smaller
  ones are damped, which bounds any centroid's leave-one-out shift by ``||c - x|| / m`` instead of
  ``||c - x|| / s``.
* ``eps = "auto"``: ``eps = rho * sigma_hat`` with ``sigma_hat^2 = L^0 / (2 n d)`` (per-coordinate spread: a
  point's expected squared distance to a random member of its cluster is twice the variance) and
  ``rho = eps_scale = 0.5``. The quantisation error is uniform on ``[-eps/2, eps/2)^d``, adding
  ``n d eps^2 / 12`` to a loss of about ``n d sigma^2``: a ~2 % loss increase, while a deletion moves a
  centroid by ``~0.8 d sigma / s`` in L1 and so changes its lattice cell with probability ``~1.6 d / s`` per
  iteration. ``sigma_hat`` depends on the data, so ``eps`` is itself quantised, on a half-octave grid of
  ``log2 eps`` with a stored random phase, and the deletion check verifies that it stays in its cell.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from duck.deletion._kmeans_base import DeletableKMeansBase, dtype_name
from duck.deletion._kmeans_ops import (
    Partition,
    default_local_trials,
    host_take,
    kmeans_plusplus,
    make_generator,
    partition,
    partition_exact,
    sq_norms,
    uniforms,
)
from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int, int64_array, real_array_tensor

#: width of the grid on which log2(eps) is quantised when eps="auto" (half an octave)
_LOG2_EPS_STEP = 0.5
#: generator tag for re-seeding after a deleted seed: make_generator(seed, _RESEED_TAG, i)
_RESEED_TAG = 1


def balanced_means(sums: Any, sizes: Any, prev_centers: Any, m: float) -> Any:
    """Cluster means with the gamma-balance correction of seeds/000 §4.1 (numpy or torch arrays).

    For ``s >= m``: ``S / s``. For ``s < m`` (imbalanced, including empty): ``(s/m)(S/s) + (1 - s/m) c_prev``,
    written as ``S/m + (1 - s/m) c_prev``. Shapes: sums (..., k, d), sizes (..., k, 1), prev (..., k, d).
    """
    if isinstance(sums, np.ndarray) and not (sizes < m).any():
        return sums / sizes  # no cluster is imbalanced (the usual deletion check): the same values, 2 ops
    where = torch.where if isinstance(sums, torch.Tensor) else np.where
    corrected = sums / m + (1.0 - sizes / m) * prev_centers
    return where(sizes < m, corrected, sums / sizes.clip(min=1.0))


def lattice_cells(c: Any, eps: float, phase: Any) -> Any:
    """Index of the random-phase eps-lattice cell of ``c``: ``round(c / eps + theta - 1/2)`` (numpy or torch).

    The quantiser of seeds/000 §4.1 (Appendix B) is ``Q(c) = eps * (cell - (theta - 1/2))``: the nearest
    vertex of the lattice ``eps * (Z^d - theta + 1/2)``; with ``theta ~ U[0, 1)^d`` the error ``Q(c) - c`` is
    uniform on ``[-eps/2, eps/2)^d`` whatever ``c`` is (dithering).
    """
    return (c / eps + (phase - 0.5)).round()


def lattice_point(cells: Any, eps: float, phase: Any) -> Any:
    """``Q(c) = eps * (cell - (theta - 1/2))`` from the cell index (see :func:`lattice_cells`)."""
    return eps * (cells - (phase - 0.5))


@dataclass
class _Verdict:
    """Outcome of the exact deletion check (computed without modifying anything)."""

    keep: bool  # True: the model is unchanged, only the statistics below move
    reason: str  # "" | "seed" | "eps" | "imbalance" | "centroid" | "decision"
    restart: int  # first iteration to recompute when not keep (1..T)
    new_sizes: np.ndarray | None = None  # (T1, k) sizes of pi^0..pi^{T1-1} without the rows
    new_sums: np.ndarray | None = None  # (T1, k, d)
    new_losses: np.ndarray | None = None  # (T1+1,) L^0..L^{T1}


def check_replay_draws(
    replay: Any, n_clusters: int, n_iter: int, d: int | None = None, name: str = "replay"
) -> tuple[np.ndarray, torch.Tensor, float, int]:
    """The draws of a ``QKMeans.random_state_`` dict, checked: ``(seed ids, phases (n_iter, d) float64 CPU,
    eps_phase, n_reseeds)``. ``d=None`` accepts any number of features (a caller that does not know the
    rows yet); whether the seed rows exist is the fit's check. DuckInputError naming ``name`` otherwise."""
    if not isinstance(replay, Mapping):
        raise DuckInputError(f"{name} must be a QKMeans.random_state_ dict, got {type(replay).__name__}")
    missing = {"seed_ids", "phases", "eps_phase", "n_reseeds"} - set(replay)
    if missing:
        raise DuckInputError(f"{name} must be a QKMeans.random_state_ dict; missing keys {sorted(missing)}")
    seed_ids = int64_array(replay["seed_ids"], f"{name}['seed_ids']")
    if seed_ids.size != n_clusters or np.unique(seed_ids).size != seed_ids.size:
        raise DuckInputError(
            f"{name} holds seeds {seed_ids.tolist()} but n_clusters={n_clusters}; "
            "replay the random_state_ of a model with the same k"
        )
    phases = real_array_tensor(replay["phases"], f"{name}['phases']", "(n_iter, n_features)")
    if phases.ndim != 2 or phases.shape[0] != n_iter or phases.shape[1] == 0 or d not in (None, phases.shape[1]):
        raise DuckInputError(
            f"{name} phases have shape {tuple(phases.shape)} but n_iter={n_iter}"
            + ("" if d is None else f" and X has {d} features")
            + "; replay the random_state_ of a model with the same options"
        )
    phases = phases.to(device="cpu", dtype=torch.float64)
    outside = ~((phases >= 0) & (phases < 1))  # NaN is outside too
    if bool(outside.any()):
        raise DuckInputError(
            f"{name}['phases'] must be uniform draws in [0, 1), got {phases[outside][:5].tolist()}; "
            "replay the random_state_ of a QKMeans"
        )
    eps_phase = check_number(replay["eps_phase"], f"{name}['eps_phase']", 0.0, False, 1.0, True)
    n_reseeds = check_positive_int(replay["n_reseeds"], f"{name}['n_reseeds']", 0)
    return seed_ids, phases, eps_phase, n_reseeds


class QKMeans(DeletableKMeansBase):
    """Quantised k-means (Ginart et al., NeurIPS 2019, Alg. 1) with exact deletion.

    Args:
        n_clusters: k.
        n_iter: T, the maximum number of quantised Lloyd iterations (paper: 10).
        gamma: balance parameter in (0, 1); clusters smaller than ``gamma * n / k`` are damped.
        eps: lattice width, a finite positive number, or "auto" (see the module docstring). ``fit`` refuses a
            width (given or resolved) that the data cannot use: finer than the dtype resolves at ``max |x|``,
            coarser than ``max |x|`` over that resolution, or overflowing the squared distances.
        eps_scale: rho in ``eps = rho * sigma_hat`` when ``eps="auto"`` (a finite positive number).
        n_local_trials: greedy k-means++ candidates per seed; None -> ``2 (2 + floor(ln k))``, twice
            scikit-learn's number (see the module docstring); 1 -> the paper's plain k-means++.
        seed, device, dtype: randomness root, "auto"/"cpu"/"cuda", float32/float64 (float64 makes the
            replay equality bit-exact; in float32 it holds up to the rounding of the cluster sums).

    Attributes: ``cluster_centers_`` (k, d), ``labels_`` (rows of ``ids_``), ``inertia_``, ``n_iter_``
    (accepted iterations), ``eps_``, ``seed_ids_``, ``random_state_``, ``n_retrains_`` (deletion requests that
    needed a retrain), ``last_deletion_`` (what the last ``delete`` did), ``metadata_``.

    Storage: the rows and the T+1 partitions (O(T n)) live on ``device``; the per-iteration statistics
    (O(T k d)) live on the CPU as float64 numpy arrays so that the deletion check is a few microsecond-scale
    array operations whatever the device.
    """

    _name = "QKMeans"

    def __init__(
        self,
        n_clusters: int = 8,
        *,
        n_iter: int = 10,
        gamma: float = 0.2,
        eps: float | str = "auto",
        eps_scale: float = 0.5,
        n_local_trials: int | None = None,
        seed: int = 0,
        device: str | torch.device | None = "auto",
        dtype: Any = torch.float32,
    ) -> None:
        super().__init__(n_clusters, seed, device, dtype, n_local_trials)
        self.n_iter = check_positive_int(n_iter, "n_iter")
        self.gamma = check_number(gamma, "gamma", 0.0, True, 1.0, True)
        if isinstance(eps, str) and eps == "auto":
            self.eps: float | str = eps
        else:
            try:
                self.eps = check_number(eps, "eps", 0.0, True)
            except DuckInputError:
                raise DuckInputError(f"eps must be 'auto' or a finite number > 0, got {eps!r}") from None
        #: the fit checks that the resolved eps suits the data and dtype (see :meth:`_check_lattice`)
        self.eps_scale = check_number(eps_scale, "eps_scale", 0.0, True)
        if self.n_local_trials is None:
            self.n_local_trials = 2 * default_local_trials(self.n_clusters)

    # ------------------------------------------------------------------------------------------------ fit
    def fit(self, X: Any, *, ids: Any = None, replay: dict[str, Any] | None = None) -> QKMeans:
        """Train on ``X`` (n, d) with stable row ids ``ids`` (default ``0..n-1``).

        ``replay``: the ``random_state_`` of a QKMeans with the same parameters; the fit then uses its seed
        ids (all must be among ``ids``), phases, eps phase and re-seed counter instead of drawing new ones.
        This is the "fresh fit replaying the random draws" that a model after deletions equals.
        """
        Xt = self._as_data(X, min_rows=self.n_clusters, copy=True, summed=True)
        row_ids = self._as_fit_ids(ids, Xt.shape[0])
        d = Xt.shape[1]
        if replay is None:
            generator = make_generator(self.seed)
            phases = uniforms(generator, self.n_iter * d).reshape(self.n_iter, d)
            eps_phase = float(uniforms(generator, 1).item())
            seed_rows = kmeans_plusplus(Xt, self.n_clusters, generator, n_local_trials=self.n_local_trials)
            n_reseeds = 0
        else:
            seed_rows, phases, eps_phase, n_reseeds = self._parse_replay(replay, row_ids, d)
        with self._fit_transaction():  # the eps check needs the seed loss: a refused eps restores the model
            self._store_rows(Xt, row_ids)
            self._phases64 = phases  # (T, d) float64 CPU tensor: the stored draws
            self._phases = phases.to(device=self.device, dtype=self.dtype)  # (T, d) as used on the device
            self._phases_np = self._phases.cpu().numpy().astype(np.float64)  # (T, d) same values, for the check
            self._eps_phase = eps_phase
            self._n_reseeds = n_reseeds
            self._seed_rows = [int(r) for r in seed_rows]
            self.n_retrains_ = 0
            self._last_deletion: dict[str, Any] | None = None
            self._x_sqnorm = sq_norms(self._X)  # (N,) reused by every partition
            self._allocate_history()
            self._run_from(1, check_eps=True)
        return self

    def _parse_replay(
        self, replay: dict[str, Any], row_ids: np.ndarray, d: int
    ) -> tuple[list[int], torch.Tensor, float, int]:
        seed_ids, phases, eps_phase, n_reseeds = check_replay_draws(replay, self.n_clusters, self.n_iter, d)
        order = np.argsort(row_ids, kind="stable")
        pos = np.searchsorted(row_ids[order], seed_ids).clip(max=row_ids.size - 1)
        found = row_ids[order][pos] == seed_ids
        if not found.all():
            raise DuckInputError(
                f"replay seed ids {seed_ids[~found].tolist()} are not among the ids of X; "
                "a replayed fit needs every stored seed row"
            )
        return order[pos].tolist(), phases.clone(), eps_phase, n_reseeds

    def _allocate_history(self) -> None:
        """Per-iteration metadata of Alg. 1, tau = 0..T (entries beyond the last computed one are unused)."""
        T, k, (n, d) = self.n_iter, self.n_clusters, self._X.shape
        self._labels_hist = torch.zeros(T + 1, n, dtype=torch.long, device=self.device)  # pi^tau (device)
        self._centers_np = np.zeros((T + 1, k, d))  # c^0 = seeds, c^tau = Q(...) quantised centroids
        self._cells_np = np.zeros((T + 1, k, d))  # lattice cell indices of c^tau (tau >= 1)
        self._sizes_np = np.zeros((T + 1, k))  # |pi^tau_j|, for tau < n_computed
        self._sums_np = np.zeros((T + 1, k, d))  # sum of the rows of pi^tau_j, for tau < n_computed
        self._losses_np = np.zeros(T + 1)  # L^tau
        self._flags_np = np.zeros((T + 1, k), dtype=bool)  # imbalance flags used by iteration tau (tau >= 1)
        self._accepted_np = np.zeros(T + 1, dtype=bool)  # decision of iteration tau (tau >= 1)

    def _auto_eps(self, seed_loss: float, n: int) -> float:
        """``eps = rho * sigma_hat``, rounded on a randomly phased half-octave grid of log2(eps).

        A product that underflows to 0 or overflows is returned as is (0.0 / inf): :meth:`_check_lattice`
        refuses it at fit.
        """
        d = self._X.shape[1]
        sigma2 = seed_loss / (2.0 * n * d)
        raw = self.eps_scale * math.sqrt(sigma2) if sigma2 > 0 else self.eps_scale
        if not 0.0 < raw < math.inf:
            return raw
        shift = self._eps_phase - 0.5
        exponent = _LOG2_EPS_STEP * (round(math.log2(raw) / _LOG2_EPS_STEP + shift) - shift)
        return float(2.0**exponent) if exponent < 1024 else math.inf

    def _check_lattice(self, eps: float) -> None:
        """Refuse a lattice width the stored rows and the dtype cannot use (run inside fit's transaction, once
        the seed loss that ``eps="auto"`` needs is known).

        Usable: ``max|x| * r <= eps <= max|x| / r`` with ``r`` the dtype's resolution (``torch.finfo.eps``):
        finer, the cell index ``x / eps`` is beyond the integers the dtype resolves and the lattice no longer
        quantises (the phase is rounded away); coarser, ``x / eps`` is below the phase's resolution and every
        centroid falls on the lattice point nearest the origin. Also, squared distances to lattice points
        (at most ``eps`` per coordinate from their centroid) summed over the rows must stay finite.
        """
        fi = torch.finfo(self.dtype)
        n, d = self._X.shape
        largest = max(float(self._X.max()), -float(self._X.min()))  # max |x| without an (n, d) temporary
        lo = max(fi.tiny, largest * fi.eps)
        overflow = (math.sqrt(fi.max / (4.0 * n)) - math.sqrt(float(self._x_sqnorm.max()))) / math.sqrt(d)
        hi = min(largest / fi.eps, overflow) if largest > 0 else overflow
        if lo <= eps <= hi:
            return
        given = f"eps={eps!r} is" if self.eps != "auto" else f"eps_scale={self.eps_scale} gives eps={eps:.3g},"
        raise DuckInputError(
            f"{given} outside the lattice widths [{lo:.3g}, {hi:.3g}] usable for this X "
            f"(max |x| = {largest:.3g}) in {dtype_name(self.dtype)}: a finer lattice is below the dtype's "
            "resolution, a coarser one collapses every centroid to one point or overflows; "
            "choose eps in that range (typically a fraction of the clusters' spread)"
            + (" or a different eps_scale" if self.eps == "auto" else "")
        )

    def _partition(self, centers: torch.Tensor) -> Partition:
        """Nearest centroid of every current row with the cluster sums and sizes, one pass. Deleted rows
        (kept in storage until compaction) get label k, contribute nothing and add 0 to the loss."""
        active = None
        if self._n_alive < self._alive.size:
            active = torch.from_numpy(self._alive).to(self.device)
        if self.exact_distances:
            return partition_exact(self._X, centers, active=active)
        return partition(self._X, centers, self._x_sqnorm, active=active)

    def _run_from(self, tau0: int, check_eps: bool = False) -> None:
        """Quantised Lloyd (Alg. 1) from iteration ``tau0`` on the current rows; iterations < tau0 are kept.

        The partition of ``c^{tau0-1}`` is recomputed from scratch, so this is the same computation as a
        fresh replayed fit from that iteration on. ``check_eps`` (fit): refuse an unusable lattice width.
        """
        k, T, n = self.n_clusters, self.n_iter, self._n_alive
        if tau0 == 1:
            self._centers_np[0] = self._X[self._seed_rows].cpu().numpy()
        centers = torch.from_numpy(self._centers_np[tau0 - 1]).to(
            device=self.device, dtype=self.dtype
        )  # (k, d)
        part = self._partition(centers)  # pi^{tau0-1}
        loss = float(part.min_sq_dist.sum())
        self._labels_hist[tau0 - 1] = part.labels
        self._losses_np[tau0 - 1] = loss
        if tau0 == 1:
            self._eps = self._auto_eps(loss, n) if self.eps == "auto" else float(self.eps)
            if check_eps:
                self._check_lattice(self._eps)
        m = self.gamma * n / k
        self._n_accepted = T
        for tau in range(tau0, T + 1):
            sizes = part.masses.to(self.dtype)[:, None]  # (k, 1) sizes of pi^{tau-1}
            phase = self._phases[tau - 1]  # (d,)
            cells = lattice_cells(balanced_means(part.sums, sizes, centers, m), self._eps, phase)  # (k, d)
            q = lattice_point(cells, self._eps, phase)  # (k, d) quantised centroids c^tau
            new_part = self._partition(q)  # pi^tau
            new_loss = float(new_part.min_sq_dist.sum())
            self._labels_hist[tau] = new_part.labels
            self._sums_np[tau - 1], self._sizes_np[tau - 1] = (
                part.sums.cpu().numpy(),
                part.masses.cpu().numpy(),
            )
            self._centers_np[tau], self._cells_np[tau] = q.cpu().numpy(), cells.cpu().numpy()
            self._losses_np[tau], self._flags_np[tau] = new_loss, (sizes[:, 0] < m).cpu().numpy()
            self._accepted_np[tau] = new_loss < loss
            self._n_computed = tau
            if not new_loss < loss:  # early termination (Alg. 1): the quantised step did not improve the loss
                self._n_accepted = tau - 1
                break
            centers, part, loss = q, new_part, new_loss

    # ------------------------------------------------------------------------------------------- deletion
    def _check(self, rows: np.ndarray) -> _Verdict:
        """Exact deletion check for removing ``rows`` together (pure: reads state only).

        Vectorised over the T_run stored iterations: O(T k d) work on the CPU metadata plus one gather of
        the rows and their T_run+1 labels from the device.
        """
        if not set(rows.tolist()).isdisjoint(self._seed_rows):
            return _Verdict(False, "seed", 1)
        T1, k = self._n_computed, self.n_clusters
        x = np.asarray(host_take(self._X, rows), dtype=np.float64)  # (r, d)
        lab = host_take(self._labels_hist, rows, dim=1)[: T1 + 1]  # (T1+1, r) cluster of each row in pi^tau
        centers = self._centers_np[: T1 + 1]  # (T1+1, k, d)
        iteration = np.arange(T1 + 1)
        diff = x[None] - centers[iteration[:, None], lab]  # (T1+1, r, d)
        new_losses = self._losses_np[: T1 + 1] - (diff * diff).sum(axis=(1, 2))  # (T1+1,)
        if rows.size == 1:  # one row (UnlearnSPN's requests): subtract it from its cluster, no one-hot product
            at = (iteration[:T1], lab[:T1, 0])
            new_sizes, new_sums = self._sizes_np[:T1].copy(), self._sums_np[:T1].copy()
            new_sizes[at] -= 1.0
            new_sums[at] -= x[0]  # the same values as the product below (x times exact ones and zeros)
        else:
            member = (lab[:T1, :, None] == np.arange(k)).astype(np.float64)  # (T1, r, k)
            new_sizes = self._sizes_np[:T1] - member.sum(1)  # (T1, k)
            new_sums = self._sums_np[:T1] - np.swapaxes(member, 1, 2) @ x  # (T1, k, d)
        new_sums[new_sizes == 0] = 0.0  # an emptied cluster sums to exactly zero, as in a fresh fit
        n_new = self._n_alive - rows.size
        if self.eps == "auto" and self._auto_eps(float(new_losses[0]), n_new) != self._eps:
            return _Verdict(False, "eps", 1, new_sizes, new_sums, new_losses)
        m = self.gamma * n_new / k
        flags_ok = ((new_sizes < m) == self._flags_np[1 : T1 + 1]).all(1)  # (T1,)
        means = balanced_means(new_sums, new_sizes[..., None], centers[:T1], m)  # (T1, k, d)
        cells = lattice_cells(means, self._eps, self._phases_np[:T1, None])  # (T1, k, d)
        cells_ok = (cells == self._cells_np[1 : T1 + 1]).reshape(T1, -1).all(1)  # (T1,)
        decisions_ok = (new_losses[1:] < new_losses[:-1]) == self._accepted_np[1 : T1 + 1]  # (T1,)
        if (flags_ok & cells_ok & decisions_ok).all():
            return _Verdict(True, "", 0, new_sizes, new_sums, new_losses)
        ok = np.stack([flags_ok, cells_ok, decisions_ok])  # (3, T1)
        first = int(np.flatnonzero(~ok.all(0))[0])
        reason = ("imbalance", "centroid", "decision")[int(np.flatnonzero(~ok[:, first])[0])]
        return _Verdict(False, reason, first + 1, new_sizes, new_sums, new_losses)

    def deletion_changes_model(self, ids: Any) -> bool:
        """True when deleting ``ids`` (together) would need a retrain; no side effects."""
        rows = self._rows_to_delete(ids)
        return rows.size > 0 and not self._check(rows).keep

    def delete(self, ids: Any) -> bool:
        """Delete rows by stable id (one request; several ids are removed together).

        Returns True when the request needed a retrain (``n_retrains_`` counts these), False when the exact
        check proved the model unchanged. ``last_deletion_`` records the reason and the restart iteration.
        """
        rows = self._rows_to_delete(ids)
        if rows.size == 0:
            return False
        verdict = self._check(rows)
        # iterations before the restart point are unchanged: their statistics just lose the deleted rows
        done = self._n_computed if verdict.keep else verdict.restart - 1
        if verdict.new_sums is not None and done > 0:
            self._sizes_np[:done], self._sums_np[:done] = verdict.new_sizes[:done], verdict.new_sums[:done]
            n_losses = done + 1 if verdict.keep else done
            self._losses_np[:n_losses] = verdict.new_losses[:n_losses]
        self._mark_deleted(rows)
        if not verdict.keep:
            self._retrain(verdict)
        self._last_deletion = {
            "n_ids": int(rows.size),
            "retrained": not verdict.keep,
            "reason": verdict.reason,
            "restart_iteration": verdict.restart,
        }
        return not verdict.keep

    def _mark_deleted(self, rows: np.ndarray) -> None:
        """Also erase what Q-k-means derived from the rows: their squared norms and their cluster in every
        stored partition (label k, as a recomputed partition gives masked rows)."""
        super()._mark_deleted(rows)
        if self._x_sqnorm.is_cpu:
            self._x_sqnorm.numpy()[rows] = 0.0
            self._labels_hist.numpy()[:, rows] = self.n_clusters
        else:
            rows_dev = torch.from_numpy(rows).to(self._x_sqnorm.device)
            self._x_sqnorm[rows_dev] = 0.0
            self._labels_hist[:, rows_dev] = self.n_clusters

    def _retrain(self, verdict: _Verdict) -> None:
        """Rerun from ``verdict.restart``; a deleted seed restarts from iteration 1 with all k seeds drawn
        afresh on the remaining rows (ALGORITHMS.md §5.4: "retrain on X∖x").

        Deleted rows stay in storage (masked out) until they are half of it; then the rows are compacted.
        """
        if 2 * self._n_alive < self._alive.size:
            n_old = self._alive.size
            keep = self._compact()
            keep_dev = torch.from_numpy(keep).to(self.device)
            self._labels_hist, self._x_sqnorm = self._labels_hist[:, keep_dev], self._x_sqnorm[keep_dev]
            new_row = np.full(n_old, -1, dtype=np.int64)
            new_row[keep] = np.arange(keep.size)
            self._seed_rows = [int(new_row[r]) for r in self._seed_rows]
        if verdict.reason == "seed":
            generator = make_generator(self.seed, _RESEED_TAG, self._n_reseeds)
            self._n_reseeds += 1
            # all k seeds redrawn, none kept: seeds drawn after x were drawn relative to a set holding x
            alive = self._alive_rows()
            drawn = kmeans_plusplus(self._X[alive], self.n_clusters, generator, n_local_trials=self.n_local_trials)
            rows = alive.cpu().numpy()
            self._seed_rows = [int(rows[p]) for p in drawn]
        self._run_from(verdict.restart)
        self.n_retrains_ += 1

    # ------------------------------------------------------------------------------------------ accessors
    @property
    def cluster_centers_(self) -> torch.Tensor:
        """(k, d) quantised centroids of the last accepted iteration (the seeds if none was accepted)."""
        self._check_fitted()
        return torch.from_numpy(self._centers_np[self._n_accepted]).to(device=self.device, dtype=self.dtype)

    @property
    def labels_(self) -> torch.Tensor:
        """(n,) cluster of every row of ``ids_`` (the partition of the final centroids)."""
        self._check_fitted()
        if self._labels_hist.is_cpu:  # through the numpy view: no device-op overhead
            return torch.from_numpy(self._labels_hist.numpy()[self._n_accepted][self._alive])
        return self._labels_hist[self._n_accepted][self._alive_rows()]

    @property
    def inertia_(self) -> float:
        """k-means loss of the model on its current rows."""
        self._check_fitted()
        return float(self._losses_np[self._n_accepted])

    @property
    def eps_(self) -> float:
        """The lattice width in use (``eps``, or the one ``eps="auto"`` resolved to)."""
        self._check_fitted()
        return self._eps

    @property
    def last_deletion_(self) -> dict[str, Any] | None:
        """What the last ``delete`` did: ``n_ids``, ``retrained``, ``reason``, ``restart_iteration`` (None
        before any deletion)."""
        self._check_fitted()
        return self._last_deletion

    @property
    def n_iter_(self) -> int:
        """Number of accepted quantised iterations."""
        self._check_fitted()
        return self._n_accepted

    @property
    def seed_ids_(self) -> torch.Tensor:
        """Stable ids of the k-means++ seeds, in seeding order."""
        self._check_fitted()
        return torch.from_numpy(self._ids[self._seed_rows])

    @property
    def random_state_(self) -> dict[str, Any]:
        """Every random draw, for ``fit(..., replay=...)``: seed ids, phases, eps phase, re-seed count."""
        self._check_fitted()
        return {
            "seed_ids": self.seed_ids_.clone(),
            "phases": self._phases64.clone(),
            "eps_phase": self._eps_phase,
            "n_reseeds": self._n_reseeds,
        }

    @property
    def metadata_(self) -> dict[str, Any]:
        """Alg. 1's saved state for tau = 0..T_run: centroids and their lattice cells, losses, flags and
        decisions of iterations 1..T_run, the sizes and sums of the partitions they used (current rows)."""
        self._check_fitted()
        T1 = self._n_computed
        return {
            "centers": self._centers_np[: T1 + 1].copy(),
            "cells": self._cells_np[1 : T1 + 1].copy(),
            "losses": self._losses_np[: T1 + 1].copy(),
            "flags": self._flags_np[1 : T1 + 1].copy(),
            "accepted": self._accepted_np[1 : T1 + 1].copy(),
            "sizes": self._sizes_np[:T1].copy(),
            "sums": self._sums_np[:T1].copy(),
            "labels": self._labels_hist[: T1 + 1][:, self._alive_rows()].cpu().numpy(),
            "n_accepted": self._n_accepted,
        }
