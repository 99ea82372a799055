"""Data set registry: ``@register_dataset(name, SettingsClass)`` and ``build_datasets(name, **cfg)``.

The registry imports no data set: each data set module registers itself when imported, and the package
(``duck/data/__init__.py``) imports the built-in ones, so they are registered before any function here runs.
Each data set declares its ``data.*`` options as a :class:`DataSettings` class (``conf/data/NAME.yaml`` is its
preset); its builder takes the parsed, checked instance.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar

from duck.data.base import DatasetSplits
from duck.errors import DuckInputError
from duck.schema import Settings, settings


@settings
class DataSettings(Settings):
    """The base of a data set's options (``data.*`` but ``name`` and ``subset``, which the job reads)."""

    prefix: ClassVar[str] = "data"
    #: the registered data set these options belong to
    dataset: ClassVar[str] = "?"

    @classmethod
    def unknown_message(cls, prefix: str, unknown: list[str]) -> str:
        valid = [f.name for f in dataclasses.fields(cls)]
        return (f"unknown option(s) {', '.join('data.' + str(k) for k in unknown)} for data set {cls.dataset!r}; its "
                f"options are {', '.join('data.' + k for k in valid)} (check the spelling or remove the override)")


Builder = Callable[[Any], DatasetSplits]
_DATASETS: dict[str, tuple[Builder, type[DataSettings]]] = {}


def register_dataset(name: str, options: type[DataSettings]) -> Callable[[Builder], Builder]:
    """Decorator: register a builder of a data set's :class:`~duck.data.base.DatasetSplits` under ``name``; the
    builder takes an instance of ``options`` (its ``data.*`` settings, parsed and checked)."""

    def deco(fn: Builder) -> Builder:
        if name in _DATASETS:
            raise ValueError(f"data set {name!r} registered twice")
        options.dataset = name
        _DATASETS[name] = (fn, options)
        return fn

    return deco


def list_datasets() -> list[str]:
    return sorted(_DATASETS)


def dataset_settings(name: str) -> type[DataSettings]:
    """The settings class of data set ``name`` (``DuckInputError`` listing the names if there is none)."""
    if name not in _DATASETS:
        raise DuckInputError(f"unknown data set {name!r}; choose one of: {', '.join(sorted(_DATASETS))}")
    return _DATASETS[name][1]


def dataset_options(name: str) -> list[str]:
    """The ``data.*`` keys data set ``name`` takes (the keys of ``conf/data/NAME.yaml`` besides ``name`` and
    ``subset``)."""
    return [f.name for f in dataclasses.fields(dataset_settings(name))]


def build_datasets(name: str, **kwargs: Any) -> DatasetSplits:
    """Build the train/test splits of data set ``name`` from its options (``conf/data/NAME.yaml``), parsed by its
    settings class: a keyword it does not take is refused (naming it and listing the valid ones), never
    ignored, and each value is checked by its rule before anything is read."""
    options = dataset_settings(name).parse(kwargs)
    return _DATASETS[name][0](options)
