"""Registry of unlearning methods (timm-style): ``@register_unlearner``, ``create_unlearner``, ``list_unlearners``.

Methods outside ``duck`` (the ``baselines`` package, or a user's own package) are discovered through the
``duck_unlearn.methods`` entry-point group: each entry point names a module whose import registers methods.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from duck.errors import DuckInputError

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
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    import duck.unlearn.duck
    import duck.unlearn.none  # noqa: F401  (registers "none", the negative control)

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


def list_unlearners() -> list[str]:
    _load_plugins()
    return sorted(_UNLEARNERS)


def get_unlearner_class(name: str) -> type[Unlearner]:
    _load_plugins()
    if name not in _UNLEARNERS:
        raise DuckInputError(f"unknown unlearning method {name!r}; choose one of: {', '.join(sorted(_UNLEARNERS))}")
    return _UNLEARNERS[name]


def create_unlearner(name: str, *args: Any, **kwargs: Any) -> Unlearner:
    """Instantiate method ``name`` (see :class:`~duck.unlearn.base.Unlearner` for the arguments)."""
    return get_unlearner_class(name)(*args, **kwargs)
