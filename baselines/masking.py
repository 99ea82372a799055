"""Frozen parameter entries, enforced by restoring their values after every optimiser step.

Zeroing the gradients of "frozen" entries is not enough: SGD momentum keeps moving them with the velocity of
earlier steps, weight decay (coupled or decoupled) shrinks them, and Adam's moment estimates keep stepping them
(ALGORITHMS.md §3). :class:`FrozenEntries` snapshots the values to keep and writes them back after each
``optimizer.step()``, so they are exact whatever the optimiser does.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

from duck.errors import DuckInputError


class FrozenEntries:
    """Entries ``param[mask]`` of some parameters held at fixed values.

    Args:
        entries: ``(parameter, bool mask of the same shape)`` pairs; ``mask=None`` freezes the whole tensor.
        values: optional values to hold (same shapes as the parameters); default: the current values.
    """

    def __init__(self, entries: Iterable[tuple[nn.Parameter, torch.Tensor | None]],
                 values: Iterable[torch.Tensor] | None = None) -> None:
        self.params: list[nn.Parameter] = []
        self.masks: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        value_list = list(values) if values is not None else None
        for k, (p, mask) in enumerate(entries):
            mask = torch.ones_like(p, dtype=torch.bool) if mask is None else mask.to(p.device, torch.bool)
            if mask.shape != p.shape:
                raise DuckInputError(f"frozen mask of shape {tuple(mask.shape)} does not match parameter "
                                     f"{tuple(p.shape)}; give one boolean entry per parameter entry")
            value = p.detach().clone() if value_list is None else value_list[k].detach().to(p.device, p.dtype).clone()
            self.params.append(p)
            self.masks.append(mask)
            self.values.append(value)

    @torch.no_grad()
    def restore(self) -> None:
        """Write the frozen values back (call after every optimiser step)."""
        for p, mask, value in zip(self.params, self.masks, self.values, strict=True):
            if mask.device != p.device:  # the module moved (e.g. to the GPU) after the snapshot
                mask, value = mask.to(p.device), value.to(p.device)
            p.copy_(torch.where(mask, value, p))

    def count(self) -> int:
        """Number of frozen scalar entries."""
        return int(sum(int(m.sum()) for m in self.masks))

    @torch.no_grad()
    def max_deviation(self) -> float:
        """``max |param − frozen value|`` over the frozen entries (0.0 when enforced)."""
        devs = [(p.detach() - v.to(p.device)).abs()[m.to(p.device)].max() for p, m, v in
                zip(self.params, self.masks, self.values, strict=True) if bool(m.any())]
        return float(max(devs)) if devs else 0.0
