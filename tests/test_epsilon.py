"""The batched ε of :mod:`attacks.epsilon` against the per-example path (itself checked against the reference's
outputs and a rule-by-rule evaluation in tests/test_forgetting.py), the exact linspace counts it relies on, and
its table of rule ε."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_forgetting import REFERENCE, _epsilon_rule_by_rule

from attacks.epsilon import (
    _count_le_linspace,
    epsilon_table,
    epsilons,
    epsilons_per_example,
)
from duck.errors import DuckInputError


def _case(rng: np.random.Generator, kind: str, n_u: int, n_r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    sd = float(rng.choice([0.05, 0.3, 1.0, 3.0]))
    u, r = rng.normal(0, sd, (n_u, n)), rng.normal(0, sd * rng.uniform(0.5, 2), (n_r, n))
    if kind == "lattice":  # ties with each other and with the grids' points
        q = float(rng.choice([0.01, 0.05, 0.25]))
        u, r = np.round(u / q) * q, np.round(r / q) * q
    elif kind == "shifted":
        u = u + rng.uniform(-3, 3) * sd
    elif kind == "heavy":
        u = rng.standard_t(3, (n_u, n)) * sd
    keep = (np.ptp(u, axis=0) > 0) & (np.ptp(r, axis=0) > 0)
    return u[:, keep], r[:, keep]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", ["normal", "lattice", "shifted", "heavy"])
def test_batched_epsilons_equal_the_per_example_path(seed, kind):
    """Exactly equal (not approximately: the same float32 rule ε), for equal and unequal set sizes."""
    rng = np.random.default_rng([seed, len(kind)])
    for n_u, n_r in ((4, 4), (8, 8), (5, 11), (32, 32), (16, 3)):
        u, r = _case(rng, kind, n_u, n_r, 60)
        np.testing.assert_array_equal(epsilons(u, r), epsilons_per_example(u, r), err_msg=f"{kind} {n_u}x{n_r}")


def test_batched_epsilons_equal_the_rule_by_rule_evaluation_and_the_reference():
    rng = np.random.default_rng(7)
    u, r = rng.normal(0.4, 1, (8, 12)), rng.normal(0, 1.3, (8, 12))
    got = epsilons(u, r)
    for i in range(u.shape[1]):
        pos, neg = (r[:, i], u[:, i]) if np.median(r[:, i]) > np.median(u[:, i]) else (u[:, i], r[:, i])
        assert got[i] == pytest.approx(_epsilon_rule_by_rule(pos, neg), abs=1e-6)
    for case in REFERENCE.values():  # google-deepmind/unlearning_evaluation's own outputs
        np.testing.assert_allclose(epsilons(np.array(case["unlearned"]), np.array(case["retrained"])),
                                   case["epsilons"], rtol=1e-6, atol=1e-6)


def test_linspace_counts_are_exact_at_and_beside_the_grid_points():
    rng = np.random.default_rng(1)
    for _ in range(200):
        start = float(rng.normal(0, 20))
        stop = start + float(rng.choice([0.0, 1e-3, 0.37, 4.0, 57.3]))
        num = int(rng.integers(0, 500))
        grid = np.linspace(start, stop, num)
        probes = np.concatenate([grid, np.nextafter(grid, np.inf), np.nextafter(grid, -np.inf),
                                 rng.uniform(start - 1, stop + 1, 20)])
        want = (grid[None, :] <= probes[:, None]).sum(axis=1)
        got = _count_le_linspace(np.full(probes.shape, start), np.full(probes.shape, stop), num, probes)
        np.testing.assert_array_equal(got, want)


def test_epsilon_table_holds_the_rule_formula():
    """ε(a, b) = max(log(1 − δ − FPR) − log FNR, log(1 − δ − FNR) − log FPR) clipped at 0, in float32; ∞ for a
    perfect rule; −∞ (skipped) when exactly one of FPR, FNR is zero."""
    t = epsilon_table(8, 4)
    assert t.shape == (9, 5)
    assert t[8, 0] == math.inf  # every positive inside, no negative: perfect
    assert t[0, 0] == -math.inf and t[8, 2] == -math.inf and t[3, 0] == -math.inf  # FNR or FPR alone zero
    tpr, fpr = np.float32(5 / 8), np.float32(1 / 4)
    fnr = np.float32(1) - tpr
    one = np.float32(1 - 1e-5)
    want = max(float(np.log(one - fpr) - np.log(fnr)), float(np.log(one - fnr) - np.log(fpr)), 0.0)
    assert t[5, 1] == pytest.approx(want, rel=1e-6)
    assert epsilon_table(4, 8)[1, 5] != t[5, 1]  # the roles are not symmetric


def test_collapsed_and_ruleless_examples_behave_as_the_reference():
    u = np.array([[0.0, 0.0], [1.0, 1e-4]])  # column 1: a range 1e-4 against 1: collapsed -> 50
    r = np.array([[0.5, 0.5], [1.5, 1.5]])
    assert epsilons(u, r)[1] == 50.0 == epsilons_per_example(u, r)[1]
    with pytest.raises(DuckInputError, match="at least 2"):
        epsilons(np.zeros((1, 3)), np.zeros((4, 3)))
