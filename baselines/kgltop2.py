"""Masked Small Gradients ("MSG"; NeurIPS 2023 Machine Unlearning challenge, Kaggle 3rd place, Lee, Bae & Kim,
kaggle.com/c/neurips-2023-machine-unlearning/discussion/459200), as deepunlearn's ``kgltop2``
(xcadet/deepunlearn @ 6830ff6e5fd72f4793890ee31904814892625acf, ``munl/unlearning/kgltop2.py``):

1. **Gradient information** (``get_grads_for_snip``): one ``zero_grad``, then the gradients summed over a random
   retain subset as large as the forget set (cross-entropy, descent direction) and over the whole forget set
   (negated cross-entropy, ascent direction); every batch's loss is its batch mean. The model is in train
   mode, as in the reference (BatchNorm uses batch statistics and updates its running statistics).
2. **Targeted re-initialisation** (``re_init_model_snip_ver2_little_grad``): in every ``nn.Conv2d``, the
   ``round(init_rate · numel)`` weights with the smallest ``|accumulated gradient|`` (per layer) get fresh values
   from ``kaiming_normal_(mode="fan_out", nonlinearity="relu")``; every other weight, bias, BatchNorm and linear
   layer is kept.
3. **Fine-tuning on the retain set**: cross-entropy, SGD (lr 1e-3, momentum 0.9, weight decay 5e-4), the
   reference's ``LinearAnnealingLR`` stepped per epoch (:func:`linear_annealing_factor`), and the conv weight
   gradients multiplied by ``1`` on the re-initialised entries and ``kept_grad_scale`` (0.1) on the kept ones
   (the write-up: "1/10 of the base learning rates ... by scaling the gradient").

Where this differs from the reference, and why:

- The reference swaps every conv for a ``MaskConv2d`` whose ``autograd.Function`` scales the weight gradient and
  leaves those modules in the returned model. Here the same factor is applied by a tensor hook on each weight
  (:func:`scale_gradients`), removed when fine-tuning ends, so the returned model has exactly the input's
  modules and ``state_dict`` keys. A parameter hook scales each backward's contribution before it is summed
  into ``.grad`` (so ``trainer.accumulate_grad_batches`` stays exact), and before the optimiser adds weight
  decay, as the reference's ``Masker``.
- The retain subset (``torch.randperm`` on the device in the reference) and the fresh values are drawn with
  generators seeded with the run's seed, so a run is reproducible.
- Ties in ``|gradient|`` are broken by a stable sort (the reference's ``topk`` picks any of them).
- The reference's retain-subset batch (64, hard-coded) and forget batch (``cfg.batch_size``, 64) are both
  ``batch_size`` here: with one value they stay equal when the presets scale the batch to small data sets, so
  the two sums of batch-mean gradients keep the reference's balance.
- ``layers: conv+linear`` (not in the reference) also re-initialises and damps every ``nn.Linear`` weight, so
  models without convolutions (MLPs) can run the method; ``layers: conv`` refuses them.
- Fine-tuning drops a ragged last retain batch (as the other baselines; the reference keeps it); a batch of one
  would break BatchNorm in train mode.
- No augmentation by default (the reference's loaders are in their "test" state); ``augment: true`` applies
  ``data.augment`` to the fine-tuning batches like the other baselines.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.hooks import RemovableHandle

from baselines.common import BaselineUnlearner
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.schema import Flag, OneOf, Real, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner

#: which layers' weights are re-initialised and damped: the reference's convolutions, or linear layers too
LAYER_CHOICES = {"conv": (nn.Conv2d,), "conv+linear": (nn.Conv2d, nn.Linear)}


def linear_annealing_factor(step: int, num_annealing_steps: int, num_total_steps: int) -> float:
    """The reference's ``LinearAnnealingLR.get_lr`` as a multiplier of the base lr, at its ``_step_count`` =
    ``step`` (1 during the first epoch): a linear rise to 1 over ``num_annealing_steps`` steps, then a linear
    fall to 0 at ``num_total_steps``."""
    if step <= num_annealing_steps:
        return step / num_annealing_steps
    return (num_total_steps - step) / (num_total_steps - num_annealing_steps)


def linear_annealing_schedule(optimizer: torch.optim.Optimizer, epochs: int) -> torch.optim.lr_scheduler.LambdaLR:
    """``LinearAnnealingLR(num_annealing_steps=(epochs + 1) // 2, num_total_steps=epochs + 1)`` stepped per epoch
    (5 epochs: multipliers 1/3, 2/3, 1, 2/3, 1/3). ``LambdaLR`` passes ``last_epoch`` = ``_step_count - 1``."""
    annealing, total = (epochs + 1) // 2, epochs + 1
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda epoch: linear_annealing_factor(epoch + 1, annealing, total))


def masked_layers(model: nn.Module, layers: str) -> list[tuple[str, nn.Parameter]]:
    """``(name, weight)`` of every layer of the chosen kind (``layers``: a key of :data:`LAYER_CHOICES`) whose
    weight is trainable, in module order."""
    kinds = LAYER_CHOICES[layers]
    return [(f"{name}.weight", m.weight) for name, m in model.named_modules()
            if isinstance(m, kinds) and m.weight is not None and m.weight.requires_grad]


def retain_subset(retain_idx: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` retain ids drawn without replacement with ``seed`` (all of them if there are fewer), as the
    reference's ``randperm(len(retain))[:len(forget)]``."""
    perm = torch.randperm(len(retain_idx), generator=torch.Generator().manual_seed(int(seed)), device="cpu")[:n]
    return np.asarray(retain_idx)[perm.numpy()]


def accumulated_gradients(model: nn.Module, weights: Sequence[nn.Parameter], retain_loader: DataLoader,
                          forget_loader: DataLoader, device: torch.device) -> list[torch.Tensor]:
    """``Σ_retain batches ∇ CE + Σ_forget batches ∇ (−CE)`` of ``weights`` (batch-mean losses), in train mode
    like the reference's ``get_grads_for_snip``; ``.grad`` of the model is left untouched."""
    model.train()
    total = [torch.zeros_like(w) for w in weights]
    for loader, sign in ((retain_loader, 1.0), (forget_loader, -1.0)):
        for x, y, _ in loader:
            loss = sign * F.cross_entropy(model(x.to(device)), y.to(device))
            grads = torch.autograd.grad(loss, list(weights), allow_unused=True)
            for acc, g in zip(total, grads, strict=True):
                if g is not None:  # a layer the forward does not use gets no gradient: 0
                    acc.add_(g)
    return total


def small_gradient_masks(grads: Sequence[torch.Tensor], rate: float) -> list[torch.Tensor]:
    """Per tensor, True on the ``round(rate · numel)`` entries with the smallest ``|g|`` (ties broken by position;
    Python's ``round``, as the reference)."""
    masks = []
    for g in grads:
        k = round(rate * g.numel())
        order = torch.argsort(g.abs().flatten(), stable=True)
        mask = torch.zeros(g.numel(), dtype=torch.bool, device=g.device)
        mask[order[:k]] = True
        masks.append(mask.view_as(g))
    return masks


@torch.no_grad()
def reinitialise(weights: Sequence[nn.Parameter], masks: Sequence[torch.Tensor], generator: torch.Generator) -> None:
    """``w[mask]`` ← fresh ``kaiming_normal_(mode="fan_out", nonlinearity="relu")`` values of a tensor shaped like
    ``w`` (drawn on the CPU with ``generator``, layer by layer in order); the other entries are kept."""
    for w, mask in zip(weights, masks, strict=True):
        fresh = torch.empty(w.shape, dtype=w.dtype)
        nn.init.kaiming_normal_(fresh, mode="fan_out", nonlinearity="relu", generator=generator)
        w.copy_(torch.where(mask, fresh.to(w.device), w))


def gradient_scales(masks: Sequence[torch.Tensor], kept_scale: float) -> list[torch.Tensor]:
    """The reference's ``grad_mask``: 1.0 on re-initialised entries, ``kept_scale`` (0.1) on kept ones."""
    return [torch.where(m, 1.0, float(kept_scale)).float() for m in masks]


def scale_gradients(weights: Sequence[nn.Parameter], scales: Sequence[torch.Tensor]) -> list[RemovableHandle]:
    """Hooks multiplying each weight's gradient by its scale (remove them with ``handle.remove()``)."""

    def hook(scale: torch.Tensor) -> Any:
        return lambda grad: grad * scale.to(grad.device, grad.dtype)

    return [w.register_hook(hook(s)) for w, s in zip(weights, scales, strict=True)]


@settings
class KGLTop2Params(MethodSettings):
    """``method=kgltop2``'s hyperparameters; conf/method/kgltop2.yaml is their preset."""

    method_name: ClassVar[str] = "kgltop2"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0005, NON_NEGATIVE, "weight decay")
    init_rate: float | None = option(None, Preset(Real(0.0, False, 1.0)),
                                     "fraction of each layer's weights re-initialised (the smallest |gradient|), in [0, "
                                     "1]")
    kept_grad_scale: float = option(0.1, NON_NEGATIVE,
                                    "gradient factor of the weights kept (1.0 on the re-initialised ones)")
    layers: str = option("conv", OneOf(tuple(LAYER_CHOICES)),
                         "conv: every nn.Conv2d (the reference); conv+linear: nn.Linear weights too (MLPs)")
    batch_size: int | None = option(None, Preset(COUNT),
                                    "fine-tuning, forget-set and retain-subset batches (the reference: 64 each)")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    augment: bool = option(False, Flag(),
                           "true: data.augment on the fine-tuning batches (the reference trains without)")


