"""The ``Unlearner`` base: a LightningModule holding the original model, the retain/forget data and the
scenario, plus the pieces every method shares (loaders, the forget-accuracy target and stopping rule,
a cycling retain iterator for manual optimisation, timed phases).

A method subclasses :class:`Unlearner`, is registered with ``@register_unlearner("name")``, implements
``training_step``/``configure_optimizers`` for its phase(s) and ``run()``, which calls :meth:`fit_phase`
once per phase. Stopping rules are Lightning callbacks (:class:`ForgetAccuracyStop`). ``unlearn()`` times
``run()`` (the unlearning wall time reported as ``time_s``) and returns an :class:`UnlearnResult`.
Unlearning runs in the job's process on one device (``devices=1``), except methods marked ``data_parallel``
(DUCK), whose phases run on DDP workers started from that process when ``trainer.devices`` > 1.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, Dataset

from duck.data.augment import apply_augment, check_augment
from duck.data.loaders import cycle, make_loader
from duck.data.scenarios import SCENARIOS, Scenario
from duck.errors import DuckInputError
from duck.metrics import forget_target
from duck.models import Classifier
from duck.training import (
    NonFiniteGuard,
    Recipe,
    build_trainer,
    check_data_parallel,
    check_finite_weights,
    fit,
    single_device,
    stage_logger,
    worker_trainer_settings,
)
from duck.unlearn.config import MethodSettings
from duck.utils import JOB_SEED_MAX, check_number, check_seed, warn_line


@dataclass
class ModelBank:
    """A bank of reference models trained once and cached (ALGORITHMS.md §11): ``load(k)`` gives model k;
    ``one_off_s`` is what training the bank cost (once, shared by every deletion request); ``keep[k, i]`` (shadow
    banks) whether training sample i was in model k's training data."""

    load: Callable[[int], Classifier]
    one_off_s: float
    keep: np.ndarray | None = None
    #: (subset banks) every example's logits under the models that left it out, packed by example: rows
    #: ``out_offsets[i]:out_offsets[i + 1]`` of ``out_logits`` are example i's (:mod:`attacks.subset_bank`)
    out_logits: np.ndarray | None = None
    out_offsets: np.ndarray | None = None


@dataclass
class ReferenceModels:
    """Models besides the original that a method may learn from (ALGORITHMS.md §11), trained and cached by the
    pipeline on demand: ``oracle(seed, pool)`` a bank of ``pool`` models retrained on the retain set (the forget
    set never seen) with bank seed ``seed``; ``shadows(n, seed)`` the LiRA shadow bank of ``n`` models trained on
    random halves of the training set; ``subsets(n, keep_fraction, seed)`` a bank of ``n`` models, each trained on
    a random ``keep_fraction`` of the training set (:mod:`attacks.subset_bank`)."""

    oracle: Callable[[int, int], ModelBank] | None = None
    shadows: Callable[[int, int], ModelBank] | None = None
    subsets: Callable[[int, float, int], ModelBank] | None = None


@dataclass
class UnlearnData:
    """Everything an unlearner may look at (the test split is only for reporting, never for unlearning)."""

    train: Dataset  # the full training split; samples are addressed by their stable index
    scenario: Scenario
    num_classes: int
    dataset_name: str
    original_acc: Mapping[str, float]  # the original model's accuracies ("test", "test_retain")
    augment: Sequence[str] = ()
    recipe: Recipe | None = None  # the original's training recipe (retrain oracle, epoch fractions)
    model_factory: Callable[[], Classifier] | None = None  # a freshly initialised model of the same architecture
    #: reference models for the methods that learn from them (``Unlearner.needs``), supplied by the pipeline
    references: ReferenceModels | None = None

    @property
    def retain_idx(self) -> np.ndarray:
        return self.scenario.retain_idx

    @property
    def forget_idx(self) -> np.ndarray:
        return self.scenario.forget_idx


