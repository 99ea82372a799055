"""The one-call Python API: ``duck.unlearn(model, train, forget_classes=[3])`` on any classifier
``nn.Module`` and any map-style data set, with the defaults and presets of the packaged configs.

It builds the same :class:`~duck.pipeline.job.Job` as ``duck-unlearn`` from the packaged presets, parsed by the
same typed settings but without composing a Hydra config (the method's ``conf/method/NAME.yaml`` with the
keywords over it, the trainer preset of ``auto``/``cpu``/``gpu``, ``threads="auto"``) and runs the
same stages: measure the original (refused near chance), unlearn, evaluate. The caller's model is not
modified: the method works on a copy.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from duck.errors import DuckInputError
from duck.unlearn.base import UnlearnResult

#: ``device=`` values and the trainer config each uses
DEVICES = {"auto": "auto", "cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}


def _fresh_copy(net: nn.Module) -> nn.Module:
    """A copy of ``net`` with every parameter re-initialised by its module's ``reset_parameters`` (the
    architecture's own initialisation; parameters of modules without one keep their values)."""
    fresh = copy.deepcopy(net)
    for module in fresh.modules():
        reset = getattr(module, "reset_parameters", None)
        if callable(reset):
            reset()
        reset_stats = getattr(module, "reset_running_stats", None)  # BatchNorm: the statistics start over too
        if callable(reset_stats):
            reset_stats()
    return fresh.train()  # a copy of a model in eval mode would train its BatchNorm layers in eval mode


def _scenario_args(forget_classes: Any, forget_ids: Any, forget_fraction: Any) -> tuple[str, dict[str, Any]]:
    """``(scenario kind, its settings)`` from exactly one ``forget_*`` keyword."""
    given = {k: v for k, v in (("forget_classes", forget_classes), ("forget_ids", forget_ids),
                               ("forget_fraction", forget_fraction)) if v is not None}
    if len(given) != 1:
        raise DuckInputError(f"pass exactly one of forget_classes=, forget_ids=, forget_fraction= (got "
                             f"{', '.join(given) or 'none'}): the classes to remove (ids or names), the training "
                             "indices to forget, or a random fraction of the training set")
    if forget_classes is not None:
        classes = [forget_classes] if isinstance(forget_classes, (int, str, np.integer)) else list(forget_classes)
        return "class_removal", {"forget_classes": classes}
    if forget_ids is not None:
        if isinstance(forget_ids, torch.Tensor):
            forget_ids = forget_ids.tolist()
        ids = forget_ids if isinstance(forget_ids, str) else np.asarray(forget_ids).tolist()
        return "custom", {"forget_ids": ids}
    return "homogeneous_removal", {"fraction": forget_fraction}


@dataclass
class _UserSetup:
    """The user's model and data as the pipeline sees them (shared by :func:`unlearn` and :func:`audit`)."""

    data: Any
    scenario: Any
    classifier: Any  # a copy of the user's model, wrapped
    user_module: bool  # the user passed a plain nn.Module (not a duck Classifier)
    factory: Any  # a freshly initialised model of the same architecture
    seed: int


#: the command line's scenario keys -> the Python API's keywords, in messages
_PYTHON_WORDS = {"scenario.forget_classes": "forget_classes", "scenario.forget_ids": "forget_ids",
                 "scenario.fraction": "forget_fraction"}


def in_python_words(message: str) -> str:
    """``message`` with the command line's scenario keys replaced by the Python API's keywords."""
    for cli, py in _PYTHON_WORDS.items():
        message = message.replace(cli, py)
    return message


