"""Oracle matching (Georgiev et al., *Attribute-to-Delete: Machine Unlearning via Datamodel Matching*, ICLR 2025;
ALGORITHMS.md §11): fine-tune the original so that its logits match those of models retrained without the forget
set, on the forget set plus a random subset of the retain set.

The reference (``oracle_matching.py`` of the authors' benchmark code, in the layout of RoyRin/data-unlearning-bench's
``working-draft`` branch; docs/methods.md says where it was read):
``F.mse_loss(oracle_logits, logits)`` over the full logit vector; the targets are the mean logits of K oracles in
eval mode; the fine-tuning set is the forget set (``forget_multiplier`` times) plus ``retain_multiplier × |D_f|``
retain samples drawn once; Adam (lr 5e-4), ``ExponentialLR(0.95)`` per epoch, 5 epochs, batch 512, the model in
train mode, no augmentation.

**Per-run targets** (``targets: per_run``, our default): the ε audit compares, per example, the spread of N runs
from one original with the spread of retrained models; N runs that all match one mean target agree with each
other far more than retrained models do (a digits probe: F 0.045 against the retrain control's 0.281 with the
median margin matched; issue 36). Run ``s`` matches the single oracle ``s mod num_oracles`` instead (each oracle
trained on first use: N runs train N oracles when ``num_oracles >= N``), and draws its retain subset with its own
seed. ``targets: mean`` is the paper's mean of ``num_oracles`` oracles.

The oracles are a cached retrain bank with ``oracle_seed`` (:mod:`duck.pipeline.references`), disjoint from the
forgetting audit's banks: the method is the ceiling of output matching and a diagnostic — its cost is retraining
``num_oracles`` models once per forget set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from baselines.common import BaselineUnlearner
from baselines.margin_fit import MarginFit, fit_margins, fitted_modules, margins_of
from duck.data.loaders import make_loader, stack_dataset
from duck.metrics import predict_logits
from duck.schema import SEED, OneOf, option, settings
from duck.unlearn.config import COUNT, NON_NEGATIVE, POSITIVE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner

TARGETS = ("per_run", "mean")
#: logits: the reference's fine-tuning (MSE on the full logits, a first-order optimiser); margins: a
#: Levenberg-Marquardt fit of each example's margin (baselines/margin_fit.py)
FITS = ("logits", "margins")


def finetune_indices(forget: np.ndarray, retain: np.ndarray, forget_multiplier: float, retain_multiplier: float,
                     rng: np.random.Generator) -> np.ndarray:
    """The matching set: the forget indices ``forget_multiplier`` times (whole copies, then the first fraction of
    one more, as the reference's ``duplicate_forget_indices``) and ``int(retain_multiplier · |D_f|)`` retain
    indices drawn without replacement (all of them when the retain set is smaller)."""
    whole = int(forget_multiplier)
    extra = forget[: int(len(forget) * (forget_multiplier - whole))]
    n_retain = min(int(retain_multiplier * len(forget)), len(retain))
    picked = rng.choice(retain, n_retain, replace=False) if n_retain else np.empty(0, dtype=np.int64)
    return np.concatenate([np.tile(forget, whole), extra, picked]).astype(np.int64)


class MatchingUnlearner(BaselineUnlearner):
    """Fine-tune on the matching set with ``MSE(f_θ(x), target(x))`` (full logit vectors); subclasses give the
    targets (:meth:`targets`: ``(indices, logits)``)."""

    def targets(self, indices: np.ndarray) -> torch.Tensor:
        raise NotImplementedError

    def build_scheduler(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        """The reference's ``ExponentialLR(gamma)`` stepped per epoch."""
        return torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=float(self.hp["lr_gamma"]))

    def run(self) -> dict[str, Any]:
        rng = np.random.default_rng([self.seed, 0x0A7C])
        forget = np.asarray(self.data.forget_idx, dtype=np.int64)
        retain = np.asarray(self.data.retain_idx, dtype=np.int64)
        indices = finetune_indices(forget, retain, float(self.hp["forget_multiplier"]),
                                   float(self.hp["retain_multiplier"]), rng)
        unique = np.unique(indices)
        if str(self.hp["fit"]) == "margins":
            return self.fit_margins(unique)
        table = torch.zeros(len(self.data.train), self.data.num_classes)
        table[torch.as_tensor(unique)] = self.targets(unique).float().cpu()
        self.target_table = table.to(self.trainer_device())
        epochs = self.epochs()
        loader = make_loader(self.data.train, int(self.hp["batch_size"]), shuffle=True, seed=self.seed,
                             indices=indices)
        self.fit_phase(self.method_name, loader, epochs)
        return {"epochs": float(epochs), "reached_target": None, "matching_set": int(len(indices))}

    def fit_margins(self, unique: np.ndarray) -> dict[str, Any]:
        """``fit: margins``: the margins of the matching set's examples (each once) moved to the targets' margins
        by Levenberg-Marquardt (baselines/margin_fit.py), the model in eval mode; no epochs."""
        device = next(self.model.parameters()).device
        x, y, _ = stack_dataset(self.data.train, unique)  # in unique's order
        x, y = x.to(device), y.to(device)
        target = margins_of(self.targets(unique).float().to(device), y)
        was_training = self.model.training
        self.model.eval()
        try:
            fit = MarginFit(self.model, fitted_modules(self.model, int(self.hp["lm_max_params"])), x, y)
            info = fit_margins(fit, target, int(self.hp["lm_iterations"]), float(self.hp["lm_damping"]),
                               float(self.hp["lm_tol"]))
        finally:
            self.model.train(was_training)
        return {"epochs": 0.0, "reached_target": None, "matching_set": int(len(unique)),
                "fitted_parameters": fit.n_params, **info}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _, idx = batch  # no augmentation: the targets are the references' outputs on the stored images
        loss = F.mse_loss(self.model(x), self.target_table[idx.to(self.target_table.device)])
        self.log_loss(loss, len(idx))
        return loss

    def logits_of(self, model: torch.nn.Module, indices: np.ndarray) -> torch.Tensor:
        """Eval-mode logits ``(len(indices), C)`` of ``model`` on the training samples ``indices`` (sorted)."""
        logits, _, idx = predict_logits(model, self.data.train, indices=indices, device=self.trainer_device())
        order = np.argsort(idx.numpy(), kind="stable")  # the loader's order back to sorted indices
        return logits[torch.as_tensor(order)]


