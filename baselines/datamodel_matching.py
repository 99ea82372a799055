"""Datamodel matching (Georgiev et al., *Attribute-to-Delete: Machine Unlearning via Datamodel Matching*, ICLR 2025;
ALGORITHMS.md §11): oracle matching (:mod:`baselines.oracle_matching`) on *predicted* oracle outputs, with no model
retrained per deletion request.

The reference's ``DatamodelWrappedModel`` predicts the oracle's logits as ``f_orig(x) − m · Σ_{z ∈ D_f} S[z, x]``
with a per-class datamodel matrix S. Ours estimates the datamodel from the LiRA shadow bank (models trained on
random halves of the training set, ALGORITHMS.md §4), keeping its diagonal — the reference's ``diagonal_only``
option: a forget example's own effect on its logits,

    β(x) = mean_{k: x ∈ IN_k} f_k(x) − mean_{k: x ∉ IN_k} f_k(x),

so the predicted oracle output is ``f_orig(x) − m · β(x)`` on forget examples and ``f_orig(x)`` on the retain
examples of the matching set. With ``spread: shadow`` (default), run s adds, per forget example, one OUT shadow's
deviation from the OUT mean (the shadow chosen with the run's seed): N runs then spread like models that never
saw x instead of agreeing on one target (issue 36's probe). The diagonal datamodel sees only an example's own
influence: when the forget set's examples support each other (a whole class), their joint effect is missed and
the class is not forgotten — it is made for random forget sets (homogeneous removal, custom ids).

Cost: the shadow bank once (reported as ``one_off_s``, shared by every deletion request and by the LiRA audit),
then per request E shadow forward passes over the matching set and the fine-tuning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch

from baselines.oracle_matching import MatchingFitParams, MatchingUnlearner
from duck.schema import SEED, OneOf, option, settings
from duck.unlearn.config import COUNT, POSITIVE
from duck.unlearn.registry import register_unlearner

SPREADS = ("shadow", "none")


def diagonal_datamodel(logits: torch.Tensor, inside: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """``(β, mean_OUT)``: per example, the mean logits of the models that trained on it minus those that did not,
    and the latter mean. ``logits (E, n, C)``, ``inside (E, n)`` bool; an example without an IN or an OUT model
    gets β = 0."""
    m = torch.as_tensor(inside, dtype=logits.dtype)[..., None]  # (E, n, 1)
    n_in, n_out = m.sum(0), (1 - m).sum(0)
    mean_in = (logits * m).sum(0) / n_in.clamp_min(1)
    mean_out = (logits * (1 - m)).sum(0) / n_out.clamp_min(1)
    both = (n_in > 0) & (n_out > 0)
    return torch.where(both, mean_in - mean_out, torch.zeros_like(mean_in)), mean_out


def pick_out_models(inside: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One OUT model per example (column of ``inside``), uniformly among the models that did not train on it
    (-1 where every model did)."""
    out = np.full(inside.shape[1], -1, dtype=np.int64)
    for j in range(inside.shape[1]):
        ks = np.flatnonzero(~inside[:, j])
        if ks.size:
            out[j] = rng.choice(ks)
    return out


@settings
class DatamodelMatchingParams(MatchingFitParams):
    """``method=datamodel_matching``'s hyperparameters; conf/method/datamodel_matching.yaml is their preset."""

    method_name: ClassVar[str] = "datamodel_matching"

    n_shadow: int = option(16, COUNT,
                           "the shadow bank (attack.n_shadow's default: the LiRA audit's own bank, trained once)")
    shadow_seed: int = option(0, SEED, "its seed (attack.seed's default)")
    multiplier: float = option(1.0, POSITIVE, "m in f_orig - m * beta")
    spread: str = option("shadow", OneOf(SPREADS),
                         "shadow: per run, one OUT shadow's deviation added on each forget example; none: one target "
                         "for every run (the runs then agree more than retrained models do)")


@register_unlearner("datamodel_matching")
class DatamodelMatching(MatchingUnlearner):
    """Match ``f_orig − β`` (β: the shadow bank's diagonal datamodel) on the forget set, ``f_orig`` on retain."""

    needs = ("shadows",)
    params = DatamodelMatchingParams

    @classmethod
    def reference_requests(cls, hp: Mapping[str, Any]) -> dict[str, tuple[Any, ...]]:
        """The shadow bank: ``n_shadow`` models on random halves, seeds from ``shadow_seed``."""
        return {"shadows": (int(hp["n_shadow"]), int(hp["shadow_seed"]))}

    def prepare(self) -> float:
        """The shadow bank (``n_shadow`` models on random halves, ``shadow_seed``), trained once and cached."""
        self.bank = self.reference("shadows")
        return self.bank.one_off_s

    def targets(self, indices: np.ndarray) -> torch.Tensor:
        bank = self.bank
        logits = torch.stack([self.logits_of(bank.load(k), indices) for k in range(bank.keep.shape[0])])  # (E, n, C)
        inside = np.asarray(bank.keep, dtype=bool)[:, indices]
        beta, mean_out = diagonal_datamodel(logits, inside)
        is_forget = torch.as_tensor(np.isin(indices, np.asarray(self.data.forget_idx)))[:, None]
        target = self.logits_of(self.model, indices) - float(self.hp["multiplier"]) * beta * is_forget
        if str(self.hp["spread"]) == "shadow":  # one OUT shadow's deviation per forget example and run
            pick = pick_out_models(inside, np.random.default_rng([self.seed, 0xD77]))
            cols = torch.arange(len(indices))
            ok = torch.as_tensor(pick >= 0)[:, None] & is_forget
            dev = logits[torch.as_tensor(np.maximum(pick, 0)), cols] - mean_out
            target = target + torch.where(ok, dev, torch.zeros_like(dev))
        return target
