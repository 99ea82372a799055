"""LiRA statistic, views and scores (ALGORITHMS.md §4) against direct float64 / scipy computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import norm

from attacks.lira import fit_gaussians, lira_phi, lira_scores, resolve_views, view_fn, view_logits
from attacks.roc import auc_score
from duck.errors import DuckInputError


# ---------------------------------------------------------------------------------------------- statistic
@settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.integers(1, 30), st.floats(0.1, 3.0), st.integers(0, 10_000))
def test_phi_equals_log_odds_on_moderate_logits(n_classes: int, n: int, scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, scale, size=(n, n_classes))
    y = rng.integers(0, n_classes, size=n)
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p_y = p[np.arange(n), y]
    expected = np.log(p_y) - np.log1p(-p_y)  # log(p_y / (1 - p_y)) in float64
    got = lira_phi(torch.from_numpy(z), torch.from_numpy(y)).numpy()
    assert got.dtype == np.float64
    # (the direct form loses ~eps/(1 - p_y) to cancellation as p_y -> 1; moderate logits keep that < 1e-8)
    np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-8)


def test_phi_is_finite_and_exact_on_extreme_logits() -> None:
    z = torch.tensor([[1e4, -1e4, 0.0], [-1e4, 1e4, 1e4], [88.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
                     dtype=torch.float32)
    y = torch.tensor([0, 0, 0, 2])
    phi = lira_phi(z, y)
    assert torch.isfinite(phi).all()
    assert phi[0].item() == pytest.approx(1e4 - 0.0)  # logsumexp(-1e4, 0) = 0
    assert phi[1].item() == pytest.approx(-1e4 - (1e4 + np.log(2)))
    assert phi[2].item() == pytest.approx(88.0 - np.log(2))  # float32 softmax gives p_y = 1 exactly here
    assert phi[3].item() == pytest.approx(-np.log(2))
    # the naive float32 form saturates where the stable form does not
    p = torch.softmax(z[2:3], 1)[0, 0]
    assert not torch.isfinite(torch.log(p) - torch.log1p(-p))


def test_phi_broadcasts_views() -> None:
    z = torch.randn(3, 5, 4)  # (V, N, C)
    y = torch.randint(0, 4, (5,))
    phi = lira_phi(z, y)
    assert phi.shape == (3, 5)
    for v in range(3):
        torch.testing.assert_close(phi[v], lira_phi(z[v], y))


# ---------------------------------------------------------------------------------------------- views
def test_views_auto_follow_the_recipe() -> None:
    assert resolve_views("auto", 8, []) == ["identity"]
    assert resolve_views("auto", 32, ["flip"]) == ["identity", "flip"]
    assert resolve_views("auto", 32, ["crop", "flip"]) == ["identity", "flip", "shift:4,0", "shift:-4,0",
                                                           "shift:0,4", "shift:0,-4"]
    with pytest.raises(DuckInputError, match="unknown query view"):
        resolve_views(["rotate"], 8)


def test_shift_view_translates_with_zero_fill() -> None:
    x = torch.arange(16.0).view(1, 1, 4, 4)
    shifted = view_fn("shift:1,0")(x)  # content moves up by one row (the view looks one row lower)
    torch.testing.assert_close(shifted[0, 0, :3], x[0, 0, 1:])
    assert (shifted[0, 0, 3] == 0).all()
    torch.testing.assert_close(view_fn("flip")(x), x.flip(-1))


def test_view_logits_runs_in_eval_mode() -> None:
    from duck.data.registry import build_datasets
    from duck.models import create_model

    data = build_datasets("synthetic", n_train=40, n_test=10)
    torch.manual_seed(0)
    model = create_model("smallcnn", data.num_classes, 1, 8, width=4)
    model.train()
    a, y = view_logits(model, data.train, np.arange(40), ["identity", "flip"], batch_size=7)
    b, _ = view_logits(model, data.train, np.arange(40), ["identity", "flip"], batch_size=40)
    assert a.shape == (2, 40, data.num_classes) and model.training  # mode restored
    torch.testing.assert_close(a, b)  # eval mode: independent of the batch composition


# ---------------------------------------------------------------------------------------------- scores
def synthetic_lira(n_shadow: int = 64, n_query: int = 2000, shift: float = 1.5, seed: int = 0):
    """Per-example means m_i; shadows that trained on i see φ ~ N(m_i + shift, 1), others N(m_i, 1);
    the target's members the same shift. Returns (target φ (Q,1), shadow φ (E,Q,1), shadow_in, member)."""
    rng = np.random.default_rng(seed)
    m = rng.normal(0.0, 2.0, size=n_query)
    shadow_in = np.zeros((n_shadow, n_query), dtype=bool)
    for q in range(n_query):  # every example IN for exactly half of the shadows
        shadow_in[rng.choice(n_shadow, n_shadow // 2, replace=False), q] = True
    shadow_phi = m + shift * shadow_in + rng.normal(size=(n_shadow, n_query))
    member = np.arange(n_query) < n_query // 2
    target_phi = m + shift * member + rng.normal(size=n_query)
    return target_phi[:, None], shadow_phi[..., None], shadow_in, member


def direct_scores(target_phi, shadow_phi, shadow_in, *, variant, two_sided=False):
    """The attack for each example separately with scipy.stats.norm (no truncation)."""
    out = []
    for q in range(target_phi.shape[0]):
        phi = target_phi[q, 0]
        outs = shadow_phi[~shadow_in[:, q], q, 0]
        mu_o, sd_o = np.median(outs), np.std(outs)
        if variant == "offline":
            z = (phi - mu_o) / sd_o
            out.append(-np.log(2 * norm.sf(abs(z))) if two_sided else -norm.logsf(phi, mu_o, sd_o))
        else:
            ins = shadow_phi[shadow_in[:, q], q, 0]
            out.append(norm.logpdf(phi, np.median(ins), np.std(ins)) - norm.logpdf(phi, mu_o, sd_o))
    return np.array(out)


@pytest.mark.parametrize("variant,two_sided", [("offline", False), ("offline", True), ("online", False)])
def test_scores_match_direct_scipy(variant: str, two_sided: bool) -> None:
    t, s, sin, _ = synthetic_lira(n_shadow=16, n_query=300, seed=1)
    got, _ = lira_scores(t, s, sin, variant=variant, offline_test="two_sided" if two_sided else "one_sided",
                         truncate=False)
    np.testing.assert_allclose(got, direct_scores(t, s, sin, variant=variant, two_sided=two_sided), rtol=1e-9,
                               atol=1e-9)


@pytest.mark.parametrize("variant", ["offline", "online"])
def test_auc_close_to_analytic_value(variant: str) -> None:
    shift = 1.5
    t, s, sin, member = synthetic_lira(n_shadow=64, n_query=4000, shift=shift, seed=2)
    scores, info = lira_scores(t, s, sin, variant=variant)
    analytic = norm.cdf(shift / np.sqrt(2))  # z_member ~ N(shift, 1) vs z_nonmember ~ N(0, 1)
    assert info["n_out"] == 32
    assert auc_score(scores, member) == pytest.approx(analytic, abs=0.025)


def test_fixed_variance_is_one_global_sigma() -> None:
    t, s, sin, _ = synthetic_lira(n_shadow=16, n_query=200, seed=3)
    fit = fit_gaussians(s, ~sin, truncate=False, fixed_variance=True)
    per_example = fit_gaussians(s, ~sin, truncate=False, fixed_variance=False)
    assert np.unique(fit.sigma).size == 1
    assert fit.sigma[0, 0] == pytest.approx(np.sqrt(np.mean(per_example.sigma**2)))
    scores, _ = lira_scores(t, s, sin, fixed_variance=True, truncate=False)
    expected = -norm.logsf((t[:, 0] - per_example.mu[:, 0]) / fit.sigma[0, 0])
    np.testing.assert_allclose(scores, expected, rtol=1e-9)


def test_truncation_uses_the_minimum_count_for_every_example() -> None:
    rng = np.random.default_rng(4)
    s = rng.normal(size=(8, 5, 1))
    sin = np.zeros((8, 5), dtype=bool)
    sin[:4, 0] = True  # example 0 has 4 OUT shadows, the others 8
    fit = fit_gaussians(s, ~sin, truncate=True)
    assert fit.n_shadow == 4
    assert fit.mu[0, 0] == pytest.approx(np.median(s[4:, 0, 0]))  # example 0: all its OUT shadows
    for q in range(1, 5):  # the others: the median of some 4 of their 8 values
        vals = s[:, q, 0]
        assert any(np.isclose(fit.mu[q, 0], np.median(vals[list(c)]))
                   for c in __import__("itertools").combinations(range(8), 4))
    # equal counts: truncation changes nothing
    sin_eq = np.zeros((8, 5), dtype=bool)
    sin_eq[::2] = True
    a, b = fit_gaussians(s, ~sin_eq, truncate=True), fit_gaussians(s, ~sin_eq, truncate=False)
    np.testing.assert_allclose(a.mu, b.mu)
    np.testing.assert_allclose(a.sigma, b.sigma)


def test_online_needs_in_shadows_for_nonmembers() -> None:
    t, s, sin, member = synthetic_lira(n_shadow=8, n_query=20)
    sin[:, ~member] = False  # test samples never trained on (shadow_pool=train)
    with pytest.raises(DuckInputError, match="shadow_pool=train\\+test"):
        lira_scores(t, s, sin, variant="online")
    scores, _ = lira_scores(t, s, sin, variant="offline")
    assert np.isfinite(scores).all()


def test_bad_options_raise() -> None:
    t, s, sin, _ = synthetic_lira(n_shadow=4, n_query=10)
    with pytest.raises(DuckInputError, match="variant"):
        lira_scores(t, s, sin, variant="global")
    with pytest.raises(DuckInputError, match="offline_test"):
        lira_scores(t, s, sin, offline_test="three_sided")
    with pytest.raises(DuckInputError, match="shape mismatch"):
        lira_scores(t[:5], s, sin)
