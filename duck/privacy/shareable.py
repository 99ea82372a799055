"""Shareable (differentially private) statistics about forgotten samples for the audit report.

Question answered: *in one model's embedding space, how many forget samples are distance-based outliers
with respect to the retain samples, and along which principal directions do they stand out?* An unlearned
model should make forget samples look like a retrained model does; the numbers are released under DP so
that the report can go to a third party without exposing individual forget samples.

Procedure (:func:`shareable_outlier_statistics`):

1. PCA fitted on the **retain** embeddings only; both sets are projected on the top ``n_components``
   directions and divided by the retain standard deviation of each component (unit variance on retain).
   ``r`` is therefore a number of retain standard deviations (``dist_S`` of the paper, seeds/004 §3.1,
   already divides by ``sqrt(|S|)``): a data-independent scale set in the config, not tuned on the data.
2. A forget sample ``f`` is an outlier in subspace ``S`` when fewer than ``k`` retain samples lie within
   ``r`` of it: ``|{y in retain : dist_S(f, y) <= r}| < k`` (the paper's Definition 8 with the retain set
   as the reference population).
3. The count over all ``n_components`` is released with the Gaussian mechanism (global sensitivity 1,
   analytic calibration of Balle & Wang 2018); the top-h principal subspaces (``subspace_dim``-dimensional
   coordinate subspaces of the PCA space) holding the most forget outliers are released with the
   exponential mechanism, h draws without replacement (paper Algorithm 3), utility = the subspace's count.

Privacy accounting. Protected individuals: the forget samples. Neighbouring inputs: two forget sets that
differ in one sample (replacement; ``n_forget`` is public, as it already is in metrics.json), with the
retain embeddings and the model fixed. Each forget sample's outlier status depends only on itself and the
retain set (the PCA is fitted on retain only), so every count -- the full-space one and each subspace's --
changes by at most 1: sensitivity 1 (no smooth sensitivity is needed, unlike the paper's self-referential
count). The call spends ``eps * count_share`` (with ``delta``) on the count and the rest (pure DP) on the
subspaces: ``(eps, delta)`` in total by sequential composition. Calling it for the original, retrained and
unlearned models spends ``(3 eps, 3 delta)``; pass ``eps/3``, ``delta/3`` for a total budget.

Not protected: the retain samples (PCA statistics such as the explained-variance ratios are released) and
the model itself. The guarantee is conditional on the embedding function: a model trained on the forget
samples (the original) depends on them, and that dependence is outside this statistic's guarantee. The
returned dict holds only released values, public parameters and noise scales -- never the true counts.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from duck.errors import DuckInputError
from duck.privacy.mechanisms import (
    Seed,
    check_delta,
    check_eps,
    gaussian_mechanism,
    make_generator,
    top_h_without_replacement,
)
from duck.privacy.neighbours import as_records, count_within, squared_radius, subspace_coordinates
from duck.privacy.outliers import all_subspaces
from duck.schema import SEED, Check, Either, Flag, Integer, Real, Settings, option, settings
from duck.utils import check_number, check_positive_int, check_radius


@settings
class ShareableSettings(Settings):
    """``report.shareable``: the DP outlier statistics of the report (conf/report/default.yaml; seeds/004). Bounds
    that depend on the data (``n_components`` against the embedding dimension, ``k`` against the retain samples)
    are checked by :func:`shareable_outlier_statistics` and, before any work, by the job."""

    prefix: ClassVar[str] = "report.shareable"

    enabled: bool = option(False, Flag(), "release the DP outlier statistics in the report")
    eps: float = option(1.0, Real(0.0, True), "total ε over all audited models (split equally)")
    delta: float = option(1e-5, Check(check_delta, "a number in (0, 1), at least 1e-300"), "total δ (split equally)")
    k: int = option(5, Integer(1), "outlier: fewer than k retain samples within r")
    r: float = option(0.5, Check(check_radius, "a number in (0, 1e150]"), "radius in retain standard deviations")
    n_components: int = option(4, Integer(1), "PCA components of the retain embeddings")
    h: int = option(2, Integer(1), "top-h subspaces released (at most n_components)")
    max_retain: int = option(5000, Integer(1), "retain samples of the reference population (seeded subset)")
    seed: int | None = option(None, Either((None,), SEED), "null: fresh noise each run (an integer for tests only)")

    def __post_init__(self) -> None:
        if self.h > self.n_components:
            raise DuckInputError(f"{self.prefix}.h={self.h} exceeds {self.prefix}.n_components={self.n_components} "
                                 "(the candidate subspaces); lower h")


def check_squares_finite(emb: torch.Tensor, name: str) -> None:
    """The PCA and the distances square the embeddings: refuse values whose squares overflow float64."""
    if not torch.isfinite(emb.square().sum()):
        raise DuckInputError(
            f"{name} is too large for float64: its squared norms overflow (largest |value| "
            f"{float(emb.abs().max()):.3g}); rescale the embeddings"
        )


def retain_pca(retain: torch.Tensor, n_components: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """PCA of the retain embeddings: ``(mean (D,), components (D, c), std (c,), explained_ratio (c,))``."""
    mean = retain.mean(0)
    centred = retain - mean  # (n_r, D)
    cov = centred.T @ centred / max(1, retain.shape[0] - 1)  # (D, D)
    eigvals, eigvecs = torch.linalg.eigh(cov)  # ascending
    order = torch.argsort(eigvals, descending=True)[:n_components]
    top = eigvals[order].clamp_min(0.0)
    if top[-1] <= 1e-12 * max(float(top[0]), 1e-300):
        raise DuckInputError(
            f"the retain embeddings span fewer than n_components={n_components} directions "
            f"(component variances {top.tolist()}); lower n_components"
        )
    total = eigvals.clamp_min(0.0).sum()
    return mean, eigvecs[:, order], top.sqrt(), top / total


def forget_outlier_counts(
    forget: torch.Tensor,
    retain: torch.Tensor,
    *,
    k: int,
    r: float,
    n_components: int,
    subspaces: list[tuple[int, ...]],
) -> tuple[int, torch.Tensor, torch.Tensor]:
    """True (non-private) counts: forget outliers in the full PCA space and in each subspace.

    Returns ``(count, subspace_counts (n_subspaces,) int64, explained_variance_ratio (c,))``. Internal to
    :func:`shareable_outlier_statistics`; its results must never be published as they are.
    """
    mean, components, std, explained = retain_pca(retain, n_components)
    z_retain = (retain - mean) @ components / std  # (n_r, c)
    z_forget = (forget - mean) @ components / std  # (n_f, c)

    def outliers_in(S: tuple[int, ...]) -> int:
        within = count_within(subspace_coordinates(z_forget, S), subspace_coordinates(z_retain, S),
                              squared_radius(r, S))  # (n_f,)
        return int((within < k).sum())

    full = outliers_in(tuple(range(n_components)))
    per_subspace = torch.tensor([outliers_in(S) for S in subspaces], dtype=torch.int64, device="cpu")  # not the default device
    return full, per_subspace, explained


def shareable_outlier_statistics(
    forget_emb: Any,
    retain_emb: Any,
    *,
    eps: float,
    delta: float,
    k: int,
    r: float,
    n_components: int,
    h: int,
    subspace_dim: int = 1,
    count_share: float = 0.5,
    seed: Seed = None,
    device: Any = "auto",
    prefix: str = "",
) -> dict[str, Any]:
    """DP count of forget samples that are outliers among the retain samples, and DP top-h subspaces.

    forget_emb (n_f, D), retain_emb (n_r, D): numpy or torch embeddings from the same model. See the module
    docstring for what is protected. Returns a JSON-able dict (released values and parameters only).
    ``prefix`` (e.g. ``"report.shareable."``) qualifies the option names in error messages.
    """
    eps = check_eps(eps)
    delta = check_delta(delta)
    k = check_positive_int(k, "k")
    r = check_radius(r)
    n_components = check_positive_int(n_components, "n_components")
    h = check_positive_int(h, "h")
    subspace_dim = check_positive_int(subspace_dim, "subspace_dim")
    count_share = check_number(count_share, "count_share", 0.0, True, 1.0, True)
    eps_count, eps_subspaces = check_eps(eps * count_share), check_eps(eps * (1.0 - count_share))
    gen = make_generator(seed)
    forget = as_records(forget_emb, device, name="forget_emb")
    retain = as_records(retain_emb, forget.device, name="retain_emb")
    n_forget, dim = forget.shape
    n_retain = retain.shape[0]
    if retain.shape[1] != dim:
        raise DuckInputError(
            f"forget_emb has {dim} features but retain_emb has {retain.shape[1]}; pass embeddings of one model"
        )
    if n_components > min(dim, n_retain - 1):
        raise DuckInputError(
            f"{prefix}n_components={n_components} exceeds min(embedding dim {dim}, n_retain - 1 = {n_retain - 1})"
        )
    if k > n_retain:
        raise DuckInputError(f"{prefix}k={k} exceeds the number of retain samples ({n_retain}); lower k")
    if subspace_dim > n_components:
        raise DuckInputError(f"subspace_dim={subspace_dim} exceeds n_components={n_components}")
    subspaces = all_subspaces(n_components, subspace_dim)
    if h > len(subspaces):
        raise DuckInputError(f"{prefix}h={h} exceeds the number of candidate subspaces ({len(subspaces)}); lower h")
    check_squares_finite(forget, "forget_emb")
    check_squares_finite(retain, "retain_emb")

    true_count, subspace_counts, explained = forget_outlier_counts(
        forget, retain, k=k, r=r, n_components=n_components, subspaces=subspaces
    )
    count = gaussian_mechanism(true_count, 1.0, eps_count, delta, calibration="analytic", seed=gen)
    picked = top_h_without_replacement(subspace_counts.double(), h, eps_subspaces, 1.0, seed=gen)
    chosen = [list(subspaces[i]) for i in picked]
    return {
        "count": {
            "value": count.value,
            "value_clipped": int(min(max(round(count.value), 0), n_forget)),
            "sigma": count.sigma,
            "sensitivity": 1,
            "eps": eps_count,
            "delta": delta,
            "mechanism": "gaussian (global sensitivity 1, analytic calibration)",
        },
        "top_subspaces": {
            "subspaces": chosen,
            "names": ["+".join(f"PC{i + 1}" for i in S) for S in chosen],
            "n_candidates": len(subspaces),
            "subspace_dim": subspace_dim,
            "eps": eps_subspaces,
            "sensitivity": 1,
            "mechanism": "exponential mechanism, top-h without replacement (eps/h per draw)",
        },
        "params": {"eps": eps, "delta": delta, "k": k, "r": r, "n_components": n_components, "h": h,
                   "count_share": count_share, "r_unit": "retain standard deviations (dist_S)"},
        "n_forget": n_forget,
        "n_retain": n_retain,
        "pca": {"fitted_on": "retain", "explained_variance_ratio": explained.tolist()},
        "privacy": {
            "protected": "forget samples (neighbouring = one forget sample replaced)",
            "not_protected": "retain samples, the model, n_forget",
            "total_eps": eps,
            "total_delta": delta,
        },
    }
