"""The job as one object: every setting of a run read and checked once (scikit-learn's habit: validate at the
boundary, then the stages trust their inputs).

:meth:`Job.from_cfg` turns a composed Hydra config into a :class:`Job`: the data set, the scenario, the model
builder, the method and its hyperparameters, the training recipe, the device and trainer settings, the audit
and report settings, the trust checks of the original. The stages (:mod:`duck.pipeline.stages`,
:mod:`duck.pipeline.cache`, :mod:`duck.pipeline.audit`) and the jobs (:mod:`duck.pipeline.jobs`) receive the
Job and never read the config again; :func:`duck.unlearn` builds a Job without any config file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from omegaconf import DictConfig

from attacks.audit import AuditSettings, check_audit_data
from duck.analysis.options import AnalysisSettings, check_analysis_data
from duck.data.base import DatasetSplits, subset_splits
from duck.data.registry import build_datasets
from duck.data.scenarios import Scenario, ScenarioSettings, make_scenario
from duck.errors import DuckInputError
from duck.models import Classifier, create_model
from duck.pipeline.config import JobSettings, Trust, configure_threads, container, resolve_progress
from duck.privacy.shareable import ShareableSettings
from duck.schema import SEED, Either, Integer, Settings, option, settings
from duck.training import Recipe, check_data_parallel, check_trainer_settings, data_parallel_size
from duck.unlearn import get_unlearner_class
from duck.unlearn.config import MethodSettings
from duck.unlearn.registry import resolve_method_cfg
from duck.utils import warn_line

#: job commands and what each needs
COMMANDS = ("train", "unlearn", "audit", "run")
SCENARIO_KINDS = "scenario=class_removal|homogeneous_removal|custom|targeted"


#: what messages name, per interface (:meth:`Job.hint`)
HINTS = {
    "cli": {"prep": "the normalisation (data.mean / data.std), data.in_chans and data.img_size, and the model "
                    "settings (model.cifar_stem for a ResNet-style model, or the model / checkpoint itself)",
            "input_check": "input_check=false", "min_acc": "min_acc_factor=0",
            "step": "the method's step size or length (method.lr, method.epochs)"},
    "python": {"prep": "the transforms of the data sets you pass (Normalize, Resize, Grayscale / channels: the ones "
                       "the model was trained with, for train and test alike) and the model you pass",
               "input_check": "input_check=False", "min_acc": "min_acc_factor=0",
               "step": "the method's step size or length (its keywords lr=..., epochs=...)"},
}


@dataclass
class AuditOptions:
    """The audit and report settings: LiRA + SVM MIA (``attack.*``), the DP shareable statistics
    (``report.shareable.*``) and the feature-space analysis (``report.analysis.*``)."""

    attack: AuditSettings
    shareable: ShareableSettings
    analysis: AnalysisSettings


@dataclass(frozen=True)
class Job:
    """Everything a run needs, resolved once (see the module docstring); frozen: a stage that needs a variant
    (another seed, the method of an audited checkpoint) makes one with :meth:`replace`."""

    command: str
    data: DatasetSplits
    scenario: Scenario | None
    model_name: str
    model_factory: Callable[[], Classifier]  # a freshly initialised model of the job's architecture
    device: torch.device
    trainer_cfg: dict[str, Any] = field(default_factory=dict)
    recipe: Recipe | None = None
    method: str | None = None
    hparams: MethodSettings | None = None  # its effective hyperparameters for this data set and scenario, resolved once
    audit: AuditOptions | None = None
    trust: Trust = field(default_factory=Trust)
    input_check: bool = True  # refuse data prepared differently from the original's training (stages.check_inputs)
    seed: int = 0
    eval_batch_size: int = 1024
    progress: bool = False
    cache_dir: Path | None = None
    reuse_cached: bool = True
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config, recorded in manifests
    inputs: dict[str, Any] = field(default_factory=dict)  # ckpt, original_ckpt, retrained_ckpt, role
    data_cfg: dict[str, Any] = field(default_factory=dict)  # cfg.data (the split settings manifests record)
    model_cfg: dict[str, Any] = field(default_factory=dict)  # cfg.model (cache keys)
    recipe_cfg: dict[str, Any] = field(default_factory=dict)  # cfg.recipe (cache keys)
    interface: str = "cli"  # "cli" (a config) or "python" (duck.unlearn): the words of error messages

    def hint(self, topic: str) -> str:
        """The settings a message should name, in the words of the interface that built the job (the command
        line's ``data.mean`` or Python's ``transforms.Normalize``)."""
        return HINTS[self.interface][topic]

    def replace(self, **changes: Any) -> Job:
        """A copy with some fields changed (a benchmark's variant of the data, the scenario or the seed)."""
        return dataclasses.replace(self, **changes)

    def build_model(self) -> Classifier:
        return self.model_factory()

    def expected_spec(self) -> dict[str, Any]:
        """What a checkpoint's manifest must agree with: the model, the data set and its shape, and the requested
        ``data`` config (whose train/test split settings :func:`duck.checkpoint.check_manifest` compares)."""
        d = self.data
        spec = {"model": self.model_name, "num_classes": d.num_classes, "in_chans": d.in_chans,
                "img_size": d.img_size, "dataset": d.name, "data": self.data_cfg}
        if self.model_cfg.get("_target_"):  # model=custom: the class too
            spec["target"] = self.model_cfg["_target_"]
        return spec

    # ------------------------------------------------------------------------------------------ from a config
    @classmethod
    def from_cfg(cls, cfg: DictConfig, command: str, *, data: DatasetSplits | None = None,
                 scenario: Scenario | None = None) -> Job:
        """Resolve and check every setting of ``cfg`` for ``command`` (one of :data:`COMMANDS`) before any work.

        ``data`` / ``scenario`` reuse objects built already (benchmarks build the data once for many jobs)."""
        if command not in COMMANDS:
            raise ValueError(f"unknown command {command!r}")
        settings = JobSettings.parse(cfg)
        configure_threads(settings.threads)
        attack_settings = None
        if command == "audit" or settings.audit:  # options checked before the data are loaded
            attack_settings, share, analysis = check_report_options(cfg)
        planned = scenario_settings(cfg) if scenario is None else None  # checked before the data are loaded too
        if data is None:
            data = build_data(cfg)
        if scenario is None:
            scenario = make_job_scenario(planned, data)
        if scenario is None and command != "train":
            raise DuckInputError(f"duck-{command} needs a scenario"
                                 + (" (it defines the members)" if command == "audit" else "") + f": {SCENARIO_KINDS}")
        if command == "train" and settings.retrain and scenario is None:
            raise DuckInputError("retrain=true needs a scenario (e.g. scenario=class_removal) to define the retain set")
        check_validation_separation(cfg.get("tuned_on"), data.name, scenario)
        model_name, model_kw = model_settings(cfg)
        method, hparams = None, None
        if cfg.get("method") is not None and command in ("unlearn", "run"):
            method, method_cfg = method_settings(cfg)
            hparams = resolve_method_cfg(method_cfg, data.name, scenario.kind, method)
        recipe_cfg = container(cfg.recipe) if cfg.get("recipe") is not None else {}
        job = cls(command=command, data=data, scenario=scenario, model_name=model_name,
                  model_factory=lambda: create_model(model_name, data.num_classes, data.in_chans, data.img_size,
                                                     **model_kw),
                  device=device_of(cfg), trainer_cfg=container(cfg.trainer) or {},
                  trust=Trust.parse(cfg), input_check=settings.input_check, seed=settings.seed,
                  eval_batch_size=settings.eval_batch_size, progress=resolve_progress(settings.progress),
                  reuse_cached=settings.reuse_cached, config=container(cfg),
                  inputs={k: cfg.get(k) for k in ("ckpt", "original_ckpt", "retrained_ckpt", "role") if k in cfg},
                  data_cfg=data_identity(cfg), model_cfg=container(cfg.model), recipe_cfg=recipe_cfg,
                  method=method, hparams=hparams,
                  recipe=Recipe.from_cfg(recipe_cfg) if cfg.get("recipe") is not None else None,
                  cache_dir=None if settings.cache_dir is None else Path(settings.cache_dir),
                  audit=AuditOptions(attack_settings, share, analysis) if attack_settings is not None else None)
        if method is not None:
            get_unlearner_class(method).check_trainer_cfg(job.trainer_cfg)
        check_trainer_settings(job.trainer_cfg)
        if command in ("train", "run"):  # the original / oracle train with DDP where trainer.devices > 1
            check_data_parallel(job.trainer_cfg, job.recipe.batch_size if job.recipe is not None else None)
        elif data_parallel_size(job.trainer_cfg) > 1 and command == "audit":
            warn_line(f"trainer.devices={job.trainer_cfg.get('devices')!r} not used: duck-audit trains its banks on "
                      "one device each (batched where faster); DDP is for duck-train / duck-run's original and oracle")
        if attack_settings is not None:
            if attack_settings.num_shards > 1 and command not in ("run", "audit"):
                raise DuckInputError(f"attack.num_shards={attack_settings.num_shards}: banks are built in slices by "
                                     "duck-run or duck-audit array jobs; run duck-unlearn audit=true afterwards")
            if attack_settings.forgetting["enabled"] and command == "audit" and not cfg.get("original_ckpt"):
                raise DuckInputError("attack.forgetting.enabled=true reruns the method from the original: give "
                                     "original_ckpt=PATH (the method is read from the unlearned checkpoint)")
            if attack_settings.forgetting["enabled"] and attack_settings.forgetting["ulira"]:
                from attacks.forgetting import ULIRA_MIN_SHADOWS as MIN_SHADOWS

                if attack_settings.n_shadow < MIN_SHADOWS or attack_settings.shadow_pool != "train":
                    raise DuckInputError(f"U-LiRA needs attack.n_shadow >= {MIN_SHADOWS} and attack.shadow_pool=train "
                                         f"(got {attack_settings.n_shadow}, {attack_settings.shadow_pool}): each forget "
                                         "example must stay IN for two shadow pairs when the attack and its interval's "
                                         "jackknife each leave one out")
                if job.method is not None and get_unlearner_class(job.method).needs:
                    raise DuckInputError(f"attack.forgetting.ulira=true reruns the method on every shadow's half of "
                                         f"the data, but {job.method!r} learns from reference models of the whole "
                                         "data set; audit it without U-LiRA")
            f = attack_settings.forgetting
            oracle_seed = (job.hparams or {}).get("oracle_seed")
            if f["enabled"] and oracle_seed is not None and int(oracle_seed) in (int(f["seed"]), int(f["seed"]) + 1):
                raise DuckInputError(f"method.oracle_seed={oracle_seed} is the seed of the forgetting audit's retrain "
                                     f"bank or retrain control (attack.forgetting.seed={f['seed']} and the next): the "
                                     "oracles would be the very models the method is judged against; pick another "
                                     "oracle_seed")
            check_audit_against_data(job)
        uses_cache = attack_settings is not None or command == "run" or (
            method is not None and bool(get_unlearner_class(method).needs))
        if job.cache_dir is not None and uses_cache:
            from duck.store import check_cache_writable

            check_cache_writable(job.cache_dir)
        return job


# ----------------------------------------------------------------------------------------------- the pieces
def build_data(cfg: DictConfig) -> DatasetSplits:
    kw = container(cfg.data)
    subset = kw.pop("subset", None)
    data = build_datasets(kw.pop("name"), **kw)
    if subset is not None:
        sub = SubsetSettings.parse(subset)
        data = subset_splits(data, sub.n_train, sub.n_test, sub.seed)
    return data


def data_identity(cfg: DictConfig) -> dict[str, Any]:
    """``cfg.data`` as manifests and cache keys record it: ``subset`` only when it selects a subset (so that the
    keys and manifests of whole data sets are those written before the option existed)."""
    d = container(cfg.data)
    subset = d.get("subset")
    if isinstance(subset, dict) and subset.get("n_train") is None and subset.get("n_test") is None:
        d.pop("subset")
    return d


@settings
class SubsetSettings(Settings):
    """``data.subset``: a fixed random subset of an in-memory data set (:func:`duck.data.base.subset_splits`)."""

    prefix: ClassVar[str] = "data.subset"

    n_train: int | None = option(None, Either((None,), Integer(2), "an integer >= 2, or null for the whole split"),
                                 "training examples kept (null: all)")
    n_test: int | None = option(None, Either((None,), Integer(2), "an integer >= 2, or null for the whole split"),
                                "test examples kept (null: all)")
    seed: int = option(0, SEED, "seed of the random subset")


def scenario_settings(cfg: DictConfig) -> ScenarioSettings | None:
    """``cfg.scenario`` parsed (:class:`~duck.data.scenarios.ScenarioSettings`, the seed defaulting to the job's),
    before the data are loaded; None for ``scenario=none``."""
    sc = container(cfg.scenario)
    if sc.get("kind") in (None, "none") and len(sc) <= 1:
        return None
    sc.setdefault("seed", int(cfg.get("seed", 0)))
    parsed = ScenarioSettings.parse(sc)
    return None if parsed.kind == "none" else parsed


def make_job_scenario(settings_: ScenarioSettings | None, data: DatasetSplits) -> Scenario | None:
    """The forget set of parsed scenario settings on ``data`` (None stays None)."""
    if settings_ is None:
        return None
    return make_scenario(settings_, data.train.labels, None if data.test is None else data.test.labels,
                         data.num_classes, class_names=data.class_names or None)


def model_settings(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """``(model name, its options)`` from ``cfg.model``."""
    kw = container(cfg.model)
    return kw.pop("name"), kw


def check_validation_separation(tuned_on: Any, data_name: str, scenario: Any) -> None:
    """A tuned preset (``preset/tuned_*.yaml`` from ``duck-run -m +tune=METHOD``) records the validation forget set
    its search looked at (``tuned_on``); a run that would report the preset on that forget set (the same
    forget ids, or for class removal any of the same classes) on the same data is refused: a search must never
    see the forget set its method is reported on."""
    if not tuned_on or scenario is None or str(tuned_on.get("data")) != data_name:
        return
    same_ids = tuned_on.get("forget_hash") == scenario.forget_hash
    classes = set(tuned_on.get("forget_classes") or []) & set(scenario.forget_classes or [])
    if same_ids or classes:
        what = f"classes {sorted(classes)}" if classes else "forget ids"
        raise DuckInputError(f"this run's preset was tuned on {data_name} with the same {what} as its forget set "
                             f"(tuned_on: {tuned_on.get('scenario')} {tuned_on.get('forget_classes')}): report a "
                             "tuned method on forget sets its search did not see (other classes, another seed), or "
                             "drop the preset")


def method_settings(cfg: DictConfig | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(method name, its config)``: the name checked against the registry; the config (its values and
    ``presets``) is parsed by the method's settings class (:func:`~duck.unlearn.registry.resolve_method_cfg`),
    which refuses a hyperparameter the method does not declare (``+method.lambda_fgtt=3``)."""
    m = container(cfg.method) if isinstance(cfg, DictConfig) else dict(cfg["method"])
    name = m.pop("name")
    get_unlearner_class(name)  # unknown names first
    return name, m


def device_of(cfg: DictConfig) -> torch.device:
    """The job's device from ``trainer.accelerator`` (auto: CUDA when available)."""
    return resolve_accelerator(str(cfg.trainer.get("accelerator", "auto")))


def resolve_accelerator(acc: str, device: str | None = None) -> torch.device:
    """``cuda`` or ``cpu`` for an accelerator choice; ``device``: the Python API's ``device=`` it came from,
    which the message then names."""
    if acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DuckInputError(f"device={device!r} but CUDA is not available; pass device='cpu' or device='auto'"
                                 if device is not None else f"trainer.accelerator={acc} but CUDA is not available; use "
                                 "trainer=cpu or trainer=auto")
        return torch.device("cuda")
    return torch.device("cpu")


def check_report_options(cfg: DictConfig) -> tuple[AuditSettings, ShareableSettings, AnalysisSettings]:
    """The data-free audit options (``attack.*``, ``report.shareable.*``, ``report.analysis.*``): ``(attack
    settings, shareable settings, analysis settings)``."""
    settings = AuditSettings.from_cfg(container(cfg.attack))
    report_cfg = container(cfg.report) if cfg.get("report") is not None else {}
    share = ShareableSettings.parse(report_cfg.get("shareable"))
    analysis = AnalysisSettings.parse(report_cfg.get("analysis"))
    return settings, share, analysis


def feature_samples(scenario: Scenario) -> tuple[np.ndarray, np.ndarray]:
    """The training samples the feature-space analysis embeds (forget + retain, ascending) and which are
    forget samples: ``(idx (N,), is_forget (N,))``."""
    idx = np.sort(np.concatenate([scenario.forget_idx, scenario.retain_idx]))
    return idx, np.isin(idx, scenario.forget_idx)


def feature_group_sizes(data: DatasetSplits, scenario: Scenario) -> dict[str, int]:
    """Training samples per feature-space group: each retain class (its retain samples) and ``forget``."""
    from duck.analysis.density import group_labels

    idx, is_forget = feature_samples(scenario)
    groups, counts = np.unique(group_labels(data.train.labels[idx], is_forget).astype(str), return_counts=True)
    return dict(zip(groups.tolist(), counts.tolist(), strict=True))


def check_banks_fit(job: Job) -> None:
    """The audit's banks against this machine's memory and the cache directory's free space, before any work
    (the LiRA shadow bank; with the forgetting audit its retrain bank, controls and U-LiRA pairs)."""
    from attacks.shadow import check_bank_resources, state_bytes

    a = job.audit.attack
    model_bytes = state_bytes(job.build_model())
    where = (job.cache_dir or Path.cwd()) / "banks"
    n_pool = len(job.data.train) + (len(job.data.test) if a.shadow_pool != "train" else 0)
    check_bank_resources(int(a.n_shadow), n_pool, model_bytes, where, "shadow bank", "attack.n_shadow")
    f = a.forgetting
    if f["enabled"]:
        for n, setting in ((int(f["n_retrained"]), "attack.forgetting.n_retrained"),
                           (int(f["n_unlearned"]), "attack.forgetting.n_unlearned")):
            check_bank_resources(n, len(job.data.train), model_bytes, where, "retrain bank", setting)


def check_audit_against_data(job: Job) -> None:
    """The audit bounds that depend on the data and the scenario, before any work: the SVM MIA's sample
    counts and the class-removal test samples; ``n_components`` against the embedding dimension and the
    samples, ``k`` against the retain samples, the feature-space groups and t-SNE's perplexity (on a freshly
    built model)."""
    opts, data, scenario = job.audit, job.data, job.scenario
    if data.test is None:
        raise DuckInputError("the audit needs a test set (its non-members); pass test= / a data set with a test split")
    check_audit_data(opts.attack, len(data.test), scenario)
    check_banks_fit(job)
    share, analysis = opts.shareable, opts.analysis
    if not (share["enabled"] or analysis["enabled"]):
        return
    from duck.embeddings import embed_samples

    with torch.no_grad():
        dim = int(embed_samples(job.build_model(), data.train, np.array([0]), device=torch.device("cpu"))[0].shape[1])
    check_analysis_data(analysis, feature_group_sizes(data, scenario), dim)
    if share["enabled"]:
        n_retain = min(len(scenario.retain_idx), share["max_retain"])
        if share["n_components"] > min(dim, n_retain - 1):
            raise DuckInputError(f"report.shareable.n_components={share['n_components']} exceeds min(embedding "
                                 f"dim {dim}, n_retain - 1 = {n_retain - 1}); lower it")
        if share["k"] > n_retain:
            raise DuckInputError(f"report.shareable.k={share['k']} exceeds the number of retain samples "
                                 f"({n_retain}); lower it")
