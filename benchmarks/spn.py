"""``duck-bench spn``: the removal benchmark of Becker & Liebig (seeds/001 §5), plus training overhead, SPFlow
and inference speed.

Protocol (§5, Tables 2-3), per data set and repetition r (seed + r):

* draw ``n_train`` rows (all of them when the data set is smaller, as wine is), then ``n_removals`` of those
  rows in random order;
* removal-enabled LearnSPN on the rows; then ``spn.unlearn([id_i])`` (UnlearnSPN) for each removal i, and a
  fresh removal-enabled ``learn_spn`` on the rows left after each removal (the retraining baseline, same seed);
  the totals over the removals are compared. ``bench.schedules`` says how the two are timed: ``blocks`` (the
  paper's accumulated runtimes: all removals in a row, then all retrains in a row; which side goes first
  alternates over repetitions) and ``interleaved`` (one removal, one retrain, ...: both see the same machine
  load, but every removal runs right after a fit has filled the caches with its own data and code, which
  costs the ~1 ms removal a larger share than the fit). Each schedule starts from the same fitted SPN;
* after the last removal, the certified-removal check: the unlearned SPN equals ``learn_spn`` on the remaining
  rows replaying ``random_state_`` (structure, flags and parameters, ``describe()``);
* training time of the removal-enabled LearnSPN versus the same LearnSPN without removal state
  (``removal_enabled=False``), mean of ``train_repeats`` interleaved fits each.

Reported: mean (std) over repetitions of both totals and of the per-repetition ratio, and of the training
times. When the ``spflow`` package is importable (``pip install duck-unlearn[spn]``), its ``learn_spn`` is
trained on the same rows with the same t and RDC threshold and both are scored on held-out rows (test
log-likelihood, training time). Finally the batched log-likelihood time of ``loglik_rows`` rows on each data
set's SPN (the issue's target: under 50 ms for 10,000 rows on wine-sized SPNs).
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from benchmarks.common import THREADS, BenchSettings, fmt_mean_std, markdown_table, mean_std, sync
from duck.deletion import learn_spn
from duck.errors import DuckInputError
from duck.schema import SEED, Check, Device, Flag, Group, Integer, ListOf, OneOf, Real, Settings, option, settings
from duck.utils import resolve_device

DATASETS = ("wine", "digits", "fashion_mnist")
SCHEDULES = ("blocks", "interleaved")


@dataclass
class Data:
    X: np.ndarray  # (N, V) the pool the training rows are drawn from
    types: list[str]
    n_categories: list[int | None]
    X_test: np.ndarray | None  # held-out rows for the SPFlow comparison (None: split X)
    note: str


def load_dataset(name: str, cfg: SpnBench) -> Data:
    """The benchmark data sets and how their variables are modelled."""
    if name == "wine":
        from sklearn.datasets import load_wine

        X, y = load_wine(return_X_y=True)
        X = (X - X.mean(0)) / X.std(0)
        return Data(
            np.column_stack([X, y]),
            ["gaussian"] * 13 + ["categorical"],
            [None] * 13 + [3],
            None,
            "13 continuous (z-scored, Gaussian) + class (categorical, 3)",
        )
    if name == "digits":
        from sklearn.datasets import load_digits

        X, _ = load_digits(return_X_y=True)
        return Data(
            X.astype(np.float64),
            ["categorical"] * 64,
            [17] * 64,
            None,
            "64 pixels as categorical (intensities 0..16, 17 categories)",
        )
    if name == "fashion_mnist":
        from duck.data.idx import fashion_mnist_arrays

        p = int(cfg.fashion_mnist.pool)
        if 28 % p:
            raise DuckInputError(f"bench.fashion_mnist.pool={p} must divide 28 (1, 2, 4, 7, 14, 28)")

        def pooled(images: np.ndarray) -> np.ndarray:
            m = 28 // p
            return images.reshape(len(images), m, p, m, p).mean(axis=(2, 4)).reshape(len(images), -1) / 255.0

        train, _ = fashion_mnist_arrays(split="train")
        test, _ = fashion_mnist_arrays(split="test")
        rng = np.random.default_rng(int(cfg.seed))
        pool_rows = rng.choice(len(train), min(int(cfg.fashion_mnist.pool_rows), len(train)), replace=False)
        test_rows = rng.choice(len(test), min(int(cfg.test_rows), len(test)), replace=False)
        m = 28 // p
        return Data(
            pooled(train[pool_rows].astype(np.float64)),
            ["gaussian"] * (m * m),
            [None] * (m * m),
            pooled(test[test_rows].astype(np.float64)),
            f"train split, {p}x{p} mean-pooled pixels / 255 ({m}x{m} = {m * m} Gaussian variables)",
        )
    raise DuckInputError(f"unknown data set {name!r} in bench.datasets; choose from {', '.join(DATASETS)}")


def _timed(fn: Any, device: torch.device) -> tuple[Any, float]:
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def same_model(a: Any, b: Any, rtol: float = 1e-9) -> bool:
    """``describe()`` trees equal: structure and flags exactly, floats to rounding."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same_model(a[k], b[k], rtol) for k in a)
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(same_model(x, y, rtol) for x, y in zip(a, b, strict=True))
        )
    if isinstance(a, float) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=rtol, abs_tol=rtol)
    return a == b


