"""LSH index for L2 with exact deletion and (almost) uniform r-near-neighbour sampling.

Hashing (Datar, Immorlica, Indyk & Mirrokni 2004; seeds/002 §5): a unit hash is
``h(x) = floor((a . x + b) / w)`` with ``a ~ N(0, I)`` and ``b ~ U[0, w)``; a table concatenates ``k`` unit
hashes; ``L`` tables. A table's bucket is the set of stored points with the same k-tuple. The k-tuple is
stored as a 62-bit key made of two Carter-Wegman universal hashes modulo the prime ``2^31 - 1`` (the
E2LSH construction): equal tuples always share a key; two distinct tuples share one with probability
``<= 2^-62`` per pair, i.e. about ``L B^2 2^-63`` merged buckets for B buckets per table (1e-9 for the
benchmarks here). Projections are float64 so a point's bucket does not depend on the batch it is hashed in.

Storage: per table the keys sorted ascending (ties by point id) with the matching ids, ``(L, n)`` each.
``add`` merges, ``remove`` filters: deletion is immediate and exact -- the arrays equal those of an index
built from the remaining points with the same seed (lazy learning, seeds/000's "deletion efficiency").
A removed point's vector and keys are overwritten.

Sampling (Har-Peled & Mahabadi 2019, seeds/002 §3-5). For a query q, ``G`` = its L buckets and
``M(q)`` = the points within ``r`` of q found in them (farther points are outliers, rejected when drawn,
§3.5). Methods, each a rejection sampler batched over all queries and samples:

* ``uniform``: a uniformly random non-empty bucket of G, a uniform point in it (§5 "Uniform/Uniform");
* ``weighted``: a bucket with probability proportional to its size, a uniform point in it -- P(p) is
  proportional to deg(p), the number of q's buckets holding p (§5 "Weighted/Uniform");
* ``exact_degree``: ``weighted`` then accept with probability ``1/deg(p)``, deg computed exactly over the L
  tables: uniform on M(q) (§3.2, Lemma 3.1; §5 "Optimal");
* ``approx_degree``: ``weighted`` then probe uniformly random tables of G until one holds p; found at probe
  i, accept with probability ``min(1, i / (L Delta))``. ``Delta = 1`` is the paper's experiment (§5, the
  estimate deg ~ L/i); ``gamma`` selects Lemma 3.7 instead: ``Delta = ceil(ln 1/gamma) + 4``, probing stops
  after ``L Delta + 1`` probes with acceptance 0, and the acceptance probability is within gamma of
  ``1/(deg Delta)`` (Lemma 3.8: (1 +- eps)-uniform).

  Only the index i of the first hit enters the decision, and for probes of uniformly random tables with
  replacement (Lemma 3.6) i is Geometric(deg(p)/L), so a proposal is accepted with a probability that
  depends on deg(p) alone (:func:`approx_acceptance`, closed form). The paper probes because it does not
  know deg(p); the batched scan below counts deg(p) of every candidate anyway, so the default
  ``probes="closed_form"`` accepts with that probability in O(1) instead of making the probes, and
  ``probes="tables"`` makes them (one lookup each, O(L/deg) expected per proposal). Both give exactly the
  same distribution of samples (tested against the closed form): a faster simulation of the paper's
  sampler, not a different sampler -- its bias (P(p) proportional to deg E[min(1, i/(L Delta))], not
  constant) is the paper's.

Preparing a query batch scans its buckets once (the usual LSH query cost: ids, distances of the distinct
candidates; deg(p) of every distinct candidate is counted on the way, and approx_degree builds the
(candidate, table) bucket-membership table when its probes are made one by one), after which a draw costs
O(1) (uniform, weighted, exact_degree, approx_degree with closed-form probes) or O(L/deg) expected
(approx_degree with ``probes="tables"``: one lookup per probe) operations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from duck.errors import DuckInputError
from duck.utils import (
    as_tensor,
    check_device,
    check_number,
    check_positive_int,
    check_radius,
    check_seed,
    int64_array,
    real_array_tensor,
)

_PRIME = 2_147_483_647  # 2^31 - 1: (value mod p) * multiplier < 2^62 fits in int64
#: most samples one ``sample`` call draws (all queries together): the ids alone are 8 bytes each
MAX_SAMPLES_PER_CALL = 2**28
#: coefficients of the L * k projections of dimension dim an index may hold
MAX_PROJECTION_VALUES = 2**28
SAMPLING_METHODS = ("uniform", "weighted", "exact_degree", "approx_degree")
PROBE_MODES = ("closed_form", "tables")
#: Largest Delta of approx_degree (``approx_delta``, or the Delta that ``gamma`` implies). A near point of
#: degree deg is accepted with probability (1 - s^(L Delta)) / (deg Delta), s^(L Delta) <= e^-Delta: from
#: Delta = 38 on, 1 - e^-Delta rounds to 1 in float64 (the samples are as uniform as float64 can tell), while
#: the proposals per sample keep growing as deg Delta. 64 leaves headroom (gamma down to about e^-60).
MAX_APPROX_DELTA = 64


def _preview(value: Any) -> str:
    """A short one-line repr of a user value for error messages."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def approx_acceptance(degree: torch.Tensor, L: int, delta: int, lemma37: bool) -> torch.Tensor:
    """P(approx_degree accepts a proposed near point of degree ``deg``), float64, elementwise.

    Probes of uniformly random tables (with replacement, Lemma 3.6) first hit at i ~ Geometric(p), p = deg/L,
    so with s = 1 - p, P(i > m) = s^m. The heuristic accepts iff coin < min(1, i/(L Delta)), i.e. iff
    i > m for m = floor(coin L Delta) uniform on {0, ..., L Delta - 1}:
    ``sum_m s^m / (L Delta) = (1 - s^(L Delta)) / (L Delta p)``. Lemma 3.7 also needs i <= L Delta + 1:
    ``P(m < i <= L Delta + 1) = s^m - s^(L Delta + 1)``, i.e. the same minus ``s^(L Delta + 1)``.
    (deg = L gives 1 / (L Delta) and, for Lemma 3.7, the same: s = 0.)
    """
    p = degree.to(torch.float64) / L
    s = 1.0 - p
    n = L * delta
    accept = (1.0 - s**n) / (n * p)
    return accept - s ** (n + 1) if lemma37 else accept


