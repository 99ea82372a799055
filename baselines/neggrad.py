"""Negative gradient (Golatkar et al. 2020; seeds/003 §IV-A): gradient *ascent* of the cross-entropy on the
forget set, stopped by DUCK's rule as soon as the forget accuracy reaches its target (class removal:
``0 + tolerance``; homogeneous removal: the original's test accuracy), at most ``max_epochs`` epochs
(Tables VII/VIII list no epoch count: "until the same stopping criteria as DUCK").
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, TOLERANCE, MethodSettings, Milestones, Preset
from duck.unlearn.registry import register_unlearner


@settings
class NegGradParams(MethodSettings):
    """``method=neggrad``'s hyperparameters; conf/method/neggrad.yaml is their preset."""

    method_name: ClassVar[str] = "neggrad"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    max_epochs: int | None = option(None, Preset(COUNT), "cap on the \"until target\" loop (the paper gives none)")
    milestones: tuple[int, ...] | None = option(None, Preset(Milestones()),
                                                "MultiStepLR milestones (epochs); [] for a constant rate")
    lr_gamma: float | None = option(None, Preset(POSITIVE), "MultiStepLR factor at each milestone (from the preset)")
    tolerance: float = option(0.01, TOLERANCE, "class removal: stop when A_f <= 0 + tolerance (as DUCK)")
    stop_check: str = option("epoch", OneOf(('epoch', 'batch')),
                             "check A_f after every `epoch` (DUCK's rule) or every forget `batch`")


@register_unlearner("neggrad")
class NegGrad(BaselineUnlearner):
    """``loss = −CE(f(x_f), y_f)`` on forget batches until ``A_f <= target``."""

    params = NegGradParams

    def run(self) -> dict[str, Any]:
        stop = self.stopping_rule()
        self.fit_phase("neggrad", self.forget_loader(int(self.hp["batch_size"])), self.epochs("max_epochs"), [stop])
        return {"epochs": stop.epochs_done, "reached_target": stop.reached}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = -F.cross_entropy(self.model(self.augment(x)), y)
        self.log_loss(loss, len(y))
        return loss
