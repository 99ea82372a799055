"""The forgetting audit stage (ALGORITHMS.md §10) end to end on synthetic data: the retrain bank, the unlearned
set and the controls, cached; the verdict rules; where it may run."""

from __future__ import annotations

import json

import pytest
from conftest import SYNTH_ARGS, written_files

FAST = ("recipe.epochs=3", "scenario.forget_classes=[1]", "attack.n_shadow=4", "attack.svm_mia.enabled=false",
        "report.shareable.enabled=false", "report.analysis.enabled=false", "attack.forgetting.enabled=true",
        "attack.forgetting.n_unlearned=4", "attack.forgetting.n_retrained=4")


def test_duck_run_with_the_forgetting_audit_caches_every_model_set(run_cli):
    code, out, err, run_dir = run_cli("run", *SYNTH_ARGS, *FAST)
    assert code == 0, err
    audit = json.loads((run_dir / "unlearned" / "audit.json").read_text())
    block = audit["forgetting"]
    assert audit["verdict"] == block["verdict"] in ("forgotten", "not_forgotten", "inconclusive")
    summary_json = json.loads((run_dir / "summary.json").read_text())
    assert summary_json["verdict"] == audit["verdict"] and summary_json["verdict_rule"] == block["rule"]
    verdict_line = f"**Forgetting audit (N = 4, R = 4): {audit['verdict'].replace('_', ' ')}.**"
    assert verdict_line in (run_dir / "summary.md").read_text()
    summary = summary_json["rows"][1]
    assert audit["accuracies"]["A_f"] == summary["A_f"] and audit["AUS"] == summary["AUS"]
    assert block["n_unlearned"] == 4 and block["n_retrained"] == 4 and block["method"] == "duck"
    assert 0.0 <= block["quality"] <= 1.0 and set(block["klom"]) == {"forget", "retain", "test"}
    assert set(block["controls"]) == {"none", "retrain"}
    # the controls give the audit its power on class removal: the original's own models are far from
    # retrained ones on the forgotten class (F near 0), two retrain sets are not
    assert block["controls"]["none"]["quality"] < block["controls"]["retrain"]["quality"]
    assert block["controls"]["none"]["klom"]["forget"]["median"] > block["controls"]["retrain"]["klom"]["forget"]["median"]
    assert all(s["computed_now"] == 4 for s in block["sets"].values())
    report = (run_dir / "report.md").read_text()
    sentence = {"forgotten": "**Forgotten.**", "not_forgotten": "**Not forgotten.**",
                "inconclusive": "**Inconclusive.**"}[block["verdict"]]
    assert "Forgetting audit (against retrained models)" in report and sentence in report
    # the report opens with the verdict and its evidence table, before the accuracies and LiRA
    assert report.index(sentence) < report.index("| models | imprint kept") < report.index("## Accuracy and AUS")
    # the verdict's record: the margin, the imprint kept with its interval, each control's decision
    assert block["margin"] == 0.25 and block["shift_ci"][0] <= block["shift"] <= block["shift_ci"][1]
    assert {c["decision"] for c in block["controls"].values()} <= {"forgotten", "not_forgotten", "inconclusive"}
    assert set(block["utility"]) >= {"retain_ratio", "test_ratio", "ok"}
    assert summary_json["imprint_kept"] == block["shift"]
    assert report.index("## Membership inference in one sentence") < report.index("## LiRA membership inference")
    assert "at N = 4, R = 4 most of its 20 bins are empty" in report  # KLOM's floor explained at small N
    assert "forgetting audit (N = 4, R = 4):" in out
    # the method's N runs announce how long they will take, from the first one measured
    assert "forgetting audit: 4 of the 4 runs of duck from the original to compute (0 cached)" in out
    assert "forgetting audit: duck run 1 of 4 from the original took" in out and "the other 3 (not cached) about" in out
    # before any bank is trained, its size on disk; after the first epoch of its first model, the time it will take
    assert "retrain bank" in out and "MB on disk" in out and "s each, from the first measured)" in out
    # a second audit of the same forget set and method trains nothing and reruns no unlearning
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, *FAST)
    assert code == 0, err
    again = json.loads((run_dir / "unlearned" / "audit.json").read_text())["forgetting"]
    assert all(s["computed_now"] == 0 for s in again["sets"].values())
    assert again["quality"] == block["quality"] and again["verdict"] == block["verdict"]
    # another method reuses the retrain bank and both controls; only its own runs are computed
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, *FAST, "method=finetune", "method.epochs=1")
    assert code == 0, err
    other = json.loads((run_dir / "unlearned" / "audit.json").read_text())["forgetting"]
    assert other["sets"]["method"]["computed_now"] == 4
    assert all(other["sets"][k]["computed_now"] == 0 for k in ("retrained", "none", "retrain"))
    # duck-audit of the first run's unlearned checkpoint reruns the method its manifest records (duck, the
    # same seed): every set comes from the cache and the block equals duck-run's
    first = run_dir.parent / "run"
    code, out, err, audit_dir = run_cli("audit", *SYNTH_ARGS, *FAST, f"ckpt={first / 'unlearned' / 'unlearned.ckpt'}",
                                        f"original_ckpt={first / 'original' / 'model.ckpt'}")
    assert code == 0, err
    audited = json.loads((audit_dir / "audit.json").read_text())
    assert audited["verdict"] == block["verdict"] and audited["forgetting"]["method"] == "duck"
    assert audited["forgetting"]["quality"] == block["quality"]
    assert all(s["computed_now"] == 0 for s in audited["forgetting"]["sets"].values())


