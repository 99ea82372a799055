"""The ε-based forgetting quality of the NeurIPS 2023 Machine Unlearning Challenge (ALGORITHMS.md §10 (a);
Triantafillou et al. 2024, "Are we making progress in unlearning?", google-deepmind/unlearning_evaluation
``metric.py`` and ``main.py``), per example and for thousands of examples at once.

Per forget example x the unlearned and the retrained models' φ(x) are two samples; each decision rule "is this φ
from the positive set?" (single thresholds on a grid of 100 per unit over the pooled range; double thresholds:
an interval as wide as the smaller of the two ranges, slid over a ±2 buffer, 100 steps per unit) has an FPR and
an FNR over the models; its ε is ``max(log(1 − δ − FPR) − log FNR, log(1 − δ − FNR) − log FPR)`` clipped at 0
(δ = 1e-5), ∞ for a perfect rule, skipped when exactly one of FPR, FNR is 0; ``ε(x)`` is the largest over the
rules, clipped to ``[0, 50]``, and 50 outright when the smaller range is below 1 % of the larger (a collapsed
distribution). Each ε(x) earns the points of its bucket (width 0.5 from 0: 1, 1/2, 1/4, ... while the bucket
ends at most at ``⌈ln(N − 1)⌉``, N the number of unlearned models; 0 beyond); the **forgetting quality** F is the
mean points over the forget set.

**Two paths, one answer.** A rule's ε depends only on how many of each set it calls positive, so ε(x) is the
largest entry of a fixed table ``eps[a, b]`` (``a`` of the positive set's models inside the rule, ``b`` of the
negative set's; float32 rates as the reference's ``torch.mean`` of float32 indicators) over the count pairs the
rules can produce (:func:`epsilon_table`).
- :func:`example_epsilon` (one example) lists those pairs from the rules' grids exactly: the ~10^5 double
  thresholds are read from the samples' positions among each right end's left ends.
- :func:`epsilons` (all examples) sorts the pooled sample of every example once (``(examples, N + R)``). A
  single threshold t in ``(z_i, z_{i+1}]`` calls the top ``N + R − i`` values positive; it exists iff a grid
  point falls in that gap, counted exactly from ``np.linspace``'s own floats. A double threshold ``[l, r]``
  holds a block ``z_i .. z_j`` of the sorted values iff ``l ∈ (z_{i−1}, z_i]`` and ``r ∈ [z_j, z_{j+1})``; with
  ``r`` in the right ends' range and ``l`` within ``r − w ± 2``, the blocks some real ``(l, r)`` reaches are an
  upper set and the blocks that a grid point must reach (gaps wider than the grids' steps) a lower one. Where
  the two give the same ε — nearly every example — it is the reference's; for the others the blocks in
  between are settled exactly, each against its right ends' grids of left ends (:func:`_blocks_reached`).
  ``tests/test_epsilon.py`` checks both paths against the reference's outputs and a rule-by-rule evaluation on
  random and tied samples.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from duck.errors import DuckInputError

DELTA = 1e-5
EPSILON_CAP = 50.0
THRESHOLDS_PER_UNIT = 100
DOUBLE_THRESHOLD_BUFFER = 2.0
COLLAPSED_RATIO = 0.01


def _as_samples(values: np.ndarray | Sequence[float], name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size < 2 or not np.isfinite(arr).all():
        raise DuckInputError(f"{name} needs at least 2 finite values (one per model), got {arr.size}")
    return arr


def _at_or_above(sorted_vals: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """How many of the sorted samples each single-threshold rule calls positive: ``φ >= threshold``."""
    return sorted_vals.size - np.searchsorted(sorted_vals, thresholds, side="left")


@dataclass(frozen=True)
class _RuleFamily:
    """The rules of one family, as the counts of positive and negative samples each calls positive."""

    pos_in: np.ndarray
    neg_in: np.ndarray
    n_pos: int
    n_neg: int


#: comparison passes of :func:`_first_above_linspace`: its estimate from the row's ends is at most one position
#: off (rounding), so two passes settle it (one correction, one check); the rest is a margin
_FIRST_ABOVE_PASSES = 4


def _first_above(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``out[i, k]`` = the first index j with ``rows[i, j] > values[k]`` (``rows.shape[1]`` if none): the same
    answer as ``np.searchsorted(rows[i], values, side="right")`` per row; fast for rows that are each an
    ``np.linspace`` (:func:`_first_above_linspace`), one search per row otherwise."""
    p = _first_above_linspace(rows, values)
    return p if p is not None else np.stack([np.searchsorted(row, values, side="right") for row in rows])