def spn_kwargs(cfg: SpnBench, data: Data, device: torch.device) -> dict[str, Any]:
    return {
        "n_categories": data.n_categories,
        "min_instances": int(cfg.min_instances),
        "rdc_threshold": float(cfg.rdc_threshold),
        "relearn": str(cfg.relearn),
        "device": device,
    }


# ------------------------------------------------------------------------------------ one repetition
def run_repetition(data: Data, cfg: SpnBench, seed: int, device: torch.device, desc: str) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(data.X), min(int(cfg.n_train), len(data.X)), replace=False)
    X = data.X[rows]
    n_removals = min(int(cfg.n_removals), len(X) - 1)
    removals = rng.choice(len(X), n_removals, replace=False)
    kw = {**spn_kwargs(cfg, data, device), "seed": seed}

    train_with, train_without = [], []
    learn_spn(X, data.types, removal_enabled=False, **kw)  # untimed warm-up: the process's first fit is slow
    for i in range(int(cfg.train_repeats)):  # interleaved, so both see the same load; the order alternates
        for enabled in (True, False) if i % 2 == 0 else (False, True):
            model, secs = _timed(lambda e=enabled: learn_spn(X, data.types, removal_enabled=e, **kw), device)
            (train_with if enabled else train_without).append(secs)
            if enabled:
                spn = model
    n_nodes, depth = spn.n_nodes_, spn.depth_

    by_schedule: dict[str, dict[str, Any]] = {}
    for s, schedule in enumerate(cfg.schedules):
        if s:  # every schedule starts from the same model (LearnSPN is deterministic given the seed)
            spn = learn_spn(X, data.types, **kw)
        by_schedule[schedule] = _remove_one_by_one(
            spn, X, data.types, removals, kw, device, schedule,
            unlearn_first=(seed + s) % 2 == 0,  # blocks: which side runs first alternates over repetitions
            check=bool(cfg.check_certified), desc=f"{desc} {schedule}",
        )
    certified = [r["certified_equal"] for r in by_schedule.values()]
    return {
        "n_rows": int(len(X)),
        "n_removals": int(n_removals),
        **next(iter(by_schedule.values())),  # the first schedule's timings and counts
        "schedules": by_schedule,
        "train_s": float(np.mean(train_with)),
        "train_stateless_s": float(np.mean(train_without)),
        "n_nodes": int(n_nodes),
        "depth": int(depth),
        "certified_equal": all(certified) if cfg.check_certified else None,
    }


def _schedules(value: Any, key: str) -> tuple[str, ...]:
    """``bench.schedules``: how the removals and the retrains are timed against each other (module docstring)."""
    names = ListOf(OneOf(SCHEDULES))(value, key)
    if len(set(names)) != len(names):
        raise DuckInputError(f"{key}={list(names)} names a schedule twice; give each once")
    return names


