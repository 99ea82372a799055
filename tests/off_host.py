"""A CPU tensor that reports itself off the host, for the branches written for device storage.

Code that keeps data on a GPU often takes a host shortcut for CPU tensors (``if t.is_cpu: numpy view ... else:
torch indexing``). On a CPU-only machine the device branch never runs; ``t.as_subclass(OffHost)`` makes ``is_cpu``
``False`` while the numbers stay on the CPU, so the device branch runs here and can be checked against the host
path on the same data (issue 39: mutants of those branches otherwise count as "CUDA-only")."""

from __future__ import annotations

import torch


class OffHost(torch.Tensor):
    @property
    def is_cpu(self) -> bool:
        return False
