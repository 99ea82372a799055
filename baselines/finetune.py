"""Fine-tuning (Golatkar et al. 2020, as run in seeds/003 §IV-A, Tables VII/VIII): train the original on the
retain set only, with a high learning rate, for a fixed number of epochs (30 of a 200-epoch original in the
paper, i.e. 15 % of the original's training), so that the forget set is overwritten by catastrophic forgetting.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Milestones, Preset
from duck.unlearn.registry import register_unlearner


@settings
class FineTuneParams(MethodSettings):
    """``method=finetune``'s hyperparameters; conf/method/finetune.yaml is their preset."""

    method_name: ClassVar[str] = "finetune"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0005, NON_NEGATIVE, "weight decay")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    milestones: tuple[int, ...] | None = option(None, Preset(Milestones()),
                                                "MultiStepLR milestones (epochs); [] for a constant rate")
    lr_gamma: float | None = option(None, Preset(POSITIVE), "MultiStepLR factor at each milestone (from the preset)")


@register_unlearner("finetune")
class FineTune(BaselineUnlearner):
    """Cross-entropy on retain batches; SGD + ``MultiStepLR(milestones)``; ``epochs`` fixed."""

    params = FineTuneParams

    def run(self) -> dict[str, Any]:
        epochs = self.epochs()
        self.fit_phase("finetune", self.retain_loader(int(self.hp["batch_size"]), drop_last=True), epochs)
        return {"epochs": float(epochs), "reached_target": None}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = F.cross_entropy(self.model(self.augment(x)), y)
        self.log_loss(loss, len(y))
        return loss