def _remove_one_by_one(
    spn: Any,
    X: np.ndarray,
    types: list[str],
    removals: np.ndarray,
    kw: dict[str, Any],
    device: torch.device,
    schedule: str,
    *,
    unlearn_first: bool,
    check: bool,
    desc: str,
) -> dict[str, Any]:
    """Time ``spn.unlearn([id])`` for every removal and a fresh ``learn_spn`` on the rows left after each, on
    one schedule; then check the certified-removal contract on the unlearned SPN."""
    totals = dict.fromkeys(("subtrees_relearned", "partitions_changed", "components_changed", "operation_changes"), 0)
    unlearn_s, retrain_s = [], []
    left_after = []  # rows left after each removal
    alive = np.ones(len(X), dtype=bool)
    for i in removals.tolist():
        alive[i] = False
        left_after.append(np.flatnonzero(alive))

    def unlearn(i: int) -> None:
        _, secs = _timed(lambda: spn.unlearn([i]), device)
        unlearn_s.append(secs)
        info = spn.last_unlearning_
        for key in totals:
            totals[key] += len(info[key]) if key == "operation_changes" else info[key]

    def retrain(left: np.ndarray) -> None:
        _, secs = _timed(lambda: learn_spn(X[left], types, ids=left, **kw), device)
        retrain_s.append(secs)

    steps = list(zip(removals.tolist(), left_after, strict=True))
    if schedule == "interleaved":
        for i, left in tqdm(steps, desc=desc, leave=False, mininterval=2.0):
            unlearn(i)
            retrain(left)
    else:  # blocks: every removal, then every retrain (or the other way round)
        for side in ("unlearn", "retrain") if unlearn_first else ("retrain", "unlearn"):
            for i, left in tqdm(steps, desc=f"{desc} {side}", leave=False, mininterval=2.0):
                if side == "unlearn":
                    unlearn(i)
                else:
                    retrain(left)
    certified = None
    if check:
        left = spn.ids_
        fresh = learn_spn(X[left], types, ids=left, replay=spn.random_state_, **spn.learn_params_, device=device)
        certified = same_model(spn.describe(), fresh.describe())
    return {
        "unlearn_s": float(np.sum(unlearn_s)),
        "retrain_s": float(np.sum(retrain_s)),
        "speedup": float(np.sum(retrain_s) / np.sum(unlearn_s)),
        "unlearn_max_s": float(np.max(unlearn_s)),
        "certified_equal": certified,
        **{f"total_{k}": int(v) for k, v in totals.items()},
    }


# ------------------------------------------------------------------------------------------- SPFlow
def _spflow_available() -> bool:
    try:
        import spflow  # noqa: F401
        from spflow.learn.learn_spn import learn_spn as _  # noqa: F401
    except ImportError:
        return False
    return True


