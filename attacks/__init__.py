"""Membership-inference audits (ALGORITHMS.md §4): LiRA with a cached, batched shadow bank, the SVM MIA,
ROC metrics with confidence intervals, and :func:`audit_models`, which the CLIs call.

Names are resolved lazily (PEP 562): importing :mod:`attacks` imports neither torch nor scikit-learn.
"""

from __future__ import annotations

from duck._lazy import lazy_exports

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

__getattr__, __dir__, __all__ = lazy_exports("attacks", _LAZY)
