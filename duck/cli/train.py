"""``duck-train``: train the original (or, with ``retrain=true``, the oracle on the retain set)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from duck.checkpoint import build_manifest, save_checkpoint
from duck.cli._app import hydra_entry
from duck.cli.setup import (
    build_data,
    build_model,
    build_scenario_cfg,
    check_trainer,
    container,
    device_of,
    output_dir,
    recipe,
)
from duck.data.base import DatasetSplits
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json
from duck.metrics import metrics_record, split_accuracies
from duck.models import Classifier
from duck.training import train_classifier


def fit_model(cfg: DictConfig, data: DatasetSplits, scenario: Scenario | None, retrain: bool,
              original_acc: dict[str, float] | None = None) -> tuple[Classifier, dict[str, Any]]:
    """Train the original (``retrain=False``) or the oracle on the retain set, and evaluate it.

    Returns ``(model on the job's device, metrics record)``."""
    L.seed_everything(cfg.seed, workers=True, verbose=False)  # the initial weights depend on the seed too
    model = build_model(cfg, data)
    rec = recipe(cfg)
    device = device_of(cfg)
    indices = scenario.retain_idx if retrain else None
    model, seconds = train_classifier(model, data.train, rec, indices=indices, augment=data.augment, seed=cfg.seed,
                                      trainer_cfg=container(cfg.trainer), progress=cfg.progress)
    model.to(device)
    acc = split_accuracies(model, data, scenario, device=device, batch_size=cfg.eval_batch_size)
    if original_acc is None and scenario is not None and not retrain:
        original_acc = acc  # the original is its own reference
    metrics = metrics_record(method="retrain" if retrain else "original", data_name=data.name,
                             model_name=cfg.model.name, seed=cfg.seed, acc=acc, original_acc=original_acc,
                             scenario=scenario, time_s=seconds, epochs=rec.epochs)
    return model, metrics


def save_model(directory: Path, name: str, model: Classifier, metrics: dict[str, Any], cfg: DictConfig,
               data: DatasetSplits, scenario: Scenario | None) -> Path:
    """Write ``directory/name`` (checkpoint with manifest) and ``directory/metrics.json`` atomically."""
    manifest = build_manifest(model.spec(), data.name, method=metrics["method"],
                              scenario=scenario.summary() if scenario else None, config=container(cfg), seed=cfg.seed)
    path = save_checkpoint(directory / name, model.state_dict(), manifest)
    atomic_save_json(directory / "metrics.json", metrics)
    return path


def train(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    data = build_data(cfg)
    scenario = build_scenario_cfg(cfg, data)
    if cfg.retrain and scenario is None:
        raise DuckInputError("retrain=true needs a scenario (e.g. scenario=class_removal) to define the retain set")
    check_trainer(cfg)
    model, metrics = fit_model(cfg, data, scenario, bool(cfg.retrain))
    if rank_zero_only.rank != 0:  # DDP: only the first process writes
        return metrics, {"model": model, "data": data, "scenario": scenario}
    out = output_dir()
    save_model(out, "model.ckpt", model, metrics, cfg, data, scenario)
    print(f"{metrics['method']} {cfg.model.name} on {data.describe()}: "
          + ", ".join(f"{k}={v:.4f}" for k, v in metrics["acc"].items()) + f" ({metrics['time_s']:.1f} s)")
    print(f"wrote {out / 'model.ckpt'} and {out / 'metrics.json'}")
    return metrics, {"model": model, "data": data, "scenario": scenario}


main = hydra_entry("train", train)

if __name__ == "__main__":
    main()
