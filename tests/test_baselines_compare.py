"""``duck-bench compare``: the protocol, the aggregation and one quick end-to-end run with the cache reused."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from benchmarks.compare import csv_text, markdown, protocol_runs, summarise
from duck.errors import DuckInputError


def bench_cfg(**kw):
    base = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "bench" / "compare.yaml")
    return OmegaConf.merge(base, kw)


def test_protocol_is_every_class_and_every_seed():
    runs = protocol_runs(bench_cfg(), num_classes=10)
    cr = [r for r in runs if r["scenario"] == "class_removal"]
    hr = [r for r in runs if r["scenario"] == "homogeneous_removal"]
    assert [r["label"] for r in cr] == [f"class_{c}" for c in range(10)] and all(r["seed"] == 0 for r in cr)
    assert [r["seed"] for r in hr] == [0, 1, 2]
    assert "scenario.seed=2" in hr[2]["overrides"] and "scenario.fraction=0.1" in hr[2]["overrides"]
    quick = protocol_runs(bench_cfg(quick=True, classes=[4, 8]), num_classes=10)
    assert [r["label"] for r in quick] == ["class_4", "seed_0"]
    with pytest.raises(DuckInputError, match="bench.scenarios"):
        protocol_runs(bench_cfg(scenarios=["bias"]), num_classes=10)


def test_summary_is_the_mean_and_sample_std_over_runs():
    rng = np.random.default_rng(0)
    records = []
    for i in range(4):
        for m in ("original", "retrain", "duck", "neggrad"):
            records.append({"method": m, "scenario": "class_removal", "run": f"class_{i}", "A_t": rng.random(),
                            "A_f": rng.random(), "AUS": rng.random(), "time_s": rng.random(), "epochs": 1.0,
                            "target_met": i % 2 == 0, "reached_target": None if m != "neggrad" else i < 3})
    records.append({"method": "duck", "scenario": "class_removal", "run": "class_9", "error": "boom"})
    rows = summarise(records, "class_removal", ["duck", "neggrad", "erm_ktp"], {"erm_ktp": "n/a here"})
    by = {r["method"]: r for r in rows}
    aus = [r["AUS"] for r in records if r["method"] == "duck" and "error" not in r]
    assert by["duck"]["AUS"]["mean"] == pytest.approx(np.mean(aus))
    assert by["duck"]["AUS"]["std"] == pytest.approx(np.std(aus, ddof=1))
    assert by["duck"]["n"] == 4 and by["duck"]["errors"] == 1 and by["duck"]["target_met"] == 2
    assert by["neggrad"]["stop_rule_reached"] == 3 and by["neggrad"]["stop_rule_runs"] == 4
    assert by["duck"]["stop_rule_reached"] is None and by["erm_ktp"]["n"] == 0
    md = markdown(rows, "class_removal")
    assert "| erm_ktp | n/a |" in md and "4 (1 failed)" in md and "3/4" in md
    table = list(csv.DictReader(io.StringIO(csv_text(rows))))
    assert [r["method"] for r in table] == ["original", "retrain", "duck", "neggrad", "erm_ktp"]
    assert float(table[2]["AUS_mean"]) == pytest.approx(np.mean(aus), abs=1e-6)


def test_quick_compare_end_to_end_reuses_the_cache(tmp_path):
    from benchmarks.compare import run

    cfg = bench_cfg(data="synthetic", model="smallcnn", quick=True, methods=["neggrad", "boundary_shrink"],
                    cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "out1"), progress=False,
                    overrides=["data.n_train=240", "data.n_test=120", "model.width=8"])
    out = run(cfg)
    files = {p.name for p in (tmp_path / "out1").iterdir()}
    assert {"compare.md", "compare.csv", "runs.json"} <= files
    runs = json.loads((tmp_path / "out1" / "runs.json").read_text())
    assert {(r["method"], r["scenario"]) for r in runs} == {
        ("original", "class_removal"), ("retrain", "class_removal"), ("neggrad", "class_removal"),
        ("boundary_shrink", "class_removal"), ("original", "homogeneous_removal"),
        ("retrain", "homogeneous_removal"), ("neggrad", "homogeneous_removal")}
    assert not any("error" in r for r in runs)
    assert "| boundary_shrink | n/a |" in out["table"] and "Class removal" in out["table"]
    assert next(r for r in runs if r["method"] == "retrain")["reused_from_cache"] is False
    # a rerun trains nothing: original and oracle come from the cache
    cfg2 = OmegaConf.merge(cfg, {"methods": [], "out_dir": str(tmp_path / "out2"),
                                 "scenarios": ["class_removal"]})
    runs2 = run(cfg2)["runs"]
    assert next(r for r in runs2 if r["method"] == "retrain")["reused_from_cache"] is True
    # its time is the cached training's: marked, with the reason below the table
    out2 = run(OmegaConf.merge(cfg2, {"out_dir": str(tmp_path / "out2b")}))
    assert "† (1/1 cached)" in out2["table"] and "its time is that of its first training" in out2["table"]
    assert "quick run (first class and first seed only)" in out2["table"]
    orig1 = next(r for r in runs if r["method"] == "original" and r["scenario"] == "class_removal")
    orig2 = next(r for r in runs2 if r["method"] == "original")
    assert orig1["A_t"] == orig2["A_t"] and orig1["A_f"] == orig2["A_f"]
    # resume: finished runs of an interrupted protocol are kept, the missing one is run; a failed one is redone
    partial = [r for r in runs if not (r["method"] == "neggrad" and r["scenario"] == "homogeneous_removal")]
    partial.append({"method": "boundary_shrink", "scenario": "class_removal", "run": "class_0", "seed": 0,
                    "error": "RuntimeError: interrupted"})
    (tmp_path / "partial.json").write_text(json.dumps([r for r in partial if r["method"] != "boundary_shrink"]
                                                      + [partial[-1]]))
    out3 = run(OmegaConf.merge(cfg, {"out_dir": str(tmp_path / "out3"), "resume": str(tmp_path / "partial.json")}))
    runs3 = out3["runs"]
    assert sorted((r["method"], r["scenario"]) for r in runs3) == sorted((r["method"], r["scenario"]) for r in runs)
    assert not any("error" in r for r in runs3)
    kept = next(r for r in runs3 if r["method"] == "neggrad" and r["scenario"] == "class_removal")
    assert kept["time_s"] == next(r for r in runs if r["method"] == "neggrad" and r["scenario"] == "class_removal")["time_s"]
    assert "resumed from" in out3["table"]
    with pytest.raises(DuckInputError, match="bench.resume"):
        run(OmegaConf.merge(cfg, {"resume": str(tmp_path / "missing.json")}))
    # a resume with other protocol options is refused (the earlier table would be reported as this one's)
    assert json.loads((tmp_path / "out1" / "protocol.json").read_text())["data"] == "synthetic"
    other = OmegaConf.merge(cfg, {"out_dir": str(tmp_path / "out4"), "resume": str(tmp_path / "out1"),
                                  "overrides": [*cfg.overrides, "recipe.epochs=6"]})
    with pytest.raises(DuckInputError, match=r"was run with bench.overrides=.*start a new protocol"):
        run(other)
    with pytest.raises(DuckInputError, match="was run with bench.data='synthetic'"):
        run(OmegaConf.merge(cfg, {"data": "digits", "resume": str(tmp_path / "out1")}))
    assert not (tmp_path / "out4").exists()
    # an old run directory without protocol.json: the records' data set and model are checked
    with pytest.raises(DuckInputError, match="holds runs of synthetic / smallcnn, not bench.data=digits"):
        run(OmegaConf.merge(cfg, {"data": "digits", "resume": str(tmp_path / "partial.json")}))


@pytest.mark.parametrize("overrides,match", [
    (["seed=-1"], "sets what the protocol sets; use the protocol's seeds"),
    (["scenario.fraction=0.5"], "use bench.scenarios"),
    (["method=scrub"], "use bench.methods"),
    (["data=digits"], "use bench.data"),
    (["recipe.epochs"], "is not KEY=VALUE"),
    (["+method.lambda_fgtt=3"], r"has no hyperparameter\(s\) \['lambda_fgtt'\]"),
])
def test_bad_overrides_are_refused_before_any_work(tmp_path, overrides, match):
    from benchmarks.compare import run

    cfg = bench_cfg(data="synthetic", model="smallcnn", quick=True, methods=["duck"], progress=False,
                    cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "out"), overrides=overrides)
    with pytest.raises(DuckInputError, match=match):
        run(cfg)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("key,values", [("classes", [3, 3]), ("seeds", [1, 0, 1])])
def test_repeated_classes_or_seeds_are_refused(key, values):
    cfg = bench_cfg(**{key: values})
    with pytest.raises(DuckInputError, match=f"bench.{key}=.* repeats"):
        protocol_runs(cfg, 10)


def test_forget_set_exactly_at_the_target_counts_as_met():
    """The homogeneous target is the original's test accuracy (float32, unrounded) and the records hold 6
    decimals: 132/135 == 440/450 used to count as missed."""
    from types import SimpleNamespace

    from benchmarks.compare import run_record

    scenario = SimpleNamespace(kind="homogeneous_removal", forget_target_rule="original_test", is_class_removal=False)
    original_acc = {"test": float(np.float32(440 / 450)), "test_retain": 0.98}
    metrics = {"acc": {"train_forget": round(132 / 135, 6), "test": 0.97, "train_retain": 0.99}, "aus": 1.0}
    spec = {"scenario": "homogeneous_removal", "label": "seed_0", "seed": 0}
    rec = run_record("neggrad", spec, metrics, scenario, original_acc, original_acc["test"])
    assert rec["target_met"] is True and rec["forget_target"] == 0.977778
    metrics["acc"]["train_forget"] = round(133 / 135, 6)
    assert run_record("neggrad", spec, metrics, scenario, original_acc, original_acc["test"])["target_met"] is False


def test_quick_runs_say_so_on_the_console_and_in_bench_json(run_cli, tmp_path):
    code, out, err, run_dir = run_cli("bench", "compare", "bench.quick=true", "bench.data=synthetic",
                                      "bench.methods=[]", "bench.scenarios=[class_removal]", "bench.progress=false",
                                      'bench.overrides=["data.n_train=240","data.n_test=120","model.width=8"]',
                                      f"bench.cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    assert out.startswith("QUICK RUN (bench.quick=true)")
    assert json.loads((run_dir / "bench.json").read_text())["quick_run"] is True


def test_compare_adds_the_forgetting_columns(tmp_path):
    """bench.forgetting.enabled: each method's run carries F, its normalised value, the final score, KLOM and the
    verdict; the table shows them; a resume with the audit switched off is refused (other numbers)."""
    from benchmarks.compare import run

    cfg = bench_cfg(data="synthetic", model="smallcnn", quick=True, methods=["neggrad"],
                    scenarios=["class_removal"], cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "out"),
                    progress=False, overrides=["data.n_train=240", "data.n_test=120", "model.width=8",
                                               "recipe.epochs=3"],
                    forgetting={"enabled": True, "n_unlearned": 3, "n_retrained": 3})
    out = run(cfg)
    rec = next(r for r in out["runs"] if r["method"] == "neggrad")
    assert 0.0 <= rec["F"] <= 1.0 and 0.0 <= rec["final_score"] <= 1.0
    assert rec["verdict"] in {"forgotten", "not_forgotten", "inconclusive"} and rec["klom_forget"] >= 0.0
    assert "F normalised" in out["table"] and "KLOM forget (median)" in out["table"]
    assert f"1 {rec['verdict']}" in out["table"]
    assert "Controls of class_0 (F against the retrain bank): none " in out["table"] and "retrain " in out["table"]
    assert json.loads((tmp_path / "out" / "protocol.json").read_text())["forgetting"]["n_unlearned"] == 3
    with pytest.raises(DuckInputError, match="bench.forgetting"):
        run(OmegaConf.merge(cfg, {"forgetting": {"enabled": False}, "resume": str(tmp_path / "out"),
                                  "out_dir": str(tmp_path / "out2")}))
    with pytest.raises(DuckInputError, match="n_unlearned"):
        run(OmegaConf.merge(cfg, {"forgetting": {"n_unlearned": 1}, "out_dir": str(tmp_path / "out3")}))


def test_failure_flags_name_the_reason_with_the_numbers():
    """issue 27 item 4: a missed forget target, a collapsed retained accuracy and unlearning slower than
    retraining each flag the method's row; a method that does none of these has no flag."""
    from benchmarks.compare import failure_flags

    def rec(method, a_t, time_s, train_forget, target=0.01):
        return {"method": method, "scenario": "class_removal", "run": "r", "A_t": a_t, "A_f": 0.0, "AUS": 1.0,
                "time_s": time_s, "epochs": 1.0, "train_forget": train_forget, "forget_target": target,
                "target_met": train_forget <= target, "reached_target": None}

    records = [rec("original", 0.99, 10.0, 1.0, 1.0), rec("retrain", 0.99, 50.0, 0.0),
               rec("scrub", 0.98, 20.0, 0.133), rec("scrub", 0.98, 20.0, 0.0),
               rec("finetune", 0.90, 353.0, 0.0), rec("duck", 0.985, 2.0, 0.0)]
    rows = {r["method"]: r for r in summarise(records, "class_removal", ["scrub", "finetune", "duck"], {})}
    assert rows["scrub"]["flags"] == ["forget target not reached in 1/2 runs: 0.133 > 0.010"]
    assert rows["finetune"]["flags"] == ["retained accuracy collapsed: A_t 90.0 % vs 99.0 % retrained",
                                         "slower than retraining (353 s vs 50 s)"]
    assert rows["duck"]["flags"] == [] and "flags" not in rows["retrain"]
    md = markdown(list(rows.values()), "class_removal")
    assert "slower than retraining (353 s vs 50 s)" in md
    assert failure_flags(rows["finetune"], None) == []  # no oracle row: nothing to compare with
    table = list(csv.DictReader(io.StringIO(csv_text(list(rows.values())))))
    assert next(r for r in table if r["method"] == "scrub")["flags"].startswith("forget target not reached")


