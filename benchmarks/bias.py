"""``duck-bench bias``: the bias-removal experiment of seeds/003 §IV-J (Fig. 6B), details §V-G.

The paper: ResNet-18 on CIFAR-10 where 200 *car* images get a 4x4 red square in the top-right corner and are
relabelled *truck*, and 200 *truck* images get the same square with their correct label (a confounder). The
biased original calls square images "truck"; DUCK, with the 200 mislabelled images as the forget set and their
embeddings pushed to the car centroid (the ``targeted`` scenario), restores the car predictions; a model
retrained with corrected labels is the reference. The mean SHAP value of the square region
(:func:`duck.analysis.shap_maps.region_mean`) is compared across the three models with two-sided Wilcoxon
signed-rank tests.

Here, on data available offline (default: the bundled 8x8 digits): ``n_biased`` training images of
``source_class`` (the paper's car) get a ``patch_size`` square at maximum intensity (top-right corner by
default) and the label ``target_class`` (truck); ``n_confounder`` images of ``target_class`` get the square and
keep their label. Per repetition (seed ``seed + r``: patched images drawn, weights initialised, DUCK run):

1. original: ``duck-run``'s training (:func:`duck.pipeline.stages.fit_model`, the data set's recipe) on the biased set;
2. DUCK: ``duck-run``'s unlearning (:func:`duck.pipeline.stages.unlearn_model`) with the ``targeted`` scenario:
   forget set = the relabelled images, target = the source-class centroid;
3. retrained: the same training on the corrected set (patched source images labelled ``source_class``);
4. evaluation on the *unseen* source-class test images with the patch (accuracy as the source class, fraction
   called the target class), on the target-class test images with the patch (the confounder) and on the clean
   test set; SHAP values (of ``shap_output``'s logit) on the patched source test images, mean over the patch.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from benchmarks import compare
from benchmarks.common import THREADS, BenchSettings, fmt_mean_std, markdown_table, mean_std
from duck.data.base import DatasetSplits, TensorImageDataset
from duck.errors import DuckInputError
from duck.schema import SEED, Either, Flag, Integer, OneOf, option, plain, settings

#: the paper's numbers (seeds/003 §IV-J): square images called "truck" by the original, car accuracy on unseen
#: car+square test images, mean SHAP value of the square region (mean ± std)
PAPER = {"original": {"source_acc": None, "target_frac": 0.998, "shap": (0.06, 0.01)},
         "duck": {"source_acc": 0.980, "target_frac": None, "shap": (0.006, 0.004)},
         "retrained": {"source_acc": 0.978, "target_frac": None, "shap": (0.007, 0.004)}}
MODELS = ("original", "duck", "retrained")


@dataclass(frozen=True)
class BiasSpec:
    """What is patched and relabelled (seeds/003 §V-G: car -> truck, 200 + 200, 4x4 square top right)."""

    source_class: int
    target_class: int
    n_biased: int
    n_confounder: int
    patch_size: int
    patch_row: int = 0
    patch_col: int | None = None  # None: flush with the right edge (the paper's top-right corner)

    def col(self, img_size: int) -> int:
        return img_size - self.patch_size if self.patch_col is None else int(self.patch_col)


@dataclass
class BiasedSets:
    """The experiment's data: ``biased`` (patched, relabelled training set; clean test set), ``corrected`` (the
    same images, source labels restored), the patched test images of both classes and the patch mask."""

    biased: DatasetSplits
    corrected: DatasetSplits
    biased_idx: np.ndarray  # (n_biased,) training ids patched and relabelled source -> target
    confounder_idx: np.ndarray  # (n_confounder,) training ids of the target class patched, label kept
    patched_source_test: TensorImageDataset  # every source-class test image, patched, labelled source
    patched_target_test: TensorImageDataset  # every target-class test image, patched (the confounder)
    mask: np.ndarray  # (H, W) bool


def patch_mask(img_size: int, spec: BiasSpec) -> np.ndarray:
    """``(H, W)`` boolean mask of the square patch."""
    mask = np.zeros((img_size, img_size), dtype=bool)
    r, c = int(spec.patch_row), spec.col(img_size)
    mask[r : r + spec.patch_size, c : c + spec.patch_size] = True
    return mask


def check_bias_spec(spec: BiasSpec, data: DatasetSplits) -> None:
    """Refuse, before any work, classes the data set lacks, source == target, a patch (partly) outside the image
    and counts larger than the class has training images (each message names the value)."""
    if not isinstance(data.train, TensorImageDataset):
        raise DuckInputError(f"data set {data.name} keeps its images in files; the bias experiment patches images in "
                             "memory: use digits or fashion_mnist")
    labels = np.asarray(data.train.labels)
    for name, c in (("source_class", spec.source_class), ("target_class", spec.target_class)):
        if not 0 <= c < data.num_classes:
            raise DuckInputError(f"bench.{name}={c} is not a class of {data.name} (classes are 0..{data.num_classes - 1})")
    if spec.source_class == spec.target_class:
        raise DuckInputError(f"bench.source_class and bench.target_class are both {spec.source_class}; the relabelled "
                             "images need another class")
    size, r, c = spec.patch_size, spec.patch_row, spec.col(data.img_size)
    if size < 1 or r < 0 or c < 0 or r + size > data.img_size or c + size > data.img_size:
        raise DuckInputError(f"the {size}x{size} patch at row {r}, column {c} (bench.patch_size={size}, "
                             f"bench.patch_row={spec.patch_row}, bench.patch_col={spec.patch_col}) lies outside the "
                             f"{data.img_size}x{data.img_size} image")
    for name, n, cls in (("n_biased", spec.n_biased, spec.source_class),
                         ("n_confounder", spec.n_confounder, spec.target_class)):
        have = int((labels == cls).sum())
        if n > have:
            raise DuckInputError(f"bench.{name}={n} is larger than the {have} training images of class {cls} in "
                                 f"{data.name}; use at most {have}")
    if spec.n_biased >= int((labels == spec.source_class).sum()):
        raise DuckInputError(f"bench.n_biased={spec.n_biased} leaves no clean training image of class "
                             f"{spec.source_class}: DUCK's target centroid is the mean of its retained images")


def _max_intensity(images: torch.Tensor) -> float:
    """Maximum raw pixel value of the storage format (uint8: 255; float images in [0, 1]: 1)."""
    return 255.0 if images.dtype == torch.uint8 else 1.0


def _patched(images: torch.Tensor, mask: np.ndarray) -> torch.Tensor:
    out = images.clone()
    out[:, :, torch.from_numpy(mask)] = _max_intensity(images)  # every channel: a white square on grey images
    return out


def _dataset_like(ds: TensorImageDataset, images: torch.Tensor, labels: np.ndarray) -> TensorImageDataset:
    """A TensorImageDataset with ``ds``'s normalisation."""
    return TensorImageDataset(images, labels, tuple(ds.mean.flatten().tolist()), tuple(ds.std.flatten().tolist()))


