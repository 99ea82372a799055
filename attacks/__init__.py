"""The audit's one home: membership-inference audits (ALGORITHMS.md §4: LiRA with a cached, batched shadow bank,
the SVM MIA, ROC metrics with confidence intervals, :func:`audit_models`), the forgetting audit against retrained
models (§10-11: :mod:`attacks.forgetting_audit`, :mod:`attacks.ulira_audit`, :mod:`attacks.bank_shards`), whose
stages take an :class:`attacks.context.AuditContext` from the pipeline.

Names are resolved lazily (PEP 562): importing :mod:`attacks` imports neither torch nor scikit-learn.
"""

from __future__ import annotations

import lazy_loader

_LAZY = {
    "audit": ["AuditSettings", "audit_models"],
    "shadow": ["ShadowBank", "keep_matrix"],
    "batched": ["train_batched"],
    "lira": ["lira_phi", "lira_scores"],
    "roc": ["roc_summary"],
    "svm_mia": ["svm_mia"],
}

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_LAZY)
