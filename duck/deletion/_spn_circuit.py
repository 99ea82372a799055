"""A sum-product network compiled into layers of tensor ops: batched log-likelihood and ancestral sampling.

The tree is flattened once (after learning, and again after an unlearning request changed it): every node
gets a column of a (B, N) value matrix; leaves are evaluated in two batched ops (all Gaussian leaves, all
categorical leaves); internal nodes are grouped by height, and each height is one ``index_add_`` for its
product nodes and one scatter log-sum-exp for its sum nodes (seeds/001 Def. 1). There is no Python loop over
rows or nodes at inference time, only over heights (the depth of the tree).

Missing values (NaN) are marginalised: a leaf whose variable is NaN contributes log 1 = 0, which integrates
that variable out of every product it enters (the SPN is decomposable and smooth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

#: upper bound on the elements of one (rows x nodes) value block
_BLOCK_ELEMS = 1 << 22
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass
class _Level:
    """Internal nodes of one height: edges grouped by node type, parents indexed locally."""

    prod_start: int  # the product nodes are rows prod_start .. prod_start + Pp - 1 of the value matrix
    prod_nodes: torch.Tensor  # (Pp,) their global indices
    prod_edge_parent: torch.Tensor  # (Ep,) local index into prod_nodes
    prod_edge_child: torch.Tensor  # (Ep,) global child index
    sum_start: int
    sum_nodes: torch.Tensor  # (Ps,)
    sum_edge_parent: torch.Tensor  # (Es,)
    sum_edge_child: torch.Tensor  # (Es,)
    sum_edge_logw: torch.Tensor  # (Es,) log of the mixture weight


@dataclass
class Circuit:
    """The flattened SPN: Gaussian leaves are rows 0..Lg-1, categorical leaves the next Lc rows, then the
    internal nodes height by height (``levels``, bottom-up); ``root`` is the output row."""

    n_nodes: int
    n_vars: int
    root: int
    gauss_nodes: torch.Tensor  # (Lg,) node index of every Gaussian leaf
    gauss_vars: torch.Tensor  # (Lg,) its variable
    gauss_mean: torch.Tensor  # (Lg,)
    gauss_std: torch.Tensor  # (Lg,)
    cat_nodes: torch.Tensor  # (Lc,)
    cat_vars: torch.Tensor  # (Lc,)
    cat_log_probs: torch.Tensor  # (Lc, Kmax) log P(category); -inf beyond a variable's domain
    cat_domain: torch.Tensor  # (Lc,) number of categories K of each leaf's variable
    levels: list[_Level]


@dataclass
class CircuitBuilder:
    """Collects nodes in post-order (children before parents) and lays them out by height."""

    n_vars: int
    _kinds: list[str] = field(default_factory=list)
    _height: list[int] = field(default_factory=list)
    _gauss: list[tuple[int, int, float, float]] = field(default_factory=list)
    _cat: list[tuple[int, int, list[float]]] = field(default_factory=list)
    _edges: list[tuple[int, int, float]] = field(default_factory=list)  # (parent, child, weight or nan)

    def _new(self, kind: str, height: int) -> int:
        self._kinds.append(kind)
        self._height.append(height)
        return len(self._kinds) - 1

    def gaussian(self, var: int, mean: float, std: float) -> int:
        idx = self._new("leaf", 0)
        self._gauss.append((idx, var, mean, std))
        return idx

    def categorical(self, var: int, probs: list[float]) -> int:
        idx = self._new("leaf", 0)
        self._cat.append((idx, var, probs))
        return idx

    def product(self, children: list[int]) -> int:
        idx = self._new("product", 1 + max(self._height[c] for c in children))
        self._edges += [(idx, c, math.nan) for c in children]
        return idx

    def sum(self, children: list[int], weights: list[float]) -> int:
        idx = self._new("sum", 1 + max(self._height[c] for c in children))
        self._edges += [(idx, c, w) for c, w in zip(children, weights, strict=True)]
        return idx

    def build(self, root: int, device: torch.device) -> Circuit:
        f64 = dict(dtype=torch.float64, device=device)

        def long(values: list[int]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.long, device=device)

        k_max = max((len(p) for _, _, p in self._cat), default=1)
        log_probs = torch.full((len(self._cat), k_max), -math.inf, **f64)  # (Lc, Kmax)
        for row, (_, _, probs) in enumerate(self._cat):
            log_probs[row, : len(probs)] = torch.tensor(probs, **f64).log()
        # renumber: Gaussian leaves, categorical leaves, then every height's product and sum nodes, each a
        # contiguous block of rows of the value matrix (written in place, no scatter)
        height = max(self._height, default=0)
        nodes_at: list[dict[str, list[int]]] = [{"product": [], "sum": []} for _ in range(height + 1)]
        for i, kind in enumerate(self._kinds):
            if kind != "leaf":
                nodes_at[self._height[i]][kind].append(i)
        order = [g[0] for g in self._gauss] + [c[0] for c in self._cat]
        for level in nodes_at[1:]:
            order += level["product"] + level["sum"]
        new = {old: i for i, old in enumerate(order)}
        edges_at: list[dict[str, list[tuple[int, int, float]]]] = [
            {"product": [], "sum": []} for _ in range(height + 1)
        ]
        for p, c, w in self._edges:
            edges_at[self._height[p]][self._kinds[p]].append((new[p], new[c], w))
        levels = []
        for h in range(1, height + 1):
            p0 = new[nodes_at[h]["product"][0]] if nodes_at[h]["product"] else 0
            s0 = new[nodes_at[h]["sum"][0]] if nodes_at[h]["sum"] else 0
            p_edges, s_edges = edges_at[h]["product"], edges_at[h]["sum"]
            levels.append(
                _Level(
                    prod_start=p0,
                    prod_nodes=long([new[i] for i in nodes_at[h]["product"]]),
                    prod_edge_parent=long([p - p0 for p, _, _ in p_edges]),
                    prod_edge_child=long([c for _, c, _ in p_edges]),
                    sum_start=s0,
                    sum_nodes=long([new[i] for i in nodes_at[h]["sum"]]),
                    sum_edge_parent=long([p - s0 for p, _, _ in s_edges]),
                    sum_edge_child=long([c for _, c, _ in s_edges]),
                    sum_edge_logw=torch.tensor([w for _, _, w in s_edges], **f64).log(),
                )
            )
        n_gauss = len(self._gauss)
        return Circuit(
            n_nodes=len(self._kinds),
            n_vars=self.n_vars,
            root=new[root],
            gauss_nodes=torch.arange(n_gauss, device=device),
            gauss_vars=long([g[1] for g in self._gauss]),
            gauss_mean=torch.tensor([g[2] for g in self._gauss], **f64),
            gauss_std=torch.tensor([g[3] for g in self._gauss], **f64),
            cat_nodes=torch.arange(n_gauss, n_gauss + len(self._cat), device=device),
            cat_vars=long([c[1] for c in self._cat]),
            cat_log_probs=log_probs,
            cat_domain=long([len(c[2]) for c in self._cat]),
            levels=levels,
        )


def _log_likelihood_block(c: Circuit, X: torch.Tensor) -> torch.Tensor:
    """Log-density of the rows of one block. X (B, V) float64, NaN = missing -> (B,)

    Node-major layout: ``values`` is (N, B), so every gather / scatter of node values moves contiguous rows.
    """
    B = X.shape[0]
    Xt = X.T.contiguous()  # (V, B)
    any_missing = bool(torch.isnan(Xt).any())
    values = torch.empty(c.n_nodes, B, dtype=X.dtype, device=X.device)  # (N, B)
    Lg, Lc = c.gauss_nodes.numel(), c.cat_nodes.numel()
    if Lg:
        x = Xt.index_select(0, c.gauss_vars)  # (Lg, B)
        inv_std = c.gauss_std.reciprocal()[:, None]
        z = torch.addcmul((-c.gauss_mean)[:, None] * inv_std, x, inv_std)  # (x - mean) / std
        lp = values[:Lg]
        torch.addcmul(-(c.gauss_std.log() + _LOG_SQRT_2PI)[:, None], z, z, value=-0.5, out=lp)
        if any_missing:
            lp.masked_fill_(torch.isnan(x), 0.0)
    if Lc:
        codes = (torch.nan_to_num(Xt, nan=0.0) if any_missing else Xt).long().index_select(0, c.cat_vars)
        lp = values[Lg : Lg + Lc]
        torch.gather(c.cat_log_probs, 1, codes, out=lp)  # (Lc, B)
        if any_missing:
            lp.masked_fill_(torch.isnan(Xt).index_select(0, c.cat_vars), 0.0)
    for lv in c.levels:
        if lv.prod_nodes.numel():  # product: sum of the children's log-values
            acc = values[lv.prod_start : lv.prod_start + lv.prod_nodes.numel()].zero_()
            acc.index_add_(0, lv.prod_edge_parent, values.index_select(0, lv.prod_edge_child))
        if lv.sum_nodes.numel():  # sum: log sum_c w_c exp(child_c), stabilised by the per-node maximum
            terms = values.index_select(0, lv.sum_edge_child).add_(lv.sum_edge_logw[:, None])  # (Es, B)
            top = values[lv.sum_start : lv.sum_start + lv.sum_nodes.numel()].fill_(-math.inf)  # (Ps, B)
            top.scatter_reduce_(0, lv.sum_edge_parent[:, None].expand(-1, B), terms, reduce="amax")
            top.nan_to_num_(neginf=0.0)  # a node whose children are all -inf: stays -inf below (log 0)
            acc = torch.zeros_like(top).index_add_(
                0, lv.sum_edge_parent, terms.sub_(top.index_select(0, lv.sum_edge_parent)).exp_()
            )
            top.add_(acc.log_())
    return values[c.root]


def log_likelihood(c: Circuit, X: torch.Tensor) -> torch.Tensor:
    """Log-density of every row, in row blocks of bounded memory. X (B, V) float64 -> (B,)"""
    block = max(1, _BLOCK_ELEMS // max(c.n_nodes, 1))
    if X.shape[0] <= block:
        return _log_likelihood_block(c, X)
    return torch.cat([_log_likelihood_block(c, X[i : i + block]) for i in range(0, X.shape[0], block)])


def sample(c: Circuit, n: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Ancestral sampling, top-down by height: every sum node picks one child per sample by the Gumbel-max
    trick on its log-weights, every product node passes its samples to all children, and each variable is
    drawn from the one active leaf over it. Random numbers are drawn on the CPU (same draws on any device).
    -> (n, V) float64, categorical codes as floats
    """
    active = torch.zeros(c.n_nodes, n, dtype=torch.bool, device=device)  # (N, n) node on the sample's tree
    active[c.root] = True
    for lv in reversed(c.levels):
        if lv.prod_nodes.numel():
            active[lv.prod_edge_child] = active[lv.prod_nodes[lv.prod_edge_parent]]
        if lv.sum_nodes.numel():
            u = torch.rand(lv.sum_edge_child.numel(), n, generator=generator, dtype=torch.float64, device="cpu").to(device)
            keys = lv.sum_edge_logw[:, None] - torch.log(-torch.log(u.clamp_min(1e-300)))  # (Es, n) Gumbel
            parent = lv.sum_edge_parent[:, None].expand(-1, n)
            best = torch.full((lv.sum_nodes.numel(), n), -math.inf, dtype=torch.float64, device=device)
            best.scatter_reduce_(0, parent, keys, reduce="amax")  # (Ps, n)
            chosen = keys == best.gather(0, parent)  # (Es, n)
            active[lv.sum_edge_child] = active[lv.sum_nodes[lv.sum_edge_parent]] & chosen
    out = torch.zeros(c.n_vars, n, dtype=torch.float64, device=device)  # (V, n)
    if c.gauss_nodes.numel():
        z = torch.randn(c.gauss_nodes.numel(), n, generator=generator, dtype=torch.float64, device="cpu").to(device)
        values = c.gauss_mean[:, None] + c.gauss_std[:, None] * z  # (Lg, n)
        out.index_add_(0, c.gauss_vars, torch.where(active[c.gauss_nodes], values, 0.0))
    if c.cat_nodes.numel():
        u = torch.rand(c.cat_nodes.numel(), n, generator=generator, dtype=torch.float64, device="cpu").to(device)
        cum = c.cat_log_probs.exp().cumsum(dim=1)  # (Lc, Kmax), non-decreasing
        # inverse CDF: the number of cumulative masses <= u * total, by binary search (O(Lc n) memory)
        codes = torch.searchsorted(cum, (u * cum[:, -1:]).contiguous(), right=True)  # (Lc, n)
        codes = torch.minimum(codes, c.cat_domain[:, None] - 1).to(torch.float64)
        out.index_add_(0, c.cat_vars, torch.where(active[c.cat_nodes], codes, 0.0))
    return out.T.contiguous()
