"""The ``report.analysis`` options (conf/report/default.yaml), checked before any work."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from duck.analysis.tsne import check_tsne_seed
from duck.errors import DuckInputError
from duck.utils import check_bool, check_number, check_positive_int

#: the options of ``report.analysis`` and of its sub-blocks
ANALYSIS_OPTIONS = {"enabled": None, "density": ("variance", "coverage", "n_components"),
                    "tsne": ("enabled", "max_points", "perplexity", "seed")}


def _block(cfg: Any, prefix: str, known: tuple[str, ...] | list[str]) -> dict[str, Any]:
    if cfg is None:
        cfg = {}
    if not isinstance(cfg, Mapping):
        raise DuckInputError(f"{prefix}={cfg!r} must be a mapping of options {list(known)}")
    unknown = sorted(set(cfg) - set(known))
    if unknown:
        raise DuckInputError(f"unknown {prefix} option(s) {unknown}; known: {list(known)}")
    missing = [key for key in known if key not in cfg]
    if missing:
        raise DuckInputError(f"{prefix} is missing option(s) {missing}")
    return dict(cfg)


def check_analysis_cfg(cfg: Any, prefix: str = "report.analysis") -> dict[str, Any]:
    """The ``report.analysis`` settings with numbers converted; a ``DuckInputError`` naming ``prefix.key`` and
    the value otherwise: ``enabled`` a bool; ``density.variance`` and ``density.coverage`` in ``(0, 1]``;
    ``density.n_components`` null or an integer >= 1; ``tsne.enabled`` a bool; ``tsne.max_points`` an integer
    >= 2; ``tsne.perplexity > 0``; ``tsne.seed`` an integer in ``[0, 2^32 - 1]`` (scikit-learn's bound).
    Absent ``report.analysis``: disabled. Bounds that depend on the data are checked by :func:`check_analysis_data`."""
    if cfg is None:
        return {"enabled": False}
    out = _block(cfg, prefix, list(ANALYSIS_OPTIONS))
    out["enabled"] = check_bool(out["enabled"], f"{prefix}.enabled")
    density = out["density"] = _block(out["density"], f"{prefix}.density", ANALYSIS_OPTIONS["density"])
    for key in ("variance", "coverage"):
        density[key] = check_number(density[key], f"{prefix}.density.{key}", 0.0, True, 1.0)
    if density["n_components"] is not None:
        density["n_components"] = check_positive_int(density["n_components"], f"{prefix}.density.n_components")
    tsne = out["tsne"] = _block(out["tsne"], f"{prefix}.tsne", ANALYSIS_OPTIONS["tsne"])
    tsne["enabled"] = check_bool(tsne["enabled"], f"{prefix}.tsne.enabled")
    tsne["max_points"] = check_positive_int(tsne["max_points"], f"{prefix}.tsne.max_points", 2)
    tsne["perplexity"] = check_number(tsne["perplexity"], f"{prefix}.tsne.perplexity", 0.0, True)
    tsne["seed"] = check_tsne_seed(tsne["seed"], f"{prefix}.tsne.seed")
    return out


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
