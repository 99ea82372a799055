"""The ``Unlearner`` base: a LightningModule holding the original model, the retain/forget data and the
scenario, plus the pieces every method shares (loaders, the forget-accuracy target and stopping rule,
a cycling retain iterator for manual optimisation, timed phases).

A method subclasses :class:`Unlearner`, is registered with ``@register_unlearner("name")``, implements
``training_step``/``configure_optimizers`` for its phase(s) and ``run()``, which calls :meth:`fit_phase`
once per phase. Stopping rules are Lightning callbacks (:class:`ForgetAccuracyStop`). ``unlearn()`` times
``run()`` (the unlearning wall time reported as ``time_s``) and returns an :class:`UnlearnResult`.
Unlearning runs in one process on one device (``devices=1``); multi-GPU DDP is for training originals,
oracles and shadow banks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback
from torch.utils.data import DataLoader, Dataset

from duck.data.augment import apply_augment
from duck.data.loaders import cycle, make_loader
from duck.data.scenarios import SCENARIOS, Scenario
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.training import Recipe, build_trainer
from duck.unlearn.config import resolve_method_cfg
from duck.utils import warn_line


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

    @property
    def retain_idx(self) -> np.ndarray:
        return self.scenario.retain_idx

    @property
    def forget_idx(self) -> np.ndarray:
        return self.scenario.forget_idx


@dataclass
class UnlearnResult:
    model: Classifier
    time_s: float
    epochs: float
    reached_target: bool | None
    history: list[dict[str, Any]] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)


class ForgetAccuracyStop(Callback):
    """Stop a phase as soon as the forget-set accuracy ``A_f`` (eval mode) is ``<= target``
    (seeds/003 §III "forget regimes"; ALGORITHMS.md §1.4). ``every="epoch"`` checks after each epoch,
    ``every="batch"`` after each forget batch."""

    def __init__(self, unlearner: Unlearner, target: float, every: str = "epoch") -> None:
        if every not in ("epoch", "batch"):
            raise DuckInputError(f"stop_check={every!r}: use 'epoch' or 'batch'")
        self.unlearner, self.target, self.every = unlearner, float(target), every
        self.reached = False
        self.epochs_done = 0.0

    def _check(self, trainer: L.Trainer, epoch_progress: float) -> None:
        a_f = self.unlearner.forget_accuracy()
        self.unlearner.history.append({"phase": self.unlearner.phase, "epoch": round(epoch_progress, 4),
                                       "forget_acc": a_f})
        if a_f <= self.target:
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

    def __init__(self, model: Classifier, data: UnlearnData, cfg: Mapping[str, Any] | None = None, *,
                 seed: int = 0, trainer_cfg: Mapping[str, Any] | None = None, progress: bool = False) -> None:
        super().__init__()
        if data.scenario.kind not in self.supported_scenarios:
            why = ("scenario.target_class is used only by DUCK's target centroids; run the same forget ids with "
                   "scenario=custom" if data.scenario.kind == "targeted" else "the DUCK paper excludes it there too")
            raise DuckInputError(
                f"method {self.method_name!r} does not support scenario {data.scenario.kind!r} "
                f"(it supports {', '.join(self.supported_scenarios)}); {why}"
            )
        self.model = model
        self.data = data
        self.hp = resolve_method_cfg(cfg or {}, data.dataset_name, data.scenario.kind)
        self.seed = int(seed)
        given = dict(trainer_cfg or {})
        dropped = [f"trainer.{k}={v!r}" for k, v in given.items()
                   if (k == "devices" and v != 1) or (k in ("strategy", "num_nodes") and v not in (None, "auto", 1))]
        if dropped:  # said, not silently replaced
            warn_line(f"{', '.join(dropped)} not used: unlearning methods run on one device "
                      "(duck-train and the oracle use the multi-device settings)")
        self.trainer_cfg = {**given, "devices": 1}
        self.trainer_cfg.pop("strategy", None)
        self.trainer_cfg.pop("num_nodes", None)
        self.progress = progress
        self.phase = "init"
        self.history: list[dict[str, Any]] = []
        self.phase_log: dict[str, dict[str, int]] = {}  # phase -> epochs run and optimiser steps taken
        self._retain_iter: Iterator[Any] | None = None

    # ----------------------------------------------------------------- data
    def retain_loader(self, batch_size: int, *, shuffle: bool = True, seed_offset: int = 0,
                      drop_last: bool = False) -> DataLoader:
        return make_loader(self.data.train, batch_size, shuffle=shuffle, seed=self.seed + seed_offset,
                           indices=self.data.retain_idx, drop_last=drop_last and len(self.data.retain_idx) > batch_size)

    def forget_loader(self, batch_size: int, *, shuffle: bool = True, seed_offset: int = 0) -> DataLoader:
        return make_loader(self.data.train, batch_size, shuffle=shuffle, seed=self.seed + 7919 + seed_offset,
                           indices=self.data.forget_idx)

    def start_retain_stream(self, batch_size: int) -> None:
        """An endless, reshuffling stream of retain batches for steps that pair them with forget batches."""
        self._retain_iter = cycle(self.retain_loader(batch_size, seed_offset=104729, drop_last=True))

    def next_retain_batch(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self._retain_iter is None:
            raise RuntimeError("call start_retain_stream() before next_retain_batch()")
        x, y, i = next(self._retain_iter)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True), i

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
        if self.data.scenario.forget_target_rule == "zero":
            return float(tolerance)
        return float(self.data.original_acc["test"])

    # --------------------------------------------------------------- phases
    def fit_phase(self, phase: str, loader: DataLoader, max_epochs: int, callbacks: Sequence[Callback] = (),
                  **trainer_overrides: Any) -> L.Trainer:
        """Run one phase (``trainer.fit``) over ``loader`` for at most ``max_epochs`` epochs."""
        self.phase = phase
        self.model.train()  # BatchNorm in train mode while unlearning (Lightning keeps submodules' modes)
        trainer = build_trainer(self.trainer_cfg, max_epochs=int(max_epochs), enable_progress_bar=self.progress,
                                callbacks=list(callbacks), num_sanity_val_steps=0, **trainer_overrides)
        trainer.fit(self, loader)
        self.phase_log[phase] = {"epochs": int(trainer.current_epoch), "steps": int(trainer.global_step)}
        return trainer

    def run(self) -> dict[str, Any]:
        """The method's phases; returns ``{"epochs": float, "reached_target": bool | None, ...}``."""
        raise NotImplementedError

    def unlearn(self) -> UnlearnResult:
        """Run the method and time it (unlearning wall time only: no evaluation, no I/O)."""
        L.seed_everything(self.seed, workers=True, verbose=False)
        device = self.trainer_device()
        self.model.to(device)
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        info = self.run() or {}
        if device.type == "cuda":
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        self.model.eval()
        info.setdefault("phases", self.phase_log)
        return UnlearnResult(model=self.model, time_s=seconds, epochs=float(info.pop("epochs", 0.0)),
                             reached_target=info.pop("reached_target", None), history=self.history, info=info)

    def trainer_device(self) -> torch.device:
        acc = str(self.trainer_cfg.get("accelerator", "auto"))
        use_cuda = acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available())
        return torch.device("cuda" if use_cuda and torch.cuda.is_available() else "cpu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)
