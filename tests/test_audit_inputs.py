"""Audit options and report details found by a probe: CI levels, verdicts on tiny sets, the SVM baselines,
recipe warnings, roles, FPR levels, the shareable settings' names."""

from __future__ import annotations

import numpy as np
import pytest

from attacks.audit import AuditSettings
from attacks.audit import lira_verdict as verdict
from attacks.svm_mia import svm_mia
from duck.errors import DuckInputError
from duck.pipeline.audit import check_recorded_recipes, resolve_role, source_recipe_recorded
from duck.privacy.shareable import ShareableSettings
from duck.report.plots import auc_ci_png


@pytest.mark.parametrize("option, match", [
    ({"ci": {"level": 0.01}}, r"attack.ci.level must be a finite number >= 0.5"),  # crashed the report's plot
    ({"fpr_levels": [0.01, 0.01]}, r"attack.fpr_levels=\[0.01, 0.01\] lists a level twice"),  # one key in audit.json
])
def test_attack_options(option, match):
    with pytest.raises(DuckInputError, match=match):
        AuditSettings.from_cfg(option)


def test_interval_not_containing_the_estimate_still_plots():
    """A percentile interval can miss the point estimate; matplotlib refused the negative error bar."""
    lira = {"auc": 0.5706, "auc_ci": [0.5735, 0.5749], "ci_level": 0.999}
    assert auc_ci_png({"original": {"lira": lira}})[:8] == b"\x89PNG\r\n\x1a\n"


def test_too_few_members_give_no_verdict():
    """One forget sample got "distinguishable: CI below 0.5" from a bootstrap with no member-side variance."""
    lira = {"too_few_for_verdict": True, "below_chance": False, "n_members": 1, "n_nonmembers": 45}
    assert verdict(lira).startswith("inconclusive: 1 members / 45 non-members are too few")


def test_svm_reports_the_all_member_baseline():
    """A tuned SVM that calls everything a member scores 2p/(1+p), above the old 'chance F1' p."""
    rng = np.random.default_rng(0)
    probs = rng.dirichlet(np.ones(3), size=(90,))
    out = svm_mia(probs[:60], probs[60:], member_ratio=3, runs=2, seed=0)
    p = out["chance"]
    assert out["all_member_f1"] == pytest.approx(2 * p / (1 + p)) and out["all_member_f1"] > p


def test_recipe_warning_only_for_checkpoints_that_record_their_training(capsys):
    """An unlearned checkpoint records the unlearning job's recipe setting, not its original's: it warned for
    the right recipe."""
    requested = {"epochs": 2, "batch_size": 64}
    check_recorded_recipes({"unlearned": {"method": "duck", "config": {"recipe": {"epochs": 30}}}}, requested)
    assert capsys.readouterr().err == ""
    check_recorded_recipes({"original": {"method": "original", "config": {"recipe": {"epochs": 30}}},
                            "retrained": {"method": "retrain", "config": {"recipe": requested}}}, requested)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "the original checkpoint was trained with another recipe" in err


def test_recipe_warning_when_the_original_was_trained_outside(capsys):
    """A plain state dict records no recipe: its audit (given as the original, or as the source of an unlearned
    checkpoint) warns that the shadows' recipe is a guess; a toolkit-trained original does not."""
    requested = {"epochs": 2, "batch_size": 64}
    unlearned = {"method": "duck", "config": {"recipe": requested}}
    for manifests in ({"unlearned": unlearned, "original": None}, {"original": None},
                      {"unlearned": {**unlearned, "source_recipe_recorded": False}}):
        check_recorded_recipes(manifests, requested)
        err = capsys.readouterr().err
        assert err.count("warning:") == 1 and "trained outside this toolkit" in err and "recipe=NAME" in err
    check_recorded_recipes({"unlearned": {**unlearned, "source_recipe_recorded": True},
                            "original": {"method": "original", "config": {"recipe": requested}}}, requested)
    assert capsys.readouterr().err == ""
    assert not source_recipe_recorded(None) and not source_recipe_recorded({"method": "original", "config": {}})
    assert source_recipe_recorded({"method": "original", "config": {"recipe": requested}})
    assert not source_recipe_recorded({**unlearned, "source_recipe_recorded": False})


@pytest.mark.parametrize("role", ["", "  ", "shadow"])
def test_roles_must_name_a_model(role):
    with pytest.raises(DuckInputError, match="must name the audited model"):
        resolve_role(role, None)


@pytest.mark.parametrize("option, match", [
    ({"r": 1e200}, r"report.shareable.r=1e\+200 is too large"),
    ({"delta": 1e-320}, r"report.shareable.delta=1e-320 is below the smallest normal"),
])
def test_shareable_errors_name_the_setting(option, match):
    full = {"enabled": True, "eps": 1.0, "delta": 1e-5, "k": 3, "r": 1.0, "n_components": 2, "h": 1,
            "max_retain": 100}
    ShareableSettings.parse(full)
    with pytest.raises(DuckInputError, match=match):
        ShareableSettings.parse({**full, **option})


@pytest.mark.parametrize("test_size", [0.99, 0.001])
def test_svm_test_size_must_leave_both_splits_usable(test_size):
    """0.99 / 0.001 ended in sklearn tracebacks (a split with fewer samples than classes)."""
    probs = np.random.default_rng(0).dirichlet(np.ones(3), size=(90,))
    with pytest.raises(DuckInputError, match=rf"svm_mia.test_size={test_size} splits the smaller side \(45 samples\)"):
        svm_mia(probs[:45], probs[45:], test_size=test_size, runs=2)
