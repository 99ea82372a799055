"""duck-unlearn: machine unlearning on GPUs.

``duck.unlearn(model, train, forget_classes=[3])`` unlearns a forget set from any classifier (see
:func:`duck.api.unlearn`), ``duck.audit(model, train, test, forget_classes=[3], recipe="digits")`` audits one
(:func:`duck.api.audit`), ``duck.forgetting_verdict(unlearned, retrained, retrain_control, none_control)`` decides
from margin arrays computed anywhere (:func:`attacks.equivalence.forgetting_verdict`); bad input raises
:class:`duck.DuckInputError`. Sub-packages are imported lazily so
that ``import duck`` stays cheap; the classical, exactly-deletable models (``duck.deletion``) and the DP
statistics (``duck.privacy``) never import the deep-learning side.

This module is the public facade and sits above the whole library: nothing in the library imports it (an
import-linter contract; ``__version__`` lives in :mod:`duck._version`), so the names it resolves on demand,
by module name, close no import circle.
"""

import importlib
import sys
import types
from typing import Any

from duck._version import __version__
from duck.errors import DuckInputError

__all__ = ["DuckInputError", "__version__", "audit", "forgetting_verdict", "unlearn"]


class _UnlearnPackage(types.ModuleType):
    """The class the package :mod:`duck.unlearn` gets here: calling it is :func:`duck.api.unlearn`, so that
    ``duck.unlearn`` names both the function of DESIGN.md §3 and the package holding the registry
    (``duck.unlearn.create_unlearner``, ``duck.unlearn.list_unlearners``), while the package itself imports
    nothing above it."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return importlib.import_module("duck.api").unlearn(*args, **kwargs)


class _Facade(types.ModuleType):
    """The class of this module. Python binds every sub-module it imports as an attribute of its parent (with
    ``setattr``, as lazy_loader relies on too): when that binds ``duck.unlearn``, however and wherever it was
    first imported, the package becomes callable."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "unlearn" and type(value) is types.ModuleType:
            value.__class__ = _UnlearnPackage
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Facade


def __getattr__(name: str) -> Any:
    if name == "unlearn":  # the callable package duck.unlearn (bound here, and made callable, by its import)
        return importlib.import_module("duck.unlearn")
    if name == "audit":  # duck.audit(model, train, test, forget_classes=[3], recipe="digits")
        return importlib.import_module("duck.api").audit
    if name == "forgetting_verdict":  # the verdict from φ arrays computed anywhere (numpy only, no torch)
        return importlib.import_module("attacks.equivalence").forgetting_verdict
    raise AttributeError(f"module 'duck' has no attribute {name!r}")
