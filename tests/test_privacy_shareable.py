"""Shareable DP statistics for the audit report: released content, sensitivity 1 w.r.t. one forget sample,
PCA fitted on retain only, accuracy at large eps, empirical DP check, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from duck.errors import DuckInputError
from duck.privacy import dp_histogram_test, gaussian_mechanism, make_generator, shareable_outlier_statistics
from duck.privacy.outliers import all_subspaces
from duck.privacy.shareable import forget_outlier_counts, retain_pca


def embeddings(seed: int, n_forget: int = 40, n_retain: int = 400, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Retain: a Gaussian blob in a 16-d space with decaying variances; forget: half inside the blob, half
    pushed far out along the first principal direction."""
    rng = np.random.default_rng(seed)
    scales = np.linspace(3.0, 0.5, dim)
    retain = rng.normal(size=(n_retain, dim)) * scales
    forget = rng.normal(size=(n_forget, dim)) * scales
    forget[: n_forget // 2, 0] += 25.0
    return forget, retain


def true_counts(forget, retain, k=5, r=0.5, c=4, subspace_dim=1):
    f, rt = (torch.as_tensor(a, dtype=torch.float64) for a in (forget, retain))
    return forget_outlier_counts(f, rt, k=k, r=r, n_components=c, subspaces=all_subspaces(c, subspace_dim))


def brute_force_full_count(forget, retain, k, r, c):
    mean = retain.mean(0)
    _, s, vt = np.linalg.svd(retain - mean, full_matrices=False)
    std = s[:c] / np.sqrt(len(retain) - 1)
    zr, zf = (retain - mean) @ vt[:c].T / std, (forget - mean) @ vt[:c].T / std
    d = np.sqrt(((zf[:, None] - zr[None]) ** 2).sum(-1) / c)
    return int(((d <= r).sum(1) < k).sum())


def test_counts_match_brute_force_pca_and_definition():
    forget, retain = embeddings(0)
    full, per_axis, explained = true_counts(forget, retain)
    assert full == brute_force_full_count(forget, retain, 5, 0.5, 4)
    assert full >= 20 and per_axis[0] >= 20  # the pushed-out half stands out along PC1
    assert explained[0] > explained[1] > explained[3]


def test_released_dict_is_json_and_holds_no_true_count():
    forget, retain = embeddings(1)
    out = shareable_outlier_statistics(forget, retain, eps=1.0, delta=1e-5, k=5, r=0.5, n_components=4, h=2,
                                       seed=3, device="cpu")
    json.dumps(out)
    full, _, _ = true_counts(forget, retain)
    assert out["count"]["value"] != full
    assert set(out) == {"count", "top_subspaces", "params", "n_forget", "n_retain", "pca", "privacy"}
    assert out["count"]["sensitivity"] == 1 and out["count"]["eps"] == 0.5
    assert len(out["top_subspaces"]["subspaces"]) == 2
    again = shareable_outlier_statistics(forget, retain, eps=1.0, delta=1e-5, k=5, r=0.5, n_components=4, h=2,
                                         seed=3, device="cpu")
    assert again == out


def test_large_eps_release_is_accurate_and_finds_pc1():
    forget, retain = embeddings(2)
    full, _, _ = true_counts(forget, retain)
    out = shareable_outlier_statistics(forget, retain, eps=200.0, delta=1e-5, k=5, r=0.5, n_components=4, h=1,
                                       seed=0, device="cpu")
    assert abs(out["count"]["value"] - full) < 0.2
    assert out["top_subspaces"]["subspaces"] == [[0]] and out["top_subspaces"]["names"] == ["PC1"]


def test_one_forget_sample_changes_every_count_by_at_most_one():
    """Sensitivity 1 (replace-one neighbouring, retain fixed): the premise of the calibration."""
    forget, retain = embeddings(3)
    base_full, base_sub, base_expl = true_counts(forget, retain, subspace_dim=2)
    rng = np.random.default_rng(0)
    for _ in range(30):
        moved = forget.copy()
        moved[rng.integers(len(forget))] = rng.normal(size=forget.shape[1]) * rng.choice([0.1, 3.0, 40.0])
        full, sub, expl = true_counts(moved, retain, subspace_dim=2)
        assert abs(full - base_full) <= 1 and (sub - base_sub).abs().max() <= 1
        assert torch.equal(expl, base_expl)  # the PCA never sees the forget samples


def test_pca_is_fitted_on_retain_only():
    _, retain = embeddings(4)
    mean, comps, std, _ = retain_pca(torch.as_tensor(retain), 3)
    z = (torch.as_tensor(retain) - mean) @ comps / std
    assert torch.allclose(z.std(0), torch.ones(3, dtype=torch.float64), atol=1e-10)


def test_released_count_passes_histogram_dp_check():
    """Draws of the count mechanism exactly as the function releases it, on neighbouring forget sets."""
    forget, retain = embeddings(5)
    moved = forget.copy()
    moved[0, 0] -= 25.0  # one pushed-out forget sample moved back into the blob: count changes by one
    counts = [true_counts(f, retain)[0] for f in (forget, moved)]
    assert abs(counts[0] - counts[1]) == 1
    eps, delta = 0.5, 1e-3
    draws = []
    for seed, c in enumerate(counts):
        gen = make_generator(seed)
        draws.append([gaussian_mechanism(c, 1.0, eps, delta, calibration="analytic", seed=gen).value
                      for _ in range(100_000)])
    assert dp_histogram_test(draws[0], draws[1], eps, delta)["passed"]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eps": 0.0},
        {"delta": 1.0},
        {"k": 0},
        {"r": -1.0},
        {"n_components": 17},
        {"h": 5},
        {"h": 0},
        {"subspace_dim": 5},
        {"count_share": 1.0},
        {"k": 10_000},
    ],
)
def test_bad_input_raises(kwargs):
    forget, retain = embeddings(6)
    params = {"eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2, "device": "cpu"} | kwargs
    with pytest.raises(DuckInputError):
        shareable_outlier_statistics(forget, retain, **params)


def test_mismatched_embeddings_raise():
    forget, retain = embeddings(7)
    with pytest.raises(DuckInputError):
        shareable_outlier_statistics(forget[:, :8], retain, eps=1.0, delta=1e-5, k=5, r=0.5, n_components=4, h=2)
    with pytest.raises(DuckInputError):
        shareable_outlier_statistics(forget[:0], retain, eps=1.0, delta=1e-5, k=5, r=0.5, n_components=4, h=2)


@pytest.mark.parametrize(
    "change",
    [
        lambda f, r: ("not an array", r),
        lambda f, r: (f, None),
        lambda f, r: (f + 0j, r),  # complex: not truncated to the real part
        lambda f, r: (f > 0, r),  # boolean: not a numeric embedding
        lambda f, r: (f, r * 1e160),  # squares overflow float64 (the PCA would fail inside LAPACK)
        lambda f, r: (f * 1e160, r),
    ],
)
def test_bad_embeddings_raise(change):
    forget, retain = change(*embeddings(8))
    with pytest.raises(DuckInputError):
        shareable_outlier_statistics(forget, retain, eps=1.0, delta=1e-5, k=5, r=0.5, n_components=4, h=2,
                                     device="cpu")


@pytest.mark.parametrize(
    "kwargs", [{"device": "gpu"}, {"seed": 2**70}, {"eps": True}, {"count_share": "0.5"}, {"r": "x"}]
)
def test_bad_options_raise(kwargs):
    forget, retain = embeddings(9)
    params = {"eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2, "device": "cpu"} | kwargs
    with pytest.raises(DuckInputError):
        shareable_outlier_statistics(forget, retain, **params)


SHARE = {"enabled": True, "eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2,
         "max_retain": 5000, "seed": None}


@pytest.mark.parametrize("key,value,match", [
    ("eps", -1, "report.shareable.eps"), ("eps", float("nan"), "report.shareable.eps"),
    ("eps", "abc", "report.shareable.eps"), ("delta", 0, "report.shareable.delta"),
    ("delta", 1, "report.shareable.delta"), ("k", 0, "report.shareable.k=0"),
    ("k", 2.7, "report.shareable.k=2.7"), ("r", 0, "report.shareable.r"),
    ("n_components", 0, "report.shareable.n_components=0"),
    ("n_components", 2.5, "report.shareable.n_components=2.5"), ("h", 0, "report.shareable.h=0"),
    ("h", 100, "report.shareable.h=100"), ("seed", -1, "report.shareable.seed=-1"),
    ("max_retain", 0, "report.shareable.max_retain=0"), ("max_retain", -1, "report.shareable.max_retain=-1"),
    ("enabled", "abc", "report.shareable.enabled='abc'"), ("epsilon", 1, "unknown report.shareable"),
])
def test_shareable_settings_are_checked_with_qualified_names(key, value, match):
    from duck.privacy.shareable import ShareableSettings

    with pytest.raises(DuckInputError, match=match.replace(".", r"\.").replace("[", r"\[")):
        ShareableSettings.parse({**SHARE, key: value})


def test_shareable_settings_accept_the_defaults():
    from duck.privacy.shareable import ShareableSettings

    assert ShareableSettings.parse(SHARE) == SHARE
    assert ShareableSettings.parse(None)["enabled"] is False  # absent: off
    with pytest.raises(DuckInputError, match=r"report\.shareable\.eps"):  # a switched-off block is checked all the same
        ShareableSettings.parse({"enabled": False, "eps": -1})


def test_report_section_draws_independent_noise_per_model_even_when_seeded(synthetic, synthetic_model):
    """Sequential composition over the audited models needs independent noise: with report.shareable.seed set,
    every model used to get the same draw, so the difference of two released counts was exact (noise-free)."""
    import torch

    from duck.data.scenarios import build_scenario
    from duck.pipeline.audit import shareable_section

    scenario = build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, synthetic.num_classes,
                              forget_classes=[1])
    cfg = {"enabled": True, "eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 2, "h": 1,
           "max_retain": 200, "seed": 7}
    models = {"original": synthetic_model, "unlearned": synthetic_model}  # the same true counts
    _, released = shareable_section(cfg, models, synthetic, scenario, torch.device("cpu"))
    a, b = (released[m]["count"]["value"] for m in models)
    assert a != b  # independent draws (the same draw gave a == b exactly)
    _, again = shareable_section(cfg, models, synthetic, scenario, torch.device("cpu"))
    assert [again[m]["count"]["value"] for m in models] == [a, b]  # still reproducible with a seed


# ---------------------------------------------------------------------------------------------- issue 39
def test_shareable_settings_edges_and_full_messages():
    from duck.privacy.shareable import ShareableSettings

    off = {"enabled": False, "eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2,
           "max_retain": 5000, "seed": None}  # conf/report/default.yaml's values, switched off
    assert ShareableSettings.parse(None) == off and ShareableSettings.parse({}) == off  # no block: off
    with pytest.raises(DuckInputError) as e:
        ShareableSettings.parse(["enabled"], "x.share")
    assert str(e.value) == "x.share=['enabled'] must be a mapping of options"
    assert ShareableSettings.parse({"enabled": True, "eps": 2.0}) == {**off, "enabled": True, "eps": 2.0}
    no_seed = {k: v for k, v in SHARE.items() if k != "seed"}
    assert ShareableSettings.parse(no_seed) == {**no_seed, "seed": None}
    with pytest.raises(DuckInputError) as e:
        ShareableSettings.parse({**SHARE, "eps": 0.0})  # eps > 0, not >= 0
    assert str(e.value) == "report.shareable.eps must be a finite number > 0.0, got 0.0"
    assert ShareableSettings.parse({**SHARE, "h": 4, "n_components": 4})["h"] == 4  # h = n_components allowed
    with pytest.raises(DuckInputError) as e:
        ShareableSettings.parse({**SHARE, "h": 5, "n_components": 4})
    assert str(e.value) == ("report.shareable.h=5 exceeds report.shareable.n_components=4 (the candidate "
                            "subspaces); lower h")
    assert ShareableSettings.parse({**SHARE, "seed": 3})["seed"] == 3
    seeded = ShareableSettings.parse({**SHARE, "seed": np.int64(3)})  # the checked seed replaces the given one
    assert set(seeded) == set(SHARE) and type(seeded["seed"]) is int and seeded["seed"] == 3
    assert ShareableSettings.parse({**SHARE, "k": np.int64(5)})["k"] == 5 and type(ShareableSettings.parse(
        {**SHARE, "k": np.int64(5)})["k"]) is int


def test_squares_that_overflow_are_refused_with_the_largest_value():
    from duck.privacy.shareable import check_squares_finite

    check_squares_finite(torch.tensor([[1e150, 0.0]], dtype=torch.float64), "forget embeddings")
    with pytest.raises(DuckInputError) as e:
        check_squares_finite(torch.tensor([[1e200, -3e200]], dtype=torch.float64), "forget embeddings")
    assert str(e.value) == ("forget embeddings is too large for float64: its squared norms overflow (largest "
                            "|value| 3e+200); rescale the embeddings")


def test_retain_pca_is_numpys_eigendecomposition_of_the_sample_covariance():
    rng = np.random.default_rng(13)
    retain = rng.normal(size=(60, 5)) @ np.diag([3.0, 2.0, 1.0, 0.5, 0.1]) + 4.0
    mean, comps, std, ratio = retain_pca(torch.as_tensor(retain), 3)
    cov = np.cov(retain, rowvar=False)  # ddof 1
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1][:3]
    np.testing.assert_allclose(mean.numpy(), retain.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std.numpy(), np.sqrt(vals[order]), rtol=1e-10)
    np.testing.assert_allclose(ratio.numpy(), vals[order] / vals.sum(), rtol=1e-10)
    np.testing.assert_allclose(np.abs(comps.numpy().T @ vecs[:, order]), np.eye(3), atol=1e-8)
    flat = np.c_[rng.normal(size=(30, 2)), np.zeros((30, 2))]
    with pytest.raises(DuckInputError, match=r"span fewer than n_components=3 directions"):
        retain_pca(torch.as_tensor(flat), 3)


