"""Registry of unlearning methods (timm-style): ``@register_unlearner``, ``create_unlearner``, ``list_unlearners``.

The registry imports no method: a method registers itself when its module is imported. The package
(``duck/unlearn/__init__.py``) imports the built-in ones (DUCK and the ``none`` control); methods outside
``duck`` (the ``baselines`` package, or a user's own package) are discovered through the
``duck_unlearn.methods`` entry-point group: each entry point names a module whose import registers methods,
loaded the first time the registry is asked for a method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from duck.errors import DuckInputError
from duck.unlearn.config import MethodSettings

if TYPE_CHECKING:
    from duck.unlearn.base import Unlearner

_UNLEARNERS: dict[str, type[Unlearner]] = {}
_PLUGINS_LOADED = False
ENTRY_POINT_GROUP = "duck_unlearn.methods"


def register_unlearner(name: str) -> Callable[[type[Unlearner]], type[Unlearner]]:
    """Class decorator: register an :class:`~duck.unlearn.base.Unlearner` subclass under ``name``."""

    def deco(cls: type[Unlearner]) -> type[Unlearner]:
        if name in _UNLEARNERS and _UNLEARNERS[name] is not cls:
            raise ValueError(f"unlearning method {name!r} registered twice ({_UNLEARNERS[name]} and {cls})")
        cls.method_name = name
        _UNLEARNERS[name] = cls
        return cls

    return deco


def _load_plugins() -> None:
    """Import the modules of the ``duck_unlearn.methods`` entry points once, so that their methods register."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def list_unlearners() -> list[str]:
    """The names of the registered methods (the built-in ones and those of the entry points), sorted."""
    _load_plugins()
    return sorted(_UNLEARNERS)


def get_unlearner_class(name: str) -> type[Unlearner]:
    """The :class:`~duck.unlearn.base.Unlearner` subclass registered as ``name`` (``DuckInputError`` listing the
    names if there is none)."""
    _load_plugins()
    if name not in _UNLEARNERS:
        raise DuckInputError(f"unknown unlearning method {name!r}; choose one of: {', '.join(sorted(_UNLEARNERS))}")
    return _UNLEARNERS[name]


def create_unlearner(name: str, *args: Any, **kwargs: Any) -> Unlearner:
    """Instantiate method ``name`` (see :class:`~duck.unlearn.base.Unlearner` for the arguments)."""
    return get_unlearner_class(name)(*args, **kwargs)


def resolve_method_cfg(cfg: Mapping[str, Any], dataset: str, scenario_kind: str,
                       method: str | None = None) -> MethodSettings:
    """The effective hyperparameters of method ``method`` (default: ``cfg["name"]``) for ``dataset`` and the
    scenario: :meth:`~duck.unlearn.config.MethodSettings.resolve` of the method's settings class (its
    ``params``). Settings already resolved are returned as they are."""
    if isinstance(cfg, MethodSettings):
        return cfg
    name = method or (cfg or {}).get("name")
    if not isinstance(name, str):
        raise DuckInputError("a method config needs its method's name (cfg['name'], or method=NAME)")
    return get_unlearner_class(name).params.resolve(cfg, dataset, scenario_kind)
