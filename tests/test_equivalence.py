"""The forgetting verdict as an equivalence test (attacks/equivalence.py, ALGORITHMS.md §11): the interval by
test inversion on hand-made calibrations, the decision at the interval's boundaries, the shift-back
permutation on sets moved by a known fraction, the verdict on simulated audits, margins files, and the
simulation of its operating characteristics (a fast version; the full table is marked slow)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import written_files

from attacks.equivalence import (
    Calibration,
    _decide,
    _models_to_decide,
    calibrate,
    forgetting_verdict,
    original_shift,
    read_margins,
    utility_ratios,
    verdict_and_calibrations,
)
from attacks.verdict_simulation import draw_audit, operating_characteristics
from duck.errors import DuckInputError


def _calibration(shifts, location_z, f_shifts, f_means, sd, observed, k=400, seed=0):
    """A calibration with the given location z scores, and splits whose F have the given mean and standard
    deviation at each share F's test ran at."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(k)
    z = (z - z.mean()) / z.std(ddof=1)
    samples = np.asarray(f_means)[:, None] + sd * z[None, :]
    return Calibration(np.asarray(shifts, dtype=float), np.asarray(location_z, dtype=float),
                       np.asarray(f_shifts, dtype=float), samples, observed, 8, 8, 40, 40)


def test_the_interval_inverts_the_location_test_by_hand():
    """Location z = 10, 0, −10 at f = 0, 0.5, 1 (linear in f): the estimate is 0.5 and the 95 % interval
    0.5 ∓ 1.96 / 20 (on the grid 100x finer: steps of 0.005); F's test accepts f = 0.5 (its z is 0 there)."""
    cal = _calibration([0.0, 0.5, 1.0], [10, 0, -10], [0.45, 0.5, 0.55], [0.21, 0.2, 0.19], 0.01, 0.2)
    np.testing.assert_allclose(cal.z(), [-1, 0, 1], atol=1e-9)
    eff = cal.effect(0.95)
    half = 1.959964 / 20
    assert eff["estimate"] == pytest.approx(0.5, abs=1e-9) and eff["consistent"]
    assert eff["low"] == pytest.approx(0.5 - half, abs=0.005) and eff["high"] == pytest.approx(0.5 + half, abs=0.005)
    assert eff["low"] >= 0.5 - half and eff["high"] <= 0.5 + half  # only f whose test does not reject
    assert cal.effect(0.99)["high"] > eff["high"]  # a wider level widens it
    # the location beyond the grid: the interval sits at the end it points to
    beyond = _calibration([0.0, 0.5, 1.0], [30, 20, 10], [1.0], [0.2], 0.01, 0.2).effect(0.95)
    assert (beyond["estimate"], beyond["low"], beyond["high"]) == (1.0, 1.0, 1.0)
    assert _decide(beyond, 0.25) == "not_forgotten"
    below = _calibration([-1.0, 0.0, 1.0], [-10, -20, -30], [-1.0], [0.2], 0.01, 0.2).effect(0.95)
    assert below["high"] == -1.0 and _decide(below, 0.25) == "not_forgotten"


def test_f_vetoes_a_set_whose_runs_differ_from_retrained_models_in_more_than_a_shift():
    """The location allows f around 0 but F lies far below its distribution at every share it ran at (runs that
    agree with each other, one target for all): not consistent, not forgotten; an F above its distribution at
    f = 0 (by chance closer than exchangeable retrained models) is accepted there, but not elsewhere."""
    collapsed = _calibration([-0.5, 0.0, 0.5], [10, 0, -10], [-0.05, 0.0, 0.05], [0.3] * 3, 0.01, 0.0).effect(0.95)
    assert not collapsed["consistent"] and _decide(collapsed, 0.25) == "not_forgotten"
    lucky = _calibration([-0.5, 0.0, 0.5], [10, 0, -10], [-0.05, 0.0, 0.05], [0.2] * 3, 0.01, 0.4).effect(0.95)
    assert lucky["consistent"] and _decide(lucky, 0.25) == "forgotten"
    off = _calibration([-0.5, 0.0, 0.5], [10, 0, -10], [-0.05, 0.05], [0.2] * 2, 0.01, 0.4).effect(0.95)
    assert not off["consistent"]


