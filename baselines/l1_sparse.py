"""L1-sparse unlearning (Jia et al., "Model Sparsity Can Simplify Machine Unlearning", NeurIPS 2023, §4;
seeds/003 §IV-A): fine-tune on the retain set with an L1 penalty on all weights that promotes sparsity,

    loss = CE(f(x_r), y_r) + γ_t · ‖θ‖₁,   γ_t = γ · (1 − t / E)   (linear decay over the E epochs),

as in the authors' code (``FT_prune``: SGD, momentum 0.9, weight decay 5e-4, lr 0.01, 10 epochs).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner


def l1_norm(params: Any) -> torch.Tensor:
    """``Σ |θ|`` over all parameters."""
    return sum(p.abs().sum() for p in params)


@settings
class L1SparseParams(MethodSettings):
    """``method=l1_sparse``'s hyperparameters; conf/method/l1_sparse.yaml is their preset."""

    method_name: ClassVar[str] = "l1_sparse"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0005, NON_NEGATIVE, "weight decay")
    alpha: float = option(0.0005, NON_NEGATIVE, "weight of the method's second loss term")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int | None = option(None, Preset(COUNT), "epochs")


@register_unlearner("l1_sparse")
class L1Sparse(BaselineUnlearner):
    """Retain-set fine-tuning with a linearly decaying L1 penalty."""

    params = L1SparseParams

    def run(self) -> dict[str, Any]:
        self.total_epochs = self.epochs()
        self.fit_phase("l1_sparse", self.retain_loader(int(self.hp["batch_size"]), drop_last=True), self.total_epochs)
        return {"epochs": float(self.total_epochs), "reached_target": None}

    def l1_weight(self, epoch: int) -> float:
        """``γ_t = γ (1 − t/E)`` at epoch ``t`` (0-based)."""
        return float(self.hp["alpha"]) * (1.0 - epoch / self.total_epochs)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        loss = F.cross_entropy(self.model(self.augment(x)), y) \
            + self.l1_weight(self.current_epoch) * l1_norm(self.model.parameters())
        self.log_loss(loss, len(y))
        return loss
