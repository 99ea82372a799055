"""duck-unlearn: machine unlearning on GPUs.

``duck.unlearn(model, train, forget_classes=[3])`` unlearns a forget set from any classifier (see
:func:`duck.api.unlearn`); bad input raises :class:`duck.DuckInputError`. Sub-packages are imported lazily so
that ``import duck`` stays cheap; the classical, exactly-deletable models (``duck.deletion``) and the DP
statistics (``duck.privacy``) never import the deep-learning side.
"""

from typing import Any

from duck.errors import DuckInputError

__version__ = "0.1.0"
__all__ = ["DuckInputError", "__version__", "unlearn"]


def __getattr__(name: str) -> Any:
    if name == "unlearn":  # the callable package duck.unlearn (its __call__ is duck.api.unlearn)
        import importlib

        return importlib.import_module("duck.unlearn")
    raise AttributeError(f"module 'duck' has no attribute {name!r}")
