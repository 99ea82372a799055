"""Bad Teacher (Chundawat et al., "Can Bad Teaching Induce Forgetting?", AAAI 2023, §3; seeds/003 §IV-A).

Two teachers: the *competent* teacher is the frozen original, the *incompetent* (bad) teacher a randomly
initialised model of the same architecture. The student (the model being unlearned) is distilled on the
forget set plus a random ``retain_fraction`` of the retain set (the paper: 30 %), each sample towards

    p_t(x) = softmax(bad(x) / T)        if x is a forget sample,
             softmax(original(x) / T)    otherwise,

with ``loss = KL(p_t ‖ softmax(student(x) / T))`` (batch mean; the paper's ``UnlearnerLoss``, ``T = 1``) and
Adam at lr 1e-4 (the authors' code).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.schema import OneOf, Real, option, settings
from duck.unlearn.config import COUNT, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner


def mixed_teacher_probs(good_logits: torch.Tensor, bad_logits: torch.Tensor, is_forget: torch.Tensor,
                        temperature: float) -> torch.Tensor:
    """Per-sample teacher distribution: the bad teacher's on forget samples, the original's elsewhere."""
    good = F.softmax(good_logits / temperature, dim=1)  # (B, C)
    bad = F.softmax(bad_logits / temperature, dim=1)  # (B, C)
    return torch.where(is_forget.view(-1, 1), bad, good)


@settings
class BadTeacherParams(MethodSettings):
    """``method=bad_teacher``'s hyperparameters; conf/method/bad_teacher.yaml is their preset."""

    method_name: ClassVar[str] = "bad_teacher"

    optimizer: str = option("adam", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    kd_T: float = option(1.0, POSITIVE, "distillation temperature")
    retain_fraction: float = option(0.3, Real(0.0, False, 1.0), "share of the retain set the student sees")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    epochs: int | None = option(None, Preset(COUNT), "epochs")


@register_unlearner("bad_teacher")
class BadTeacher(BaselineUnlearner):
    """Distil the bad teacher on forget samples and the original on a subset of retain samples."""

    params = BadTeacherParams

    def run(self) -> dict[str, Any]:
        if self.data.model_factory is None:
            raise DuckInputError("bad_teacher needs UnlearnData.model_factory (a freshly initialised model of the "
                                 "same architecture) for its incompetent teacher")
        device = self.trainer_device()
        self.add_reference("good_teacher", self.model)
        with torch.random.fork_rng():
            torch.manual_seed(self.seed)  # the incompetent teacher's random initialisation
            self.add_reference("bad_teacher", self.data.model_factory())
        self.temperature = float(self.hp["kd_T"])
        fraction = float(self.hp["retain_fraction"])  # in [0, 1] (duck.unlearn.config)
        retain = self.data.retain_idx
        rng = np.random.default_rng(self.seed)
        retain_subset = rng.choice(retain, size=round(fraction * len(retain)), replace=False)
        indices = np.concatenate([self.data.forget_idx, retain_subset])
        self.is_forget = torch.zeros(len(self.data.train), dtype=torch.bool, device=device)
        self.is_forget[torch.as_tensor(self.data.forget_idx, device=device)] = True
        loader = make_loader(self.data.train, int(self.hp["batch_size"]), shuffle=True, seed=self.seed, indices=indices)
        epochs = self.epochs()
        self.fit_phase("bad_teacher", loader, epochs)
        return {"epochs": float(epochs), "reached_target": None, "n_retain_used": len(retain_subset)}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, idx = batch
        x = self.augment(x)
        with torch.no_grad():
            target = mixed_teacher_probs(self.references["good_teacher"](x), self.references["bad_teacher"](x),
                                         self.is_forget[idx.to(self.is_forget.device)], self.temperature)
        log_p = F.log_softmax(self.model(x) / self.temperature, dim=1)
        loss = F.kl_div(log_p, target, reduction="batchmean")
        self.log_loss(loss, len(y))
        return loss