def build_biased_sets(data: DatasetSplits, spec: BiasSpec, seed: int) -> BiasedSets:
    """Patch ``n_biased`` random source-class and ``n_confounder`` random target-class training images (drawn with
    ``seed``), relabel the former as the target class; the test set stays clean (§V-G)."""
    check_bias_spec(spec, data)
    train, test = data.train, data.test
    labels = np.asarray(train.labels, dtype=np.int64)
    rng = np.random.default_rng(seed)
    pick = lambda cls, n: np.sort(rng.choice(np.flatnonzero(labels == cls), size=n, replace=False))
    biased_idx, confounder_idx = pick(spec.source_class, spec.n_biased), pick(spec.target_class, spec.n_confounder)
    mask = patch_mask(data.img_size, spec)
    images = train.images.clone()
    touched = np.concatenate([biased_idx, confounder_idx])
    images[torch.from_numpy(touched)] = _patched(train.images[torch.from_numpy(touched)], mask)
    biased_labels = labels.copy()
    biased_labels[biased_idx] = spec.target_class
    test_labels = np.asarray(test.labels)

    def patched_test(cls: int) -> TensorImageDataset:
        ids = torch.from_numpy(np.flatnonzero(test_labels == cls))
        return _dataset_like(test, _patched(test.images[ids], mask), np.full(len(ids), cls))

    return BiasedSets(
        biased=dataclasses.replace(data, train=_dataset_like(train, images, biased_labels)),
        corrected=dataclasses.replace(data, train=_dataset_like(train, images, labels)),
        biased_idx=biased_idx, confounder_idx=confounder_idx,
        patched_source_test=patched_test(spec.source_class), patched_target_test=patched_test(spec.target_class),
        mask=mask)