def _first_above_linspace(rows: np.ndarray, values: np.ndarray) -> np.ndarray | None:
    """:func:`_first_above` for rows that are each an ``np.linspace``: estimated from the row's ends, then
    corrected by exact comparisons with the row's own floats; None when :data:`_FIRST_ABOVE_PASSES` passes do
    not settle it (rows that are not linspaces)."""
    n = rows.shape[1]
    first, last = rows[:, :1], rows[:, -1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.floor((values[None, :] - first) / (last - first) * (n - 1)) + 1
    p = np.clip(np.nan_to_num(est, nan=0.0, posinf=n, neginf=0), 0, n).astype(np.int64)
    padded = np.concatenate([np.full((rows.shape[0], 1), -np.inf), rows, np.full((rows.shape[0], 1), np.inf)],
                            axis=1)  # padded[:, j + 1] = rows[:, j]; the answer p satisfies rows[p-1] <= v < rows[p]
    for _ in range(_FIRST_ABOVE_PASSES):
        up = np.take_along_axis(padded, p + 1, axis=1) <= values[None, :]
        down = np.take_along_axis(padded, p, axis=1) > values[None, :]
        if not (up.any() or down.any()):
            return p
        p = p + up - down
    return None


def _double_threshold_rules(pos: np.ndarray, neg: np.ndarray) -> _RuleFamily:
    """The reference's double-threshold family: the peakier sample is the positive one; intervals as wide as
    its range, right ends on a grid over ``[min + width − 2, max + 2]``, each with 400 left ends within ±2
    (one ``np.linspace`` over all right ends: the same floats as the reference's one call per right end).

    The ~10^5 rules are not evaluated one by one: for one right end the counts change only where a left end
    passes a sample, so the distinct outcomes of its 400 rules are the states after each group of samples
    with the same position among the left ends (plus "none passed" when no sample lies below the first)."""
    pos_diff, neg_diff = float(pos.max() - pos.min()), float(neg.max() - neg.min())
    width = neg_diff if pos_diff > neg_diff else pos_diff
    if pos_diff >= neg_diff:
        pos, neg = neg, pos
    buffer = DOUBLE_THRESHOLD_BUFFER
    lo_right, hi_right = pos.min() + width - buffer, pos.max() + buffer
    # P's range is the width, so the right ends span 2 * buffer: never an empty grid
    right = np.linspace(lo_right, hi_right, num=int(np.ceil((hi_right - lo_right) * THRESHOLDS_PER_UNIT)))
    n_left = int(np.ceil(2 * buffer * THRESHOLDS_PER_UNIT))
    left = np.linspace(right - width - buffer, right - width + buffer, num=n_left, axis=1)  # (rights, lefts)
    samples = np.concatenate([pos, neg])
    is_pos = np.arange(samples.size) < pos.size
    position = _first_above(left, samples)  # sample k is below the left end j of row i iff position[i, k] <= j
    order = np.argsort(position, axis=1, kind="stable")
    sorted_pos = np.take_along_axis(position, order, axis=1)
    below_pos = np.cumsum(is_pos[order], axis=1)
    below_neg = np.cumsum(~is_pos[order], axis=1)
    group_end = np.ones(sorted_pos.shape, dtype=bool)
    group_end[:, :-1] = sorted_pos[:, :-1] != sorted_pos[:, 1:]
    state = group_end & (sorted_pos < n_left)  # the states the left ends 0 .. n_left-1 reach
    upto_pos = np.searchsorted(np.sort(pos), right, side="right")  # count(φ <= right end)
    upto_neg = np.searchsorted(np.sort(neg), right, side="right")
    rows = np.broadcast_to(np.arange(right.size)[:, None], state.shape)[state]
    start = np.flatnonzero(sorted_pos[:, 0] > 0)  # rows whose first left end has no sample below it
    pos_in = np.concatenate([upto_pos[rows] - below_pos[state], upto_pos[start]])
    neg_in = np.concatenate([upto_neg[rows] - below_neg[state], upto_neg[start]])
    return _RuleFamily(np.clip(pos_in, 0, None), np.clip(neg_in, 0, None), pos.size, neg.size)


def _single_threshold_rules(pos: np.ndarray, neg: np.ndarray) -> _RuleFamily:
    """The reference's single-threshold family: "positive if φ >= t", t on a grid over the pooled range."""
    both = np.concatenate([pos, neg])
    lo, hi = float(both.min()), float(both.max())
    thresholds = np.linspace(lo, hi, int(math.ceil((hi - lo) * THRESHOLDS_PER_UNIT)))
    return _RuleFamily(_at_or_above(np.sort(pos), thresholds), _at_or_above(np.sort(neg), thresholds),
                       pos.size, neg.size)


def _family_epsilons(family: _RuleFamily, delta: float) -> np.ndarray:
    """ε of every distinct rule outcome of a family (NaN where the reference skips the rule). A rule's ε depends
    only on its two counts, so each distinct (positive, negative) count pair is evaluated once: the same float32
    rates and the same maximum as evaluating the reference's ~10^5 rules one by one."""
    n_pos, n_neg = family.n_pos, family.n_neg
    seen = np.bincount(family.pos_in * (n_neg + 1) + family.neg_in, minlength=(n_pos + 1) * (n_neg + 1)) > 0
    pos_in, neg_in = np.divmod(np.flatnonzero(seen), n_neg + 1)
    fp_pos, fp_neg = np.float32(n_pos), np.float32(n_neg)
    pos_in, neg_in = pos_in.astype(np.float32), neg_in.astype(np.float32)
    tpr, fnr, fpr, tnr = pos_in / fp_pos, (fp_pos - pos_in) / fp_pos, neg_in / fp_neg, (fp_neg - neg_in) / fp_neg
    eps = np.zeros(tpr.shape, dtype=np.float32)
    perfect = (fpr + fnr == 0) & (tpr + tnr == 2)
    eps[perfect] = np.inf
    one_zero = (eps == 0) & (fpr * fnr == 0)
    eps[one_zero] = np.nan
    rest = eps == 0
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: rules the reference drops too
        candidates = np.stack([np.log(np.float32(1 - delta) - fpr[rest]) - np.log(fnr[rest]),
                               np.log(np.float32(1 - delta) - fnr[rest]) - np.log(fpr[rest])])
        eps[rest] = np.clip(np.nanmax(candidates, axis=0), 0, None) if rest.any() else eps[rest]
    return eps


def example_epsilon(pos: np.ndarray | Sequence[float], neg: np.ndarray | Sequence[float], delta: float = DELTA) -> float:
    """ε of one example from the positive and the negative set's φ (the reference's ``_get_epsilons`` for one
    column): see the module docstring."""
    pos, neg = _as_samples(pos, "pos"), _as_samples(neg, "neg")
    pos_diff, neg_diff = pos.max() - pos.min(), neg.max() - neg.min()
    largest, smallest = max(pos_diff, neg_diff), min(pos_diff, neg_diff)
    if largest > 0 and smallest / largest < COLLAPSED_RATIO:
        return EPSILON_CAP
    eps = np.concatenate([_family_epsilons(_double_threshold_rules(pos, neg), delta),
                          _family_epsilons(_single_threshold_rules(pos, neg), delta)])
    kept = eps[~np.isnan(eps)]
    if kept.size == 0:
        raise DuckInputError("no decision rule gave an ε for this example (the samples admit no threshold); "
                             "check the φ values")
    return float(np.clip(np.max(kept), 0.0, EPSILON_CAP))


@lru_cache(maxsize=32)
def epsilon_table(n_pos: int, n_neg: int, delta: float = DELTA) -> np.ndarray:
    """``eps[a, b]``: the ε of a rule that calls ``a`` of ``n_pos`` positive and ``b`` of ``n_neg`` negative models
    positive (float32 rates, as :func:`_family_epsilons`), ``∞`` for a perfect rule, ``−∞`` where the reference
    skips the rule (exactly one of FPR, FNR zero) or its ε is undefined. Read-only; cached per size."""
    a, b = np.meshgrid(np.arange(n_pos + 1), np.arange(n_neg + 1), indexing="ij")
    eps = _family_epsilons(_RuleFamily(a.ravel(), b.ravel(), n_pos, n_neg), delta)  # every pair is seen: same order
    table = np.where(np.isnan(eps), -np.inf, eps.astype(np.float64)).reshape(n_pos + 1, n_neg + 1)
    table.setflags(write=False)
    return table


#: comparison passes of :func:`_count_le_linspace`: its estimate is at most one point off (rounding), so two
#: passes settle every count (one correction, one check); the rest is a margin
_LINSPACE_PASSES = 8


def _count_le_linspace(start: np.ndarray, stop: np.ndarray, num: np.ndarray, values: np.ndarray) -> np.ndarray:
    """How many points of ``np.linspace(start, stop, num)`` are ``<= values``, elementwise and exactly: the k-th
    point is numpy's own float ``k * step + start`` (``step = (stop − start) / (num − 1)``), the last one ``stop``;
    an estimate from the step, then corrected by comparisons with those floats."""
    start, stop, values = np.broadcast_arrays(start, stop, values)
    num = np.broadcast_to(num, values.shape).astype(np.int64)
    div = np.maximum(num - 1, 1).astype(np.float64)
    step = (stop - start) / div

    def point(k: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            val = np.where(k == num - 1, stop, k * step + start)
        return np.where(k < 0, -np.inf, np.where(k >= num, np.inf, val))

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        est = np.floor((values - start) / np.where(step > 0, step, np.inf))
    k = np.clip(np.nan_to_num(est, nan=-1.0), -1, np.maximum(num - 1, -1)).astype(np.float64)
    flat = (num <= 1) | (step == 0)  # one point, or num copies of start (numpy's zero-step branch)
    k = np.where(flat, np.where(start <= values, num - 1.0, -1.0), k)
    for _ in range(_LINSPACE_PASSES):
        up = (k + 1 < num) & (point(k + 1) <= values) & ~flat  # no point past the last one (+inf values)
        down = (point(k) > values) & ~flat
        if not (up.any() or down.any()):
            return np.maximum(k + 1, 0).astype(np.int64)
        k = k + up - down
    raise RuntimeError("linspace count did not converge")  # pragma: no cover - steps are > 0.01 here


class _DoubleBlocks(NamedTuple):
    """The double-threshold blocks of every example (:func:`_double_threshold_blocks`)."""

    p_is_u: np.ndarray  # (n,) the peakier set P (positive for these rules) is the unlearned one
    width: np.ndarray  # (n,) w: the smaller of the two sets' ranges
    a_lo: np.ndarray  # (n,) the right ends' grid: np.linspace(a_lo, b_hi, n_right)
    b_hi: np.ndarray
    n_right: np.ndarray
    tol: np.ndarray  # (n,) the bounds' rounding tolerance
    upper: np.ndarray  # (n, M, M) block z_i .. z_j may be held by some rule (necessary conditions)
    lower: np.ndarray  # (n, M, M) block z_i .. z_j is held by some rule (sufficient conditions)


def _double_threshold_blocks(z: np.ndarray, u: np.ndarray, r: np.ndarray, pos_is_u: np.ndarray) -> _DoubleBlocks:
    """Which blocks ``z_i .. z_j`` of the sorted pooled values ``z`` (n, M) some double-threshold rule holds
    exactly, bounded from both sides without enumerating the rules: ``lower`` ⊆ {held} ⊆ ``upper`` (a rule is a
    right end ``r_k`` of ``np.linspace(a_lo, b_hi, n_right)`` with a left end of ``np.linspace(r_k − w − 2,
    r_k − w + 2, 400)``; the reference's grids). The peakier set P is positive (the reference swaps when
    pos_diff >= neg_diff); blocks between the bounds are settled by :func:`_blocks_reached`."""
    m = z.shape[1]
    range_u, range_r = np.ptp(u, axis=0), np.ptp(r, axis=0)
    range_pos = np.where(pos_is_u, range_u, range_r)
    range_neg = np.where(pos_is_u, range_r, range_u)
    p_is_u = np.where(range_pos >= range_neg, ~pos_is_u, pos_is_u)  # the reference swaps when pos_diff >= neg_diff
    width = np.where(range_pos > range_neg, range_neg, range_pos)
    p_min = np.where(p_is_u, u.min(axis=0), r.min(axis=0))
    p_max = np.where(p_is_u, u.max(axis=0), r.max(axis=0))
    buffer = DOUBLE_THRESHOLD_BUFFER
    a_lo, b_hi = p_min + width - buffer, p_max + buffer
    n_right = np.ceil((b_hi - a_lo) * THRESHOLDS_PER_UNIT)
    step_r = (b_hi - a_lo) / np.maximum(n_right - 1, 1)
    step_l = 2 * buffer / (math.ceil(2 * buffer * THRESHOLDS_PER_UNIT) - 1)
    scale = 1.0 + np.abs(z).max(axis=1) + width
    tol = 1e-9 * scale
    c = (slice(None), None, None)
    zprev = np.concatenate([np.full((z.shape[0], 1), -np.inf), z[:, :-1]], axis=1)  # (n, M): z_{i-1}
    znext = np.concatenate([z[:, 1:], np.full((z.shape[0], 1), np.inf)], axis=1)  # z_{j+1}
    # r in [max(z_j, A, z_{i-1} + w - 2), min(z_{j+1}, B, z_i + w + 2)] and l in (z_{i-1}, z_i]: every pair of
    # bounds splits into a condition on i, one on j, and two on the differences z_j - z_i and z_{j+1} - z_{i-1}
    w, t, sr = width[:, None], tol[:, None], step_r[:, None]
    a, b = a_lo[:, None], b_hi[:, None]
    with np.errstate(invalid="ignore"):
        up_i = (zprev < z) & (a - t < z + (w + buffer) + t) & (zprev + (w - buffer) - t < b + t)
        up_j = (z < znext) & (z < b + t) & (a - t < znext)
        lo_i = ((z - zprev > step_l + t) & (b - (zprev + (w - buffer + step_l) + t) > sr + t)
                & ((z + (w + buffer - step_l) - t) - a > sr + t))
        lo_j = (znext - z > sr + t) & (znext - a > sr + t) & (b - z > sr + t)
        d_in = z[:, None, :] - z[:, :, None]  # z_j - z_i
        d_out = znext[:, None, :] - zprev[:, :, None]  # z_{j+1} - z_{i-1}
    valid = np.triu(np.ones((m, m), dtype=bool))[None]
    w3, t3, sr3 = width[c], tol[c], step_r[c]
    upper = (valid & up_i[:, :, None] & up_j[:, None, :] & (d_in < w3 + buffer + t3)
             & (d_out > w3 - buffer - t3))
    lower = (valid & lo_i[:, :, None] & lo_j[:, None, :] & (d_in < w3 + buffer - step_l - sr3 - 2 * t3)
             & (d_out > w3 - buffer + step_l + sr3 + 2 * t3))
    return _DoubleBlocks(p_is_u, width, a_lo, b_hi, n_right, tol, upper, lower)


def _batched_epsilons(pos_is_u: np.ndarray, u: np.ndarray, r: np.ndarray, delta: float) -> np.ndarray:
    """The largest rule ε (unclipped; ``−∞`` where no rule gives one) of every column of ``u`` (N, n) and ``r``
    (R, n) (module docstring). ``pos_is_u``: the unlearned set is the single family's positive one (the larger
    median)."""
    n_u, n_r = u.shape[0], r.shape[0]
    m = n_u + n_r
    pooled = np.concatenate([u, r]).T  # (n, M)
    order = np.argsort(pooled, axis=1, kind="stable")
    z = np.take_along_axis(pooled, order, axis=1)
    is_u = order < n_u  # (n, M)
    cum_u = np.concatenate([np.zeros((z.shape[0], 1), np.int64), np.cumsum(is_u, axis=1)], axis=1)  # (n, M + 1)
    t_ur, t_ru = epsilon_table(n_u, n_r, delta), epsilon_table(n_r, n_u, delta)
    flat = np.concatenate([t_ur.ravel(), t_ru.ravel()])

    def lookup(in_u: np.ndarray, in_r: np.ndarray, u_positive: np.ndarray) -> np.ndarray:
        idx = np.where(u_positive, in_u * (n_r + 1) + in_r, t_ur.size + in_r * (n_u + 1) + in_u)
        return flat[idx]

    # single thresholds: t in (z_{i-1}, z_i] calls z_i .. z_{M-1} positive
    lo, hi = z[:, :1], z[:, -1:]
    num = np.ceil((hi - lo) * THRESHOLDS_PER_UNIT).astype(np.int64)
    cnt = _count_le_linspace(lo, hi, num, z)  # (n, M)
    hit = np.diff(np.concatenate([np.zeros((z.shape[0], 1), np.int64), cnt], axis=1), axis=1) >= 1
    in_u = n_u - cum_u[:, :-1]
    in_r = (m - np.arange(m))[None, :] - in_u
    single = np.where(hit, lookup(in_u, in_r, pos_is_u[:, None]), -np.inf).max(axis=1)

    # double thresholds: the blocks z_i .. z_j (i on axis 1, j on axis 2) the peakier set's rules hold
    blocks = _double_threshold_blocks(z, u, r, pos_is_u)
    p_is_u, upper, lower = blocks.p_is_u, blocks.upper, blocks.lower
    c = (slice(None), None, None)
    # the ε of block (i, j) from its number of U models and its length j - i + 1, through a table per role
    cu = cum_u.astype(np.int32)
    block_u = cu[:, None, 1:] - cu[:, :-1, None]  # U models among z_i .. z_j
    length = (np.arange(1, m + 1, dtype=np.int32)[None, :] - np.arange(m, dtype=np.int32)[:, None])[None]
    by_length = _block_tables(n_u, n_r, delta)  # (2, N + 1, M + 1): [P is U, P is R]
    offset = np.where(p_is_u, 0, by_length[0].size).astype(np.int32)[c]
    vals = by_length.ravel()[offset + block_u * np.int32(m + 1) + np.clip(length, 0, m)]
    best = np.maximum(single, np.where(lower, vals, -np.inf).max(axis=(1, 2)))
    # the blocks only the upper set holds and that would raise the maximum: resolved exactly on the grids
    e, i, j = np.nonzero(upper & ~lower & (vals > best[c]))
    if e.size:
        reached = _blocks_reached(z, e, i, j, blocks.width, blocks.a_lo, blocks.b_hi, blocks.n_right, blocks.tol)
        np.maximum.at(best, e[reached], vals[e[reached], i[reached], j[reached]])
    return best


def _blocks_reached(z: np.ndarray, e: np.ndarray, i: np.ndarray, j: np.ndarray, width: np.ndarray,
                    a_lo: np.ndarray, b_hi: np.ndarray, n_right: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """Does some double-threshold rule of example ``e`` hold exactly the sorted values ``z[e, i .. j]``? For
    every right end ``r_k`` in ``[z_j, z_{j+1})`` (and in reach of the block's left edge), whether one of its
    400 left ends (``np.linspace(r_k − w − 2, r_k − w + 2, 400)``, numpy's floats) falls in ``(z_{i−1}, z_i]``."""
    m = z.shape[1]
    buffer = DOUBLE_THRESHOLD_BUFFER
    n_left = math.ceil(2 * buffer * THRESHOLDS_PER_UNIT)
    a, b, num, w, t = a_lo[e], b_hi[e], n_right[e], width[e], tol[e]
    zi = z[e, i]
    zprev = np.where(i > 0, z[e, np.maximum(i - 1, 0)], -np.inf)
    zj = z[e, j]
    znext = np.where(j < m - 1, z[e, np.minimum(j + 1, m - 1)], np.inf)

    def below(v: np.ndarray) -> np.ndarray:  # right ends < v
        return _count_le_linspace(a, b, num, np.nextafter(v, -np.inf))

    k0 = np.maximum(below(zj), below(zprev + (w - buffer) - t))
    k1 = np.minimum(below(znext), _count_le_linspace(a, b, num, zi + (w + buffer) + t))  # exclusive
    count = np.maximum(k1 - k0, 0)
    reached = np.zeros(e.size, dtype=bool)
    if not count.any():
        return reached
    block = np.repeat(np.arange(e.size), count)
    k = (np.arange(block.size) - np.repeat(np.cumsum(count) - count, count) + k0[block]).astype(np.float64)
    nb = num[block]
    step = (b[block] - a[block]) / np.maximum(nb - 1, 1)
    right = np.where(k == nb - 1, b[block], k * step + a[block])  # np.linspace(a, b, num)[k]
    start, stop = (right - w[block]) - buffer, (right - w[block]) + buffer
    inside = (_count_le_linspace(start, stop, n_left, zi[block])
              - _count_le_linspace(start, stop, n_left, zprev[block]))
    np.logical_or.at(reached, block[inside >= 1], True)
    return reached


@lru_cache(maxsize=32)
def _block_tables(n_u: int, n_r: int, delta: float) -> np.ndarray:
    """``out[role, a, L]``: the ε of a double-threshold block of length L holding ``a`` unlearned models, with the
    unlearned set positive (role 0: :func:`epsilon_table` ``(N, R)[a, L − a]``) or the retrained one (role 1:
    ``(R, N)[L − a, a]``); float32, ``−∞`` where no such block exists."""
    m = n_u + n_r
    out = np.full((2, n_u + 1, m + 1), -np.inf, dtype=np.float32)
    t_ur, t_ru = epsilon_table(n_u, n_r, delta), epsilon_table(n_r, n_u, delta)
    for a in range(n_u + 1):
        for b in range(n_r + 1):
            out[0, a, a + b] = t_ur[a, b]
            out[1, a, a + b] = t_ru[b, a]
    out.setflags(write=False)
    return out


#: examples per chunk of the batched ε: about this many (examples × (N + R)²) entries at once
_CHUNK_ENTRIES = 1 << 21


def epsilons(unlearned: np.ndarray, retrained: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """ε(x) for every example: ``unlearned`` / ``retrained`` are φ ``(models, examples)``; per example the set
    with the larger median is the positive one (the retrained set only when its median is strictly larger, as
    in the reference). Batched (module docstring); the blocks the batched bounds leave open are settled exactly
    by :func:`_blocks_reached`."""
    u, r = _check_pair(unlearned, retrained)
    n = u.shape[1]
    out = np.empty(n)
    m = u.shape[0] + r.shape[0]
    chunk = max(1, _CHUNK_ENTRIES // (m * m))
    for s in range(0, n, chunk):
        uc, rc = u[:, s:s + chunk], r[:, s:s + chunk]
        pos_is_u = ~(np.median(rc, axis=0) > np.median(uc, axis=0))
        best = _batched_epsilons(pos_is_u, uc, rc, delta)
        ru, rr = np.ptp(uc, axis=0), np.ptp(rc, axis=0)
        largest, smallest = np.maximum(ru, rr), np.minimum(ru, rr)
        with np.errstate(divide="ignore", invalid="ignore"):
            collapsed = (largest > 0) & (smallest / largest < COLLAPSED_RATIO)
        if (np.isneginf(best) & ~collapsed).any():
            raise DuckInputError("no decision rule gave an ε for this example (the samples admit no threshold); "
                                 "check the φ values")
        eps = np.where(collapsed, EPSILON_CAP, np.clip(best, 0.0, EPSILON_CAP))
        out[s:s + chunk] = eps
    return out


def epsilons_per_example(unlearned: np.ndarray, retrained: np.ndarray, delta: float = DELTA) -> np.ndarray:
    """:func:`epsilons` one example at a time through :func:`example_epsilon` (the reference path)."""
    u, r = _check_pair(unlearned, retrained)
    retrain_positive = np.median(r, axis=0) > np.median(u, axis=0)
    return np.array([example_epsilon(r[:, i], u[:, i], delta) if retrain_positive[i]
                     else example_epsilon(u[:, i], r[:, i], delta) for i in range(u.shape[1])])


def _max_epsilon(n_models: int) -> int:
    """Where F's last bucket ends: ``⌈ln(n_models − 1)⌉``."""
    return math.ceil(math.log(n_models - 1))


def has_buckets(n_models: int) -> bool:
    """Whether F is informative for a set of ``n_models``: its buckets end at ``⌈ln(n_models − 1)⌉``, which is 0
    for two models, where every ε earns 0 points whatever the margins."""
    return _max_epsilon(n_models) > 0


def epsilon_points(eps: np.ndarray, n_models: int) -> np.ndarray:
    """Points per ε: buckets of width 0.5 from 0 worth 1, 1/2, 1/4, ... while a bucket ends at most at
    ``⌈ln(n_models − 1)⌉``; an ε beyond the last bucket earns 0."""
    if n_models < 2:
        raise DuckInputError(f"the ε score needs at least 2 unlearned models, got {n_models}")
    n_buckets = int(_max_epsilon(n_models) / 0.5)
    eps = np.asarray(eps, dtype=np.float64)
    bucket = np.floor(eps / 0.5)
    return np.where(bucket < n_buckets, 0.5 ** np.clip(bucket, 0, None), 0.0)


def forgetting_quality(unlearned: np.ndarray, retrained: np.ndarray, delta: float = DELTA) -> float:
    """F: the mean points of the forget examples' ε (the reference's ``compute_forget_score_from_confs``)."""
    u, _ = _check_pair(unlearned, retrained)
    return float(epsilon_points(epsilons(unlearned, retrained, delta), u.shape[0]).mean())


def _check_pair(unlearned: np.ndarray, retrained: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u, r = np.asarray(unlearned, dtype=np.float64), np.asarray(retrained, dtype=np.float64)
    if u.ndim != 2 or r.ndim != 2 or u.shape[1] != r.shape[1]:
        raise DuckInputError(f"φ arrays must be (models, examples) over the same examples, got {u.shape} and "
                             f"{r.shape}")
    if u.shape[0] < 2 or r.shape[0] < 2:
        raise DuckInputError(f"need at least 2 unlearned and 2 retrained models, got {u.shape[0]} and {r.shape[0]}")
    if not (np.isfinite(u).all() and np.isfinite(r).all()):
        raise DuckInputError("φ arrays hold NaN or inf values")
    return u, r


