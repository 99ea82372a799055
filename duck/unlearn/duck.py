"""DUCK: Distance-based Unlearning via Centroid Kinematics (Cotogni et al., seeds/003 §III; ALGORITHMS.md §1).

1. Centroids ``μ_c`` = raw mean embedding ``f(x)`` of the retain samples of class ``c`` under the original
   model (eval mode, no grad); forgotten classes get none. Class ids are kept beside the matrix.
2. Each forget sample ``(x, y)`` gets the target ``c*(x) = argmin_{c≠y} d_cos(f(x), μ_c)``, computed once
   and stored **by sample index** (targeted scenario: the named class for every sample).
3. Loss ``L = λ1·L_fgt + λ2·L_ret`` with ``L_fgt = mean d_cos(f(x_f), μ_{c*(x_f)})`` (Eq. 2-3) and
   ``L_ret = CE(g(f(x_r)) / T, y_r)`` (Eq. 4); Adam.
4. High-forget phase: each forget batch is paired with ``batch_ratio`` fresh retain batches (one optimiser
   step each); stop as soon as the forget accuracy ``A_f`` reaches its target, at most 10 epochs.
5. Low-forget phase: 2 epochs with ``λ1`` scaled by 0.1 (class removal) / 0.3 (homogeneous).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from duck.data.scenarios import SCENARIOS
from duck.embeddings import embed_samples
from duck.errors import DuckInputError
from duck.schema import Either, Flag, Integer, OneOf, option, settings
from duck.unlearn.base import ForgetAccuracyStop, Unlearner
from duck.unlearn.config import COUNT, MOMENTUM, NON_NEGATIVE, POSITIVE, TOLERANCE, MethodSettings, Preset
from duck.unlearn.registry import register_unlearner


def class_centroids(z: torch.Tensor, y: torch.Tensor, max_per_class: int | None = None,
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw (unnormalised) mean embedding per class present in ``y`` (§1.1).

    Returns ``(centroids (K, D), class_ids (K,))``; row ``k`` is the centroid of class ``class_ids[k]``.
    ``max_per_class`` caps the samples averaged per class (a random subset drawn with ``generator``).
    """
    class_ids = torch.unique(y)  # sorted
    rows = []
    for c in class_ids.tolist():
        members = (y == c).nonzero().flatten()
        if max_per_class is not None and len(members) > max_per_class:
            perm = torch.randperm(len(members), generator=generator, device="cpu")[:max_per_class].to(members.device)
            members = members[perm]
        rows.append(z[members].mean(0))
    return torch.stack(rows), class_ids


