"""Sweeps (``-m``) are checked as a whole before their first job, and job directories are never shared."""

from __future__ import annotations

import json
import re

import pytest
from conftest import SYNTH_ARGS

from duck.cli._sweep import job_overrides
from duck.pipeline.config import conf_dir


@pytest.mark.parametrize("args,match", [
    (("attack.nshadow=4,8",), "attack.nshadow is not a setting of this command"),
    (("method=duck,finetune", "method.lambda_fgt=0.5"), "method=finetune: method.lambda_fgt is not a setting"),
    (("method=choice(duck,scrubb)",), "unknown method 'scrubb'; choose one of: "),
    (("+sweep=methodz",), "unknown sweep 'methodz'; choose one of: cr_all_classes, hr_seeds, methods"),
    (("seed=0,-1",), r"sweep job .*seed=-1: seed=-1 must be an integer >= 0 \(no job of the sweep was run\)"),
    (("+sweep=methods", "scenario=homogeneous_removal"),
     "method=boundary_shrink: method .boundary_shrink. does not support scenario .homogeneous_removal.*"
     "method=bad_teacher,datamodel_matching,duck,"),
    (("method=duck,scrub", "+method.lambda_fgtt=3"), r"has no hyperparameter\(s\) \['lambda_fgtt'\]"),
])
def test_a_bad_job_stops_the_sweep_before_any_job_runs(run_cli, tmp_path, args, match):
    sweep = tmp_path / "sweep"
    code, _, err, _ = run_cli("run", "-m", *SYNTH_ARGS, "recipe.epochs=1", "audit=false", *args,
                              f"hydra.sweep.dir={sweep}")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("error: ") and re.search(match, err), err
    assert not sweep.exists()  # not even Hydra's multirun.yaml


def test_unknown_experiment_is_one_line_without_a_sweep(run_cli):
    code, _, err, run_dir = run_cli("run", "+experiment=digits_crr")
    assert code == 2 and "unknown experiment 'digits_crr'; choose one of: cifar10_cr" in err
    assert not run_dir.exists()


def test_jobs_composed_up_front_cover_every_group_combination_and_every_value():
    """Group sweeps (they decide which keys exist) in every combination; other sweeps one value at a time;
    the sweeps of a +sweep config are read from its hydra.sweeper.params."""
    from hydra import initialize_config_dir

    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        jobs = job_overrides("run", ["method=duck,scrub", "scenario=class_removal,homogeneous_removal",
                                     "seed=0,1,2"], conf_dir())
        assert len(jobs) == 4 * 3  # 2 x 2 group combinations, each with seed 0, 1, 2 (one value at a time)
        assert {tuple(sorted(j)) for j in jobs} >= {("method=scrub", "scenario=homogeneous_removal", "seed=2")}
        jobs = job_overrides("run", ["+sweep=methods"], conf_dir())
        assert sorted(j[-1] for j in jobs)[:2] == ["method=bad_teacher", "method=boundary_expand"]
        assert len(jobs) == 18  # DUCK, the paper's ten baselines, NegGrad+, SalUn, the four aiming at retraining, DUCK-reinit
        assert {"method=neggrad_plus", "method=salun", "method=oracle_matching", "method=kgltop2"} <= {j[-1] for j in jobs}


