"""NegGrad+ (Kurmanji et al. 2023, "Towards Unbounded Machine Unlearning", the SCRUB paper; ALGORITHMS.md §3
"Newer baselines"): fine-tune on retain and forget batches together with

    L = β·CE(f(x_r), y_r) − (1 − β)·CE(f(x_f), y_f),

one forget batch paired with every retain batch (the forget loader cycled), one epoch = one pass over the
retain set, a fixed number of epochs, as the authors' ``train_negrad`` (meghdadk/SCRUB,
``thirdparty/repdistiller/helper/loops.py``: ``zip(train_loader, cycle(delete_loader))``, separate forward
passes, ``alpha*r_loss - (1-alpha)*del_loss``). β is their ``alpha``; the defaults are in
``conf/method/neggrad_plus.yaml`` with their sources. ``stop_at_target=true`` adds DUCK's stopping rule
(the authors' code has none); either way the result says whether the forget target was reached.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner, StopAtTargetParams
from duck.data.loaders import cycle
from duck.schema import OneOf, Real, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, Milestones, Preset
from duck.unlearn.registry import register_unlearner


def neggrad_plus_loss(logits_r: torch.Tensor, y_r: torch.Tensor, logits_f: torch.Tensor, y_f: torch.Tensor,
                      beta: float) -> torch.Tensor:
    """``β·CE(retain) − (1 − β)·CE(forget)`` (Kurmanji et al. 2023, NegGrad+)."""
    return beta * F.cross_entropy(logits_r, y_r) - (1.0 - beta) * F.cross_entropy(logits_f, y_f)


@settings
class NegGradPlusParams(StopAtTargetParams):
    """``method=neggrad_plus``'s hyperparameters; conf/method/neggrad_plus.yaml is their preset."""

    method_name: ClassVar[str] = "neggrad_plus"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.0, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    beta: float | None = option(None, Preset(Real(0.0, False, 1.0)),
                                "weight of the retain loss (the authors' alpha); 1 - beta weights the forget loss")
    batch_size: int | None = option(None, Preset(COUNT), "retain batch (one epoch = one pass over the retain set)")
    forget_batch_size: int | None = option(None, Preset(COUNT), "forget batch size")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    milestones: tuple[int, ...] = option((), Milestones(), "MultiStepLR milestones (epochs); [] for a constant rate")
    lr_gamma: float = option(0.1, POSITIVE, "MultiStepLR factor at each milestone")


@register_unlearner("neggrad_plus")
class NegGradPlus(BaselineUnlearner):
    """Retain batches each paired with the next forget batch; ``β`` weights the retain loss."""

    params = NegGradPlusParams

    def run(self) -> dict[str, Any]:
        epochs = self.epochs()
        self.beta = float(self.hp["beta"])
        self._forget_batches: Iterator[Any] | None = None
        stop = self.stopping_rule() if self.hp.get("stop_at_target") else None
        self.fit_phase("neggrad_plus", self.retain_loader(int(self.hp["batch_size"]), drop_last=True), epochs,
                       [stop] if stop is not None else [])
        if stop is not None:
            return {"epochs": stop.epochs_done, "reached_target": stop.reached}
        a_f = self.forget_accuracy()
        return {"epochs": float(epochs), "reached_target": a_f <= self.forget_target(float(self.hp["tolerance"])),
                "final_forget_acc": a_f}

    def next_forget_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._forget_batches is None:  # the authors' cycle(delete_loader): reshuffled at every pass
            self._forget_batches = cycle(self.forget_loader(int(self.hp["forget_batch_size"]), seed_offset=31))
        x, y, _ = next(self._forget_batches)
        return x.to(self.device), y.to(self.device)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x_r, y_r, _ = batch
        x_f, y_f = self.next_forget_batch()
        loss = neggrad_plus_loss(self.model(self.augment(x_r)), y_r, self.model(self.augment(x_f)), y_f, self.beta)
        self.log_loss(loss, len(y_r))
        return loss
