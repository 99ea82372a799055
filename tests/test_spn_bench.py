"""The ``duck-bench spn`` suite on tiny settings: protocol bookkeeping, certified check, tables, CLI."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from benchmarks import spn as bench
from duck.errors import DuckInputError


def tiny_cfg(**overrides):
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "bench" / "spn.yaml")
    cfg.merge_with(
        {
            "datasets": ["wine"],
            "repetitions": 2,
            "n_removals": 4,
            "train_repeats": 1,
            "spflow": False,
            "loglik_rows": 500,
            "loglik_repeats": 2,
            **overrides,
        }
    )
    return cfg


def test_suite_reports_times_ratio_and_certified_equality():
    out = bench.run(tiny_cfg())
    reps = out["datasets"]["wine"]["repetitions"]
    assert len(reps) == 2
    for rep in reps:
        assert rep["n_rows"] == 178 and rep["n_removals"] == 4  # wine has fewer than n_train rows: all of them
        assert rep["certified_equal"] is True
        assert rep["unlearn_s"] > 0 and rep["retrain_s"] > 0
        assert rep["speedup"] == pytest.approx(rep["retrain_s"] / rep["unlearn_s"])
        assert list(rep["schedules"]) == ["blocks", "interleaved"]  # the first one gives the headline columns
        assert rep["unlearn_s"] == rep["schedules"]["blocks"]["unlearn_s"]
        for res in rep["schedules"].values():  # each schedule unlearned its own copy of the same model
            assert res["certified_equal"] is True and res["unlearn_s"] > 0 and res["retrain_s"] > 0
    for text in ("UnlearnSPN vs retraining", "| wine | blocks |", "| wine | interleaved |", "speed-up", "without state",
                 "Batched log-likelihood", "2/2"):
        assert text in out["table"]
    assert out["loglik"]["wine"]["rows"] == 500 and out["loglik"]["wine"]["ms"] > 0
    json.dumps({k: v for k, v in out.items() if k != "table"})  # bench.json must be serialisable


def test_unknown_dataset_is_rejected():
    with pytest.raises(DuckInputError, match=r"bench\.datasets\[0\]='mnist'; choose one of \['wine'"):
        bench.run(tiny_cfg(datasets=["mnist"]))


@pytest.mark.parametrize("schedules", [["alternating"], [], ["blocks", "blocks"]])
def test_bad_schedules_are_rejected(schedules):
    with pytest.raises(DuckInputError, match="bench.schedules"):
        bench.run(tiny_cfg(schedules=schedules))


def test_single_schedule_runs_alone():
    out = bench.run(tiny_cfg(schedules=["interleaved"], repetitions=1, n_removals=2))
    rep = out["datasets"]["wine"]["repetitions"][0]
    assert list(rep["schedules"]) == ["interleaved"] and rep["certified_equal"] is True
    assert "| wine | interleaved |" in out["table"] and "| wine | blocks |" not in out["table"]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("spflow") is None, reason="spflow is not installed")
def test_spflow_comparison_runs_on_the_same_rows():
    out = bench.run(tiny_cfg(repetitions=1, n_removals=2, spflow=True, spflow_repetitions=1))
    res = out["spflow"]["wine"]
    assert res["n_train"] == 142 and res["n_test"] == 36  # wine: an 80 / 20 split of the pool
    assert res["ours_test_ll"]["mean"] < 0 and res["spflow_test_ll"]["mean"] < 0
    assert "SPFlow" in out["table"]


def test_cli_writes_bench_json(run_cli):
    code, out, err, run_dir = run_cli(
        "bench", "spn", "bench.datasets=[wine]", "bench.repetitions=1", "bench.n_removals=2",
        "bench.train_repeats=1", "bench.spflow=false", "bench.loglik_rows=100", "bench.loglik_repeats=1",
    )
    assert code == 0, err
    result = json.loads((run_dir / "bench.json").read_text())
    assert result["suite"] == "spn" and "machine" in result and "speed-up" in out


@pytest.mark.parametrize(("arg", "match"), [("bench.seed=-3", "bench.seed=-3 must be an integer >= 0"),
                                            ("bench.repetitions=0", "bench.repetitions=0 must be an integer >= 1")])
def test_cli_refuses_shared_bench_numbers_before_work(run_cli, arg, match):
    code, _, err, run_dir = run_cli("bench", "spn", arg)
    assert code == 2 and match in err, err
    assert not (run_dir / "bench.json").exists()
