"""Reports: ``report.html`` (self-contained, plots embedded), ``report.md`` and ``plots/*.png``.

``write_report`` is resolved lazily so that importing :mod:`duck` does not import matplotlib.
"""

from __future__ import annotations

import lazy_loader

_LAZY = {"report": ["write_report"]}

__getattr__, __dir__, __all__ = lazy_loader.attach(__name__, submod_attrs=_LAZY)