def test_f_runs_at_a_few_shares_inside_the_location_interval():
    from attacks.equivalence import F_POINTS, f_points

    x = np.linspace(-1, 1, 201)
    z = -10 * x  # interval |z| <= 1.96: about [-0.196, 0.196]
    pts = f_points(x, np.abs(z) <= 1.96, z)
    assert pts.min() >= -0.2 and pts.max() <= 0.2 and 0.0 in pts and len(pts) <= F_POINTS + 2
    assert f_points(x, np.zeros_like(x, dtype=bool), z - 100).tolist() == [-1.0]  # empty: the closest share


@pytest.mark.parametrize("low,high,verdict", [
    (0.0, 0.2499, "forgotten"), (0.0, 0.25, "inconclusive"), (0.25, 0.6, "inconclusive"),
    (0.2501, 0.6, "not_forgotten"), (0.1, 0.4, "inconclusive"),
    # over-forgetting (moved past the retrained models) counts the same way, on the other side
    (-0.2499, 0.1, "forgotten"), (-0.25, 0.1, "inconclusive"), (-0.6, -0.2501, "not_forgotten"),
    (-0.4, -0.1, "inconclusive")])
def test_decision_at_the_interval_boundaries(low, high, verdict):
    assert _decide({"estimate": (low + high) / 2, "low": low, "high": high}, 0.25) == verdict


def test_models_to_decide_scale_with_the_square_of_the_interval():
    """Half-width ∝ 1/√N: an estimate 0.10 with high 0.30 (half 0.20) needs the half under 0.15: N (0.2/0.15)²; the
    same distance on the over-forgetting side."""
    assert _models_to_decide({"estimate": 0.10, "low": 0.0, "high": 0.30}, 0.25, 8) == math.ceil(8 * (0.2 / 0.15) ** 2)
    assert _models_to_decide({"estimate": 0.40, "low": 0.20, "high": 0.6}, 0.25, 8) == math.ceil(8 * (0.2 / 0.15) ** 2)
    assert _models_to_decide({"estimate": 0.25, "low": 0.1, "high": 0.4}, 0.25, 8) is None
    assert _models_to_decide({"estimate": -0.10, "low": -0.30, "high": 0.1}, 0.25, 8) == math.ceil(8 * (0.2 / 0.15) ** 2)


@pytest.mark.parametrize("fraction", [-0.5, 0.0, 0.5, 1.0])
def test_a_set_moved_by_a_known_fraction_is_estimated_there(fraction):
    """Retrained-like models moved by f·δ (δ known exactly), 10 audits: the interval holds f in most of them (95 %
    nominal) and the estimates centre on f."""
    covered, estimates = 0, []
    for seed in range(10):
        rng = np.random.default_rng([seed, 3])
        n, n_models = 60, 16
        mu, sd = rng.normal(0, 2, n), rng.uniform(0.5, 1.5, n)
        bank = mu + sd * rng.standard_normal((n_models, n))
        delta = 3 * sd
        tested = mu + fraction * delta + sd * rng.standard_normal((n_models, n))
        eff = calibrate(tested, bank, delta, replicates=20, seed=seed, shifts=(-1.0, -0.5, 0.0, 0.5, 1.0, 1.5)).effect(0.95)
        covered += eff["low"] <= fraction <= eff["high"]
        estimates.append(eff["estimate"])
    assert covered >= 8 and abs(np.mean(estimates) - fraction) < 0.05, (covered, estimates)


