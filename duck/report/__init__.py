"""Reports: ``report.html`` (self-contained, plots embedded), ``report.md`` and ``plots/*.png``.

``write_report`` is resolved lazily so that importing :mod:`duck` does not import matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {"write_report": "duck.report.report"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'duck.report' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
