"""The forgetting verdict's bookkeeping (attacks/equivalence.py, ALGORITHMS.md §11) that the main equivalence
tests leave open: F over every forget example when the tests score a subset (checked against a hand-computed
ε), F's interval and spread at the estimate, the grid-end flags of the interval, the models a side for an
interval touching the margin, the keyword arguments of ``forgetting_verdict`` reaching the record, the utility
ratios at their boundaries, every refusal of a margins file asserted with its whole message, the original's
shift δ̂ per example by hand, each φ argument named in its refusals, the calibrations run with the verdict's
settings (the grid with 0 and ±margin, replicates, seed, level), q on hand-computed F, and the rule's exact
words (no power, the grid-end marks ≥ / ≤, an interval inside the grid quoted plain)."""

from __future__ import annotations

import math
import re
import statistics

import numpy as np
import pytest
from refusals import refused
from test_equivalence import _calibration  # a calibration with hand-set location z and F samples

import attacks.equivalence as eq
from attacks.epsilon import epsilon_points, epsilons, forgetting_quality
from attacks.equivalence import (
    _models_to_decide,
    _set_record,
    forgetting_verdict,
    quality,
    read_margins,
    utility_ratios,
    verdict_and_calibrations,
)
from duck.errors import DuckInputError

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
Z90 = 1.6448536269514722


def _split_audit(n_models: int = 6, n_examples: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    """A bank of Gaussian φ and a method whose runs equal the bank on the first half of the examples (identical
    samples: every rule has TPR = FPR, so ε = 0, 1 point) and lie 100 above it on the second half (a threshold
    separates them: ε = ∞, clipped to 50, 0 points): F over all examples is 1/2 exactly."""
    rng = np.random.default_rng(seed)
    bank = rng.standard_normal((n_models, n_examples))
    method = bank.copy()
    method[:, n_examples // 2:] += 100.0
    return {"unlearned": method, "retrained": bank,
            "retrain_control": rng.standard_normal((n_models, n_examples)),
            "none_control": 3.0 + 0.7 * rng.standard_normal((n_models, n_examples))}


# --- F ---------------------------------------------------------------------------------------------------------


def test_quality_is_the_mean_bucket_points_by_hand():
    """N = 4 runs: ε_max = ⌈ln 3⌉ = 2, buckets [0, .5), [.5, 1), ... worth 1, 1/2, 1/4, 1/8. Example 0: the
    runs equal the bank (ε = 0, 1 point); example 1: the runs lie above every bank model (ε = 50, 0 points)."""
    bank = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    runs = bank + np.array([0.0, 10.0])
    assert quality(runs, bank) == pytest.approx(0.5, abs=1e-12)
    assert quality(bank, bank) == pytest.approx(1.0, abs=1e-12)
    assert quality(bank + 10.0, bank) == 0.0


def test_quality_matches_the_epsilon_module_on_random_sets():
    rng = np.random.default_rng(5)
    runs, bank = rng.standard_normal((6, 30)) + 0.5, rng.standard_normal((9, 30))
    assert quality(runs, bank) == pytest.approx(forgetting_quality(runs, bank), abs=1e-12)


def test_f_is_reported_over_every_example_when_the_tests_score_a_subset():
    """10 examples, the tests score 3 of them (F on 3 examples is a multiple of 1/3, never 1/2): the record's F is
    the hand-computed 1/2 over all 10, the controls' F theirs over all 10 too."""
    a = _split_audit()
    rec, cals = verdict_and_calibrations(a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"],
                                         replicates=20, max_examples=3, shifts=(-1.0, 0.0, 1.0))
    assert rec["calibration"]["examples_scored"] == 3 and rec["n_examples"] == 10
    assert cals["method"].observed in (0.0, 1 / 3, 2 / 3, 1.0)  # the subset's F: not the answer
    assert rec["quality"] == pytest.approx(0.5, abs=1e-12)
    for name in ("retrain_control", "none_control"):
        expected = forgetting_quality(a[name], a["retrained"])
        assert rec["controls"][name.split("_")[0]]["quality"] == pytest.approx(expected, abs=1e-12)


def test_f_is_taken_from_the_calibration_when_it_scored_every_example(monkeypatch):
    """The calibration already scored all examples: the record reports its F and does not score ε a second
    time (``quality`` is never called)."""
    calls = []
    monkeypatch.setattr(eq, "quality", lambda *args: calls.append(args) or 0.0)
    a = _split_audit()
    rec, cals = verdict_and_calibrations(a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"],
                                         replicates=20, max_examples=10, shifts=(-1.0, 0.0, 1.0))
    assert calls == []
    assert rec["quality"] == cals["method"].observed == pytest.approx(0.5, abs=1e-12)
    assert rec["controls"]["none"]["quality"] == cals["none"].observed


# --- F's interval and the grid's ends ----------------------------------------------------------------------------


def test_quality_sd_is_the_spread_at_the_nearest_share_f_ran_at():
    """Split F with standard deviations 0.01, 0.02, 0.03 at f = -0.5, 0, 0.5."""
    cal = _calibration([-1.0, 0.0, 1.0], [10, 0, -10], [-0.5, 0.0, 0.5], [0.5] * 3,
                       np.array([[0.01], [0.02], [0.03]]), 0.5)
    for f, sd in ((0.45, 0.03), (0.3, 0.03), (-0.45, 0.01), (-0.3, 0.01), (0.1, 0.02), (-0.1, 0.02), (2.0, 0.03)):
        assert cal.quality_sd(f) == pytest.approx(sd, rel=1e-9), f


@pytest.mark.parametrize("level,z", [(0.95, Z95), (0.9, Z90)])
def test_quality_interval_is_f_plus_minus_z_times_the_spread_at_the_estimate(level, z):
    """Location z = 10, 0, -10 at f = -1, 0, 1: the estimate is 0; F's splits there have SD 0.02 (0.01 and 0.03
    at ±0.5): F's interval is F ∓ z_{(1+level)/2} · 0.02, clipped to [0, 1]."""
    cal = _calibration([-1.0, 0.0, 1.0], [10, 0, -10], [-0.5, 0.0, 0.5], [0.5] * 3,
                       np.array([[0.01], [0.02], [0.03]]), 0.5)
    rec = _set_record("method", np.zeros((8, 40)), np.zeros((8, 40)), cal, 0.25, level)
    assert rec["shift"] == pytest.approx(0.0, abs=1e-12) and rec["quality"] == 0.5
    np.testing.assert_allclose(rec["quality_ci"], [0.5 - z * 0.02, 0.5 + z * 0.02], rtol=0, atol=1e-9)
    low = _calibration([-1.0, 0.0, 1.0], [10, 0, -10], [0.0], [0.01], 0.02, 0.01)
    ci = _set_record("method", np.zeros((8, 40)), np.zeros((8, 40)), low, 0.25, level)["quality_ci"]
    assert ci[0] == 0.0 and ci[1] == pytest.approx(0.01 + z * 0.02, abs=1e-9)
    high = _calibration([-1.0, 0.0, 1.0], [10, 0, -10], [0.0], [0.99], 0.02, 0.99)
    rec = _set_record("method", np.zeros((6, 40)), np.zeros((8, 40)), high, 0.25, level)
    assert rec["quality_ci"][1] == 1.0 and rec["quality_ci"][0] == pytest.approx(0.99 - z * 0.02, abs=1e-9)
    assert rec["n_models"] == 6 and rec["closest"] == rec["shift"]  # the set's models; the share closest: the estimate


def test_shift_beyond_flags_only_the_ends_of_the_grid():
    """An interval about [-0.19, 0.19] inside the grid [-1, 1] touches neither end (nor the middle share 0); a
    location beyond the grid puts estimate, low and high all at the end it points to."""
    inside = _calibration([-1.0, 0.0, 1.0], [10, 0, -10], [0.0], [0.2], 0.01, 0.2)
    rec = _set_record("method", np.zeros((8, 40)), np.zeros((8, 40)), inside, 0.25, 0.95)
    assert -0.2 < rec["shift_ci"][0] < -0.18 and 0.18 < rec["shift_ci"][1] < 0.2
    assert rec["shift_beyond"] == []
    above = _calibration([-1.0, 0.0, 1.0], [30, 20, 10], [1.0], [0.2], 0.01, 0.2)
    rec = _set_record("method", np.zeros((8, 40)), np.zeros((8, 40)), above, 0.25, 0.95)
    assert rec["shift_ci"] == [1.0, 1.0] and rec["shift_beyond"] == ["estimate", "low", "high"]
    below = _calibration([-1.0, 0.0, 1.0], [-10, -20, -30], [-1.0], [0.2], 0.01, 0.2)
    rec = _set_record("method", np.zeros((8, 40)), np.zeros((8, 40)), below, 0.25, 0.95)
    assert rec["shift"] == -1.0 and rec["shift_beyond"] == ["estimate", "low", "high"]


# --- models a side ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("effect", [
    {"estimate": 0.125, "low": 0.0, "high": 0.25},  # the interval touches the margin from inside
    {"estimate": 0.5, "low": 0.25, "high": 0.75},  # from outside
    {"estimate": -0.125, "low": -0.25, "high": 0.0}])  # on the over-forgetting side
