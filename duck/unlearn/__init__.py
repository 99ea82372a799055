"""Unlearning methods: the :class:`Unlearner` base, the registry and DUCK.

The package is also callable: ``duck.unlearn(model, train, forget_classes=[3])`` is the one-call API
(:func:`duck.api.unlearn`), so that ``duck.unlearn`` names both the function of DESIGN.md §3 and the package
holding the registry (``duck.unlearn.create_unlearner``, ``duck.unlearn.list_unlearners``). The facade
``duck/__init__.py`` makes it callable when Python binds it there, so this package imports nothing above it.
"""

from duck.unlearn import duck, none  # noqa: F401  (registration: DUCK and the "none" negative control)
from duck.unlearn.base import ForgetAccuracyStop, ModelBank, ReferenceModels, UnlearnData, Unlearner, UnlearnResult
from duck.unlearn.registry import create_unlearner, get_unlearner_class, list_unlearners, register_unlearner

__all__ = ["ForgetAccuracyStop", "ModelBank", "ReferenceModels", "UnlearnData", "UnlearnResult", "Unlearner",
           "create_unlearner", "get_unlearner_class", "list_unlearners", "register_unlearner"]

