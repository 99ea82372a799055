"""Boundary Shrink (Chen et al., "Boundary Unlearning", CVPR 2023, §3.2; seeds/003 §IV-A).

1. Neighbour search: an adversarial step on the (frozen) original moves each forget sample ``x`` across its
   nearest decision boundary; the adversarial prediction is the *nearest incorrect label*
   ``y_nbi = argmax_{c ≠ y} f_orig(x_adv)_c`` (the true class, and in class removal every forgotten class,
   are excluded, so the label is always a retained, incorrect one).
2. Fine-tune the model on the forget samples with those labels, ``CE(f(x), y_nbi)``, for ``epochs`` epochs
   (the original paper's code: SGD, momentum 0.9; forget set only).

The attack is the one the Boundary Unlearning code runs (``boundary_shrink`` there builds ``FGSM``; its
``LinfPGD`` line is commented out): one signed-gradient step of size ``bound`` in pixel units, the result
clamped to the valid pixel range [0, 1] and rounded to the 8-bit grid (``discretize``) before it is
normalised again. ``attack_steps > 1`` runs L∞ PGD with step ``step`` and the same projection (the
``LinfPGD`` of that code). The original is frozen and there is no random start, so the attack is
deterministic: labels are computed once, stored by sample index, and reused every epoch (the same as
recomputing them per batch).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from baselines.common import CLASS_REMOVAL_ONLY, BaselineUnlearner
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner


def input_normalisation(dataset: Any, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel normalisation ``(mean, std)``, each ``(1, C, 1, 1)``, of ``dataset`` (model input =
    (pixel - mean) / std with pixels in [0, 1])."""
    mean, std = getattr(dataset, "mean", None), getattr(dataset, "std", None)
    if mean is None or std is None:
        raise DuckInputError("boundary methods express the attack radius in pixel units and need the data set's "
                             "normalisation (dataset.mean, dataset.std); this data set has none: pass "
                             "duck.unlearn(..., normalization=(mean, std)) or a transforms.Normalize in its transform")
    return tuple(torch.as_tensor(t, dtype=torch.float32, device=device).reshape(1, -1, 1, 1)
                 for t in (mean, std))  # type: ignore[return-value]


def linf_attack(model: nn.Module, x: torch.Tensor, y: torch.Tensor, bound: float, step: float, iters: int,
                mean: torch.Tensor, std: torch.Tensor, levels: int | None = 255) -> torch.Tensor:
    """Untargeted L∞ attack of the Boundary Unlearning code on normalised inputs ``x (B, C, H, W)``:
    ``iters`` signed-gradient ascent steps of ``CE(model(x'), y)`` of size ``step`` in pixel units, each
    followed by the projection on the ``bound`` ball around ``x``, the clamp to [0, 1] and (``levels``) the
    rounding to ``levels + 1`` grey levels. ``iters=1, step=bound`` is its FGSM. Returns normalised inputs."""
    x_nat = x.detach() * std + mean  # pixels
    x_adv = x.detach().clone()
    for _ in range(int(iters)):
        x_adv.requires_grad_(True)
        loss = F.cross_entropy(model(x_adv), y)
        (grad,) = torch.autograd.grad(loss, x_adv)
        pix = x_adv.detach() * std + mean + step * grad.sign()
        pix = (x_nat + (pix - x_nat).clamp(-bound, bound)).clamp(0.0, 1.0)
        if levels:
            pix = torch.round(pix * levels) / levels
        x_adv = (pix - mean) / std
    return x_adv.detach()


@torch.no_grad()
def nearest_incorrect_label(logits_adv: torch.Tensor, y: torch.Tensor, excluded: torch.Tensor) -> torch.Tensor:
    """``argmax`` of the adversarial logits over classes other than ``y`` and ``excluded``; ``(B, C) -> (B,)``."""
    scores = logits_adv.clone()
    scores[torch.arange(len(y), device=y.device), y] = float("-inf")
    if excluded.numel():
        scores[:, excluded] = float("-inf")
    return scores.argmax(1)


@settings
class BoundaryShrinkParams(MethodSettings):
    """``method=boundary_shrink``'s hyperparameters; conf/method/boundary_shrink.yaml is their preset."""

    method_name: ClassVar[str] = "boundary_shrink"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int = option(15, COUNT, "epochs")
    bound: float = option(0.1, POSITIVE, "attack radius (pixel units)")
    step: float = option(0.1, POSITIVE, "= bound: FGSM")
    attack_steps: int = option(1, COUNT, "attack steps")


@register_unlearner("boundary_shrink")
class BoundaryShrink(BaselineUnlearner):
    """Relabel forget samples to their nearest incorrect class (adversarial neighbour), then fine-tune."""

    params = BoundaryShrinkParams

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
        mean, std = input_normalisation(self.data.train, device)
        excluded = torch.tensor(self.forget_classes(), dtype=torch.long, device=device)
        labels = torch.full((len(self.data.train),), -1, dtype=torch.long, device=device)
        for x, y, idx in make_loader(self.data.train, int(self.hp["batch_size"]), indices=self.data.forget_idx):
            x, y = x.to(device), y.to(device)
            x_adv = linf_attack(original, x, y, float(self.hp["bound"]), float(self.hp["step"]),
                                int(self.hp["attack_steps"]), mean, std)
            with torch.no_grad():
                labels[torch.as_tensor(idx, device=device)] = nearest_incorrect_label(original(x_adv), y, excluded)
        return labels

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        target = self.neighbour_label[idx.to(self.neighbour_label.device)]
        loss = F.cross_entropy(self.model(self.augment(x)), target)
        self.log_loss(loss, len(y))
        return loss