def check_shap_counts(cfg: BiasBench, spec: BiasSpec, data: DatasetSplits) -> None:
    """``bench.shap_images`` at most the source class's test images, ``bench.shap_background`` at most the
    training images: refused before any training instead of silently capped."""
    have = int((np.asarray(data.test.labels) == spec.source_class).sum())
    if cfg.shap_images is not None and int(cfg.shap_images) > have:
        raise DuckInputError(f"bench.shap_images={cfg.shap_images} is more than the {have} test images of class "
                             f"{spec.source_class}; use at most {have} (or null: all of them)")
    if int(cfg.shap_background) > len(data.train):
        raise DuckInputError(f"bench.shap_background={cfg.shap_background} is more than the {len(data.train)} "
                             f"training images; use at most {len(data.train)}")


# ------------------------------------------------------------------------------------------------- one run
def _predictions(model: torch.nn.Module, ds: Any, device: torch.device) -> np.ndarray:
    from duck.metrics import predict_logits

    logits, _, _ = predict_logits(model, ds, device=device)
    return logits.argmax(1).numpy()


def evaluate(model: torch.nn.Module, sets: BiasedSets, spec: BiasSpec, device: torch.device) -> dict[str, float]:
    """Accuracies (fractions): patched source test images called the source class (``source_acc``) and the
    target class (``target_frac``), patched target test images called the target class (``confounder_acc``),
    clean test set (``clean_test``)."""
    src = _predictions(model, sets.patched_source_test, device)
    conf = _predictions(model, sets.patched_target_test, device)
    clean = _predictions(model, sets.biased.test, device)
    return {"source_acc": float((src == spec.source_class).mean()),
            "target_frac": float((src == spec.target_class).mean()),
            "confounder_acc": float((conf == spec.target_class).mean()),
            "clean_test": float((clean == np.asarray(sets.biased.test.labels)).mean())}


def patch_shap(model: torch.nn.Module, sets: BiasedSets, spec: BiasSpec, cfg: BiasBench, seed: int,
               device: torch.device) -> np.ndarray:
    """Per-image mean SHAP value of the patch, ``(N,)``, on the patched source test images (the same images and
    background for every model, so the three vectors are paired)."""
    from duck.analysis.shap_maps import region_mean, shap_values

    x, _ = sets.patched_source_test.tensors()
    if cfg.shap_images is not None:
        x = x[: int(cfg.shap_images)]
    background, _ = sets.biased.train.tensors()
    rows = np.random.default_rng(seed).choice(len(background), size=int(cfg.shap_background), replace=False)
    classes: Any = spec.target_class if cfg.shap_output == "target" else spec.source_class
    if cfg.shap_output == "predicted":
        classes = _predictions(model, sets.patched_source_test, device)[: len(x)]
    phi = shap_values(model, x, background[torch.from_numpy(rows)], classes, nsamples=int(cfg.shap_nsamples),
                      seed=seed)
    return region_mean(phi, sets.mask)


def run_repetition(cfg: BiasBench, data: DatasetSplits, spec: BiasSpec, seed: int) -> dict[str, Any]:
    """Original, DUCK and retrained model for one seed; their evaluations and patch SHAP values."""
    from duck.data.scenarios import build_scenario
    from duck.pipeline.job import Job
    from duck.pipeline.stages import fit_model, unlearn_model

    run_cfg = compare.compose_run(run_overrides(cfg, seed))
    sets = build_biased_sets(data, spec, seed)
    scenario = build_scenario("targeted", sets.biased.train.labels, data.test.labels, data.num_classes,
                              forget_ids=sets.biased_idx.tolist(), target_class=spec.source_class, seed=seed)
    job = Job.from_cfg(run_cfg, "run", data=sets.biased, scenario=scenario)  # DUCK's targeted preset, checked
    device = job.device
    original, orig_metrics = fit_model(job, retrain=False)
    duck_metrics, result = unlearn_model(job, copy.deepcopy(original), orig_metrics["acc"])
    retrained, retr_metrics = fit_model(job.replace(data=sets.corrected, scenario=None), retrain=False)
    models = {"original": original, "duck": result.model, "retrained": retrained}
    rec: dict[str, Any] = {"seed": seed, "biased_idx": sets.biased_idx.tolist(),
                           "confounder_idx": sets.confounder_idx.tolist(),
                           "time_s": {"original": orig_metrics["time_s"], "duck": duck_metrics["time_s"],
                                      "retrained": retr_metrics["time_s"]},
                           "duck_epochs": duck_metrics["epochs"], "duck_reached_target": duck_metrics["reached_target"],
                           "duck_train_forget_acc": duck_metrics["acc"]["train_forget"]}
    for name, model in models.items():
        model.to(device)
        rec[name] = evaluate(model, sets, spec, device)
        rec[name]["shap_patch"] = patch_shap(model, sets, spec, cfg, seed, device).tolist()
    return rec