def _user_setup(model: nn.Module, train: Any, test: Any, forget_classes: Any, forget_ids: Any, forget_fraction: Any,
                *, head: str | None, seed: int, threads: Any, normalization: Any) -> _UserSetup:
    """Check and wrap the user's model and data sets, build the scenario of the one ``forget_*`` keyword."""
    from duck.data.scenarios import build_scenario
    from duck.data.user import as_splits
    from duck.models import Classifier, wrap_model
    from duck.pipeline.config import THREADS, configure_threads
    from duck.utils import check_seed

    if not isinstance(model, nn.Module):
        raise DuckInputError(f"model must be a torch.nn.Module classifier, got {type(model).__name__}")
    configure_threads(THREADS(threads, "threads"))
    seed = check_seed(seed, "seed")
    kind, scenario_kw = _scenario_args(forget_classes, forget_ids, forget_fraction)
    data = as_splits(train, test, normalization=normalization)
    example = next(iter(torch.utils.data.DataLoader(data.train, batch_size=2)))[0]
    user_module = not isinstance(model, Classifier)
    classifier = (copy.deepcopy(model) if not user_module
                  else wrap_model(copy.deepcopy(model), head=head, example=example, num_classes=data.num_classes))
    split_head = getattr(classifier, "head_path", None) or head
    if classifier.num_classes != data.num_classes:
        raise DuckInputError(f"the model outputs {classifier.num_classes} classes but the data set has "
                             f"{data.num_classes}; pass the data set the model was trained on")
    try:
        scenario = build_scenario(kind, data.train.labels, None if data.test is None else data.test.labels,
                                  data.num_classes, class_names=data.class_names or None, seed=seed, **scenario_kw)
    except DuckInputError as e:  # the scenario's messages name the command line's keys: say the keywords
        raise DuckInputError(in_python_words(str(e))) from None

    def factory() -> Classifier:
        net = classifier.net if user_module else classifier
        fresh = _fresh_copy(net)
        return wrap_model(fresh, head=split_head, example=example) if user_module else fresh

    return _UserSetup(data, scenario, classifier, user_module, factory, seed)


def _presets(method: str, device: str, hparams: dict[str, Any], recipe: str | None) -> dict[str, Any]:
    """The packaged presets an API job is made of, read without composing a job config: the method's
    (``conf/method/NAME.yaml``, with ``hparams`` over its top-level values), the device's trainer and, where
    given, the recipe; ``{"method": ..., "trainer": ..., "recipe": ...}``."""
    from duck.pipeline.config import conf_dir, preset

    if not isinstance(method, str) or not (conf_dir() / "method" / f"{method}.yaml").is_file():
        from duck.unlearn import list_unlearners

        raise DuckInputError(f"unknown method {method!r}; choose one of: {', '.join(list_unlearners())}")
    if device not in DEVICES:
        raise DuckInputError(f"device={device!r}; choose one of {', '.join(DEVICES)}")
    if recipe is not None and (not isinstance(recipe, str) or not (conf_dir() / "recipe" / f"{recipe}.yaml").is_file()):
        raise DuckInputError(f"recipe={recipe!r} is not a packaged recipe; choose one of: "
                             + ", ".join(sorted(p.stem for p in (conf_dir() / "recipe").glob("*.yaml"))))
    return {"method": {**preset("method", method), **hparams}, "trainer": preset("trainer", DEVICES[device]),
            "recipe": None if recipe is None else preset("recipe", recipe)}


