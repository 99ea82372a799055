"""report.html, sweep.html and the +tune trials page as a reader sees them (issue 38): rendered by headless
Chromium at 1280 px, checked from the rendered page (tests/browser.py): no literal Markdown on screen, every image
loaded, the verdict (or the search's best trial) in the first screen, no horizontal overflow, no console error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from browser import CHROMIUM, check_page, problems
from conftest import SYNTH_ARGS
from test_sweep_page import forgetting, write_job

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install "
                                                          "chromium; .ci/run installs it)")

VERDICT = r"^(Forgotten|Not forgotten|Inconclusive)\. "


def test_report_of_a_real_job(run_cli, tmp_path: Path):
    """A duck-run job with the forgetting audit at its smallest (N = R = 3, synthetic data): its report.html."""
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "attack.n_shadow=4",
                                    "attack.forgetting.n_unlearned=3", "attack.forgetting.n_retrained=3",
                                    f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    result = check_page(run_dir / "report.html", VERDICT)
    assert problems(result) == []
    assert len(result["images"]) >= 2  # ROC and AUC plots at least


def test_sweep_page(tmp_path: Path):
    from duck.report.sweep import summarize_sweep

    sweep = tmp_path / "sweep"
    for i, (method, cls, verdict, shift, q) in enumerate([("duck", 3, "forgotten", 0.05, 0.9),
                                                          ("duck", 5, "inconclusive", 0.2, 0.7),
                                                          ("finetune", 3, "not_forgotten", 0.6, 0.3),
                                                          ("scrub", 5, "not_forgotten", -0.8, -1.5)]):
        write_job(sweep, str(i), method, cls, 0, forgetting(verdict, shift, q))
    page = summarize_sweep(sweep)["page"]
    result = check_page(page, r"^\d+ (forgotten|inconclusive|not forgotten)")
    assert problems(result) == [] and len(result["images"]) == 1


def test_trials_page(tmp_path: Path):
    from duck.report.tune import summarize_search

    sweep = tmp_path / "search"
    for i, (lr, objective) in enumerate([(0.01, 0.2), (0.001, 0.8), (0.1, -0.5)]):
        trial = sweep / str(i)
        (trial / ".hydra").mkdir(parents=True)
        (trial / ".hydra" / "overrides.yaml").write_text(f"- method.lr={lr}\n")
        (trial / "tune.json").write_text(json.dumps({
            "objective": objective, "kind": "imprint", "value": objective, "aus": 0.9, "reached_target": True,
            "train_forget": 0.0, "data": "digits", "method": "finetune",
            "scenario": {"scenario": "class_removal", "forget_classes": [3], "forget_hash": "h"}}))
    page = summarize_search(sweep)["page"]
    result = check_page(page, r"^Best: trial 1\b")
    assert problems(result) == [] and len(result["images"]) == 1


def test_the_check_sees_what_a_reader_would(tmp_path: Path):
    """The checks can fail: literal Markdown, a broken image, overflow, a script error, a buried headline."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><head><title>t</title></head><body>"
                   "<p>**Forgotten.** see [docs](x.md)</p><img alt=\"plot\" src=\"missing.png\">"
                   "<div style=\"width:3000px\">wide</div><div style=\"height:2000px\"></div><p>Verdict here</p>"
                   "<script>undefined_function();</script></body></html>")
    found = problems(check_page(bad, r"^Verdict here"))
    assert any("literal Markdown" in p for p in found)
    assert any("image 'plot' did not load" in p for p in found)
    assert any("horizontal overflow" in p for p in found)
    assert any("not in the first screen" in p for p in found)
    assert any("undefined_function" in p for p in found)
    assert shutil.which("chromium") or shutil.which("chromium-browser")
