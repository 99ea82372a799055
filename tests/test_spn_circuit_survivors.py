"""The compiled SPN circuit (duck/deletion/_spn_circuit.py) against an independent evaluation of the same tree.

Small SPNs are written here as nested tuples (sums over products of Gaussian and categorical leaves, weights
chosen by hand), compiled with ``CircuitBuilder`` and checked against a per-row recursion in numpy / scipy:
the log-density (Gaussian leaves hold a standard deviation, categorical leaves raw masses, NaN marginalised to
log 1), the same values for every row-block size with the blocks the memory bound allows, one level per tree
height, the circuit's dtypes and device; sampling against the tree's exact marginals (5 standard errors), the
sum nodes' choice frequencies against their weights, seeds, supports, and the documented draw construction.
"""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm

import duck.deletion._spn_circuit as circ
from duck.deletion import learn_spn
from duck.deletion._spn_circuit import Circuit, CircuitBuilder

CPU = torch.device("cpu")
F64 = dict(dtype=torch.float64)
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# ------------------------------------------------------------------------------- trees and the reference
def G(var: int, mean: float, std: float) -> tuple:
    return ("gauss", var, mean, std)


def C(var: int, probs: list[float]) -> tuple:
    return ("cat", var, list(probs))


def P(*children: tuple) -> tuple:
    return ("prod", list(children))


def S(weights: list[float], *children: tuple) -> tuple:
    return ("sum", list(weights), list(children))


def compile_tree(tree: tuple, builder: CircuitBuilder) -> int:
    kind = tree[0]
    if kind == "gauss":
        return builder.gaussian(tree[1], tree[2], tree[3])
    if kind == "cat":
        return builder.categorical(tree[1], tree[2])
    if kind == "prod":
        return builder.product([compile_tree(t, builder) for t in tree[1]])
    return builder.sum([compile_tree(t, builder) for t in tree[2]], tree[1])


def circuit(tree: tuple, n_vars: int, device: torch.device = CPU) -> Circuit:
    builder = CircuitBuilder(n_vars)
    return builder.build(compile_tree(tree, builder), device)


def ref_logpdf(tree: tuple, x: np.ndarray) -> float:
    """log p(x) by recursion: leaves' log densities (NaN -> 0), products add, sums log-sum-exp log w + child."""
    kind = tree[0]
    if kind == "gauss":
        v = x[tree[1]]
        return 0.0 if np.isnan(v) else float(norm.logpdf(v, loc=tree[2], scale=tree[3]))
    if kind == "cat":
        v = x[tree[1]]
        with np.errstate(divide="ignore"):
            return 0.0 if np.isnan(v) else float(np.log(tree[2][int(v)]))
    if kind == "prod":
        return float(sum(ref_logpdf(t, x) for t in tree[1]))
    terms = [math.log(w) + ref_logpdf(t, x) for w, t in zip(tree[1], tree[2], strict=True)]
    return float(logsumexp(terms)) if max(terms) > -math.inf else -math.inf


def ref_loglik(tree: tuple, X: np.ndarray) -> np.ndarray:
    return np.array([ref_logpdf(tree, x) for x in X])


def depth(tree: tuple) -> int:
    """Height of the root: leaves 0, an internal node 1 + its highest child."""
    children = tree[1] if tree[0] == "prod" else tree[2] if tree[0] == "sum" else []
    return 1 + max(depth(t) for t in children) if children else 0


def gauss_moments(tree: tuple, var: int) -> np.ndarray:
    """Exact E[x], E[x^2], E[x^3], E[x^4] of Gaussian variable ``var`` under the tree."""
    kind = tree[0]
    if kind == "gauss":
        m, s = tree[2], tree[3]
        return np.array([m, m**2 + s**2, m**3 + 3 * m * s**2, m**4 + 6 * m**2 * s**2 + 3 * s**4])
    if kind == "prod":
        (child,) = [t for t in tree[1] if var in scope(t)]
        return gauss_moments(child, var)
    return sum(w * gauss_moments(t, var) for w, t in zip(tree[1], tree[2], strict=True))


