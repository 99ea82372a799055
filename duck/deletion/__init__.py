"""Exactly-deletable classical models as torch ops (CPU or GPU).

Names are resolved lazily (PEP 562) so that importing one model does not import the others.
This package imports nothing from the deep-learning side of duck-unlearn.
"""

from __future__ import annotations

import lazy_loader

_LAZY = {
    "kmeans_pp": ["KMeansPP"],
    "qkmeans": ["QKMeans"],
    "dckmeans": ["DCKMeans"],
    "spn": ["SPN", "learn_spn"],
    "lsh": ["LSHIndex"],
}

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_LAZY)
