"""duck.pipeline.stages.unlearning_warnings: what makes a finished unlearning run doubtful (a forget target
missed at the end, also after the stopping rule reached it; a retained accuracy far above the original's)."""

from __future__ import annotations

from types import SimpleNamespace

from duck.pipeline.job import HINTS
from duck.pipeline.stages import unlearning_warnings


def _job(rule: str = "zero") -> SimpleNamespace:
    scenario = SimpleNamespace(forget_target_rule=rule, is_class_removal=rule == "zero")
    return SimpleNamespace(method="duck", scenario=scenario, hint=lambda topic: HINTS["cli"][topic])


def _metrics(train_forget: float, a_t: float, a_or: float, **extra) -> dict:
    acc = {"test": a_t, "test_retain": a_t, "test_forget": 0.0, "train_forget": train_forget}
    original = {"test": a_or, "test_retain": a_or, "test_forget": 0.9, "train_forget": 0.95}
    return {"acc": acc, "original_acc": original, "aus": 1.0, "forget_target": 0.01, **extra}


def test_a_clean_run_has_no_warning():
    assert unlearning_warnings(_job(), _metrics(0.0, 0.97, 0.98, forget_target_met=True, reached_target=True)) == []


def test_a_target_reached_by_the_rule_then_lost_is_named():
    out = unlearning_warnings(_job(), _metrics(0.026, 0.97, 0.98, forget_target_met=False, reached_target=True))
    assert len(out) == 1 and "0.0260 at the end, above the forget target 0.01" in out[0]
    assert "stopping rule reached the target during unlearning" in out[0]
    out = unlearning_warnings(_job(), _metrics(0.133, 0.97, 0.98, forget_target_met=False, reached_target=None))
    assert len(out) == 1 and "stopping rule" not in out[0]


def test_homogeneous_removal_targets_are_not_flagged_here():
    """Homogeneous removal's target is the original's test accuracy, approached from above: not a refusal."""
    assert unlearning_warnings(_job("test_accuracy"), _metrics(0.95, 0.97, 0.98, forget_target_met=False)) == []


def test_an_unlearned_model_far_better_than_its_original_is_named():
    """A user's net evaluated with (x - 0.5) / 0.5 instead of its own (x - 0.3) / 0.4: original 0.711, DUCK's
    retain training adapted the model to the wrong inputs (0.970)."""
    out = unlearning_warnings(_job(), _metrics(0.0, 0.970, 0.711, forget_target_met=True))
    assert len(out) == 1 and "0.2590 more accurate on the retained test data" in out[0] and "data.mean" in out[0]
    assert unlearning_warnings(_job(), _metrics(0.0, 0.80, 0.71, forget_target_met=True)) == []

