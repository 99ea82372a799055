"""Boundary Expanding (Chen et al., "Boundary Unlearning", CVPR 2023, §3.3; seeds/003 §IV-A).

1. Widen the linear head from ``K`` to ``K + 1`` outputs: rows ``0..K-1`` copy the original head, the extra
   *shadow* row is freshly initialised (Xavier-normal weight, zero bias, as the paper's ``init_params``).
2. Fine-tune the whole widened network on the forget samples, all labelled with the shadow class ``K``
   (the paper's code: SGD, momentum 0.9, ``epochs`` epochs over the forget set): their features move into
   the shadow class's region, expanding the boundary.
3. Prune the shadow output: the head returns to ``K`` outputs (rows ``0..K-1`` of the fine-tuned head), so
   forget samples fall to whichever retained class is nearest in the expanded feature space.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from baselines.common import CLASS_REMOVAL_ONLY, BaselineUnlearner
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner


def widen_head(head: nn.Linear, generator: torch.Generator | None = None) -> nn.Linear:
    """``K -> K + 1`` outputs; the first ``K`` rows are copies of ``head``'s, the shadow row is new."""
    k, d = head.out_features, head.in_features
    wide = nn.Linear(d, k + 1, bias=head.bias is not None).to(head.weight.device, head.weight.dtype)
    with torch.no_grad():
        init = torch.empty(k + 1, d)  # Xavier over the widened matrix, as the paper initialises the new head
        nn.init.xavier_normal_(init, generator=generator)
        wide.weight.copy_(torch.cat([head.weight.detach(), init[k:].to(head.weight)]))
        if head.bias is not None:
            wide.bias.copy_(torch.cat([head.bias.detach(), torch.zeros(1).to(head.bias)]))
    return wide


def prune_head(wide: nn.Linear, num_classes: int) -> nn.Linear:
    """Drop the shadow output(s): keep rows ``0..num_classes-1``."""
    head = nn.Linear(wide.in_features, num_classes, bias=wide.bias is not None).to(wide.weight.device,
                                                                                  wide.weight.dtype)
    with torch.no_grad():
        head.weight.copy_(wide.weight[:num_classes])
        if wide.bias is not None:
            head.bias.copy_(wide.bias[:num_classes])
    return head


@settings
class BoundaryExpandParams(MethodSettings):
    """``method=boundary_expand``'s hyperparameters; conf/method/boundary_expand.yaml is their preset."""

    method_name: ClassVar[str] = "boundary_expand"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int = option(10, COUNT, "epochs")


@register_unlearner("boundary_expand")
class BoundaryExpand(BaselineUnlearner):
    """Shadow class for the forget samples, fine-tune, prune the shadow output."""

    params = BoundaryExpandParams

    supported_scenarios = CLASS_REMOVAL_ONLY

    def run(self) -> dict[str, Any]:
        num_classes = self.model.num_classes
        self.shadow_class = num_classes
        gen = torch.Generator().manual_seed(self.seed)
        self.model.set_classifier(widen_head(self.model.classifier(), gen))
        epochs = self.epochs()
        self.fit_phase("boundary_expand", self.forget_loader(int(self.hp["batch_size"])), epochs)
        self.model.set_classifier(prune_head(self.model.classifier(), num_classes))
        return {"epochs": float(epochs), "reached_target": None}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        shadow = torch.full_like(y, self.shadow_class)
        loss = F.cross_entropy(self.model(self.augment(x)), shadow)
        self.log_loss(loss, len(y))
        return loss
