"""Lazy package exports (PEP 562), shared by the packages whose ``__init__`` must stay cheap to import."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``: each name in ``names`` is imported from its module
    (``{name: module}``) on first access, so importing the package imports none of them."""
    exported = sorted(names)

    def __getattr__(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return exported

    return __getattr__, __dir__, exported
