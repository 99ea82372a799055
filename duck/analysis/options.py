"""The ``report.analysis`` options (conf/report/default.yaml), checked before any work."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from duck.analysis.tsne import check_tsne_seed
from duck.errors import DuckInputError
from duck.schema import Check, Either, Flag, Group, Integer, Real, Settings, option, settings


@settings
class DensitySettings(Settings):
    """``report.analysis.density``: the cluster density of Eq. 9 (seeds/003 §IV-I)."""

    prefix: ClassVar[str] = "report.analysis.density"

    variance: float = option(0.95, Real(0.0, True, 1.0), "PCA dims: fewest components explaining this share of the "
                                                         "original model's variance")
    coverage: float = option(0.95, Real(0.0, True, 1.0), "r_c: radius around the centroid holding this share of the "
                                                         "cluster")
    n_components: int | None = option(None, Either((None,), Integer(1), "an integer >= 1, or null for the variance rule"),
                                      "an integer overrides the variance rule")


@settings
class TSNESettings(Settings):
    """``report.analysis.tsne``: one t-SNE map per audited model."""

    prefix: ClassVar[str] = "report.analysis.tsne"

    enabled: bool = option(True, Flag(), "draw the t-SNE maps")
    max_points: int = option(1000, Integer(2), "seeded stratified subsample")
    perplexity: float = option(30.0, Real(0.0, True), "t-SNE's perplexity (below the number of points)")
    seed: int = option(0, Check(check_tsne_seed, "an integer in [0, 4294967295] (scikit-learn's random_state)"),
                       "seed of the subsample and the map")


@settings
class AnalysisSettings(Settings):
    """``report.analysis``: the report's feature-space section (docs/analysis.md). Bounds that depend on the data
    are checked by :func:`check_analysis_data`."""

    prefix: ClassVar[str] = "report.analysis"

    enabled: bool = option(False, Flag(), "the feature-space section (not differentially private)")
    density: DensitySettings = option(DensitySettings(), Group(DensitySettings), "cluster densities")
    tsne: TSNESettings = option(TSNESettings(), Group(TSNESettings), "t-SNE maps")


def check_analysis_data(options: Mapping[str, Any], group_sizes: Mapping[str, int], dim: int,
                        prefix: str = "report.analysis") -> None:
    """The data-dependent bounds, before any work: ``density.n_components`` <= the embedding dimension and
    <= N - 1; t-SNE's perplexity below its number of points and ``max_points`` >= the number of groups
    (stratification). Groups of fewer than 2 samples are fine: they get no density (``cluster_densities``)."""
    if not options.get("enabled"):
        return
    n_total = sum(group_sizes.values())
    n_comp = options["density"]["n_components"]
    if n_comp is not None and n_comp > min(dim, n_total - 1):
        raise DuckInputError(f"{prefix}.density.n_components={n_comp} exceeds min(embedding dim {dim}, "
                             f"N - 1 = {n_total - 1}); lower it")
    tsne = options["tsne"]
    if tsne["enabled"]:
        points = min(tsne["max_points"], n_total)
        if tsne["max_points"] < len(group_sizes):
            raise DuckInputError(f"{prefix}.tsne.max_points={tsne['max_points']} is fewer than the "
                                 f"{len(group_sizes)} groups (classes + forget); raise it")
        if tsne["perplexity"] >= points:
            raise DuckInputError(f"{prefix}.tsne.perplexity={tsne['perplexity']:g} must be below the {points} "
                                 "points of the t-SNE; lower it")