def cosine_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``d_cos(a_i, b_i) = 1 − a_i·b_i / (|a_i||b_i|)`` row-wise (``(B, D), (B, D) -> (B,)``)."""
    return 1.0 - F.cosine_similarity(a, b, dim=1, eps=1e-8)


def nearest_incorrect_centroid(z: torch.Tensor, y: torch.Tensor, centroids: torch.Tensor,
                               class_ids: torch.Tensor) -> torch.Tensor:
    """Row of ``argmin_{c ≠ y} d_cos(z, μ_c)`` for every sample (§1.2). ``(B, D), (B,) -> (B,)`` row indices."""
    d = 1.0 - F.normalize(z, dim=1) @ F.normalize(centroids, dim=1).T  # (B, K) cosine distances
    d = d.masked_fill(class_ids.view(1, -1) == y.view(-1, 1), math.inf)  # never the sample's own class
    if torch.isinf(d).all(1).any():
        raise DuckInputError("no centroid of a class other than the forget samples' own; retain at least one other class")
    return d.argmin(1)


@settings
class DUCKParams(MethodSettings):
    """``method=duck``'s hyperparameters; conf/method/duck.yaml is their preset."""

    method_name: ClassVar[str] = "duck"

    lambda_fgt: float | None = option(None, Preset(NON_NEGATIVE),
                                      "λ1, weight of the forget loss (cosine distance to the target centroid)")
    lambda_ret: float | None = option(None, Preset(NON_NEGATIVE),
                                      "λ2, weight of the retain loss (temperature-scaled cross-entropy)")
    batch_ratio: int | None = option(None, Preset(COUNT), "retain batches (= optimiser steps) per forget batch")
    temperature: float | None = option(None, Preset(POSITIVE), "T in CE(g(f(x)) / T, y)")
    lr: float | None = option(None, Preset(POSITIVE), "Adam learning rate")
    batch_size: int | None = option(None, Preset(COUNT), "forget and retain batch size")
    weight_decay: float = option(0.0005, NON_NEGATIVE,
                                 "Adam weight decay: ours (the paper's value was lost in extraction). The authors' code "
                                 "defaults to 0 (OcraM17/DUCK src/opts.py, --wd 0.0); 5e-5 appears only in a "
                                 "TinyImageNet command line (src/run_multiple_classes.py) and in training their "
                                 "originals")
    tolerance: float = option(0.01, TOLERANCE, "class removal: stop when A_f <= 0 + tolerance")
    max_epochs: int = option(10, COUNT, "high-forget phase: at most 10 epochs (paper)")
    stop_check: str | None = option(None, Preset(OneOf(('epoch', 'batch'))),
                                    "check A_f after every `epoch` (paper; presets' default) or every forget `batch`")
    recompute_targets: bool = option(False, Flag(),
                                     "recompute c*(x) with the current model every epoch (paper: once, at the start)")
    max_per_class: int | None = option(None, Either((None,), COUNT),
                                       "cap on retain samples averaged per centroid (null = all)")
    joint_forward: bool = option(True, Flag(),
                                 "high phase: forget + retain images in one forward pass (ours; the authors' code runs "
                                 "two passes there and one joint pass in the low phase only: src/Unlearning_methods.py)")
    label_smoothing: float | None = option(None, Preset(MOMENTUM),
                                           "retain cross-entropy label smoothing (preset: 0; the authors' code: 0.2 on "
                                           "TinyImageNet)")
    low_epochs: int = option(2, Integer(0), "low-forget phase length (paper: 2)")
    low_lambda_scale_cr: float = option(0.1, NON_NEGATIVE,
                                        "λ1 scale in the low-forget phase, class removal / targeted (paper)")
    low_lambda_scale_hr: float = option(0.3, NON_NEGATIVE,
                                        "λ1 scale in the low-forget phase, homogeneous removal / custom (paper)")
    low_pairing: str = option("ratio", OneOf(('ratio', 'first_forget')),
                              "ratio: each forget batch with low_batch_ratio retain batches; first_forget: the first "
                              "forget batch with every retain batch (authors' CR code)")
    low_batch_ratio: int | None = option(None, Either((None,), COUNT), "null = batch_ratio (authors' HR code uses 20)")
    low_lr: float | None = option(None, Either((None,), POSITIVE),
                                  "null = lr (authors' code: 1e-4 with cosine annealing)")
    low_cosine: bool = option(False, Flag(), "cosine-anneal the low-phase learning rate per step (authors' code)")
    low_joint_forward: bool | None = option(None, Either((None,), Flag()),
                                            "low phase: one joint forward pass; null = joint_forward (authors' code: "
                                            "true)")
    low_lambda_ret: float | None = option(None, Either((None,), NON_NEGATIVE),
                                          "low phase: λ2; null = lambda_ret (authors' code: 1, their λ2 is not applied "
                                          "there)")
    low_retain_batch_size: int | None = option(None, Either((None,), COUNT),
                                               "low phase: retain batch; null = batch_size (authors' code: 512)")


