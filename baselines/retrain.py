"""Retrain (the oracle of seeds/003 §IV-A): a freshly initialised model of the same architecture trained on
the retain set only with the original's recipe (``duck.training.train_classifier``). Exact unlearning, the
reference every approximate method is compared with; its cost is the cost of training."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from baselines.common import BaselineUnlearner
from duck.errors import DuckInputError
from duck.schema import settings
from duck.training import train_classifier
from duck.unlearn.config import MethodSettings
from duck.unlearn.registry import register_unlearner


@settings
class RetrainParams(MethodSettings):
    """``method=retrain``'s hyperparameters; conf/method/retrain.yaml is their preset."""

    method_name: ClassVar[str] = "retrain"


@register_unlearner("retrain")
class Retrain(BaselineUnlearner):
    """Train from scratch on the retain set with ``UnlearnData.recipe``."""

    params = RetrainParams

    def run(self) -> dict[str, Any]:
        if self.data.recipe is None or self.data.model_factory is None:
            raise DuckInputError("retrain needs the original's training recipe and a model factory: in Python pass "
                                 "recipe=NAME to duck.unlearn (a packaged recipe, e.g. recipe='digits'); duck-unlearn "
                                 "and duck-run take recipe= from their config (UnlearnData.recipe / model_factory)")
        recipe = self.data.recipe
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)  # the fresh model's initialisation
            model = self.data.model_factory()
        model, _ = train_classifier(model, self.data.train, recipe, indices=self.data.retain_idx,
                                    augment=self.data.augment, seed=self.seed, trainer_cfg=self.trainer_cfg,
                                    progress=self.progress)
        self.model = model.to(self.trainer_device())
        return {"epochs": float(recipe.epochs), "reached_target": None}