def cat_marginal(tree: tuple, var: int) -> np.ndarray:
    """Exact P(x_var = k) under the tree (categorical leaves' masses normalised)."""
    kind = tree[0]
    if kind == "cat":
        p = np.asarray(tree[2], dtype=float)
        return p / p.sum()
    if kind == "prod":
        (child,) = [t for t in tree[1] if var in scope(t)]
        return cat_marginal(child, var)
    return sum(w * cat_marginal(t, var) for w, t in zip(tree[1], tree[2], strict=True))


def scope(tree: tuple) -> set[int]:
    if tree[0] in ("gauss", "cat"):
        return {tree[1]}
    children = tree[1] if tree[0] == "prod" else tree[2]
    return set().union(*(scope(t) for t in children))


# var 0 Gaussian, var 1 categorical (K = 3), var 2 Gaussian, var 3 categorical (K = 2, narrower than Kmax);
# heights: P1, P2, the inner products and the sum over var-0 leaves 1 (products and a sum at one height), the
# inner sum 2, P3 3, the root 4
TREE = S(
    [0.5, 0.3, 0.2],
    P(G(0, -1.0, 0.5), C(1, [0.2, 0.5, 0.3]), G(2, 2.0, 1.5), C(3, [0.9, 0.1])),
    P(G(0, 1.5, 0.8), C(1, [0.6, 0.3, 0.1]), G(2, -1.0, 0.7), C(3, [0.25, 0.75])),
    P(
        S([0.5, 0.5], G(0, 0.2, 2.0), G(0, -2.0, 1.0)),
        S([0.4, 0.6], P(C(1, [0.1, 0.1, 0.8]), G(2, 0.0, 1.0)), P(C(1, [0.5, 0.25, 0.25]), G(2, 3.0, 0.5))),
        C(3, [0.5, 0.5]),
    ),
)
V = 4


def queries(n: int, seed: int, missing: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(0, 2, n), rng.integers(0, 3, n), rng.normal(1, 2, n), rng.integers(0, 2, n)]).astype(float)
    X[rng.random(X.shape) < missing] = np.nan
    return X


def loglik(c: Circuit, X: np.ndarray) -> torch.Tensor:
    return circ.log_likelihood(c, torch.as_tensor(X, **F64))


# ------------------------------------------------------------------------------------------ log-likelihood
def test_log_likelihood_is_the_trees_density_with_missing_values_marginalised():
    c = circuit(TREE, V)
    X = queries(60, seed=0, missing=0.25)
    X[0] = np.nan  # everything missing: log 1
    out = loglik(c, X)
    assert out.dtype == torch.float64 and out.device == CPU and out.shape == (60,)
    np.testing.assert_allclose(out.numpy(), ref_loglik(TREE, X), rtol=1e-12, atol=1e-12)
    assert out[0].item() == 0.0
    # the categorical variable's marginal sums to 1 with everything else integrated out
    grid = np.full((3, V), np.nan)
    grid[:, 1] = [0, 1, 2]
    assert torch.logsumexp(loglik(c, grid), 0).item() == pytest.approx(0.0, abs=1e-12)


def test_gaussian_parameters_keep_float64_precision():
    """A narrow leaf far from 0: the mean must not pass through float32 (1000.1 is not a float32)."""
    tree = S([0.25, 0.75], P(G(0, 1000.1, 1e-3), C(1, [0.3, 0.7])), P(G(0, 999.9, 2e-3), C(1, [0.6, 0.4])))
    X = np.array([[1000.1, 0.0], [1000.1005, 1.0], [999.899, 0.0], [999.9, np.nan]])
    # x / std - mean / std loses ~1e-12 relative to cancellation here; a float32 mean is off by ~1e-2
    np.testing.assert_allclose(loglik(circuit(tree, 2), X).numpy(), ref_loglik(tree, X), rtol=1e-9)


