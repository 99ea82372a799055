"""Membership-inference audits (ALGORITHMS.md §4): LiRA with a cached, batched shadow bank, the SVM MIA,
ROC metrics with confidence intervals, and :func:`audit_models`, which the CLIs call.

Names are resolved lazily (PEP 562): importing :mod:`attacks` imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "audit_models": "attacks.audit",
    "AuditSettings": "attacks.audit",
    "ShadowBank": "attacks.shadow",
    "keep_matrix": "attacks.shadow",
    "train_batched": "attacks.batched",
    "lira_phi": "attacks.lira",
    "lira_scores": "attacks.lira",
    "roc_summary": "attacks.roc",
    "svm_mia": "attacks.svm_mia",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attacks' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
