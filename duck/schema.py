"""Typed settings: each option declared once, beside its type, default, constraint and meaning, and checked once,
at the boundary (issue 37 item 1; scikit-learn's ``_parameter_constraints`` habit).

A group of options (``attack.forgetting``, ``attack.ci``, ``data.subset``, a job's top-level settings) is a frozen
dataclass deriving from :class:`Settings`, whose fields are made with :func:`option`::

    @settings
    class CISettings(Settings):
        method: str = option("bootstrap", OneOf(("bootstrap", "delong")), "how the AUC's interval is made")
        level: float = option(0.95, Real(0.5, False, 1.0, hi_open=True), "its confidence level")

:meth:`Settings.parse` turns a config node, a dict of keywords or ``None`` (every default) into one instance:
unknown keys refused by name, every value passed through its field's rule (a :class:`Rule` turns the value into
the field's type or raises one :class:`~duck.errors.DuckInputError` naming the full key, the value and what is
allowed). After that the instance is trusted: the stages read its attributes (or, as a read-only mapping, its
keys) and never check them again. The command line, :func:`duck.unlearn` / :func:`duck.audit` keywords and
``duck-bench`` all go through the same ``parse``, so a value means and is refused the same everywhere.
:meth:`Settings.describe` lists the declarations (docs/configuration.md prints them with
:func:`duck.report.tables.markdown_table`, and a test keeps the two equal). :data:`PARSES` counts the parses
per class, so that a test can tell when a group is validated twice in one job.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from duck.errors import DuckInputError
from duck.utils import SEED_MAX, check_bool, check_number, check_positive_int

#: how many times each settings class was parsed in this process (by class name); tests reset and read it
PARSES: Counter[str] = Counter()


class Rule(Protocol):
    """A constraint on one option: ``rule(value, key)`` returns the value in the field's type or raises a
    DuckInputError naming ``key``; ``rule.describe()`` says what is allowed, in the words of the docs."""

    def __call__(self, value: Any, key: str) -> Any: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class Integer:
    """An integer (Python or numpy, not a bool) ``>= minimum`` and, where given, ``<= maximum`` (``why`` says
    why, in the message)."""

    minimum: int = 1
    maximum: int | None = None
    why: str = ""

    def __call__(self, value: Any, key: str) -> int:
        checked = check_positive_int(value, key, self.minimum)
        if self.maximum is not None and checked > self.maximum:
            raise DuckInputError(f"{key}={value!r} must be at most {self.maximum}{self.why}")
        return checked

    def describe(self) -> str:
        if self.maximum is None:
            return f"an integer >= {self.minimum}"
        return f"an integer in [{self.minimum}, {self.maximum}]"


@dataclass(frozen=True)
class Real:
    """A finite real number (not a bool) between ``lo`` and ``hi``, each end open or closed."""

    lo: float
    lo_open: bool
    hi: float = math.inf
    hi_open: bool = False

    def __call__(self, value: Any, key: str) -> float:
        return check_number(value, key, self.lo, self.lo_open, self.hi, self.hi_open)

    def describe(self) -> str:
        if self.hi == math.inf:
            return f"a number {'>' if self.lo_open else '>='} {self.lo:g}"
        return f"a number in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"


@dataclass(frozen=True)
class Flag:
    """``true`` or ``false`` (a string such as ``no`` is refused, not read as truthy)."""

    def __call__(self, value: Any, key: str) -> bool:
        return check_bool(value, key)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class OneOf:
    """One of a fixed set of values."""

    choices: tuple[Any, ...]

    def __call__(self, value: Any, key: str) -> Any:
        if isinstance(value, bool) or value not in self.choices:
            raise DuckInputError(f"{key}={value!r}; choose one of {list(self.choices)}")
        return value

    def describe(self) -> str:
        return f"one of {list(self.choices)}"


@dataclass(frozen=True)
class Either:
    """One of the literal ``values`` (``auto``, ``null``...) or what ``rule`` accepts; ``wording`` replaces the
    generated description (``values`` first, then the rule's) in messages and docs."""

    values: tuple[Any, ...]
    rule: Rule
    wording: str = ""

    def __call__(self, value: Any, key: str) -> Any:
        if value is None:
            if None in self.values:
                return None
        elif not isinstance(value, bool) and isinstance(value, (str, int, float)) and value in self.values:
            return value
        try:
            return self.rule(value, key)
        except DuckInputError:
            if isinstance(self.rule, (Check, Group, ListOf)):  # a structure's own message names the part at fault
                raise
            raise DuckInputError(f"{key}={value!r} must be {self.describe()}") from None

    def describe(self) -> str:
        if self.wording:
            return self.wording
        names = ["null" if v is None else str(v) for v in self.values]
        inner = self.rule.describe()
        return ", ".join(names) + (", " if " or " in inner else " or ") + inner


def number_list(value: Any, name: str, example: str) -> list[Any]:
    """A non-empty list of numbers; a single number is taken as a one-element list."""
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        return [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)) or not value:
        raise DuckInputError(f"{name}={value!r} must be a non-empty list of numbers, e.g. {example}")
    return list(value)



