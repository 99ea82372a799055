"""Experiment loggers (issue 38 item 1): the ``logger`` config group on every job, read back the way their users
read them: csv files, TensorBoard's event reader, MLflow's client, wandb's offline run; a backend that is not
installed is refused before any work, and a refused job leaves no run in its directory."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SYNTH_ARGS, written_files
from test_equivalence import _save_margins  # a margins file with a known verdict

from duck.errors import DuckInputError
from duck.pipeline import tracking
from duck.pipeline.tracking import job_results, logger_settings

REPO = Path(__file__).resolve().parents[1]
#: a tiny duck-run job without the audit (a few seconds)
FAST = (*SYNTH_ARGS, "recipe.epochs=2", "audit=false")
#: the smallest audit with the forgetting verdict
SMALL_AUDIT = ("attack.n_shadow=4", "attack.ci.n_boot=200", "attack.svm_mia.enabled=false",
               "report.analysis.enabled=false", "report.shareable.enabled=false", "attack.forgetting.enabled=true",
               "attack.forgetting.n_unlearned=3", "attack.forgetting.n_retrained=3", "attack.forgetting.replicates=20")
VERDICT = (*SYNTH_ARGS, "recipe.epochs=2", *SMALL_AUDIT)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def column(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key)]


def mlflow_client(store: Path):
    pytest.importorskip("mlflow")
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 keeps its file store behind this switch
    from mlflow.tracking import MlflowClient

    return MlflowClient(store.resolve().as_uri())


def test_csv_is_the_default_curves_results_and_tags_in_the_run_directory(run_cli, tmp_path):
    """duck-run with the default logger: the unlearning curve and the results in csv/job/, the original and the
    oracle (trained here: a fresh cache) each in a run of their own; a second job reuses them: no such runs."""
    code, _, err, run_dir = run_cli("run", *FAST, f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    job = read_csv(run_dir / "csv" / "job" / "metrics.csv")
    assert len(column(job, "loss_epoch")) >= 2  # DUCK's loss, one mean per epoch of each phase
    steps = [int(r["step"]) for r in job if r.get("loss_epoch")]
    assert steps == sorted(steps) and len(set(steps)) == len(steps)  # the phases' steps continue one another
    result = job[-1]  # the results: one row after the curves
    summary = json.loads((run_dir / "summary.json").read_text())
    assert float(result["unlearned/A_t"]) == pytest.approx(summary["rows"][1]["A_t"], abs=1e-6)
    metrics = json.loads((run_dir / "unlearned" / "metrics.json").read_text())
    assert float(result["unlearned/acc/test"]) == pytest.approx(metrics["acc"]["test"])
    assert float(result["unlearned/aus"]) == pytest.approx(metrics["aus"])
    for stage in ("original", "unlearning", "retrained", "job"):
        assert float(result[f"stage_time_s/{stage}"]) > 0
    tags = json.loads((run_dir / "csv" / "job" / "tags.json").read_text())
    assert {k: tags[k] for k in ("command", "method", "scenario", "forget_classes", "seed", "status")} == {
        "command": "duck-run", "method": "duck", "scenario": "class_removal", "forget_classes": "[3]", "seed": "0",
        "status": "finished"}
    params = (run_dir / "csv" / "job" / "hparams.yaml").read_text()
    assert "method.name: duck" in params and "recipe.epochs: '2'" in params and "logger.name: csv" in params
    for role, method in (("original", "original"), ("retrained", "retrain")):
        rows = read_csv(run_dir / "csv" / role / "metrics.csv")
        assert column(rows, "train_loss_epoch") and column(rows, "acc/test")
        assert json.loads((run_dir / "csv" / role / "tags.json").read_text())["method"] == method
    code, _, err, run_dir = run_cli("run", *FAST, f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    assert sorted(p.name for p in (run_dir / "csv").iterdir()) == ["job"]  # both reused from the cache
    assert json.loads((run_dir / "csv" / "job" / "tags.json").read_text())["original_from_cache"] == "true"


def test_tensorboard_sweep_event_files_parse(run_cli, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sweep = tmp_path / "sweep"
    code, _, err, _ = run_cli("run", "-m", *FAST, "method=duck,finetune", "logger=tensorboard",
                              f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    for job, epochs in (("0_duck", 2), ("1_finetune", 1)):  # DUCK: two phases, at least an epoch each
        events = EventAccumulator(str(sweep / job / "tensorboard" / "job"))
        events.Reload()
        scalars = events.Tags()["scalars"]
        assert {"loss_epoch", "unlearned/acc/test", "original/aus", "stage_time_s/job"} <= set(scalars)
        assert len(events.Scalars("loss_epoch")) >= epochs
        text = events.Tensors("tags/text_summary")[0].tensor_proto.string_val[0].decode()
        assert f"- method: {job.split('_', 1)[1]}" in text and "- job: " in text
    # the original and the oracle are trained once, by the first job: their runs are in its directory only
    assert sorted(p.name for p in (sweep / "0_duck" / "tensorboard").iterdir()) == ["job", "original", "retrained"]
    assert sorted(p.name for p in (sweep / "1_finetune" / "tensorboard").iterdir()) == ["job"]
    events = EventAccumulator(str(sweep / "0_duck" / "tensorboard" / "original"))
    events.Reload()
    assert {"train_loss_epoch", "acc/test"} <= set(events.Tags()["scalars"])


def test_mlflow_sweep_one_experiment_verdict_q_artifacts_and_a_failed_job(run_cli, tmp_path):
    """A sweep is one MLflow experiment with a run per job: parameters, metrics (the verdict's q and F), the
    verdict as a tag, the report and JSON files as artifacts; the trained original and oracle are child runs; a
    job whose forget class the data lack is refused before any work and leaves no run."""
    store, sweep = tmp_path / "mlruns", tmp_path / "sweep"
    code, _, err, _ = run_cli("run", "-m", *VERDICT, "scenario.forget_classes=[1],[7]", "logger=mlflow",
                              f"logger.tracking_uri={store}", f"cache_dir={tmp_path / 'cache'}",
                              f"hydra.sweep.dir={sweep}")
    assert code == 2 and "sweep job 1" in err and "[7]" in err, err  # the data have 4 classes
    client = mlflow_client(store)
    experiment = client.get_experiment_by_name(str(sweep))
    runs = {r.data.tags["role"]: r for r in client.search_runs([experiment.experiment_id])}
    assert sorted(runs) == ["job", "original", "retrained"]  # job 1 was refused before any work: no run
    job = runs["job"]
    assert job.info.status == "FINISHED" and job.info.run_name == "0: duck class_removal [1] seed 0"
    assert job.data.params["method.name"] == "duck" and job.data.params["scenario.forget_classes"] == "[1]"
    audit = json.loads((sweep / "0_duck" / "unlearned" / "audit.json").read_text())["forgetting"]
    assert job.data.tags["verdict"] == audit["verdict"] and job.data.tags["job"] == "0"
    assert job.data.tags["forget_classes"] == "[1]" and job.data.tags["sweep"] == str(sweep)
    m = job.data.metrics
    assert m["forgetting/F"] == pytest.approx(audit["quality"]) and m["forgetting/q"] == pytest.approx(
        audit["quality_normalised"])
    assert m["forgetting/q_ci_low"] <= m["forgetting/q"] <= m["forgetting/q_ci_high"]
    assert m["forgetting/imprint_kept"] == pytest.approx(audit["shift"])
    assert 0 <= m["unlearned/lira/auc_ci_low"] <= m["unlearned/lira/auc"] <= m["unlearned/lira/auc_ci_high"] <= 1
    assert {"unlearned/acc/test", "unlearned/aus", "retrained/acc/test", "stage_time_s/audit"} <= set(m)
    curve = client.get_metric_history(job.info.run_id, "loss_epoch")
    assert len(curve) >= 2 and [p.step for p in curve] == sorted(p.step for p in curve)
    artifacts = {a.path for a in client.list_artifacts(job.info.run_id)}
    assert {"report.html", "summary.json", "unlearned", "original", "retrained"} <= artifacts
    assert {a.path for a in client.list_artifacts(job.info.run_id, "unlearned")} >= {"unlearned/metrics.json",
                                                                                     "unlearned/audit.json"}
    for role in ("original", "retrained"):
        run = runs[role]
        assert run.data.tags["mlflow.parentRunId"] == job.info.run_id and run.info.status == "FINISHED"
        assert run.data.metrics["acc/test"] > 0.5 and client.get_metric_history(run.info.run_id, "train_loss_epoch")


@pytest.mark.slow
def test_a_digits_methods_sweep_in_mlflow_and_tensorboard(run_cli, tmp_path):
    """Issue 38's target: a 3-method digits sweep with logger=mlflow is one experiment with a run per job (and the
    original and oracle, trained by the first job), read back through MLflow's client; the same sweep with
    logger=tensorboard writes event files TensorBoard's reader parses (about 2 minutes)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    args = ("-m", "data=digits", "recipe.epochs=5", "progress=false", "trainer=cpu", "method=duck,finetune,neggrad",
            *SMALL_AUDIT, f"cache_dir={tmp_path / 'cache'}")
    store, sweep = tmp_path / "mlruns", tmp_path / "sweep"
    code, _, err, _ = run_cli("run", *args, "logger=mlflow", f"logger.tracking_uri={store}", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    client = mlflow_client(store)
    runs = client.search_runs([client.get_experiment_by_name(str(sweep)).experiment_id])
    jobs = {r.data.tags["method"]: r for r in runs if r.data.tags["role"] == "job"}
    assert sorted(jobs) == ["duck", "finetune", "neggrad"] and len(runs) == 5
    assert sorted(r.data.tags["role"] for r in runs if r.data.tags["role"] != "job") == ["original", "retrained"]
    for i, method in enumerate(("duck", "finetune", "neggrad")):
        run, folder = jobs[method], sweep / f"{i}_{method}"
        audit = json.loads((folder / "unlearned" / "audit.json").read_text())["forgetting"]
        assert run.data.params["method.name"] == method and run.data.params["data.name"] == "digits"
        assert run.data.tags["verdict"] == audit["verdict"] and run.data.tags["scenario"] == "class_removal"
        assert run.data.metrics["forgetting/q"] == pytest.approx(audit["quality_normalised"])
        assert run.data.metrics["unlearned/acc/test"] == pytest.approx(
            json.loads((folder / "unlearned" / "metrics.json").read_text())["acc"]["test"])
        assert {"report.html", "summary.json"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    sweep = tmp_path / "sweep_tb"
    code, _, err, _ = run_cli("run", *args, "logger=tensorboard", f"hydra.sweep.dir={sweep}")
    assert code == 0, err
    for i, method in enumerate(("duck", "finetune", "neggrad")):
        events = EventAccumulator(str(sweep / f"{i}_{method}" / "tensorboard" / "job"))
        events.Reload()
        assert {"loss_epoch", "forgetting/q", "unlearned/lira/auc"} <= set(events.Tags()["scalars"])


@pytest.mark.slow
def test_a_ddp_training_logs_its_results_without_curves(run_cli):
    """The DDP workers are processes of their own (their copies of the logger would write this process's files):
    no curve, the results all the same (about 20 s: two CPU processes start)."""
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=4", "trainer=ddp_sim")
    assert code == 0, err
    rows = read_csv(run_dir / "csv" / "job" / "metrics.csv")
    assert len(rows) == 1 and float(rows[0]["original/acc/test"]) > 0.5 and "train_loss_epoch" not in rows[0]


def test_unlearn_and_margins_audit_log_their_results(run_cli, synthetic_ckpt, tmp_path):
    code, _, err, run_dir = run_cli("unlearn", *SYNTH_ARGS, f"ckpt={synthetic_ckpt}", "recipe.epochs=2")
    assert code == 0, err
    result = read_csv(run_dir / "csv" / "job" / "metrics.csv")[-1]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert float(result["unlearned/acc/test"]) == pytest.approx(metrics["acc"]["test"])
    assert float(result["original/acc/test"]) == pytest.approx(metrics["original_acc"]["test"])
    assert json.loads((run_dir / "csv" / "job" / "tags.json").read_text())["command"] == "duck-unlearn"
    path = tmp_path / "margins.npz"
    _save_margins(path, np.random.default_rng(4), f=1.0)
    code, _, err, run_dir = run_cli("audit", f"margins={path}", "attack.forgetting.replicates=20")
    assert code == 0, err
    result = read_csv(run_dir / "csv" / "job" / "metrics.csv")[-1]
    verdict = json.loads((run_dir / "audit.json").read_text())["forgetting"]
    assert float(result["forgetting/F"]) == pytest.approx(verdict["quality"])
    tags = json.loads((run_dir / "csv" / "job" / "tags.json").read_text())
    assert tags["verdict"] == verdict["verdict"] and tags["audited"] == "margins"


def test_a_refused_job_leaves_no_run(run_cli):
    """Exit status 2 means nothing written but Hydra's logs: a refusal before any work opens no run; a training
    that diverges had opened one, which is taken back from the run directory."""
    code, _, err, run_dir = run_cli("run", *FAST, "scenario.forget_classes=[7]")
    assert code == 2 and not (run_dir / "csv").exists(), err
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.optimizer.lr=1e30")
    assert code == 2 and "training diverged" in err, err
    assert not (run_dir / "csv").exists() and written_files(run_dir) == set()


@pytest.mark.parametrize("args", [("logger=mlflow",), ("-m", "method=duck,finetune", "logger=mlflow"),
                                  ("-m", "+tune=finetune", "logger=mlflow")])
def test_a_missing_backend_is_one_line_with_the_extra_before_any_work(run_cli, monkeypatch, tmp_path, args):
    monkeypatch.setattr(tracking, "module_available", lambda module: module != "mlflow")
    if "-m" in args:
        args = (*args, f"hydra.sweep.dir={tmp_path / 'sweep'}")
    code, _, err, run_dir = run_cli("run", *args)
    assert code == 2 and err.count("\n") == 1, err
    assert err == ("error: logger=mlflow needs the mlflow package, which is not installed: pip install "
                   "'duck-unlearn[mlflow]' (or logger=csv, which needs nothing)\n")
    assert not run_dir.exists() and not (tmp_path / "sweep").exists()


def test_the_backend_is_checked_before_torch_is_imported(tmp_path):
    """Like the other refusals of a composed config (tests/test_fast_refusals.py): torch and Lightning are made
    unimportable, MLflow missing."""
    blocked = tmp_path / "blocked"
    for name in ("torch", "lightning"):
        (blocked / name).mkdir(parents=True)
        (blocked / name / "__init__.py").write_text(f"raise ImportError('{name} imported before the check')\n")
    code = ("import sys; sys.modules['mlflow'] = None; sys.argv = ['duck-run', 'logger=mlflow']; "
            "from duck.cli.run import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(REPO)])})
    assert proc.returncode == 2 and proc.stderr.startswith("error: logger=mlflow needs the mlflow package"), proc.stderr


@pytest.mark.parametrize("node, match", [
    ({"name": "neptune"}, "logger.name='neptune': choose logger=none|csv|tensorboard|mlflow|wandb"),
    ({"name": "csv", "experiment": "x"}, r"logger=csv has no setting\(s\) \['experiment'\]"),
    ({"name": "mlflow", "experiment": ""}, "logger.experiment='' must be a non-empty string or null"),
    ({"name": "wandb", "offline": "maybe"}, "logger.offline='maybe' must be true or false"),
])
def test_bad_logger_settings(node, match):
    with pytest.raises(DuckInputError, match=match):
        logger_settings(node)


def test_wandb_offline_run(run_cli):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'duck-unlearn[wandb]')")
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=2", "logger=wandb")
    assert code == 0, err
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb")), list((run_dir / "wandb").rglob("*"))


def test_results_of_an_empty_or_partial_run_directory(tmp_path):
    assert job_results(tmp_path).metrics == {} and job_results(tmp_path).files == []
    (tmp_path / "metrics.json").write_text(json.dumps({"method": "retrain", "acc": {"test": 0.9}, "time_s": 1.5}))
    (tmp_path / "summary.json").write_text("{truncated")
    res = job_results(tmp_path, "train")
    assert res.metrics == {"retrained/acc/test": 0.9, "retrained/time_s": 1.5}
    assert set(job_results(tmp_path, "unlearn").metrics) == {"unlearned/acc/test", "unlearned/time_s"}  # method=retrain
    assert sorted(res.files) == [(tmp_path / "metrics.json", ""), (tmp_path / "summary.json", "")]


def test_wandb_run_of_a_refused_job_is_taken_back(run_cli):
    pytest.importorskip("wandb", reason="wandb is not installed (pip install 'duck-unlearn[wandb]')")
    code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.optimizer.lr=1e30", "logger=wandb")
    assert code == 2 and "training diverged" in err, err
    assert not (run_dir / "wandb").exists()


def test_the_mlflow_sidecar_speaks_the_protocol_and_reports_refusals(tmp_path):
    """The job's MLflow calls through its sidecar process (duck.pipeline.mlflow_sidecar): runs, batches and
    artifacts arrive in the store as MLflow's own client reads them; a refused call is an error answer with
    MLflow's message, and the sidecar goes on serving."""
    pytest.importorskip("mlflow")
    from duck.pipeline.mlflow_sidecar import Sidecar, SidecarError

    store = tmp_path / "mlruns"
    uri = store.resolve().as_uri()
    side = Sidecar()
    try:
        assert side.call("get_experiment", uri, name="e") is None
        exp = side.call("create_experiment", uri, name="e")
        assert side.call("get_experiment", uri, name="e") == {"id": exp, "deleted": False}
        with pytest.raises(SidecarError, match="already exists"):
            side.call("create_experiment", uri, name="e")
        run = side.call("create_run", uri, experiment_id=exp, run_name="r", tags={"method": "duck"})
        side.call("log_batch", uri, run_id=run, metrics=[["F", 0.25, 1000, 0], ["F", 0.5, 2000, 1]],
                  params=[["seed", "3"]], tags=[["verdict", "forgotten"]])
        (tmp_path / "report.html").write_text("<p>report</p>")
        side.call("log_artifact", uri, run_id=run, path=str(tmp_path / "report.html"), artifact_path=None)
        side.call("set_terminated", uri, run_id=run, status="FINISHED")
        with pytest.raises(SidecarError, match="^KeyError: 'no_such_op'$"):
            side.call("no_such_op", uri)
    finally:
        side.close()
    assert side.proc.returncode == 0  # a used sidecar ends when its input closes
    client = mlflow_client(store)
    got = client.get_run(run)
    assert got.info.status == "FINISHED" and got.data.params == {"seed": "3"} and got.data.metrics == {"F": 0.5}
    assert got.data.tags["verdict"] == "forgotten" and got.data.tags["method"] == "duck"
    assert [m.value for m in client.get_metric_history(run, "F")] == [0.25, 0.5]
    assert [a.path for a in client.list_artifacts(run)] == ["report.html"]


def test_an_unused_sidecar_is_stopped_not_waited_for():
    """A job refused before it logs closes a sidecar that is still importing MLflow: killed, not awaited."""
    from duck.pipeline.mlflow_sidecar import Sidecar

    side = Sidecar()
    side.close()
    assert side.proc.returncode is not None and side.proc.returncode < 0  # ended by a signal


def test_a_job_logging_to_mlflow_never_imports_mlflow_itself(tmp_path):
    """The MLflow client lives in the sidecar: after a duck-run job with logger=mlflow, the job's process has not
    imported mlflow (the 1.5-2 s import ran in the sidecar, started by the command line before torch), and the
    job's run is in the store."""
    pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    args = ["duck-run", *FAST, "logger=mlflow", f"logger.tracking_uri={store}", f"hydra.run.dir={tmp_path / 'run'}",
            f"cache_dir={tmp_path / 'cache'}"]
    code = (f"import sys; sys.argv = {args!r}\nfrom duck.cli.run import main\ntry:\n    main()\nexcept SystemExit as e:\n"
            "    assert not e.code, e.code\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
    runs = mlflow_client(store).search_runs([e.experiment_id for e in mlflow_client(store).search_experiments()])
    assert any(r.data.tags.get("role") == "job" and r.info.status == "FINISHED" for r in runs)
