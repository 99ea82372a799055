"""L1-sparse unlearning (Jia et al., "Model Sparsity Can Simplify Machine Unlearning", NeurIPS 2023, §4;
seeds/003 §IV-A): fine-tune on the retain set with an L1 penalty on all weights that promotes sparsity,

    loss = CE(f(x_r), y_r) + γ_t · ‖θ‖₁,   γ_t = γ · (1 − t / E)   (linear decay over the E epochs),

as in the authors' code (``FT_prune``: SGD, momentum 0.9, weight decay 5e-4, lr 0.01, 10 epochs).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.unlearn.registry import register_unlearner


def l1_norm(params: Any) -> torch.Tensor:
    """``Σ |θ|`` over all parameters."""
    return sum(p.abs().sum() for p in params)


@register_unlearner("l1_sparse")
class L1Sparse(BaselineUnlearner):
    """Retain-set fine-tuning with a linearly decaying L1 penalty."""

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