def test_tuned_presets_add_rows_beside_the_defaults(tmp_path, monkeypatch):
    """bench.presets (issue 27 item 3): a METHOD+PRESET row runs the method with the preset's values beside its
    default row; it is not run on the preset's validation forget set (reported as skipped, with the reason);
    bench.presets=tuned finds tuned_<data>_<method>; unknown methods and missing presets are refused."""
    import shutil

    from benchmarks.compare import run
    from duck.pipeline.config import conf_dir

    conf = tmp_path / "conf"
    shutil.copytree(conf_dir(), conf)
    (conf / "preset" / "tuned_synthetic_neggrad.yaml").write_text(
        "# @package _global_\nmethod:\n  lr: 0.0123\ntuned_on:\n  data: synthetic\n  scenario: class_removal\n"
        "  forget_classes: [0]\n  forget_hash: none\n")
    monkeypatch.setenv("DUCK_CONF_DIR", str(conf))
    cfg = bench_cfg(data="synthetic", model="smallcnn", classes=[0, 1], methods=["neggrad"],
                    scenarios=["class_removal"], cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "out"),
                    progress=False, presets="tuned",
                    overrides=["data.n_train=240", "data.n_test=120", "model.width=8", "recipe.epochs=3"])
    out = run(cfg)
    runs = json.loads((tmp_path / "out" / "runs.json").read_text())
    tuned = [r for r in runs if r["method"] == "neggrad+tuned_synthetic_neggrad"]
    default = [r for r in runs if r["method"] == "neggrad"]
    assert [r["run"] for r in tuned] == ["class_1"] and [r["run"] for r in default] == ["class_0", "class_1"]
    assert tuned[0]["metrics"]["hparams"]["lr"] == pytest.approx(0.0123)
    assert default[0]["metrics"]["hparams"]["lr"] != pytest.approx(0.0123)
    row = next(r for r in out["summary"] if r["method"] == "neggrad+tuned_synthetic_neggrad")
    assert row["n"] == 1 and row["skipped"] == ["class_0"]
    assert "| neggrad+tuned_synthetic_neggrad |" in out["table"]
    assert "1 (class_0 skipped: the preset's validation forget set) |" in out["table"]
    assert out["protocol"]["presets"] == {"neggrad+tuned_synthetic_neggrad": "tuned_synthetic_neggrad"}
    # a resumed protocol reruns a row whose hyperparameters changed since (here: the preset), keeps the others
    (conf / "preset" / "tuned_synthetic_neggrad.yaml").write_text(
        (conf / "preset" / "tuned_synthetic_neggrad.yaml").read_text().replace("0.0123", "0.0456"))
    again = run(OmegaConf.merge(cfg, {"out_dir": str(tmp_path / "again"), "resume": str(tmp_path / "out")}))
    rerun = json.loads((tmp_path / "again" / "runs.json").read_text())
    tuned2 = [r for r in rerun if r["method"] == "neggrad+tuned_synthetic_neggrad"]
    assert [r["metrics"]["hparams"]["lr"] for r in tuned2] == [pytest.approx(0.0456)]
    kept = {r["run"]: r["time_s"] for r in rerun if r["method"] == "neggrad"}
    assert kept == {r["run"]: r["time_s"] for r in default}
    assert "1 of them rerun (hyperparameters changed)" in again["table"]
    for presets, match in [({"scrub": "tuned_synthetic_neggrad"}, r"names \['scrub'\], not in bench.methods"),
                           ({"neggrad": "tuned_nowhere"}, r"no preset \['tuned_nowhere'\]"),
                           (["x"], "give tuned")]:
        with pytest.raises(DuckInputError, match=match):
            run(OmegaConf.merge(cfg, {"presets": presets, "out_dir": str(tmp_path / "bad")}))


def test_a_setting_added_since_with_no_value_does_not_rerun_a_resumed_record():
    """Resume compares a record's hyperparameters with the protocol's: a key the record lacks whose value is null
    now (a setting added to the method's config since, e.g. NegGrad+'s ``min_epochs``) changes nothing; a key
    added with a value, or a changed value, does."""
    from benchmarks.compare import same_hyperparameters

    record = {"scenario": "class_removal", "method": "salun", "metrics": {"hparams": {"lr": 0.01, "epochs": 10}}}
    key = ("class_removal", "salun")
    assert same_hyperparameters(record, {key: {"lr": 0.01, "epochs": 10, "min_epochs": None}})
    assert not same_hyperparameters(record, {key: {"lr": 0.01, "epochs": 10, "min_epochs": 3}})
    assert not same_hyperparameters(record, {key: {"lr": 0.02, "epochs": 10, "min_epochs": None}})
    assert not same_hyperparameters(record, {key: {"lr": 0.01}})  # a setting gone counts as a change
    assert same_hyperparameters(record, {})  # no protocol value to compare with (a reference row)
