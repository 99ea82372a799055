"""``duck-run`` and ``duck-unlearn audit=true``: the main job end to end, with the audit and the report."""

from __future__ import annotations

import json

import pytest
from conftest import SYNTH_ARGS, written_files

AUDIT_ARGS = ("attack.n_shadow=4", "attack.ci.n_boot=200", "attack.svm_mia.runs=2", "report.shareable.seed=0")


def test_duck_run_with_audit_and_report(run_cli):
    code, out, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=2", "scenario.forget_classes=[1]", *AUDIT_ARGS)
    assert code == 0, err
    files = written_files(run_dir)
    for role in ("original", "unlearned", "retrained"):
        assert f"{role}/metrics.json" in files and f"{role}/audit.json" in files and f"{role}/lira_stats.npz" in files
    assert {"unlearned/unlearned.ckpt", "summary.md", "summary.json", "report.html", "report.md"} <= files
    audit = json.loads((run_dir / "unlearned" / "audit.json").read_text())
    assert audit["target"] == "unlearned" and audit["lira"]["n_shadow"] == 4
    lo, hi = audit["lira"]["auc_ci"]
    assert lo <= audit["lira"]["auc"] <= hi
    share = audit["shareable"]
    assert share["count"]["mechanism"] and "value" in share["count"] and len(share["top_subspaces"]["names"]) == 2
    html = (run_dir / "report.html").read_text()
    assert "data:image/png;base64," in html and "Shareable statistics" in html
    assert "report:" in out and "LiRA" in out
    # a second run on the same setup reuses the original, the oracle and the shadow bank
    code, out, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=2", "scenario.forget_classes=[1]", *AUDIT_ARGS)
    assert code == 0, err
    assert "reused from cache" in out
    bank = json.loads((run_dir / "unlearned" / "audit.json").read_text())["bank"]
    assert bank["trained_now"] == 0  # every shadow came from the cache


def test_duck_unlearn_audit_true(run_cli, synthetic_ckpt):
    code, out, err, run_dir = run_cli("unlearn", *SYNTH_ARGS, f"ckpt={synthetic_ckpt}", "audit=true", *AUDIT_ARGS,
                                      "recipe.epochs=2")
    assert code == 0, err
    files = written_files(run_dir)
    assert {"unlearned.ckpt", "metrics.json", "audit.json", "original/audit.json", "report.html"} <= files
    a = json.loads((run_dir / "audit.json").read_text())
    assert a["target"] == "unlearned" and "original" in a.get("reference", {})


@pytest.mark.parametrize("arg,match", [
    ("attack.variant=sideways", "sideways"),
    ("method.lr=0", "method.lr must be a finite number > 0.0, got 0"),  # before the original is trained
    ("recipe.epochs=0", "recipe.epochs=0 must be an integer >= 1"),
])
def test_bad_option_fails_before_work(run_cli, arg, match):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, arg)
    assert code == 2 and match in err, err
    assert written_files(run_dir) == set()
