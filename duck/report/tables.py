"""Plain-text tables shared by the job summaries, the sweep summary and the benchmark suites."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


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
