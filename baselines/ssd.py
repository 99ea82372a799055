"""Selective Synaptic Dampening (Foster et al., "Fast Machine Unlearning Without Retraining Through Selective
Synaptic Dampening", AAAI 2024, §3, Eq. 2-3; seeds/003 §IV-A). No training:

1. Importances: the diagonal of the Fisher information, ``[I]_D = E[(∂ℓ/∂θ)²]``, estimated as in the
   authors' code by the squared gradient of the mean cross-entropy of each batch, averaged over batches —
   once on the full training data ``D`` and once on the forget set ``D_f``.
2. Selection: parameters with ``[I]_{D_f} > α · [I]_D`` (specialised to the forget set).
3. Dampening: those parameters are multiplied by ``β = min(λ · [I]_D / [I]_{D_f}, 1)``; all others are left
   exactly unchanged. The paper's values: ``α = 10`` (selection weighting), ``λ = 1`` (dampening constant).

Gradients are taken with the model in eval mode so BatchNorm running statistics are not touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from baselines.common import BaselineUnlearner
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.schema import OneOf, option, settings
from duck.unlearn.config import COUNT, POSITIVE, MethodSettings
from duck.unlearn.registry import register_unlearner


def fisher_diagonal(model: nn.Module, dataset: Any, indices: Any, batch_size: int, device: torch.device
                    ) -> list[torch.Tensor]:
    """Mean over batches of the squared gradient of the batch-mean cross-entropy, one tensor per parameter."""
    params = [p for p in model.parameters() if p.requires_grad]
    importance = [torch.zeros_like(p) for p in params]
    was_training = model.training
    model.eval()
    n_batches = 0
    for x, y, _ in make_loader(dataset, batch_size, indices=indices):
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        for imp, g in zip(importance, grads, strict=True):
            if g is not None:
                imp.add_(g.detach().pow(2))
        n_batches += 1
    model.train(was_training)
    if n_batches == 0:
        raise DuckInputError("SSD needs at least one sample to estimate importances")
    return [imp / n_batches for imp in importance]


@torch.no_grad()
def dampen(params: Sequence[nn.Parameter], importance_full: Sequence[torch.Tensor],
           importance_forget: Sequence[torch.Tensor], alpha: float, lam: float) -> int:
    """SSD's Eq. 3 in place: where ``I_f > α·I_D``, ``θ ← θ · min(λ·I_D / I_f, 1)``. Returns how many scalar
    parameters were dampened."""
    if alpha <= 0 or lam <= 0:
        raise DuckInputError(f"SSD needs alpha > 0 and lambda > 0 (got alpha={alpha}, lambda={lam})")
    n = 0
    for p, imp_d, imp_f in zip(params, importance_full, importance_forget, strict=True):
        selected = imp_f > alpha * imp_d  # (same shape as p); imp_f > 0 wherever selected
        beta = torch.clamp(lam * imp_d / torch.where(selected, imp_f, torch.ones_like(imp_f)), max=1.0)
        p.mul_(torch.where(selected, beta, torch.ones_like(beta)))
        n += int(selected.sum())
    return n


#: how the batches of the full data set D are composed for its Fisher diagonal
FULL_ORDERS = ("authors", "dataset")


def authors_order(labels: Any, retain_idx: Any, forget_idx: Any) -> np.ndarray:
    """``D`` as the authors' code reads it (if-loops/selective-synaptic-dampening: ``full_train_dl =
    DataLoader(ConcatDataset((retain_train, forget_train)), 64)``, unshuffled, ``retain_train`` built class by
    class): the retain set class by class (data set order within a class), then the forget set. With a
    batch-mean loss the batches then hold one class each; mixed batches average the classes' gradients away
    and make ``[I]_D`` far smaller (on digits: 35 % of the weights dampened instead of 5 %, docs/baselines.md)."""
    retain = np.asarray(retain_idx, dtype=np.int64)
    by_class = retain[np.argsort(np.asarray(labels)[retain], kind="stable")]
    return np.concatenate([by_class, np.asarray(forget_idx, dtype=np.int64)])


@settings
class SSDParams(MethodSettings):
    """``method=ssd``'s hyperparameters; conf/method/ssd.yaml is their preset."""

    method_name: ClassVar[str] = "ssd"

    alpha: float = option(10.0, POSITIVE, "dampen parameters with forget importance > alpha x full-data importance")
    lam: float = option(1.0, POSITIVE, "dampening factor beta = min(lam * I_D / I_f, 1)")
    batch_size: int = option(64, COUNT, "batches of the Fisher-diagonal estimates")
    full_order: str = option("authors", OneOf(('authors', 'dataset')),
                             "batches of D for its Fisher diagonal: authors = the retain set class by class, then the "
                             "forget set, unshuffled (if-loops/selective-synaptic-dampening "
                             "src/forget_full_class_main.py full_train_dl; src/forget_full_class_strategies.py builds "
                             "retain class by class); dataset = the data set's own order (digits: classes interleaved, "
                             "batches mixed)")


@register_unlearner("ssd")
class SSD(BaselineUnlearner):
    """Fisher importances on ``D`` and ``D_f``, then dampening of the forget-specialised parameters."""

    params = SSDParams

    def run(self) -> dict[str, Any]:
        device = self.trainer_device()
        bs = int(self.hp["batch_size"])
        order = str(self.hp["full_order"])
        rows = authors_order(self.data.train.labels, self.data.retain_idx, self.data.forget_idx) \
            if order == "authors" else None
        full = fisher_diagonal(self.model, self.data.train, rows, bs, device)
        forget = fisher_diagonal(self.model, self.data.train, self.data.forget_idx, bs, device)
        params = [p for p in self.model.parameters() if p.requires_grad]
        n = dampen(params, full, forget, float(self.hp["alpha"]), float(self.hp["lam"]))
        total = sum(p.numel() for p in params)
        return {"epochs": 0.0, "reached_target": None, "dampened": n, "dampened_fraction": n / max(1, total)}
