"""Fine-tuning (Golatkar et al. 2020, as run in seeds/003 §IV-A, Tables VII/VIII): train the original on the
retain set only, with a high learning rate, for a fixed number of epochs (30 of a 200-epoch original in the
paper, i.e. 15 % of the original's training), so that the forget set is overwritten by catastrophic forgetting.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.unlearn.registry import register_unlearner


@register_unlearner("finetune")
class FineTune(BaselineUnlearner):
    """Cross-entropy on retain batches; SGD + ``MultiStepLR(milestones)``; ``epochs`` fixed."""

    def run(self) -> dict[str, Any]:
        epochs = self.epochs()
        self.fit_phase("finetune", self.retain_loader(int(self.hp["batch_size"]), drop_last=True), epochs)
        return {"epochs": float(epochs), "reached_target": None}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = F.cross_entropy(self.model(self.augment(x)), y)
        self.log_loss(loss, len(y))
        return loss