def test_impossible_rows_get_log_zero_not_nan():
    """A code of zero mass under every component is -inf at the root (not NaN); other rows are unaffected."""
    tree = S([0.3, 0.7], P(G(0, 0.0, 1.0), C(1, [0.5, 0.5, 0.0])), P(G(0, 2.0, 1.0), C(1, [0.0, 1.0, 0.0])))
    X = np.array([[0.5, 2.0], [0.5, 0.0], [0.5, 1.0], [np.nan, 2.0]])
    out = loglik(circuit(tree, 2), X).numpy()
    assert out[0] == -math.inf
    np.testing.assert_allclose(out[1:], ref_loglik(tree, X[1:]), rtol=1e-12)


def test_missing_value_of_a_one_category_variable_is_marginalised():
    """Public API: a constant categorical column has the domain {0}; NaN there equals evaluating at 0."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(0, 1, 40), np.zeros(40)])
    spn = learn_spn(X, ["gaussian", "categorical"], min_instances=50, device="cpu")
    assert spn.n_categories_ == (0, 1)
    Q = X[:5].copy()
    Q[:, 1] = np.nan
    torch.testing.assert_close(spn.log_likelihood(Q), spn.log_likelihood(X[:5]), rtol=0, atol=0)


def test_evaluation_emits_no_warnings():
    """The leaves' outputs are written in place into the value matrix: no out= tensor gets resized (a PyTorch
    deprecation warning that is to become an error). More categorical leaves than Gaussian ones."""
    tree = S([0.4, 0.6], P(C(0, [0.2, 0.8]), C(1, [0.3, 0.7])), P(C(0, [0.6, 0.4]), C(1, [0.1, 0.9])))
    X = np.array([[0.0, 1.0], [1.0, 0.0], [np.nan, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = loglik(circuit(tree, 2), X)
    np.testing.assert_allclose(out.numpy(), ref_loglik(tree, X), rtol=1e-12)


# ------------------------------------------------------------------------------------- row blocks
@pytest.mark.parametrize(
    ("per_node", "extra", "rows"),
    [(1, 0, 7), (1, -1, 7), (3, 0, 7), (3, 1, 10), (5, 0, 7), (2, 0, 8), (1000, 0, 7)],
)
def test_blocks_give_identical_results_in_the_fewest_blocks_the_memory_bound_allows(
    monkeypatch: pytest.MonkeyPatch, per_node: int, extra: int, rows: int
):
    """With a bound of ``per_node * n_nodes + extra`` values, rows go in blocks of max(1, bound // n_nodes)
    (the last one shorter), never more rows than that, no more blocks than needed, same values as one pass."""
    c = circuit(TREE, V)
    X = queries(rows, seed=1, missing=0.1)
    whole = loglik(c, X)
    bound = per_node * c.n_nodes + extra
    block = max(1, bound // c.n_nodes)
    seen: list[int] = []
    real = circ._log_likelihood_block

    def spy(cc: Circuit, Xb: torch.Tensor) -> torch.Tensor:
        seen.append(Xb.shape[0])
        return real(cc, Xb)

    monkeypatch.setattr(circ, "_BLOCK_ELEMS", bound)
    monkeypatch.setattr(circ, "_log_likelihood_block", spy)
    out = loglik(c, X)
    assert torch.equal(out, whole)
    assert sum(seen) == rows and max(seen) <= block and len(seen) == math.ceil(rows / block)
    np.testing.assert_allclose(out.numpy(), ref_loglik(TREE, X), rtol=1e-12, atol=1e-12)


def test_a_single_leaf_circuit_uses_the_whole_bound(monkeypatch: pytest.MonkeyPatch):
    """One node: a bound of 4 values holds 4 rows per block."""
    tree = G(0, 0.5, 2.0)
    c = circuit(tree, 1)
    assert c.n_nodes == 1
    X = np.linspace(-3, 3, 9)[:, None]
    seen: list[int] = []
    real = circ._log_likelihood_block

    def spy(cc: Circuit, Xb: torch.Tensor) -> torch.Tensor:
        seen.append(Xb.shape[0])
        return real(cc, Xb)

    monkeypatch.setattr(circ, "_BLOCK_ELEMS", 4)
    monkeypatch.setattr(circ, "_log_likelihood_block", spy)
    out = loglik(c, X)
    assert seen == [4, 4, 1]
    np.testing.assert_allclose(out.numpy(), ref_loglik(tree, X), rtol=1e-12)


# ------------------------------------------------------------------------------------- the builder
@pytest.mark.parametrize(
    "tree",
    [
        P(G(0, 0.0, 1.0), G(1, 1.0, 2.0)),
        P(C(0, [0.5, 0.5]), C(1, [0.2, 0.8])),
        S([0.3, 0.7], G(0, 0.0, 1.0), G(0, 3.0, 1.0)),
        S([0.3, 0.7], C(0, [0.5, 0.5]), C(0, [0.9, 0.1])),
        TREE,
    ],
    ids=["prod-gauss", "prod-cat", "sum-gauss", "sum-cat", "deep"],
)
def test_one_level_per_height_and_every_level_holds_nodes(tree: tuple):
    """Inference loops over heights only: the circuit has exactly depth(tree) levels, none of them empty, and
    it evaluates to the tree's density."""
    n_vars = max(scope(tree)) + 1
    c = circuit(tree, n_vars)
    assert len(c.levels) == depth(tree)
    assert all(lv.prod_nodes.numel() + lv.sum_nodes.numel() > 0 for lv in c.levels)
    X = queries(12, seed=2) if tree is TREE else np.random.default_rng(4).integers(0, 2, (12, n_vars)) * 1.0
    np.testing.assert_allclose(loglik(c, X).numpy(), ref_loglik(tree, X), rtol=1e-12)


def index_and_value_tensors(c: Circuit) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    index = [c.gauss_nodes, c.gauss_vars, c.cat_nodes, c.cat_vars, c.cat_domain]
    values = [c.gauss_mean, c.gauss_std, c.cat_log_probs]
    for lv in c.levels:
        index += [lv.prod_nodes, lv.prod_edge_parent, lv.prod_edge_child]
        index += [lv.sum_nodes, lv.sum_edge_parent, lv.sum_edge_child]
        values.append(lv.sum_edge_logw)
    return index, values


@pytest.mark.parametrize(
    "tree",
    [S([0.3, 0.7], G(0, 0.0, 1.0), G(0, 3.0, 1.0)), P(C(0, [0.5, 0.5]), C(1, [0.2, 0.8])), TREE],
    ids=["no-products-no-categoricals", "no-sums-no-gaussians", "deep"],
)
def test_circuit_indices_are_int64_and_parameters_float64_even_when_empty(tree: tuple):
    c = circuit(tree, max(scope(tree)) + 1)
    index, values = index_and_value_tensors(c)
    assert all(t.dtype == torch.long and t.device == CPU for t in index)
    assert all(t.dtype == torch.float64 and t.device == CPU for t in values)


def test_build_and_evaluation_use_the_requested_device_not_torchs_default():
    """Under another default device (``meta`` stands in for a ``torch.set_default_device("cuda")`` session), a
    circuit built for the CPU keeps every tensor on the CPU and evaluates CPU rows on the CPU."""
    X = queries(20, seed=8, missing=0.2)
    Xt = torch.as_tensor(X, **F64)
    with torch.device("meta"):
        c = circuit(TREE, V, CPU)
        out = circ.log_likelihood(c, Xt)
    index, values = index_and_value_tensors(c)
    assert all(t.device == CPU for t in index + values)
    assert out.device == CPU
    np.testing.assert_allclose(out.numpy(), ref_loglik(TREE, X), rtol=1e-12, atol=1e-12)


def test_sampling_draws_on_the_cpu_whatever_torchs_default_device():
    """The draws are made on the CPU (the documented same-draws-on-any-device rule), not on torch's default device:
    under ``meta`` (standing in for ``torch.set_default_device("cuda")``) a CPU generator gives the same samples."""
    c = circuit(TREE, V, CPU)
    expected = circ.sample(c, 50, torch.Generator().manual_seed(3), CPU)
    with torch.device("meta"):
        got = circ.sample(c, 50, torch.Generator().manual_seed(3), CPU)
    assert got.device == CPU
    assert torch.equal(got, expected)


def test_sum_refuses_weights_that_do_not_match_its_children():
    b = CircuitBuilder(1)
    g1, g2 = b.gaussian(0, 0.0, 1.0), b.gaussian(0, 1.0, 1.0)
    with pytest.raises(ValueError, match=f"^{re.escape('zip() argument 2 is shorter than argument 1')}$"):
        b.sum([g1, g2], [1.0])
    with pytest.raises(ValueError, match=f"^{re.escape('zip() argument 2 is longer than argument 1')}$"):
        b.sum([g1, g2], [0.2, 0.3, 0.5])


# ------------------------------------------------------------------------------------------ sampling
def draw(c: Circuit, n: int, seed: int) -> torch.Tensor:
    return circ.sample(c, n, torch.Generator().manual_seed(seed), CPU)


def test_samples_follow_the_trees_exact_marginals():
    n = 20_000
    c = circuit(TREE, V)
    s = draw(c, n, seed=7)
    assert s.shape == (n, V) and s.dtype == torch.float64 and s.device == CPU
    x = s.numpy()
    for var in (0, 2):
        m1, m2, _, m4 = gauss_moments(TREE, var)
        assert abs(x[:, var].mean() - m1) < 5 * math.sqrt((m2 - m1**2) / n), var
        assert abs((x[:, var] ** 2).mean() - m2) < 5 * math.sqrt((m4 - m2**2) / n), var
    for var, K in ((1, 3), (3, 2)):
        codes = x[:, var]
        assert set(np.unique(codes)) <= set(range(K))  # integer codes inside the variable's own domain
        p = cat_marginal(TREE, var)
        freq = np.bincount(codes.astype(int), minlength=K) / n
        np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n))


