"""``none``: the original, unchanged — the negative control of the forgetting audit (ALGORITHMS.md §10: an
audit has power only when this control is distinguishable from retraining). Its unlearning takes no time and
reaches no forget target; every scenario is supported."""

from __future__ import annotations

from typing import Any, ClassVar

from duck.data.scenarios import SCENARIOS
from duck.schema import settings
from duck.unlearn.base import Unlearner
from duck.unlearn.config import MethodSettings
from duck.unlearn.registry import register_unlearner


@settings
class NoUnlearningParams(MethodSettings):
    """``method=none``'s hyperparameters; conf/method/none.yaml is their preset."""

    method_name: ClassVar[str] = "none"


@register_unlearner("none")
class NoUnlearning(Unlearner):
    """Returns the original model as it is."""

    params = NoUnlearningParams

    supported_scenarios: ClassVar[tuple[str, ...]] = SCENARIOS

    def run(self) -> dict[str, Any]:
        return {"epochs": 0.0, "reached_target": False}
