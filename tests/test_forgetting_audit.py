"""The forgetting audit stage (ALGORITHMS.md §10) end to end on synthetic data: the retrain bank, the unlearned
set and the controls, cached; the verdict rules; where it may run."""

from __future__ import annotations

import json

import pytest
from conftest import SYNTH_ARGS, written_files

from duck.pipeline.forgetting import forgetting_verdict

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
    assert "Forgetting audit (against retrained models)" in report and "**Verdict:" in report
    # the report opens with the verdict and its evidence table, before the accuracies and LiRA
    assert report.index("**Verdict:") < report.index("| models | F [95 % CI]") < report.index("## Accuracy and AUS")
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


def _set(q, lo, hi):
    return {"quality": q, "quality_ci": [lo, hi]}


@pytest.mark.parametrize("method,none,retrain,verdict,words", [
    (_set(0.02, 0.0, 0.05), _set(0.0, 0.0, 0.01), _set(0.2, 0.1, 0.3), "not_forgotten", "lies below"),
    (_set(0.18, 0.1, 0.25), _set(0.0, 0.0, 0.01), _set(0.2, 0.1, 0.3), "forgotten", "the audit had power"),
    (_set(0.18, 0.1, 0.25), _set(0.15, 0.08, 0.22), _set(0.2, 0.1, 0.3), "inconclusive", "no power"),
    # a user's N = R = 3 audit: none far below the ceiling's point, but the ceiling's interval reaches 0
    (_set(0.0, 0.0, 0.0), _set(0.0, 0.0, 0.0), _set(0.33, 0.0, 0.62), "inconclusive",
     "could not resolve the retrain-vs-retrain ceiling: its interval F(retrain) = 0.330 [0.000, 0.620] reaches "
     "down to F(none) = 0.000 [0.000, 0.000]; the method's F is at the none control's level"),
])
def test_verdict_rules(method, none, retrain, verdict, words):
    got, rule = forgetting_verdict(method, {"none": none, "retrain": retrain})
    assert got == verdict and words in rule


def test_without_controls_there_is_no_verdict():
    got, rule = forgetting_verdict(_set(0.2, 0.1, 0.3), {})
    assert got == "inconclusive" and "controls are off" in rule


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
    assert "target" in u and 0.0 <= u["target"]["auc"] <= 1.0  # the audited checkpoint against the oracle
    assert "U-LiRA (8 shadow pairs" in (run_dir / "report.md").read_text()
    code, _, err, run_dir = run_cli("run", *args)
    assert code == 0 and json.loads((run_dir / "unlearned" / "audit.json").read_text())["forgetting"]["ulira"][
        "computed_now"] == 0, err


def test_ulira_needs_eight_shadows_checked_before_any_work(run_cli):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, *FAST, "attack.forgetting.ulira=true")  # n_shadow=4
    assert code == 2 and "U-LiRA needs attack.n_shadow >= 8" in err and written_files(run_dir) == set(), err


def test_score_set_intervals_compute_each_left_out_subset_once(monkeypatch):
    """F's and the final score's jackknife intervals leave out the same models: the ε of each subset is
    computed once (1 + N + R calls to ``epsilons``), and the figures equal those of the unshared computation."""
    from types import SimpleNamespace

    import numpy as np

    import duck.pipeline.forgetting as fg
    from attacks.forgetting import epsilon_points, epsilons, final_score, jackknife_interval

    rng = np.random.default_rng(0)
    n_u, n_r, n_train, n_test = 4, 5, 60, 30
    forget, retain = np.arange(20), np.arange(20, n_train)
    sets = [{"phi_train": rng.normal(shift, 1.0, (n, n_train)), "phi_test": rng.normal(0, 1.0, (n, n_test)),
             "correct_train": rng.random((n, n_train)) < 0.9, "correct_test": rng.random((n, n_test)) < 0.9}
            for n, shift in ((n_u, 0.6), (n_r, 0.0))]
    s, ref = sets
    job = SimpleNamespace(scenario=SimpleNamespace(forget_idx=forget, retain_idx=retain, test_retain_idx=None))
    calls = []

    def counted(u, r, *a, **k):
        calls.append(1)
        return epsilons(u, r, *a, **k)

    monkeypatch.setattr(fg, "epsilons", counted)
    out = fg.score_set(s, ref, job, 0.95, {"retain": retain[:10], "test": np.arange(10)})
    assert len(calls) == 1 + n_u + n_r

    def quality(iu, ir):
        return float(epsilon_points(epsilons(s["phi_train"][iu][:, forget], ref["phi_train"][ir][:, forget]),
                                    n_u).mean())

    def acc(x, rows, ids):
        return x[rows][:, ids].mean(axis=1)

    def fs(iu, ir):
        return final_score(quality(iu, ir), acc(s["correct_train"], iu, retain), acc(ref["correct_train"], ir, retain),
                           acc(s["correct_test"], iu, np.arange(n_test)), acc(ref["correct_test"], ir, np.arange(n_test)))

    assert out["quality_ci"] == list(jackknife_interval(quality, n_u, n_r, 0.95)[1:])
    assert out["final_score_ci"] == list(jackknife_interval(fs, n_u, n_r, 0.95, bounds=(0.0, np.inf))[1:])
    assert out["quality"] == quality(np.arange(n_u), np.arange(n_r)) > 0