@dataclass(frozen=True)
class Numbers:
    """A non-empty list of numbers in ``(lo, hi)`` (``hi`` closed unless ``hi_open``; a single number is a list of
    one), as a tuple; ``distinct``: no value twice (levels are keyed by their text in audit.json)."""

    lo: float
    hi: float = math.inf
    hi_open: bool = False
    example: str = ""
    distinct: bool = False

    def __call__(self, value: Any, key: str) -> tuple[float, ...]:
        out = tuple(check_number(v, f"{key}[]", self.lo, True, self.hi, self.hi_open)
                    for v in number_list(value, key, self.example))
        if self.distinct and len({f"{v:g}" for v in out}) != len(out):
            raise DuckInputError(f"{key}={list(out)} lists a level twice; give each once")
        return out

    def describe(self) -> str:
        return "a list of " + Real(self.lo, True, self.hi, self.hi_open).describe()[2:].replace("number", "numbers", 1)


@dataclass(frozen=True)
class Check:
    """A domain's own checker ``fn(value, key)`` (a privacy delta, a radius, a t-SNE seed) as a rule; ``text`` is
    what it allows, for the docs."""

    fn: Callable[[Any, str], Any]
    text: str

    def __call__(self, value: Any, key: str) -> Any:
        return self.fn(value, key)

    def describe(self) -> str:
        return self.text