def test_a_valid_sweep_still_runs_and_directories_are_distinct(run_cli, tmp_path):
    sweep = tmp_path / "sweep"
    code, _, err, _ = run_cli("train", "-m", *SYNTH_ARGS, "recipe.epochs=1", "seed=0,1", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    assert {json.loads(p.read_text())["seed"] for p in sweep.rglob("metrics.json")} == {0, 1}
    # the same sweep directory again: refused before anything is written (the old results would sit beside
    # the new job's .hydra/ and a refused job would look finished)
    before = sorted(p.relative_to(sweep) for p in sweep.rglob("*"))
    code, _, err, _ = run_cli("train", "-m", *SYNTH_ARGS, "recipe.epochs=1", "seed=2,3", f"hydra.sweep.dir={sweep}")
    assert code == 2 and "already holds results of an earlier run" in err
    assert sorted(p.relative_to(sweep) for p in sweep.rglob("*")) == before


def test_default_output_directories_are_unique_to_the_microsecond():
    from omegaconf import OmegaConf

    for name in ("run", "train", "unlearn", "audit", "bench_main"):
        hydra = OmegaConf.to_container(OmegaConf.load(conf_dir() / f"{name}.yaml"), resolve=False)["hydra"]
        for d in (hydra["run"]["dir"], hydra["sweep"]["dir"]):
            assert d.endswith("%f}"), (name, d)


def test_sweep_ends_with_a_mean_std_table_over_its_jobs(run_cli, tmp_path):
    """DESIGN.md §1: a methods x seeds sweep ends with paper-style mean (std) tables (sweep_summary.*); the
    shared original / oracle of one forget set and seed is counted once."""
    import numpy as np

    from duck.report.sweep import main as summary_main

    sweep = tmp_path / "sweep"
    code, out, err, _ = run_cli("run", "-m", *SYNTH_ARGS, "recipe.epochs=1", "audit=false", "method=duck,finetune",
                                "seed=0,1", f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    assert "sweep summary:" in out and (sweep / "sweep_summary.md").is_file()
    assert f"page: {sweep / 'sweep.html'}" in out and "no forgetting audit in this sweep" in (sweep / "sweep.html").read_text()
    result = json.loads((sweep / "sweep_summary.json").read_text())
    by_method = {s["method"]: s for s in result["summary"]}
    assert {k: v["n"] for k, v in by_method.items()} == {"original": 2, "retrain": 2, "duck": 2, "finetune": 2}
    aus = [r["AUS"] for p in sorted(sweep.glob("*/summary.json")) for r in json.loads(p.read_text())["rows"]
           if r["method"] == "duck"]
    assert by_method["duck"]["AUS"]["mean"] == pytest.approx(np.mean(aus))
    assert by_method["duck"]["AUS"]["std"] == pytest.approx(np.std(aus, ddof=1))
    rows = list(csv_rows(sweep / "sweep_summary.csv"))
    assert [r["method"] for r in rows] == ["original", "retrain", "duck", "finetune"]
    # the same table from the command line (a sweep whose jobs ran elsewhere); a folder without jobs: error
    assert summary_main([str(sweep)]) == 0
    assert summary_main([str(tmp_path)]) == 2


def csv_rows(path):
    import csv

    with open(path, newline="") as f:
        yield from csv.DictReader(f)


def test_sweep_table_never_averages_jobs_of_different_setups(tmp_path):
    """A sweep over model.width (or any other setting) gets one table per setting, each with its own original
    and oracle; method.* overrides separate the method rows only (the reference rows are shared)."""
    from duck.report.sweep import summarize_sweep

    def job(name, overrides, aus, orig_aus, forget="h0"):
        d = tmp_path / name
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
        rows = [{"method": "original", "model": "original", "A_t": 0.9, "A_f": 0.9, "AUS": orig_aus, "time_s": 1.0},
                {"method": "duck", "model": "unlearned (duck)", "A_t": 0.9, "A_f": 0.0, "AUS": aus, "time_s": 2.0},
                {"method": "retrain", "model": "retrained", "A_t": 0.9, "A_f": 0.0, "AUS": 1.0, "time_s": 3.0}]
        (d / "summary.json").write_text(json.dumps({"scenario": {"scenario": "class_removal", "forget_hash": forget,
                                                                 "seed": 0}, "rows": rows}))

    job("0_duck", ["model.width=4", "seed=0", "audit=false"], 0.8, 0.5)
    job("1_duck", ["model.width=32", "seed=0", "audit=false"], 1.0, 0.6)
    job("2_duck", ["model.width=32", "seed=0", "method.lambda_fgt=2", "audit=false"], 0.9, 0.6)
    out = summarize_sweep(tmp_path)
    rows = {(s["setup"], s["method"], s["method_overrides"]): s for s in out["summary"]}
    assert rows[("model.width=4", "duck", "")]["AUS"]["mean"] == 0.8
    assert rows[("model.width=32", "duck", "")]["AUS"]["mean"] == 1.0
    assert rows[("model.width=32", "duck", "method.lambda_fgt=2")]["AUS"]["mean"] == 0.9
    assert rows[("model.width=32", "original", "")]["n"] == 1  # shared by both width-32 jobs, counted once
    assert rows[("model.width=4", "original", "")]["AUS"]["mean"] == 0.5
    assert "### class_removal — model.width=32" in out["table"] and "duck (method.lambda_fgt=2)" in out["table"]


def test_a_failed_job_does_not_stop_the_sweep(run_cli, tmp_path):
    """A job that fails with an input error only at run time (a forget class the synthetic data lacks is caught
    up front; a diverging learning rate is not): one error line, job_error.json in its directory, the other
    jobs run, the sweep summary lists the failure, the sweep exits 2."""
    sweep = tmp_path / "sweep"
    code, out, err, _ = run_cli("run", "-m", *SYNTH_ARGS, "recipe.epochs=2", "scenario.forget_classes=[1]",
                                "audit=false", "recipe.optimizer.lr=1e30,0.001", f"hydra.sweep.dir={sweep}")
    assert code == 2, err
    assert "error: sweep job 0 (" in err and "training diverged" in err
    assert "1 sweep job(s) failed, the others finished" in err
    assert json.loads((sweep / "0_duck" / "job_error.json").read_text())["error"].startswith("training diverged")
    assert (sweep / "1_duck" / "summary.json").is_file()
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [f["job"] for f in summary["failed"]] == ["0_duck"] and summary["rows"]
    assert "1 job(s) failed" in (sweep / "sweep_summary.md").read_text()


@pytest.mark.parametrize("launcher", ["joblib", pytest.param("submitit_local", marks=pytest.mark.slow)])
def test_a_failed_job_does_not_stop_a_parallel_sweep(tmp_path, launcher):
    """The same under the joblib and submitit_local launchers (jobs in other processes): the healthy job
    finishes, the failed one leaves job_error.json, the sweep exits 2 with one error line."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip(f"hydra_plugins.hydra_{launcher.split('_')[0]}_launcher")
    sweep = tmp_path / "sweep"
    proc = subprocess.run([str(Path(sys.executable).parent / "duck-train"), "-m", *SYNTH_ARGS, "recipe.epochs=2",
                           "recipe.optimizer.lr=1e30,0.001", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("error: 1 sweep job(s) failed, the others finished") == 1 and "Traceback" not in proc.stderr
    assert (sweep / "0" / "job_error.json").is_file() and (sweep / "1" / "model.ckpt").is_file()


def test_group_choices_are_also_looked_up_in_the_search_path(tmp_path):
    """A tuned preset written by a search lives in its sweep directory: ``+preset=NAME
    hydra.searchpath=[file://DIR]`` must not be refused as an unknown preset (it was, from the command line)."""
    from duck.cli._overrides import search_roots, unknown_group_choice

    (tmp_path / "preset").mkdir()
    (tmp_path / "preset" / "tuned_x.yaml").write_text("# @package _global_\n")
    root = conf_dir()
    assert "unknown preset 'tuned_x'" in unknown_group_choice(["+preset=tuned_x"], root)
    assert unknown_group_choice(["+preset=tuned_x", f"hydra.searchpath=[file://{tmp_path}]"], root) is None
    message = unknown_group_choice(["+preset=tuned_y", f"hydra.searchpath=['file://{tmp_path}']"], root)
    assert "unknown preset 'tuned_y'" in message and "tuned_x" in message and "tuned_digits_salun" in message
    assert search_roots(["hydra.searchpath=[pkg://elsewhere.conf]"], root) is None  # left to Hydra


def test_a_sweep_of_array_tasks_says_what_to_run_next(tmp_path, capsys):
    """attack.num_shards sweeps write shard.json, no summary: the end of the multirun says so and what to run
    next, not a warning; a sweep with neither still warns."""
    from types import SimpleNamespace

    from duck.report.sweep import SweepSummary

    def end(sweep_dir):
        SweepSummary().on_multirun_end(SimpleNamespace(hydra=SimpleNamespace(sweep=SimpleNamespace(dir=sweep_dir))))
        return capsys.readouterr()

    for i in range(2):
        (tmp_path / "sweep" / f"{i}_subset_matching").mkdir(parents=True)
        (tmp_path / "sweep" / f"{i}_subset_matching" / "shard.json").write_text("{}")
    out = end(tmp_path / "sweep")
    assert "2 array task(s) built their slice of the banks" in out.out and "without attack.num_shards" in out.out
    assert "warning" not in out.err
    (tmp_path / "empty").mkdir()
    out = end(tmp_path / "empty")
    assert out.err.startswith("warning: no sweep summary:") and "array task" not in out.out
