"""Analysis (seeds/003 §IV-I/J): cluster density (Eq. 9) and t-SNE maps of the embeddings; SHAP attribution
maps and region means (the bias-removal experiment, ``duck-bench bias``).

Exports are resolved lazily so that importing :mod:`duck.analysis` imports neither torch's linear algebra
nor scikit-learn nor matplotlib.
"""

from __future__ import annotations

from duck._lazy import lazy_exports

_LAZY = {
    "check_analysis_cfg": "duck.analysis.options",
    "cluster_densities": "duck.analysis.density",
    "components_for_variance": "duck.analysis.density",
    "group_labels": "duck.analysis.density",
    "log_ball_volume": "duck.analysis.density",
    "model_densities": "duck.analysis.density",
    "region_mean": "duck.analysis.shap_maps",
    "shap_values": "duck.analysis.shap_maps",
    "stratified_subsample": "duck.analysis.tsne",
    "tsne_panels": "duck.analysis.tsne",
}

__getattr__, __dir__, __all__ = lazy_exports("duck.analysis", _LAZY)
