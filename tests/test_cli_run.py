"""``duck-run`` and ``duck-unlearn audit=true``: the main job end to end, with the audit and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SYNTH_ARGS, written_files

from duck.checkpoint import load_checkpoint

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
    assert audit["lira"]["verdict"] in (run_dir / "report.md").read_text()  # the report's words, in audit.json too
    share = audit["shareable"]
    assert share["count"]["mechanism"] and "value" in share["count"] and len(share["top_subspaces"]["names"]) == 2
    html = (run_dir / "report.html").read_text()
    assert "data:image/png;base64," in html and "Shareable statistics" in html
    fs = audit["feature_space"]  # seeds/003 §IV-I: density of every retain class and the forget set, per model
    assert set(fs["models"]) == {"original", "unlearned", "retrained"} and fs["reference"] == "original"
    assert "forget" in fs["models"]["retrained"] and "class_1" not in fs["models"]["original"]  # class 1 forgotten
    assert "Feature space" in html and {"plots/feature_density.png", "plots/tsne.png"} <= files
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
    assert {"unlearned.safetensors", "metrics.json", "forget_ids.txt", "audit.json", "original/audit.json",
            "report.html"} <= files
    a = json.loads((run_dir / "audit.json").read_text())
    assert a["target"] == "unlearned" and "original" in a.get("reference", {})


@pytest.mark.parametrize("arg,match", [
    ("attack.variant=sideways", "sideways"),
    ("method.lr=0", "method.lr must be a finite number > 0.0, got 0"),  # before the original is trained
    ("recipe.epochs=0", "recipe.epochs=0 must be an integer >= 1"),
    ("attack.ci.level=1.5", "attack.ci.level"),
    ("attack.ci.n_boot=5", "attack.ci.n_boot=5"),
    ("attack.svm_mia.cv=0", "attack.svm_mia.cv=0"),
    ("attack.svm_mia.runs=0", "attack.svm_mia.runs=0"),
    ("attack.n_shadow=4.5", "attack.n_shadow=4.5"),
    ("attack.svm_mia.enabled=abc", "attack.svm_mia.enabled='abc'"),
    ("report.shareable.eps=-1", "report.shareable.eps"),
    ("report.shareable.delta=1", "report.shareable.delta"),
    ("report.shareable.enabled=abc", "report.shareable.enabled='abc'"),
    ("report.shareable.n_components=1000", "report.shareable.n_components=1000"),
    ("report.analysis.density.coverage=1.5", "report.analysis.density.coverage must be a finite number > 0.0 and "
                                             "<= 1.0, got 1.5"),
    ("report.analysis.tsne.perplexity=500", "report.analysis.tsne.perplexity=500 must be below the 240 points"),
    # trainer settings: checked before the original is trained or copied from the cache
    ("trainer.devices=0", "invalid trainer settings"),
    ("+trainer.max_epochs=2", "trainer.max_epochs=2 cannot be set here"),
])
def test_bad_option_fails_before_work(run_cli, arg, match):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, arg)
    assert code == 2 and match in err and "Traceback" not in err, err
    assert written_files(run_dir) == set()


def test_cache_dir_that_is_a_file_is_refused(run_cli, tmp_path, monkeypatch):
    f = tmp_path / "cachefile"
    f.write_text("x")
    monkeypatch.setenv("DUCK_CACHE_DIR", str(f))
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "audit=false")
    assert code == 2 and "DUCK_CACHE_DIR" in err and "Traceback" not in err, err
    assert written_files(run_dir) == set()


def _cached_run(run_cli, tmp_path, monkeypatch, name: str) -> tuple[tuple[str, ...], list[Path]]:
    """A duck-run that fills an empty cache: its arguments and the cache's two ``name`` files (original, oracle)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("DUCK_CACHE_DIR", str(cache))
    args = (*SYNTH_ARGS, "audit=false", "recipe.epochs=1", "scenario.forget_classes=[1]")
    code, _, err, _ = run_cli("run", *args)
    assert code == 0, err
    entries = sorted((cache / "store-v1" / "models").glob(f"*/{name}"))
    assert len(entries) == 2  # the original and the oracle
    return args, entries


def _assert_retrained(run_cli, args: tuple[str, ...]) -> str:
    """Run again: both cached models are unusable, so both are trained, with warnings; returns stderr."""
    code, out, err, run_dir = run_cli("run", *args)
    assert code == 0 and "Traceback" not in err, err
    assert err.count("warning: ignoring unusable cached model") == 2
    assert "reused from cache" not in out and "trained: test accuracy" in out
    assert json.loads((run_dir / "original" / "metrics.json").read_text())["reused_from_cache"] is False
    return err


def test_unusable_cached_metrics_are_retrained(run_cli, tmp_path, monkeypatch):
    args, entries = _cached_run(run_cli, tmp_path, monkeypatch, "metrics.json")
    for bad in ("[1]", "{}"):
        for m in entries:
            m.write_text(bad)
        _assert_retrained(run_cli, args)


