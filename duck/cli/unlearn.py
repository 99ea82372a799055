"""``duck-unlearn ckpt=PATH method=NAME scenario=...``: load, unlearn, evaluate, write the unlearned checkpoint."""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import DictConfig, OmegaConf

from duck.checkpoint import build_manifest, save_checkpoint
from duck.cli._app import conf_dir, hydra_entry
from duck.cli.setup import (
    build_data,
    build_model,
    build_scenario_cfg,
    check_trainer,
    container,
    device_of,
    load_model,
    output_dir,
    recipe,
)
from duck.data.base import DatasetSplits
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json
from duck.metrics import metrics_record, split_accuracies
from duck.models import Classifier
from duck.unlearn import UnlearnData, create_unlearner, get_unlearner_class
from duck.unlearn.config import check_known_keys, resolve_method_cfg


def method_cfg(cfg: DictConfig, data: DatasetSplits | None = None,
               scenario: Scenario | None = None) -> tuple[str, dict[str, Any]]:
    """``(method name, its config)``; unknown names, and with the data and scenario also hyperparameters out
    of range (``duck.unlearn.config``), fail here, before any work."""
    m = container(cfg.method)
    name = m.pop("name")
    get_unlearner_class(name).check_trainer_cfg(container(cfg.trainer) if cfg.get("trainer") is not None else None)
    defaults = conf_dir() / "method" / f"{name}.yaml"
    if defaults.is_file():  # keys added with +method.KEY=... must be the method's own
        check_known_keys(m, OmegaConf.to_container(OmegaConf.load(defaults)), name)
    if data is not None and scenario is not None:
        resolve_method_cfg(m, data.name, scenario.kind)
    return name, m


def run_unlearning(cfg: DictConfig, model: Classifier, data: DatasetSplits, scenario: Scenario,
                   original_acc: dict[str, float]) -> tuple[dict[str, Any], Any]:
    """Unlearn ``model`` with ``cfg.method`` and evaluate it; returns ``(metrics record, UnlearnResult)``."""
    name, hp = method_cfg(cfg)
    device = device_of(cfg)
    udata = UnlearnData(train=data.train, scenario=scenario, num_classes=data.num_classes, dataset_name=data.name,
                        original_acc=original_acc, augment=data.augment, recipe=recipe(cfg),
                        model_factory=lambda: build_model(cfg, data))
    unlearner = create_unlearner(name, model, udata, hp, seed=cfg.seed, trainer_cfg=container(cfg.trainer),
                                 progress=cfg.progress)
    result = unlearner.unlearn()
    result.model.to(device)
    acc = split_accuracies(result.model, data, scenario, device=device, batch_size=cfg.eval_batch_size)
    metrics = metrics_record(method=name, data_name=data.name, model_name=cfg.model.name, seed=cfg.seed, acc=acc,
                             original_acc=original_acc, scenario=scenario, time_s=result.time_s,
                             epochs=round(result.epochs, 4), reached_target=result.reached_target,
                             forget_target=unlearner.forget_target(float(unlearner.hp.get("tolerance", 0.01))))
    return metrics, result


def unlearn(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    data = build_data(cfg)
    scenario = build_scenario_cfg(cfg, data)
    if scenario is None:
        raise DuckInputError("duck-unlearn needs a scenario: scenario=class_removal|homogeneous_removal|custom|targeted")
    method_cfg(cfg, data, scenario)
    check_trainer(cfg)
    if cfg.audit:
        from duck.cli.audit import check_audit_options

        check_audit_options(cfg, data, scenario)  # a bad attack or report option fails before any work
    model, _ = load_model(cfg.ckpt, cfg, data)
    device = device_of(cfg)
    model.to(device)
    original_acc = split_accuracies(model, data, scenario, device=device, batch_size=cfg.eval_batch_size)
    reference = copy.deepcopy(model) if cfg.audit else None  # the unlearner modifies its model in place
    metrics, result = run_unlearning(cfg, model, data, scenario, original_acc)
    out = output_dir()
    manifest = build_manifest(result.model.spec(), data.name, method=metrics["method"], scenario=scenario.summary(),
                              config=container(cfg), seed=cfg.seed, source_checkpoint=str(cfg.ckpt))
    save_checkpoint(out / "unlearned.ckpt", result.model.state_dict(), manifest)
    atomic_save_json(out / "metrics.json", metrics)
    print(format_metrics_line(metrics))
    print(f"wrote {out / 'unlearned.ckpt'} and {out / 'metrics.json'}")
    extra: dict[str, Any] = {}
    if cfg.audit:
        from duck.cli.audit import audit_and_report
        from duck.cli.run import audit_lines, summary_table

        orig_rec = metrics_record(method="original", data_name=data.name, model_name=cfg.model.name, seed=cfg.seed,
                                  acc=original_acc, original_acc=original_acc, scenario=scenario)
        _, rows = summary_table([("original", orig_rec), (f"unlearned ({metrics['method']})", metrics)], scenario)
        audits, paths = audit_and_report(
            cfg, data, scenario, {"original": reference, "unlearned": result.model}, out, summary_rows=rows,
            run_times={"unlearning": metrics["time_s"]}, title=f"duck-unlearn: {metrics['method']} on {data.name}",
            out_dirs={"original": out / "original", "unlearned": out})
        print(audit_lines(audits))
        print(f"wrote {out / 'audit.json'}\nreport: {paths['html']}")
        extra = {"audits": audits, "report": paths}
    return metrics, {"model": result.model, "data": data, "scenario": scenario, "result": result, **extra}


def format_metrics_line(m: dict[str, Any]) -> str:
    accs = ", ".join(f"{k}={v:.4f}" for k, v in m["acc"].items())
    return f"{m['method']} ({m['scenario']}): {accs}, AUS={m.get('aus', float('nan')):.4f}, {m['time_s']:.2f} s"


main = hydra_entry("unlearn", unlearn)

if __name__ == "__main__":
    main()