@register_unlearner("duck")
class DUCK(Unlearner):
    """DUCK with the two forget regimes; hyperparameters in ``conf/method/duck.yaml``."""

    params = DUCKParams

    supported_scenarios = SCENARIOS  # targeted: the named class's centroid is every forget sample's target
    manual_optimization = True  # two losses, several optimiser steps per forget batch
    data_parallel = True  # centroids and targets computed once here, sent to every DDP worker

    def run(self) -> dict[str, Any]:
        hp, sc = self.hp, self.data.scenario
        device = self.trainer_device()
        gen = torch.Generator().manual_seed(self.seed)
        # 1. centroids of the retained classes, from the original model
        z_r, y_r, _ = embed_samples(self.model, self.data.train, self.data.retain_idx, device=device)
        self.centroids, self.centroid_classes = class_centroids(z_r, y_r, hp.get("max_per_class"), gen)
        del z_r, y_r
        # 2. target centroid row per forget sample, stored by stable sample index
        self.target_row = torch.full((len(self.data.train),), -1, dtype=torch.long, device=device)
        if sc.kind == "targeted":
            hit = (self.centroid_classes == sc.target_class).nonzero().flatten()
            if len(hit) == 0:
                raise DuckInputError(f"target class {sc.target_class} has no retained samples to form a centroid")
            self.target_row[torch.as_tensor(sc.forget_idx, device=device)] = int(hit[0])
        else:
            self.assign_targets()
        if self.world > 1:  # sent to the DDP workers from the host; each moves them to its device
            self.centroids, self.centroid_classes = self.centroids.cpu(), self.centroid_classes.cpu()
            self.target_row = self.target_row.cpu()
        # 3-4. high-forget phase
        bs = int(hp["batch_size"])
        self.start_retain_stream(bs)
        self.lambda_fgt = float(hp["lambda_fgt"])
        self.lambda_ret = float(hp["lambda_ret"])
        self.joint_forward = bool(hp.get("joint_forward", True))
        self.retain_steps = int(hp["batch_ratio"])
        self.lr = float(hp["lr"])
        self.low_cosine = False
        stop = ForgetAccuracyStop(self, self.forget_target(float(hp["tolerance"])), every=hp["stop_check"])
        self.fit_phase("high", self.forget_loader(bs), int(hp["max_epochs"]), [stop])
        epochs = stop.epochs_done
        # 5. low-forget phase: λ1 scaled, fixed number of epochs
        scale = hp["low_lambda_scale_cr"] if sc.forget_target_rule == "zero" else hp["low_lambda_scale_hr"]
        self.lambda_fgt = float(hp["lambda_fgt"]) * float(scale)
        self.lr = float(hp["low_lr"] if hp.get("low_lr") is not None else hp["lr"])
        self.low_cosine = bool(hp.get("low_cosine", False))
        # per-phase settings (null: the high phase's); the authors' code: joint forward pass and retain CE of
        # weight 1 (λ2 not applied) in the low phase only, retain batches of 512 there
        low = {key: hp.get(f"low_{key}") for key in ("joint_forward", "lambda_ret", "retain_batch_size")}
        self.joint_forward = bool(self.joint_forward if low["joint_forward"] is None else low["joint_forward"])
        self.lambda_ret = float(self.lambda_ret if low["lambda_ret"] is None else low["lambda_ret"])
        retain_bs = int(low["retain_batch_size"] or bs)
        low_epochs = int(hp["low_epochs"])
        if low_epochs > 0:
            if hp["low_pairing"] == "first_forget":
                # the authors' class-removal code: one forget batch paired with every retain batch
                self.fixed_forget_batch = next(iter(self.forget_loader(bs, per_worker=False)))
                self.retain_steps = 1
                self.fit_phase("low", self.retain_loader(retain_bs, drop_last=True), low_epochs)
            else:  # ratio
                self.fixed_forget_batch = None
                self.retain_steps = int(hp.get("low_batch_ratio") or hp["batch_ratio"])
                if retain_bs != bs:  # a stream of the low phase's retain batches (else the high phase's goes on)
                    self.start_retain_stream(retain_bs)
                self.fit_phase("low", self.forget_loader(bs, seed_offset=1), low_epochs)
            epochs += low_epochs
        return {"epochs": epochs, "reached_target": stop.reached, "forget_acc_after_high": self.history[-1]["forget_acc"]
                if self.history else None}

    @torch.no_grad()
    def assign_targets(self) -> None:
        """(Re)compute ``c*`` for every forget sample with the current model (§1.2)."""
        z_f, y_f, idx_f = embed_samples(self.model, self.data.train, self.data.forget_idx, device=self.centroids.device)
        self.target_row[idx_f] = nearest_incorrect_centroid(z_f, y_f, self.centroids, self.centroid_classes)

    def on_fit_start(self) -> None:
        """Centroids and targets on the device that trains (a DDP worker's own)."""
        self.centroids = self.centroids.to(self.device)
        self.centroid_classes = self.centroid_classes.to(self.device)
        self.target_row = self.target_row.to(self.device)

    def on_train_epoch_start(self) -> None:
        if self.phase == "high" and self.hp.get("recompute_targets") and self.current_epoch > 0 \
                and self.data.scenario.kind != "targeted":
            self.assign_targets()

    def duck_loss(self, x_f: torch.Tensor, idx_f: torch.Tensor, x_r: torch.Tensor, y_r: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``λ1·L_fgt + λ2·L_ret`` (Eq. 5), with the phase's λ1, λ2 and forward pass: forget and retain images
        share one forward pass (BatchNorm in train mode sees both) where the phase's ``joint_forward`` is on;
        ``label_smoothing`` in the retain cross-entropy (the authors' TinyImageNet setting)."""
        x_f, x_r = self.augment(x_f), self.augment(x_r)
        if self.joint_forward:
            z = self.model.embed(torch.cat([x_f, x_r]))
            z_f, z_r = z[: len(x_f)], z[len(x_f):]
        else:
            z_f, z_r = self.model.embed(x_f), self.model.embed(x_r)
        mu = self.centroids[self.target_row[idx_f]]  # (B_f, D) by sample index, not batch position
        l_fgt = cosine_distance(z_f, mu).mean()
        l_ret = F.cross_entropy(self.model.head(z_r) / float(self.hp["temperature"]), y_r,
                                label_smoothing=float(self.hp.get("label_smoothing") or 0.0))
        return self.lambda_fgt * l_fgt + self.lambda_ret * l_ret, l_fgt, l_ret

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        sched = self.lr_schedulers()
        if self.phase == "low" and self.fixed_forget_batch is not None:
            x_f, _, idx_f = (t.to(self.device) for t in self.fixed_forget_batch)
            if self.world > 1:  # each DDP worker its share of the one forget batch
                x_f, idx_f = x_f[self.global_rank::self.world], idx_f[self.global_rank::self.world]
            x_r, y_r, _ = batch
            pairs = [(x_r, y_r)]
        else:
            x_f, _, idx_f = batch
            pairs = [self.next_retain_batch()[:2] for _ in range(self.retain_steps)]
        for x_r, y_r in pairs:
            loss, l_fgt, l_ret = self.duck_loss(x_f, idx_f.to(self.device), x_r, y_r)
            opt.zero_grad(set_to_none=True)
            self.manual_backward(loss)
            opt.step()
            if sched is not None:
                sched.step()
        self.log_dict({"loss": loss, "l_fgt": l_fgt, "l_ret": l_ret}, prog_bar=True, on_step=True, on_epoch=True,
                      batch_size=len(x_f))

    def configure_optimizers(self) -> Any:
        opt = torch.optim.Adam(self.model.parameters(), lr=self.lr, weight_decay=float(self.hp["weight_decay"]))
        if not self.low_cosine:
            return opt
        steps = max(1, self.trainer.estimated_stepping_batches * self.retain_steps)
        return [opt], [torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)]