def test_the_verdict_on_simulated_audits():
    """N = R = 16 on 120 examples (ALGORITHMS.md §11's model): a retrained-like method is forgotten, one that
    kept the whole shift is not; the controls' decisions and the record's fields."""
    rng = np.random.default_rng(0)
    audit = draw_audit(rng, 120, 16, 16, (0.0, 1.0))
    common = (audit["bank"], audit["retrain_control"], audit["none_control"])
    same, cals = verdict_and_calibrations(audit["methods"][0.0], *common, replicates=40)
    assert same["verdict"] == "forgotten" and same["shift_ci"][1] < 0.25, same["rule"]
    assert same["controls"]["none"]["decision"] == "not_forgotten" and same["power"] is True
    far, _ = verdict_and_calibrations(audit["methods"][1.0], *common, replicates=40, calibrations=cals)
    assert far["verdict"] == "not_forgotten" and far["shift_ci"][0] > 0.25
    assert far["controls"] == same["controls"]  # the controls' calibrations were reused
    assert 0.6 < far["shift"] < 1.4 and far["quality"] < same["quality"]
    assert same["quality_normalised"] > far["quality_normalised"]
    lo, hi = same["quality_ci"]
    assert lo <= same["quality"] <= hi


def test_no_power_when_the_original_did_not_move_the_examples():
    rng = np.random.default_rng(1)
    mu, sd = rng.normal(0, 2, 40), rng.uniform(0.5, 1.5, 40)
    draw = lambda: mu + sd * rng.standard_normal((8, 40))
    rec = forgetting_verdict(draw(), draw(), draw(), draw(), replicates=30)  # none == retrained
    assert rec["verdict"] == "inconclusive" and rec["rule"].startswith("no power") and rec["power"] is False


def test_public_name_and_utility_ratios():
    import duck

    assert duck.forgetting_verdict is forgetting_verdict
    u = utility_ratios({"retain": ([0.9, 0.9], [1.0, 1.0]), "test": ([0.99], [1.0])}, 0.05)
    assert u["retain_ratio"] == pytest.approx(0.9) and u["exceeded"] == ["retain"] and not u["ok"]
    assert utility_ratios({"retain": ([1.0], [1.0]), "test": ([0.96], [1.0])}, 0.05)["ok"]


def test_bad_inputs_are_refused():
    ok = np.zeros((4, 5)) + np.arange(4)[:, None]
    with pytest.raises(DuckInputError, match="same forget examples"):
        forgetting_verdict(ok, ok, ok, ok[:, :3])
    with pytest.raises(DuckInputError, match="NaN"):
        forgetting_verdict(np.full((4, 5), np.nan), ok, ok, ok)
    with pytest.raises(DuckInputError, match=r"margin=, attack\.forgetting\.margin\) must be in"):
        forgetting_verdict(ok, ok, ok, ok, margin=1.0)
    with pytest.raises(DuckInputError, match="replicates must be >= 20"):
        forgetting_verdict(ok, ok, ok, ok, replicates=5)
    with pytest.raises(DuckInputError, match="at least 2 models"):
        forgetting_verdict(ok[:1], ok, ok, ok)


def test_original_shift_is_the_none_control_minus_the_retrained_mean():
    bank, ctrl, none = np.zeros((3, 2)), np.ones((1, 2)), np.full((2, 2), 5.0)
    np.testing.assert_allclose(original_shift(bank, ctrl, none), [4.75, 4.75])


def _save_margins(path, rng, f=0.0, **extra):
    mu, sd = rng.normal(0, 2, 30), rng.uniform(0.5, 1.5, 30)
    draw = lambda shift, s=1.0: mu + shift * sd + s * sd * rng.standard_normal((8, 30))
    np.savez(path, unlearned=draw(3 * f), retrained=draw(0), retrain_control=draw(0), none_control=draw(3, 0.7),
             **extra)


