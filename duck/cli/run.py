"""``duck-run``: the main job — original (trained or reused from the cache) → unlearn → retrained oracle →
evaluate all three → ``metrics.json`` for each and a summary table (``summary.md``, ``summary.json``)."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attacks.shadow import check_cache_dir
from duck.bench.common import markdown_table
from duck.checkpoint import build_manifest, save_checkpoint
from duck.cli._app import hydra_entry
from duck.cli.audit import audit_and_report, check_audit_options
from duck.cli.setup import (
    build_data,
    build_scenario_cfg,
    check_trainer,
    container,
    device_of,
    load_model,
    output_dir,
    recipe,
)
from duck.cli.train import fit_model, save_model
from duck.cli.unlearn import method_cfg, run_unlearning
from duck.data.base import DatasetSplits
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_write_text
from duck.metrics import aus_inputs, metrics_record, split_accuracies
from duck.models import Classifier
from duck.utils import warn_line


def cache_key(cfg: DictConfig, scenario: Scenario | None, data: DatasetSplits | None = None) -> str:
    """Identifies a trained model: data config and content (``DatasetSplits.fingerprint``), model, recipe,
    seed, precision and every other ``trainer.*`` setting that changes training (gradient clipping,
    accumulation, ...: ``duck.training.training_trainer_settings``), and the forget ids for an oracle."""
    from duck import __version__
    from duck.training import training_trainer_settings

    training = training_trainer_settings(container(cfg.trainer), precision=False)
    spec = {"data": container(cfg.data), "model": container(cfg.model), "recipe": container(cfg.recipe),
            "seed": int(cfg.seed), "precision": str(cfg.trainer.get("precision")), "version": __version__,
            "forget": scenario.forget_hash if scenario is not None else None,
            **({"trainer": training} if training else {}),  # absent by default: existing cache keys unchanged
            **({"content": data.fingerprint()} if data is not None else {})}
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link (else copy) ``src`` to ``dst`` through a temporary name, replacing ``dst`` atomically."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.tmp")
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def train_or_reuse(cfg: DictConfig, data: DatasetSplits, scenario: Scenario, role: str, out: Path,
                   original_acc: dict[str, float] | None = None) -> tuple[Classifier, dict[str, Any], bool]:
    """The original (``role="original"``) or the oracle (``"retrained"``), from the cache when it holds one
    for the same config; the checkpoint and metrics.json also go to ``out/role``."""
    retrain = role == "retrained"
    cached = check_cache_dir(cfg.cache_dir) / "models" / cache_key(cfg, scenario if retrain else None, data)
    ckpt, mfile = cached / "model.ckpt", cached / "metrics.json"
    if cfg.reuse_cached and ckpt.is_file() and mfile.is_file():
        try:
            model, _ = load_model(ckpt, cfg, data)
            metrics = json.loads(mfile.read_text())
            check_cached_metrics(metrics)
            model.to(device_of(cfg))
            reused = True
        except (DuckInputError, ValueError, UnicodeDecodeError, OSError) as e:
            warn_line(f"ignoring unusable cached model {ckpt} ({e}); training again")
            reused = False
    else:
        reused = False
    if not reused:
        # the original's metrics are computed against the scenario so that its A_f / AUS can be reported
        model, metrics = fit_model(cfg, data, scenario, retrain, original_acc=original_acc)
        save_model(cached, "model.ckpt", model, metrics, cfg, data, scenario)
    else:  # the cached metrics.json holds the scenario the model was first trained for: evaluate on this one
        acc = split_accuracies(model, data, scenario, device=device_of(cfg), batch_size=cfg.eval_batch_size)
        metrics = metrics_record(**{**_record_args(metrics), "acc": acc, "scenario": scenario,
                                    "original_acc": original_acc if retrain else acc})
    if retrain and original_acc is not None:  # AUS of the oracle against this run's original
        metrics = metrics_record(**{**_record_args(metrics), "original_acc": original_acc, "scenario": scenario})
    _link_or_copy(ckpt, out / role / "model.ckpt")
    atomic_save_json(out / role / "metrics.json", {**metrics, "reused_from_cache": reused})
    return model, metrics, reused


def check_cached_metrics(metrics: Any) -> None:
    """Raise ``ValueError`` unless a cached ``metrics.json`` holds what a run reads from it (a dict with the
    :func:`_record_args` fields and an ``acc`` dict with a numeric ``test`` accuracy)."""
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics.json holds a {type(metrics).__name__}, not an object")
    missing = [k for k in ("method", "dataset", "model", "seed", "acc", "time_s", "epochs") if k not in metrics]
    if missing:
        raise ValueError(f"metrics.json lacks {missing}")
    acc = metrics["acc"]
    if not isinstance(acc, dict) or not isinstance(acc.get("test"), (int, float)) or isinstance(acc["test"], bool):
        raise ValueError(f"metrics.json has no usable accuracies: acc={acc!r}")
    if metrics["time_s"] is not None and not isinstance(metrics["time_s"], (int, float)):
        raise ValueError(f"metrics.json time_s={metrics['time_s']!r} is not a number")


def _record_args(m: dict[str, Any]) -> dict[str, Any]:
    return {"method": m["method"], "data_name": m["dataset"], "model_name": m["model"], "seed": m["seed"],
            "acc": m["acc"], "time_s": m["time_s"], "epochs": m["epochs"]}


def summary_table(rows: list[tuple[str, dict[str, Any]]], scenario: Scenario) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table of A_t, A_f, AUS, time for the original, the unlearned and the retrained model."""
    cr = scenario.is_class_removal
    out, records = [], []
    for label, m in rows:
        a_or, a_t, a_f = aus_inputs(m["acc"], m.get("original_acc") or m["acc"], scenario)
        rec = {"model": label, "method": m["method"], "A_t": a_t, "A_f": a_f, "AUS": m.get("aus"),
               "train_forget": m["acc"].get("train_forget"), "time_s": m["time_s"], "epochs": m["epochs"]}
        records.append(rec)
        out.append([label, f"{a_t:.4f}", f"{a_f:.4f}", "" if m.get("aus") is None else f"{m['aus']:.4f}",
                    f"{m['acc'].get('train_forget', float('nan')):.4f}",
                    "" if m["time_s"] is None else f"{m['time_s']:.2f}", "" if m["epochs"] is None else m["epochs"]])
    a_t_name = "A_t (test, retained classes)" if cr else "A_t (test)"
    a_f_name = "A_f (test, forgotten classes)" if cr else "A_f (forget set)"
    return markdown_table(["model", a_t_name, a_f_name, "AUS", "train-forget acc", "time (s)", "epochs"], out), records