def test_the_release_is_the_two_mechanisms_on_the_true_counts_with_the_budget_split():
    """Wiring of the release, recomputed from its parts: the Gaussian mechanism (sensitivity 1, analytic) on the
    full-space count with eps·count_share, then the exponential mechanism on the subspace counts with the rest,
    both from one generator in that order; names PCi+PCj, 1-based; every public parameter echoed."""
    from duck.privacy.mechanisms import top_h_without_replacement

    forget, retain = embeddings(10)
    kw = {"eps": 2.0, "delta": 1e-4, "k": 4, "r": 0.7, "n_components": 3, "h": 2}
    out = shareable_outlier_statistics(forget, retain, **kw, subspace_dim=2, count_share=0.25, seed=11,
                                       device="cpu")
    subspaces = all_subspaces(3, 2)
    full, per, explained = true_counts(forget, retain, k=4, r=0.7, c=3, subspace_dim=2)
    gen = make_generator(11)
    count = gaussian_mechanism(full, 1.0, 0.5, 1e-4, calibration="analytic", seed=gen)
    picked = top_h_without_replacement(per.double(), 2, 1.5, 1.0, seed=gen)
    chosen = [list(subspaces[i]) for i in picked]
    assert out["count"] == {"value": count.value, "value_clipped": min(max(round(count.value), 0), 40),
                            "sigma": count.sigma, "sensitivity": 1, "eps": 0.5, "delta": 1e-4,
                            "mechanism": "gaussian (global sensitivity 1, analytic calibration)"}
    assert out["top_subspaces"] == {
        "subspaces": chosen, "names": [f"PC{a + 1}+PC{b + 1}" for a, b in chosen], "n_candidates": 3,
        "subspace_dim": 2, "eps": 1.5, "sensitivity": 1,
        "mechanism": "exponential mechanism, top-h without replacement (eps/h per draw)"}
    assert out["params"] == {**kw, "count_share": 0.25, "r_unit": "retain standard deviations (dist_S)"}
    assert (out["n_forget"], out["n_retain"]) == (40, 400)
    assert out["pca"] == {"fitted_on": "retain", "explained_variance_ratio": explained.tolist()}
    assert out["privacy"] == {"protected": "forget samples (neighbouring = one forget sample replaced)",
                              "not_protected": "retain samples, the model, n_forget", "total_eps": 2.0,
                              "total_delta": 1e-4}


