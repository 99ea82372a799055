"""Feature-space analysis (seeds/003 §IV-I): cluster density (Eq. 9), the PCA dimension rule, t-SNE maps,
the report section and the ``report.analysis`` options."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from duck.analysis.density import (
    cluster_densities,
    cluster_density,
    components_for_variance,
    group_labels,
    log_ball_volume,
    model_densities,
)
from duck.analysis.options import AnalysisSettings, check_analysis_data
from duck.analysis.tsne import stratified_subsample, tsne_coordinates, tsne_panels
from duck.errors import DuckInputError

OPTIONS = {"enabled": True, "density": {"variance": 0.95, "coverage": 0.95, "n_components": None},
           "tsne": {"enabled": True, "max_points": 1000, "perplexity": 30.0, "seed": 0}}


def clusters(sizes: list[int], scales: list[float], dim: int = 6, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters around well-separated centres: ``(X (N, dim), labels (N,))``."""
    rng = np.random.default_rng(seed)
    xs = [rng.normal(size=(m, dim)) * s + 20.0 * rng.normal(size=dim) for m, s in zip(sizes, scales, strict=True)]
    return np.concatenate(xs), np.repeat(np.arange(len(sizes)), sizes)


@pytest.mark.parametrize("n, volume", [(1, lambda r: 2 * r), (2, lambda r: math.pi * r**2),
                                       (3, lambda r: 4 / 3 * math.pi * r**3)])
@pytest.mark.parametrize("r", [0.3, 1.0, 2.5])
def test_ball_volume_closed_forms(n, volume, r):
    assert math.exp(log_ball_volume(n, r)) == pytest.approx(volume(r), rel=1e-12)


def test_ball_volume_is_finite_in_high_dimension():
    # V_200(1) ~ 1e-107 and V_200(10) ~ 1e93: both ends leave float64's comfortable range in direct form
    lv1, lv10 = log_ball_volume(200, 1.0), log_ball_volume(200, 10.0)
    assert math.isfinite(lv1) and math.isfinite(lv10)
    assert lv10 - lv1 == pytest.approx(200 * math.log(10.0))  # V_n(r) scales as r^n
    expected = 100 * math.log(math.pi) - math.lgamma(101.0)  # pi^100 / 100!
    assert lv1 == pytest.approx(expected)


def brute_force(points: np.ndarray, coverage: float) -> tuple[float, int, float]:
    """Radius, count and log10 density of one cluster, the slow way (float64, direct V_n for small n)."""
    d = np.sqrt(((points - points.mean(0)) ** 2).sum(1))
    for r in np.sort(d):  # the smallest radius holding the coverage
        if (d <= r).mean() >= coverage:
            break
    n = points.shape[1]
    count = int((d <= r).sum())
    return float(r), count, math.log10(count / (math.pi ** (n / 2) * r**n / math.gamma(n / 2 + 1)))


def test_density_matches_brute_force_on_random_clusters():
    from sklearn.decomposition import PCA

    x, y = clusters([40, 57, 23], [1.0, 0.5, 2.0])
    groups = group_labels(y, y == 2)
    n, dens = cluster_densities(x, groups, n_components=3, coverage=0.9)
    projected = PCA(n_components=3).fit_transform(x)  # sign flips do not change distances
    assert n == 3 and list(dens) == ["class_0", "class_1", "forget"]
    for name, mask in (("class_0", y == 0), ("class_1", y == 1), ("forget", y == 2)):
        r, count, log10_density = brute_force(projected[mask], 0.9)
        assert dens[name]["n"] == mask.sum() and dens[name]["count"] == count
        assert dens[name]["radius"] == pytest.approx(r, rel=1e-9)
        assert dens[name]["log10_density"] == pytest.approx(log10_density, rel=1e-9)


@pytest.mark.parametrize("variance", [0.5, 0.8, 0.95, 0.99, 1.0])
def test_components_for_variance_matches_sklearn(variance):
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(1)
    x = rng.normal(size=(200, 12)) * np.linspace(3.0, 0.1, 12)  # decaying spectrum
    cumulative = np.cumsum(PCA().fit(x).explained_variance_ratio_)
    expected = int(np.argmax(cumulative >= variance - 1e-12)) + 1
    assert components_for_variance(x, variance) == expected


def test_a_dense_cluster_scores_higher_than_a_spread_one():
    x, y = clusters([100, 100], [0.2, 2.0], dim=4)
    _, dens = cluster_densities(x, group_labels(y, np.zeros(len(y), bool)), n_components=4)
    assert dens["class_0"]["log10_density"] > dens["class_1"]["log10_density"] + 3  # (2.0 / 0.2)^4 = 1e4
    assert dens["class_0"]["radius"] < dens["class_1"]["radius"]


