"""Unlearning methods: the :class:`Unlearner` base, the registry and DUCK.

The module is also callable: ``duck.unlearn(model, train, forget_classes=[3])`` is the one-call API
(:func:`duck.api.unlearn`), so that ``duck.unlearn`` names both the function of DESIGN.md §3 and the package
holding the registry (``duck.unlearn.create_unlearner``, ``duck.unlearn.list_unlearners``).
"""

import sys
import types
from typing import Any

from duck.unlearn import duck, none  # noqa: F401  (registration: DUCK and the "none" negative control)
from duck.unlearn.base import ForgetAccuracyStop, ModelBank, ReferenceModels, UnlearnData, Unlearner, UnlearnResult
from duck.unlearn.registry import create_unlearner, get_unlearner_class, list_unlearners, register_unlearner

__all__ = ["ForgetAccuracyStop", "ModelBank", "ReferenceModels", "UnlearnData", "UnlearnResult", "Unlearner",
           "create_unlearner", "get_unlearner_class", "list_unlearners", "register_unlearner"]


class _CallableModule(types.ModuleType):
    """``duck.unlearn(...)`` calls :func:`duck.api.unlearn`."""

    def __call__(self, *args: Any, **kwargs: Any) -> UnlearnResult:
        from duck.api import unlearn

        return unlearn(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