def test_product_children_are_sampled_independently():
    """Two Gaussian leaves under one product: their draws are uncorrelated (each leaf its own normals)."""
    n = 10_000
    s = draw(circuit(P(G(0, 1.0, 2.0), G(1, -3.0, 0.5)), 2), n, seed=1).numpy()
    assert abs(np.corrcoef(s[:, 0], s[:, 1])[0, 1]) < 5 / math.sqrt(n)
    for var, (m, sd) in enumerate([(1.0, 2.0), (-3.0, 0.5)]):
        inside = np.mean(np.abs(s[:, var] - m) < sd)  # P(|z| < 1)
        p = 2 * norm.cdf(1.0) - 1
        assert abs(inside - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_sum_nodes_choose_children_with_their_weights():
    """Three well-separated narrow components: the component of each draw is read off its value."""
    n = 20_000
    weights = np.array([0.7, 0.2, 0.1])
    tree = S(list(weights), G(0, 0.0, 0.01), G(0, 100.0, 0.01), G(0, 200.0, 0.01))
    s = draw(circuit(tree, 1), n, seed=3).numpy()[:, 0]
    chosen = np.rint(s / 100.0).astype(int)
    freq = np.bincount(chosen, minlength=3) / n
    assert freq.size == 3
    np.testing.assert_array_less(np.abs(freq - weights), 5 * np.sqrt(weights * (1 - weights) / n))


def test_categorical_leaves_sample_in_proportion_to_their_masses():
    """The inverse CDF scales the uniform by the leaf's total mass: masses (2, 6, 0, 12) give (.1, .3, 0, .6)."""
    n = 20_000
    s = draw(circuit(C(0, [2.0, 6.0, 0.0, 12.0]), 1), n, seed=5).numpy()[:, 0]
    p = np.array([0.1, 0.3, 0.0, 0.6])
    freq = np.bincount(s.astype(int), minlength=4) / n
    assert freq.size == 4 and freq[2] == 0.0
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-12)