def test_model_densities_choose_n_on_the_reference_and_reuse_it():
    x, y = clusters([60, 60, 30], [1.0, 1.0, 1.0], dim=10)
    groups = group_labels(y, y == 2)
    spread = x.copy()
    spread[y == 2] = np.random.default_rng(3).normal(size=((y == 2).sum(), 10)) * 30.0  # forget class scattered
    fs = model_densities({"unlearned": spread, "original": x}, groups)
    assert fs["reference"] == "original" and fs["n_components"] == components_for_variance(x, 0.95)
    assert fs["models"]["unlearned"]["forget"]["log10_density"] < fs["models"]["original"]["forget"]["log10_density"]
    fixed = model_densities({"original": x}, groups, n_components=2)
    assert fixed["n_components"] == 2 and fixed["variance"] is None


def test_tsne_panels_are_stratified_deterministic_and_capped():
    x, y = clusters([150, 120, 9], [1.0, 1.0, 1.0], dim=5)
    forget = y == 2
    idx = stratified_subsample(group_labels(y, forget), 60, seed=0)
    assert len(idx) == 60 and set(y[idx]) == {0, 1, 2}  # every group, the small forget set included
    a = tsne_panels({"original": x, "unlearned": x[:, ::-1]}, y, forget, max_points=60, perplexity=10, seed=0)
    b = tsne_panels({"original": x, "unlearned": x[:, ::-1]}, y, forget, max_points=60, perplexity=10, seed=0)
    assert a.coords["original"].shape == (60, 2) and a.coords["unlearned"].shape == (60, 2)
    np.testing.assert_array_equal(a.index, b.index)
    np.testing.assert_allclose(a.coords["original"], b.coords["original"])
    assert a.is_forget.sum() >= 1 and a.skipped == {}
    from duck.report.plots import tsne_panels_png

    assert tsne_panels_png(a.coords, a.labels, a.is_forget).startswith(b"\x89PNG")
    small = tsne_panels({"original": x[:40]}, y[:40], forget[:40], max_points=1000, perplexity=5)
    assert small.coords["original"].shape == (40, 2)  # m = min(max_points, N)


def test_a_collapsed_model_gets_no_map_and_no_densities_but_the_others_do():
    """All embeddings equal (e.g. a network whose weights were zeroed): scikit-learn's t-SNE crashed the process
    (its PCA initialisation divides by the zero spread), and as the PCA reference it refused the whole audit."""
    x, y = clusters([60, 60, 20], [1.0, 1.0, 1.0], dim=5)
    forget = y == 2
    dead = np.ones_like(x)
    panels = tsne_panels({"original": x, "unlearned": dead}, y, forget, max_points=60, perplexity=10, seed=0)
    assert set(panels.coords) == {"original"} and "all 60 embeddings are equal" in panels.skipped["unlearned"]
    with pytest.raises(DuckInputError, match="all 30 rows are equal"):
        tsne_coordinates(dead[:30], perplexity=5)
    groups = group_labels(y, forget)
    fs = model_densities({"original": dead, "unlearned": x}, groups)  # collapsed reference: n from the next model
    assert fs["reference"] == "unlearned" and "original model's embeddings are all equal" in fs["note"]
    assert all(d["log10_density"] is None for d in fs["models"]["original"].values())
    assert all(d["log10_density"] is not None for d in fs["models"]["unlearned"].values())
    none = model_densities({"original": dead}, groups)
    assert none["n_components"] is None and none["models"]["original"]["forget"]["log10_density"] is None


def test_tsne_seed_is_bounded_by_scikit_learn():
    cfg = {**OPTIONS, "tsne": {**OPTIONS["tsne"], "seed": 2**32}}
    with pytest.raises(DuckInputError, match=r"report.analysis.tsne.seed=4294967296 is too large for t-SNE"):
        AnalysisSettings.parse(cfg)
    AnalysisSettings.parse({**OPTIONS, "tsne": {**OPTIONS["tsne"], "seed": 2**32 - 1}})


