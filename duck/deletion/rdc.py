"""Randomized Dependence Coefficient (Lopez-Paz, Hennig & Schölkopf, NIPS 2013) for all variable pairs at
once.

RDC of two variables ``x`` and ``y`` observed on n rows (paper §2, Eq. 5):

1. copula transform: every column is replaced by its empirical CDF, ``P(u_i) = #{j : u_j <= u_i} / n``
   (paper §2.1; ties share the largest rank, as ``scipy.stats.rankdata(method="max") / n``);
2. k random non-linear features of the transformed variable, ``phi(x) = sin((s / (D + 1)) [P(x), 1] W)`` with
   ``W ~ N(0, 1)^{(D+1) x k}`` (paper §2.2; the ``s / (D+1)`` scaling and the appended constant follow the
   reference code and SPFlow, ``D`` being the number of copula columns of the variable);
3. the largest canonical correlation between ``phi(x)`` and ``phi(y)`` (paper §2.3):
   ``rdc(x, y) = sigma_max(Cxx^{-1/2} Cxy Cyy^{-1/2})``.

A categorical variable with ``K`` declared categories enters as its K one-hot columns (D = K), each
copula-transformed, as SPFlow's ``rdc_transformer(ohe=True)`` does; a Gaussian variable as one column (D = 1).

Everything is batched over the variables of a node: the whitened features are one tensor ``(V, r, n)``, the
canonical correlations of all V(V-1)/2 pairs come from one Gram matrix of those features and one batched
symmetric eigensolve. The random projections are an explicit argument so that a sum-product network can store
them per node and re-evaluate the RDC after a removal with the same draws (seeds/001 §5); and
:func:`components_still_hold` certifies, from a spanning forest and the cross-component pairs only, that the
dependency components did not change; :func:`rdc_lower_bounds` certifies a single component without any
eigendecomposition, from canonical directions stored at an earlier evaluation (:func:`canonical_directions`).

Numerics. ``Cxx`` is whitened through its eigendecomposition; directions with an eigenvalue below
``EIG_RCOND`` times the largest are dropped (pseudo-inverse square root). With ``s = 1/6`` the k sine
features of one variable are nearly collinear (they are smooth functions of a rank in [0, 1]), so this rank
truncation is what keeps the CCA well posed; it plays the role of SPFlow's search for the largest usable k.

Defaults ``k = 10``, ``s = 1/6``, ``f = sin``, independence threshold 0.3 are SPFlow's
(``get_split_cols_RDC_py(threshold=0.3, k=10, s=1/6, non_linearity=np.sin)``), the implementation the
removal-enabled LearnSPN of seeds/001 builds on; Lopez-Paz et al. use k = 20 and the same s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TypeVar

import numpy as np
import torch

ArrayT = TypeVar("ArrayT", torch.Tensor, np.ndarray)

#: eigenvalues of a feature covariance below this fraction of its largest are treated as zero
EIG_RCOND = 1e-10


def ecdf_counts(U: torch.Tensor) -> torch.Tensor:
    """``#{j : u_j <= u_i}`` of every entry within its column (int64). (n, m) -> (n, m)

    One sort per column: the count of a sorted entry is the index of the last entry of its run of ties + 1,
    found with a reversed running minimum, then scattered back to the original positions.
    """
    n = U.shape[0]
    values, order = U.sort(dim=0)  # (n, m)
    run_end = torch.ones_like(values, dtype=torch.bool)  # last entry of a run of equal values
    run_end[:-1] = values[1:] != values[:-1]
    position = torch.arange(n, device=U.device)[:, None].expand_as(values)
    last = torch.where(run_end, position, torch.full_like(position, n)).flip(0).cummin(0).values.flip(0)
    return torch.empty_like(order).scatter_(0, order, last + 1)


def ecdf(U: torch.Tensor) -> torch.Tensor:
    """Empirical CDF of every entry within its column, ``#{j : u_j <= u_i} / n``. (n, m) -> (n, m)"""
    return ecdf_counts(U).to(U.dtype) / U.shape[0]


def ecdf_counts_after_removal(counts: ArrayT, kept: ArrayT, removed: ArrayT) -> ArrayT:
    """The ECDF counts of the kept rows once ``removed`` rows are gone, without sorting.

    ``counts`` (m, c) are the kept rows' counts on the old rows (kept and removed together), ``kept`` (m, c)
    and ``removed`` (l, c) their values: every removed value ``<=`` a kept value lowered its count by one, so
    ``counts - #{removed u <= u_i}`` -- integers (of ``counts``' dtype), equal to :func:`ecdf_counts` of
    ``kept``. O(l m c) work instead of a sort: the unlearning path of a node (seeds/001 Alg. 2) loses one row at
    a time. Torch tensors or numpy arrays (the host path of the CPU).
    """
    for row in removed:  # one (m, c) comparison per removed row: no (l, m, c) temporary
        below = row[None] <= kept
        # numpy subtracts a bool array as 0/1 in counts' integer dtype
        counts = counts - (below if isinstance(below, np.ndarray) else below.to(counts.dtype))
    return counts