def spflow_learn(X: np.ndarray, data: Data, cfg: SpnBench) -> tuple[Any, dict[str, int]]:
    """SPFlow's ``learn_spn`` (k-means + RDC LearnSPN; 1.x has no pruning step) on the same rows.

    Three adaptations, all needed for it to run on these data: categorical leaves get a fixed ``K`` (its
    learner instantiates leaf classes without K); uninformative (constant) columns are split off as their own
    components before its ``partition_by_rdc`` (Alg. 1's SplitUninformativeVariables); and a pair on which
    its ``rdc`` raises (its search for a usable k reaches k = 0 on degenerate, near-constant column pairs)
    counts as independent, RDC 0. Returns the model and ``{"pairs": RDC calls, "failed_pairs": how many
    raised}``.
    """
    import sys

    import spflow.learn.learn_spn  # noqa: F401  (the module; the package re-exports the function's name)
    from spflow.meta.data.scope import Scope
    from spflow.modules.leaves import Categorical, Normal

    module = sys.modules["spflow.learn.learn_spn"]
    threshold = float(cfg.rdc_threshold)
    counts = {"pairs": 0, "failed_pairs": 0}
    original_rdc = module.rdc

    def rdc_or_independent(x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        counts["pairs"] += 1
        try:
            return original_rdc(x, y, *args, **kwargs)
        except RuntimeError:
            counts["failed_pairs"] += 1
            return torch.zeros((), dtype=torch.float64, device=x.device)

    def partition(block: torch.Tensor) -> torch.Tensor:
        const = block.amax(0) == block.amin(0)
        ids = torch.zeros(block.shape[1], dtype=torch.int)
        informative = torch.nonzero(~const).flatten()
        constant = torch.nonzero(const).flatten()
        nxt = 1
        if len(informative) > 1:
            sub = module.partition_by_rdc(block[:, informative], threshold=threshold).to(torch.int).cpu()
            ids[informative] = sub
            nxt = int(sub.max()) + 1
        elif len(informative) == 1:
            ids[informative], nxt = 1, 2
        ids[constant] = nxt + torch.arange(len(constant), dtype=torch.int)
        return ids.to(block.device)

    leaves = []
    gauss = [v for v, t in enumerate(data.types) if t == "gaussian"]
    if gauss:
        leaves.append(Normal(scope=Scope(gauss)))
    for K in sorted({k for k in data.n_categories if k}):

        class FixedK(Categorical):
            def __init__(self, scope: Any, out_channels: int = 1, _K: int = K, **kwargs: Any) -> None:
                super().__init__(scope, out_channels, K=_K, **kwargs)

        leaves.append(FixedK(scope=Scope([v for v, k in enumerate(data.n_categories) if k == K])))
    module.rdc = rdc_or_independent
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # its k-means prints every fit
            model = module.learn_spn(
                torch.tensor(X, dtype=torch.float32),
                leaves,
                min_instances_slice=int(cfg.min_instances),
                partitioning_method=partition,
            )
    finally:
        module.rdc = original_rdc
    return model, counts


def train_test_split(data: Data, cfg: SpnBench, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``n_train`` training rows and held-out rows: the data set's test rows, or else an 80 / 20 split
    of the pool (at most ``test_rows`` held out)."""
    rng = np.random.default_rng(seed)
    if data.X_test is not None:
        return data.X[rng.choice(len(data.X), min(int(cfg.n_train), len(data.X)), replace=False)], data.X_test
    order = rng.permutation(len(data.X))
    n_tr = min(int(cfg.n_train), int(0.8 * len(data.X)))
    return data.X[order[:n_tr]], data.X[order[n_tr:][: int(cfg.test_rows)]]


def compare_with_spflow(data: Data, cfg: SpnBench, device: torch.device) -> tuple[dict[str, Any], Any]:
    """Test log-likelihood (nats per row) and training time, ours vs SPFlow, on the same train / test rows.

    If SPFlow raises, the error is recorded (and reported in the table) and its remaining repetitions are
    skipped; ours are still reported. Also returns SPFlow's first model (None if it failed).
    """
    ours_ll, ours_s, theirs_ll, theirs_s = [], [], [], []
    error, pairs, failed, first_model = None, 0, 0, None
    for r in range(int(cfg.spflow_repetitions)):
        seed = int(cfg.seed) + r
        X_tr, X_te = train_test_split(data, cfg, seed)
        kw = spn_kwargs(cfg, data, device)
        spn, secs = _timed(lambda: learn_spn(X_tr, data.types, seed=seed, **kw), device)
        ours_s.append(secs)
        ours_ll.append(float(spn.log_likelihood(X_te).mean()))
        if error is not None:
            continue
        torch.manual_seed(seed)  # SPFlow's k-means and RDC draw from torch's global generator
        try:
            (model, counts), secs = _timed(lambda: spflow_learn(X_tr, data, cfg), torch.device("cpu"))
        except (RuntimeError, ValueError) as e:
            error = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
            continue
        theirs_s.append(secs)
        first_model = model if first_model is None else first_model
        pairs += counts["pairs"]
        failed += counts["failed_pairs"]
        with torch.no_grad():
            theirs_ll.append(float(model.log_likelihood(torch.tensor(X_te, dtype=torch.float32)).mean()))
    return {
        "n_train": int(len(X_tr)),
        "n_test": int(len(X_te)),
        "ours_test_ll": mean_std(ours_ll),
        "ours_train_s": mean_std(ours_s),
        "spflow_test_ll": mean_std(theirs_ll) if theirs_ll else None,
        "spflow_train_s": mean_std(theirs_s) if theirs_s else None,
        "spflow_error": error,
        "spflow_rdc_pairs": pairs,
        "spflow_rdc_failed_pairs": failed,
    }, first_model


# ------------------------------------------------------------------------------------- inference speed
def loglik_speed(data: Data, cfg: SpnBench, device: torch.device, spflow_model: Any) -> dict[str, Any]:
    """Median wall-clock of one batched ``log_likelihood`` call on ``loglik_rows`` rows sampled from the SPN
    (and with 10 % of the entries missing), plus SPFlow's model (from the comparison) on those rows."""
    rng = np.random.default_rng(int(cfg.seed))
    X = data.X[rng.choice(len(data.X), min(int(cfg.n_train), len(data.X)), replace=False)]
    spn = learn_spn(X, data.types, seed=int(cfg.seed), **spn_kwargs(cfg, data, device))
    Q = spn.sample(int(cfg.loglik_rows), seed=int(cfg.seed))
    out: dict[str, Any] = {"rows": int(cfg.loglik_rows), "n_nodes": spn.n_nodes_, "depth": spn.depth_}

    def median_time(fn: Any) -> float:
        for _ in range(3):
            fn()
        times = [_timed(fn, device)[1] for _ in range(int(cfg.loglik_repeats))]
        return float(np.median(times))

    out["ms"] = 1e3 * median_time(lambda: spn.log_likelihood(Q))
    missing = Q.clone()
    missing[
        torch.rand(missing.shape, generator=torch.Generator().manual_seed(0)).to(missing.device) < 0.1
    ] = math.nan
    out["ms_10pct_missing"] = 1e3 * median_time(lambda: spn.log_likelihood(missing))
    if spflow_model is not None:  # SPFlow's model of the first comparison repetition, on the same rows Q
        Qf = Q.cpu().to(torch.float32)
        with torch.no_grad():
            out["spflow_ms"] = 1e3 * median_time(lambda: spflow_model.log_likelihood(Qf))
    return out


# ------------------------------------------------------------------------------------------------ run
@settings
class FashionMnistPooling(Settings):
    """``bench.fashion_mnist``: how Fashion-MNIST becomes Gaussian variables."""

    prefix: ClassVar[str] = "bench.fashion_mnist"

    pool: int = option(4, OneOf((1, 2, 4, 7, 14, 28)), "mean pooling (4: 7x7 = 49 variables)")
    pool_rows: int = option(10000, Integer(1), "training images the subsets are drawn from")


@settings
class SpnBench(BenchSettings):
    """conf/bench/spn.yaml."""

    suite: ClassVar[str] = "spn"

    datasets: tuple[str, ...] = option(DATASETS, ListOf(OneOf(DATASETS)), "the data sets")
    repetitions: int = option(10, Integer(1), "repetitions (paper: 10)")
    n_train: int = option(1000, Integer(2), "rows of the random subset (at least one left after a removal)")
    n_removals: int = option(100, Integer(1), "rows removed one by one, against as many retrains")
    schedules: tuple[str, ...] = option(SCHEDULES, Check(_schedules, f"a non-empty list of distinct names from "
                                                                     f"{list(SCHEDULES)}"),
                                        "how removals and retrains are timed (the first gives the headline)")
    train_repeats: int = option(3, Integer(1), "fits per repetition for the training-time overhead")
    seed: int = option(0, SEED, "repetition r uses seed + r")
    device: str = option("cpu", Device(), "where the SPN runs")
    threads: int | None = option(1, THREADS, "torch intra-op threads (null: torch's default)")
    min_instances: int = option(100, Integer(1), "t of Alg. 1")
    rdc_threshold: float = option(0.3, Real(0.0, True, 1.0), "the RDC independence threshold")
    relearn: str = option("replay", OneOf(("replay", "fresh")), "how a cluster that gained rows is brought up to date")
    check_certified: bool = option(True, Flag(), "after the removals: unlearned SPN == replayed fresh learn_spn")
    spflow: bool = option(True, Flag(), "compare with SPFlow when it is installed")
    spflow_repetitions: int = option(2, Integer(1), "repetitions of the SPFlow comparison")
    test_rows: int = option(1000, Integer(1), "held-out rows for the test log-likelihood")
    loglik_rows: int = option(10000, Integer(1), "rows per batched log-likelihood call")
    loglik_repeats: int = option(20, Integer(1), "timed log-likelihood calls")
    fashion_mnist: FashionMnistPooling = option(FashionMnistPooling(), Group(FashionMnistPooling),
                                                "Fashion-MNIST's pooling")


def run(cfg: Any) -> dict[str, Any]:
    cfg = SpnBench.parse(cfg)
    if cfg.threads is not None:
        torch.set_num_threads(int(cfg.threads))
    device = resolve_device(cfg.device)
    datasets = list(cfg.datasets)
    with_spflow = bool(cfg.spflow) and _spflow_available()
    results: dict[str, Any] = {"datasets": {}, "spflow": {}, "loglik": {}}
    notes = []
    if bool(cfg.spflow) and not with_spflow:
        notes.append(
            "SPFlow comparison skipped: the spflow package is not installed (pip install duck-unlearn[spn])."
        )
    for name in datasets:
        data = load_dataset(name, cfg)
        reps = [
            run_repetition(data, cfg, int(cfg.seed) + r, device, f"{name} rep {r + 1}/{cfg.repetitions}")
            for r in range(int(cfg.repetitions))
        ]
        results["datasets"][name] = {"note": data.note, "types": data.types, "repetitions": reps}
        spflow_model = None
        if with_spflow:
            results["spflow"][name], spflow_model = compare_with_spflow(data, cfg, device)
        results["loglik"][name] = loglik_speed(data, cfg, device, spflow_model)
    results["table"] = make_tables(results, cfg, notes)
    return results


def make_tables(results: dict[str, Any], cfg: SpnBench, notes: list[str]) -> str:
    rows, train_rows = [], []
    for name, res in results["datasets"].items():
        reps = res["repetitions"]
        col = {k: [r[k] for r in reps] for k in reps[0]}
        for schedule in reps[0]["schedules"]:
            sch = {k: [r["schedules"][schedule][k] for r in reps] for k in reps[0]["schedules"][schedule]}
            certified = [c for c in sch["certified_equal"] if c is not None]
            rows.append(
                [
                    name,
                    schedule,
                    f"{reps[0]['n_rows']} x {len(res['types'])}",
                    fmt_mean_std(col["n_nodes"], 0),
                    fmt_mean_std(sch["retrain_s"]),
                    fmt_mean_std(sch["unlearn_s"]),
                    fmt_mean_std(sch["speedup"], 2),
                    f"{min(sch['speedup']):.2f}-{max(sch['speedup']):.2f}",
                    f"{np.mean(sch['total_subtrees_relearned']) / reps[0]['n_removals']:.2f}",
                    f"{sum(certified)}/{len(certified)}" if certified else "-",
                ]
            )
        overhead = mean_std(
            [a / b - 1 for a, b in zip(col["train_s"], col["train_stateless_s"], strict=True)]
        )
        train_rows.append(
            [
                name,
                fmt_mean_std(col["train_stateless_s"], 4),
                fmt_mean_std(col["train_s"], 4),
                f"{100 * overhead['mean']:+.1f} % ({100 * overhead['std']:.1f})",
            ]
        )
    n_rem = (
        next(iter(results["datasets"].values()))["repetitions"][0]["n_removals"] if results["datasets"] else 0
    )
    parts = [
        f"### Removing {n_rem} rows one by one: UnlearnSPN vs retraining (mean (std) over {cfg.repetitions} "
        "repetitions)",
        markdown_table(
            [
                "data",
                "schedule",
                "rows x vars",
                "SPN nodes",
                f"retrain {n_rem}x [s]",
                f"unlearn {n_rem} [s]",
                "speed-up",
                "speed-up range",
                "relearned sub-SPNs / removal",
                "certified equal",
            ],
            rows,
        ),
        "",
        "### Training: LearnSPN without removal state vs removal-enabled LearnSPN",
        markdown_table(["data", "without state [s]", "removal-enabled [s]", "overhead"], train_rows),
    ]
    if results["spflow"]:
        sp_rows = []
        for name, r in results["spflow"].items():
            theirs = (
                [fmt_mean_std(r["spflow_test_ll"], 2), fmt_mean_std(r["spflow_train_s"])]
                if r["spflow_test_ll"] is not None
                else [f"failed ({r['spflow_error']})", "-"]
            )
            failed = f"{r['spflow_rdc_failed_pairs']} / {r['spflow_rdc_pairs']}"
            sp_rows.append(
                [
                    name,
                    f"{r['n_train']} / {r['n_test']}",
                    fmt_mean_std(r["ours_test_ll"], 2),
                    theirs[0],
                    fmt_mean_std(r["ours_train_s"]),
                    theirs[1],
                    failed,
                ]
            )
        parts += [
            "",
            f"### Against SPFlow's learn_spn (same rows, t = {cfg.min_instances}, RDC threshold "
            f"{cfg.rdc_threshold}; {cfg.spflow_repetitions} repetitions)",
            markdown_table(
                [
                    "data",
                    "train / test rows",
                    "ours: test LL",
                    "SPFlow: test LL",
                    "ours: train [s]",
                    "SPFlow: train [s]",
                    "SPFlow RDC pairs failed",
                ],
                sp_rows,
            ),
        ]
    ll_rows = []
    for name, r in results["loglik"].items():
        ll_rows.append(
            [
                name,
                r["n_nodes"],
                r["rows"],
                f"{r['ms']:.2f}",
                f"{r['ms_10pct_missing']:.2f}",
                f"{r['spflow_ms']:.2f}" if "spflow_ms" in r else "-",
            ]
        )
    parts += [
        "",
        "### Batched log-likelihood (median of "
        f"{cfg.loglik_repeats} calls; target < 50 ms for 10,000 rows on wine)",
        markdown_table(["SPN", "nodes", "rows", "ms", "ms, 10 % NaN (marginalised)", "SPFlow ms"], ll_rows),
    ]
    return "\n".join(parts + ([""] + notes if notes else []))