@dataclass(frozen=True)
class Text:
    """A non-empty string (a name, a path, a project)."""

    def __call__(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise DuckInputError(f"{key}={value!r} must be a non-empty string")
        return value

    def describe(self) -> str:
        return "a non-empty string"


@dataclass(frozen=True)
class ListOf:
    """A list whose items each pass ``item`` (named ``key[i]`` in messages), as a tuple; ``nonempty``: at least
    one item."""

    item: Rule
    nonempty: bool = True

    def __call__(self, value: Any, key: str) -> tuple[Any, ...]:
        if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
            raise DuckInputError(f"{key}={value!r} must be a list, e.g. {key}=[...]")
        if self.nonempty and not value:
            raise DuckInputError(f"{key}=[] must list at least one value")
        return tuple(self.item(v, f"{key}[{i}]") for i, v in enumerate(value))

    def describe(self) -> str:
        return f"a {'non-empty ' if self.nonempty else ''}list, each {self.item.describe()}"


@dataclass(frozen=True)
class Directory:
    """A directory path (``~`` expanded when used) that, if it exists, is a directory and not a file."""

    def __call__(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value:
            raise DuckInputError(f"{key}={value!r} must be a directory path")
        path = os.path.expanduser(value)
        if os.path.exists(path) and not os.path.isdir(path):
            raise DuckInputError(f"{key}={value!r} is an existing file, not a directory; name a directory")
        return value

    def describe(self) -> str:
        return "a directory path"


@dataclass(frozen=True)
class Device:
    """A torch device name (``auto``, ``cpu``, ``cuda``, ``cuda:N``, ...) that exists on this machine; kept as
    given (the stage resolves ``auto`` when it runs)."""

    def __call__(self, value: Any, key: str) -> Any:
        from duck.utils import check_device

        check_device(value, key)
        return value

    def describe(self) -> str:
        return "auto, cpu, cuda or cuda:N (present on this machine)"


def config_values(raw: Any) -> Any:
    """A config node's plain values (dicts and lists, interpolations resolved); anything else as it is."""
    if type(raw).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(raw, resolve=True)
    return raw


def plain(value: Any) -> Any:
    """``value`` with settings and other mappings as dicts and tuples as lists, recursively: what JSON records,
    ``protocol.json`` and the comparisons with them read."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


#: a seed of any option (torch.Generator.manual_seed takes 64-bit seeds)
SEED = Integer(0, SEED_MAX, " (seeds are integers in [0, 2^63 - 1])")


#: the default of an option that has none: ``parse`` refuses a config without it (declare these first)
REQUIRED: Any = dataclasses.MISSING


def option(default: Any, rule: Rule, doc: str) -> Any:
    """A field of a :class:`Settings` class: its default (or :data:`REQUIRED`), its rule and one line of meaning
    (docs)."""
    if default is REQUIRED:
        return dataclasses.field(metadata={"rule": rule, "doc": doc})
    return dataclasses.field(default=default, metadata={"rule": rule, "doc": doc})


S = TypeVar("S", bound="Settings")
T = TypeVar("T")


def settings(cls: type[T]) -> type[T]:
    """The decorator of a :class:`Settings` class: a frozen dataclass that compares as the mapping it is (equal to
    a dict of the same options)."""
    return dataclass(frozen=True, eq=False)(cls)


@settings
class Settings(Mapping[str, Any]):
    """A group of checked options (see the module docstring). Frozen; also a read-only mapping of its fields, so
    that ``settings["margin"]``, ``dict(settings)`` and JSON records read it as they read the dict it replaced."""

    #: the group's key prefix in the composed config (``attack.forgetting``; ``""`` for top-level options)
    prefix: ClassVar[str] = ""
    #: ``parse`` ignores keys it does not declare (top-level options share the config's root with the groups)
    open_keys: ClassVar[bool] = False

    @classmethod
    def parse(cls: type[S], raw: Any = None, prefix: str | None = None) -> S:
        """``raw`` (a mapping, a DictConfig or None) as checked settings; DuckInputError for anything else, an
        unknown key (unless :attr:`open_keys`) or a value its rule refuses. ``prefix`` overrides the class's in
        messages (a benchmark's ``bench.forgetting``)."""
        if isinstance(raw, cls):  # already checked: taken as it is (and not counted as a second parse)
            return raw
        prefix = cls.prefix if prefix is None else prefix
        if raw is None:
            raw = {}
        raw = config_values(raw)
        if not isinstance(raw, Mapping):
            raise DuckInputError(f"{prefix}={raw!r} must be a mapping of options")
        known = [f.name for f in dataclasses.fields(cls)]
        if not cls.open_keys:
            unknown = sorted(str(k) for k in raw.keys() if k not in known)
            if unknown:
                raise DuckInputError(cls.unknown_message(prefix, unknown))
        values = {}
        for f in dataclasses.fields(cls):
            key = f"{prefix}.{f.name}" if prefix else f.name
            if f.name not in raw and f.default is REQUIRED:
                raise DuckInputError(f"{key} is required ({f.metadata['rule'].describe()}); set {key}=...")
            values[f.name] = f.metadata["rule"](raw[f.name] if f.name in raw else f.default, key)
        PARSES[cls.__name__] += 1
        return cls(**values)

    @classmethod
    def unknown_message(cls, prefix: str, unknown: list[str]) -> str:
        """The message refusing keys the class does not declare (a subclass may name its config file)."""
        return f"unknown {prefix} option(s) {unknown}; known: {sorted(f.name for f in dataclasses.fields(cls))}"

    @classmethod
    def describe(cls) -> list[tuple[str, str, str, str]]:
        """``(key, default, allowed, meaning)`` per option, in declaration order."""
        def shown(v: Any) -> str:
            if v is REQUIRED:
                return "(required)"
            if isinstance(v, (list, tuple)):
                return "[" + ", ".join(shown(x) for x in v) + "]"
            return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

        return [(f"{cls.prefix}.{f.name}" if cls.prefix else f.name, shown(f.default), f.metadata["rule"].describe(),
                 f.metadata["doc"]) for f in dataclasses.fields(cls)]

    def replace(self: S, **changes: Any) -> S:
        """A copy with some options changed, each checked by its rule."""
        fields = {f.name: f for f in dataclasses.fields(self)}
        checked = {}
        for key, value in changes.items():
            if key not in fields:
                raise DuckInputError(f"unknown {self.prefix} option {key!r}; known: {sorted(fields)}")
            checked[key] = fields[key].metadata["rule"](value, f"{self.prefix}.{key}" if self.prefix else key)
        return dataclasses.replace(self, **checked)

    # the read-only mapping (Mapping's __eq__: equal to any mapping of the same items)
    def __hash__(self) -> int:
        return hash(tuple(self.items()))

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(f.name for f in dataclasses.fields(self))

    def __len__(self) -> int:
        return len(dataclasses.fields(self))


@dataclass(frozen=True)
class Group:
    """A nested group of options (``attack.ci``), parsed by its own :class:`~duck.schema.Settings` class."""

    cls: type[Settings]

    def __call__(self, value: Any, key: str) -> Settings:
        return value if isinstance(value, self.cls) else self.cls.parse(value, key)

    def describe(self) -> str:
        return f"the `{self.cls.prefix}.*` options"
