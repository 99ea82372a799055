"""Unlearning methods: the :class:`Unlearner` base, the registry and DUCK."""

from duck.unlearn.base import ForgetAccuracyStop, UnlearnData, Unlearner, UnlearnResult
from duck.unlearn.registry import create_unlearner, get_unlearner_class, list_unlearners, register_unlearner

__all__ = ["ForgetAccuracyStop", "UnlearnData", "UnlearnResult", "Unlearner", "create_unlearner",
           "get_unlearner_class", "list_unlearners", "register_unlearner"]
