"""t-SNE maps of the feature space (seeds/003 §IV-I, Fig. 5A/B).

The paper fits one t-SNE (van der Maaten & Hinton 2008, its ref. [59]) per model on the backbone's
embeddings: before unlearning every class forms its own cluster; after DUCK the forget samples scatter over
the retain clusters. Here:

- the same **seeded stratified subsample** (at most ``max_points`` samples, every group -- each retain class
  and the forget set -- keeps its share and at least one point) is drawn once and used for every model, so
  the panels show the same samples;
- each model gets its **own** t-SNE fit (``sklearn.manifold.TSNE``, PCA initialisation, ``random_state =
  seed``), as in the paper: t-SNE coordinates of different fits are not comparable, only their structure;
- a model whose embeddings of the subsample are all equal (a collapsed network) gets no map (``coords`` lacks
  it, ``skipped`` says why): t-SNE's PCA initialisation divides by their zero spread (scikit-learn then
  crashes the process);
- the figure is drawn by the report (:func:`duck.report.plots.tsne_panels_png`); this module computes only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int, check_seed


@dataclass
class TSNEPanels:
    """The t-SNE maps of several models on one subsample."""

    index: np.ndarray  # (m,) rows of the input embeddings that were drawn, sorted
    coords: dict[str, np.ndarray]  # model -> (m, 2)
    labels: np.ndarray  # (m,) class of each drawn sample
    is_forget: np.ndarray  # (m,) bool
    skipped: dict[str, str]  # model -> why it has no map (collapsed embeddings)


def stratified_subsample(groups: Any, max_points: int, seed: int = 0) -> np.ndarray:
    """Sorted indices of at most ``max_points`` samples, drawn without replacement with a seeded generator;
    each group gets ``max_points * size / N`` samples (largest remainders round up) and at least one, so that
    every group is present (``max_points`` must be at least the number of groups)."""
    g = np.asarray(groups, dtype=object).reshape(-1)
    max_points = check_positive_int(max_points, "max_points", 2)
    seed = check_seed(seed, "seed")
    names, inverse, sizes = np.unique(g.astype(str), return_inverse=True, return_counts=True)
    if max_points >= len(g):
        return np.arange(len(g))
    if max_points < len(names):
        raise DuckInputError(f"max_points={max_points} is fewer than the {len(names)} groups; raise it so that "
                             "every group is drawn")
    quota = max_points * sizes / len(g)
    take = np.maximum(1, np.floor(quota).astype(int))
    order = np.argsort(-(quota - np.floor(quota)), kind="stable")  # largest remainders first
    for i in order:
        if take.sum() >= max_points:
            break
        if take[i] < sizes[i]:
            take[i] += 1
    while take.sum() > max_points:  # the at-least-one floor overshot: trim the largest groups
        take[np.argmax(take)] -= 1
    rng = np.random.default_rng(seed)
    picked = [rng.choice(np.flatnonzero(inverse == k), take[k], replace=False) for k in range(len(names))]
    return np.sort(np.concatenate(picked))


def collapsed(z: np.ndarray) -> bool:
    """All rows of ``z`` equal: no spread for t-SNE's PCA initialisation to scale by."""
    return bool(len(z) == 0 or (z == z[:1]).all())


def check_tsne_seed(seed: Any, name: str = "seed") -> int:
    """A seed scikit-learn's ``random_state`` accepts: an integer in ``[0, 2^32 - 1]``."""
    seed = check_seed(seed, name)
    if seed > 2**32 - 1:
        raise DuckInputError(f"{name}={seed} is too large for t-SNE (scikit-learn's random_state); use an integer in "
                             "[0, 2^32 - 1]")
    return seed


def tsne_coordinates(embeddings: Any, *, perplexity: float = 30.0, seed: int = 0) -> np.ndarray:
    """One t-SNE fit: ``(m, D)`` embeddings -> ``(m, 2)`` coordinates (deterministic for a fixed ``seed``)."""
    from sklearn.manifold import TSNE

    z = np.asarray(embeddings, dtype=np.float64)
    if z.ndim != 2 or not np.isfinite(z).all():
        raise DuckInputError(f"t-SNE needs a finite (m, D) matrix, got shape {z.shape} "
                             f"{'with NaN/inf values' if z.ndim == 2 else ''}")
    if collapsed(z):
        raise DuckInputError(f"t-SNE needs points that differ; all {len(z)} rows are equal (a collapsed model)")
    seed = check_tsne_seed(seed)
    perplexity = check_number(perplexity, "perplexity", 0.0, True)
    if perplexity >= len(z):
        raise DuckInputError(f"perplexity={perplexity:g} must be below the number of points ({len(z)}); lower it")
    tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed)
    return tsne.fit_transform(z).astype(np.float64)


def tsne_panels(embeddings: Mapping[str, Any], labels: Any, is_forget: Any, *, max_points: int = 1000,
                perplexity: float = 30.0, seed: int = 0) -> TSNEPanels:
    """A t-SNE map per model (Fig. 5A/B) on one stratified subsample of the samples, and their figure.

    ``embeddings``: model -> ``(N, D_model)`` with rows in the same sample order; ``labels`` ``(N,)`` classes;
    ``is_forget`` ``(N,)`` forget flags. Groups for the stratification: each retain class and the forget set."""
    from duck.analysis.density import group_labels

    groups = group_labels(labels, is_forget)
    for name, z in embeddings.items():
        if len(z) != len(groups):
            raise DuckInputError(f"{name} embeddings have {len(z)} rows but {len(groups)} labels were given")
    seed = check_tsne_seed(seed)
    index = stratified_subsample(groups, max_points, seed)
    coords, skipped = {}, {}
    for name, z in embeddings.items():
        points = np.asarray(z, dtype=np.float64)[index]
        if collapsed(points):
            skipped[name] = f"all {len(points)} embeddings are equal (a collapsed model): no t-SNE map"
        else:
            coords[name] = tsne_coordinates(points, perplexity=perplexity, seed=seed)
    y, forget = np.asarray(labels).reshape(-1)[index], np.asarray(is_forget, dtype=bool).reshape(-1)[index]
    return TSNEPanels(index=index, coords=coords, labels=y, is_forget=forget, skipped=skipped)
