"""Build the objects a job needs from its Hydra config; every validation happens here, before any work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from duck.checkpoint import check_forget_set, check_manifest, load_checkpoint, load_into
from duck.data.augment import check_augment
from duck.data.base import DatasetSplits
from duck.data.registry import build_datasets
from duck.data.scenarios import Scenario, build_scenario
from duck.errors import DuckInputError
from duck.models import Classifier, create_model
from duck.training import Recipe, check_trainer_settings


def container(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def output_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)


def build_data(cfg: DictConfig) -> DatasetSplits:
    kw = container(cfg.data)
    data = build_datasets(kw.pop("name"), **kw)
    check_augment(data.augment)
    return data


def build_scenario_cfg(cfg: DictConfig, data: DatasetSplits) -> Scenario | None:
    sc = container(cfg.scenario)
    kind = sc.pop("kind")
    if kind in (None, "none"):
        return None
    sc.setdefault("seed", int(cfg.get("seed", 0)))
    return build_scenario(kind, data.train.labels, data.test.labels, data.num_classes, **sc)


def model_kwargs(cfg: DictConfig) -> dict[str, Any]:
    kw = container(cfg.model)
    kw.pop("name")
    return kw


def build_model(cfg: DictConfig, data: DatasetSplits) -> Classifier:
    return create_model(cfg.model.name, data.num_classes, data.in_chans, data.img_size, **model_kwargs(cfg))


def expected_spec(cfg: DictConfig, data: DatasetSplits) -> dict[str, Any]:
    """What a checkpoint's manifest must agree with: the model, the data set and its shape, and the requested
    ``data`` config (whose train/test split settings :func:`duck.checkpoint.check_manifest` compares)."""
    return {"model": cfg.model.name, "num_classes": data.num_classes, "in_chans": data.in_chans,
            "img_size": data.img_size, "dataset": data.name, "data": container(cfg.data)}


def load_model(path: str | Path, cfg: DictConfig, data: DatasetSplits,
               scenario: Scenario | None = None) -> tuple[Classifier, dict[str, Any] | None]:
    """Build the configured model and load ``path`` into it, refusing any mismatch (with ``scenario``: also a
    checkpoint unlearned or retrained for another forget set)."""
    sd, manifest = load_checkpoint(path)
    check_manifest(manifest, expected_spec(cfg, data), path)
    if scenario is not None:
        check_forget_set(manifest, scenario.summary(), path)
    model = build_model(cfg, data)
    load_into(model, sd, path)
    return model, manifest


def recipe(cfg: DictConfig) -> Recipe:
    return Recipe.from_cfg(container(cfg.recipe))


def device_of(cfg: DictConfig) -> torch.device:
    acc = str(cfg.trainer.get("accelerator", "auto"))
    if acc in ("gpu", "cuda") or (acc == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise DuckInputError(f"trainer.accelerator={acc} but CUDA is not available; use trainer=cpu or trainer=auto")
        return torch.device("cuda")
    return torch.device("cpu")


def check_trainer(cfg: DictConfig) -> torch.device:
    """The job's device, with every ``trainer.*`` setting checked before any work (``device_of``, then
    :func:`duck.training.check_trainer_settings`)."""
    device = device_of(cfg)
    check_trainer_settings(container(cfg.trainer))
    return device