def draw_projections(
    generator: torch.Generator, n_categories: Sequence[int], k: int, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """Random projection ``W_v ~ N(0, 1)^{(D_v+1) x k}`` of every variable, in one (V, Dmax+1, k) CPU tensor.

    Row 0 multiplies the appended constant 1, rows 1..D_v the copula columns; rows beyond D_v are zero so that
    padding changes nothing. Drawn in one call from ``generator`` (float64 on the CPU), so a seed gives the
    same projections on any device.
    """
    dims = np.maximum(np.asarray(n_categories, dtype=np.int64), 1)  # D_v
    d_max = int(dims.max())
    W = torch.randn(len(dims), d_max + 1, k, generator=generator, dtype=torch.float64, device="cpu")
    used = torch.arange(d_max + 1, device="cpu")[None, :] <= torch.from_numpy(dims)[:, None]  # (V, Dmax+1)
    return (W * used[:, :, None]).to(dtype)


def _scaled_projections(
    projections: torch.Tensor, dims: np.ndarray, scale: float, like: torch.Tensor
) -> torch.Tensor:
    """``(s / (D_v + 1)) W_v`` on the data's device and dtype. -> (V, Dmax+1, k)"""
    factor = torch.as_tensor(scale / (dims + 1.0), dtype=like.dtype, device=like.device)  # (V,)
    return projections.to(device=like.device, dtype=like.dtype) * factor[:, None, None]


def _gaussian_features(x: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """``sin(W_0 + P(x) W_1)`` of Gaussian variables. x (n, Vg), W (Vg, Dmax+1, k) scaled -> (n, Vg, k)"""
    return torch.addcmul(W[:, 0][None], ecdf(x)[:, :, None], W[:, 1][None]).sin_()


def category_tables(codes: ArrayT, W: ArrayT) -> tuple[ArrayT, ArrayT]:
    """Feature value of every category of every categorical variable, and the category counts.

    The ECDF of the indicator column of category j is ``q_j = (n - n_j) / n`` where the indicator is 0 and 1
    where it is 1, so a row of category c has ``[1, P(x)] W = W_0 + sum_j q_j W_j + (1 - q_c) W_c``: the
    features take only K distinct values per variable. codes (n, Vc), W (Vc, Dmax+1, k) scaled
    -> tables (Vc, Dmax, k), counts (Vc, Dmax) (padded categories: count 0, q = 1, W = 0). Torch tensors, or
    numpy arrays for a host path (``rdc_taylor``).
    """
    n, Vc = codes.shape
    d_max = W.shape[1] - 1
    if isinstance(codes, np.ndarray):
        flat = (codes + d_max * np.arange(Vc)).ravel()  # (variable, category) of every entry
        counts = np.bincount(flat, minlength=Vc * d_max).reshape(Vc, d_max).astype(W.dtype)
    else:
        counts = torch.zeros(Vc, d_max, dtype=W.dtype, device=W.device)
        counts.scatter_add_(1, codes.T, torch.ones(Vc, n, dtype=W.dtype, device=W.device))
    q = (n - counts) / n  # (Vc, Dmax)
    base = W[:, :1] + q[:, None, :] @ W[:, 1:]  # (Vc, 1, k): W_0 + sum_j q_j W_j
    angles = base + (1.0 - q)[:, :, None] * W[:, 1:]
    return (np.sin(angles) if isinstance(angles, np.ndarray) else angles.sin_()), counts


def random_features(
    X: torch.Tensor, n_categories: Sequence[int], projections: torch.Tensor, scale: float
) -> torch.Tensor:
    """``sin((s / (D_v + 1)) [P(x_v), 1] W_v)`` for every variable v (steps 1-2). X (n, V) -> (n, V, k)"""
    n, V = X.shape
    cats = np.asarray(n_categories, dtype=np.int64)
    W = _scaled_projections(projections, np.maximum(cats, 1), scale, X)  # (V, Dmax+1, k)
    F = torch.empty(n, V, W.shape[2], dtype=X.dtype, device=X.device)
    gauss, categorical = np.flatnonzero(cats == 0), np.flatnonzero(cats > 0)
    if gauss.size:
        g = torch.from_numpy(gauss).to(X.device)
        F[:, g] = _gaussian_features(X[:, g], W[g])
    if categorical.size:
        c = torch.from_numpy(categorical).to(X.device)
        codes = X[:, c].long()  # (n, Vc)
        tables, _ = category_tables(codes, W[c])
        F[:, c] = tables[torch.arange(c.numel(), device=X.device)[None, :], codes]
    return F


def _whitening(cov: torch.Tensor, rcond: float = EIG_RCOND) -> tuple[torch.Tensor, torch.Tensor]:
    """``Cxx^{-1/2}`` of every variable on its top-r eigen-directions, and their eigenvalues.
    (V, k, k) -> P (V, k, r), eigenvalues (V, r) (0 in a dropped column)

    Directions whose eigenvalue is not above ``rcond`` times the largest (all, for a constant variable) are
    zeroed (an exact tie is dropped); ``r`` is the largest number kept by any variable (the sine features of a
    Gaussian variable span about 3 usable directions, so this shrinks the pairwise step ~10x).
    """
    evals, evecs = torch.linalg.eigh(cov)  # (V, k), (V, k, k) ascending
    top = evals[:, -1:].clamp_min(0.0)  # (V, 1)
    keep = (evals > rcond * top) & (top > 0)  # (V, k)
    inv_sqrt = torch.where(
        keep, evals.clamp_min(torch.finfo(cov.dtype).tiny).rsqrt(), torch.zeros_like(evals)
    )
    r = max(int(keep.sum(dim=1).max()), 1)
    return (evecs * inv_sqrt[:, None, :])[:, :, -r:], torch.where(keep, evals, 0.0)[:, -r:]


@dataclass
class Features:
    """Centred random features of a node's variables, kept factorised: Gaussian variables as per-row features,
    categorical ones as one value per category plus the rows' codes (their features take only K distinct
    values). Either raw, ``phi(x_v) - mean`` (r = k, ``whitening`` None: :func:`centred_features`), or
    whitened, ``Z_v = Cxx_v^{-1/2} (phi(x_v) - mean)`` (:meth:`whitened`, :func:`whiten`).

    ``dense()`` lays every variable out per row, (V, r, n); :func:`rdc_pairs` reads categorical pairs off
    their contingency tables instead, ``Z_i Z_j^T = T_i N_ij T_j^T`` with ``N_ij`` the (K, K) co-occurrence
    counts, so a pair costs O(n) integer work instead of O(r^2 n) flops on gathered rows.
    """

    n: int
    gauss: np.ndarray  # positions of the Gaussian variables
    categorical: np.ndarray  # positions of the categorical variables
    Zg: torch.Tensor | None  # (Vg, r, n)
    z_tables: torch.Tensor | None  # (Vc, r, Dmax) feature value of every category
    codes: torch.Tensor | None  # (Vc, n) int64
    gauss_counts: torch.Tensor | None  # (n, Vg) ECDF counts of the Gaussian variables (kept for updates)
    cat_counts: torch.Tensor | None = None  # (Vc, Dmax) rows per category
    whitening: torch.Tensor | None = None  # (V, k, r) the P_v = Cxx_v^{-1/2} applied (None: raw features)
    eigenvalues: torch.Tensor | None = None  # (V, r) eigenvalue of Cxx_v behind each column of P_v (0: dropped)

    @property
    def n_vars(self) -> int:
        return int(self.gauss.size + self.categorical.size)

    @property
    def rank(self) -> int:
        return int((self.Zg if self.Zg is not None else self.z_tables).shape[1])

    @cached_property
    def _slot(self) -> tuple[np.ndarray, np.ndarray]:
        """(is categorical, index within its kind) of every variable position (computed once)."""
        is_cat = np.zeros(self.n_vars, dtype=bool)
        is_cat[self.categorical] = True
        index = np.empty(self.n_vars, dtype=np.int64)
        index[self.gauss], index[self.categorical] = np.arange(self.gauss.size), np.arange(self.categorical.size)
        return is_cat, index

    def rows(self, variables: np.ndarray) -> torch.Tensor:
        """Per-row whitened features of ``variables`` (positions), (len, r, n)."""
        variables = np.asarray(variables, dtype=np.int64)
        is_cat, index = self._slot
        if not is_cat[variables].any():
            return self._gauss_rows(index[variables])
        if is_cat[variables].all():
            return self._categorical_rows(index[variables])
        ref = self.Zg if self.Zg is not None else self.z_tables
        out = torch.empty(variables.size, self.rank, self.n, dtype=ref.dtype, device=ref.device)
        for mask, fill in ((~is_cat[variables], self._gauss_rows), (is_cat[variables], self._categorical_rows)):
            if mask.any():
                out[torch.from_numpy(np.flatnonzero(mask)).to(ref.device)] = fill(index[variables[mask]])
        return out

    def _gauss_rows(self, index: np.ndarray) -> torch.Tensor:
        return self.Zg.index_select(0, torch.from_numpy(index).to(self.Zg.device))

    def _categorical_rows(self, index: np.ndarray) -> torch.Tensor:
        i = torch.from_numpy(index).to(self.z_tables.device)
        tables, codes = self.z_tables.index_select(0, i), self.codes.index_select(0, i)  # (m, r, D), (m, n)
        return torch.gather(tables, 2, codes[:, None, :].expand(-1, self.rank, -1))

    def projected(self, comb: Combinations) -> torch.Tensor:
        """Per-row values ``coef_i^T Z_{v_i}`` of the linear combinations ``comb`` (laid out for variables of
        this kind: :meth:`Combinations.of`). -> (m, n)

        A categorical variable's table is projected first (K values), then read per row; the Gaussian
        combinations are applied without gathering (m, r, n) features: stacked per variable (padded to the
        largest count) and applied in one batched product over ``Zg``."""
        parts = []
        if comb.gauss_at is not None:
            parts.append((comb.gauss_sel, torch.bmm(comb.gauss_stack, self.Zg)[comb.gauss_at]))  # (mg, n)
        if comb.cat_index is not None:
            values = torch.bmm(comb.cat_coef, self.z_tables.index_select(0, comb.cat_index))[:, 0]  # (mc, Dmax)
            parts.append((comb.cat_sel, torch.gather(values, 1, self.codes.index_select(0, comb.cat_index))))
        if len(parts) == 1:
            return parts[0][1]
        out = torch.empty(comb.size, self.n, dtype=comb.coef.dtype, device=comb.coef.device)
        for sel, values in parts:
            out[sel] = values
        return out

    def sq_sums(self) -> torch.Tensor:
        """``sum_rows |Z_v|^2`` of every variable, (V,) (``(n - 1) tr(Cxx_v)`` for raw features)."""
        by_kind = self.sq_sums_by_kind()
        is_cat, index = self._slot
        at = np.where(is_cat, self.gauss.size + index, index)
        return by_kind.index_select(0, torch.from_numpy(at).to(by_kind.device))

    def sq_sums_by_kind(self) -> torch.Tensor:
        """:meth:`sq_sums` of the Gaussian variables, then of the categorical ones, (Vg + Vc,)."""
        parts = []
        if self.gauss.size:
            parts.append(torch.linalg.vector_norm(self.Zg, dim=(1, 2)) ** 2)
        if self.categorical.size:
            per_category = (self.z_tables * self.z_tables).sum(1)  # (Vc, Dmax)
            parts.append((per_category * self.cat_counts).sum(1))
        return parts[0] if len(parts) == 1 else torch.cat(parts)

    def dense(self) -> torch.Tensor:
        """All variables per row, (V, r, n), variable-major."""
        if self.categorical.size == 0:
            return self.Zg
        return self.rows(np.arange(self.n_vars))

    def pair_blocks(self, pairs: np.ndarray) -> torch.Tensor:
        """The (r, r) blocks ``Z_i Z_j^T / (n - 1)`` of the pairs (P, 2) of variable positions. -> (P, r, r)"""
        pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        is_cat, index = self._slot
        both = is_cat[pairs].all(1)
        if self.z_tables is not None and self.z_tables.shape[2] ** 2 > self.rank * self.n:
            both[:] = False  # many categories: the (K, K) tables cost more than the rows (r K^2 vs r^2 n flops)
        ref = self.Zg if self.Zg is not None else self.z_tables
        out = torch.empty(pairs.shape[0], self.rank, self.rank, dtype=ref.dtype, device=ref.device)
        denom = max(self.n - 1, 1)
        if both.any():
            sel = pairs[both]
            out[torch.from_numpy(np.flatnonzero(both)).to(ref.device)] = self._contingency_blocks(
                index[sel[:, 0]], index[sel[:, 1]]
            ) / denom
        if not both.all():
            sel = pairs[~both]
            out[torch.from_numpy(np.flatnonzero(~both)).to(ref.device)] = _cross_blocks(
                self.rows(sel[:, 0]), self.rows(sel[:, 1])
            )
        return out

    def covariances(self) -> torch.Tensor:
        """``Cxx_v`` of every variable's features, (V, r, r) (categorical ones from the category counts)."""
        ref = self.Zg if self.Zg is not None else self.z_tables
        cov = torch.empty(self.n_vars, self.rank, self.rank, dtype=ref.dtype, device=ref.device)
        denom = max(self.n - 1, 1)
        if self.gauss.size:
            cov[torch.from_numpy(self.gauss).to(ref.device)] = torch.bmm(self.Zg, self.Zg.mT) / denom
        if self.categorical.size:
            cov[torch.from_numpy(self.categorical).to(ref.device)] = (
                torch.bmm(self.z_tables * self.cat_counts[:, None, :], self.z_tables.mT) / denom
            )
        return cov

    def whitened(self, rcond: float = EIG_RCOND) -> Features:
        """The features whitened per variable (step 3's ``Cxx^{-1/2}``, eigen-directions not above ``rcond``
        times the largest eigenvalue dropped); raw features only."""
        if self.whitening is not None:
            raise ValueError("these features are already whitened")
        P, evals = _whitening(self.covariances(), rcond)  # (V, k, r), (V, r)
        dev = P.device
        Zg = torch.bmm(P[torch.from_numpy(self.gauss).to(dev)].mT, self.Zg) if self.gauss.size else None
        z_tables = (
            torch.bmm(P[torch.from_numpy(self.categorical).to(dev)].mT, self.z_tables)
            if self.categorical.size
            else None
        )
        return Features(
            self.n, self.gauss, self.categorical, Zg, z_tables, self.codes, self.gauss_counts, self.cat_counts,
            P, evals,
        )

    def _contingency_blocks(self, a: np.ndarray, b: np.ndarray) -> torch.Tensor:
        """``T_a N_ab T_b^T`` for categorical pairs (a, b) (indices among the categorical variables)."""
        device = self.codes.device
        D = self.z_tables.shape[2]
        ia, ib = torch.from_numpy(a).to(device), torch.from_numpy(b).to(device)
        offset = torch.arange(a.size, device=device)[:, None] * (D * D)
        keys = offset + self.codes.index_select(0, ia) * D + self.codes.index_select(0, ib)  # (P, n)
        N = torch.bincount(keys.flatten(), minlength=a.size * D * D).view(a.size, D, D).to(self.z_tables.dtype)
        return self.z_tables.index_select(0, ia) @ N @ self.z_tables.index_select(0, ib).mT


@dataclass(frozen=True)
class Combinations:
    """Linear combinations ``coef_i`` (m, k) of the features of variables ``v_i`` (positions), laid out once for
    repeated evaluation (:meth:`Features.projected`) on the features of the same variables over other rows:
    the index tensors of each kind on the device, and the Gaussian coefficients stacked per variable."""

    variables: np.ndarray  # (m,)
    coef: torch.Tensor  # (m, k)
    kind_index: torch.Tensor  # (m,) each variable's position among the Gaussian, then the categorical ones
    gauss_sel: torch.Tensor | None  # which combinations are on Gaussian variables
    gauss_at: tuple[torch.Tensor, torch.Tensor] | None  # (variable among the Gaussian ones, slot) of each
    gauss_stack: torch.Tensor | None  # (Vg, largest count, k) coefficients by variable, zero-padded
    cat_sel: torch.Tensor | None  # which combinations are on categorical variables
    cat_index: torch.Tensor | None  # their variables among the categorical ones
    cat_coef: torch.Tensor | None  # (mc, 1, k)

    @property
    def size(self) -> int:
        return int(self.variables.size)

    @classmethod
    def of(cls, F: Features, variables: np.ndarray, coef: torch.Tensor) -> Combinations:
        """Lay out ``coef`` (m, k) on ``variables`` (m,) for features with F's variable kinds."""
        variables = np.asarray(variables, dtype=np.int64)
        is_cat, index = F._slot
        dev = coef.device

        def on(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(a)).to(dev)

        gauss_sel = gauss_at = gauss_stack = cat_sel = cat_index = cat_coef = None
        g = np.flatnonzero(~is_cat[variables])
        if g.size:
            gi = index[variables[g]]
            degree = np.bincount(gi, minlength=F.gauss.size)
            slot = np.empty_like(gi)
            slot[np.argsort(gi, kind="stable")] = np.arange(gi.size) - np.repeat(np.cumsum(degree) - degree, degree)
            gauss_sel, gauss_at = on(g), (on(gi), on(slot))
            gauss_stack = coef.new_zeros(F.gauss.size, int(degree.max()), coef.shape[1])
            gauss_stack[gauss_at] = coef[gauss_sel]
        c = np.flatnonzero(is_cat[variables])
        if c.size:
            cat_sel, cat_index = on(c), on(index[variables[c]])
            cat_coef = coef[cat_sel][:, None, :]
        kind_index = on(np.where(is_cat[variables], F.gauss.size + index[variables], index[variables]))
        return cls(variables, coef, kind_index, gauss_sel, gauss_at, gauss_stack, cat_sel, cat_index, cat_coef)


@dataclass(frozen=True)
class FeatureMap:
    """The random feature map of a node's variables (steps 1-2), prepared once for repeated use on its rows:
    the scaled projections ``(s / (D_v + 1)) W_v`` split by kind and the index tensors, on the data's device
    and dtype. Calling it gives the centred features of X (:class:`Features`)."""

    gauss: np.ndarray  # positions of the Gaussian variables
    categorical: np.ndarray  # positions of the categorical variables
    g_index: torch.Tensor  # gauss on the device
    c_index: torch.Tensor  # categorical on the device
    Wg: torch.Tensor  # (Vg, 2, k, 1) [W_0, W_1] of the Gaussian variables
    Wc: torch.Tensor  # (Vc, Dmax+1, k) of the categorical variables

    @classmethod
    def build(
        cls, n_categories: Sequence[int], projections: torch.Tensor, scale: float, like: torch.Tensor
    ) -> FeatureMap:
        cats = np.asarray(n_categories, dtype=np.int64)
        W = _scaled_projections(projections, np.maximum(cats, 1), scale, like)  # (V, Dmax+1, k)
        gauss, categorical = np.flatnonzero(cats == 0), np.flatnonzero(cats > 0)
        g, c = (torch.from_numpy(v).to(like.device) for v in (gauss, categorical))
        return cls(gauss, categorical, g, c, W[g][:, :2, :, None].contiguous(), W[c])

    def __call__(self, X: torch.Tensor, gauss_counts: torch.Tensor | None = None) -> Features:
        n = X.shape[0]
        Fg = codes = tables = counts = None
        if self.gauss.size:
            if gauss_counts is None:
                gauss_counts = ecdf_counts(X.index_select(1, self.g_index) if self.categorical.size else X)
            P_rank = (gauss_counts.to(X.dtype) / n).T  # (Vg, n)
            Fg = torch.addcmul(self.Wg[:, 0], self.Wg[:, 1], P_rank[:, None, :]).sin_()  # (Vg, k, n)
            Fg -= Fg.mean(dim=2, keepdim=True)
        if self.categorical.size:
            codes = X.index_select(1, self.c_index).long().T.contiguous()  # (Vc, n)
            tables, counts = category_tables(codes.T, self.Wc)  # (Vc, Dmax, k), (Vc, Dmax)
            tables = (tables - torch.bmm(counts[:, None, :], tables) / n).mT  # centred, (Vc, k, D)
        return Features(n, self.gauss, self.categorical, Fg, tables, codes, gauss_counts, counts)


def centred_features(
    X: torch.Tensor,
    n_categories: Sequence[int],
    projections: torch.Tensor,
    scale: float = 1.0 / 6.0,
    gauss_counts: torch.Tensor | None = None,
) -> Features:
    """Centred random features ``phi(x_v) - mean`` of every variable of X (n, V) (steps 1-2), factorised and
    not yet whitened (r = k): :class:`FeatureMap` built and applied once.

    Categorical variables are centred on their K feature values weighted by the category counts (the same
    moments as over the rows, at O(K k) instead of O(n k) cost). ``gauss_counts`` (n, Vg) are the Gaussian
    columns' ECDF counts when the caller already has them (an update after a removal,
    :func:`ecdf_counts_after_removal`); otherwise they are computed by sorting.
    """
    return FeatureMap.build(n_categories, projections, scale, X)(X, gauss_counts)


def whiten(
    X: torch.Tensor,
    n_categories: Sequence[int],
    projections: torch.Tensor,
    scale: float = 1.0 / 6.0,
    gauss_counts: torch.Tensor | None = None,
) -> Features:
    """Centred, whitened random features of every variable of X (n, V), factorised (:class:`Features`):
    :func:`centred_features` then :meth:`Features.whitened`. ``Z_v Z_v^T / (n - 1)`` is the identity on the
    kept subspace of every variable."""
    return centred_features(X, n_categories, projections, scale, gauss_counts).whitened()


def whitened_features(
    X: torch.Tensor, n_categories: Sequence[int], projections: torch.Tensor, scale: float = 1.0 / 6.0
) -> torch.Tensor:
    """Centred, whitened random features of every variable, per row: X (n, V) -> Z (V, r, n) (variable-major,
    one variable's features one contiguous block); :func:`whiten` keeps them factorised."""
    return whiten(X, n_categories, projections, scale).dense()


def _cross_blocks(left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
    """``Z_i Z_j^T / (n - 1)`` of paired per-row whitened features, left/right (P, r, n) -> (P, r, r)."""
    return torch.bmm(left, right.mT) / max(left.shape[2] - 1, 1)


def _largest_singular_value(B: torch.Tensor) -> torch.Tensor:
    """sigma_max of every (r, r) block: sqrt of the largest eigenvalue of B B^T, clipped to [0, 1]. -> (P,)"""
    if B.shape[0] == 0:
        return B.new_zeros(0)
    return torch.linalg.eigvalsh(B @ B.mT)[:, -1].clamp(0.0, 1.0).sqrt()


def rdc_from_whitened(Z: torch.Tensor | Features) -> torch.Tensor:
    """Symmetric (V, V) RDC matrix (diagonal 1) from whitened features Z (V, r, n) or :class:`Features`.

    Step 3 for all pairs at once: the cross-covariance ``G = Z Z^T / (n-1)`` (V r x V r) holds every
    ``Cxx^{-1/2} Cxy Cyy^{-1/2}`` as an (r, r) block; the RDC of (i, j) is the largest singular value of
    block (i, j).
    """
    if isinstance(Z, Features):
        Z = Z.dense()
    V, r, n = Z.shape
    Zf = Z.reshape(V * r, n)
    G = (Zf @ Zf.T / max(n - 1, 1)).reshape(V, r, V, r).permute(0, 2, 1, 3)  # (V, V, r, r)
    iu, ju = torch.triu_indices(V, V, offset=1, device=Z.device)
    rho = _largest_singular_value(G[iu, ju])  # (P,)
    R = torch.eye(V, dtype=Z.dtype, device=Z.device)
    R[iu, ju] = rho
    R[ju, iu] = rho
    return R


def rdc_pairs(Z: torch.Tensor | Features, pairs: np.ndarray) -> torch.Tensor:
    """RDC of selected variable pairs from whitened features Z (V, r, n) or :class:`Features`; pairs (P, 2)
    -> (P,)"""
    if isinstance(Z, Features):
        return _largest_singular_value(Z.pair_blocks(pairs))
    idx = torch.from_numpy(np.asarray(pairs, dtype=np.int64).reshape(-1, 2)).to(Z.device)
    return _largest_singular_value(_cross_blocks(Z.index_select(0, idx[:, 0]), Z.index_select(0, idx[:, 1])))


def rdc_matrix(
    X: torch.Tensor, n_categories: Sequence[int], projections: torch.Tensor, scale: float = 1.0 / 6.0
) -> torch.Tensor:
    """Symmetric (V, V) matrix of pairwise RDCs (diagonal 1) of the columns of X (n, V)."""
    return rdc_from_whitened(whitened_features(X, n_categories, projections, scale))


def dependency_components(rdc: torch.Tensor | np.ndarray, threshold: float) -> list[tuple[int, ...]]:
    """Connected components of the graph with an edge wherever ``rdc >= threshold`` (seeds/001 §5).

    Returned in a canonical order: each component's variable positions sorted, components ordered by their
    smallest position. One component means "no independencies". (Label propagation: every variable takes the
    smallest label among its neighbours until nothing changes.)
    """
    R = rdc.detach().cpu().numpy() if isinstance(rdc, torch.Tensor) else np.asarray(rdc)
    V = R.shape[0]
    adjacency = (R >= threshold) | np.eye(V, dtype=bool)
    labels = np.arange(V)
    while True:
        new = np.where(adjacency, labels[None, :], V).min(axis=1)
        new = new[new]  # pointer jumping: follow the label's own label
        if np.array_equal(new, labels):
            break
        labels = new
    return [tuple(int(v) for v in np.flatnonzero(labels == lab)) for lab in np.unique(labels)]


def spanning_forest(weights: np.ndarray, components: list[tuple[int, ...]]) -> np.ndarray:
    """Edges of a maximum-weight spanning tree of every component (Prim), as (E, 2) variable positions."""
    edges = []
    for comp in components:
        members = np.asarray(comp, dtype=np.int64)
        if members.size < 2:
            continue
        W = weights[np.ix_(members, members)]  # (m, m)
        in_tree = np.zeros(members.size, dtype=bool)
        in_tree[0] = True
        best, parent = (
            W[0].copy(),
            np.zeros(members.size, dtype=np.int64),
        )  # best link of each vertex to the tree
        for _ in range(members.size - 1):
            v = int(np.where(in_tree, -np.inf, best).argmax())
            edges.append((members[parent[v]], members[v]))
            in_tree[v] = True
            closer = W[v] > best
            best, parent = np.where(closer, W[v], best), np.where(closer, v, parent)
    return np.array(edges, dtype=np.int64).reshape(-1, 2)


def certificate_pairs(
    components: list[tuple[int, ...]], reference: np.ndarray
) -> tuple[np.ndarray, int] | None:
    """The pairs whose RDCs certify that the components are unchanged (see :func:`components_still_hold`).

    A maximum spanning forest of the components on ``reference`` (the last full RDC matrix) followed by every
    pair across components. Returns ``(pairs (P, 2), number of forest edges)``, or None when more than ``2 V``
    pairs cross components (many components): recomputing the full matrix is then the cheaper test.
    """
    V = reference.shape[0]
    sizes = np.array([len(c) for c in components])
    if (sizes.sum() ** 2 - (sizes**2).sum()) // 2 > 2 * V:
        return None
    forest = spanning_forest(reference, components)
    label = np.empty(V, dtype=np.int64)
    for c, comp in enumerate(components):
        label[list(comp)] = c
    iu, ju = np.triu_indices(V, k=1)
    across = label[iu] != label[ju]
    return np.concatenate([forest, np.stack([iu[across], ju[across]], axis=1)]), forest.shape[0]


def components_still_hold(
    Z: torch.Tensor | Features, pairs: np.ndarray, n_forest: int, threshold: float, guard: float
) -> tuple[bool, np.ndarray]:
    """Cheap exact test that the dependency components of the whitened features Z are unchanged.

    ``pairs`` from :func:`certificate_pairs`. Sufficient condition: every forest edge has RDC >= threshold +
    guard and every pair across components has RDC < threshold - guard. Then the full matrix, whose entries
    differ from these per-pair values only by rounding (orders of magnitude below ``guard``), has exactly the
    same components. Returns (holds, the RDCs of ``pairs``).
    """
    values = rdc_pairs(Z, pairs).cpu().numpy() if pairs.size else np.zeros(0)
    holds = bool(
        (values[:n_forest] >= threshold + guard).all() and (values[n_forest:] < threshold - guard).all()
    )
    return holds, values


# ------------------------------------------------------------------------ lower bounds without whitening
#: certificate directions are canonical directions on the eigen-directions of each feature covariance above
#: this fraction of its largest: a well-conditioned subspace, so the bound's truncation term stays small
CERT_RCOND = 1e-8


def canonical_directions(Z: Features, pairs: np.ndarray, rcond: float = CERT_RCOND) -> Combinations:
    """Coefficient vectors ``(a, b)`` on the raw sine features of each pair's top canonical correlation,
    restricted to every variable's eigen-directions above ``rcond`` times its largest eigenvalue.

    ``Z`` are whitened features (:meth:`Features.whitened`). The restricted block of pair (x, y) is
    ``B_xy`` with the rows and columns of the dropped directions zeroed; its top singular vectors (u, v) give
    ``a = P_x u``, ``b = P_y v`` (k-vectors), the directions :func:`rdc_lower_bounds` evaluates on later rows.
    pairs (P, 2) -> the 2P combinations (:func:`pair_sides`): ``a`` on every x, then ``b`` on every y.
    """
    if Z.whitening is None:
        raise ValueError("canonical_directions needs whitened features (Features.whitened())")
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    dev = Z.whitening.device
    x, y = (torch.from_numpy(pairs[:, i]).to(dev) for i in (0, 1))
    usable = Z.eigenvalues > rcond * Z.eigenvalues.amax(dim=1, keepdim=True)  # (V, r)
    mask = usable.to(Z.whitening.dtype)
    B = Z.pair_blocks(pairs) * mask[x][:, :, None] * mask[y][:, None, :]  # (P, r, r)
    U, _, Vh = torch.linalg.svd(B)
    a = torch.bmm(Z.whitening[x], (U[:, :, 0] * mask[x])[:, :, None])[:, :, 0]  # (P, k)
    b = torch.bmm(Z.whitening[y], (Vh[:, 0, :] * mask[y])[:, :, None])[:, :, 0]
    return pair_sides(Z, pairs, a, b)


def pair_sides(F: Features, pairs: np.ndarray, a: torch.Tensor, b: torch.Tensor) -> Combinations:
    """The combinations ``a_p`` on x_p and ``b_p`` on y_p of pairs (P, 2), laid out for features of F's kinds
    (the argument of :func:`rdc_lower_bounds`): the P x-sides, then the P y-sides."""
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    return Combinations.of(F, pairs.T.reshape(-1), torch.cat([a, b]))


def rdc_lower_bounds(F: Features, sides: Combinations) -> torch.Tensor:
    """A lower bound on the RDC (as :func:`rdc_pairs` defines it, with the ``EIG_RCOND`` truncation) of each
    pair, from raw features F (:func:`centred_features`) and any coefficient vectors a, b (P, k) on its two
    variables (``sides`` = :func:`pair_sides`, or :func:`canonical_directions`). -> (P,)

    With ``u = phi_x a``, ``v = phi_y b`` (centred), ``C = Cov``:

        q = C(u, v) / sqrt(C(u, u) C(v, v)),   eps_a = sqrt(2 EIG_RCOND tr(Cxx) |a|^2 / C(u, u)),
        bound = q - eps_a - eps_b - eps_a eps_b.

    Proof that ``bound <= rdc(x, y)``. The truncated RDC is ``sigma_max(P_x^T Cxy P_y)`` with ``P_x`` spanning
    the kept eigen-directions S_x of Cxx (eigenvalue >= EIG_RCOND lambda_max); by the variational form of
    the singular value it is the maximum of ``a'Cxy b / sqrt(a'Cxx a  b'Cyy b)`` over a in S_x, b in S_y.
    Split a = a_S + a_N along S_x and its complement (Cxx-orthogonal, being eigenspaces). Then
    ``a_S'Cxx a_S <= a'Cxx a = C(u, u)`` and ``d_a^2 = a_N'Cxx a_N <= lambda_dropped |a|^2``, with every dropped
    eigenvalue below EIG_RCOND lambda_max <= EIG_RCOND tr(Cxx) (the factor 2 covers the eigensolver's
    rounding, ~k u lambda_max). Each of the three cross terms of ``a'Cxy b - a_S'Cxy b_S`` is bounded by
    Cauchy-Schwarz for covariances, ``|a_N'Cxy b_S| <= d_a sqrt(C(v, v))`` and so on, so
    ``a_S'Cxy b_S >= C(u, v) - d_a s_v - s_u d_b - d_a d_b``; dividing by ``s_u s_v >= sqrt(a_S'Cxx a_S
    b_S'Cyy b_S)`` gives the bound (when it is positive; otherwise it is trivially below rdc >= 0). ∎

    The bound needs no eigendecomposition: O(P k n) for the projections and traces. A node that kept its
    components certifies them after a removal with this bound on its spanning forest when every forest edge
    stays clear of the threshold (seeds/001 §4: the RDC decision is unchanged), and whitens only otherwise.
    With :func:`canonical_directions` from an earlier, exact evaluation the bound is within a few percent of
    the restricted canonical correlation (the truncation terms are ~1e-2 for ``CERT_RCOND = 1e-8``).
    """
    if F.whitening is not None:
        raise ValueError("rdc_lower_bounds needs the raw centred features (centred_features)")
    P = sides.size // 2
    if P == 0:
        return sides.coef.new_zeros(0)
    uv = F.projected(sides)  # (2P, n): u then v, centred
    ss = (uv * uv).sum(1)  # (n - 1) C(u, u) then (n - 1) C(v, v)
    q = (uv[:P] * uv[P:]).sum(1) / (ss[:P] * ss[P:]).sqrt()
    traces = F.sq_sums_by_kind().index_select(0, sides.kind_index)  # (n - 1) tr(Cxx) of each side
    coef = sides.coef
    eps = (2 * EIG_RCOND * traces * (coef * coef).sum(1) / ss).sqrt()  # the factors (n - 1) cancel
    bound = q - eps[:P] - eps[P:] - eps[:P] * eps[P:]
    return torch.where((ss[:P] > 0) & (ss[P:] > 0), bound, torch.full_like(bound, -1.0)).nan_to_num(-1.0)
