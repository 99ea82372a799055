"""duck-unlearn: machine unlearning on GPUs.

``duck.unlearn(model, train, forget_classes=[3])`` unlearns a forget set from any classifier (see
:func:`duck.api.unlearn`), ``duck.audit(model, train, test, forget_classes=[3], recipe="digits")`` audits one
(:func:`duck.api.audit`), ``duck.forgetting_verdict(unlearned, retrained, retrain_control, none_control)`` decides
from margin arrays computed anywhere (:func:`attacks.equivalence.forgetting_verdict`); bad input raises
:class:`duck.DuckInputError`. Sub-packages are imported lazily so
that ``import duck`` stays cheap; the classical, exactly-deletable models (``duck.deletion``) and the DP
statistics (``duck.privacy``) never import the deep-learning side.
"""

from typing import Any

from duck._version import __version__
from duck.errors import DuckInputError

__all__ = ["DuckInputError", "__version__", "audit", "forgetting_verdict", "unlearn"]


def __getattr__(name: str) -> Any:
    import importlib

    if name == "unlearn":  # the callable package duck.unlearn (its __call__ is duck.api.unlearn)
        return importlib.import_module("duck.unlearn")
    if name == "audit":  # duck.audit(model, train, test, forget_classes=[3], recipe="digits")
        return importlib.import_module("duck.api").audit
    if name == "forgetting_verdict":  # the verdict from φ arrays computed anywhere (numpy only, no torch)
        return importlib.import_module("attacks.equivalence").forgetting_verdict
    raise AttributeError(f"module 'duck' has no attribute {name!r}")
