"""Negative gradient (Golatkar et al. 2020; seeds/003 §IV-A): gradient *ascent* of the cross-entropy on the
forget set, stopped by DUCK's rule as soon as the forget accuracy reaches its target (class removal:
``0 + tolerance``; homogeneous removal: the original's test accuracy), at most ``max_epochs`` epochs
(Tables VII/VIII list no epoch count: "until the same stopping criteria as DUCK").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.unlearn.registry import register_unlearner


@register_unlearner("neggrad")
class NegGrad(BaselineUnlearner):
    """``loss = −CE(f(x_f), y_f)`` on forget batches until ``A_f <= target``."""

    def run(self) -> dict[str, Any]:
        stop = self.stopping_rule()
        self.fit_phase("neggrad", self.forget_loader(int(self.hp["batch_size"])), self.epochs("max_epochs"), [stop])
        return {"epochs": stop.epochs_done, "reached_target": stop.reached}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = -F.cross_entropy(self.model(self.augment(x)), y)
        self.log_loss(loss, len(y))
        return loss
