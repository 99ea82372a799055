"""Method hyperparameters: each method's typed settings, filled from its presets for (scenario family, data set).

Every method declares its hyperparameters once, as a :class:`MethodSettings` class beside its code (each field with
its default, rule and meaning, :mod:`duck.schema`); the method's config file ``conf/method/NAME.yaml`` is its
preset: the same keys (a test keeps the two equal), with ``presets.<family>.<dataset>`` (family ``class_removal``
or ``homogeneous_removal``, falling back to ``presets.<family>.default``) giving the values a ``null`` leaves open.
Targeted removal uses the class-removal presets (the paper's bias experiment did); custom forget ids the
homogeneous ones. :func:`resolve_method_cfg` fills and checks them once per job; the instance is frozen and read
as a mapping by the method (``self.hp["lr"]``), the forgetting audit's runs and the records.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from duck.errors import DuckInputError
from duck.schema import Integer, Real, Settings, config_values, plain, settings

#: the rules the methods' fields share
POSITIVE = Real(0.0, True)
NON_NEGATIVE = Real(0.0, False)
COUNT = Integer(1)
MOMENTUM = Real(0.0, False, 1.0, hi_open=True)
#: a negative tolerance: a target never reached (the stopping rule runs to its cap)
TOLERANCE = Real(float("-inf"), True)


@dataclass(frozen=True)
class Milestones:
    """``milestones``: a list of integer epochs >= 1 for a step schedule, or [] for a constant rate (a tuple)."""

    def __call__(self, value: Any, key: str) -> tuple[int, ...]:
        if not isinstance(value, (list, tuple)) or any(isinstance(m, bool) or not isinstance(m, int) or m < 1
                                                       for m in value):
            raise DuckInputError(f"{key}={value!r} must be a list of integer epochs >= 1 (e.g. [8, 15]), or [] for "
                                 "a constant learning rate")
        return tuple(value)

    def describe(self) -> str:
        return "a list of integer epochs >= 1, or []"


@dataclass(frozen=True)
class Preset:
    """A hyperparameter whose ``null`` is filled from the method's ``presets`` for the data set and scenario;
    a value (given or filled) must pass ``rule``. Left unset (a Python caller's partial config without presets),
    reading it is an error that names it (:meth:`MethodSettings.__getitem__`)."""

    rule: Any

    def __call__(self, value: Any, key: str) -> Any:
        return None if value is None else self.rule(value, key)

    def describe(self) -> str:
        return f"{self.rule.describe()} (null: the preset's)"


class UnsetHyperparameter(DuckInputError, KeyError):
    """Reading a preset-filled hyperparameter that was left unset: a :class:`DuckInputError` naming it, and a
    ``KeyError``, so that ``params.get(key, default)`` and ``key in params`` treat it as absent."""

    def __str__(self) -> str:
        return str(self.args[0])


def scenario_family(kind: str) -> str:
    return "class_removal" if kind in ("class_removal", "targeted") else "homogeneous_removal"


@settings
class MethodSettings(Settings):
    """The base of a method's hyperparameters (the ``method.*`` options but ``name`` and ``presets``); a
    subclass per method declares its fields. Frozen, a read-only mapping, compared as the dict of its values."""

    prefix: ClassVar[str] = "method"
    #: the registered method these settings belong to (messages name it and its config file)
    method_name: ClassVar[str] = "?"

    @classmethod
    def unknown_message(cls, prefix: str, unknown: list[str]) -> str:
        valid = ", ".join(sorted(f.name for f in dataclasses.fields(cls)))
        return (f"method {cls.method_name!r} has no hyperparameter(s) {unknown}; its hyperparameters are: "
                f"{valid or '(none)'} (conf/method/{cls.method_name}.yaml)")

    @classmethod
    def resolve(cls, cfg: Mapping[str, Any] | None, dataset: str, scenario_kind: str) -> MethodSettings:
        """``cfg`` (a method config: its values, ``presets`` and optionally its ``name``) with every ``null``
        that the presets of ``dataset`` and the scenario's family give filled in, checked; settings already
        resolved are returned as they are."""
        if isinstance(cfg, cls):
            return cfg
        cfg = dict(config_values(cfg) or {})
        name = cfg.pop("name", None)
        if name not in (cls.method_name, None):
            raise DuckInputError(f"method config {name!r} given to method {cls.method_name!r}; pass "
                                 f"{cls.method_name!r}'s config")
        presets = cfg.pop("presets", None) or {}
        family = presets.get(scenario_family(scenario_kind)) or {}
        preset = {**(family.get("default") or {}), **(family.get(dataset) or {})}
        out = {k: (preset.get(k) if v is None and k in preset else v) for k, v in cfg.items()}
        for k, v in preset.items():
            out.setdefault(k, v)
        missing = [k for k, v in out.items() if v is None and k in preset]
        if missing:
            raise DuckInputError(f"method hyperparameters {missing} have no value for data set {dataset!r}; "
                                 f"set them, e.g. method.{missing[0]}=...")
        return cls.parse(out)

    def _unset(self, key: str) -> bool:
        return getattr(self, key) is None and isinstance(self.__dataclass_fields__[key].metadata["rule"], Preset)

    def __getitem__(self, key: str) -> Any:
        value = super().__getitem__(key)
        if self._unset(key):
            raise UnsetHyperparameter(f"method {self.method_name!r} needs the hyperparameter {key!r}, which cfg does "
                                      f"not give; pass it (the presets are in conf/method/{self.method_name}.yaml)")
        return value

    def __iter__(self) -> Iterator[str]:  # the mapping holds the values that are set
        return iter(f.name for f in dataclasses.fields(self) if not self._unset(f.name))

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __hash__(self) -> int:  # the values as JSON (lists are not hashable); the fields' order is the class's
        return hash(json.dumps(plain(self)))