@dataclass
class _Candidates:
    """The buckets of a batch of Q queries, flattened (entries grouped by query, then table)."""

    query_keys: torch.Tensor  # (Q, L) bucket key of each query in each table
    bucket_size: torch.Tensor  # (Q, L) number of stored points in the bucket
    bucket_offset: torch.Tensor  # (Q, L) first entry of the bucket in the flat arrays
    query_offset: torch.Tensor  # (Q,) first entry of the query
    query_entries: torch.Tensor  # (Q,) m_q = sum of its bucket sizes
    entry_id: torch.Tensor  # (E,) point id of each entry
    entry_near: torch.Tensor  # (E,) the point lies within r of the query
    near_ids: list[torch.Tensor]  # M(q) per query, sorted ids
    entry_pair: torch.Tensor  # (E,) index of the entry's distinct (query, point) pair
    entry_table: torch.Tensor  # (E,) table of the entry's bucket
    pair_degree: torch.Tensor  # (P,) deg(p): number of the query's L buckets holding the point
    n_tables: int  # L

    @cached_property
    def member(self) -> torch.Tensor:
        """(P, L) bool: does bucket t of the query hold the point? The lookup a probe makes (§3.4); built on
        first use (approx_degree with ``probes="tables"``), once per ``sample`` call."""
        member = torch.zeros(self.pair_degree.numel(), self.n_tables, dtype=torch.bool, device=self.entry_pair.device)
        member[self.entry_pair, self.entry_table] = True
        return member


@dataclass
class SampleStats:
    """Work done by the last :meth:`LSHIndex.sample` call (seconds: bucket scan, then drawing)."""

    rounds: int = 0
    proposals: int = 0
    probes: int = 0
    scan_seconds: float = 0.0
    draw_seconds: float = 0.0


