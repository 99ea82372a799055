"""Pieces every baseline shares (seeds/003 §IV-A; ALGORITHMS.md §3), on top of :class:`duck.unlearn.Unlearner`.

- the optimiser and step schedule named by the method config (``optimizer``, ``lr``, ``momentum``,
  ``weight_decay``, ``milestones``, ``lr_gamma``), stepped once per epoch as in the papers' code;
- :class:`~baselines.masking.FrozenEntries` restored after every optimiser step;
- frozen copies of models used as teachers (eval mode, no gradients, not registered as submodules so
  Lightning never switches them back to train mode or optimises them);
- the temperature-scaled distillation divergence (Hinton et al.) used by SCRUB and Bad Teacher;
- the forget-accuracy stopping rule DUCK uses (for the methods the paper runs "until the same criterion").
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from duck.errors import DuckInputError
from duck.schema import Either, Flag, Integer, OneOf, option, settings
from duck.unlearn.base import ForgetAccuracyStop, Unlearner
from duck.unlearn.config import TOLERANCE, MethodSettings

CLASS_REMOVAL_ONLY = ("class_removal",)


def frozen_copy(model: nn.Module) -> nn.Module:
    """A deep copy in eval mode with ``requires_grad=False`` (a teacher, or the original as a reference)."""
    twin = copy.deepcopy(model)
    twin.eval()
    for p in twin.parameters():
        p.requires_grad_(False)
    return twin


def distill_kl(student_logits: torch.Tensor, teacher_probs: torch.Tensor, temperature: float) -> torch.Tensor:
    """``KL(p_t ‖ softmax(z_s / T)) · T²`` averaged over the batch (Hinton et al. 2015; SCRUB's ``DistillKL``).

    ``student_logits (B, C)``; ``teacher_probs (B, C)`` already softened with the same temperature.
    """
    log_p_s = F.log_softmax(student_logits / temperature, dim=1)
    return F.kl_div(log_p_s, teacher_probs, reduction="sum") * temperature**2 / student_logits.shape[0]



@settings
class StopAtTargetParams(MethodSettings):
    """The hyperparameters of DUCK's stopping rule added to a method with its own recipe (NegGrad+, SalUn; seeds/003
    §III): stop once ``A_f <= 0 + tolerance``, checked every ``stop_check``, not before ``min_epochs``."""

    stop_at_target: bool = option(False, Flag(),
                                  "true: also stop at DUCK's forget-accuracy target (the authors' code has no rule)")
    min_epochs: int | None = option(None, Either((None,), Integer(0)),
                                    "with stop_at_target: epochs before the rule may stop (null: 0); `epochs` is then "
                                    "the cap")
    tolerance: float = option(0.01, TOLERANCE,
                              "class removal: the target is A_f <= 0 + tolerance (reported either way)")
    stop_check: str = option("epoch", OneOf(("epoch", "batch")), "check A_f after every `epoch` or every forget `batch`")

    def __post_init__(self) -> None:
        """The stopping rule's delay is refused where it cannot act."""
        if self.min_epochs is None:
            return
        if not self.stop_at_target:
            raise DuckInputError(f"method.min_epochs={self.min_epochs} only acts with method.stop_at_target=true (it "
                                 "delays the stopping rule); set that or drop min_epochs")
        epochs = getattr(self, "epochs", None)
        if epochs is not None and self.min_epochs > epochs:
            raise DuckInputError(f"method.min_epochs={self.min_epochs} is above method.epochs={epochs} (the cap of "
                                 "the stopping rule); raise epochs or lower min_epochs")


class BaselineUnlearner(Unlearner):
    """Base of the competing methods: optimiser from the config, frozen entries, stopping rule."""

    frozen_entries = None  # FrozenEntries | None, restored after every optimiser step

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # frozen models in a plain dict are not registered submodules: Lightning never trains or optimises them
        self.references: dict[str, nn.Module] = {}

    # ----------------------------------------------------------- optimiser
    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        return self.model.parameters()

    def build_optimizer(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """``optimizer: sgd | adam`` with ``lr``, ``momentum`` (SGD) and ``weight_decay`` from the config."""
        hp = self.hp
        lr = float(hp["lr"])
        wd = float(hp.get("weight_decay", 0.0))
        if hp.get("optimizer") == "adam":  # checked by the settings (sgd | adam); a method without the field: SGD
            return torch.optim.Adam(params, lr=lr, weight_decay=wd)
        return torch.optim.SGD(params, lr=lr, momentum=float(hp.get("momentum", 0.0)), weight_decay=wd)

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler | None:
        """``MultiStepLR(milestones, lr_gamma)`` stepped per epoch (the papers' ``[8, 15]``-style schedules)."""
        milestones = [int(m) for m in (self.hp.get("milestones") or [])]
        if not milestones:
            return None
        return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones,
                                                    gamma=float(self.hp.get("lr_gamma", 0.1)))

    def configure_optimizers(self) -> Any:
        opt = self.build_optimizer(self.trainable_parameters())
        sched = self.build_scheduler(opt)
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    def optimizer_step(self, *args: Any, **kwargs: Any) -> None:
        super().optimizer_step(*args, **kwargs)
        self.restore_frozen()

    def restore_frozen(self) -> None:
        if self.frozen_entries is not None:
            self.frozen_entries.restore()

    def manual_step(self, optimizer: Any, loss: torch.Tensor) -> None:
        """One manual-optimisation step (zero grad, backward, step, restore frozen entries)."""
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(loss)
        optimizer.step()
        self.restore_frozen()

    # ------------------------------------------------------------- helpers
    def add_reference(self, name: str, model: nn.Module) -> nn.Module:
        """Keep a frozen model (teacher) on the unlearning device."""
        ref = frozen_copy(model).to(self.trainer_device())
        self.references[name] = ref
        return ref

    def stopping_rule(self) -> ForgetAccuracyStop:
        """DUCK's stopping rule (seeds/003 §III): stop once ``A_f <= target``; with ``min_epochs`` (NegGrad+,
        SalUn) not before that many epochs, so the rule extends the method's own recipe up to ``epochs``."""
        return ForgetAccuracyStop(self, self.forget_target(float(self.hp["tolerance"])),
                                  every=str(self.hp["stop_check"]), after_epochs=self.min_epochs())

    def min_epochs(self) -> int:
        """``method.min_epochs`` (null: 0): epochs run before the stopping rule may stop (checked with the other
        hyperparameters, ``duck.unlearn.config.check_hyperparameters``: an integer <= ``epochs``, with
        ``stop_at_target=true``)."""
        return int(self.hp.get("min_epochs") or 0)

    def forget_classes(self) -> list[int]:
        return list(self.data.scenario.forget_classes or [])

    def retained_classes(self) -> list[int]:
        """Classes the unlearned model may still predict: all but the forgotten ones (class removal)."""
        gone = set(self.forget_classes()) if self.data.scenario.is_class_removal else set()
        return [c for c in range(self.data.num_classes) if c not in gone]

    def epochs(self, key: str = "epochs") -> int:
        """``method.<key>`` (an integer >= 1, checked by the method's settings)."""
        return int(self.hp[key])

    def log_loss(self, loss: torch.Tensor, batch_size: int) -> None:
        # every log_every_n_steps steps and each epoch's mean (the experiment logger's curves)
        self.log("loss", loss.detach(), prog_bar=True, on_step=True, on_epoch=True, batch_size=batch_size)
