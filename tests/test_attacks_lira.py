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


# ---------------------------------------------------------------------------------------------- properties
# (issue 39: each refusal provoked with its message, each view against an independent statement)
def _translated(x: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """out[i, j] = x[i + dy, j + dx] where that pixel exists, else 0 (a plain loop)."""
    h, w = x.shape[-2:]
    out = np.zeros_like(x)
    for i in range(h):
        for j in range(w):
            if 0 <= i + dy < h and 0 <= j + dx < w:
                out[..., i, j] = x[..., i + dy, j + dx]
    return out


@pytest.mark.parametrize("dy,dx", [(1, 0), (-1, 0), (0, 1), (0, -1), (2, 0), (0, -3), (1, -2)])
def test_every_shift_view_is_the_zero_filled_translation(dy: int, dx: int) -> None:
    x = torch.arange(2 * 3 * 5 * 6, dtype=torch.float64).view(2, 3, 5, 6) + 1.0  # no zero pixel: fill is visible
    got = view_fn(f"shift:{dy},{dx}")(x)
    assert got.shape == x.shape
    np.testing.assert_array_equal(got.numpy(), _translated(x.numpy(), dy, dx))


def test_shift_views_move_one_eighth_of_the_image_and_at_least_one_pixel() -> None:
    assert resolve_views(["shift"], 16) == ["shift:2,0", "shift:-2,0", "shift:0,2", "shift:0,-2"]
    assert resolve_views(["shift"], 7) == ["shift:1,0", "shift:-1,0", "shift:0,1", "shift:0,-1"]  # 7 // 8 = 0
    assert resolve_views(["identity", "flip"], 8) == ["identity", "flip"]
    assert resolve_views(("flip",), 8, ["crop", "flip"]) == ["flip"]  # an explicit list ignores the recipe


def test_view_refusals_name_the_value_and_the_choices() -> None:
    with pytest.raises(DuckInputError) as e:
        resolve_views("everything", 8)
    assert str(e.value) == "attack.views='everything'; use 'auto' or a list from ['identity', 'flip', 'shift']"
    with pytest.raises(DuckInputError) as e:
        resolve_views(["identity", "rotate", "zoom"], 8)
    assert str(e.value) == ("unknown query view(s) ['rotate', 'zoom']; choose from ['identity', 'flip', 'shift'] "
                            "or 'auto'")
    with pytest.raises(DuckInputError) as e:
        resolve_views([], 8)
    assert str(e.value) == "unknown query view(s) []; choose from ['identity', 'flip', 'shift'] or 'auto'"
    with pytest.raises(DuckInputError) as e:
        resolve_views(["flip", "identity", "flip"], 8)
    assert str(e.value) == "attack.views=['flip', 'identity', 'flip'] lists a view twice"
    with pytest.raises(DuckInputError) as e:
        view_fn("rotate")
    assert str(e.value) == "unknown query view 'rotate'"


def test_identity_view_returns_its_input() -> None:
    x = torch.randn(2, 1, 4, 4)
    assert view_fn("identity")(x) is x


def test_truncated_fit_uses_a_random_subset_not_the_first_shadows() -> None:
    """The reference keeps the first m OUT shadows of every example; ours a random m-subset (_selected's
    docstring): with E = 16 shadows and one example OUT for only 4, the others' fits are not all the first 4."""
    rng = np.random.default_rng(5)
    s = rng.normal(size=(16, 40, 1))
    sin = np.zeros((16, 40), dtype=bool)
    sin[4:, 0] = True  # example 0: OUT for shadows 0-3 only
    fit = fit_gaussians(s, ~sin, truncate=True)
    assert fit.n_shadow == 4
    first_four = np.median(s[:4], axis=0)[:, 0]
    assert not np.allclose(fit.mu[1:, 0], first_four[1:])
    # each fit is the median and population std of 4 distinct OUT values of its own example
    for q in range(1, 40):
        vals = s[:, q, 0]
        sub = [c for c in __import__("itertools").combinations(range(16), 4)
               if np.isclose(np.median(vals[list(c)]), fit.mu[q, 0])
               and np.isclose(np.std(vals[list(c)]), fit.sigma[q, 0])]
        assert sub, q
    again = fit_gaussians(s, ~sin, truncate=True)  # a fixed seed: the same subsets every time
    np.testing.assert_array_equal(again.mu, fit.mu)


def test_fit_refuses_an_example_without_a_shadow_in_its_role() -> None:
    s = np.zeros((4, 3, 1))
    select = np.ones((4, 3), dtype=bool)
    select[:, 2] = False
    with pytest.raises(DuckInputError) as e:
        fit_gaussians(s, select)
    assert str(e.value) == "some query examples have no shadow model in the required IN/OUT role"
    select[0, 2] = True  # one shadow is enough to fit (the attack asks for 2, see below)
    assert fit_gaussians(s, select).n_shadow == 1


def test_untruncated_fit_ignores_the_shadows_of_the_other_role() -> None:
    s = np.arange(12.0).reshape(4, 3, 1)
    select = np.array([[1, 0, 1], [1, 1, 0], [0, 1, 1], [1, 1, 1]], dtype=bool)
    fit = fit_gaussians(s, select, truncate=False)
    for q in range(3):
        vals = s[select[:, q], q, 0]
        assert fit.mu[q, 0] == np.median(vals) and fit.sigma[q, 0] == pytest.approx(np.std(vals))
    np.testing.assert_array_equal(fit.n_shadow, [3, 3, 3])


def test_scores_average_the_views() -> None:
    rng = np.random.default_rng(6)
    t = rng.normal(size=(30, 3))
    s = rng.normal(size=(10, 30, 3))
    sin = rng.random((10, 30)) < 0.5
    sin[:3], sin[3:6] = True, False  # every example: >= 3 IN and >= 3 OUT shadows
    for variant in ("offline", "online"):
        got, _ = lira_scores(t, s, sin, variant=variant, truncate=False)
        per_view = [lira_scores(t[:, v:v + 1], s[..., v:v + 1], sin, variant=variant, truncate=False)[0]
                    for v in range(3)]
        np.testing.assert_allclose(got, np.mean(per_view, axis=0), rtol=1e-12)


def test_attack_needs_two_out_shadows_and_online_two_in_shadows() -> None:
    rng = np.random.default_rng(7)
    t, s = rng.normal(size=(3, 1)), rng.normal(size=(5, 3, 1))
    sin = np.zeros((5, 3), dtype=bool)
    sin[:3, 1] = True  # example 1: 2 OUT shadows, 3 IN
    scores, info = lira_scores(t, s, sin)
    assert info == {"n_out": 2}
    sin[:3, 0], sin[:3, 2] = True, True  # every example: 3 IN, 2 OUT
    scores, info = lira_scores(t, s, sin, variant="online")
    assert info == {"n_out": 2, "n_in": 3} and np.isfinite(scores).all()
    sin[3, 1] = True  # example 1: 1 OUT shadow
    with pytest.raises(DuckInputError) as e:
        lira_scores(t, s, sin)
    assert str(e.value) == ("every query example needs at least 2 OUT shadows to fit a Gaussian; use more shadows "
                            "(attack.n_shadow)")
    sin = np.zeros((5, 3), dtype=bool)
    sin[:2] = True
    sin[2, 0] = True  # example 0: 3 IN; examples 1, 2: 2 IN -> fine; then one with 1 IN
    assert lira_scores(t, s, sin, variant="online")[1] == {"n_out": 2, "n_in": 2}
    sin[1, 2] = False
    with pytest.raises(DuckInputError, match="at least 2 IN shadows"):
        lira_scores(t, s, sin, variant="online")


def test_shape_and_option_refusals_state_the_shapes_and_choices() -> None:
    t, s, sin, _ = synthetic_lira(n_shadow=4, n_query=10)
    with pytest.raises(DuckInputError) as e:
        lira_scores(t, s, sin, variant="global")
    assert str(e.value) == "attack.variant='global'; choose one of ['offline', 'online']"
    with pytest.raises(DuckInputError) as e:
        lira_scores(t, s, sin, offline_test="three_sided")
    assert str(e.value) == "attack.offline_test='three_sided'; choose one of ['one_sided', 'two_sided']"
    with pytest.raises(DuckInputError) as e:
        lira_scores(t, s[..., 0], sin)
    assert str(e.value) == ("shape mismatch: target φ (10, 1), shadow φ (4, 10) (want (E, Q, V)), shadow_in (4, 10) "
                            "(want (E, Q))")
    with pytest.raises(DuckInputError, match="shape mismatch"):
        lira_scores(t, s, sin[:, :9])
    with pytest.raises(DuckInputError, match="shape mismatch"):
        lira_scores(t[:, [0, 0]], s, sin)


def test_a_zero_spread_out_gaussian_scores_finitely_in_the_right_direction() -> None:
    """σ_out = 0 (every OUT shadow agrees): the reference's 1e-30 guard keeps the score finite and ordered."""
    s = np.zeros((4, 2, 1))
    sin = np.zeros((4, 2), dtype=bool)
    t = np.array([[1e-20], [-1e-20]])  # above / below μ_out = 0 by 1e-20: z = ±1e10, score ≈ z²/2 = 5e19
    scores, _ = lira_scores(t, s, sin)
    assert scores[0] > 1e19 and scores[1] == pytest.approx(0.0, abs=1e-12)


def test_gaussian_log_density_is_scipys() -> None:
    from attacks.lira import _norm_logpdf

    x, mu, sigma = np.array([-3.0, 0.1, 2.5]), np.array([0.0, 0.3, -1.0]), np.array([1.0, 0.2, 4.0])
    np.testing.assert_allclose(_norm_logpdf(x, mu, sigma), norm.logpdf(x, mu, sigma), rtol=1e-14)


def test_offline_scores_are_one_sided_by_default() -> None:
    from attacks.lira import GaussianFit, offline_scores

    fit = GaussianFit(np.array([[0.0], [1.0]]), np.array([[1.0], [2.0]]), 4)
    t = np.array([[-0.5], [2.0]])
    np.testing.assert_allclose(offline_scores(t, fit), -norm.logsf([-0.5, 0.5]), rtol=1e-14)


def test_shift_views_take_a_single_image_too() -> None:
    x = torch.arange(1.0, 2 * 4 * 5 + 1).view(2, 4, 5)  # (C, H, W)
    np.testing.assert_array_equal(view_fn("shift:1,-1")(x).numpy(), _translated(x.numpy(), 1, -1))


def test_fits_are_computed_in_float64_whatever_the_input() -> None:
    """float32 φ: the median of 1 and 1 + 2^-23 is 1 + 2^-24, which float32 cannot hold."""
    s = np.array([1.0, 1.0 + 2**-23], dtype=np.float32).reshape(2, 1, 1)
    fit = fit_gaussians(s, np.ones((2, 1), dtype=bool), truncate=False)
    assert fit.mu.dtype == np.float64 and fit.mu[0, 0] == 1.0 + 2**-24
    assert fit.sigma[0, 0] == 2**-24


def test_an_integer_membership_matrix_means_what_its_boolean_does() -> None:
    """``~`` of an int 0/1 array is -1/-2, all true: the IN/OUT matrix is read as booleans first."""
    t, s, sin, _ = synthetic_lira(n_shadow=8, n_query=40, seed=8)
    for variant in ("offline", "online"):
        want, _ = lira_scores(t, s, sin, variant=variant)
        got, _ = lira_scores(t, s, sin.astype(np.int64), variant=variant)
        np.testing.assert_array_equal(got, want)


def _uneven(seed: int):
    """Shadows whose IN/OUT counts differ between examples (3 to 7 of 10), so truncation matters."""
    rng = np.random.default_rng(seed)
    n_shadow, n_query = 10, 30
    sin = np.zeros((n_shadow, n_query), dtype=bool)
    for q in range(n_query):
        sin[rng.choice(n_shadow, int(rng.integers(3, 8)), replace=False), q] = True
    s = rng.normal(size=(n_shadow, n_query, 1)) + 0.8 * sin[..., None]
    t = rng.normal(size=(n_query, 1))
    return t, s, sin


@pytest.mark.parametrize("variant", ["offline", "online"])
def test_truncation_is_on_by_default_and_reaches_both_fits(variant: str) -> None:
    from attacks.lira import offline_scores, online_scores

    t, s, sin = _uneven(9)
    out_t, out_f = fit_gaussians(s, ~sin, truncate=True), fit_gaussians(s, ~sin, truncate=False)
    in_t, in_f = fit_gaussians(s, sin, truncate=True), fit_gaussians(s, sin, truncate=False)
    if variant == "offline":
        truncated, full = offline_scores(t, out_t), offline_scores(t, out_f)
        np.testing.assert_allclose(full, direct_scores(t, s, sin, variant="offline"), rtol=1e-9)
    else:
        truncated, full = online_scores(t, in_t, out_t), online_scores(t, in_f, out_f)
        np.testing.assert_allclose(full, direct_scores(t, s, sin, variant="online"), rtol=1e-9)
    assert not np.allclose(truncated, full)
    default, info = lira_scores(t, s, sin, variant=variant)
    np.testing.assert_array_equal(default, truncated)
    assert info["n_out"] == 3 and info.get("n_in", 3) == 3
    np.testing.assert_array_equal(lira_scores(t, s, sin, variant=variant, truncate=False)[0], full)


def test_online_fixed_variance_pools_both_fits() -> None:
    t, s, sin = _uneven(10)
    got, _ = lira_scores(t, s, sin, variant="online", fixed_variance=True, truncate=False)
    out = fit_gaussians(s, ~sin, truncate=False)
    inn = fit_gaussians(s, sin, truncate=False)
    sd_out, sd_in = np.sqrt(np.mean(out.sigma**2)), np.sqrt(np.mean(inn.sigma**2))
    want = norm.logpdf(t[:, 0], inn.mu[:, 0], sd_in) - norm.logpdf(t[:, 0], out.mu[:, 0], sd_out)
    np.testing.assert_allclose(got, want, rtol=1e-9)


def test_online_scores_stay_finite_for_a_zero_spread_fit() -> None:
    """Every IN shadow and every OUT shadow agree (σ = 0): the 1e-30 guard keeps the log densities finite."""
    s = np.zeros((4, 2, 1))
    s[:2] = 1.0
    sin = np.zeros((4, 2), dtype=bool)
    sin[:2] = True
    scores, _ = lira_scores(np.array([[1.0], [0.0]]), s, sin, variant="online")
    assert np.isfinite(scores).all() and scores[0] > 0 > scores[1]


def test_online_refusal_says_how_to_get_in_shadows() -> None:
    t, s, sin, member = synthetic_lira(n_shadow=8, n_query=20)
    sin[:, ~member] = False
    with pytest.raises(DuckInputError) as e:
        lira_scores(t, s, sin, variant="online")
    assert str(e.value) == (
        "online LiRA needs at least 2 IN shadows for every query example, but some (the non-members: test "
        "samples) were never in a shadow's training data; set attack.shadow_pool=train+test (shadows train on "
        "random halves of train and test) or use attack.variant=offline")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_phi_takes_cpu_labels_for_cuda_logits() -> None:
    z = torch.randn(5, 3, device="cuda")
    y = torch.tensor([0, 1, 2, 0, 1])  # on the CPU, as a loader gives them
    torch.testing.assert_close(lira_phi(z, y).cpu(), lira_phi(z.cpu(), y))