class LSHIndex:
    """p-stable L2 LSH index with ``k`` hashes per table and ``L`` tables; see the module docstring.

    Args:
        dim: dimension of the points.
        k: unit hashes concatenated per table (larger k: smaller, purer buckets).
        L: number of tables (larger L: fewer missed neighbours).
        w: bucket width of a unit hash (in the units of the data; E2LSH uses about 4 r).
        seed: seed of the hash functions (the index is a deterministic function of seed and points).
        device: "auto", "cpu" or "cuda".
    """

    def __init__(self, dim: int, k: int, L: int, w: float, seed: int = 0, *, device: str | torch.device = "auto"):
        self.dim = check_positive_int(dim, "dim")
        self.k = check_positive_int(k, "k")
        self.L = check_positive_int(L, "L")
        self.w = check_number(w, "w (bucket width)", 0.0, True)
        self.seed = check_seed(seed, "seed")
        self.device = check_device(device, "device")
        if self.L * self.k * self.dim > MAX_PROJECTION_VALUES:
            raise DuckInputError(
                f"L * k * dim = {self.L} * {self.k} * {self.dim} projection coefficients is more than "
                f"{MAX_PROJECTION_VALUES} (2 GiB of float64); lower k or L"
            )
        gen = torch.Generator().manual_seed(self.seed)
        cpu = {"generator": gen, "device": "cpu"}  # drawn on the CPU: one seed, the same index on any device
        self.projections = torch.randn(self.L * self.k, self.dim, dtype=torch.float64, **cpu).to(self.device)
        self.offsets = (torch.rand(self.L * self.k, dtype=torch.float64, **cpu) * self.w).to(self.device)
        self.multipliers = torch.randint(1, _PRIME, (2, self.L, self.k), **cpu).to(self.device)
        self._points = torch.zeros((0, self.dim), dtype=torch.float64, device=self.device)  # (N, dim)
        self._keys = torch.zeros((0, self.L), dtype=torch.int64, device=self.device)  # (N, L); -1 once removed
        self._alive = torch.zeros(0, dtype=torch.bool, device=self.device)  # (N,)
        self._sorted_keys = torch.zeros((self.L, 0), dtype=torch.int64, device=self.device)  # (L, n) ascending
        self._sorted_ids = torch.zeros((self.L, 0), dtype=torch.int64, device=self.device)  # (L, n)
        self.last_sample_stats = SampleStats()

    # ------------------------------------------------------------------ hashing and updates
    def hash(self, X: torch.Tensor) -> torch.Tensor:
        """Bucket keys of points X (n, dim) float64 in every table: (n, L) int64."""
        keys = torch.empty((X.shape[0], self.L), dtype=torch.int64, device=self.device)
        block = max(1, (1 << 20) // (self.L * self.k))  # ~2M int64 codes per block
        for s in range(0, X.shape[0], block):
            proj = X[s : s + block] @ self.projections.T + self.offsets  # (b, L k)
            codes = torch.floor(proj / self.w).to(torch.int64).view(-1, self.L, self.k)  # (b, L, k)
            reduced = codes.remainder(_PRIME)  # in [0, p)
            h = (reduced[None] * self.multipliers[:, None]).remainder(_PRIME).sum(-1).remainder(_PRIME)  # (2, b, L)
            keys[s : s + block] = h[0] * _PRIME + h[1]
        return keys

    def _as_points(self, X: Any, name: str) -> torch.Tensor:
        """Real-valued finite (n, dim) points as float64 on the index device (complex or bool data is refused)."""
        t = real_array_tensor(X, name, f"(n, {self.dim})")
        try:
            t = as_tensor(t, device=self.device, dtype=torch.float64, name=name)
        except ValueError as e:
            raise DuckInputError(str(e)) from None
        if t.ndim != 2 or t.shape[1] != self.dim:
            raise DuckInputError(f"{name} must have shape (n, {self.dim}), got {tuple(t.shape)}; pass X[None] for one point")
        return t

    def add(self, X: Any) -> torch.Tensor:
        """Insert points X (n, dim); returns their ids (consecutive, never reused)."""
        points = self._as_points(X, "X")
        keys = self.hash(points)  # (n, L)
        ids = torch.arange(self._points.shape[0], self._points.shape[0] + points.shape[0], device=self.device)
        self._points = torch.cat([self._points, points])
        self._keys = torch.cat([self._keys, keys])
        self._alive = torch.cat([self._alive, torch.ones(points.shape[0], dtype=torch.bool, device=self.device)])
        merged_keys = torch.cat([self._sorted_keys, keys.T], 1)  # (L, n_old + n)
        merged_ids = torch.cat([self._sorted_ids, ids.expand(self.L, -1)], 1)
        # stable sort: equal keys keep (old ids, new ids) order = ascending ids, as a fresh build would
        merged_keys, order = torch.sort(merged_keys, dim=1, stable=True)
        self._sorted_keys, self._sorted_ids = merged_keys, torch.gather(merged_ids, 1, order)
        return ids

    def _check_ids(self, ids: Any, name: str = "ids") -> torch.Tensor:
        """Ids (an int or a 1-D array of ints) of stored points as an int64 tensor on the index device, else a
        ``DuckInputError`` (the one id check of remove, query and sample)."""
        t = torch.from_numpy(int64_array(ids, name, floats=False, hint="pass point ids as returned by add"))
        n = self._points.shape[0]
        bad = t[(t < 0) | (t >= n)]
        if bad.numel():
            valid = f"valid ids: 0..{n - 1}" if n else "the index is empty"
            raise DuckInputError(f"{name} {bad[:5].tolist()} were never added ({valid})")
        dead = t[~self._alive.cpu()[t]]
        if dead.numel():
            raise DuckInputError(f"{name} {dead[:5].tolist()} refer to removed points; they can no longer be used")
        return t.to(self.device)

    def remove(self, ids: Any) -> None:
        """Delete points by id, immediately and exactly (their vectors and keys are erased)."""
        ids = self._check_ids(ids)
        if torch.unique(ids).numel() != ids.numel():
            raise DuckInputError("ids lists a point twice; pass each id once")
        removed = torch.zeros(self._points.shape[0], dtype=torch.bool, device=self.device)
        removed[ids] = True
        keep = ~removed[self._sorted_ids]  # (L, n): every table holds each id exactly once
        self._sorted_keys = self._sorted_keys[keep].view(self.L, -1)
        self._sorted_ids = self._sorted_ids[keep].view(self.L, -1)
        self._alive[ids] = False
        self._points[ids] = 0.0
        self._keys[ids] = -1

    def __len__(self) -> int:
        return int(self._sorted_ids.shape[1])

    @property
    def ids(self) -> torch.Tensor:
        """Ids of the stored (not removed) points, ascending."""
        return self._alive.nonzero().flatten()

    def table(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(keys, ids)`` of table ``index``: keys ascending, ties by id (one bucket = one run of a key)."""
        try:
            table = check_positive_int(index, "table index", 0)
        except DuckInputError:
            table = self.L  # not a non-negative integer: the same message as out of range
        if table >= self.L:
            raise DuckInputError(f"table index {index!r} must be an integer in 0..{self.L - 1} (the index has L={self.L})")
        return self._sorted_keys[table], self._sorted_ids[table]

    # ------------------------------------------------------------------ queries
    def _as_queries(self, queries: Any) -> torch.Tensor:
        """(Q, dim) points, or a 1-D integer array of stored ids (their stored vectors become the queries)."""
        arr = real_array_tensor(queries, "queries", f"(Q, {self.dim})")  # refuses strings, complex, bool
        if arr.ndim == 1 and not arr.is_floating_point():
            return self._points[self._check_ids(arr, "query ids")]
        if arr.ndim == 1:
            raise DuckInputError("queries must be (Q, dim) points or a 1-D integer array of ids; use q[None] for one point")
        return self._as_points(arr, "queries")

    def _candidates(self, q: torch.Tensor, r: float) -> _Candidates:
        """Scan the L buckets of each query: ids, distances of the distinct candidates, M(q)."""
        n_q = q.shape[0]
        qkeys = self.hash(q)  # (Q, L)
        lo = torch.searchsorted(self._sorted_keys, qkeys.T.contiguous(), right=False)  # (L, Q)
        hi = torch.searchsorted(self._sorted_keys, qkeys.T.contiguous(), right=True)
        start, size = lo.T, (hi - lo).T  # (Q, L)
        flat_size = size.flatten()  # (Q L,)
        bucket_offset = (torch.cumsum(flat_size, 0) - flat_size).view(n_q, self.L)
        query_entries = size.sum(1)  # (Q,)
        query_offset = torch.cumsum(query_entries, 0) - query_entries
        total = int(flat_size.sum())
        owner = torch.repeat_interleave(torch.arange(n_q * self.L, device=self.device), flat_size)  # (E,)
        within = torch.arange(total, device=self.device) - bucket_offset.flatten()[owner]
        table = owner % self.L
        entry_id = self._sorted_ids[table, start.flatten()[owner] + within]  # (E,)
        entry_query = owner // self.L
        n_stored = max(1, self._points.shape[0])
        pair, inverse = torch.unique(entry_query * n_stored + entry_id, return_inverse=True)  # distinct (q, id)
        pair_query, pair_id = pair // n_stored, pair % n_stored
        pair_near = torch.empty(pair.numel(), dtype=torch.bool, device=self.device)
        block = max(1, (1 << 22) // self.dim)
        for s in range(0, pair.numel(), block):
            diff = self._points[pair_id[s : s + block]] - q[pair_query[s : s + block]]  # (b, dim)
            pair_near[s : s + block] = diff.square().sum(1) <= r * r
        near_per_query = torch.bincount(pair_query[pair_near], minlength=n_q)
        near_ids = list(torch.split(pair_id[pair_near], near_per_query.tolist()))
        degree = torch.bincount(inverse, minlength=pair.numel())  # each (pair, table) is one entry
        return _Candidates(
            qkeys, size, bucket_offset, query_offset, query_entries, entry_id, pair_near[inverse], near_ids,
            inverse, table, degree, self.L,
        )

    def query(self, queries: Any, r: float) -> list[torch.Tensor]:
        """``M(q)`` for each query: ids of the stored points within ``r`` found in q's L buckets (sorted).

        ``queries`` is (Q, dim) points or a 1-D integer array of stored ids (then the point itself is in
        its own result, at distance 0).
        """
        return self._candidates(self._as_queries(queries), check_radius(r)).near_ids

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        queries: Any,
        r: float,
        method: str = "exact_degree",
        n_samples: int | Any = 1,
        *,
        approx_delta: int = 1,
        gamma: float | None = None,
        probes: str = "closed_form",
        seed: int | torch.Generator | None = None,
        max_proposals: int = 1 << 22,
    ) -> torch.Tensor:
        """Draw i.i.d. samples from each query's r-neighbourhood M(q) with ``method`` (module docstring).

        Args:
            queries: (Q, dim) points or a 1-D integer array of stored ids.
            r: neighbourhood radius.
            method: "uniform", "weighted", "exact_degree" or "approx_degree".
            n_samples: samples per query, an int or one count per query.
            approx_delta: Delta of the approx_degree heuristic (paper §5 uses 1), an int in
                [1, ``MAX_APPROX_DELTA``].
            gamma: if given, a number in (0, 1): approx_degree uses Lemma 3.7 with Delta = ceil(ln 1/gamma) + 4
                (at most ``MAX_APPROX_DELTA``, i.e. gamma >= about e^-60).
            probes: how approx_degree decides: "closed_form" accepts with the probability that the probing
                accepts (:func:`approx_acceptance`, from deg(p), known from the scan), O(1) per proposal;
                "tables" makes the probes (one membership lookup each, O(L/deg)). Same output distribution.
            seed: None (fresh OS entropy), an int in [0, 2^63 - 1], or a torch.Generator on the index device.
            max_proposals: proposals drawn per round at most (memory bound), an int >= 1.
        Returns:
            (Q, max n_samples) int64 ids; -1 pads queries with fewer samples or an empty M(q).
        """
        if not isinstance(method, str) or method not in SAMPLING_METHODS:
            raise DuckInputError(f"method={method!r} is not supported; use one of {', '.join(SAMPLING_METHODS)}")
        if not isinstance(probes, str) or probes not in PROBE_MODES:
            raise DuckInputError(f"probes={probes!r} is not supported; use one of {', '.join(PROBE_MODES)}")
        r = check_radius(r)
        max_proposals = check_positive_int(max_proposals, "max_proposals")
        delta = self._approx_delta(approx_delta, gamma)
        gen = self._generator(seed)
        q = self._as_queries(queries)
        n_q = q.shape[0]
        wanted = self._sample_counts(n_samples, n_q).to(self.device)
        self._sync()
        t_start = time.perf_counter()
        cand = self._candidates(q, r)
        self._sync()
        if method == "exact_degree":  # deg over all L tables, counted once per (query, point) in the scan
            pair_accept = 1.0 / cand.pair_degree.to(torch.float64)
        elif method == "approx_degree" and probes == "closed_form":
            pair_accept = approx_acceptance(cand.pair_degree, self.L, delta, gamma is not None)
        else:
            pair_accept = None
        # acceptance probability of each bucket entry; 0 for outliers (farther than r: rejected, §3.5)
        accept_prob = None if pair_accept is None else pair_accept[cand.entry_pair] * cand.entry_near
        t_scanned = time.perf_counter()
        has_near = torch.tensor([ids.numel() > 0 for ids in cand.near_ids], dtype=torch.bool, device=self.device)
        remaining = torch.where(has_near, wanted, torch.zeros_like(wanted))
        out = torch.full((n_q, int(wanted.max()) if n_q else 0), -1, dtype=torch.int64, device=self.device)
        filled = torch.zeros(n_q, dtype=torch.int64, device=self.device)
        rate = torch.full((n_q,), 0.5, dtype=torch.float64, device=self.device)  # acceptance-rate estimate
        stats = SampleStats()
        while bool((remaining > 0).any()):
            per_query = torch.ceil(remaining / rate * 1.2).to(torch.int64) * (remaining > 0)
            if int(per_query.sum()) > max_proposals:
                per_query = torch.clamp(per_query * max_proposals // int(per_query.sum()), min=1) * (remaining > 0)
            query_idx = torch.repeat_interleave(torch.arange(n_q, device=self.device), per_query)  # (B,) grouped
            ids, accepted, probes = self._propose(cand, query_idx, method, accept_prob, delta, gamma is not None, gen)
            stats.rounds += 1
            stats.proposals += int(query_idx.numel())
            stats.probes += probes
            # keep, per query, the first `remaining` accepted proposals (an acceptance-only stopping rule)
            acc_pos = accepted.nonzero().flatten()  # (A,) in proposal order, hence grouped by query
            acc_query, acc_id = query_idx[acc_pos], ids[acc_pos]
            n_acc = torch.bincount(acc_query, minlength=n_q)
            first_acc = torch.cumsum(n_acc, 0) - n_acc  # (Q,) position of each query's first acceptance
            acc_rank = torch.arange(acc_pos.numel(), device=self.device) - first_acc[acc_query]  # rank within query
            keep = acc_rank < remaining[acc_query]
            out[acc_query[keep], filled[acc_query[keep]] + acc_rank[keep]] = acc_id[keep]
            taken = torch.minimum(n_acc, remaining)
            filled += taken
            remaining -= taken
            observed = n_acc.double() / per_query.clamp(min=1).double()
            rate = torch.where(per_query > 0, torch.clamp(torch.where(n_acc > 0, observed, rate / 4), min=1e-4), rate)
        self._sync()
        stats.scan_seconds, stats.draw_seconds = t_scanned - t_start, time.perf_counter() - t_scanned
        self.last_sample_stats = stats
        return out

    def _sync(self) -> None:
        """Wait for queued CUDA work so that the timings in :class:`SampleStats` are honest."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def _generator(self, seed: Any) -> torch.Generator:
        """The generator of a ``sample`` call: ``seed`` itself (a torch.Generator on the index device), or a new
        one seeded from ``seed`` (an int in [0, 2^63 - 1]) or, for None, from fresh OS entropy."""
        if isinstance(seed, torch.Generator):
            if seed.device.type != self.device.type:
                raise DuckInputError(f"seed is a torch.Generator on {seed.device}; pass one on {self.device} or an int")
            return seed
        gen = torch.Generator(device=self.device)
        if seed is None:
            gen.seed()
        else:
            gen.manual_seed(check_seed(seed, "seed"))
        return gen

    @staticmethod
    def _sample_counts(n_samples: Any, n_q: int) -> torch.Tensor:
        counts = torch.from_numpy(
            int64_array(n_samples, "n_samples", floats=False, keep_scalar=True, hint="pass an int or one int per query")
        )
        counts = counts.expand(n_q) if counts.ndim == 0 else counts
        if counts.numel() != n_q or bool((counts < 0).any()):
            raise DuckInputError(f"n_samples must be >= 0 and give one count per query ({n_q}), got {_preview(n_samples)}")
        total = sum(counts.tolist())  # Python ints: no int64 overflow
        if total > MAX_SAMPLES_PER_CALL:
            raise DuckInputError(
                f"n_samples asks for {total} samples in one call; at most {MAX_SAMPLES_PER_CALL} (their ids alone "
                "take 2 GiB): draw in several calls"
            )
        return counts.clone()

    @staticmethod
    def _approx_delta(approx_delta: Any, gamma: Any) -> int:
        """Delta of approx_degree: ``approx_delta`` in [1, MAX_APPROX_DELTA], or ceil(ln 1/gamma) + 4 for gamma in
        (0, 1) (Lemma 3.7), which must not exceed MAX_APPROX_DELTA either."""
        delta = check_positive_int(approx_delta, "approx_delta")
        if gamma is None:
            if delta > MAX_APPROX_DELTA:
                raise DuckInputError(
                    f"approx_delta={approx_delta!r} is too large: at most {MAX_APPROX_DELTA} (each sample costs about "
                    f"deg * Delta proposals, and beyond ~38 the distribution no longer changes in float64)"
                )
            return delta
        if delta != 1:
            raise DuckInputError("pass either approx_delta (heuristic) or gamma (Lemma 3.7, which fixes Delta), not both")
        g = check_number(gamma, "gamma", 0.0, True, 1.0, True)
        # -ln(g) is finite for every g > 0, 1/g is not (subnormal g): test the range before forming 1/g
        delta = math.inf if -math.log(g) > MAX_APPROX_DELTA else math.ceil(math.log(1.0 / g)) + 4
        if delta > MAX_APPROX_DELTA:
            raise DuckInputError(
                f"gamma={gamma!r} is too small: Delta = ceil(ln 1/gamma) + 4 must be at most {MAX_APPROX_DELTA}; "
                f"use gamma >= 1e-26 (the guarantee is below float64 precision from about 1e-16 on)"
            )
        return delta

    def _propose(
        self,
        cand: _Candidates,
        query_idx: torch.Tensor,
        method: str,
        accept_prob: torch.Tensor | None,
        delta: int,
        lemma37: bool,
        gen: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """One round: a proposal per entry of query_idx (B,); returns (ids, accepted mask, table probes made).
        ``accept_prob`` (E,): acceptance probability of each bucket entry when it is known (exact_degree,
        approx_degree in closed form); None for uniform, weighted and table probes."""
        n = query_idx.numel()
        u = torch.rand(n, generator=gen, dtype=torch.float64, device=self.device)
        if method == "uniform":
            nonempty = cand.bucket_size > 0  # (Q, L)
            cumulative = torch.cumsum(nonempty.flatten().to(torch.int64), 0)  # (Q L,)
            before = cumulative.view(-1, self.L)[:, -1] - nonempty.sum(1)  # (Q,) non-empty buckets of earlier queries
            pick = (u * nonempty.sum(1)[query_idx]).to(torch.int64) + 1  # 1-based rank among q's non-empty buckets
            flat = torch.searchsorted(cumulative, before[query_idx] + pick)  # (B,) index into (Q L)
            table = flat - query_idx * self.L
            size = cand.bucket_size[query_idx, table]
            u2 = torch.rand(n, generator=gen, dtype=torch.float64, device=self.device)
            entry = cand.bucket_offset[query_idx, table] + (u2 * size).to(torch.int64)
        elif accept_prob is not None:  # a uniform entry and the acceptance coin from one uniform u
            # entry rank = floor(u m_q); its fractional part is uniform on [0, 1) and independent of the rank
            # (u has 53 random bits; at most 31 go to the rank since m_q < 2^31, the rest make the coin)
            scaled = u * cand.query_entries[query_idx]
            rank = torch.floor(scaled)
            entry = cand.query_offset[query_idx] + rank.to(torch.int64)
            return cand.entry_id[entry], (scaled - rank) < accept_prob[entry], 0
        else:  # weighted, approx_degree with table probes: a uniform entry = bucket ~ size, then uniform point
            entry = cand.query_offset[query_idx] + (u * cand.query_entries[query_idx]).to(torch.int64)
        ids = cand.entry_id[entry]
        accepted = cand.entry_near[entry].clone()  # outliers (farther than r) are rejected (§3.5)
        if method in ("uniform", "weighted"):
            return ids, accepted, 0
        near = accepted.nonzero().flatten()  # only near proposals need a degree (independent rejections)
        coin = torch.rand(near.numel(), generator=gen, dtype=torch.float64, device=self.device)
        pair = cand.entry_pair[entry[near]]
        # approx_degree with table probes. With i the first probe that hits, the heuristic accepts iff
        # coin < min(1, i/(L Delta)), i.e. iff the first m = floor(coin L Delta) probes all miss: probing stops
        # at the first hit or after m probes (same distribution, fewer probes than finding i). Lemma 3.7 also
        # needs a hit by probe L Delta + 1.
        must_miss = torch.floor(coin * (self.L * delta)).to(torch.int64)
        member = cand.member
        hit, probes = self._probe(pair, must_miss, member, gen)
        accept = ~hit
        if lemma37:
            survivors = accept.nonzero().flatten()
            late_hit, more = self._probe(pair[survivors], self.L * delta + 1 - must_miss[survivors], member, gen)
            accept[survivors] = late_hit
            probes += more
        accepted[near] = accept
        return ids, accepted, probes

    def _probe(
        self, pair: torch.Tensor, budget: torch.Tensor, member: torch.Tensor, gen: torch.Generator
    ) -> tuple[torch.Tensor, int]:
        """Probe uniformly random tables of each query (with replacement, Lemma 3.6) until one of its buckets
        holds the point or ``budget`` probes are spent; returns (hit found (B,) bool, probes made within budget).

        A probe is one lookup in the (pair, table) bucket-membership table of the scan. All undecided points
        are probed together in chunks of doubling width (4, 8, 16, ...), masked beyond each point's budget:
        few Python steps, at most twice the probes a one-at-a-time loop would make.
        """
        hit = torch.zeros(pair.numel(), dtype=torch.bool, device=self.device)
        active = (budget > 0).nonzero().flatten()
        base = pair[active, None] * self.L  # (A, 1) row offsets into the flat membership table
        left = budget[active, None]
        width, probes = 4, 0
        small = torch.uint8 if self.L <= 256 else torch.int32  # table indices: fewer random bytes to draw
        while active.numel():
            tables = torch.randint(self.L, (active.numel(), width), generator=gen, device=self.device, dtype=small)
            in_budget = torch.arange(width, device=self.device) < left  # (A, T)
            found = (torch.take(member, base + tables) & in_budget).any(1)
            probes += int(in_budget.sum())
            hit[active[found]] = True
            left = left - width
            undecided = ~found & (left[:, 0] > 0)
            active, base, left = active[undecided], base[undecided], left[undecided]
            width *= 2
        return hit, probes
