"""Cluster density of the feature space (seeds/003 §IV-I, Eq. 9; Fig. 5C).

The paper embeds the training samples with the backbone (the layer before the classifier), reduces the
embeddings with PCA to the ``n`` principal components that explain 95 % of the variance, and scores each
cluster (a class, or the forget set) by

    density_c = #{z in c : ||z - mu_c|| <= r_c} / V_n(r_c),   V_n(r) = pi^(n/2) r^n / Gamma(n/2 + 1)   (Eq. 9)

where ``mu_c`` is the cluster's centroid and ``r_c`` the radius of the n-sphere around it holding 95 % of
the cluster (``coverage``). A forgotten class whose samples scatter over the other clusters after
unlearning gets a larger sphere and so a lower density.

Choices this implementation makes (the paper leaves them open):

- **PCA dimension shared across models.** ``n`` is chosen once, on the *reference* model's embeddings
  (the original model in the audit), as the smallest number of components whose explained-variance ratios
  sum to at least ``variance``; every other model is reduced to the same ``n`` (each with a PCA fitted to
  its own embeddings: different networks have unrelated coordinate systems). Densities carry units of
  ``length^-n``, so they are comparable between models only at equal ``n``. ``n_components`` overrides the
  choice.
- **Radius.** ``r_c`` is the ``ceil(coverage * m_c)``-th smallest centroid distance of the ``m_c`` points
  (the smallest sphere holding at least that fraction); the count is every point within it (ties included).
- **Log space.** ``V_n`` under- or overflows float64 for ``n`` of a few hundred, so the density is computed
  as ``log10(count) - log10 V_n(r)`` with ``lgamma``; reports show ``log10_density``.
- **Degenerate groups.** A group with fewer than 2 points, or whose radius is 0 (its points coincide), has no
  finite density. :func:`cluster_density` (one group) raises :class:`~duck.errors.DuckInputError` naming it;
  :func:`cluster_densities` (every group of a model, what the audit calls) records it with
  ``log10_density = None`` and a ``note``, so that a deletion request of a single sample (a forget "group"
  of 1) still gets its report: the other groups' densities and the t-SNE maps are unaffected.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int

FORGET_GROUP = "forget"


def log_ball_volume(n: int, r: float) -> float:
    """Natural log of ``V_n(r) = pi^(n/2) r^n / Gamma(n/2 + 1)``, the volume of the n-ball of radius ``r``
    (Eq. 9's denominator); finite for any ``n`` and ``r > 0`` (``-inf`` at ``r = 0``)."""
    n = check_positive_int(n, "n")
    if r == 0:
        return -math.inf
    return 0.5 * n * math.log(math.pi) + n * math.log(r) - math.lgamma(0.5 * n + 1.0)


def check_fraction(value: Any, name: str) -> float:
    """A fraction in ``(0, 1]`` (``variance``, ``coverage``), else a ``DuckInputError`` naming it."""
    return check_number(value, name, 0.0, True, 1.0)


def group_labels(labels: Any, is_forget: Any) -> np.ndarray:
    """Each sample's group (``(N,)`` strings): ``"forget"`` for a forget sample, ``"class_<y>"`` for a retain
    sample of class ``y`` (seeds/003 §IV-I: every retain class and the forget set)."""
    y, f = np.asarray(labels).reshape(-1), np.asarray(is_forget, dtype=bool).reshape(-1)
    if len(y) != len(f):
        raise DuckInputError(f"{len(y)} labels but {len(f)} forget flags; pass one of each per sample")
    return np.where(f, FORGET_GROUP, np.char.add("class_", y.astype(str))).astype(object)


def _as_embeddings(embeddings: Any, name: str) -> torch.Tensor:
    z = torch.as_tensor(embeddings).detach().to("cpu", torch.float64)
    if z.ndim != 2 or z.shape[0] < 2:
        raise DuckInputError(f"{name} must be a (N, D) matrix with N >= 2, got shape {tuple(z.shape)}")
    if not torch.isfinite(z).all():
        bad = (~torch.isfinite(z)).any(1).nonzero().flatten()[:5].tolist()
        raise DuckInputError(f"{name} contains NaN or inf values (first bad rows: {bad}); clean or drop them")
    return z


def explained_variance_ratio(embeddings: Any, name: str = "embeddings") -> np.ndarray:
    """PCA explained-variance ratios of ``embeddings`` ``(N, D)``, largest first (``min(N, D)`` values)."""
    z = _as_embeddings(embeddings, name)
    s = torch.linalg.svdvals(z - z.mean(0))  # (min(N, D),)
    var = s.square()
    total = float(var.sum())
    if total <= 0.0:
        raise DuckInputError(f"{name} has zero variance (all rows equal); its PCA is undefined")
    return (var / total).numpy()


def components_for_variance(embeddings: Any, variance: float = 0.95, name: str = "embeddings") -> int:
    """Smallest ``n`` whose first ``n`` explained-variance ratios sum to ``>= variance`` (the paper's 95 %)."""
    variance = check_fraction(variance, "variance")
    cumulative = np.cumsum(explained_variance_ratio(embeddings, name))
    # a tolerance so that variance=1.0 is met despite rounding in the cumulative sum
    return int(min(np.searchsorted(cumulative, variance - 1e-12, side="left") + 1, len(cumulative)))


def pca_project(embeddings: Any, n_components: int, name: str = "embeddings") -> torch.Tensor:
    """Embeddings ``(N, D)`` projected on their own top ``n_components`` principal directions ``(N, n)``."""
    z = _as_embeddings(embeddings, name)
    n_components = check_positive_int(n_components, "n_components")
    if n_components > min(z.shape):
        raise DuckInputError(f"n_components={n_components} exceeds min(N, D) = {min(z.shape)} of {name}; lower it")
    centred = z - z.mean(0)
    _, _, vh = torch.linalg.svd(centred, full_matrices=False)  # vh: (min(N, D), D)
    return centred @ vh[:n_components].T  # (N, n)


def cluster_density(points: torch.Tensor, coverage: float = 0.95, group: str = "group") -> dict[str, float]:
    """Eq. 9 for one cluster ``points`` ``(m, n)``: ``{"n": m, "radius": r_c, "count": points within r_c,
    "log10_density": log10(count / V_n(r_c))}``."""
    coverage = check_fraction(coverage, "coverage")
    m, dim = points.shape
    if m < 2:
        raise DuckInputError(f"group {group!r} has {m} point(s); a cluster density needs >= 2 (its radius would "
                             "be 0)")
    dist = torch.linalg.vector_norm(points - points.mean(0), dim=1)  # (m,)
    k = max(1, math.ceil(coverage * m - 1e-9))  # points the sphere must hold
    radius = float(torch.sort(dist).values[k - 1])
    if radius <= 0.0:
        raise DuckInputError(f"group {group!r}: {k} of its {m} points coincide with its centroid (radius 0), so "
                             "its density is infinite; check the embeddings")
    count = int((dist <= radius).sum())
    log10_density = (math.log(count) - log_ball_volume(dim, radius)) / math.log(10.0)
    return {"n": int(m), "radius": radius, "count": count, "log10_density": log10_density}


def cluster_densities(embeddings: Any, groups: Any, *, n_components: int | None = None, variance: float = 0.95,
                      coverage: float = 0.95, name: str = "embeddings") -> tuple[int, dict[str, dict[str, float]]]:
    """Eq. 9 for every group of one model: ``(n, {group: cluster_density(...)})``.

    ``embeddings`` ``(N, D)``; ``groups`` ``(N,)`` one label per sample (see :func:`group_labels`). PCA to
    ``n_components`` dimensions, or, when None, to the smallest number explaining ``variance`` of the total
    variance (:func:`components_for_variance`)."""
    z = _as_embeddings(embeddings, name)
    coverage = check_fraction(coverage, "coverage")  # here, so that only degenerate groups are caught below
    g = np.asarray(groups, dtype=object).reshape(-1)
    if len(g) != z.shape[0]:
        raise DuckInputError(f"{name} has {z.shape[0]} rows but {len(g)} group labels were given; pass one per row")
    if n_components is None:
        n_components = components_for_variance(z, variance, name)
    projected = pca_project(z, n_components, name)  # (N, n)
    out = {}
    for group in sorted(set(g.tolist()), key=_group_order):
        points = projected[torch.from_numpy(g == group)]
        try:
            out[str(group)] = cluster_density(points, coverage, str(group))
        except DuckInputError as e:  # a degenerate group (module docstring): no density, the reason kept
            out[str(group)] = {"n": int(points.shape[0]), "radius": None, "count": int(points.shape[0]),
                               "log10_density": None, "note": str(e)}
    return int(n_components), out


def _group_order(group: Any) -> tuple[int, Any]:
    """Classes in numeric order, then ``forget`` (strings ``class_10`` after ``class_9``)."""
    text = str(group)
    if text.startswith("class_") and text[6:].lstrip("-").isdigit():
        return 0, int(text[6:])
    return (2, text) if text == FORGET_GROUP else (1, text)


def model_densities(embeddings: Mapping[str, Any], groups: Any, *, reference: str | None = None,
                    n_components: int | None = None, variance: float = 0.95, coverage: float = 0.95
                    ) -> dict[str, Any]:
    """Eq. 9 for several models on the same samples (the paper's original / retrained / unlearned, Fig. 5C).
    A collapsed model (all embeddings equal) gets no density for any group (``None`` + note); when it is the
    reference, ``n`` is chosen on the next model and ``note`` says so.

    ``embeddings``: model name -> ``(N, D_model)``, rows in the same sample order; ``groups`` ``(N,)``. The PCA
    dimension ``n`` is chosen on ``reference``'s embeddings (default: ``"original"`` when present, else the
    first model) and reused for all, so that the densities share their units. Returns
    ``{"n_components": n, "reference": name, "variance": .. (None when n_components is given), "coverage": ..,
    "models": {model: {group: ..}}}``."""
    if not embeddings:
        raise DuckInputError("no models given to model_densities")
    names: Sequence[str] = list(embeddings)
    if reference is None:
        reference = "original" if "original" in embeddings else names[0]
    if reference not in embeddings:
        raise DuckInputError(f"reference={reference!r} is not one of the models {list(names)}")
    variance, coverage = check_fraction(variance, "variance"), check_fraction(coverage, "coverage")
    chosen, note = n_components is None, None
    if chosen:  # a collapsed reference (all embeddings equal) has no PCA: the next model that varies chooses n
        for name in [reference, *(m for m in names if m != reference)]:
            if _as_embeddings(embeddings[name], f"{name} embeddings").var(0).sum() > 0:
                if name != reference:
                    note = f"the {reference} model's embeddings are all equal; n was chosen on the {name} model's"
                reference = name
                n_components = components_for_variance(embeddings[name], variance, f"{name} embeddings")
                break
        else:
            g = np.asarray(groups, dtype=object).reshape(-1)
            empty = {str(x): {"n": int((g == x).sum()), "radius": None, "count": int((g == x).sum()),
                              "log10_density": None, "note": "every model's embeddings are all equal"}
                     for x in sorted(set(g.tolist()), key=_group_order)}
            return {"n_components": None, "reference": reference, "variance": variance, "coverage": coverage,
                    "models": {name: dict(empty) for name in names},
                    "note": "every model's embeddings are all equal (collapsed models): no densities"}
    models = {name: cluster_densities(embeddings[name], groups, n_components=n_components, coverage=coverage,
                                      name=f"{name} embeddings")[1] for name in names}
    out = {"n_components": int(n_components), "reference": reference, "variance": variance if chosen else None,
           "coverage": coverage, "models": models}
    return out if note is None else {**out, "note": note}