def check_unlearn_inputs(model: Any, data: Any, cfg: Any, trainer_cfg: Any, seed: Any) -> None:
    """What every method needs from its inputs, checked before any work (each a DuckInputError that names
    the value): a :class:`Classifier` whose class count is ``data.num_classes``, with trainable float32
    parameters (the data are float32); forget and retain ids that are non-empty, disjoint and together every
    index of ``data.train`` (class removal: exactly the forget classes' samples); ``original_acc`` holding a
    ``test`` accuracy in [0, 1] (the stopping target of homogeneous/custom removal), every value a fraction;
    valid augmentation names; mappings for ``cfg``/``trainer_cfg``; a seed Lightning accepts."""
    if not isinstance(model, Classifier):
        raise DuckInputError(f"model must be a duck.models.Classifier (build it with duck.models.create_model), "
                             f"got {type(model).__name__}")
    if not isinstance(data, UnlearnData):
        raise DuckInputError(f"data must be a duck.unlearn.UnlearnData, got {type(data).__name__}")
    for name, value in (("cfg", cfg), ("trainer_cfg", trainer_cfg)):
        if value is not None and not isinstance(value, Mapping):
            raise DuckInputError(f"{name} must be a mapping of settings (or None), got {type(value).__name__}")
    seed = check_seed(seed, "seed")
    if seed > JOB_SEED_MAX:
        raise DuckInputError(f"seed={seed} must be at most {JOB_SEED_MAX} (Lightning seeds numpy with it)")
    if model.num_classes != data.num_classes:
        raise DuckInputError(f"the model has {model.num_classes} classes but data.num_classes={data.num_classes}; "
                             "pass the data set's class count and a model built for it")
    params = list(model.parameters())
    if not any(p.requires_grad for p in params):
        raise DuckInputError("every model parameter has requires_grad=False: nothing can be unlearned; unfreeze "
                             "them (model.requires_grad_(True))")
    wrong = sorted({str(p.dtype).removeprefix("torch.") for p in params if p.is_floating_point()} - {"float32"})
    if wrong:
        raise DuckInputError(f"the model's parameters are {', '.join(wrong)}; the data and the methods use float32 "
                             "(mixed precision comes from trainer.precision): convert it with model.float()")
    check_augment(data.augment, "UnlearnData.augment")
    sc, n = data.scenario, len(data.train)
    forget, retain = np.asarray(sc.forget_idx), np.asarray(sc.retain_idx)
    if forget.size == 0 or retain.size == 0:
        raise DuckInputError(f"the scenario has {forget.size} forget and {retain.size} retain samples; both must be "
                             "non-empty (build it with duck.data.scenarios.build_scenario)")
    ids = np.concatenate([forget, retain])
    if ids.size != n or ids.min() < 0 or ids.max() >= n or np.unique(ids).size != n:
        raise DuckInputError(f"the scenario's forget ({forget.size}) and retain ({retain.size}) ids must split the "
                             f"{n} training samples (disjoint, together 0..{n - 1}); build the scenario from these "
                             "training labels")
    labels = getattr(data.train, "labels", None)
    if sc.forget_classes and labels is not None:
        labels = np.asarray(labels)
        if not np.isin(labels[forget], sc.forget_classes).all() or np.isin(labels[retain], sc.forget_classes).any():
            raise DuckInputError(f"the scenario's forget ids are not the samples of classes {sc.forget_classes} in "
                                 "data.train; build the scenario from these training labels")
    acc = data.original_acc
    needs_test = sc.forget_target_rule == "test_accuracy"  # the stopping target is the original's test accuracy
    if not isinstance(acc, Mapping) or (needs_test and "test" not in acc):
        raise DuckInputError(f"original_acc must map split names to the original model's accuracies and hold "
                             f"'test' (the stopping target of {sc.kind}), got {acc!r}; compute it with "
                             "duck.metrics.split_accuracies on data with a test split")
    for key, value in acc.items():
        check_number(value, f"original_acc[{key!r}]", 0.0, False, 1.0)  # fractions, not percentages


#: the trainer metric that carries a data-parallel phase's state from DDP worker 0 back to the job's process
WORKER_STATE = "_unlearner_worker_state"