def test_bad_inputs_name_the_bad_value():
    x, y = clusters([20, 20], [1.0, 1.0])
    groups = group_labels(y, y == 1)
    nan = x.copy()
    nan[3, 1] = np.nan
    with pytest.raises(DuckInputError, match=r"NaN or inf values \(first bad rows: \[3\]\)"):
        cluster_densities(nan, groups)
    for key, value in (("coverage", 0.0), ("coverage", 1.5), ("variance", -0.1), ("variance", 2.0)):
        with pytest.raises(DuckInputError, match=f"{key} must be a finite number > 0.0 and <= 1.0, got {value}"):
            cluster_densities(x, groups, **{key: value})
    lonely = groups.copy()
    lonely[0] = "forget"
    lonely[1:20] = "class_0"
    lonely[20:] = "class_1"
    with pytest.raises(DuckInputError, match="group 'forget' has 1 point"):  # one group: >= 2 points
        cluster_density(torch.as_tensor(x[:1]), group="forget")
    _, dens = cluster_densities(x, lonely, n_components=2)  # every group (the audit): no density, not an error
    assert dens["forget"]["log10_density"] is None and dens["forget"]["n"] == 1 and "1 point" in dens["forget"]["note"]
    assert dens["class_0"]["log10_density"] is not None and dens["class_1"]["log10_density"] is not None
    with pytest.raises(DuckInputError, match="39 group labels"):
        cluster_densities(x, groups[:-1])
    with pytest.raises(DuckInputError, match="40 labels but 39 forget flags"):
        group_labels(y, (y == 1)[:-1])
    coincide = np.r_[np.ones((10, 3)), np.random.default_rng(0).normal(size=(10, 3))]  # class_0: one point x10
    _, dens = cluster_densities(coincide, np.repeat(np.array(["class_0", "class_1"], dtype=object), 10), n_components=2)
    assert dens["class_0"]["log10_density"] is None and dens["class_1"]["log10_density"] is not None
    assert re.search(r"group 'class_0': 10 of its 10 points coincide .* \(radius 0\)", dens["class_0"]["note"])


@pytest.mark.parametrize("path, value, match", [
    (("enabled",), "yes", r"report.analysis.enabled='yes' must be true or false"),
    (("density", "variance"), 0.0, r"report.analysis.density.variance must be a finite number > 0.0 and <= 1.0, "
                                   r"got 0.0"),
    (("density", "coverage"), 1.01, r"report.analysis.density.coverage must be .* got 1.01"),
    (("density", "n_components"), 0, r"report.analysis.density.n_components=0 must be an integer >= 1"),
    (("tsne", "max_points"), 1, r"report.analysis.tsne.max_points=1 must be an integer >= 2"),
    (("tsne", "perplexity"), -5, r"report.analysis.tsne.perplexity must be a finite number > 0.0, got -5"),
    (("tsne", "seed"), -1, r"report.analysis.tsne.seed=-1"),
    (("tsne", "colour"), "red", r"unknown report.analysis.tsne option\(s\) \['colour'\]"),
])
def test_options_name_the_bad_key_and_value(path, value, match):
    import copy

    cfg = copy.deepcopy(OPTIONS)
    AnalysisSettings.parse(cfg)
    node = cfg
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DuckInputError, match=match):
        AnalysisSettings.parse(cfg)


def test_data_bounds_are_checked_before_work():
    sizes = {"class_0": 50, "class_1": 50, "forget": 1}  # a one-sample deletion request: its group gets no density
    check_analysis_data(AnalysisSettings.parse(OPTIONS), sizes, dim=16)
    sizes["forget"] = 20
    check_analysis_data(AnalysisSettings.parse(OPTIONS), sizes, dim=16)
    bad = {**OPTIONS, "density": {**OPTIONS["density"], "n_components": 17}}
    with pytest.raises(DuckInputError, match="n_components=17 exceeds min"):
        check_analysis_data(AnalysisSettings.parse(bad), sizes, dim=16)
    bad = {**OPTIONS, "tsne": {**OPTIONS["tsne"], "perplexity": 200.0}}
    with pytest.raises(DuckInputError, match=r"perplexity=200 must be below the 120 points"):
        check_analysis_data(AnalysisSettings.parse(bad), sizes, dim=16)


def test_report_has_the_feature_space_section(tmp_path):
    from duck.report import write_report

    x, y = clusters([30, 30, 20], [1.0, 1.0, 1.0])
    groups = group_labels(y, y == 2)
    fs = model_densities({"original": x, "unlearned": x * 1.5}, groups)
    paths = write_report(tmp_path, summary_rows=None, audits={}, config={"seed": 0}, scenario=None,
                         feature_space=fs, tsne_png=b"\x89PNG fake")
    md = paths["md"].read_text()
    assert "Feature space" in md and "![t-SNE" in md and "| forget |" in md
    assert f"{fs['models']['unlearned']['forget']['log10_density']:.2f}" in md
    assert (tmp_path / "plots" / "feature_density.png").read_bytes().startswith(b"\x89PNG")
    assert paths["tsne_png"].read_bytes() == b"\x89PNG fake"
