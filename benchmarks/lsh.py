"""``duck-bench lsh``: the fairness experiment of Har-Peled & Mahabadi (NeurIPS 2019, seeds/002 §5).

Protocol per data set (digits: 1,797 x 64, 100 of them held out as queries; Fashion-MNIST: a 10,000-image
training subset, pixels / 255, and 100 test images as queries):

* radius ``r``: the ``frac_queries`` quantile over the queries of the distance to their
  ``min_neighbours``-th nearest point, so that that fraction of queries has >= min_neighbours r-neighbours;
* LSH parameters as the paper (following Datar et al. 2004 and the E2LSH manual): ``w = w_over_r * r``,
  ``L = ceil(sqrt(n))`` ("L should be roughly the square root of the number of points"), and the largest
  ``k`` whose predicted false-negative rate on separate tuning queries is below ``fn_target`` (10 %) --
  larger k means smaller buckets, i.e. less scanning. The prediction uses the p-stable collision
  probability ``p(c)``: a neighbour at distance c is missed with probability ``(1 - p(c)^k)^L``. The measured
  recall on the evaluation queries is reported too;
* for each query, ``M(q)`` = the r-neighbours found in its L buckets; each sampler draws
  ``samples_per_neighbour * |M(q)|`` samples; the total variation distance of the empirical distribution to
  uniform on M(q), averaged over queries, then mean (std) over ``repeats`` repetitions;
* time per sample: one batched ``sample`` call for all queries (bucket scan included) divided by the number
  of samples, and the drawing alone (the call's own timing of its phases, ``SampleStats``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, ClassVar

import numpy as np
import torch
from scipy.stats import norm
from tqdm.auto import tqdm

from benchmarks.common import BenchSettings, markdown_table, mean_std, timed
from duck.deletion import LSHIndex
from duck.errors import DuckInputError
from duck.schema import SEED, Device, Either, Flag, Integer, ListOf, OneOf, Real, option, settings
from duck.utils import resolve_device

DATASETS = ("digits", "fashion_mnist")
# Authors' code on MNIST, k = 15, L = 100 (ALGORITHMS.md §8; paper §5, Figure 5.1)
PAPER_TVD = {"uniform": 0.368, "weighted": 0.247, "approx_degree": 0.084, "exact_degree": 0.038}


def load_dataset(name: str, cfg: LshBench) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(indexed points (n, d), evaluation queries (Q, d), tuning queries (T, d), description), float64."""
    rng = np.random.default_rng(int(cfg.seed))
    n_q, n_tune = int(cfg.n_queries), int(cfg.n_tuning_queries)
    if name == "digits":
        from sklearn.datasets import load_digits

        X = load_digits().data.astype(np.float64)
        perm = rng.permutation(len(X))
        base = X[perm[n_q:]]
        tune = base[rng.choice(len(base), n_tune, replace=False)]
        return base, X[perm[:n_q]], tune, f"sklearn digits: {len(base)} indexed, {n_q} held-out queries"
    if name == "fashion_mnist":
        from duck.data.idx import fashion_mnist_arrays

        train, _ = fashion_mnist_arrays(split="train")
        test, _ = fashion_mnist_arrays(split="test")
        base = train.reshape(len(train), -1)[rng.choice(len(train), int(cfg.fmnist_subset), replace=False)] / 255.0
        picks = rng.choice(len(test), n_q + n_tune, replace=False)
        test = test.reshape(len(test), -1)[picks] / 255.0
        desc = f"Fashion-MNIST: {len(base)} train images indexed, {n_q} test queries, pixels / 255"
        return base.astype(np.float64), test[:n_q].astype(np.float64), test[n_q:].astype(np.float64), desc
    raise DuckInputError(f"unknown data set {name!r}; choose from {', '.join(DATASETS)}")