def test_margins_files_are_read_and_damaged_ones_refused(tmp_path):
    rng = np.random.default_rng(2)
    good = tmp_path / "m.npz"
    _save_margins(good, rng)
    arrays = read_margins(good)
    assert set(arrays) == {"unlearned", "retrained", "retrain_control", "none_control"}
    (tmp_path / "junk.npz").write_text("not an archive")
    np.savez(tmp_path / "few.npz", unlearned=np.zeros((3, 4)))
    _save_margins(tmp_path / "acc.npz", rng, retain_acc_unlearned=np.ones(8))
    _save_margins(tmp_path / "range.npz", rng, retain_acc_unlearned=np.ones(8), retain_acc_retrained=np.ones(8),
                  test_acc_unlearned=np.full(8, 1.5), test_acc_retrained=np.ones(8))
    np.savez(tmp_path / "obj.npz", unlearned=np.array([{"a": 1}], dtype=object))
    for name, match in (("nope.npz", "no such file"), ("junk.npz", "not an .npz archive"),
                        ("few.npz", "lacks the array"), ("acc.npz", "give all four accuracy arrays or none"),
                        ("range.npz", "one accuracy in \\[0, 1\\]"), ("obj.npz", "not a readable .npz")):
        with pytest.raises(DuckInputError, match=match):
            read_margins(tmp_path / name)


def test_duck_audit_margins_writes_the_verdict_and_refuses_a_damaged_file(run_cli, tmp_path):
    rng = np.random.default_rng(4)
    path = tmp_path / "margins.npz"
    _save_margins(path, rng, f=1.0, retain_acc_unlearned=np.full(8, 0.9), retain_acc_retrained=np.ones(8),
                  test_acc_unlearned=np.ones(8), test_acc_retrained=np.ones(8))
    code, out, err, run_dir = run_cli("audit", f"margins={path}", "method_name=mine",
                                      "attack.forgetting.replicates=20")
    assert code == 0, err
    audit = json.loads((run_dir / "audit.json").read_text())
    assert audit["verdict"] == audit["forgetting"]["verdict"] == "not_forgotten"
    assert audit["forgetting"]["utility"]["exceeded"] == ["retain"]
    report = (run_dir / "report.md").read_text()
    assert report.index("**Not forgotten.**") < report.index("| models | imprint kept") and "mine (N = 8)" in report
    assert "not_forgotten" in out and (run_dir / "report.html").is_file()
    bad = tmp_path / "bad.npz"
    bad.write_bytes(path.read_bytes()[:100])  # truncated
    code, _, err, run_dir = run_cli("audit", f"margins={bad}")
    assert code == 2 and err.startswith("error: margins=") and written_files(run_dir) == set(), err


def test_duck_audit_margins_runs_under_outputs_audit_margins(tmp_path, monkeypatch, capsys):
    """Without hydra.run.dir, margins= writes under outputs/audit/margins/, not under the default data set and
    scenario (digits_class_removal) the margins have nothing to do with."""
    import sys

    from duck.cli import audit as cli_audit

    path = tmp_path / "margins.npz"
    _save_margins(path, np.random.default_rng(5), f=0.0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["duck-audit", f"margins={path}", "attack.forgetting.replicates=20"])
    cli_audit.main()
    written = sorted(p.relative_to(tmp_path).parts[:3] for p in tmp_path.glob("outputs/*/*/*/audit.json"))
    assert written == [("outputs", "audit", "margins")], written
    assert "outputs/audit/margins/" in capsys.readouterr().out


def test_operating_characteristics_fast():
    """A small version of the shipped simulation (the full table is the slow test below): a method keeping the
    whole shift is never called forgotten, a retrained-like one mostly is, and the interval covers."""
    res = operating_characteristics(8, 8, n_examples=40, reps=6, fractions=(0.0, 1.0), replicates=30, seed=1)
    rows = {r["f"]: r for r in res["rows"]}
    assert rows[1.0]["P_forgotten"] == 0.0 and rows[1.0]["P_not_forgotten"] == 1.0
    assert rows[0.0]["P_not_forgotten"] == 0.0
    assert rows[0.0]["coverage"] >= 4 / 6 and rows[1.0]["coverage"] >= 4 / 6