def unlearn(model: nn.Module, train: Any, *, forget_classes: Sequence[int | str] | int | str | None = None,
            forget_ids: Sequence[int] | np.ndarray | torch.Tensor | str | None = None,
            forget_fraction: float | None = None, method: str = "duck", test: Any = None, head: str | None = None,
            seed: int = 0, device: str = "auto", threads: int | str | None = "auto", progress: bool = False,
            recipe: str | None = None, expect_acc: float | None = None, expect_acc_tol: float = 0.02,
            min_acc_factor: float = 1.5,
            normalization: Any = None, input_check: bool = True, **hparams: Any) -> UnlearnResult:
    """Unlearn a forget set from ``model`` and return the unlearned copy with its metrics.

    ``model``: any classifier ``nn.Module`` (a timm model, a torchvision model, your own); the embedding/head
    split that DUCK and several baselines need is found automatically or named with ``head=`` (the attribute
    path of the final ``nn.Linear``, e.g. ``"fc"``). ``train`` / ``test``: map-style data sets yielding
    ``(x, y)`` (the index is the position), e.g. ``torchvision.datasets.ImageFolder`` with your transforms;
    ``test`` enables the test accuracies and AUS. Exactly one of ``forget_classes`` (ids or names from
    ``train.classes``), ``forget_ids`` (training indices, or a .txt/.npy/.csv file) or ``forget_fraction``.
    ``method``: a registered method (``duck.unlearn.list_unlearners()``), its hyperparameters as keywords
    (``lambda_fgt=2.0``; defaults and presets from the packaged ``conf/method/NAME.yaml``). ``recipe``: the
    training recipe name, needed by ``method="retrain"`` and by the methods that learn from models trained with it
    (``oracle_matching``, ``datamodel_matching``, ``subset_matching``). ``normalization=(mean, std)``: the per-channel
    normalisation your transform applies (read from a ``transforms.Normalize`` when there is one); only
    ``boundary_shrink`` needs it, for its attack step in pixel units. ``threads="auto"`` uses one torch thread on
    machines with at most 4 cores, as the command line does.

    The original is measured first and refused (:class:`duck.DuckInputError`) when its accuracy is below
    ``min_acc_factor / num_classes`` or, with ``expect_acc``, off by more than ``expect_acc_tol`` from it, and when its first
    BatchNorm layer shows that the data are prepared differently from its training data (another
    normalisation, scale or channels; ``input_check=False`` skips that). The unlearned model is refused the same
    way when its retained accuracy falls below ``min_acc_factor`` over the number of classes it keeps, and below
    the original's (a collapsed model). Returns an
    :class:`~duck.unlearn.UnlearnResult`: ``.model`` (the unlearned copy, of the input's own type),
    ``.metrics`` (the ``metrics.json`` record: ``acc``, ``aus``, ``time_s``, ``reached_target``, ...) and
    ``.state_dict()`` (the input model's own key names)."""
    from duck.pipeline.config import Trust
    from duck.pipeline.job import Job, method_settings, resolve_accelerator
    from duck.pipeline.stages import check_inputs, check_original, evaluate, unlearn_model
    from duck.schema import Flag, plain
    from duck.training import Recipe
    from duck.unlearn.registry import resolve_method_cfg

    setup = _user_setup(model, train, test, forget_classes, forget_ids, forget_fraction, head=head, seed=seed,
                        threads=threads, normalization=normalization)
    data, scenario, classifier = setup.data, setup.scenario, setup.classifier
    if data.test is None and scenario.forget_target_rule == "test_accuracy":
        raise DuckInputError(f"{'forget_fraction' if scenario.kind == 'homogeneous_removal' else 'forget_ids'}= needs "
                             "test=: the forget set should end as accurate as unseen data, the original's test accuracy")
    cfg = _presets(method, device, hparams, recipe)
    torch_device = resolve_accelerator(str(cfg["trainer"]["accelerator"]), device)
    name, method_cfg = method_settings(cfg)
    hp = resolve_method_cfg(method_cfg, data.name, scenario.kind, name)
    trust = Trust.parse({"min_acc_factor": min_acc_factor, "expect_acc": expect_acc, "expect_acc_tol": expect_acc_tol})
    job = Job(command="unlearn", data=data, scenario=scenario, model_name=classifier.arch,
              model_factory=setup.factory, device=torch_device, trainer_cfg=cfg["trainer"],
              recipe=Recipe.from_cfg(cfg["recipe"]) if recipe else None, method=name, hparams=hp, trust=trust,
              input_check=Flag()(input_check, "input_check"), interface="python", seed=setup.seed,
              progress=bool(progress),
              config={"method": {"name": name, **plain(hp)}, "trainer": cfg["trainer"], "recipe": cfg["recipe"],
                      "seed": setup.seed, **plain(trust)})
    classifier.to(torch_device)
    stats = check_inputs(job, classifier) or {}
    original_acc = evaluate(job, classifier)
    check_original(job, original_acc)
    metrics, result = unlearn_model(job, classifier, original_acc, earlier=[stats["warning"]] if "warning" in stats else [])
    unlearned = result.model
    return UnlearnResult(model=unlearned.net if setup.user_module else unlearned, time_s=result.time_s,
                         epochs=result.epochs, reached_target=result.reached_target, history=result.history,
                         info=result.info, metrics=metrics, classifier=unlearned)


