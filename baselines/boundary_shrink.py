"""Boundary Shrink (Chen et al., "Boundary Unlearning", CVPR 2023, §3.2; seeds/003 §IV-A).

1. Neighbour search: an L∞ PGD attack on the (frozen) original moves each forget sample ``x`` across its
   nearest decision boundary; the adversarial prediction is the *nearest incorrect label*
   ``y_nbi = argmax_{c ≠ y} f_orig(x_adv)_c`` (the true class, and in class removal every forgotten class,
   are excluded, so the label is always a retained, incorrect one).
2. Fine-tune the model on the forget samples with those labels, ``CE(f(x), y_nbi)``, for ``epochs`` epochs
   (the original paper's code: SGD, momentum 0.9; forget set only).

The original is frozen, so the attack is deterministic (no random start, as in the paper's code): labels are
computed once, stored by sample index, and reused every epoch (the same as recomputing them per batch).
The attack radius ``bound`` and ``step`` are in pixel units of [0, 1] images (the paper's code: ``LinfPGD``
with bound 0.1, step 8/255, 5 iterations); they are divided by the data set's normalisation std to act on the
model's (normalised) inputs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from baselines.common import CLASS_REMOVAL_ONLY, BaselineUnlearner
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.unlearn.registry import register_unlearner


def input_scale(dataset: Any, device: torch.device) -> torch.Tensor:
    """Per-channel normalisation std ``(1, C, 1, 1)`` of ``dataset`` (pixel units -> model input units)."""
    std = getattr(dataset, "std", None)
    if std is None:
        raise DuckInputError("boundary methods express the attack radius in pixel units and need the data set's "
                             "normalisation std (dataset.std); this data set has none")
    return torch.as_tensor(std, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)


def pgd_linf(model: nn.Module, x: torch.Tensor, y: torch.Tensor, bound: torch.Tensor, step: torch.Tensor,
             iters: int) -> torch.Tensor:
    """Untargeted L∞ PGD (Madry et al.): ``iters`` signed-gradient ascent steps of ``CE(model(x'), y)``,
    projected on the ``bound`` ball around ``x``. ``bound``/``step`` broadcast to ``x (B, C, H, W)``."""
    x_adv = x.detach().clone()
    for _ in range(int(iters)):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), y)
        (grad,) = torch.autograd.grad(loss, x_adv)
        x_adv = x_adv.detach() + step * grad.sign()
        x_adv = torch.max(torch.min(x_adv, x + bound), x - bound)  # project on the L∞ ball
    return x_adv.detach()


@torch.no_grad()
def nearest_incorrect_label(logits_adv: torch.Tensor, y: torch.Tensor, excluded: torch.Tensor) -> torch.Tensor:
    """``argmax`` of the adversarial logits over classes other than ``y`` and ``excluded``; ``(B, C) -> (B,)``."""
    scores = logits_adv.clone()
    scores[torch.arange(len(y), device=y.device), y] = float("-inf")
    if excluded.numel():
        scores[:, excluded] = float("-inf")
    return scores.argmax(1)


@register_unlearner("boundary_shrink")
class BoundaryShrink(BaselineUnlearner):
    """Relabel forget samples to their nearest incorrect class (adversarial neighbour), then fine-tune."""

    supported_scenarios = CLASS_REMOVAL_ONLY

    def run(self) -> dict[str, Any]:
        device = self.trainer_device()
        self.neighbour_label = self.find_neighbour_labels(device)
        epochs = self.epochs()
        self.fit_phase("boundary_shrink", self.forget_loader(int(self.hp["batch_size"])), epochs)
        return {"epochs": float(epochs), "reached_target": None,
                "neighbour_label_counts": torch.bincount(self.neighbour_label[self.neighbour_label >= 0],
                                                         minlength=self.data.num_classes).tolist()}

    def find_neighbour_labels(self, device: torch.device) -> torch.Tensor:
        """Nearest incorrect label of every forget sample, stored by stable sample index (``-1`` elsewhere)."""
        original = self.add_reference("original", self.model)
        scale = input_scale(self.data.train, device)
        bound, step = float(self.hp["bound"]) / scale, float(self.hp["step"]) / scale
        excluded = torch.tensor(self.forget_classes(), dtype=torch.long, device=device)
        labels = torch.full((len(self.data.train),), -1, dtype=torch.long, device=device)
        for x, y, idx in make_loader(self.data.train, int(self.hp["batch_size"]), indices=self.data.forget_idx):
            x, y = x.to(device), y.to(device)
            x_adv = pgd_linf(original, x, y, bound, step, int(self.hp["attack_steps"]))
            with torch.no_grad():
                labels[torch.as_tensor(idx, device=device)] = nearest_incorrect_label(original(x_adv), y, excluded)
        return labels

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        target = self.neighbour_label[idx.to(self.neighbour_label.device)]
        loss = F.cross_entropy(self.model(self.augment(x)), target)
        self.log_loss(loss, len(y))
        return loss
