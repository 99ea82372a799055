"""A first-order certificate of :func:`rdc.rdc_lower_bounds` after row removals, without recomputing the random
features: UnlearnSPN's per-removal RDC check (seeds/001 Alg. 2 with Def. 3) at a node whose single component
is certified by lower bounds on its spanning forest (``rdc.rdc_lower_bounds``).

After a removal every copula rank moves (``p_i = c_i / n`` with c the ECDF count: the counts of the rows above
a removed value drop by one and n drops), so the sine features ``phi_k(p) = sin(w0_k + w1_k p)`` of every row
change and a fresh bound needs all of them again. Instead, at a *reference* evaluation (rows R, ranks p_i) we
keep, for every side of every certified pair (a direction ``a`` on the features of a Gaussian variable, so
that the side's value is ``g(p) = sum_k a_k phi_k(p)``), the values ``g(p_i)``, the derivatives ``g'(p_i)``,
``max_i |g''(p_i)|`` and ``L3 = sum_k |a_k| |w1_k|^3 >= max |g'''|``. On later rows K (a subset of R: removals only)
with exact new ranks ``p'_i`` (the ECDF counts are updated exactly, ``rdc.ecdf_counts_after_removal``) and
``D_i = p'_i - p_i``, Taylor's theorem gives

    g(p'_i) = g(p_i) + g'(p_i) D_i + E_i,    |E_i| <= (max_j |g''(p_j)| + max_j |D_j| L3) D_i^2 / 2,

since ``|g''|`` grows by at most ``|D_i| L3`` between p_i and p'_i; so ``|E| <= (...) sqrt(sum_i D_i^4) = rho``.
With ``u_hat = g(p) + g'(p) D`` and ``A`` its centred version over K, the true centred values are ``A + C E``
with ``|C E| <= |E| <= rho`` (centring is a projection). For a pair with sides u, v, Cauchy-Schwarz bounds
every term of the bound of :func:`rdc.rdc_lower_bounds` (``q - eps_u - eps_v - eps_u eps_v``):

* ``C'(u, v) >= A.B - rho_u |B| - rho_v |A| - rho_u rho_v``, ``C'(u, u) <= (|A| + rho_u)^2`` (so q from below
  when the numerator bound is positive) and ``C'(u, u) >= (|A| - rho_u)^2`` (the truncation term eps from
  above);
* the trace ``tr(Cxx)`` of the side's variable (in eps) from above: ``(sqrt(T) + |w1| |D|)^2`` with T the
  reference's centred sum of squares of its features (a subset only lowers a centred sum of squares) and
  ``|phi'_k(i) - phi_k(i)| <= |w1_k| |D_i|``.

A categorical variable's features take one value per category, a function of the category counts only: they
are recomputed exactly (K values), so a categorical side has no error term. All factors ``(n - 1)`` cancel as
in :func:`rdc.rdc_lower_bounds`. The result is a lower bound on that function's value on the rows K, hence on
the RDC; the error terms are second order in D (``|D_i| <= m / (n - m)`` after m removals), so the reference
serves many removals. Everything here runs on the host (arrays of (sides x rows)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from duck.deletion.rdc import EIG_RCOND, Combinations, FeatureMap, Features, category_tables


@dataclass
class TaylorReference:
    """The reference evaluation of a node's certified pairs (module docstring); ``bounds`` certifies later
    subsets of its rows. Sides are laid out Gaussian first, then categorical (``pair_x``, ``pair_y`` locate
    each pair's two sides)."""

    rows: np.ndarray  # (n,) node rows (storage positions, ascending) of the reference
    #: (Vg + 2 Gs, n) per-row reference values, stacked so that ``bounds`` gathers the kept rows once: the
    #: copula ranks p_i of the Gaussian variables, then per Gaussian side g(p_i) - g'(p_i) p_i (centred at
    #: the reference), then g'(p_i)
    per_row: np.ndarray
    gauss_var: np.ndarray  # (Gs,) variable (among the Gaussian ones) of each Gaussian side
    half_g2: np.ndarray  # (Gs,) max_i |g''(p_i)| / 2
    L3: np.ndarray  # (Gs,) sum_k |a_k| |w1_k|^3 / 2
    w1_norm: np.ndarray  # (Gs,) |w1| of the side's variable
    cat_slot: np.ndarray  # (Cs,) variable of each categorical side, among ``codes``' rows
    cat_coef: np.ndarray  # (Cs, k)
    codes: np.ndarray  # (Vu, n) category codes, at the reference rows, of the categorical variables used
    cat_offset: np.ndarray  # (Cs, 1) D s: side s's per-category values start there in a flattened (Cs, D) table
    Wc: np.ndarray  # (Vu, D + 1, k) their scaled projections
    sqrt_traces: np.ndarray  # (2P,) sqrt of the reference centred sum of squares of each side's features
    eps_scale: np.ndarray  # (2P,) sqrt(2 EIG_RCOND |a|^2): the truncation term is this times sqrt(tr) / |norm|
    pair_x: np.ndarray  # (P,) side of each pair's first variable
    pair_y: np.ndarray  # (P,) and of its second

    @property
    def rank(self) -> np.ndarray:
        """(Vg, n) copula ranks p_i of the Gaussian variables at the reference (a view of ``per_row``)."""
        return self.per_row[: self.per_row.shape[0] - 2 * self.gauss_var.size]

    @property
    def taylor(self) -> np.ndarray:
        """(2, Gs, n): g(p_i) - g'(p_i) p_i (centred at the reference), g'(p_i) (a view of ``per_row``)."""
        G = self.gauss_var.size
        return self.per_row[self.per_row.shape[0] - 2 * G :].reshape(2, G, self.per_row.shape[1])  # G may be 0

    @classmethod
    def build(cls, fmap: FeatureMap, F: Features, sides: Combinations, rows: np.ndarray) -> TaylorReference:
        """From the raw centred features F of ``rows`` (``fmap(X, counts)``) and the certified directions."""
        n, Vg = F.n, F.gauss.size
        kind = sides.kind_index.cpu().numpy()
        order = np.argsort(kind >= Vg, kind="stable")  # Gaussian sides first
        where = np.empty_like(order)
        where[order] = np.arange(order.size)
        P = order.size // 2
        kind_o, coef = kind[order], sides.coef.cpu().numpy()[order]
        G = int((kind < Vg).sum())
        rank = (F.gauss_counts.cpu().numpy().T / n) if F.gauss_counts is not None else np.zeros((0, n))
        taylor, half_g2, L3, w1_norm = np.zeros((2, 0, n)), np.zeros(0), np.zeros(0), np.zeros(0)
        var = kind_o[:G]
        if G:
            W0, W1 = (fmap.Wg[:, j, :, 0].cpu().numpy()[var] for j in (0, 1))  # (Gs, k)
            a = coef[:G]
            g0 = F.projected(sides).cpu().numpy()[order[:G]]  # centred g(p_i)
            arg = torch.from_numpy(W1)[:, :, None] * torch.from_numpy(rank[var])[:, None, :]
            arg += torch.from_numpy(W0)[:, :, None]
            g1 = torch.bmm(torch.from_numpy(a * W1)[:, None, :], arg.cos())[:, 0].numpy()
            g2 = torch.bmm(torch.from_numpy(a * W1 * W1)[:, None, :], arg.sin_())[:, 0].abs_().numpy()
            taylor = np.stack([g0 - g1 * rank[var], g1])
            half_g2 = 0.5 * g2.max(1)
            L3 = 0.5 * (np.abs(a) * np.abs(W1) ** 3).sum(1)
            w1_norm = np.sqrt((W1 * W1).sum(1))
        used, cat_slot = np.unique(kind_o[G:] - Vg, return_inverse=True)
        codes = F.codes.cpu().numpy()[used] if used.size else np.zeros((0, n), np.int64)
        Wc = fmap.Wc.cpu().numpy()[used]
        sqrt_traces = np.sqrt(F.sq_sums_by_kind().cpu().numpy()[kind_o])
        per_row = np.concatenate([rank, taylor.reshape(2 * G, n)])
        cat_offset = (Wc.shape[1] - 1) * np.arange(P * 2 - G)[:, None]
        return cls(
            rows.copy(), per_row, var, half_g2, L3, w1_norm, cat_slot.reshape(-1), coef[G:], codes, cat_offset, Wc,
            sqrt_traces, np.sqrt(2 * EIG_RCOND * (coef * coef).sum(1)), where[:P], where[P:],
        )

    def bounds(self, kept: np.ndarray, counts: torch.Tensor | None) -> np.ndarray:
        """Lower bounds on ``rdc_lower_bounds`` of every pair on the rows ``self.rows[kept]`` (kept: ascending
        positions among the reference rows, at least 2), whose ECDF counts are ``counts`` (len(kept), Vg; None
        without Gaussian variables). -> (P,); -1 where nothing is certified."""
        n, G = kept.size, self.gauss_var.size
        values = np.empty((self.eps_scale.size, n))
        rho = np.zeros(self.eps_scale.size)
        trace = self.sqrt_traces.copy()
        if G:
            Vg = self.per_row.shape[0] - 2 * G
            ref = self.per_row[:, kept]  # one gather: reference ranks, g(p) - g'(p) p, g'(p)
            rank = counts.cpu().numpy().T / n  # (Vg, n) exact new ranks
            D = rank - ref[:Vg]  # their moves
            np.multiply(ref[Vg + G :], rank[self.gauss_var], out=values[:G])
            values[:G] += ref[Vg : Vg + G]  # g(p) + g'(p) D, up to the centring constant
            D2 = np.square(D)
            stats = np.empty((3, Vg))  # max |D|, sqrt(sum D^4), |D| per variable
            D2.max(1, out=stats[0])
            np.einsum("vn,vn->v", D2, D2, out=stats[1])
            D2.sum(1, out=stats[2])
            d_max, d4, d2 = np.sqrt(stats, out=stats)[:, self.gauss_var]
            # |E_i| <= (max |g''| / 2 + max |D| L3 / 2) D_i^2, so |E| <= that factor times sqrt(sum D^4)
            rho[:G] = (self.half_g2 + d_max * self.L3) * d4
            trace[:G] += self.w1_norm * d2
        if self.cat_slot.size:  # exact: the tables of the category counts of the kept rows
            codes = self.codes[:, kept]  # (Vu, n)
            tables, cat_counts = category_tables(codes.T, self.Wc)
            centred = tables - (cat_counts[:, None, :] @ tables) / n  # (Vu, D, k): weighted mean subtracted
            per_category = np.einsum("sdk,sk->sd", centred[self.cat_slot], self.cat_coef)  # (Cs, D)
            values[G:] = per_category.ravel()[codes[self.cat_slot] + self.cat_offset]
            trace[G:] = np.sqrt(np.einsum("vd,vdk,vdk->v", cat_counts, centred, centred))[self.cat_slot]
        values -= values.sum(1, keepdims=True) / n
        gram = values @ values.T  # (2P, 2P): every side's norm and every pair's cross product
        norm = np.sqrt(np.diagonal(gram))
        x, y = self.pair_x, self.pair_y
        rx, ry, nx, ny = rho[x], rho[y], norm[x], norm[y]
        low = gram[x, y] - rx * ny - ry * nx - rx * ry
        below = norm - rho
        side_ok = below > 0  # eps of a side whose norm bound is 0 would be inf: nothing is certified with it
        eps = self.eps_scale * trace / np.where(side_ok, below, 1.0)
        ex, ey = eps[x], eps[y]
        certified = (low > 0) & side_ok[x] & side_ok[y]
        denom = np.where(certified, (nx + rx) * (ny + ry), 1.0)  # > 0 where certified (norm > rho >= 0)
        bound = low / denom - ex - ey - ex * ey
        return np.where(certified & np.isfinite(bound), bound, -1.0)
