"""SHAP attribution maps of a classifier's logits and the mean SHAP value of a pixel region (seeds/003 §IV-J).

The paper explains the original, the DUCK-unlearned and the retrained model with SHAP (Lundberg & Lee, its
ref. [16]) and compares the *mean SHAP value inside the bias patch* across the three models (Fig. 6B).

Explainer: ``shap.GradientExplainer`` (expected gradients: for a background sample ``b`` and ``t ~ U(0, 1)``,
``φ_i ≈ E[(x_i − b_i) · ∂f/∂x_i (b + t (x − b))]``) on the torch model, with a background sample of training
images. Chosen over ``shap.DeepExplainer`` because it needs nothing from the network but autograd: DeepExplainer
(DeepLIFT rescale rules) must recognise every module type and refuses or mis-attributes layers it has no rule
for (in-place activations, adaptive pooling, timm blocks), while the framework's models range from the small
CNNs to any timm network. For a model linear in its input the gradient is constant, so the estimate is exact
for every number of samples: ``φ_i = w_i (x_i − E_b[b_i])`` and ``Σ_i φ_i = f(x) − E_b f(b)`` (the efficiency
property), which the tests check.

The explained output is one logit per image (``classes``: one class for all, or one per image), not the
softmax probability: logits are the model's additive evidence, and the task's statistic is defined on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from duck.errors import DuckInputError


class _SelectLogit(nn.Module):
    """``x -> model(x)[:, c:c+1]``: one output column, the shape GradientExplainer explains as a single output."""

    def __init__(self, model: nn.Module, class_idx: int) -> None:
        super().__init__()
        self.model, self.class_idx = model, int(class_idx)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)[:, self.class_idx : self.class_idx + 1]  # (B, 1)


def shap_values(model: nn.Module, images: torch.Tensor, background: torch.Tensor, classes: int | Any, *,
                nsamples: int = 200, seed: int = 0, batch_size: int = 200) -> np.ndarray:
    """SHAP values ``(N, C, H, W)`` of the logit of ``classes`` (an int, or one class id per image) for each of
    ``images (N, C, H, W)``, with ``background (M, C, H, W)`` as the reference distribution (model inputs, i.e.
    already normalised as the model sees them). ``nsamples`` expected-gradient samples per image, drawn with
    ``seed``. The model is evaluated in eval mode and left in the mode it was in."""
    import shap

    if images.ndim != 4 or background.ndim != 4 or images.shape[1:] != background.shape[1:]:
        raise DuckInputError(f"images {tuple(images.shape)} and background {tuple(background.shape)} must both be "
                             "(N, C, H, W) with the same C, H, W")
    n = images.shape[0]
    per_image = np.broadcast_to(np.asarray(classes, dtype=np.int64), (n,)) if np.ndim(classes) == 0 \
        else np.asarray(classes, dtype=np.int64)
    if per_image.shape != (n,):
        raise DuckInputError(f"classes has {per_image.size} entries for {n} images; give one class or one per image")
    if isinstance(nsamples, bool) or not isinstance(nsamples, int) or nsamples < 1:
        raise DuckInputError(f"nsamples={nsamples!r} must be an integer >= 1 (expected-gradient samples per image)")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    with torch.no_grad():
        n_out = int(model(background[:1].to(device)).shape[1])
    bad = sorted({int(c) for c in per_image.tolist() if not 0 <= c < n_out})
    if bad:
        model.train(was_training)
        raise DuckInputError(f"classes {bad[:10]} are not outputs of this model (its logits are 0..{n_out - 1})")
    out = np.zeros(tuple(images.shape), dtype=np.float64)
    try:
        for c in np.unique(per_image).tolist():
            rows = np.flatnonzero(per_image == c)
            explainer = shap.GradientExplainer(_SelectLogit(model, c), background.to(device), batch_size=batch_size)
            phi = explainer.shap_values(images[rows].to(device), nsamples=nsamples, rseed=seed)
            phi = np.asarray(phi[0] if isinstance(phi, list) else phi)
            out[rows] = phi.reshape(len(rows), *images.shape[1:])  # drop the trailing single-output axis
    finally:
        model.train(was_training)
    return out


def region_mean(values: np.ndarray | torch.Tensor, mask: np.ndarray | torch.Tensor) -> np.ndarray:
    """Mean SHAP value inside a pixel region, per image (the statistic of seeds/003 §IV-J, Fig. 6B).

    ``values (N, C, H, W)`` or ``(C, H, W)``; ``mask (H, W)`` boolean. Averages over the region's pixels and
    every channel; returns ``(N,)`` (a 0-d array for one image)."""
    v = np.asarray(values.detach().cpu() if isinstance(values, torch.Tensor) else values, dtype=np.float64)
    m = np.asarray(mask.cpu() if isinstance(mask, torch.Tensor) else mask)
    if m.dtype != bool or m.ndim != 2 or v.shape[-2:] != m.shape:
        raise DuckInputError(f"mask must be a boolean (H, W) array matching the values' last two axes {v.shape[-2:]}, "
                             f"got {m.dtype} {m.shape}")
    if not m.any():
        raise DuckInputError("mask selects no pixel; a region mean needs at least one pixel")
    return v[..., m].mean(axis=(-2, -1))  # (..., C, P) -> mean over channels and region pixels