@dataclass
class UnlearnResult:
    """What unlearning returns: the unlearned ``model``, the unlearning wall time and epochs, whether the
    forget target was reached, the method's history and extra ``info``. From :func:`duck.unlearn` also the
    ``metrics.json`` record (``metrics``) and the wrapped model (``classifier``); ``model`` is then of the
    caller's own type and :meth:`state_dict` has the caller's key names."""

    model: Any  # a Classifier, or the caller's own nn.Module (duck.unlearn with a plain module)
    time_s: float
    epochs: float
    reached_target: bool | None
    history: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    classifier: Classifier | None = None

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The unlearned weights under the input model's own key names (``model.load_state_dict(...)``)."""
        if isinstance(self.model, Classifier) and self.classifier is None:
            return self.model.plain_state_dict()
        return self.model.state_dict()


class ForgetAccuracyStop(Callback):
    """Stop a phase as soon as the forget-set accuracy ``A_f`` (eval mode) is ``<= target``
    (seeds/003 §III "forget regimes"; ALGORITHMS.md §1.4). ``every="epoch"`` checks after each epoch,
    ``every="batch"`` after each forget batch. ``after_epochs`` (``min_epochs`` of NegGrad+ and SalUn): no check
    before that many epochs are done, so a method first runs its own recipe and the rule only extends it."""

    def __init__(self, unlearner: Unlearner, target: float, every: str = "epoch", after_epochs: int = 0) -> None:
        if every not in ("epoch", "batch"):
            raise DuckInputError(f"stop_check={every!r}: use 'epoch' or 'batch'")
        self.unlearner, self.target, self.every = unlearner, float(target), every
        self.after_epochs = int(after_epochs)
        self.reached = False
        self.epochs_done = 0.0

    def _check(self, trainer: L.Trainer, epoch_progress: float) -> None:
        if epoch_progress < self.after_epochs - 1e-9:
            return
        a_f = self.unlearner.forget_accuracy()
        self.unlearner.history.append({"phase": self.unlearner.phase, "epoch": round(epoch_progress, 4),
                                       "forget_acc": a_f})
        # DDP: the workers hold the same weights but BatchNorm statistics of their own last half batches, so their
        # eval-mode A_f can differ near the target; rank 0's model is the one kept, so its measurement decides
        # for all (with "any worker" the phase once stopped at A_f 0.0146 > 0.01 on rank 0)
        if trainer.strategy.broadcast(bool(a_f <= self.target), src=0):
            self.reached = True
            self.epochs_done = epoch_progress
            trainer.should_stop = True

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.every == "batch" and not self.reached:
            n = max(1, int(trainer.num_training_batches))
            self._check(trainer, trainer.current_epoch + (batch_idx + 1) / n)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: Any) -> None:
        if self.every == "epoch" and not self.reached:
            self._check(trainer, float(trainer.current_epoch + 1))
        if not self.reached:
            self.epochs_done = float(trainer.current_epoch + 1)


