"""Exactly-deletable classical models as torch ops (CPU or GPU).

Names are resolved lazily (PEP 562) so that importing one model does not import the others.
This package imports nothing from the deep-learning side of duck-unlearn.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "KMeansPP": "duck.deletion.kmeans_pp",
    "QKMeans": "duck.deletion.qkmeans",
    "DCKMeans": "duck.deletion.dckmeans",
    "learn_spn": "duck.deletion.spn",
    "SPN": "duck.deletion.spn",
    "LSHIndex": "duck.deletion.lsh",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'duck.deletion' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