def run(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    data = build_data(cfg)
    scenario = build_scenario_cfg(cfg, data)
    if scenario is None:
        raise DuckInputError("duck-run needs a scenario: scenario=class_removal|homogeneous_removal|custom|targeted")
    name, _ = method_cfg(cfg, data, scenario)
    recipe(cfg)  # the original's and the oracle's training recipe, checked before the first stage
    check_trainer(cfg)
    check_cache_dir(cfg.cache_dir)
    if cfg.audit:  # a bad attack / report option fails before any training
        check_audit_options(cfg, data, scenario)
    out = output_dir()
    stages = 4 if cfg.audit else 3
    print(f"[1/{stages}] original {cfg.model.name} on {data.describe()}")
    original, orig_metrics, reused = train_or_reuse(cfg, data, scenario, "original", out)
    print(f"      {'reused from cache' if reused else 'trained'}: test accuracy {orig_metrics['acc']['test']:.4f}")
    original_acc = orig_metrics["acc"]
    reference = copy.deepcopy(original) if cfg.audit else None  # unlearners modify their model in place
    print(f"[2/{stages}] unlearning with {name}: {scenario.kind}, {len(scenario.forget_idx)} forget samples")
    metrics, result = run_unlearning(cfg, original, data, scenario, original_acc)
    manifest = build_manifest(result.model.spec(), data.name, method=name, scenario=scenario.summary(),
                              config=container(cfg), seed=cfg.seed)
    save_checkpoint(out / "unlearned" / "unlearned.ckpt", result.model.state_dict(), manifest)
    atomic_save_json(out / "unlearned" / "metrics.json", metrics)
    print(f"      done in {metrics['time_s']:.2f} s ({metrics['epochs']} epochs)")
    print(f"[3/{stages}] retrained oracle on the retain set")
    retrained, retr_metrics, reused = train_or_reuse(cfg, data, scenario, "retrained", out, original_acc=original_acc)
    print(f"      {'reused from cache' if reused else 'trained'} ({retr_metrics['time_s']:.1f} s)")
    table, records = summary_table([("original", orig_metrics), (f"unlearned ({name})", metrics),
                                    ("retrained", retr_metrics)], scenario)
    header = (f"# duck-run: {name} on {data.name} / {cfg.model.name}, {scenario.kind}"
              + (f" of classes {scenario.forget_classes}" if scenario.forget_classes else "")
              + f", {len(scenario.forget_idx)} forget samples, seed {cfg.seed}\n\n")
    atomic_write_text(out / "summary.md", header + table + "\n")
    atomic_save_json(out / "summary.json", {"scenario": scenario.summary(), "rows": records})
    print("\n" + header + table)
    extra: dict[str, Any] = {}
    if cfg.audit:
        print(f"[4/{stages}] membership-inference audit of the three models ({cfg.attack.n_shadow} shadows, "
              "trained once per setup and cached)")
        models = {"original": reference, "unlearned": result.model, "retrained": retrained}
        audits, paths = audit_and_report(
            cfg, data, scenario, models, out, summary_rows=records,
            run_times={"original training": orig_metrics["time_s"], "unlearning": metrics["time_s"],
                       "retraining": retr_metrics["time_s"]},
            title=header.strip("# \n"), out_dirs={n: out / n for n in models})
        print(audit_lines(audits))
        print(f"report: {paths['html']}")
        extra = {"audits": audits, "report": paths}
    print(f"results in {out}")
    return metrics, {"original": orig_metrics, "unlearned": metrics, "retrained": retr_metrics, "out": out, **extra}


def audit_lines(audits: dict[str, Any]) -> str:
    """One line per audited model: LiRA AUC with its confidence interval and TPR at 1 % FPR."""
    lines = []
    for name, a in audits.items():
        lira = a["lira"]
        lo, hi = lira["auc_ci"]
        lines.append(f"  LiRA {name:>10}: AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}], "
                     f"TPR@1% FPR {lira['tpr_at_fpr'].get('0.01', float('nan')):.3f}")
    return "\n".join(lines)


main = hydra_entry("run", run)

if __name__ == "__main__":
    main()
