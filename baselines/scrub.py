"""SCRUB (Kurmanji et al., "Towards Unbounded Machine Unlearning", NeurIPS 2023, §3; seeds/003 §IV-A).

Teacher = the frozen original, student = the model being unlearned. Each epoch:

- *max-steps* (only in the first ``msteps`` epochs): one pass over the forget set maximising the student's
  divergence from the teacher, ``loss = −KL_T(teacher ‖ student)``;
- *min-steps*: one pass over the retain set minimising
  ``γ · CE(student(x_r), y_r) + α · KL_T(teacher ‖ student)``.

``KL_T`` is the temperature-scaled distillation divergence (``kd_T = 4``). Defaults follow the authors' code
(SGD, lr 5e-4, momentum 0.9, weight decay 5e-4, α = 0.001, γ = 0.99, lr ×0.1 at the milestones) and the
epoch/max-step counts of seeds/003 Tables VII/VIII ("3 (2)" = 3 epochs of which 2 with max-steps).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner, distill_kl
from duck.schema import Integer, OneOf, option, settings
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, MethodSettings, Milestones, Preset
from duck.unlearn.registry import register_unlearner


@settings
class SCRUBParams(MethodSettings):
    """``method=scrub``'s hyperparameters; conf/method/scrub.yaml is their preset."""

    method_name: ClassVar[str] = "scrub"

    optimizer: str = option("sgd", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    momentum: float = option(0.9, MOMENTUM, "SGD momentum")
    weight_decay: float = option(0.0005, NON_NEGATIVE, "weight decay")
    alpha: float = option(0.001, NON_NEGATIVE, "weight of the method's second loss term")
    gamma: float = option(0.99, NON_NEGATIVE, "weight of the retain cross-entropy")
    kd_T: float = option(4.0, POSITIVE, "distillation temperature")
    lr_gamma: float = option(0.1, POSITIVE, "MultiStepLR factor at each milestone")
    batch_size: int | None = option(None, Preset(COUNT), "retain (min-step) batches")
    forget_batch_size: int | None = option(None, Preset(COUNT), "forget (max-step) batches")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    msteps: int | None = option(None, Preset(Integer(0)), "epochs that start with a max-step pass")
    milestones: tuple[int, ...] | None = option(None, Preset(Milestones()),
                                                "MultiStepLR milestones (epochs); [] for a constant rate")


@register_unlearner("scrub")
class SCRUB(BaselineUnlearner):
    """Alternating max-steps (forget set) and min-steps (retain set) against the original as teacher."""

    params = SCRUBParams

    manual_optimization = True  # max- and min-steps are two losses on two loaders

    def run(self) -> dict[str, Any]:
        self.add_reference("teacher", self.model)
        self.temperature = float(self.hp["kd_T"])
        self.max_loader = self.forget_loader(int(self.hp["forget_batch_size"]))
        epochs = self.epochs()
        self.max_step_epochs = min(int(self.hp["msteps"]), epochs)
        self.n_max_steps = 0
        self.fit_phase("scrub", self.retain_loader(int(self.hp["batch_size"]), drop_last=True), epochs)
        # Lightning's global_step counts the min-steps only (the max-steps run outside training_step)
        log = self.phase_log["scrub"]
        log["min_steps"], log["max_steps"] = log["steps"], self.n_max_steps
        log["steps"] += self.n_max_steps
        return {"epochs": float(epochs), "reached_target": None, "max_step_epochs": self.max_step_epochs}

    def divergence(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(student logits, KL_T(teacher ‖ student))`` on a batch."""
        logits = self.model(x)
        with torch.no_grad():
            teacher_probs = F.softmax(self.references["teacher"](x) / self.temperature, dim=1)
        return logits, distill_kl(logits, teacher_probs, self.temperature)

    def on_train_epoch_start(self) -> None:
        if self.current_epoch >= self.max_step_epochs:
            return
        opt = self.optimizers()
        for x, _, _ in self.max_loader:  # max-steps: push the student away from the teacher on the forget set
            _, kl = self.divergence(self.augment(x.to(self.device)))
            self.manual_step(opt, -kl)
            self.n_max_steps += 1

    def training_step(self, batch: Any, batch_idx: int) -> None:  # min-steps on the retain set
        x, y, _ = batch
        logits, kl = self.divergence(self.augment(x))
        loss = float(self.hp["gamma"]) * F.cross_entropy(logits, y) + float(self.hp["alpha"]) * kl
        self.manual_step(self.optimizers(), loss)
        self.log_loss(loss, len(y))

    def on_train_epoch_end(self) -> None:
        sched = self.lr_schedulers()
        if sched is not None:
            sched.step()