@settings
class MatchingFitParams(MethodSettings):
    """The fit's hyperparameters of the matching methods (oracle, datamodel and subset matching; listed before each
    method's own); from the method's preset where null."""

    fit: str = option("logits", OneOf(FITS),
                      "logits: fine-tune with MSE on the full logits (the reference; optimizer, lr, epochs, batch_size "
                      "apply); margins: Levenberg-Marquardt on each example's margin (the lm_ options apply)")
    lm_iterations: int = option(8, COUNT, "fit=margins: Jacobians computed at most (one Levenberg-Marquardt step each)")
    lm_damping: float = option(10.0, POSITIVE, "fit=margins: the first step's damping lambda (then /3 on success, x5 on failure)")
    lm_tol: float = option(0.01, NON_NEGATIVE, "fit=margins: stop once the margins' RMS residual is below this (logits)")
    lm_max_params: int = option(100_000, COUNT, "fit=margins: the trailing Conv2d/Linear layers fitted hold at most this "
                                                "many parameters (at least the last layer)")
    optimizer: str = option("adam", OneOf(("sgd", "adam")), "sgd (with momentum) or adam")
    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    lr_gamma: float = option(0.95, POSITIVE, "ExponentialLR factor per epoch (the reference's)")
    weight_decay: float = option(0.0, NON_NEGATIVE, "weight decay")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    batch_size: int | None = option(None, Preset(COUNT), "batch size")
    retain_multiplier: float | None = option(None, Preset(POSITIVE), "retain samples per forget sample in the matching set")
    forget_multiplier: float | None = option(None, Preset(POSITIVE), "copies of the forget set in the matching set")


@settings
class OracleMatchingParams(MatchingFitParams):
    """``method=oracle_matching``'s hyperparameters; conf/method/oracle_matching.yaml is their preset."""

    method_name: ClassVar[str] = "oracle_matching"

    retain_multiplier: float = option(3.0, POSITIVE,
                                      "retain samples per forget sample in the matching set (drawn with the run's seed)")
    forget_multiplier: float = option(1.0, POSITIVE, "copies of the forget set in the matching set")
    targets: str = option("per_run", OneOf(TARGETS),
                          "per_run: run s matches oracle (s mod num_oracles) alone (the retrained models' spread, issue "
                          "36's probe); mean: the paper's mean logits of num_oracles oracles")
    num_oracles: int | None = option(None, Preset(COUNT),
                                     "the oracle bank's size (each oracle retrained on first use, once per forget set, "
                                     "cached); per_run: >= the forgetting audit's N for distinct oracles per run")
    oracle_seed: int = option(1000, SEED,
                              "the oracle bank's seed: must differ from attack.forgetting.seed and the next (the "
                              "audit's own retrained models)")


@register_unlearner("oracle_matching")
class OracleMatching(MatchingUnlearner):
    """Match retrained models' logits: one oracle per run (``per_run``) or their mean (``mean``)."""

    needs = ("oracle",)
    params = OracleMatchingParams

    @classmethod
    def reference_requests(cls, hp: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
        """The oracle bank: ``num_oracles`` models retrained on the retain set, seeds from ``oracle_seed``."""
        return {"oracle": (int(hp["oracle_seed"]), int(hp["num_oracles"]))}

    @classmethod
    def reference_models_used(cls, hp: Mapping[str, Any], seeds: Sequence[int]) -> dict[str, list[int]]:
        """The oracles the runs with these seeds match (:meth:`oracles_of`), not the whole pool."""
        return {"oracle": sorted({k for seed in seeds for k in cls.oracles_of(hp, seed)})}

    @staticmethod
    def oracles_of(hp: Mapping[str, Any], seed: int) -> list[int]:
        """The oracles run ``seed`` matches: ``seed mod num_oracles`` (per_run) or all of them (mean)."""
        mode, pool = str(hp["targets"]), int(hp["num_oracles"])
        return [int(seed) % pool] if mode == "per_run" else list(range(pool))

    def oracle_ids(self) -> list[int]:
        return self.oracles_of(self.hp, self.seed)

    def prepare(self) -> float:
        """The oracles this run matches (model ``seed mod num_oracles`` of the bank, or all of them), trained on
        first use and cached; returns what the bank's training has cost so far (once per forget set)."""
        self.oracles = self.reference("oracle")
        self.models = {k: self.oracles.load(k) for k in self.oracle_ids()}
        return self.reference("oracle").one_off_s

    def targets(self, indices: np.ndarray) -> torch.Tensor:
        return torch.stack([self.logits_of(self.models[k], indices) for k in self.oracle_ids()]).mean(dim=0)