def test_a_leaf_without_mass_still_samples_inside_its_domain():
    """Degenerate leaf (all masses 0, narrower than another leaf's domain): codes stay in 0..K-1."""
    tree = P(C(0, [0.0, 0.0]), C(1, [0.25, 0.25, 0.25, 0.25]))
    s = draw(circuit(tree, 2), 200, seed=0).numpy()
    assert set(np.unique(s[:, 0])) <= {0.0, 1.0}
    assert set(np.unique(s[:, 1])) <= {0.0, 1.0, 2.0, 3.0}


def test_same_seed_same_samples_and_different_seeds_differ():
    c = circuit(TREE, V)
    a, b, other = draw(c, 500, seed=11), draw(c, 500, seed=11), draw(c, 500, seed=12)
    assert torch.equal(a, b)
    for var in range(V):  # every variable, Gaussian and categorical, depends on the seed
        assert not torch.equal(a[:, var], other[:, var]), var


def test_gaussian_samples_carry_float64_precision():
    """Standard-normal leaf: float64 draws are (almost surely) not all float32 values."""
    s = draw(circuit(G(0, 0.0, 1.0), 1), 1000, seed=2)[:, 0]
    assert not torch.equal(s.float().double(), s)


def test_sampling_is_the_documented_construction_draw_for_draw():
    """The documented random-number protocol (what makes draws identical on every device): from the generator,
    float64 uniforms for each height's sum edges top-down (Gumbel-max on the log-weights), then float64
    normals for the Gaussian leaves (mean + std * z), then float64 uniforms for the categorical leaves (the
    inverse CDF: the number of cumulative masses <= u * total), one row per leaf in creation order."""
    n = 300
    w = np.array([0.5, 0.3, 0.2])
    leaves = [((-1.0, 0.5), [0.2, 0.5, 0.3]), ((1.5, 0.8), [0.6, 0.3, 0.1]), ((4.0, 2.0), [0.1, 0.1, 0.8])]
    b = CircuitBuilder(2)
    prods = [b.product([b.gaussian(0, m, sd), b.categorical(1, probs)]) for (m, sd), probs in leaves]
    c = b.build(b.sum(prods, list(w)), CPU)
    s = draw(c, n, seed=9).numpy()

    g = torch.Generator().manual_seed(9)
    u_sum = torch.rand(3, n, generator=g, **F64).numpy()
    z = torch.randn(3, n, generator=g, **F64).numpy()
    u_cat = torch.rand(3, n, generator=g, **F64).numpy()
    child = np.argmax(np.log(w)[:, None] - np.log(-np.log(u_sum)), axis=0)
    cols = np.arange(n)
    mean, std = np.array([lf[0] for lf in leaves]).T
    np.testing.assert_allclose(s[:, 0], mean[child] + std[child] * z[child, cols], rtol=1e-15, atol=0)
    cum = np.cumsum([lf[1] for lf in leaves], axis=1)
    codes = [np.searchsorted(cum[k], u_cat[k, i] * cum[k, -1], side="right") for i, k in enumerate(child)]
    np.testing.assert_array_equal(s[:, 1], codes)


# ---------------------------------------------------------------------------------------------- CUDA
@needs_cuda
def test_cuda_circuit_matches_the_cpu_one():
    """Built, evaluated and sampled on CUDA: every tensor on the device, same values and same draws."""
    cuda = torch.device("cuda")
    c = circuit(TREE, V, cuda)
    index, values = index_and_value_tensors(c)
    assert all(t.device.type == "cuda" for t in index + values)
    X = queries(50, seed=6, missing=0.2)
    out = circ.log_likelihood(c, torch.as_tensor(X, **F64).to(cuda))
    assert out.device.type == "cuda" and out.dtype == torch.float64
    np.testing.assert_allclose(out.cpu().numpy(), ref_loglik(TREE, X), rtol=1e-10, atol=1e-10)
    s = circ.sample(c, 400, torch.Generator().manual_seed(4), cuda)
    assert s.device.type == "cuda" and s.dtype == torch.float64 and s.shape == (400, V)
    torch.testing.assert_close(s.cpu(), draw(circuit(TREE, V), 400, seed=4), rtol=1e-12, atol=1e-12)