def test_damaged_cached_checkpoints_are_retrained(run_cli, tmp_path, monkeypatch):
    """A cached model.ckpt that is empty or not a checkpoint (an IndexError / KeyError traceback before) is
    ignored with a warning and trained again."""
    args, ckpts = _cached_run(run_cli, tmp_path, monkeypatch, "model.ckpt")
    ckpts[0].unlink()  # hard-linked into the first run's directory: damage a copy of its own
    ckpts[0].write_bytes(b"")
    ckpts[1].unlink()
    ckpts[1].write_text("hello world")
    err = _assert_retrained(run_cli, args)
    assert "is corrupt or truncated (empty file, 0 bytes)" in err and "is corrupt or not a PyTorch checkpoint" in err
    assert load_checkpoint(ckpts[0])[1]["method"] in ("original", "retrain")  # the cache holds a good one again


def test_a_reused_original_is_evaluated_on_this_runs_scenario(run_cli, tmp_path, monkeypatch):
    """The cached original's metrics.json held the scenario it was first trained for: a later run with another
    forget class reported that run's A_f and AUS (and fed its stale test_retain into the other models' AUS)."""
    args = (*SYNTH_ARGS, "audit=false", "recipe.epochs=1")

    def original_metrics(cache: str, forget: str) -> dict:
        monkeypatch.setenv("DUCK_CACHE_DIR", str(tmp_path / cache))
        code, _, err, run_dir = run_cli("run", *args, f"scenario.forget_classes=[{forget}]")
        assert code == 0, err
        return json.loads((run_dir / "original" / "metrics.json").read_text())

    original_metrics("shared", "1")
    reused = original_metrics("shared", "2")
    fresh = original_metrics("fresh", "2")
    assert reused["reused_from_cache"] and not fresh["reused_from_cache"]
    assert reused["forget_classes"] == [2] and reused["acc"] == fresh["acc"] and reused["aus"] == fresh["aus"]


def test_cache_key_covers_training_settings_and_data_content(tmp_path):
    """A cached original / oracle is reused only for the same training: trainer settings that change it
    (gradient clipping, accumulation) and the data's content are in the key; placement settings are not."""
    import os

    import numpy as np
    from PIL import Image

    from duck.pipeline.cache import cache_key
    from duck.pipeline.config import compose
    from duck.pipeline.job import Job

    def key(*overrides: str) -> str:
        return cache_key(Job.from_cfg(compose("train", list(overrides)), "train"), retrain=False)

    base = key("data=synthetic", "trainer=cpu")
    clip = key("data=synthetic", "trainer=cpu", "+trainer.gradient_clip_val=0.5")
    acc = key("data=synthetic", "trainer=cpu", "+trainer.accumulate_grad_batches=4")
    quiet = key("data=synthetic", "trainer=cpu", "trainer.deterministic=false")  # placement: not in the key
    assert len({base, clip, acc}) == 3
    assert quiet == base
    # an image folder whose class folders were swapped by renaming: same config, same labels, other content
    for split in ("train", "test"):
        for c, value in enumerate((0, 120, 250)):
            d = tmp_path / "imf" / split / f"c{c}"
            d.mkdir(parents=True)
            for i in range(3):
                Image.fromarray(np.full((8, 8, 3), value, dtype=np.uint8)).save(d / f"{i}.png")
    args = ("data=imagefolder", f"data.root={tmp_path / 'imf'}", "data.img_size=8", "trainer=cpu")
    before = key(*args)
    for split in ("train", "test"):
        root = tmp_path / "imf" / split
        os.rename(root / "c0", root / "tmp")
        os.rename(root / "c2", root / "c0")
        os.rename(root / "tmp", root / "c2")
    assert key(*args) != before


def test_a_one_sample_deletion_request_is_audited_or_refused_before_any_work(run_cli, tmp_path):
    """'Forget this user': one forget sample. The SVM MIA cannot run on 1 member (its sample counts are
    checked with the options: exit 2 before any training, nothing written); without it the audit and the
    report run, and the feature-space section gives the one-sample forget group no density (n/a)."""
    ids = tmp_path / "ids.txt"
    ids.write_text("5\n")
    args = (*SYNTH_ARGS, "recipe.epochs=2", "scenario=custom", f"scenario.forget_ids={ids}", *AUDIT_ARGS)
    code, _, err, run_dir = run_cli("run", *args)
    assert code == 2 and "SVM MIA needs at least 6 members and non-members (got 1 and 1)" in err, err
    assert written_files(run_dir) == set()
    code, _, err, run_dir = run_cli("run", *args, "attack.svm_mia.enabled=false")
    assert code == 0, err
    forget = json.loads((run_dir / "unlearned" / "audit.json").read_text())["feature_space"]["models"]["unlearned"]
    assert forget["forget"]["log10_density"] is None and forget["forget"]["n"] == 1
    assert "| forget | n/a | n/a | 1 |" in (run_dir / "report.md").read_text()
