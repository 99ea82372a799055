"""A job refused late leaves no result that looks finished (docs/commands.md, exit status 2: "nothing written
but Hydra's .hydra/ and log"): what it wrote before the refusal is taken back, files a user kept in the run
directory stay; a cache directory the job cannot write is refused before any work."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import SYNTH_ARGS, written_files

from duck.errors import DuckInputError
from duck.pipeline.jobs import take_back
from duck.store import check_cache_writable


def test_take_back_removes_only_what_appeared_after_the_start(tmp_path: Path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / "_app.log").write_text("log")
    (tmp_path / "notes.txt").write_text("the user's")
    before = set(os.listdir(tmp_path))
    (tmp_path / "unlearned").mkdir()
    (tmp_path / "unlearned" / "metrics.json").write_text("{}")
    (tmp_path / "summary.json").write_text("{}")
    (tmp_path / "link").symlink_to(tmp_path / "notes.txt")
    take_back(tmp_path, before)
    assert set(os.listdir(tmp_path)) == {".hydra", "_app.log", "notes.txt"}
    assert (tmp_path / "notes.txt").read_text() == "the user's"  # a link's target is not followed


def test_a_job_refused_after_writing_its_models_leaves_only_hydras_files(run_cli, monkeypatch):
    """The audit refused at its end (a full disk, say) after the original, the unlearned model and the oracle
    were written: exit 2, one error line, and none of their files left behind."""
    import duck.pipeline.jobs as jobs

    def refuse(*args, **kwargs):
        raise DuckInputError("no space left on device writing the report; free some space")

    monkeypatch.setattr(jobs, "audit_and_report", refuse)
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "scenario.forget_classes=[1]",
                                    "attack.n_shadow=4")
    assert code == 2 and err.strip().splitlines()[-1].startswith("error: no space left on device"), err
    assert written_files(run_dir) == set() and (run_dir / ".hydra").is_dir()


def test_a_cache_directory_that_cannot_be_written_is_refused_before_any_work(run_cli, monkeypatch, tmp_path):
    cache = tmp_path / "ro_cache"
    cache.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == cache else real(p, mode))
    code, out, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "scenario.forget_classes=[1]",
                                      "audit=false", f"cache_dir={cache}")
    assert code == 2 and f"cache_dir='{cache}' cannot be written here" in err and "DUCK_CACHE_DIR" in err, err
    assert written_files(run_dir) == set() and "original" not in out


def test_the_nearest_existing_parent_decides_for_a_cache_not_made_yet(tmp_path: Path, monkeypatch):
    parent = tmp_path / "ro"
    parent.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if Path(p) == parent else real(p, mode))
    with pytest.raises(DuckInputError, match=r"ro is read-only or not yours"):
        check_cache_writable(parent / "a" / "b")
    check_cache_writable(tmp_path / "fine" / "cache")  # a writable parent: accepted


def test_a_collapsed_model_is_one_near_chance_and_worse_than_its_original():
    """check_unlearned: refused below min_acc_factor over the classes kept (1.5 / 3 retained = 0.5 here) only when
    unlearning made it so; a model no worse than its original, or min_acc_factor=0, passes."""
    from types import SimpleNamespace

    from duck.pipeline.job import HINTS
    from duck.pipeline.stages import check_unlearned

    def job(factor: float = 1.5, kind: str = "class_removal"):
        return SimpleNamespace(scenario=SimpleNamespace(is_class_removal=kind == "class_removal", forget_classes=[0]),
                               data=SimpleNamespace(num_classes=4), trust=SimpleNamespace(min_acc_factor=factor),
                               method="m", hint=lambda topic: HINTS["cli"][topic])

    with pytest.raises(DuckInputError, match=r"test_retain accuracy 0\.4900 < min_acc_factor/3 retained classes = "
                                             r"0\.5000 \(the original: 0\.9000\)"):
        check_unlearned(job(), {"test_retain": 0.49, "test": 0.4}, {"test_retain": 0.9})
    check_unlearned(job(), {"test_retain": 0.49}, {"test_retain": 0.28})  # no worse than its original
    check_unlearned(job(), {"test_retain": 0.5}, {"test_retain": 0.9})  # at the threshold
    check_unlearned(job(0.0), {"test_retain": 0.1}, {"test_retain": 0.9})
    with pytest.raises(DuckInputError, match=r"test accuracy 0\.3000 < min_acc_factor/4 retained classes = 0\.3750"):
        check_unlearned(job(kind="homogeneous_removal"), {"test": 0.3}, {"test": 0.9})  # every class kept
    with pytest.raises(DuckInputError, match=r"train_retain accuracy 0\.2000 < min_acc_factor/3"):
        check_unlearned(job(), {"train_retain": 0.2}, {"train_retain": 0.9})  # no test split