def test_duck_audit_forgetting_needs_the_original_and_a_recorded_method(run_cli, synthetic_ckpt):
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, f"ckpt={synthetic_ckpt}", "attack.forgetting.enabled=true")
    assert code == 2 and "give original_ckpt=PATH" in err and written_files(run_dir) == set(), err
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, f"ckpt={synthetic_ckpt}", "role=unlearned",
                                    f"original_ckpt={synthetic_ckpt}", "attack.forgetting.enabled=true")
    assert code == 2 and "records no method" in err and written_files(run_dir) == set(), err


@pytest.mark.parametrize("arg,match", [
    ("attack.forgetting.n_unlearned=2", "attack.forgetting.n_unlearned=2 must be an integer >= 3"),
    ("attack.forgetting.n_retrained=2", "attack.forgetting.n_retrained=2 must be an integer >= 3"),
    ("attack.forgetting.ci_level=1.5", "attack.forgetting.ci_level"),
    ("+attack.forgetting.n_boot=5", "unknown attack.forgetting option(s) ['n_boot']"),
    ("attack.forgetting.margin=1.5", "attack.forgetting.margin"),
    ("attack.forgetting.replicates=5", "attack.forgetting.replicates=5 must be an integer >= 20"),
    ("attack.forgetting.max_utility_loss=1", "attack.forgetting.max_utility_loss"),
])
def test_bad_forgetting_options_fail_before_any_work(run_cli, arg, match):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, arg)
    assert code == 2 and match in err and written_files(run_dir) == set(), err


def test_ulira_on_shadow_pairs_with_its_controls(run_cli):
    """U-LiRA (attack.forgetting.ulira): the none control (the shadows themselves) is told from retraining
    (AUC >= 0.9), the retrain control is not (its interval holds 0.5), and the method's pairs are cached."""
    args = (*SYNTH_ARGS, *FAST, "attack.n_shadow=8", "attack.forgetting.ulira=true")
    code, _, err, run_dir = run_cli("run", *args)
    assert code == 0, err
    u = json.loads((run_dir / "unlearned" / "audit.json").read_text())["forgetting"]["ulira"]
    assert u["n_pairs"] == 8 and u["computed_now"] == 8 and 0.0 <= u["auc"] <= 1.0
    none, retrain = u["controls"]["none"], u["controls"]["retrain"]
    assert none["auc"] >= 0.9 and retrain["auc_ci"][0] <= 0.5 <= retrain["auc_ci"][1]
    # Hayes et al.'s per-example accuracy on held-out models, and the paired method-minus-control difference
    assert 0.0 <= u["per_example_accuracy"]["mean"] <= 1.0 and u["per_example_accuracy"]["n_examples"] > 0
    d = u["auc_minus_retrain"]
    assert d["ci"][0] <= d["value"] <= d["ci"][1] and d["value"] == pytest.approx(u["auc"] - retrain["auc"])
    assert "target" in u and 0.0 <= u["target"]["auc"] <= 1.0  # the audited checkpoint against the oracle
    assert "U-LiRA (8 shadow pairs" in (run_dir / "report.md").read_text()
    code, _, err, run_dir = run_cli("run", *args)
    assert code == 0 and json.loads((run_dir / "unlearned" / "audit.json").read_text())["forgetting"]["ulira"][
        "computed_now"] == 0, err


def test_ulira_needs_eight_shadows_checked_before_any_work(run_cli):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, *FAST, "attack.forgetting.ulira=true")  # n_shadow=4
    assert code == 2 and "U-LiRA needs attack.n_shadow >= 8" in err and written_files(run_dir) == set(), err
