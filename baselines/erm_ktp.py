"""ERM-KTP (Lin et al., "ERM-KTP: Knowledge-Level Machine Unlearning via Knowledge Transfer", CVPR 2023;
seeds/003 §IV-A), following the authors' code (``ERM_laryer.py``, ``train_ERM.py``, ``KTP.py``).

1. **ERM** (entanglement-reduced mask, §3.2): a class-by-channel mask ``M ∈ [0, 1]^{D×K}`` (init 0.5) gates the
   last feature map by the sample's class, ``f(x) ⊙ M[:, y]``, trained with
   ``CE + λ_reg · (relu(‖M‖₁ − ρ·D·K) + 0.1 · Σ_{i<j} m_iᵀ m_j)`` and, after every step, each channel's row
   normalised by its maximum over classes and clipped to [0, 1]. *Adaptation*: the authors train the whole
   network with the mask from scratch; here the original is given, so the mask alone is learned on the
   original's frozen pooled features (masking channels commutes with average pooling).
2. **Prohibition** (``load_fc``): the forgotten classes' channels (``M[c, f] > threshold`` for a forgotten
   class ``f``) are removed from the linear head (their weight columns zeroed), and the forgotten classes'
   rows (weights and biases) are zeroed. This head is frozen: its values are restored after every optimiser
   step (weight decay and momentum would otherwise move frozen entries; ALGORITHMS.md §3).
3. **KTP** (knowledge transfer, §3.3): a freshly initialised backbone (the authors' code) learns, on the retain
   set only, to reproduce the original's feature map with the prohibited channels zeroed and its pooled
   embedding: ``MSE(F_s, F_t ⊙ keep) + MSE(pool F_s, pool(F_t ⊙ keep))``; SGD, momentum 0.9, weight decay
   5e-4, lr ×0.1 at the milestones (seeds/003 Table VII: 50 epochs, ``[10, 20]``). *Adaptation* for models
   without a feature map whose channels are the embedding's (a generic ``nn.Module`` split at its final
   ``nn.Linear``, where ``Classifier.feature_map`` is None, or a timm head with a hidden layer such as
   mobilenetv3's): the pooled embedding itself is gated, ``MSE(f_s(x), f_t(x) ⊙ keep)`` — gating channels
   commutes with average pooling, so this is the pooled term of the loss above; the feature-map term has no
   counterpart there and is dropped.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from baselines.common import CLASS_REMOVAL_ONLY, BaselineUnlearner
from baselines.masking import FrozenEntries
from duck.embeddings import embed_samples
from duck.errors import DuckInputError
from duck.schema import OneOf, Real, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, TOLERANCE, MethodSettings, Milestones, Preset
from duck.unlearn.registry import register_unlearner


def erm_regulariser(mask: torch.Tensor, density: float = 0.1) -> torch.Tensor:
    """``relu(‖M‖₁ − density·numel) + 0.1 · Σ_{i<j} m_iᵀ m_j`` for ``M (D, K)`` (the authors' ``loss_function``)."""
    l1 = torch.relu(mask.abs().sum() - mask.numel() * density)
    inner = torch.triu(mask.T @ mask, diagonal=1).sum()  # (K, K) class-mask overlaps, pairs i < j
    return l1 + 0.1 * inner


@torch.no_grad()
def clip_mask(mask: torch.Tensor) -> None:
    """Each channel's row divided by its maximum over classes, then clipped to [0, 1] (``clip_lmask``)."""
    row_max = mask.max(dim=1, keepdim=True).values.clamp_min(1e-12)  # (D, 1)
    mask.copy_((mask / row_max).clamp(0.0, 1.0))


def learn_erm_mask(z: torch.Tensor, y: torch.Tensor, head: nn.Linear, num_classes: int, *, epochs: int, lr: float,
                   lambda_reg: float, density: float, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Learn the class-channel mask ``M (D, K)`` on frozen embeddings ``z (N, D)`` with labels ``y (N,)``
    through the frozen linear ``head``."""
    weight = head.weight.detach()
    bias = head.bias.detach() if head.bias is not None else None
    mask = torch.full((z.shape[1], num_classes), 0.5, device=z.device, requires_grad=True)
    opt = torch.optim.SGD([mask], lr=lr, momentum=0.9)
    for _ in range(int(epochs)):
        order = torch.randperm(len(y), generator=generator, device="cpu").to(z.device)
        for start in range(0, len(y), batch_size):
            rows = order[start:start + batch_size]
            gated = z[rows] * mask[:, y[rows]].T  # (B, D): each sample gated by its class's mask
            loss = F.cross_entropy(F.linear(gated, weight, bias), y[rows]) + lambda_reg * erm_regulariser(mask, density)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            clip_mask(mask)
    return mask.detach()


def kept_channels(mask: torch.Tensor, forget_classes: list[int], threshold: float) -> torch.Tensor:
    """``(D,)`` bool: channels not expressed by any forgotten class (``M[c, f] <= threshold`` for all ``f``)."""
    return (mask[:, forget_classes] <= threshold).all(dim=1)


def prohibited_head(head: nn.Linear, keep: torch.Tensor, forget_classes: list[int]) -> nn.Linear:
    """Copy of ``head`` with the prohibited channels' columns and the forgotten classes' rows zeroed."""
    out = nn.Linear(head.in_features, head.out_features, bias=head.bias is not None).to(head.weight.device)
    with torch.no_grad():
        out.weight.copy_(head.weight * keep.to(head.weight).view(1, -1))
        out.weight[forget_classes] = 0.0
        if head.bias is not None:
            out.bias.copy_(head.bias)
            out.bias[forget_classes] = 0.0
    return out


def channel_gate(features: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Zero the prohibited channels of a feature map ``(B, C, H, W)`` or token map ``(B, N, C)``."""
    if features.ndim == 4:
        return features * keep.to(features).view(1, -1, 1, 1)
    if features.ndim == 3:
        return features * keep.to(features).view(1, 1, -1)
    raise DuckInputError(f"erm_ktp expects (B, C, H, W) or (B, N, C) features, got shape {tuple(features.shape)}")


@settings
class ERMKTPParams(MethodSettings):
    """``method=erm_ktp``'s hyperparameters; conf/method/erm_ktp.yaml is their preset."""

    method_name: ClassVar[str] = "erm_ktp"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float = option(0.1, POSITIVE, "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0005, NON_NEGATIVE, "weight decay")
    lr_gamma: float = option(0.1, POSITIVE, "MultiStepLR factor at each milestone")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    milestones: tuple[int, ...] | None = option(None, Preset(Milestones()),
                                                "MultiStepLR milestones (epochs); [] for a constant rate")
    erm_epochs: int | None = option(None, Preset(COUNT),
                                    "epochs of mask learning on the original's frozen features (adaptation, see docs)")
    erm_lr: float = option(0.1, POSITIVE, "the authors' SGD lr (momentum 0.9) for the mask")
    lambda_reg: float = option(0.1, NON_NEGATIVE, "ours (authors: 1e-3 over 200 epochs of full training, see docs)")
    mask_density: float = option(0.1, Real(0.0, True, 1.0), "initial density of the ERM mask")
    prohibit_threshold: float = option(0.0, TOLERANCE, "channel c is the forgotten class f's when M[c, f] > threshold")


@register_unlearner("erm_ktp")
class ERMKTP(BaselineUnlearner):
    """ERM mask on the original, prohibited head, feature-level knowledge transfer to a fresh backbone."""

    params = ERMKTPParams

    supported_scenarios = CLASS_REMOVAL_ONLY

    def run(self) -> dict[str, Any]:
        if self.data.model_factory is None:
            raise DuckInputError("erm_ktp needs UnlearnData.model_factory (a freshly initialised model of the same "
                                 "architecture) for the student backbone")
        hp, device = self.hp, self.trainer_device()
        forget = self.forget_classes()
        gen = torch.Generator().manual_seed(self.seed)
        # 1. ERM mask on the original's frozen embeddings of the whole training set
        z, y, _ = embed_samples(self.model, self.data.train, None, device=device)
        original_head = self.model.classifier()
        self.mask = learn_erm_mask(z, y, original_head, self.data.num_classes, epochs=int(hp["erm_epochs"]),
                                   lr=float(hp["erm_lr"]), lambda_reg=float(hp["lambda_reg"]),
                                   density=float(hp["mask_density"]), batch_size=int(hp["batch_size"]),
                                   generator=gen)
        del z, y
        self.keep = kept_channels(self.mask, forget, float(hp["prohibit_threshold"]))
        # 2. teacher = the original; student = fresh backbone + prohibited, frozen head
        self.add_reference("teacher", self.model)
        head = prohibited_head(original_head, self.keep, forget)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)
            student = self.data.model_factory().to(device)
        student.set_classifier(head)
        self.model = student
        self.frozen_entries = FrozenEntries([(p, None) for p in head.parameters()])
        # 3. knowledge transfer on the retain set
        epochs = self.epochs()
        self.fit_phase("ktp", self.retain_loader(int(hp["batch_size"]), drop_last=True), epochs)
        return {"epochs": float(epochs), "reached_target": None,
                "prohibited_channels": int((~self.keep).sum()), "channels": int(self.keep.numel())}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        x = self.augment(x)
        loss = self.transfer_loss(x)
        self.log_loss(loss, len(y))
        return loss

    def transfer_loss(self, x: torch.Tensor) -> torch.Tensor:
        """KTP's loss on a batch: feature-map + pooled-embedding MSE to the teacher's gated features, or the
        gated pooled embedding alone where the model has no feature map of the embedding's channels (module
        docstring)."""
        teacher = self.references["teacher"]
        with torch.no_grad():
            fmap_t = teacher.feature_map(x)
        if fmap_t is not None and _channels(fmap_t) == self.keep.numel():
            with torch.no_grad():
                fmap_t = channel_gate(fmap_t, self.keep)
                pooled_t = teacher.pool_features(fmap_t)
            fmap_s = self.model.feature_map(x)
            pooled_s = self.model.pool_features(fmap_s)
            return F.mse_loss(fmap_s, fmap_t) + F.mse_loss(pooled_s, pooled_t)
        with torch.no_grad():
            pooled_t = teacher.embed(x)  # (B, D)
            pooled_t = pooled_t * self.keep.to(pooled_t).view(1, -1)
        return F.mse_loss(self.model.embed(x), pooled_t)


def _channels(features: torch.Tensor) -> int:
    """Channel count of a feature map ``(B, C, H, W)`` or token map ``(B, N, C)``."""
    return int(features.shape[1] if features.ndim == 4 else features.shape[-1])
