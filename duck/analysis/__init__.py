"""Analysis (seeds/003 §IV-I/J): cluster density (Eq. 9) and t-SNE maps of the embeddings; SHAP attribution
maps and region means (the bias-removal experiment, ``duck-bench bias``).

Exports are resolved lazily so that importing :mod:`duck.analysis` imports neither torch's linear algebra
nor scikit-learn nor matplotlib.
"""

from __future__ import annotations

import lazy_loader

_LAZY = {
    "options": ["AnalysisSettings"],
    "density": ["cluster_densities", "components_for_variance", "group_labels", "log_ball_volume", "model_densities"],
    "shap_maps": ["region_mean", "shap_values"],
    "tsne": ["stratified_subsample", "tsne_panels"],
}

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_LAZY)