def test_two_models_against_two_never_decide():
    """N = R = 2: a pool of 4 has 6 splits, too few for any location test to reject at 95 %, so the interval
    spans the whole grid and the verdict is inconclusive whatever the method kept (no power, no favourable
    word); the smallest sets do decide against a larger bank (docs/audit.md's N = 2 table)."""
    res = operating_characteristics(2, 2, n_examples=40, reps=3, fractions=(0.0, 1.0), replicates=20, seed=2)
    for row in res["rows"]:
        assert row["P_inconclusive"] == 1.0 and row["coverage"] == 1.0 and row["half_width"] == 1.5, row


@pytest.mark.slow
def test_operating_characteristics_meet_the_targets_at_n_32():
    """The issue's targets at N = R = 32, 40 forget examples: P(forgotten | f >= 0.25) <= 5 %, P(forgotten | f = 0)
    >= 80 %, P(not_forgotten | f = 0) <= 5 %, coverage >= 90 % (40 audits: binomial noise allowed for)."""
    res = operating_characteristics(32, 32, n_examples=40, reps=40, fractions=(0.0, 0.25, 0.5), seed=3)
    rows = {r["f"]: r for r in res["rows"]}
    assert rows[0.25]["P_forgotten"] <= 0.05 and rows[0.5]["P_forgotten"] == 0.0
    assert rows[0.0]["P_forgotten"] >= 0.8 and rows[0.0]["P_not_forgotten"] <= 0.05
    assert all(r["coverage"] >= 0.85 for r in rows.values())


def test_duck_bench_verdict_writes_its_table(run_cli):
    code, out, err, run_dir = run_cli("bench", "verdict", "bench.settings=[4]", "bench.variants=[overforget]",
                                      "bench.reps=2", "bench.replicates=20", "bench.n_examples=12",
                                      "bench.speed_examples=40", "bench.speed_models=4",
                                      "bench.speed_reference_examples=5", "bench.calibration_examples=20")
    assert code == 0, err
    bench = json.loads((run_dir / "bench.json").read_text())
    (row,) = bench["simulation"][0]["rows"]  # the over-forgetting variant: one method set, f = -0.5
    assert row["f"] == -0.5 and row["P_forgotten"] == 0.0
    assert bench["speed"]["examples"] == 40 and "Scoring one set with its interval" in out


def test_pooled_t_is_scipys_two_sample_t_and_welchs_at_equal_sizes():
    """The location test's statistic against scipy's ``ttest_ind`` (an independent implementation): the pooled
    variance t for unequal sides (4 against 9, one row per split), and at N = R also Welch's (the two coincide)."""
    from scipy import stats

    from attacks.equivalence import pooled_t

    rng = np.random.default_rng(8)
    a, b = rng.normal(0.3, 1.0, (5, 4)), rng.normal(0.0, 2.0, (5, 9))
    np.testing.assert_allclose(pooled_t(a, b), stats.ttest_ind(a, b, axis=1, equal_var=True).statistic, rtol=1e-12)
    assert not np.allclose(pooled_t(a, b), stats.ttest_ind(a, b, axis=1, equal_var=False).statistic)
    c = rng.normal(0.0, 2.0, (5, 4))
    np.testing.assert_allclose(pooled_t(a, c), stats.ttest_ind(a, c, axis=1, equal_var=False).statistic, rtol=1e-12)
    # constant sides: the denominator's floor keeps it finite, and equal constants give 0
    assert np.isfinite(pooled_t(np.ones((1, 3)), np.zeros((1, 3)))).all()
    assert pooled_t(np.ones((1, 3)), np.ones((1, 3)))[0] == 0.0
