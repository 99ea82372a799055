"""Forget-contrast with a uniform start ("FCS"; NeurIPS 2023 Machine Unlearning challenge, Kaggle 2nd place, Fan
Chuan, kaggle.com/c/neurips-2023-machine-unlearning/discussion/458721), as deepunlearn's ``kgltop1``
(xcadet/deepunlearn @ 6830ff6e5fd72f4793890ee31904814892625acf, ``munl/unlearning/kgltop1.py``):

1. **Stage 1**, one pass over the forget set: ``KLDivLoss(batchmean)(log_softmax(z), u)`` with ``u`` the uniform
   distribution over the classes (:func:`uniform_kl_loss`), SGD lr 0.005, momentum 0.9, no weight decay.
2. **Stage 2**, ``epochs`` (8) epochs, each
   - a *forget round*: ``zip(forget batches, retain batches)`` (so ``len(forget loader)`` steps) with
     ``−mean(log_softmax(z_f @ z_r.detach()ᵀ / T, dim=−1))`` on the logits (:func:`forget_contrast_loss`,
     T = 1.15), SGD lr 3e-4, momentum 0.9, no weight decay, ``CosineAnnealingLR(T_max = len(forget loader) ·
     epochs, eta_min = 1e-6)`` stepped after every forget step;
   - a *retain round*: one pass over the retain set with cross-entropy, SGD lr ``retain_lr · batch_size / 64``
     (0.004 at batch 256), momentum 0.9, weight decay 1e-2, no schedule.

The three stages step three SGD optimisers over the same parameters, each keeping its own momentum buffer for
the whole run, as the reference. The model stays in train mode throughout (BatchNorm on batch statistics).
Lightning runs stage 2's retain rounds as its epochs (manual optimisation, as :mod:`baselines.scrub`); stage 1
(first epoch only) and each forget round run at the start of the epoch, so the order is the reference's.

Where this differs from the reference, and why:

- Retain rounds drop a ragged last batch (as the other baselines; the reference keeps it): a batch of one would
  break BatchNorm in train mode. Stage 1 and the forget rounds use every forget sample, as the reference.
- The forget round's retain batches come from their own shuffled retain loader (the reference's
  ``retain_ld4fgt``), reshuffled at every round; all loaders are seeded with the run's seed.
- No augmentation by default (the reference's loaders are in their "test" state); ``augment: true`` applies
  ``data.augment`` to every training batch like the other baselines.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.schema import Flag, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner

#: the reference scales the retain-round lr by batch_size / REFERENCE_BATCH (``opt_retain_lr``)
REFERENCE_BATCH = 64


def uniform_kl_loss(logits: torch.Tensor) -> torch.Tensor:
    """``KL(u ‖ softmax(z))`` averaged over the batch, ``u`` uniform over the ``C`` classes: the reference's
    ``KLDivLoss(reduction="batchmean")(LogSoftmax(z), u)``. ``logits (B, C)``."""
    uniform = torch.full_like(logits, 1.0 / logits.shape[1])  # (B, C)
    return F.kl_div(F.log_softmax(logits, dim=-1), uniform, reduction="batchmean")


def forget_contrast_loss(forget_logits: torch.Tensor, retain_logits: torch.Tensor, temperature: float
                         ) -> torch.Tensor:
    """``−mean(log_softmax(z_f @ z_r.detach()ᵀ / T, dim=−1))``: the cross-entropy of each forget sample's
    similarity softmax over the retain batch against a uniform target. ``forget_logits (B_f, C)``,
    ``retain_logits (B_r, C)`` (no gradient flows into the retain side)."""
    similarity = forget_logits @ retain_logits.detach().T / temperature  # (B_f, B_r)
    return -F.log_softmax(similarity, dim=-1).mean()


@settings
class KGLTop1Params(MethodSettings):
    """``method=kgltop1``'s hyperparameters; conf/method/kgltop1.yaml is their preset."""

    method_name: ClassVar[str] = "kgltop1"

    lr: float | None = option(None, Preset(POSITIVE), "stage 1 (uniform KL on the forget set)")
    forget_lr: float | None = option(None, Preset(POSITIVE),
                                     "forget rounds (cosine-annealed to eta_min over all forget steps)")
    retain_lr: float | None = option(None, Preset(POSITIVE),
                                     "retain rounds, multiplied by batch_size / 64 as the reference")
    momentum: float = option(0.9, MOMENTUM, "all three optimisers")
    weight_decay: float = option(0.0, NON_NEGATIVE, "stage 1")
    forget_weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay of the forget rounds")
    retain_weight_decay: float = option(0.01, NON_NEGATIVE, "weight decay of the retain rounds")
    eta_min: float = option(1e-06, NON_NEGATIVE, "the forget rounds' final learning rate")
    temperature: float | None = option(None, Preset(POSITIVE), "T of the forget rounds' similarity softmax")
    batch_size: int | None = option(None, Preset(COUNT), "forget and retain batches (the reference: one batch size)")
    epochs: int | None = option(None, Preset(COUNT), "stage-2 epochs (a forget round and a retain round each)")
    augment: bool = option(False, Flag(), "true: data.augment on every training batch (the reference trains without)")


