"""The four jobs of the command line, as library functions on a resolved :class:`~duck.pipeline.job.Job`:
``train`` (duck-train), ``unlearn`` (duck-unlearn), ``audit`` (duck-audit) and ``run`` (duck-run: original →
unlearn → retrained oracle → audit → report). Each writes its files into ``out`` and prints one line per
stage; its stages are timed and their training curves logged by a :class:`~duck.pipeline.tracking.Tracker`
(the ``logger`` config group). The console scripts in :mod:`duck.cli` only compose the config and call
:func:`run_command`."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Any

from attacks.bank_shards import train_bank_slices
from duck.checkpoint import save_checkpoint
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_write_text
from duck.metrics import metrics_record
from duck.pipeline.audit import (
    REFERENCE_NAMES,
    accuracy_rows,
    audit_and_report,
    audit_lines,
    check_recorded_recipes,
    resolve_role,
    source_recipe_recorded,
    verdict_lines,
)
from duck.pipeline.cache import train_or_reuse
from duck.pipeline.config import container
from duck.pipeline.job import Job, method_settings
from duck.pipeline.models import load_model, unlearned_path, write_unlearned
from duck.pipeline.references import reference_banks
from duck.pipeline.stages import (
    audit_context,
    check_inputs,
    check_original,
    evaluate,
    fit_model,
    format_metrics_line,
    manifest_of,
    save_model,
    summary_table,
    unlearn_model,
    write_forget_ids,
)
from duck.pipeline.tracking import UNTRACKED, Tracker, tracked
from duck.unlearn import get_unlearner_class
from duck.unlearn.registry import resolve_method_cfg
from duck.utils import warn_line


def train(job: Job, out: Path, tracker: Tracker = UNTRACKED) -> tuple[dict[str, Any], dict[str, Any]]:
    """duck-train: the original (or with ``retrain=true`` the oracle on the retain set) → ``model.ckpt``,
    ``metrics.json``. A model at chance is refused before anything is written."""
    retrain = bool(job.config.get("retrain"))
    with tracker.stage("training"):
        model, metrics = fit_model(job, retrain)
    try:  # a model trained here at chance is written (the user asked for it) but said loudly
        check_original(job, metrics["acc"], "the trained model")
    except DuckInputError as e:
        warn_line(f"{e}; duck-unlearn / duck-audit will refuse this checkpoint")
    save_model(out, "model.ckpt", model, metrics, job)
    if job.scenario is not None:
        write_forget_ids(out / "forget_ids.txt", job.scenario)
    print(f"{metrics['method']} {job.model_name} on {job.data.describe()}: "
          + ", ".join(f"{k}={v:.4f}" for k, v in metrics["acc"].items()) + f" ({metrics['time_s']:.1f} s)")
    print(f"wrote {out / 'model.ckpt'} and {out / 'metrics.json'}")
    return metrics, {"model": model}


def unlearn(job: Job, out: Path, tracker: Tracker = UNTRACKED) -> tuple[dict[str, Any], dict[str, Any]]:
    """duck-unlearn: checkpoint in, unlearned checkpoint out (the input's own format and key names), its
    ``metrics.json`` and ``forget_ids.txt``; with the audit, ``audit.json`` and the report too."""
    model, manifest, rule = load_model(job, job.inputs["ckpt"])
    model.to(job.device)
    stats = check_inputs(job, model) or {}
    original_acc = evaluate(job, model)
    check_original(job, original_acc)
    print("original: " + ", ".join(f"{k}={v:.4f}" for k, v in original_acc.items()))
    reference = copy.deepcopy(model) if job.audit is not None else None  # the unlearner modifies its model
    # the shadows are trained with recipe=...: is it the one the original had?
    audit_warnings = check_recorded_recipes({"original": manifest}, job.recipe_cfg) if job.audit is not None else []
    with tracker.stage("unlearning"):
        metrics, result = unlearn_model(job, model, original_acc,
                                        earlier=[stats["warning"]] if "warning" in stats else [])
    path = unlearned_path(out, job)
    write_unlearned(path, result.model, rule, manifest_of(job, result.model, metrics["method"],
                                                          source_checkpoint=str(job.inputs["ckpt"]),
                                                          source_recipe_recorded=source_recipe_recorded(manifest)))
    atomic_save_json(out / "metrics.json", metrics)
    write_forget_ids(out / "forget_ids.txt", job.scenario)
    print(format_metrics_line(metrics))
    print(f"wrote {path}, {out / 'metrics.json'} and {out / 'forget_ids.txt'}")
    extra: dict[str, Any] = {}
    if job.audit is not None:
        orig_rec = metrics_record(method="original", data_name=job.data.name, model_name=job.model_name,
                                  seed=job.seed, acc=original_acc, original_acc=original_acc, scenario=job.scenario)
        _, rows = summary_table([("original", orig_rec), (f"unlearned ({metrics['method']})", metrics)], job.scenario)
        with tracker.stage("audit", training=False):
            audits, paths = audit_and_report(
                job, {"original": reference, "unlearned": result.model}, out, summary_rows=rows,
                run_times={"unlearning": metrics["time_s"]},
                title=f"duck-unlearn: {metrics['method']} on {job.data.name}",
                out_dirs={"original": out / "original", "unlearned": out}, warnings=audit_warnings)
        print(audit_lines(audits))
        print(f"wrote {out / 'audit.json'}\nreport: {paths['html']}")
        extra = {"audits": audits, "report": paths}
    return metrics, {"model": result.model, "result": result, "unlearned_path": path, **extra}


def audit(job: Job, out: Path, tracker: Tracker = UNTRACKED) -> tuple[dict[str, Any], dict[str, Any]]:
    """duck-audit: LiRA (+ SVM MIA) of one checkpoint with the cached shadow bank, the optional references
    (``original_ckpt``, ``retrained_ckpt``) audited with the same bank; ``audit.json``, the report."""
    if job.audit.attack.num_shards > 1:  # an array task building its slice of the banks
        with tracker.stage("banks", training=False):
            # the method's own banks only where the forgetting audit will run the method
            method_banks = reference_banks(job) if job.audit.attack.forgetting["enabled"] else {}
            return train_bank_slices(audit_context(job), out, method_banks)
    ckpt = job.inputs["ckpt"]
    # a checkpoint unlearned or retrained for another forget set is refused: its audit would test the
    # wrong members
    target, manifest, _ = load_model(job, ckpt, check_forget=True)
    role = resolve_role(str(job.inputs.get("role", "auto")), manifest)
    models, methods = {role: target}, {role: (manifest or {}).get("method") or "?"}
    manifests = {role: manifest}
    for ref in REFERENCE_NAMES:
        path = job.inputs.get(f"{ref}_ckpt")
        if path:
            if ref == role:
                raise DuckInputError(f"{ref}_ckpt given, but the audited checkpoint is the {ref} itself; drop one")
            if not Path(str(path)).expanduser().is_file():  # load_checkpoint's message would say "ckpt="
                raise DuckInputError(f"{ref}_ckpt={path} not found; pass {ref}_ckpt=PATH to an existing checkpoint")
            models[ref], ref_manifest, _ = load_model(job, path, check_forget=True)
            methods[ref] = (ref_manifest or {}).get("method") or ref
            manifests[ref] = ref_manifest
    warnings = check_recorded_recipes(manifests, job.recipe_cfg)
    if job.audit.attack.forgetting["enabled"]:
        job = method_from_manifest(job, role, manifest, ckpt)
    first = "original" if "original" in models else role
    check_inputs(job, models[first], f"the {first} model")
    rows, accs = accuracy_rows(job, models, methods)
    check_original(job, accs[first], f"the {first} model")
    out_dirs = {name: out if name == role else out / name for name in models}
    with tracker.stage("audit", training=False):
        audits, paths = audit_and_report(job, models, out, summary_rows=rows, run_times={},
                                         title=f"duck-audit: {Path(str(ckpt)).name} ({role})", out_dirs=out_dirs,
                                         warnings=warnings)
    write_forget_ids(out / "forget_ids.txt", job.scenario)
    lira = audits[role]["lira"]
    lo, hi = lira["auc_ci"]
    print(f"LiRA {lira['variant']} on {role}: AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}], "
          + ", ".join(f"TPR@{float(k):.1%} FPR {v:.3f}" for k, v in lira["tpr_at_fpr"].items()))
    print(verdict_lines(audits))
    print(f"wrote {out / 'audit.json'}\nreport: {paths['html']}")
    return audits[role], {"audits": audits, "paths": paths, "out": out}


def method_from_manifest(job: Job, role: str, manifest: dict[str, Any] | None, ckpt: Any) -> Job:
    """The forgetting audit of ``duck-audit`` reruns the method that made the audited checkpoint: its name,
    hyperparameters and seed come from the checkpoint's manifest (``duck-unlearn`` and ``duck-run`` record
    them); a checkpoint without them is refused with the command that can audit it. Returns the job with them."""
    config = (manifest or {}).get("config") or {}
    if role != "unlearned" or not isinstance(config.get("method"), dict):
        raise DuckInputError(f"attack.forgetting.enabled=true: ckpt={ckpt} is "
                             + ("the " + role if role != "unlearned" else "an unlearned checkpoint that records "
                                "no method (not written by duck-unlearn / duck-run)")
                             + "; the forgetting audit reruns the method that unlearned it: audit a checkpoint "
                             "written by duck-unlearn, or run duck-unlearn ... audit=true attack.forgetting."
                             "enabled=true")
    method, method_cfg = method_settings(config)
    get_unlearner_class(method).check_trainer_cfg(job.trainer_cfg)
    seed = job.seed if manifest.get("seed") is None else int(manifest["seed"])  # run 0: the checkpoint's own seed
    return job.replace(method=method, hparams=resolve_method_cfg(method_cfg, job.data.name, job.scenario.kind, method),
                       seed=seed)


def write_summary(out: Path, header: str, table: str, scenario: dict[str, Any], records: list[dict[str, Any]],
                  forgetting: dict[str, Any] | None = None) -> None:
    """duck-run's ``summary.md`` and ``summary.json``: the accuracy/AUS table and, once the forgetting audit has
    run, its verdict (top-level ``verdict`` / ``verdict_rule``), since an AUS near 1 alone can read as a pass."""
    data: dict[str, Any] = {"scenario": scenario, "rows": records}
    verdict = ""
    if forgetting is not None:
        data.update(verdict=forgetting["verdict"], verdict_rule=forgetting["rule"],
                    imprint_kept=forgetting.get("shift"), imprint_kept_ci=forgetting.get("shift_ci"),
                    margin=forgetting.get("margin"))
        verdict = (f"**Forgetting audit (N = {forgetting['n_unlearned']}, R = {forgetting['n_retrained']}): "
                   f"{forgetting['verdict'].replace('_', ' ')}.** {forgetting['rule']}; details in report.md.\n\n")
    atomic_write_text(out / "summary.md", header + verdict + table + "\n")
    atomic_save_json(out / "summary.json", data)


def run(job: Job, out: Path, tracker: Tracker = UNTRACKED) -> tuple[dict[str, Any], dict[str, Any]]:
    """duck-run, the main job: original (trained or reused from the cache) → unlearn → retrained oracle →
    evaluate all three → ``metrics.json`` for each and a summary table (``summary.md``, ``summary.json``) →
    the audit of all three with one shadow bank and the report."""
    if job.audit is not None and job.audit.attack.num_shards > 1:  # an array task building its slice of the banks
        with tracker.stage("banks", training=False):
            return train_bank_slices(audit_context(job), out, reference_banks(job))
    scenario, name = job.scenario, job.method
    stages = 4 if job.audit is not None else 3
    print(f"[1/{stages}] original {job.model_name} on {job.data.describe()}")
    with tracker.stage("original", own_run=True):  # a run of its own where it is trained
        original, orig_metrics, reused = train_or_reuse(job, "original", out, check=lambda acc: check_original(job, acc))
    print(f"      {'reused from cache' if reused else 'trained'}: test accuracy {orig_metrics['acc']['test']:.4f}")
    original_acc = orig_metrics["acc"]
    reference = copy.deepcopy(original) if job.audit is not None else None  # unlearners modify their model in place
    print(f"[2/{stages}] unlearning with {name}: {scenario.kind}, {len(scenario.forget_idx)} forget samples")
    with tracker.stage("unlearning"):
        metrics, result = unlearn_model(job, original, original_acc)
    save_checkpoint(out / "unlearned" / "unlearned.ckpt", result.model.state_dict(),
                    manifest_of(job, result.model, name))
    atomic_save_json(out / "unlearned" / "metrics.json", metrics)
    write_forget_ids(out / "forget_ids.txt", scenario)
    print(f"      done in {metrics['time_s']:.2f} s ({metrics['epochs']} epochs)")
    print(f"[3/{stages}] retrained oracle on the retain set")
    with tracker.stage("retrained", own_run=True):
        retrained, retr_metrics, reused = train_or_reuse(job, "retrained", out, original_acc=original_acc)
    print(f"      {'reused from cache' if reused else 'trained'} ({retr_metrics['time_s']:.1f} s)")
    table, records = summary_table([("original", orig_metrics), (f"unlearned ({name})", metrics),
                                    ("retrained", retr_metrics)], scenario)
    header = (f"# duck-run: {name} on {job.data.name} / {job.model_name}, {scenario.kind}"
              + (f" of classes {scenario.forget_classes}" if scenario.forget_classes else "")
              + f", {len(scenario.forget_idx)} forget samples, seed {job.seed}\n\n")
    write_summary(out, header, table, scenario.summary(), records)
    print("\n" + header + table)
    extra: dict[str, Any] = {}
    if job.audit is not None:
        print(f"[4/{stages}] membership-inference audit of the three models ({job.audit.attack.n_shadow} shadows, "
              "trained once per setup and cached)")
        models = {"original": reference, "unlearned": result.model, "retrained": retrained}
        with tracker.stage("audit", training=False):
            audits, paths = audit_and_report(
                job, models, out, summary_rows=records,
                run_times={"original training": orig_metrics["time_s"], "unlearning": metrics["time_s"],
                           "retraining": retr_metrics["time_s"]},
                title=header.strip("# \n"), out_dirs={n: out / n for n in models})
        print(audit_lines(audits))
        print(f"report: {paths['html']}")
        extra = {"audits": audits, "report": paths}
        if "forgetting" in audits["unlearned"]:  # the verdict beside the accuracies it qualifies
            write_summary(out, header, table, scenario.summary(), records, audits["unlearned"]["forgetting"])
    print(f"results in {out}")
    return metrics, {"original": orig_metrics, "unlearned": metrics, "retrained": retr_metrics, "out": out, **extra}


def run_command(command: str, cfg: Any, out: Path) -> float | None:
    """A console script's job (``duck-train``, ``duck-unlearn``, ``duck-audit``, ``duck-run``) on its composed
    config, into ``out``, tracked by the config's ``logger`` (:func:`~duck.pipeline.tracking.tracked`): the config
    is resolved into a :class:`Job` (every setting checked before any work), the job runs; a trial of a search
    (``duck-run -m +tune=METHOD``) returns its objective (the Optuna sweeper reads it), other jobs None (nothing
    travels back to a sweep's launcher: joblib / submitit would pickle the models)."""
    before = set(os.listdir(out)) if out.is_dir() else set()
    try:
        return _run_tracked(command, cfg, out)
    except DuckInputError:  # refused: nothing of the job's but Hydra's .hydra/ and log stays in its directory
        take_back(out, before)
        raise


def take_back(out: Path, before: set[str]) -> None:
    """Remove what a refused job wrote in its run directory ``out``: the entries that were not there when it
    started (``before``: Hydra's ``.hydra/`` and log, or a user's files in a directory given with
    ``hydra.run.dir=``), so that a refusal after the unlearned model or ``metrics.json`` were written (a cache
    the audit cannot write, a full disk) leaves no result that looks finished."""
    if not out.is_dir():
        return
    for name in sorted(set(os.listdir(out)) - before):
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _run_tracked(command: str, cfg: Any, out: Path) -> float | None:
    with tracked(cfg, command, out) as tracker:
        if command == "audit" and cfg.get("margins") is not None:  # the verdict from margin arrays: no model
            from duck.pipeline.margins import audit_margins

            with tracker.stage("audit", training=False):
                audit_margins(cfg, out)
            return None
        job = Job.from_cfg(cfg, command)
        tune = None
        if command == "run" and cfg.get("tune") is not None:  # a trial of duck-run -m +tune=METHOD, before any work
            from duck.pipeline.tune import TuneSettings

            tune = TuneSettings.parse(container(cfg.tune))
        metrics, extra = JOBS[command](job, out, tracker)
        if tune is None:
            return None
        from duck.pipeline.tune import tune_objective, write_tune_result

        return write_tune_result(out, tune_objective(job, metrics, extra, tune))


#: the jobs of the command line by name
JOBS = {"train": train, "unlearn": unlearn, "audit": audit, "run": run}