def run_overrides(cfg: BiasBench, seed: int) -> list[str]:
    return [f"data={cfg.data}", f"model={cfg.model}", "method=duck", f"seed={seed}", "audit=false",
            f"progress={str(bool(cfg.progress)).lower()}", *[str(o) for o in cfg.overrides]]


# ------------------------------------------------------------------------------------------------- the suite
def wilcoxon_tests(shap: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """Two-sided Wilcoxon signed-rank tests on the paired per-image patch SHAP means (§IV-J): one value per
    test image and model, the same images for every model."""
    from scipy.stats import wilcoxon

    out = []
    for a, b in (("original", "duck"), ("original", "retrained"), ("duck", "retrained")):
        res = wilcoxon(shap[a], shap[b], alternative="two-sided")
        out.append({"pair": f"{a} vs {b}", "n": int(len(shap[a])), "statistic": float(res.statistic),
                    "p_value": float(res.pvalue), "median_difference": float(np.median(shap[a] - shap[b]))})
    return out


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per model: mean (std over repetitions) of each accuracy and of the per-run mean patch SHAP value; the
    per-image SHAP values pooled over repetitions (std over images); the Wilcoxon tests on each test image's
    value averaged over the repetitions (the repetitions explain the same images: pooling them would count
    every image once per repetition as if independent and overstate the significance)."""
    summary: dict[str, Any] = {}
    pooled = {m: np.concatenate([np.asarray(r[m]["shap_patch"]) for r in records]) for m in MODELS}
    per_image = {m: np.mean([np.asarray(r[m]["shap_patch"]) for r in records], axis=0) for m in MODELS}
    for m in MODELS:
        summary[m] = {k: mean_std([r[m][k] for r in records])
                      for k in ("source_acc", "target_frac", "confounder_acc", "clean_test")}
        summary[m]["shap_patch_run_mean"] = mean_std([float(np.mean(r[m]["shap_patch"])) for r in records])
        summary[m]["shap_patch_images"] = mean_std(pooled[m])
        summary[m]["time_s"] = mean_std([r["time_s"][m] for r in records])
    summary["wilcoxon"] = wilcoxon_tests(per_image)
    return summary


def _paper(value: float | None, pct: bool = True) -> str:
    return "—" if value is None else (f"{100 * value:.1f}" if pct else f"{value}")


def markdown(summary: dict[str, Any], cfg: BiasBench, n_runs: int) -> str:
    rows = []
    for m in MODELS:
        s, p = summary[m], PAPER[m]
        rows.append([m, fmt_mean_std({k: 100 * v for k, v in s["source_acc"].items()}, 1), _paper(p["source_acc"]),
                     fmt_mean_std({k: 100 * v for k, v in s["target_frac"].items()}, 1), _paper(p["target_frac"]),
                     fmt_mean_std({k: 100 * v for k, v in s["confounder_acc"].items()}, 1),
                     fmt_mean_std({k: 100 * v for k, v in s["clean_test"].items()}, 1),
                     fmt_mean_std(s["shap_patch_run_mean"], 4), fmt_mean_std(s["shap_patch_images"], 4),
                     f"{p['shap'][0]} ± {p['shap'][1]}", fmt_mean_std(s["time_s"], 2)])
    head = ["model", "source acc, patched source test (%)", "paper", "called target (%)", "paper",
            "confounder acc (%)", "clean test acc (%)", "patch SHAP, mean (std over runs)",
            "patch SHAP, mean (std over images)", "paper SHAP", "time (s)"]
    tests = markdown_table(["two-sided Wilcoxon signed-rank", "pairs", "statistic", "p-value", "median difference"],
                           [[t["pair"], t["n"], f"{t['statistic']:.1f}", f"{t['p_value']:.3g}",
                             f"{t['median_difference']:.4f}"] for t in summary["wilcoxon"]])
    setup = (f"{cfg.data} / {cfg.model}: {cfg.n_biased} class-{cfg.source_class} training images patched "
             f"({cfg.patch_size}x{cfg.patch_size}, max intensity) and relabelled {cfg.target_class}, "
             f"{cfg.n_confounder} class-{cfg.target_class} images patched (label kept); {n_runs} repetition(s); "
             f"SHAP of the {cfg.shap_output} logit (GradientExplainer, {cfg.shap_background} background images, "
             f"{cfg.shap_nsamples} samples per image)")
    return f"{setup}\n\n{markdown_table(head, rows)}\n\n{tests}"


@settings
class BiasBench(BenchSettings):
    """conf/bench/bias.yaml."""

    suite: ClassVar[str] = "bias"

    data: str = option("digits", OneOf(("digits", "fashion_mnist")), "the data set")
    model: str = option("smallcnn", compare.CONFIG_NAME, "the model config (conf/model)")
    source_class: int = option(0, Integer(0), "the paper's car: patched images relabelled as target_class")
    target_class: int = option(6, Integer(0), "the paper's truck: also the confounder class")
    n_biased: int = option(60, Integer(1), "patched source-class training images")
    n_confounder: int = option(60, Integer(0), "patched target-class training images (label kept)")
    patch_size: int = option(2, Integer(1), "the square's side")
    patch_row: int = option(0, Integer(0), "the square's top row")
    patch_col: int | None = option(None, Either((None,), Integer(0)), "its left column (null: flush right)")
    repetitions: int = option(3, Integer(1), "seeds seed .. seed + repetitions - 1")
    seed: int = option(0, SEED, "the first seed")
    shap_output: str = option("target", OneOf(("target", "source", "predicted")), "the logit explained")
    shap_images: int | None = option(None, Either((None,), Integer(1)), "patched test images explained (null: all)")
    shap_background: int = option(100, Integer(1), "SHAP background images")
    shap_nsamples: int = option(200, Integer(1), "expected-gradient samples per image")
    overrides: tuple[str, ...] = option((), compare.RUN_OVERRIDES, "duck-run overrides")
    torch_threads: int | None = option(1, THREADS, "torch intra-op threads (null: torch's default)")
    progress: bool = option(False, Flag(), "progress bars")


def spec_of(cfg: BiasBench) -> BiasSpec:
    return BiasSpec(int(cfg.source_class), int(cfg.target_class), int(cfg.n_biased), int(cfg.n_confounder),
                    int(cfg.patch_size), int(cfg.patch_row), None if cfg.patch_col is None else int(cfg.patch_col))


def run(cfg: Any) -> dict[str, Any]:
    from duck.pipeline.job import build_data

    cfg = BiasBench.parse(cfg)
    spec = spec_of(cfg)
    if cfg.torch_threads is not None:  # kept for the rest of the process (one suite per duck-bench call), so
        torch.set_num_threads(int(cfg.torch_threads))  # bench.json's machine.torch_threads is what ran
    with compare.hydra_ready():
        data = build_data(compare.compose_run(run_overrides(cfg, int(cfg.seed))))
        check_bias_spec(spec, data)  # before any training
        check_shap_counts(cfg, spec, data)
        records = []
        for r in range(int(cfg.repetitions)):
            t0 = time.perf_counter()
            records.append(run_repetition(cfg, data, spec, int(cfg.seed) + r))
            print(f"repetition {r + 1}/{cfg.repetitions} (seed {int(cfg.seed) + r}) done in "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
    summary = summarise(records)
    return {"table": markdown(summary, cfg, len(records)), "summary": summary, "runs": records,
            "spec": dataclasses.asdict(spec), "paper": PAPER, "setup": plain(cfg)}
