"""What the audit's stages read of a job: the narrow context :mod:`attacks.forgetting_audit`,
:mod:`attacks.ulira_audit` and :mod:`attacks.bank_shards` take instead of the pipeline's whole ``Job``.

The pipeline builds it once per job (:func:`duck.pipeline.stages.audit_context`); the stages never see the
command line's config, the report settings or the checkpoints' manifests. Frozen: a stage that needs a variant
(another method, another forget set) makes one with :meth:`AuditContext.replace`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from attacks.audit import AuditSettings
    from duck.data.base import DatasetSplits
    from duck.data.scenarios import Scenario
    from duck.models import Classifier
    from duck.training import Recipe
    from duck.unlearn import UnlearnData


@dataclass(frozen=True)
class AuditContext:
    """The data, forget set, architecture, training recipe, attack settings and cache of one audit, and the
    method it audits (with its parameters resolved once, and what the method sees: ``unlearn_data``)."""

    data: DatasetSplits
    scenario: Scenario
    model_factory: Callable[[], Classifier]  # a freshly initialised model of the audited architecture
    recipe: Recipe | None
    attack: AuditSettings  # attack.* (LiRA, SVM, forgetting, U-LiRA)
    cache_dir: Path
    device: torch.device
    trainer_cfg: Mapping[str, Any] = field(default_factory=dict)
    method: str | None = None
    hparams: Mapping[str, Any] | None = None  # the method's effective parameters, resolved once by the pipeline
    #: what the method sees given the original's accuracies (the training data, the scenario, reference models)
    unlearn_data: Callable[[dict[str, float]], UnlearnData] | None = None
    seed: int = 0
    eval_batch_size: int = 1024
    progress: bool = False

    def replace(self, **changes: Any) -> AuditContext:
        return dataclasses.replace(self, **changes)

    def model_phi(self, model: Classifier) -> dict[str, np.ndarray]:
        """φ (identity view, eval mode; the LiRA statistic of ALGORITHMS.md §4) and correctness of ``model`` on
        every train and test sample: ``phi_train``, ``phi_test``, ``correct_train``, ``correct_test``."""
        from attacks.lira import lira_phi
        from duck.metrics import predict_logits

        out = {}
        for split, ds in (("train", self.data.train), ("test", self.data.test)):
            logits, labels, _ = predict_logits(model, ds, batch_size=self.eval_batch_size, device=self.device)
            out[f"phi_{split}"] = lira_phi(logits, labels).numpy()
            out[f"correct_{split}"] = (logits.argmax(1) == labels).numpy()
        return out
