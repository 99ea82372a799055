"""Exactly-deletable classical models as torch ops (CPU or GPU).

Names are resolved lazily (PEP 562) so that importing one model does not import the others.
This package imports nothing from the deep-learning side of duck-unlearn.
"""

from __future__ import annotations

from duck._lazy import lazy_exports

_LAZY = {
    "KMeansPP": "duck.deletion.kmeans_pp",
    "QKMeans": "duck.deletion.qkmeans",
    "DCKMeans": "duck.deletion.dckmeans",
    "learn_spn": "duck.deletion.spn",
    "SPN": "duck.deletion.spn",
    "LSHIndex": "duck.deletion.lsh",
}

__getattr__, __dir__, __all__ = lazy_exports("duck.deletion", _LAZY)
