"""Data set registry: ``@register_dataset(name)`` and ``build_datasets(name, **cfg)``.

The registry imports no data set: each data set module registers itself when imported, and the package
(``duck/data/__init__.py``) imports the built-in ones, so they are registered before any function here runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from duck.data.base import DatasetSplits
from duck.errors import DuckInputError

_DATASETS: dict[str, Callable[..., DatasetSplits]] = {}


def register_dataset(name: str) -> Callable[[Callable[..., DatasetSplits]], Callable[..., DatasetSplits]]:
    """Decorator: register a builder of a data set's :class:`~duck.data.base.DatasetSplits` under ``name``."""

    def deco(fn: Callable[..., DatasetSplits]) -> Callable[..., DatasetSplits]:
        if name in _DATASETS:
            raise ValueError(f"data set {name!r} registered twice")
        _DATASETS[name] = fn
        return fn

    return deco


def list_datasets() -> list[str]:
    return sorted(_DATASETS)


def dataset_options(name: str) -> list[str] | None:
    """The ``data.*`` keys data set ``name`` takes (its builder's keyword parameters, the keys of
    ``conf/data/NAME.yaml`` besides ``name``); ``None`` for a builder that takes any keyword (``**kwargs``)."""
    params = inspect.signature(_DATASETS[name]).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return [p.name for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]


def build_datasets(name: str, **kwargs: Any) -> DatasetSplits:
    """Build the train/test splits of data set ``name`` (keyword arguments come from ``conf/data/NAME.yaml``).

    A keyword the data set does not take is refused (``DuckInputError`` naming it and listing the valid
    ones), never ignored."""
    if name not in _DATASETS:
        raise DuckInputError(f"unknown data set {name!r}; choose one of: {', '.join(sorted(_DATASETS))}")
    valid = dataset_options(name)
    unknown = [k for k in kwargs if valid is not None and k not in valid]
    if unknown:
        raise DuckInputError(
            f"unknown option(s) {', '.join('data.' + str(k) for k in unknown)} for data set {name!r}; its options "
            f"are {', '.join('data.' + k for k in valid)} (check the spelling or remove the override)"
        )
    return _DATASETS[name](**kwargs)

