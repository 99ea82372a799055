"""Reports: ``report.html`` (self-contained, plots embedded), ``report.md`` and ``plots/*.png``.

``write_report`` is resolved lazily so that importing :mod:`duck` does not import matplotlib.
"""

from __future__ import annotations

from duck._lazy import lazy_exports

_LAZY = {"write_report": "duck.report.report"}

__getattr__, __dir__, __all__ = lazy_exports("duck.report", _LAZY)