def pairwise_distances(queries: np.ndarray, points: np.ndarray) -> np.ndarray:
    """(Q, n) Euclidean distances (exact differences, row blocks)."""
    q, p = torch.as_tensor(queries), torch.as_tensor(points)
    return torch.cat([torch.cdist(q[s : s + 16], p, compute_mode="donot_use_mm_for_euclid_dist")
                      for s in range(0, len(q), 16)]).numpy()


def collision_probability(c: np.ndarray, w: float) -> np.ndarray:
    """P[h(x) = h(y)] for one p-stable unit hash at distance c = |x - y| (Datar et al. 2004, §3.2)."""
    t = w / np.maximum(c, 1e-300)
    return 1 - 2 * norm.cdf(-t) - 2 / (math.sqrt(2 * math.pi) * t) * (1 - np.exp(-(t**2) / 2))


def tune_k(neighbour_dists: np.ndarray, w: float, L: int, k_max: int, fn_target: float) -> tuple[int, float]:
    """Largest k <= k_max with predicted false-negative rate < fn_target: ``(k, predicted FN rate)``."""
    p = collision_probability(neighbour_dists, w)
    best = (1, float(np.mean((1 - p) ** L)))
    for k in range(1, k_max + 1):
        fn = float(np.mean((1 - p**k) ** L))
        if fn < fn_target:
            best = (k, fn)
    return best


def total_variation(samples: torch.Tensor, members: torch.Tensor) -> float:
    """TV distance between the empirical distribution of ``samples`` (all in ``members``) and uniform."""
    counts = torch.bincount(torch.searchsorted(members, samples), minlength=members.numel()).double()
    return 0.5 * float((counts / samples.numel() - 1.0 / members.numel()).abs().sum())