def test_the_clipped_count_is_the_rounded_release_inside_zero_and_n_forget():
    forget, retain = embeddings(11, n_forget=6)
    sides = set()
    for seed in range(40):  # eps 0.02: sigma ~ 200, so releases fall far on both sides of [0, 6]
        c = shareable_outlier_statistics(forget, retain, eps=0.04, delta=1e-5, k=5, r=0.5, n_components=4, h=1,
                                         seed=seed, device="cpu")["count"]
        assert c["value_clipped"] == min(max(round(c["value"]), 0), 6)
        sides.add("low" if c["value"] < 0 else "high" if c["value"] > 6 else "in")
    assert {"low", "high"} <= sides


def test_every_limit_is_inclusive_where_the_definition_allows_and_named_in_its_message():
    forget, retain = embeddings(12, n_forget=10, n_retain=6, dim=8)  # n_retain - 1 = 5 < dim
    base = {"eps": 1.0, "delta": 1e-5, "k": 2, "r": 0.5, "n_components": 2, "h": 1, "device": "cpu",
            "prefix": "report.shareable."}

    def call(**kw):
        return shareable_outlier_statistics(forget, retain, **(base | kw))

    call(n_components=5)  # = n_retain - 1: allowed
    with pytest.raises(DuckInputError) as e:
        call(n_components=6)
    assert str(e.value) == ("report.shareable.n_components=6 exceeds min(embedding dim 8, n_retain - 1 = 5)")
    with pytest.raises(DuckInputError) as e:
        shareable_outlier_statistics(forget[:, :4], retain[:, :4], **(base | {"n_components": 5}))
    assert "min(embedding dim 4, n_retain - 1 = 5)" in str(e.value)
    assert call(k=6)["n_retain"] == 6  # k = n_retain: allowed
    with pytest.raises(DuckInputError) as e:
        call(k=7)
    assert str(e.value) == "report.shareable.k=7 exceeds the number of retain samples (6); lower k"
    assert call(subspace_dim=2, h=1)["top_subspaces"]["subspaces"] == [[0, 1]]  # subspace_dim = n_components
    with pytest.raises(DuckInputError) as e:
        call(subspace_dim=3)
    assert str(e.value) == "subspace_dim=3 exceeds n_components=2"
    assert len(call(h=2)["top_subspaces"]["subspaces"]) == 2  # h = the number of candidates
    with pytest.raises(DuckInputError) as e:
        call(h=3)
    assert str(e.value) == "report.shareable.h=3 exceeds the number of candidate subspaces (2); lower h"
    with pytest.raises(DuckInputError) as e:
        shareable_outlier_statistics(forget[:, :7], retain, **base)
    assert str(e.value) == "forget_emb has 7 features but retain_emb has 8; pass embeddings of one model"
    for share in (0.0, 1.0, 1.5):  # a share that leaves one mechanism no budget is refused
        with pytest.raises(DuckInputError) as e:
            call(count_share=share)
        assert str(e.value) == f"count_share must be a finite number > 0.0 and < 1.0, got {share}"
    assert call(count_share=0.999)["count"]["eps"] == pytest.approx(0.999)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k": 0}, "k=0"), ({"n_components": 0}, "n_components=0"), ({"h": 0}, "h=0"),
    ({"subspace_dim": 0}, "subspace_dim=0"), ({"count_share": float("nan")}, "count_share must"),
])
def test_each_option_is_named_in_its_refusal(kwargs, message):
    forget, retain = embeddings(14)
    params = {"eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2} | kwargs
    with pytest.raises(DuckInputError) as e:
        shareable_outlier_statistics(forget, retain, **params)  # device "auto", no prefix: the defaults
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("side", ["forget_emb", "retain_emb"])
def test_each_embedding_is_named_in_its_refusal(side):
    forget, retain = embeddings(15)
    kw = {"eps": 1.0, "delta": 1e-5, "k": 5, "r": 0.5, "n_components": 4, "h": 2}
    bad = {"forget_emb": forget, "retain_emb": retain}
    bad[side] = bad[side].copy()
    bad[side][3, 2] = np.nan
    with pytest.raises(DuckInputError, match=rf"\b{side}\b"):  # the name itself, not inside another word
        shareable_outlier_statistics(bad["forget_emb"], bad["retain_emb"], **kw)
    huge = {"forget_emb": forget, "retain_emb": retain}
    huge[side] = huge[side] * 1e160
    with pytest.raises(DuckInputError) as e:
        shareable_outlier_statistics(huge["forget_emb"], huge["retain_emb"], **kw)
    assert str(e.value).startswith(f"{side} is too large for float64")
    flat = {"forget_emb": forget, "retain_emb": retain}
    flat[side] = flat[side][:, 0]  # 1-D: not (N, d)
    with pytest.raises(DuckInputError, match=rf"\b{side}\b"):
        shareable_outlier_statistics(flat["forget_emb"], flat["retain_emb"], **kw)
    with pytest.raises(DuckInputError) as e:  # without a prefix the option's own name leads the message
        shareable_outlier_statistics(forget, retain, **(kw | {"n_components": 17}))
    assert str(e.value).startswith("n_components=17 exceeds")


def test_the_rank_check_is_relative_to_the_largest_variance():
    """A direction is missing when its variance is below 1e-12 of the largest, whatever the embeddings' scale:
    small embeddings are not refused, and a huge first variance makes a tiny last one count as absent."""
    rng = np.random.default_rng(16)
    z = rng.normal(size=(50, 2))
    small = z * np.array([1e-3, 3e-8])  # variances ~1e-6 and ~1e-15: ratio 1e-9, two directions
    assert retain_pca(torch.as_tensor(small), 2)[2].shape == (2,)
    skewed = z * np.array([1e6, 3e-2])  # variances ~1e12 and ~1e-3: ratio 1e-15, one direction
    with pytest.raises(DuckInputError, match="span fewer than n_components=2"):
        retain_pca(torch.as_tensor(skewed), 2)
    # variances exactly 1 and 1e-12 (powers of two and a product that rounds to 1e-12 exactly; n - 1 = 4): the
    # edge itself counts as absent
    edge = torch.tensor([[1.0, 1e-6], [-1.0, 1e-6], [1.0, -1e-6], [-1.0, -1e-6], [0.0, 0.0]], dtype=torch.float64)
    with pytest.raises(DuckInputError, match="span fewer than n_components=2"):
        retain_pca(edge, 2)
    two = rng.normal(size=(2, 3))  # two samples: the covariance divides by n - 1 = 1
    _, _, std, _ = retain_pca(torch.as_tensor(two), 1)
    np.testing.assert_allclose(std.numpy()[0] ** 2, np.linalg.eigvalsh(np.cov(two, rowvar=False))[-1], rtol=1e-10)


def test_the_mechanisms_get_sensitivity_one_and_their_budget_shares(monkeypatch):
    import duck.privacy.shareable as shareable

    calls = {}
    real_gauss, real_top = shareable.gaussian_mechanism, shareable.top_h_without_replacement

    def gauss(value, sensitivity, eps, delta, **kw):
        calls["gauss"] = (sensitivity, eps, delta, kw["calibration"])
        return real_gauss(value, sensitivity, eps, delta, **kw)

    def top(utilities, h, eps, sensitivity=1.0, **kw):
        calls["top"] = (utilities.dtype, h, eps, sensitivity)
        return real_top(utilities, h, eps, sensitivity, **kw)

    monkeypatch.setattr(shareable, "gaussian_mechanism", gauss)
    monkeypatch.setattr(shareable, "top_h_without_replacement", top)
    forget, retain = embeddings(17)
    shareable_outlier_statistics(forget, retain, eps=3.0, delta=1e-6, k=5, r=0.5, n_components=4, h=3,
                                 count_share=0.2, seed=0, device="cpu")
    assert calls["gauss"] == (1.0, pytest.approx(0.6), 1e-6, "analytic")
    assert calls["top"] == (torch.float64, 3, pytest.approx(2.4), 1.0)
