"""Batched train-time augmentations applied on the device, inside the training step.

Names (``data.augment``): ``crop`` (zero-pad by ``img_size // 8`` and take a random crop, the CIFAR recipe)
and ``flip`` (random horizontal flip); every data set takes them (``[]`` or ``null``: none). Randomness comes
from torch's global generator, which ``lightning.seed_everything`` seeds, so runs are reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from duck.errors import DuckInputError
from duck.schema import Check

AUGMENTATIONS = ("crop", "flip")


def check_augment(names: object, name: str = "data.augment") -> list[str]:
    """The augmentation names of ``names`` (a list; ``None`` = none) as a list, else a ``DuckInputError``
    naming the value: a single string (``data.augment=flip`` instead of ``[flip]``) or an unknown name."""
    if names is None:
        return []
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise DuckInputError(f"{name}={names!r} must be a list of augmentation names from {list(AUGMENTATIONS)}, "
                             f"e.g. {name}=[crop,flip], or {name}=[] for none")
    bad = [n for n in names if n not in AUGMENTATIONS]
    if bad:
        raise DuckInputError(f"unknown augmentation(s) {bad} in {name}; choose from {list(AUGMENTATIONS)}, "
                             f"e.g. {name}=[crop,flip], or {name}=[] for none")
    return list(names)


#: the ``data.augment`` option's rule (:mod:`duck.schema`)
AUGMENT = Check(check_augment, f"a list of augmentation names from {list(AUGMENTATIONS)}, or [] / null for none")


def random_flip(x: torch.Tensor) -> torch.Tensor:
    """Flip each image of ``x (B, C, H, W)`` left-right with probability 1/2."""
    mask = torch.rand(x.shape[0], device=x.device) < 0.5
    return torch.where(mask.view(-1, 1, 1, 1), x.flip(-1), x)


def random_crop(x: torch.Tensor, pad: int | None = None) -> torch.Tensor:
    """Zero-pad by ``pad`` and crop back to ``(H, W)`` at a random offset per image (one gather, no loop)."""
    b, c, h, w = x.shape
    pad = max(1, h // 8) if pad is None else pad
    xp = F.pad(x, (pad, pad, pad, pad))
    dy = torch.randint(0, 2 * pad + 1, (b,), device=x.device)
    dx = torch.randint(0, 2 * pad + 1, (b,), device=x.device)
    rows = (dy.view(b, 1) + torch.arange(h, device=x.device).view(1, h))  # (B, H)
    cols = (dx.view(b, 1) + torch.arange(w, device=x.device).view(1, w))  # (B, W)
    xp = xp.gather(2, rows.view(b, 1, h, 1).expand(b, c, h, w + 2 * pad))
    return xp.gather(3, cols.view(b, 1, 1, w).expand(b, c, h, w))


def apply_augment(x: torch.Tensor, names: Sequence[str]) -> torch.Tensor:
    """Apply the augmentations ``names`` (checked: an unknown name or a bare string is a DuckInputError, never
    read as a flip) to a batch ``x (B, C, H, W)``."""
    for name in check_augment(names, "augment"):
        x = random_crop(x) if name == "crop" else random_flip(x)
    return x
