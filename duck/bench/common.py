"""Helpers shared by benchmark suites: machine description, timing, mean (std), Markdown tables."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch


def machine_info() -> dict[str, Any]:
    """Hardware and versions, recorded in every ``bench.json``."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    return info


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued CUDA work so wall-clock timings are honest."""
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device | str | None = None) -> tuple[Any, float]:
    """Run ``fn()`` and return ``(result, seconds)`` with CUDA synchronised on both ends."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """Mean and sample standard deviation (ddof=1; 0 for a single value)."""
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "std": float(a.std(ddof=1)) if a.size > 1 else 0.0, "n": int(a.size)}


def fmt_mean_std(values: Sequence[float] | dict[str, float], digits: int = 3) -> str:
    """``"0.912 (0.004)"`` as in the papers' tables."""
    ms = values if isinstance(values, dict) else mean_std(values)
    return f"{ms['mean']:.{digits}f} ({ms['std']:.{digits}f})"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    out = ["| " + " | ".join(map(str, headers)) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(out)