def sampler_variants(cfg: LshBench) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, method, keyword arguments) for every sampler row of the table."""
    variants: list[tuple[str, str, dict[str, Any]]] = [("uniform", "uniform", {}), ("weighted", "weighted", {})]
    for delta in cfg.approx_deltas:
        label = "approx_degree" if int(delta) == 1 else f"approx_degree (Delta={int(delta)})"
        variants.append((label, "approx_degree", {"approx_delta": int(delta)}))
    if cfg.approx_table_probes:
        variants.append(("approx_degree (table probes)", "approx_degree", {"probes": "tables"}))
    if cfg.lemma37_gamma is not None:
        variants.append((f"approx_degree (Lemma 3.7, gamma={cfg.lemma37_gamma})", "approx_degree",
                         {"gamma": float(cfg.lemma37_gamma)}))
    variants.append(("exact_degree", "exact_degree", {}))
    return variants


def run_dataset(name: str, cfg: LshBench, device: torch.device) -> dict[str, Any]:
    base, queries, tune, description = load_dataset(name, cfg)
    n, dim = base.shape
    dist = pairwise_distances(queries, base)  # (Q, n)
    kth = np.sort(dist, 1)[:, int(cfg.min_neighbours) - 1]
    r = float(np.quantile(kth, float(cfg.frac_queries)))
    true_counts = (dist <= r).sum(1)
    tune_dist = pairwise_distances(tune, base)
    neighbour_dists = tune_dist[(tune_dist <= r) & (tune_dist > 0)]  # tuning queries' true neighbours
    w = float(cfg.w_over_r) * r
    L = math.ceil(math.sqrt(n)) if str(cfg.L) == "auto" else int(cfg.L)
    k, predicted_fn = tune_k(neighbour_dists, w, L, int(cfg.k_max), float(cfg.fn_target))

    index = LSHIndex(dim, k, L, w, seed=int(cfg.seed), device=device)
    _, build_s = timed(lambda: index.add(base), device)
    q = torch.as_tensor(queries, device=device)
    members, scan_s = timed(lambda: index.query(q, r), device)
    sizes = torch.tensor([m.numel() for m in members])
    valid = (sizes > 0).nonzero().flatten()
    recall = float(sizes.sum()) / max(1, int(true_counts.sum()))
    query_keys = index.hash(q)
    degrees = torch.cat([(index.hash(torch.as_tensor(base[m.cpu().numpy()], device=device)) == query_keys[i]).sum(1)
                         for i, m in enumerate(members) if m.numel()])
    n_samples = int(cfg.samples_per_neighbour) * sizes[valid]
    total_samples = int(n_samples.sum())
    q_valid = q[valid.to(device)]

    variants = sampler_variants(cfg)
    runs: dict[str, dict[str, list[float]]] = {label: defaultdict(list) for label, _, _ in variants}
    for rep in tqdm(range(int(cfg.repeats)), desc=f"{name} samplers", leave=False):
        for label, method, kwargs in variants:  # interleaved: every sampler sees the same machine state
            samples, seconds = timed(
                lambda: index.sample(q_valid, r, method, n_samples.to(device), seed=int(cfg.seed) + rep, **kwargs),
                device,
            )
            stats = index.last_sample_stats
            per_query = [total_variation(samples[j, : n_samples[j]], members[int(i)])
                         for j, i in enumerate(valid.tolist())]
            run = runs[label]
            run["tvd"].append(float(np.mean(per_query)))
            run["seconds"].append(seconds)
            run["draw_seconds"].append(stats.draw_seconds)
            run["proposals"].append(stats.proposals)
            run["probes"].append(stats.probes)
    results = {
        label: {
            "tvd": mean_std(run["tvd"]),
            "seconds": mean_std(run["seconds"]),
            "us_per_sample": 1e6 * float(np.mean(run["seconds"])) / total_samples,
            "draw_us_per_sample": 1e6 * float(np.mean(run["draw_seconds"])) / total_samples,
            "proposals_per_sample": float(np.mean(run["proposals"])) / total_samples,
            "probes_per_sample": float(np.mean(run["probes"])) / total_samples,
        }
        for label, run in runs.items()
    }
    return {
        "description": description,
        "n_points": n,
        "dim": dim,
        "n_queries": len(queries),
        "r": r,
        "frac_queries_with_min_neighbours": float(np.mean(true_counts >= int(cfg.min_neighbours))),
        "k": k,
        "L": L,
        "w": w,
        "predicted_fn_rate": predicted_fn,
        "measured_recall": recall,
        "queries_with_empty_M": int((sizes == 0).sum()),
        "M_size": {"median": float(sizes[valid].median()), "max": int(sizes.max())},
        "degree": {"min": int(degrees.min()), "max": int(degrees.max()), "mean": float(degrees.double().mean())},
        "build_s": build_s,
        "scan_s": scan_s,
        "total_samples_per_sampler": total_samples,
        "samplers": results,
    }


#: rows of the data sets: digits (all of it, queries held out), Fashion-MNIST (train split, test split)
DIGITS_ROWS, FMNIST_TRAIN, FMNIST_TEST = 1797, 60000, 10000

@settings
class LshBench(BenchSettings):
    """conf/bench/lsh.yaml."""

    suite: ClassVar[str] = "lsh"

    datasets: tuple[str, ...] = option(tuple(DATASETS), ListOf(OneOf(tuple(DATASETS))), "the data sets")
    n_queries: int = option(100, Integer(1), "query points (paper: 100)")
    n_tuning_queries: int = option(50, Integer(1), "separate queries used only to tune k")
    fmnist_subset: int = option(10000, Integer(1, FMNIST_TRAIN), "indexed Fashion-MNIST training images")
    min_neighbours: int = option(40, Integer(1), "r is set so that frac_queries of the queries have this many "
                                                 "r-neighbours")
    frac_queries: float = option(0.75, Real(0.0, True, 1.0), "... this fraction of the queries")
    w_over_r: float = option(4.0, Real(0.0, True), "bucket width w in units of r")
    L: int | str = option("auto", Either(("auto",), Integer(1)), "tables (auto: ceil(sqrt(n)), paper §5)")
    k_max: int = option(30, Integer(1), "the largest k tried")
    fn_target: float = option(0.1, Real(0.0, True, 1.0, True), "the false-negative rate k must stay below")
    samples_per_neighbour: int = option(100, Integer(1), "samples per query (paper: 100 |M(q)|)")
    repeats: int = option(10, Integer(1), "repetitions (paper: 10)")
    approx_deltas: tuple[int, ...] = option((1, 2), ListOf(Integer(1), nonempty=False), "approx_degree's Δs")
    approx_table_probes: bool = option(True, Flag(), "also approx_degree making its table probes one by one")
    lemma37_gamma: float | None = option(None, Either((None,), Real(0.0, True, 1.0, True)),
                                         "also Lemma 3.7's form with this γ (null: not)")
    seed: int = option(0, SEED, "the seed")
    device: str = option("auto", Device(), "where the index runs")

    def __post_init__(self) -> None:
        super().__post_init__()
        n_q, n_tune, m = self.n_queries, self.n_tuning_queries, self.min_neighbours
        for name in self.datasets:
            if name == "digits":
                indexed = DIGITS_ROWS - n_q
                if indexed < max(n_tune, m, 1):
                    raise DuckInputError(
                        f"bench.n_queries={n_q}, bench.n_tuning_queries={n_tune} and bench.min_neighbours={m} do "
                        f"not fit digits ({DIGITS_ROWS} rows): n_queries leaves {indexed} indexed rows, which must "
                        "be >= n_tuning_queries and >= min_neighbours"
                    )
            else:
                if n_q + n_tune > FMNIST_TEST:
                    raise DuckInputError(
                        f"bench.n_queries={n_q} + bench.n_tuning_queries={n_tune} must be <= {FMNIST_TEST} "
                        "(Fashion-MNIST test images)"
                    )
                if m > self.fmnist_subset:
                    raise DuckInputError(f"bench.min_neighbours={m} must be <= bench.fmnist_subset="
                                         f"{self.fmnist_subset} (the indexed images)")


def run(cfg: Any) -> dict[str, Any]:
    cfg = LshBench.parse(cfg)
    device = resolve_device(cfg.device)
    out: dict[str, Any] = {"datasets": {}}
    rows = []
    params = []
    for name in cfg.datasets:
        res = run_dataset(str(name), cfg, device)
        out["datasets"][str(name)] = res
        weighted_us = res["samplers"]["weighted"]["us_per_sample"]
        weighted_draw = res["samplers"]["weighted"]["draw_us_per_sample"]
        exact_tvd = res["samplers"]["exact_degree"]["tvd"]["mean"]
        for label, s in res["samplers"].items():
            rows.append([
                name, label, f"{s['tvd']['mean']:.3f} ({s['tvd']['std']:.3f})",
                f"{s['tvd']['mean'] / exact_tvd:.2f}", PAPER_TVD.get(label, "-"),
                f"{s['us_per_sample']:.2f}", f"{s['us_per_sample'] / weighted_us:.2f}",
                f"{s['draw_us_per_sample'] / weighted_draw:.2f}", f"{s['proposals_per_sample']:.1f}",
            ])
        params.append([
            name, res["n_points"], res["dim"], f"{res['r']:.3f}", f"{res['frac_queries_with_min_neighbours']:.2f}",
            res["k"], res["L"], f"{res['w']:.3f}", f"{res['predicted_fn_rate']:.3f}",
            f"{res['measured_recall']:.3f}", res["M_size"]["median"],
            f"{res['degree']['min']}-{res['degree']['max']} (mean {res['degree']['mean']:.1f})",
        ])
    table = markdown_table(
        ["data", "sampler", "TVD to uniform, mean (std)", "TVD / exact", "paper (MNIST)", "us/sample",
         "time / weighted", "draw time / weighted", "proposals/sample"], rows)
    table += "\n\n" + markdown_table(
        ["data", "n", "d", "r", "frac q >= min nbrs", "k", "L", "w", "pred. FN", "recall", "median |M(q)|",
         "degree range"], params)
    out["table"] = table
    return out