@register_unlearner("kgltop1")
class KGLTop1(BaselineUnlearner):
    """Uniform-KL pass on the forget set, then epochs of a forget-contrast round and a retain round."""

    manual_optimization = True  # three optimisers, two of them stepped outside Lightning's batches
    params = KGLTop1Params

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.use_augment = bool(self.hp["augment"])

    def run(self) -> dict[str, Any]:
        bs = int(self.hp["batch_size"])
        self.n_epochs = self.epochs()
        self.temperature = float(self.hp["temperature"])
        self.forget_batches = self.forget_loader(bs)  # stage 1 and the forget rounds (reshuffled at each pass)
        self.retain_for_forget = self.retain_loader(bs, seed_offset=104729)  # the reference's retain_ld4fgt
        self.stage1_steps = self.forget_steps = 0
        self.fit_phase("kgltop1", self.retain_loader(bs, drop_last=True), self.n_epochs)
        # Lightning's global_step counts the retain steps only (the other two run outside training_step)
        log = self.phase_log["kgltop1"]
        log.update(retain_steps=log["steps"], forget_steps=self.forget_steps, stage1_steps=self.stage1_steps)
        log["steps"] += self.forget_steps + self.stage1_steps
        return {"epochs": float(self.n_epochs), "reached_target": None,
                "final_forget_lr": float(self.forget_scheduler.get_last_lr()[0])}

    def configure_optimizers(self) -> Any:
        """Stage 1's, the forget rounds' and the retain rounds' SGD, each with its own momentum buffer."""
        hp, params = self.hp, list(self.trainable_parameters())
        momentum = float(hp["momentum"])
        retain_lr = float(hp["retain_lr"]) * int(hp["batch_size"]) / REFERENCE_BATCH
        stage1 = torch.optim.SGD(params, lr=float(hp["lr"]), momentum=momentum, weight_decay=float(hp["weight_decay"]))
        forget = torch.optim.SGD(params, lr=float(hp["forget_lr"]), momentum=momentum,
                                 weight_decay=float(hp["forget_weight_decay"]))
        retain = torch.optim.SGD(params, lr=retain_lr, momentum=momentum,
                                 weight_decay=float(hp["retain_weight_decay"]))
        self.forget_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
            forget, T_max=len(self.forget_batches) * self.n_epochs, eta_min=float(hp["eta_min"]))
        return [stage1, forget, retain]

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.device)
        return self.augment(x) if self.use_augment else x

    def on_train_epoch_start(self) -> None:
        stage1, forget, _ = self.optimizers()
        if self.current_epoch == 0:  # stage 1: one pass pushing the forget outputs to uniform
            for x, _, _ in self.forget_batches:
                self.manual_step(stage1, uniform_kl_loss(self.model(self.inputs(x))))
                self.stage1_steps += 1
        # forget round: the reference's zip, len(forget loader) steps (fewer only if the retain set is smaller)
        for (x_f, _, _), (x_r, _, _) in zip(self.forget_batches, self.retain_for_forget, strict=False):
            logits_f = self.model(self.inputs(x_f))  # (B_f, C)
            with torch.no_grad():  # the reference's net(x_r).detach(): the same values and BatchNorm updates
                logits_r = self.model(self.inputs(x_r))  # (B_r, C)
            self.manual_step(forget, forget_contrast_loss(logits_f, logits_r, self.temperature))
            self.forget_scheduler.step()
            self.forget_steps += 1

    def training_step(self, batch: Any, batch_idx: int) -> None:  # retain round
        x, y, _ = batch
        loss = F.cross_entropy(self.model(self.inputs(x)), y)
        self.manual_step(self.optimizers()[2], loss)
        self.log_loss(loss, len(y))

    def divergence_setting(self) -> str:
        return " / ".join(f"method.{k}={float(self.hp[k]):g}" for k in ("lr", "forget_lr", "retain_lr"))
