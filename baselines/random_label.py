"""Random labels (Hayase et al. 2020 as run in seeds/003 §IV-A): fine-tune on the forget set with every
sample relabelled at random, stopped by DUCK's rule (forget accuracy at its target), at most ``max_epochs``.

A random label is never the sample's true label: class removal draws it uniformly among the retained classes
(the authors' code), homogeneous removal among all classes but the sample's own. A fresh label is drawn at
every step (the authors' code).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from baselines.neggrad import NegGradParams
from duck.errors import DuckInputError
from duck.schema import settings
from duck.unlearn.registry import register_unlearner


def draw_random_labels(y: torch.Tensor, allowed: torch.Tensor, generator: torch.Generator | None = None
                       ) -> torch.Tensor:
    """For each label ``y_i`` a class drawn uniformly from ``allowed \\ {y_i}``; ``(B,), (K,) -> (B,)``."""
    candidates = (allowed.view(1, -1) != y.view(-1, 1)).float()  # (B, K): allowed and not the true label
    if bool((candidates.sum(1) == 0).any()):
        raise DuckInputError("a forget sample has no admissible random label (only its own class is allowed); "
                             "random_label needs at least two classes to choose from")
    pick = torch.multinomial(candidates.cpu(), 1, generator=generator).view(-1).to(y.device)  # (B,) rows
    return allowed[pick]


@settings
class RandomLabelParams(NegGradParams):
    """``method=random_label``'s hyperparameters (NegGrad's: both run until the forget target, capped);
    conf/method/random_label.yaml is their preset."""

    method_name: ClassVar[str] = "random_label"


@register_unlearner("random_label")
class RandomLabel(BaselineUnlearner):
    """``loss = CE(f(x_f), ỹ)`` with ``ỹ ≠ y`` random, until ``A_f <= target``."""

    params = RandomLabelParams

    def run(self) -> dict[str, Any]:
        self.allowed = torch.tensor(self.retained_classes(), device=self.trainer_device())  # (K',)
        self.label_generator = torch.Generator().manual_seed(self.seed)
        stop = self.stopping_rule()
        self.fit_phase("random_label", self.forget_loader(int(self.hp["batch_size"])), self.epochs("max_epochs"),
                       [stop])
        return {"epochs": stop.epochs_done, "reached_target": stop.reached}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        random_y = draw_random_labels(y, self.allowed, self.label_generator)
        loss = F.cross_entropy(self.model(self.augment(x)), random_y)
        self.log_loss(loss, len(y))
        return loss