class Unlearner(L.LightningModule):
    """Base class of every unlearning method.

    Args:
        model: the original model (modified in place and returned in the result).
        data: retain/forget data and scenario (:class:`UnlearnData`).
        cfg: the method config (``conf/method/NAME.yaml``; ``presets`` resolved for the data set/scenario).
        seed: seeds shuffling and any randomness of the method.
        trainer_cfg: a ``conf/trainer`` mapping (accelerator, precision...); ``devices`` is forced to 1.
        progress: show Lightning progress bars.
    """

    method_name: ClassVar[str] = "?"
    #: ``targeted`` names a class to push the forget samples to, which only DUCK's target centroids use: other
    #: methods would ignore it (the same forget ids run as ``custom``)
    supported_scenarios: ClassVar[tuple[str, ...]] = tuple(s for s in SCENARIOS if s != "targeted")
    #: the method's hyperparameters (a :class:`~duck.unlearn.config.MethodSettings` subclass declaring each with
    #: its rule; ``conf/method/NAME.yaml`` is their preset)
    params: ClassVar[type[MethodSettings]] = MethodSettings
    #: reference models the method learns from (``oracle``: retrained models; ``shadows``: the shadow bank;
    #: ``subsets``: a random-subset bank), which :attr:`UnlearnData.references` must supply
    needs: ClassVar[tuple[str, ...]] = ()

    #: True for methods that step their optimiser themselves (several losses or steps per batch: DUCK,
    #: SCRUB); Lightning cannot apply trainer.gradient_clip_val / accumulate_grad_batches to those
    manual_optimization: ClassVar[bool] = False
    #: True for methods that run data-parallel under DDP (``trainer.devices`` > 1): every phase's batches are
    #: split over the workers, which start from the state this process prepared (DUCK: the centroids and
    #: targets, computed once here and sent to every worker) and send the weights and the stopping state back.
    #: The others run on one device and say so.
    data_parallel: ClassVar[bool] = False

    @property
    def automatic_optimization(self) -> bool:
        return not self.manual_optimization

    @classmethod
    def check_trainer_cfg(cls, trainer_cfg: Mapping[str, Any] | None) -> None:
        """Refuse, before any work, ``trainer.*`` settings Lightning rejects for this method (a traceback at
        the unlearning stage, after the original had been trained)."""
        if not cls.manual_optimization or not isinstance(trainer_cfg, Mapping):
            return
        for key, neutral in (("gradient_clip_val", (None, 0, 0.0)), ("accumulate_grad_batches", (None, 1))):
            value = trainer_cfg.get(key)
            if value not in neutral:
                raise DuckInputError(f"trainer.{key}={value!r} cannot be used with method {cls.method_name!r}: it "
                                     "steps its optimiser itself (manual optimisation), which Lightning does not "
                                     f"clip or accumulate; remove trainer.{key}")

    def __init__(self, model: Classifier, data: UnlearnData, cfg: Mapping[str, Any] | None = None, *,
                 seed: int = 0, trainer_cfg: Mapping[str, Any] | None = None, progress: bool = False) -> None:
        super().__init__()
        check_unlearn_inputs(model, data, cfg, trainer_cfg, seed)
        self.check_trainer_cfg(trainer_cfg)
        if data.scenario.kind not in self.supported_scenarios:
            why = ("scenario.target_class is used only by DUCK's target centroids; run the same forget ids with "
                   "scenario=custom" if data.scenario.kind == "targeted" else "the DUCK paper excludes it there too")
            raise DuckInputError(
                f"method {self.method_name!r} does not support scenario {data.scenario.kind!r} "
                f"(it supports {', '.join(self.supported_scenarios)}); {why}"
            )
        missing = [n for n in self.needs if getattr(data.references, n, None) is None]
        if missing:
            raise DuckInputError(f"method {self.method_name!r} learns from reference models ({', '.join(missing)}: "
                                 "models retrained without the forget set / the shadow bank) that only the "
                                 "pipeline supplies: run it with duck-unlearn / duck-run / duck.unlearn")
        self.model = model
        self.data = data
        self.hp = self.params.resolve(cfg, data.dataset_name, data.scenario.kind)
        self.seed = int(seed)
        given = dict(trainer_cfg or {})
        self.world = 1
        if self.data_parallel:
            self.world = check_data_parallel(given, self.parallel_batch_size())
        dropped = [f"trainer.{k}={v!r}" for k, v in given.items()
                   if (k == "devices" and v != 1) or (k in ("strategy", "num_nodes") and v not in (None, "auto", 1))]
        if dropped and self.world == 1:  # said, not silently replaced
            warn_line(f"{', '.join(dropped)} not used: method {self.method_name!r} runs on one device (DUCK runs "
                      "data-parallel; duck-train and the oracle use the multi-device settings)")
        self.trainer_cfg = given if self.world > 1 else single_device(given)
        self.progress = progress
        self.phase = "init"
        self.history: list[dict[str, Any]] = []
        self.phase_log: dict[str, dict[str, int]] = {}  # phase -> epochs run and optimiser steps taken
        self._retain_iter: Iterator[Any] | None = None
        self._retain_stream_batch: int | None = None

    # ----------------------------------------------------------------- data
    def parallel_batch_size(self) -> int | None:
        """The batch size that must split over the DDP workers (data-parallel methods: their ``batch_size``)."""
        return int(self.hp["batch_size"]) if "batch_size" in self.hp else None

    def retain_loader(self, batch_size: int, *, shuffle: bool = True, seed_offset: int = 0,
                      drop_last: bool = False) -> DataLoader:
        """Retain batches; under DDP each of the ``world`` workers takes ``batch_size / world`` of every batch
        (Lightning gives each a disjoint part of the epoch)."""
        return make_loader(self.data.train, batch_size // self.world, shuffle=shuffle, seed=self.seed + seed_offset,
                           indices=self.data.retain_idx, drop_last=drop_last and len(self.data.retain_idx) > batch_size)

    def forget_loader(self, batch_size: int, *, shuffle: bool = True, seed_offset: int = 0,
                      per_worker: bool = True) -> DataLoader:
        """Forget batches (``per_worker=False``: whole batches even under DDP, for a batch every worker
        slices itself)."""
        return make_loader(self.data.train, batch_size // (self.world if per_worker else 1), shuffle=shuffle,
                           seed=self.seed + 7919 + seed_offset, indices=self.data.forget_idx)

    def start_retain_stream(self, batch_size: int) -> None:
        """An endless, reshuffling stream of retain batches for steps that pair them with forget batches (made
        where it is first drawn from: under DDP in each worker, with a seed of its own)."""
        self._retain_stream_batch = int(batch_size)
        self._retain_iter = None

    def next_retain_batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._retain_iter is None:
            batch = self._retain_stream_batch
            if batch is None:
                raise RuntimeError("call start_retain_stream() before next_retain_batch()")
            rank = self.trainer.global_rank if self.world > 1 else 0  # each worker its own retain samples
            self._retain_iter = cycle(self.retain_loader(batch, seed_offset=104729 + 7727 * rank, drop_last=True))
        x, y, i = next(self._retain_iter)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True), i

    def __getstate__(self) -> dict[str, Any]:
        """What a DDP worker receives: no live iterator (the worker makes its own) and no model factory (a
        closure; data-parallel methods do not build models)."""
        state = dict(super().__getstate__())
        state["_retain_iter"] = None
        if self.data.model_factory is not None or self.data.references is not None:
            state["data"] = dataclasses.replace(self.data, model_factory=None, references=None)
        return state

    def augment(self, x: torch.Tensor) -> torch.Tensor:
        return apply_augment(x, self.data.augment) if self.data.augment else x

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def forget_accuracy(self, batch_size: int = 1024) -> float:
        """``A_f``: accuracy on the forget set (training samples), eval mode (BatchNorm running stats)."""
        was_training = self.model.training
        self.model.eval()
        correct = total = 0
        for x, y, _ in make_loader(self.data.train, batch_size, indices=self.data.forget_idx):
            pred = self.model(x.to(self.device)).argmax(1).cpu()
            correct += int((pred == y).sum())
            total += len(y)
        self.model.train(was_training)
        return correct / max(1, total)

    def forget_target(self, tolerance: float = 0.01) -> float:
        """Target of the stopping rule: ``0 + tolerance`` (class removal, targeted) or the original model's
        test accuracy (homogeneous removal, custom ids) — seeds/003 §III."""
        return forget_target(self.data.scenario, self.data.original_acc, tolerance)

    # --------------------------------------------------------------- phases
    def fit_phase(self, phase: str, loader: DataLoader, max_epochs: int, callbacks: Sequence[Callback] = (),
                  **trainer_overrides: Any) -> L.Trainer:
        """Run one phase (``trainer.fit``) over ``loader`` for at most ``max_epochs`` epochs."""
        self.phase = phase
        self.model.train()  # BatchNorm in train mode while unlearning (Lightning keeps submodules' modes)
        guard = NonFiniteGuard(f"unlearning with {self.method_name}", self.divergence_setting())
        cfg, extra = worker_trainer_settings(self.trainer_cfg, self.world)
        trainer = build_trainer(cfg, max_epochs=int(max_epochs), enable_progress_bar=self.progress,
                                callbacks=[*callbacks, guard, *extra], num_sanity_val_steps=0, **trainer_overrides)
        fit(trainer, self, loader, self.world)
        if self.world > 1:  # the workers' state of the phase (history, epochs, steps, stopping rule)
            self._restore_worker_state(trainer.callback_metrics.pop(WORKER_STATE), callbacks)
        else:
            self.phase_log[phase] = {"epochs": int(trainer.current_epoch), "steps": int(trainer.global_step)}
        return trainer

    def on_train_end(self) -> None:
        """In DDP worker 0: the phase's state for this process (sent back with the trainer's metrics)."""
        if self.world > 1 and self.trainer.global_rank == 0:
            stops = [{"reached": cb.reached, "epochs_done": cb.epochs_done} for cb in self.trainer.callbacks
                     if isinstance(cb, ForgetAccuracyStop)]
            self.trainer.callback_metrics[WORKER_STATE] = {  # type: ignore[index]
                "history": list(self.history), "stops": stops,
                "log": {"epochs": int(self.trainer.current_epoch), "steps": int(self.trainer.global_step)}}

    def _restore_worker_state(self, state: dict[str, Any], callbacks: Sequence[Callback]) -> None:
        self.history = list(state["history"])
        self.phase_log[self.phase] = dict(state["log"])
        for cb, st in zip([c for c in callbacks if isinstance(c, ForgetAccuracyStop)], state["stops"], strict=True):
            cb.reached, cb.epochs_done = bool(st["reached"]), float(st["epochs_done"])

    def run(self) -> dict[str, Any]:
        """The method's phases; returns ``{"epochs": float, "reached_target": bool | None, ...}``."""
        raise NotImplementedError

    def prepare(self) -> float:
        """Fetch what the method learns from besides the original (:attr:`needs`: reference banks, trained once
        and cached); returns their one-off training cost in seconds. Not part of the timed unlearning."""
        return 0.0

    @classmethod
    def reference_requests(cls, hp: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
        """The reference banks a run with parameters ``hp`` asks for: ``{need: the arguments of
        ReferenceModels.<need>}``, one entry per name in :attr:`needs`. :meth:`reference` fetches them; the
        pipeline builds the same banks ahead of the runs when they are trained as array jobs
        (``attack.num_shards``, :func:`duck.pipeline.references.reference_banks`)."""
        return {}

    @classmethod
    def reference_models_used(cls, hp: Mapping[str, Any], seeds: Sequence[int]) -> dict[str, list[int]]:
        """``{need: the models of that bank the runs with these seeds load}`` for a bank whose models are used
        one at a time (a need absent here: the runs use the whole bank); array tasks train only those."""
        return {}

    def reference(self, need: str) -> ModelBank:
        """The bank :meth:`reference_requests` names for ``need``, from :attr:`UnlearnData.references`."""
        return getattr(self.data.references, need)(*self.reference_requests(self.hp)[need])

    def unlearn(self) -> UnlearnResult:
        """Run the method and time it (unlearning wall time only: no evaluation, no I/O; the reference models'
        one-off cost, :meth:`prepare`, is reported apart as ``info["one_off_s"]``)."""
        L.seed_everything(self.seed, workers=True, verbose=False)
        device = self.trainer_device()
        self.model.to(device)
        one_off = None
        if self.needs:  # the reference models first (their training draws random numbers), then the run's seed
            with stage_logger(None):  # a bank of reference models, not the method's curves
                one_off = self.prepare()
            L.seed_everything(self.seed, workers=True, verbose=False)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        info = self.run() or {}
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        check_finite_weights(self.model, f"unlearning with {self.method_name}", self.divergence_setting())
        self.model.eval()
        info.setdefault("phases", self.phase_log)
        if one_off is not None:
            info["one_off_s"] = float(one_off)
        return UnlearnResult(model=self.model, time_s=seconds, epochs=float(info.pop("epochs", 0.0)),
                             reached_target=info.pop("reached_target", None), history=self.history, info=info)

    def divergence_setting(self) -> str:
        """The setting to lower when this method diverges (named in the error)."""
        lr = [k for k in ("lr", "low_lr", "erm_lr") if self.hp.get(k) is not None]
        return " / ".join(f"method.{k}={self.hp[k]:g}" for k in lr) if lr else "the method's learning rate"

    def trainer_device(self) -> torch.device:
        acc = str(self.trainer_cfg.get("accelerator", "auto"))
        use_cuda = acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available())
        return torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
