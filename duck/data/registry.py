"""Data set registry: ``@register_dataset(name)`` and ``build_datasets(name, **cfg)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from duck.data.base import DatasetSplits
from duck.errors import DuckInputError

_DATASETS: dict[str, Callable[..., DatasetSplits]] = {}


def register_dataset(name: str) -> Callable[[Callable[..., DatasetSplits]], Callable[..., DatasetSplits]]:
    def deco(fn: Callable[..., DatasetSplits]) -> Callable[..., DatasetSplits]:
        if name in _DATASETS:
            raise ValueError(f"data set {name!r} registered twice")
        _DATASETS[name] = fn
        return fn

    return deco


def list_datasets() -> list[str]:
    _import_builtin()
    return sorted(_DATASETS)


def build_datasets(name: str, **kwargs: Any) -> DatasetSplits:
    """Build the train/test splits of data set ``name`` (keyword arguments come from ``conf/data/NAME.yaml``)."""
    _import_builtin()
    if name not in _DATASETS:
        raise DuckInputError(f"unknown data set {name!r}; choose one of: {', '.join(sorted(_DATASETS))}")
    return _DATASETS[name](**kwargs)


def _import_builtin() -> None:
    from duck.data import cifar, digits, fashion_mnist, imagefolder, synthetic  # noqa: F401  (registration)