@register_unlearner("kgltop2")
class KGLTop2(BaselineUnlearner):
    """Re-initialise the smallest-gradient conv weights, then fine-tune on the retain set with damped gradients
    on the kept ones."""

    params = KGLTop2Params

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        hp = self.hp
        layers = hp["layers"]
        self.init_rate, self.kept_grad_scale = float(hp["init_rate"]), float(hp["kept_grad_scale"])
        self.use_augment = bool(hp["augment"])
        self.layers = masked_layers(self.model, layers)
        if not self.layers:
            what = "nn.Conv2d" if layers == "conv" else "nn.Conv2d or nn.Linear"
            hint = ("; use method.layers=conv+linear to re-initialise its nn.Linear weights instead"
                    if layers == "conv" else "")
            raise DuckInputError(f"method.layers={layers!r}: the model has no trainable {what} layer for kgltop2 to "
                                 f"re-initialise{hint}")

    def run(self) -> dict[str, Any]:
        device, bs = self.trainer_device(), int(self.hp["batch_size"])
        epochs = self.epochs()
        weights = [w for _, w in self.layers]
        subset = retain_subset(self.data.retain_idx, len(self.data.forget_idx), self.seed)
        retain_grad_loader = make_loader(self.data.train, bs, shuffle=True, seed=self.seed + 15485863, indices=subset)
        grads = accumulated_gradients(self.model, weights, retain_grad_loader, self.forget_loader(bs), device)
        self.masks = small_gradient_masks(grads, self.init_rate)
        reinitialise(weights, self.masks, torch.Generator().manual_seed(self.seed))
        handles = scale_gradients(weights, gradient_scales(self.masks, self.kept_grad_scale))
        try:
            self.fit_phase("kgltop2", self.retain_loader(bs, drop_last=True), epochs)
        finally:  # no hook left on the returned model
            for h in handles:
                h.remove()
        n = sum(w.numel() for w in weights)
        reinit = int(sum(int(m.sum()) for m in self.masks))
        return {"epochs": float(epochs), "reached_target": None, "reinitialised_weights": reinit,
                "masked_layers": len(weights), "reinitialised_fraction": reinit / max(1, n)}

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        return linear_annealing_schedule(optimizer, self.epochs())

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = F.cross_entropy(self.model(self.augment(x) if self.use_augment else x), y)
        self.log_loss(loss, len(y))
        return loss