def test_an_interval_touching_the_margin_needs_one_model_more(effect):
    """Half-width = distance to the margin (dyadic, exact): (half / gap)² N = N models would only reach the
    margin again; the answer is the next count, N + 1."""
    for n in (4, 8, 32):
        assert _models_to_decide(effect, 0.25, n) == n + 1


# --- forgetting_verdict's arguments -------------------------------------------------------------------------------


def test_forgetting_verdict_passes_every_argument_on():
    """Each keyword argument shows in the record: the level, the seed, the examples scored (max_examples), the
    grid (shifts with 0 and ±margin), the utility loss allowed; the record is verdict_and_calibrations'."""
    a = _split_audit(n_examples=12)
    acc = {"retain": ([0.85] * 6, [1.0] * 6), "test": ([1.0] * 6, [1.0] * 6)}
    args = (a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"])
    kw = dict(margin=0.3, level=0.9, replicates=20, seed=3, max_examples=5, shifts=(-1.0, 0.0, 1.0),
              accuracies=acc, max_utility_loss=0.2)
    rec = forgetting_verdict(*args, **kw)
    assert rec["level"] == 0.9 and rec["margin"] == 0.3
    assert rec["calibration"]["seed"] == 3 and rec["calibration"]["examples_scored"] == 5
    assert rec["calibration"]["shifts"] == [-1.0, -0.3, 0.0, 0.3, 1.0]
    assert rec["utility"]["max_loss"] == 0.2 and rec["utility"]["exceeded"] == []  # 0.85 is within 20 %
    assert rec == verdict_and_calibrations(*args, **kw)[0]
    default = forgetting_verdict(*args, replicates=20, shifts=(-1.0, 0.0, 1.0))
    assert default["calibration"]["seed"] == 0 and default["level"] == 0.95
    assert default == verdict_and_calibrations(*args, replicates=20, shifts=(-1.0, 0.0, 1.0))[0]


# --- utility ratios -----------------------------------------------------------------------------------------------


def test_utility_ratios_by_hand():
    """RA_U / RA_R = 0.4375 / 0.5 = 0.875 (dyadic, exact); TA 0.75 / 1 = 0.75 = 1 − 0.25 exactly: fell exactly
    the allowed loss, not more."""
    out = utility_ratios({"retain": ([0.375, 0.5], [0.5, 0.5]), "test": ([0.75], [1.0, 1.0])}, 0.25)
    assert out == {"max_loss": 0.25, "exceeded": [], "retain_ratio": 0.875, "test_ratio": 0.75, "ok": True}
    out = utility_ratios({"retain": ([0.375, 0.5], [0.5, 0.5]), "test": ([0.75], [1.0])}, 0.1)
    assert out["exceeded"] == ["retain", "test"] and out["max_loss"] == 0.1 and not out["ok"]


def test_utility_ratios_allow_no_loss_at_all():
    """max_utility_loss = 0 is in [0, 1): equal accuracies pass, any drop is exceeded."""
    assert utility_ratios({"retain": ([1.0], [1.0]), "test": ([0.5], [0.5])}, 0)["ok"]
    assert utility_ratios({"retain": ([1.0], [1.0]), "test": ([0.49], [0.5])}, 0.0)["exceeded"] == ["test"]


def test_utility_ratios_are_computed_in_float64():
    """float16 accuracies 0.9 and 0.8 are 0.89990234375 and 0.7998046875 exactly; their float64 mean
    0.849853515625 is not a float16 (a float16 mean would round it)."""
    mine, ref = np.array([0.9, 0.8], dtype=np.float16), np.array([1.0, 1.0], dtype=np.float16)
    out = utility_ratios({"retain": (mine, ref), "test": (mine, ref)}, 0.05)
    assert out["retain_ratio"] == out["test_ratio"] == (0.89990234375 + 0.7998046875) / 2


@pytest.mark.parametrize("loss", [1, 1.5, -0.1])
def test_utility_loss_outside_zero_one_is_refused(loss):
    with refused(f"max_utility_loss must be in [0, 1), got {loss}"):
        utility_ratios({"retain": ([1.0], [1.0]), "test": ([1.0], [1.0])}, loss)


def test_utility_ratios_refuse_missing_or_empty_accuracies():
    with refused("accuracies needs a 'test' entry: (method models' accuracies, retrained models' accuracies)"):
        utility_ratios({"retain": ([1.0], [1.0])}, 0.05)
    for bad in (([], [1.0]), ([1.0], []), ([1.0], [0.0, 0.0])):  # no runs, no bank, a bank mean of 0
        with refused("the 'retain' accuracies must be non-empty with a positive retrained mean"):
            utility_ratios({"retain": bad, "test": ([1.0], [1.0])}, 0.05)


# --- margins files ------------------------------------------------------------------------------------------------

ALL_NAMES = ['unlearned', 'retrained', 'retrain_control', 'none_control', 'retain_acc_unlearned',
             'retain_acc_retrained', 'test_acc_unlearned', 'test_acc_retrained']


def _margins(n_unlearned: int = 6, n_bank: int = 8, n_examples: int = 5, seed: int = 0) -> dict[str, np.ndarray]:
    """φ arrays with N = 6 runs (and controls) and R = 8 bank models (so a mix-up of the two sides shows) on 5
    examples."""
    rng = np.random.default_rng(seed)
    return {"unlearned": rng.standard_normal((n_unlearned, n_examples)),
            "retrained": rng.standard_normal((n_bank, n_examples)),
            "retrain_control": rng.standard_normal((n_unlearned, n_examples)),
            "none_control": rng.standard_normal((n_unlearned, n_examples))}


def _accuracies(n_unlearned: int = 6, n_bank: int = 8) -> dict[str, np.ndarray]:
    return {"retain_acc_unlearned": np.linspace(0.0, 1.0, n_unlearned), "retain_acc_retrained": np.ones(n_bank),
            "test_acc_unlearned": np.full(n_unlearned, 0.5), "test_acc_retrained": np.full(n_bank, 0.75)}


def test_accuracies_are_one_float64_per_model_of_their_side(tmp_path):
    """N = 6 runs, R = 8 bank models: each accuracy array is checked against its own side; a column (6, 1) of
    float16, a uint8 vector and an accuracy of exactly 0 (in [0, 1]) come back as float64 vectors."""
    acc = _accuracies()
    acc["retain_acc_unlearned"] = acc["retain_acc_unlearned"].astype(np.float16).reshape(6, 1)
    acc["retain_acc_retrained"] = np.ones(8, dtype=np.uint8)
    path = tmp_path / "m.npz"
    np.savez(path, **_margins(), **acc)
    out = read_margins(path)
    assert sorted(out) == sorted(ALL_NAMES)
    for k, n in (("retain_acc_unlearned", 6), ("retain_acc_retrained", 8), ("test_acc_unlearned", 6),
                 ("test_acc_retrained", 8)):
        assert out[k].shape == (n,) and out[k].dtype == np.float64, k
        np.testing.assert_array_equal(out[k], np.asarray(acc[k], dtype=np.float64).reshape(-1))
    assert out["retain_acc_unlearned"][0] == 0.0


@pytest.mark.parametrize("key,values,got", [
    ("retain_acc_unlearned", np.full(5, 0.5), "5 values"),  # one per example, not per run
    ("test_acc_retrained", np.full(6, 0.5), "6 values"),  # as many as the runs, not the bank
    ("test_acc_unlearned", np.array([0.5, 0.5, np.nan, 0.5, 0.5, 0.5]), "nan"),  # the offending value itself
    ("retain_acc_retrained", np.array([1.0] * 7 + [np.inf]), "inf"),
    ("retain_acc_unlearned", np.array([0.5] * 5 + [-0.01]), "-0.01"),
    ("test_acc_retrained", np.array([0.5] * 7 + [1.01]), "1.01")])
def test_accuracies_outside_zero_one_or_of_the_wrong_size_are_refused(tmp_path, key, values, got):
    side, n = ("unlearned", 6) if key.endswith("unlearned") else ("retrained", 8)
    acc = _accuracies()
    acc[key] = values
    path = tmp_path / "m.npz"
    np.savez(path, **_margins(), **acc)
    with refused(f"margins={path}: '{key}' must hold one accuracy in [0, 1] per model of '{side}' ({n}), got "
                  f"{got}"):
        read_margins(path)


def test_margins_file_refusals_say_what_is_wrong(tmp_path):
    nope = tmp_path / "nope.npz"
    with refused(f"margins={nope}: no such file; pass margins=PATH to an .npz of φ arrays (unlearned, retrained, "
                  "retrain_control, none_control; docs/formats.md)"):
        read_margins(nope)
    few = tmp_path / "few.npz"
    np.savez(few, unlearned=np.zeros((3, 4)))
    with refused(f"margins={few} lacks the array(s) ['retrained', 'retrain_control', 'none_control']; it must hold "
                  "['unlearned', 'retrained', 'retrain_control', 'none_control'] (φ, models × forget examples)"):
        read_margins(few)
    extra = tmp_path / "extra.npz"
    np.savez(extra, **_margins(), notes=np.zeros(3))
    with refused(f"margins={extra} holds unknown array(s) ['notes']; known: {ALL_NAMES}"):
        read_margins(extra)
    flags = tmp_path / "flags.npz"
    np.savez(flags, **{**_margins(), "retrained": np.ones((8, 5), dtype=bool)})
    with refused(f"margins={flags}: array 'retrained' has dtype bool; φ must be numbers"):
        read_margins(flags)
    flat = tmp_path / "flat.npz"
    np.savez(flat, **{**_margins(), "retrain_control": np.zeros(5)})
    with refused("margins array 'retrain_control' must be a (models, examples) array of φ, got shape (5,)"):
        read_margins(flat)
    part = tmp_path / "part.npz"
    np.savez(part, **_margins(), retain_acc_unlearned=np.ones(6))
    with refused(f"margins={part} holds ['retain_acc_unlearned'] but not ['retain_acc_retrained', "
                  "'test_acc_retrained', 'test_acc_unlearned']: give all four accuracy arrays or none"):
        read_margins(part)
    small = tmp_path / "small.npz"  # refused on reading, before duck-audit makes its run directory
    np.savez(small, **{**_margins(), "none_control": np.zeros((2, 5))})
    with refused("the controls must hold as many models as the method's set (6), got retrain_control 6 and "
                 "none_control 2: F's buckets and the ε a set can reach depend on its number of models, and q "
                 "compares the three"):
        read_margins(small)
    narrow = tmp_path / "narrow.npz"
    np.savez(narrow, **{**_margins(), "retrained": np.zeros((8, 4))})
    with refused("all four φ arrays must hold the same forget examples, got 5, 4, 5 and 5 examples"):
        read_margins(narrow)


def test_a_pickled_array_is_refused_unread(tmp_path):
    """Object arrays need pickle: never loaded; the message names numpy's exception type."""
    obj = tmp_path / "obj.npz"
    np.savez(obj, **_margins(), none_control_meta=np.array([{"a": 1}], dtype=object))
    head = re.escape(f"margins={obj} is not a readable .npz of arrays (ValueError: ")
    tail = re.escape("); write it with numpy.savez (no pickled objects)")
    with pytest.raises(DuckInputError, match=f"^{head}.*allow_pickle.*{tail}$"):
        read_margins(obj)


# --- the original's shift and the settings of the calibrations ---------------------------------------------------


def test_original_shift_is_per_example_by_hand():
    """δ̂_x = mean of the none control on x − mean of the bank and the retrain control on x, example by example:
    retrained means (0 + 2 + 1) / 3 = 1 and (10 + 10 + 13) / 3 = 11, none means 6 and 25: δ̂ = (5, 14). A scalar
    mean over all examples on either side (15.5 or 6) would give another vector."""
    bank = np.array([[0.0, 10.0], [2.0, 10.0]])
    ctrl = np.array([[1.0, 13.0]])
    none = np.array([[5.0, 20.0], [7.0, 30.0]])
    delta = eq.original_shift(bank, ctrl, none)
    assert delta.shape == (2,)
    np.testing.assert_array_equal(delta, [5.0, 14.0])


@pytest.mark.parametrize("name", ["unlearned", "retrained", "retrain_control", "none_control"])
def test_each_phi_array_is_named_in_its_refusal(name):
    """A flat vector, a single model and a NaN in one of the four arrays: the refusal names that argument."""
    ok = np.arange(20.0).reshape(4, 5)
    arrays = {"unlearned": ok, "retrained": ok, "retrain_control": ok, "none_control": ok}
    with refused(f"{name} must be a (models, examples) array of φ, got shape (5,)"):
        forgetting_verdict(**{**arrays, name: np.zeros(5)})
    with refused(f"{name} needs at least 2 models and 1 example, got shape (1, 5)"):
        forgetting_verdict(**{**arrays, name: ok[:1]})
    nan = ok.copy()
    nan[2, 3] = np.nan
    with refused(f"{name} holds NaN or infinite values: φ must be finite margins"):
        forgetting_verdict(**{**arrays, name: nan})


@pytest.mark.parametrize("n_ctrl, n_none", [(3, 4), (4, 5), (5, 5)])
def test_controls_of_another_size_than_the_method_are_refused(n_ctrl, n_none):
    """The controls hold as many models as the method's set (the pipeline's N more retrained models and N
    originals): F's buckets end at ⌈ln(N − 1)⌉ and the ε a set can reach grow with its models, so q, which puts
    the method's F between the controls', would mix scales. Fewer or more models in either control are refused
    before any calibration."""
    rng = np.random.default_rng(0)
    u, bank = rng.standard_normal((4, 6)), rng.standard_normal((8, 6))
    with refused(f"the controls must hold as many models as the method's set (4), got retrain_control {n_ctrl} "
                 f"and none_control {n_none}: F's buckets and the ε a set can reach depend on its number of "
                 "models, and q compares the three"):
        forgetting_verdict(u, bank, rng.standard_normal((n_ctrl, 6)), rng.standard_normal((n_none, 6)))


def test_the_calibrations_are_calibrate_run_with_the_verdicts_settings():
    """Each set's calibration is :func:`calibrate` of that set against the bank, with δ̂ from the controls, the
    given shares plus 0 and ±margin (0 added when the shares lack it), and the verdict's replicates, seed and
    level: F's test ran ``replicates`` splits at shares inside the location's interval at that level."""
    rng = np.random.default_rng(7)
    mu, sd = rng.normal(0, 2, 20), rng.uniform(0.5, 1.5, 20)
    draw = lambda shift, s=1.0: mu + shift * sd + s * sd * rng.standard_normal((6, 20))
    u, bank, ctrl, none = draw(0.6), draw(0.0), draw(0.0), draw(3.0, 0.7)
    rec, cals = verdict_and_calibrations(u, bank, ctrl, none, margin=0.3, level=0.5, replicates=20, seed=3,
                                         shifts=(-1.0, -0.5, 0.5, 1.0))
    grid = (-1.0, -0.5, -0.3, 0.0, 0.3, 0.5, 1.0)
    assert rec["calibration"]["shifts"] == list(grid)
    delta = eq.original_shift(bank, ctrl, none)
    for name, phi in (("method", u), ("retrain", ctrl), ("none", none)):
        cal = cals[name]
        direct = eq.calibrate(phi, bank, delta, shifts=grid, replicates=20, seed=3, level=0.5)
        assert cal.samples.shape == (cal.f_shifts.size, 20), name
        np.testing.assert_array_equal(cal.shifts, grid)
        np.testing.assert_array_equal(cal.location_z, direct.location_z)
        np.testing.assert_array_equal(cal.f_shifts, direct.f_shifts)
        np.testing.assert_array_equal(cal.samples, direct.samples)
        x, accept = cal.interval(0.5)
        if accept.any():
            lo, hi = x[accept].min(), x[accept].max()  # f_points rounds the shares to 6 decimals
            assert lo - 1e-6 <= cal.f_shifts.min() and cal.f_shifts.max() <= hi + 1e-6, name
    wide = eq.calibrate(u, bank, delta, shifts=grid, replicates=20, seed=3, level=0.95)
    assert not np.array_equal(wide.f_shifts, cals["method"].f_shifts)  # the level matters here
    other = eq.calibrate(u, bank, delta, shifts=grid, replicates=20, seed=0, level=0.5)
    assert not np.array_equal(other.location_z, cals["method"].location_z)  # and so does the seed


# --- q ------------------------------------------------------------------------------------------------------------


def test_q_puts_the_methods_f_on_the_scale_from_none_to_the_retrain_control():
    """F by hand (8 examples; runs equal to the bank: 1 point, 100 above it: 0 points): the method 1/2, the
    retrain control (the bank itself) 1, the none control (equal on 2 examples of 8) 1/4; q = (1/2 − 1/4) /
    (1 − 1/4) = 1/3, its interval F's interval on the same scale. Controls the wrong way round (F_retrain 0 <
    F_none 1): no scale, q is None."""
    rng = np.random.default_rng(11)
    bank = rng.standard_normal((6, 8))
    method, none = bank.copy(), bank.copy()
    method[:, 4:] += 100.0
    none[:, 2:] += 100.0
    rec = forgetting_verdict(method, bank, bank.copy(), none, replicates=20, shifts=(-1.0, 0.0, 1.0))
    assert rec["quality"] == pytest.approx(0.5, abs=1e-12)
    assert rec["controls"]["retrain"]["quality"] == pytest.approx(1.0, abs=1e-12)
    assert rec["controls"]["none"]["quality"] == pytest.approx(0.25, abs=1e-12)
    assert rec["controls"]["retrain"]["set"] == "retrain" and rec["controls"]["none"]["set"] == "none"
    assert rec["quality_normalised"] == pytest.approx(1 / 3, abs=1e-12)
    np.testing.assert_allclose(rec["quality_normalised_ci"], [(b - 0.25) / 0.75 for b in rec["quality_ci"]],
                               rtol=0, atol=1e-12)
    swapped = forgetting_verdict(method, bank, bank + 100.0, bank.copy(), replicates=20, shifts=(-1.0, 0.0, 1.0))
    assert swapped["controls"]["retrain"]["quality"] == 0.0
    assert swapped["controls"]["none"]["quality"] == pytest.approx(1.0, abs=1e-12)
    assert swapped["quality_normalised"] is None and swapped["quality_normalised_ci"] is None


# --- the rule's words ---------------------------------------------------------------------------------------------

SHIFT_WORDS = ("of the original's shift away from retrained models (negative: moved past them; margin ±0.25, "
               "95 % interval)")


def _hand_cal(shifts, location_z, observed=0.3):
    """A calibration on ``shifts`` with the location z ``location_z(f)`` and F's splits centred on the set's own F
    at f = 0 (so F accepts there: consistent)."""
    s = np.asarray(shifts, dtype=float)
    return _calibration(s, location_z(s), [0.0], [observed], 0.01, observed)


def _verdict_on(monkeypatch, method_z, none_z, **kw):
    """The verdict with hand-made calibrations: the controls' given (reused), the method's from a stand-in for
    ``calibrate`` on the grid the verdict asks for (the only calibration it runs)."""
    grids = []

    def fake_calibrate(phi, bank, delta, **k):
        grids.append(k["shifts"])
        return _hand_cal(k["shifts"], method_z)

    monkeypatch.setattr(eq, "calibrate", fake_calibrate)
    rng = np.random.default_rng(0)
    phi = [rng.standard_normal((8, 40)) for _ in range(4)]
    retrain = _hand_cal([-1.0, 0.0, 1.0], lambda f: -10 * f)  # about [-0.19, 0.19]: within the margin
    none = _hand_cal([-1.0, 0.0, 1.0], none_z)
    rec, _ = verdict_and_calibrations(*phi, calibrations={"retrain": retrain, "none": none}, replicates=20, **kw)
    assert len(grids) == 1
    return rec


def test_the_no_power_rule_quotes_the_none_controls_interval(monkeypatch):
    """The none control's location z = 10 (0.1 − f) on [-1, 1]: its estimate 0.10, its interval the f (steps of
    0.01) with |z| <= 1.96, [-0.09, 0.29]: it holds the margin 0.25 (inconclusive), so the audit has no power; its
    numbers are quoted plain (no grid-end marks)."""
    rec = _verdict_on(monkeypatch, lambda f: -10 * f, lambda f: 10 * (0.1 - f))
    assert rec["controls"]["none"]["decision"] == "inconclusive"
    assert rec["verdict"] == "inconclusive" and rec["power"] is False
    assert rec["rule"] == (
        "no power: the none control (models trained with the forget set) is not shown farther from retraining "
        "than the margin (its equivalent shift 0.10 [-0.09, 0.29]); the original barely moved these examples, or N "
        "and R are too small: raise attack.forgetting.n_unlearned / n_retrained, or audit a forget set the model "
        "memorises")


@pytest.mark.parametrize(("none_ci", "power"), [
    ([0.25, 1.3], False),     # the low end at the margin: the interval holds +m, not wholly beyond it
    ([0.26, 1.3], True),
    ([-1.3, -0.25], False),   # the high end at −m
    ([-1.3, -0.26], True),
    ([0.0, 0.2], False),      # inside the margin on both sides
    ([-0.2, 0.0], False),
])
def test_power_needs_the_none_controls_interval_wholly_beyond_the_margin(monkeypatch, none_ci, power):
    """Power: the none control's interval lies wholly above +m or wholly below −m (strictly: the interval's ends are
    grid shares, and the grid holds ±m, so an end exactly at the margin is reached). The none control's record is
    the real one with its interval set by hand; the method's location is the one of the rule tests above."""
    real = eq._set_record

    def none_with_interval(name, *args, **kw):
        rec = real(name, *args, **kw)
        if name == "none":
            rec["shift_ci"] = list(none_ci)
        return rec

    monkeypatch.setattr(eq, "_set_record", none_with_interval)
    rec = _verdict_on(monkeypatch, lambda f: -10 * f, lambda f: 30 - 10 * f)
    assert rec["power"] is power
    assert rec["rule"].startswith("no power: ") is (not power)
    if not power:
        assert rec["verdict"] == "inconclusive"


def test_f_vetoing_the_none_control_is_not_power(monkeypatch):
    """Power is the location's (module docstring): the none control's location interval [-0.09, 0.29] holds the
    margin, so the intervals cannot tell ±0.25 from the original's imprint. Its F's splits centred at 0.9, far from
    its observed F of 0.3 (sd 0.01), make F reject it (inconsistent: decision not_forgotten) — that says the sets
    differ, not that the audit could have shown a method within the margin: still no power, inconclusive."""
    def fake_calibrate(phi, bank, delta, **k):
        return _hand_cal(k["shifts"], lambda f: -10 * f)  # the method: about [-0.19, 0.19], inside the margin

    monkeypatch.setattr(eq, "calibrate", fake_calibrate)
    rng = np.random.default_rng(0)
    phi = [rng.standard_normal((8, 40)) for _ in range(4)]
    s = np.array([-1.0, 0.0, 1.0])
    retrain = _hand_cal(s, lambda f: -10 * f)
    none = _calibration(s, 10 * (0.1 - s), [0.0], [0.9], 0.01, 0.3)
    rec, _ = verdict_and_calibrations(*phi, calibrations={"retrain": retrain, "none": none}, replicates=20)
    assert rec["controls"]["none"]["consistent"] is False and rec["controls"]["none"]["decision"] == "not_forgotten"
    assert rec["controls"]["none"]["shift_ci"][0] < 0.25 < rec["controls"]["none"]["shift_ci"][1]
    assert rec["power"] is False and rec["verdict"] == "inconclusive" and rec["rule"].startswith("no power: ")


def test_the_rule_marks_the_grid_end_the_method_lies_beyond(monkeypatch):
    """Shares up to ±0.5 (the grid -0.5, -0.25, 0, 0.25, 0.5 with the margin): a location z of one sign at every
    share puts the estimate and both ends at the grid's end it points to, written "≥ 0.50" above and
    "≤ -0.50" below; both lie beyond the margin: not forgotten (the none control, beyond f = 1, gives power)."""
    none_far = lambda f: 30 - 10 * f
    above = _verdict_on(monkeypatch, lambda f: 20 - 10 * f, none_far, shifts=(-0.5, 0.0, 0.5))
    assert above["power"] is True and above["shift_beyond"] == ["estimate", "low", "high"]
    assert above["verdict"] == "not_forgotten"
    assert above["rule"] == (f"the method keeps an equivalent ≥ 0.50 [≥ 0.50, ≥ 0.50] {SHIFT_WORDS}: farther from "
                             "retraining than the margin")
    below = _verdict_on(monkeypatch, lambda f: -20 - 10 * f, none_far, shifts=(-0.5, 0.0, 0.5))
    assert below["verdict"] == "not_forgotten" and below["shift"] == -0.5
    assert below["rule"] == (f"the method keeps an equivalent ≤ -0.50 [≤ -0.50, ≤ -0.50] {SHIFT_WORDS}: farther "
                             "from retraining than the margin")


def test_the_rule_quotes_an_interval_inside_the_grid_plain(monkeypatch):
    """Location z = k (0.05 − f) with k = 1.96 / 0.121 on the grid from -0.5 to 0.5 (steps of 0.0025 between the
    shares): the estimate 0.05, the interval 0.05 ∓ 0.121 cut to the steps, [-0.07, 0.17]; inside ±0.25:
    forgotten, the numbers quoted without grid-end marks."""
    k = Z95 / 0.121
    rec = _verdict_on(monkeypatch, lambda f: k * (0.05 - f), lambda f: 30 - 10 * f, shifts=(-0.5, 0.0, 0.5))
    assert rec["shift"] == pytest.approx(0.05, abs=1e-9) and rec["shift_beyond"] == []
    np.testing.assert_allclose(rec["shift_ci"], [-0.07, 0.17], rtol=0, atol=1e-9)
    assert rec["verdict"] == "forgotten"
    assert rec["rule"] == (f"the method keeps an equivalent 0.05 [-0.07, 0.17] {SHIFT_WORDS}: closer to retraining "
                           "than the margin")
    assert rec["models_to_decide"] is None  # decided: no count of models to ask for
    assert (rec["n_unlearned"], rec["n_retrained"], rec["n_examples"]) == (8, 8, 40)  # models, not examples


def test_the_rule_of_runs_f_rejects_says_they_differ_in_more_than_a_shift(monkeypatch):
    """The method's location interval lies inside the margin, but its F's splits centre on 0.9 against its own F
    of 0.3 (SD 0.01): F rejects every share, the runs are inconsistent and not forgotten, in these words."""
    def fake_calibrate(phi, bank, delta, **k):
        s = np.asarray(k["shifts"], dtype=float)
        return _calibration(s, -10 * s, [0.0], [0.9], 0.01, 0.3)

    monkeypatch.setattr(eq, "calibrate", fake_calibrate)
    rng = np.random.default_rng(0)
    phi = [rng.standard_normal((8, 40)) for _ in range(4)]
    retrain = _hand_cal([-1.0, 0.0, 1.0], lambda f: -10 * f)
    none = _hand_cal([-1.0, 0.0, 1.0], lambda f: 30 - 10 * f)
    rec, _ = verdict_and_calibrations(*phi, calibrations={"retrain": retrain, "none": none}, replicates=20)
    assert rec["consistent"] is False and rec["verdict"] == "not_forgotten"
    assert rec["rule"].endswith(f"{SHIFT_WORDS}, but F rejects every share in that interval at 99 %: the runs differ "
                                "from retrained models in more than a shift of their outputs (their spread, typically)")


def test_an_inconclusive_rule_asks_for_the_models_that_would_decide_it(monkeypatch):
    """Location z = k (0.2 − f), k = 1.96 / 0.121: the interval [0.08, 0.32] holds the margin 0.25, inconclusive.
    The rule asks for about ⌈8 (half-width / gap)²⌉ models a side (half-width 0.12, gap 0.05: 47), and adds that
    not even the retrain control is shown within the margin when its own interval holds it; an estimate on the
    margin (gap 0) asks for more models without a number."""
    k = Z95 / 0.121
    rec = _verdict_on(monkeypatch, lambda f: k * (0.2 - f), lambda f: 30 - 10 * f, shifts=(-0.5, 0.0, 0.5))
    lo, hi = rec["shift_ci"]
    half, gap = max(hi - rec["shift"], rec["shift"] - lo), 0.25 - abs(rec["shift"])
    want = max(9, math.ceil(8 * (half / gap) ** 2))
    assert rec["verdict"] == "inconclusive" and rec["models_to_decide"] == want == 47
    assert rec["rule"].endswith(f"{SHIFT_WORDS}: the interval holds the margin; about 47 models a side "
                                "(attack.forgetting.n_unlearned / n_retrained) would decide it")
    on_margin = _verdict_on(monkeypatch, lambda f: k * (0.25 - f), lambda f: 30 - 10 * f, shifts=(-0.5, 0.0, 0.5))
    assert on_margin["shift"] == pytest.approx(0.25) and on_margin["models_to_decide"] is None
    assert on_margin["rule"].endswith("the interval holds the margin; more models a side would narrow it")
    # a retrain control whose interval holds the margin too: said after the request
    def fake_calibrate(phi, bank, delta, **kw):
        return _hand_cal(kw["shifts"], lambda f: k * (0.2 - f))

    monkeypatch.setattr(eq, "calibrate", fake_calibrate)
    rng = np.random.default_rng(0)
    phi = [rng.standard_normal((8, 40)) for _ in range(4)]
    wide = _hand_cal([-1.0, 0.0, 1.0], lambda f: 2 * (0.1 - f))
    none = _hand_cal([-1.0, 0.0, 1.0], lambda f: 30 - 10 * f)
    rec, _ = verdict_and_calibrations(*phi, calibrations={"retrain": wide, "none": none}, replicates=20,
                                      shifts=(-0.5, 0.0, 0.5))
    assert rec["controls"]["retrain"]["decision"] != "forgotten"
    assert rec["rule"].endswith("would decide it; at this N and R not even the retrain control (retrained models "
                                "with other seeds) is shown within the margin")


# --- the record's calibration, test description and utility sentence (issue 39: the second half of the run) -------


def test_the_record_carries_the_methods_calibration_and_names_its_test():
    """The record's ``calibration`` is the method's calibration as returned (grid, location z, F's shares and z,
    examples scored) with the replicates and seed asked for; ``test`` names the procedure in full; ``consistent``
    is the method's F-consistency."""
    a = _split_audit(n_examples=12)
    rec, cals = verdict_and_calibrations(a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"],
                                         replicates=21, seed=4, shifts=(-1.0, 0.0, 1.0))
    cal = cals["method"]
    assert rec["calibration"] == {"replicates": 21, "shifts": cal.shifts.tolist(),
                                  "location_z": cal.location_z.tolist(), "f_shifts": cal.f_shifts.tolist(),
                                  "f_z": cal.z().tolist(), "examples_scored": 12, "seed": 4}
    assert rec["test"] == ("equivalence (two one-sided tests) of the location statistic against its shift-back "
                           "permutation distribution at each fraction of the original's shift, the epsilon score "
                           "F's test as a consistency veto (docs/audit.md, forgetting verdict)")
    assert isinstance(rec["consistent"], bool)


@pytest.mark.parametrize(("retain", "test", "sentence"), [
    (0.5, 1.0, "; forgetting cost more than 10 % of the retrained models' retain accuracy"),
    (1.0, 0.5, "; forgetting cost more than 10 % of the retrained models' test accuracy"),
    (0.5, 0.5, "; forgetting cost more than 10 % of the retrained models' retain and test accuracy"),
    (0.95, 0.95, ""),
])
def test_the_rule_says_which_accuracy_forgetting_cost_beyond_the_allowed_loss(retain, test, sentence):
    """Accuracy ratios against the retrained models' below 1 − 0.1 are named after the verdict's rule, joined by
    "and"; within the loss the rule is the verdict's alone."""
    a = _split_audit()
    args = (a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"])
    kw = dict(replicates=20, shifts=(-1.0, 0.0, 1.0))
    plain, _ = verdict_and_calibrations(*args, **kw)
    acc = {"retain": ([retain] * 6, [1.0] * 6), "test": ([test] * 6, [1.0] * 6)}
    rec, _ = verdict_and_calibrations(*args, accuracies=acc, max_utility_loss=0.1, **kw)
    assert rec["rule"] == plain["rule"] + sentence
    assert rec["utility"]["ok"] is (sentence == "")


@pytest.mark.parametrize(("margin", "level", "message"), [
    ("x", 0.95, "margin and level must be numbers, got 'x' and 0.95"),
    (0.25, None, "margin and level must be numbers, got 0.25 and None"),
    (0.0, 0.95, "the margin (margin=, attack.forgetting.margin) must be in (0, 1) (the share of the original's "
                "shift a forgotten method may keep), got 0.0"),
    (1.0, 0.95, "the margin (margin=, attack.forgetting.margin) must be in (0, 1) (the share of the original's "
                "shift a forgotten method may keep), got 1.0"),
    (0.25, 1.0, "the interval level must be in [0.5, 1), got 1.0"),
    (0.25, 1.5, "the interval level must be in [0.5, 1), got 1.5"),
    (0.25, 0.49, "the interval level must be in [0.5, 1), got 0.49"),
])
def test_margin_and_level_refusals_in_full(margin, level, message):
    a = _split_audit()
    with pytest.raises(DuckInputError) as e:
        verdict_and_calibrations(a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"],
                                 margin=margin, level=level, replicates=20)
    assert str(e.value) == message


def test_margin_and_level_at_their_inclusive_ends_are_taken():
    a = _split_audit()
    rec, _ = verdict_and_calibrations(a["unlearned"], a["retrained"], a["retrain_control"], a["none_control"],
                                      margin=0.999, level=0.5, replicates=20, shifts=(-1.0, 0.0, 1.0))
    assert rec["margin"] == 0.999 and rec["level"] == 0.5


def test_decide_at_the_interval_boundaries():
    """``_decide``: inside (−m, m) strictly: forgotten; wholly beyond +m or −m strictly: not forgotten; an end
    exactly at ±m (grid shares hold ±m, so this happens) or an interval across it: inconclusive; inconsistent runs:
    not forgotten whatever the interval."""
    m = 0.25
    cases = [((-0.2, 0.2), "forgotten"), ((-0.25, 0.2), "inconclusive"), ((-0.2, 0.25), "inconclusive"),
             ((0.26, 0.9), "not_forgotten"), ((0.25, 0.9), "inconclusive"), ((-0.9, -0.26), "not_forgotten"),
             ((-0.9, -0.25), "inconclusive"), ((-0.3, 0.3), "inconclusive")]
    for (low, high), expected in cases:
        assert eq._decide({"low": low, "high": high, "estimate": (low + high) / 2}, m) == expected, (low, high)
        assert eq._decide({"low": low, "high": high, "consistent": False}, m) == "not_forgotten"


# --- calibrate: the location test by a direct loop ---------------------------------------------------------------


def _location_z_by_loop(tested, bank, shift, shifts, seed, max_examples):
    """The location test of ``calibrate`` written out one split at a time: the examples (all, or ``max_examples``
    drawn without replacement, sorted) and the 2000 splits from the generator seeded [seed, 0xCA1B], in that
    order; at each share f the pool (bank, then tested − f δ̂) standardised per example by its standard deviation
    (ddof 1; floored at 1e-3 × the median sd); each model's score its mean over the examples; the statistic the
    two-sample t of the set's scores against the bank's, (mean − mean) / √(s_p² (1/N + 1/R)) with the pooled
    variance s_p² = ((N − 1) var + (R − 1) var) / (N + R − 2) (ddof 1); z = (observed − the splits' mean) / the
    splits' standard deviation (ddof 1)."""
    rng = np.random.default_rng([seed, 0xCA1B])
    n = bank.shape[1]
    cols = np.arange(n) if n <= max_examples else np.sort(rng.choice(n, max_examples, replace=False))
    t, b, d = tested[:, cols], bank[:, cols], shift[cols]
    n_t, r = t.shape[0], b.shape[0]
    perms = [rng.permutation(n_t + r) for _ in range(eq.LOCATION_SPLITS)]
    z = []
    for f in sorted(set(shifts)):
        pool = np.concatenate([b, t - f * d])
        sd = np.array([np.std(pool[:, j], ddof=1) for j in range(pool.shape[1])])
        sd = np.maximum(sd, 1e-3 * np.median(sd) + 1e-12)
        std = pool / sd

        def stat(rows_t, rows_b):
            score_t = [std[i].mean() for i in rows_t]  # each model's mean over the examples
            score_b = [std[i].mean() for i in rows_b]
            n_a, n_b = len(score_t), len(score_b)
            pooled = ((n_a - 1) * statistics.variance(score_t) + (n_b - 1) * statistics.variance(score_b)) / (n_a + n_b - 2)
            return (statistics.fmean(score_t) - statistics.fmean(score_b)) / math.sqrt(pooled * (1 / n_a + 1 / n_b))

        observed = stat(np.arange(r, r + n_t), np.arange(r))
        null = np.array([stat(p[:n_t], p[n_t:]) for p in perms])
        z.append((observed - null.mean()) / null.std(ddof=1))
    return np.array(z), rng, (t, b, d)


def _f_samples_by_loop(rng, t, b, d, f_shifts, replicates):
    """F's test of ``calibrate`` one split at a time, continuing the location test's generator: ``replicates``
    splits of the N + R models, shared by every share; at share f the pool (bank, then tested − f δ̂) is split, the
    first N given back f δ̂ (the tested side), the rest the reference; a split's F is the mean ε points over the
    examples. Returns (samples (H, K), the set's own F)."""
    n_t, r = t.shape[0], b.shape[0]
    perms = [rng.permutation(n_t + r) for _ in range(replicates)]
    samples = np.empty((len(f_shifts), replicates))
    for h, f in enumerate(f_shifts):
        pool = np.concatenate([b, t - f * d])
        for k, p in enumerate(perms):
            samples[h, k] = epsilon_points(epsilons(pool[p[:n_t]] + f * d, pool[p[n_t:]]), n_t).mean()
    return samples, float(epsilon_points(epsilons(t, b), n_t).mean())


@pytest.mark.parametrize(("n_examples", "max_examples", "seed"), [(6, 10, 0), (6, 6, 1), (9, 5, 3)])
def test_calibrates_location_z_equals_a_direct_loop(n_examples, max_examples, seed):
    """Heterogeneous per-example spreads (so the per-example standardisation matters), one example whose pool
    is almost constant (its sd floored), a tested set shifted by 0.6 δ̂."""
    rng = np.random.default_rng(11)
    scale = np.linspace(0.5, 3.0, n_examples)
    bank = rng.standard_normal((5, n_examples)) * scale
    shift = np.linspace(1.0, 2.0, n_examples)
    tested = rng.standard_normal((4, n_examples)) * scale + 0.6 * shift
    bank[:, 0] = 1.0
    tested[:, 0] = 1.0 + 0.6 * shift[0] + 1e-9 * np.arange(4)
    shifts = (-1.0, 0.0, 0.6, 1.0)
    cal = eq.calibrate(tested, bank, shift, shifts=shifts, replicates=20, seed=seed, max_examples=max_examples)
    expected, rng, (t, b, d) = _location_z_by_loop(tested, bank, shift, shifts, seed, max_examples)
    np.testing.assert_allclose(cal.location_z, expected, rtol=1e-9, atol=1e-9)
    assert cal.n_scored == min(n_examples, max_examples) and cal.n_examples == n_examples
    assert (cal.n_models, cal.n_bank) == (4, 5)
    samples, observed = _f_samples_by_loop(rng, t, b, d, cal.f_shifts, 20)
    np.testing.assert_allclose(cal.samples, samples, rtol=1e-12, atol=1e-12)
    assert cal.observed == pytest.approx(observed, abs=1e-12)
    # F's test runs where the location's 95 % interval lies, read on 100 steps per gap of the grid (4 shares from
    # -1 to 1: 301 shares; the z interpolated between the grid's shares): its ends, its estimate, evenly spaced
    # shares between, 0 if inside
    grid = np.array(sorted(set(shifts)))
    x = np.linspace(-1.0, 1.0, 301)
    zx = np.interp(x, grid, cal.location_z)
    inside = np.abs(zx) <= Z95
    assert 0 < inside.sum() < x.size  # an interval strictly inside the grid: its ends tell the step
    np.testing.assert_allclose(cal.f_shifts, eq.f_points(x, inside, zx), atol=1e-9)


def test_location_z_at_24_a_side_where_the_splits_t_spreads_less_than_1():
    """The pooled t's permutation spread is about 1 (E[T²] ≥ 1 over splits: Jensen on T² = df·w/(1 − w)), and at
    24 models a side the 2,000 splits' sample spread dips below 1 at some shares (seed 7: 0.979 at f = −1): the
    location z divides by that spread itself, floored only at 1e-12 (a floor near 1 would change it), as the
    direct loop computes it."""
    rng = np.random.default_rng(11)
    scale = np.linspace(0.5, 3.0, 6)
    bank = rng.standard_normal((24, 6)) * scale
    shift = np.linspace(1.0, 2.0, 6)
    tested = rng.standard_normal((24, 6)) * scale + 0.6 * shift
    shifts = (-1.0, 0.0, 0.6, 1.0)
    cal = eq.calibrate(tested, bank, shift, shifts=shifts, replicates=2, seed=7)
    expected, _, _ = _location_z_by_loop(tested, bank, shift, shifts, 7, 10)
    np.testing.assert_allclose(cal.location_z, expected, rtol=1e-9, atol=1e-9)


def test_calibrate_floors_a_zero_spread_at_a_share_where_most_pools_are_constant():
    """Three of five examples: every retrained model gives 1.0, every tested model 1.0 + 0.6 δ̂. At the share 0.6
    their pools are constant (sd 0), so the median sd is 0 and the floor 1e-3 × median + 1e-12 = 1e-12 keeps the
    standardised pools finite: the location z is finite at every share (a floor of 0 would divide by 0)."""
    rng = np.random.default_rng(4)
    shift = np.array([1.0, 2.0, 1.5, 1.0, 1.0])
    bank, tested = rng.standard_normal((6, 5)), rng.standard_normal((4, 5)) + 0.6 * shift
    bank[:, :3], tested[:, :3] = 1.0, 1.0 + 0.6 * shift[:3]
    cal = eq.calibrate(tested, bank, shift, shifts=(-1.0, 0.0, 0.6, 1.0), replicates=20)
    assert np.isfinite(cal.location_z).all()


def test_calibrate_defaults_to_seed_0_and_names_its_arguments_in_refusals():
    rng = np.random.default_rng(2)
    bank, tested, shift = rng.standard_normal((5, 6)), rng.standard_normal((4, 6)), np.ones(6)
    a = eq.calibrate(tested, bank, shift, shifts=(0.0, 1.0), replicates=20)
    b = eq.calibrate(tested, bank, shift, shifts=(0.0, 1.0), replicates=20, seed=0)
    np.testing.assert_array_equal(a.location_z, b.location_z)
    with pytest.raises(DuckInputError) as e:
        eq.calibrate(np.zeros(3), bank, shift, shifts=(0.0, 1.0), replicates=20)
    assert str(e.value).startswith("the tested set ")
    with pytest.raises(DuckInputError) as e:
        eq.calibrate(tested, np.zeros(3), shift, shifts=(0.0, 1.0), replicates=20)
    assert str(e.value).startswith("retrained ")


def test_f_points_by_hand():
    """Inside the interval [0.2, 0.4] (shares 0.1 apart): its ends, 3 evenly spaced shares between (F_POINTS = 5 in
    all), the estimate (the least |z| inside: 0.3) and 0 when the interval holds it; an empty interval: the share of
    the least |z| alone."""
    x = np.round(np.arange(-2, 9) * 0.1, 10)  # -0.2 .. 0.8
    z = 3.0 - 10.0 * x + np.where(np.isclose(x, 0.3), 0.05, 0.0)  # 0 at 0.3 (then nudged), |z| <= 1.96 on [0.2, 0.4]
    accept = np.abs(z) <= Z95
    assert x[accept].min() == pytest.approx(0.2) and x[accept].max() == pytest.approx(0.4)
    np.testing.assert_allclose(eq.f_points(x, accept, z), [0.2, 0.25, 0.3, 0.35, 0.4])
    wide = np.abs(x) <= 0.3
    np.testing.assert_allclose(eq.f_points(x, wide, z), [-0.2, -0.075, 0.0, 0.05, 0.175, 0.3])
    assert eq.f_points(x, np.zeros(x.size, bool), z).tolist() == [pytest.approx(0.3)]



def test_effect_beyond_the_grid_takes_the_side_the_z_nearest_zero_points_to():
    """No share accepted: the estimate and both ends are the grid's end on the side the grid's z nearest 0 points
    to (positive: the top). At level 0.5 (|z| <= 0.674 accepted) z = 5 .. 0.9 accepts nothing and points up; a
    jump from 1010 to −1000 between two shares skips the band and its z nearest 0 (−1000) points down."""
    up = _calibration([-1.0, 1.0], [5.0, 0.9], [0.0], [0.3], 0.01, 0.3)
    assert {k: up.effect(0.5)[k] for k in ("estimate", "low", "high")} == {"estimate": 1.0, "low": 1.0, "high": 1.0}
    jump = _calibration([-1.0, 1.0], [1010.0, -1000.0], [0.0], [0.3], 0.01, 0.3)
    assert jump.effect(0.95)["estimate"] == -1.0 and jump.effect(0.95)["low"] == -1.0


def test_f_points_are_rounded_to_six_decimals():
    """The shares F's test runs at are rounded to 6 decimals (so that the ends, the estimate and 0 coincide when
    equal): an interval [0, 1/3] gives 0, 0.083333, 0.166667, 0.25, 0.333333."""
    x = np.linspace(0.0, 1.0 / 3.0, 4)
    z = np.array([0.5, 0.2, -0.1, -0.4])  # the estimate: 2/9, rounded as well
    assert eq.f_points(x, np.ones(4, bool), z).tolist() == [0.0, 0.083333, 0.166667, 0.222222, 0.25, 0.333333]


def test_phi_takes_one_example_and_refuses_a_missing_value_as_not_finite():
    """One forget example is enough (2 models a set); a φ array holding a missing value (None, read as NaN) is
    refused as not finite, naming the argument."""
    rng = np.random.default_rng(9)
    one = [rng.standard_normal((4, 1)) for _ in range(3)] + [3.0 + rng.standard_normal((4, 1))]
    rec = forgetting_verdict(*one, replicates=20, shifts=(-1.0, 0.0, 1.0))
    assert rec["n_examples"] == 1
    holed = [[0.1, 0.2], [0.3, None]]
    with pytest.raises(DuckInputError) as e:
        forgetting_verdict(holed, one[1], one[2], one[3], replicates=20)
    assert str(e.value) == "unlearned holds NaN or infinite values: φ must be finite margins"