def audit(model: nn.Module, train: Any, test: Any, *, forget_classes: Sequence[int | str] | int | str | None = None,
          forget_ids: Sequence[int] | np.ndarray | torch.Tensor | str | None = None,
          forget_fraction: float | None = None, recipe: str | None = None, original: nn.Module | None = None,
          retrained: nn.Module | None = None, head: str | None = None, seed: int = 0, device: str = "auto",
          threads: int | str | None = "auto", progress: bool = False, cache_dir: str | None = None,
          normalization: Any = None, **attack: Any) -> dict[str, Any]:
    """LiRA (+ SVM MIA) membership-inference audit of ``model`` for a forget set, with a shadow bank of the
    model's architecture trained once and cached (the ``duck-audit`` job, without files).

    ``train`` / ``test`` and the ``forget_*`` keywords as in :func:`unlearn` (``test`` is required: its samples
    are the non-members). ``recipe``: the packaged recipe the shadows are trained with (``"digits"``,
    ``"cifar10"``, ...; it should be the one the audited model was trained with) — required. ``original`` /
    ``retrained``: reference models audited with the same bank. ``attack`` keywords set ``attack.*`` options
    (``n_shadow=64``, ``variant="online"``, ...). ``cache_dir``: where the bank is kept (default
    ``$DUCK_CACHE_DIR`` or ``~/.cache/duck-unlearn``). Returns the audited model's ``audit.json`` record (the
    LiRA result with its verdict, the SVM MIA, the references' headline numbers)."""
    from attacks.audit import AuditSettings, audit_models, check_audit_data
    from duck.pipeline.config import conf_dir, preset
    from duck.pipeline.job import resolve_accelerator
    from duck.pipeline.references import default_cache_dir
    from duck.training import Recipe

    if test is None:
        raise DuckInputError("duck.audit needs test=: its samples are the non-members the forget samples are "
                             "compared with")
    if not isinstance(recipe, str) or not (conf_dir() / "recipe" / f"{recipe}.yaml").is_file():
        raise DuckInputError(f"recipe={recipe!r}: name the packaged recipe the shadow models are trained with (the "
                             "one the audited model was trained with): "
                             + ", ".join(sorted(p.stem for p in (conf_dir() / "recipe").glob("*.yaml"))))
    if device not in DEVICES:
        raise DuckInputError(f"device={device!r}; choose one of {', '.join(DEVICES)}")
    setup = _user_setup(model, train, test, forget_classes, forget_ids, forget_fraction, head=head, seed=seed,
                        threads=threads, normalization=normalization)
    settings = AuditSettings.from_cfg(attack)  # its defaults are conf/attack/lira.yaml's (a test keeps them equal)
    if settings.forgetting["enabled"]:
        raise DuckInputError("forgetting= reruns a method: use duck.unlearn, or duck-run / duck-unlearn audit=true")
    check_audit_data(settings, len(setup.data.test), setup.scenario)
    models = {"unlearned": setup.classifier}
    for name, ref in (("original", original), ("retrained", retrained)):
        if ref is not None:
            wrapped = _user_setup(ref, train, test, forget_classes, forget_ids, forget_fraction, head=head,
                                  seed=seed, threads=threads, normalization=normalization).classifier
            models[name] = wrapped
    trainer_cfg = preset("trainer", DEVICES[device])
    audits = audit_models(settings, setup.data, setup.scenario, models, recipe=Recipe.from_cfg(preset("recipe", recipe)),
                          model_factory=setup.factory, augment=setup.data.augment,
                          cache_dir=cache_dir or str(default_cache_dir()),
                          device=resolve_accelerator(str(trainer_cfg["accelerator"]), device), seed=setup.seed,
                          trainer_cfg=trainer_cfg, progress=bool(progress))
    return audits["unlearned"]
