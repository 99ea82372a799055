"""U-LiRA (ALGORITHMS.md §10 (c); Hayes et al. 2024): can an attacker tell the method's unlearned models from
models retrained without the forget set, example by example?

Shadow pairs on the LiRA shadow bank (E shadows, shadow k trained on its IN examples ``IN_k``):
- ``U_k``: the job's method run on shadow ``M_k`` as if ``IN_k`` were the whole training set and ``D_f ∩ IN_k``
  its forget set (class removal: the forgotten classes' IN examples); stored per shadow in the store entry
  ``unlearned_shadows/<key>/`` (keyed by the bank, the method and its resolved hyperparameters, the forget set;
  computed under the entry's lock);
- ``R_k``: trained on ``IN_k \\ D_f`` with shadow k's seed (:class:`attacks.retrain_bank.ShadowRetrainBank`).

**Method level**: :func:`attacks.forgetting.ulira_scores` fits per-example Gaussians (per-example σ floored at a
quarter of the median σ; one pooled σ per side with ``attack.fixed_variance=true``) on all pairs but one and
scores the held-out pair's ``U_k`` (positives) and ``R_k`` (negatives) on its forgotten examples: AUC (0.5 = the
method cannot be told from retraining) with a delete-one-pair jackknife interval, balanced accuracy at score 0,
TPR at 1 % FPR, and Hayes et al.'s per-example accuracy on the held-out target models (mean, median, 90th
percentile over the forget examples). Controls: ``none`` (``U_k`` = the shadow unchanged) and ``retrain``
(``U_k`` retrained on ``IN_k \\ D_f`` with another seed); the method's AUC minus the retrain control's, with a
paired jackknife interval (both are scored against the same ``R_k``). **Target level**: the audited
checkpoint's forget examples (positives) against the retrained oracle's (negatives), scored with the Gaussians
of all pairs.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from attacks.context import AuditContext
from attacks.forgetting import (
    ULIRA_MIN_SHADOWS,
    fit_gaussians,
    jackknife_normal_interval,
    ulira_difference,
    ulira_pair_aucs,
    ulira_scores,
)
from attacks.retrain_bank import ShadowRetrainBank
from attacks.roc import roc_summary
from attacks.shadow import ShadowBank
from duck._version import __version__
from duck.data.base import DatasetSplits, ReindexedDataset
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.metrics import split_accuracies
from duck.models import Classifier
from duck.store import NPZ, ArtifactSpec, Store, has_arrays
from duck.training import training_trainer_settings
from duck.unlearn import UnlearnData, create_unlearner, get_unlearner_class

MIN_SHADOWS = ULIRA_MIN_SHADOWS


def pair_seed(seed: int, k: int) -> int:
    """The seed of the unlearning run on shadow ``k`` (independent of the shadows' own seeds)."""
    return int(np.random.SeedSequence([int(seed), 0x0171, int(k)]).generate_state(1)[0] & 0x7FFFFFFF)


def lira_bank(ctx: AuditContext) -> ShadowBank:
    """The job's LiRA shadow bank, constructed as :func:`attacks.audit.audit_models` constructs it (same key)."""
    a = ctx.attack
    return ShadowBank(ctx.cache_dir, ctx.data, ctx.model_factory, ctx.recipe, n_shadow=a.n_shadow, seed=a.seed,
                      pool=a.shadow_pool, augment=ctx.data.augment, device=ctx.device, mode=a.mode,
                      chunk_size=a.chunk_size, trainer_cfg=ctx.trainer_cfg, threads=a.threads, progress=ctx.progress)


def shadow_bank_of(ctx: AuditContext) -> ShadowBank:
    """The job's LiRA shadow bank (the cached one of the audit), checked for U-LiRA's pairs."""
    a = ctx.attack
    needs = get_unlearner_class(ctx.method).needs
    if needs:
        raise DuckInputError(f"U-LiRA reruns the method on every shadow's half of the data, but {ctx.method!r} learns "
                             f"from reference models ({', '.join(needs)}) of the whole data set; run the forgetting "
                             "audit without attack.forgetting.ulira for it")
    if a.shadow_pool != "train":
        raise DuckInputError("U-LiRA pairs each shadow with a retrain on its IN examples of the training set; use "
                             "attack.shadow_pool=train")
    if a.n_shadow < MIN_SHADOWS:
        raise DuckInputError(f"U-LiRA needs attack.n_shadow >= {MIN_SHADOWS} (each forget example must stay IN for "
                             f"two pairs when the attack and its jackknife each leave one out), got {a.n_shadow}")
    return lira_bank(ctx)


def shadow_retrain_bank(ctx: AuditContext, bank: ShadowBank) -> ShadowRetrainBank:
    """U-LiRA's retrained halves of the shadow pairs of ``bank``."""
    return ShadowRetrainBank(ctx.cache_dir, ctx.data, ctx.model_factory, ctx.recipe,
                             np.asarray(ctx.scenario.forget_idx), n_shadow=bank.n_shadow, seed=bank.seed,
                             device=ctx.device, mode=bank.mode, chunk_size=bank.chunk_size,
                             trainer_cfg=ctx.trainer_cfg, threads=bank.threads, augment=ctx.data.augment,
                             progress=ctx.progress)


def _shadow_scenario(ctx: AuditContext, labels: np.ndarray, forget_pos: np.ndarray) -> Any:
    """Shadow k's scenario on its re-indexed training set: the same kind, the forget examples it holds."""
    sc, test = ctx.scenario, ctx.data.test.labels
    k = ctx.data.num_classes
    if sc.kind == "class_removal":
        return build_scenario("class_removal", labels, test, k, forget_classes=list(sc.forget_classes))
    if sc.kind == "targeted":
        return build_scenario("targeted", labels, test, k, forget_ids=forget_pos.tolist(), target_class=sc.target_class)
    return build_scenario("custom", labels, test, k, forget_ids=forget_pos.tolist())


def unlearned_shadows(ctx: AuditContext, bank: ShadowBank, method: str, method_cfg: dict[str, Any]) -> tuple[np.ndarray, int]:
    """φ of every unlearned shadow ``U_k`` on every training sample ``(E, N_train)``, and how many were computed
    now (the rest came from the cache)."""
    from duck.unlearn.registry import resolve_method_cfg

    hparams = resolve_method_cfg(method_cfg, ctx.data.name, ctx.scenario.kind, method)  # the job's: as they are
    spec = {"bank": bank.key, "method": method, "hparams": hparams, "forget": ctx.scenario.forget_hash,
            "trainer": training_trainer_settings(ctx.trainer_cfg), "seed": ctx.seed, "version": __version__}
    entry = Store(ctx.cache_dir).open(ArtifactSpec("unlearned_shadows", 1, spec),
                                      label=f"unlearned shadows of {method}")
    forget = np.asarray(ctx.scenario.forget_idx)
    names = [f"shadow_{k:04d}.npz" for k in range(bank.n_shadow)]
    with entry.lock(waiting=f"the unlearned shadows in {entry.dir} are being computed by another job; waiting"):
        rows = [entry.read(name, NPZ, has_arrays("phi_train")) for name in names]
        missing = [k for k, row in enumerate(rows) if row is None]
        for k in missing:
            rows[k] = {"phi_train": _unlearned_shadow_phi(ctx, bank, method, hparams, k, forget)}
            entry.save(names[k], rows[k], NPZ)
    return np.stack([row["phi_train"] for row in rows]), len(missing)


def _unlearned_shadow_phi(ctx: AuditContext, bank: ShadowBank, method: str, hparams: dict[str, Any], k: int,
                          forget: np.ndarray) -> np.ndarray:
    """φ on every training sample of ``U_k``: the method run on shadow ``k`` with its IN examples as the
    training set and the forget examples among them as the forget set."""
    ids = np.flatnonzero(bank.keep[k])
    sub = ReindexedDataset(ctx.data.train, ids)
    scenario = _shadow_scenario(ctx, sub.labels, np.flatnonzero(np.isin(ids, forget)))
    sub_data = DatasetSplits(name=ctx.data.name, train=sub, test=ctx.data.test, num_classes=ctx.data.num_classes,
                             in_chans=ctx.data.in_chans, img_size=ctx.data.img_size, augment=ctx.data.augment)
    shadow = bank.load_shadow(k).to(ctx.device)
    original_acc = split_accuracies(shadow, sub_data, scenario, device=ctx.device, batch_size=ctx.eval_batch_size)
    udata = UnlearnData(train=sub, scenario=scenario, num_classes=ctx.data.num_classes, dataset_name=ctx.data.name,
                        original_acc=original_acc, augment=ctx.data.augment, recipe=ctx.recipe,
                        model_factory=ctx.model_factory)
    # a seed per pair (the method's randomness, a retrain's initialisation): one seed for every k made the
    # retrain control's models share an initialisation, and a never-seen class's logit with it
    result = create_unlearner(method, copy.deepcopy(shadow), udata, hparams, seed=pair_seed(ctx.seed, k),
                              trainer_cfg=ctx.trainer_cfg).unlearn()
    return ctx.model_phi(result.model.to(ctx.device))["phi_train"]


def _attack_summary(ctx: AuditContext, scores: np.ndarray, labels: np.ndarray) -> dict[str, Any]:
    """AUC with its interval, TPR at 1 % FPR, balanced accuracy at score 0 (an attacker's natural threshold:
    more likely unlearned than retrained)."""
    ci = ctx.attack.ci
    out = roc_summary(scores, labels, fpr_levels=(0.01,), ci_method=ci["method"], ci_level=float(ci["level"]),
                      n_boot=int(ci["n_boot"]), seed=ctx.seed)
    pred = scores > 0
    out["accuracy"] = float(0.5 * (pred[labels].mean() + (~pred[~labels]).mean()))
    out.pop("roc", None)
    return out


def _pairs_summary(ctx: AuditContext, phi_u: np.ndarray, phi_r: np.ndarray, mask: np.ndarray
                   ) -> tuple[dict[str, Any], tuple[float, np.ndarray]]:
    """The method-level attack of shadow pairs ``(E, F)``: leave one pair out, summarise; the AUC's interval
    from a delete-one-pair jackknife that refits the attack (:func:`attacks.forgetting.ulira_pair_aucs`), and
    Hayes et al.'s per-example accuracy on the held-out target models. Also returns the AUC and its jackknife
    replicates, for paired differences."""
    fixed = bool(ctx.attack.fixed_variance)
    s = ulira_scores(phi_u, phi_r, mask, fixed)
    out = _attack_summary(ctx, s.scores, s.is_unlearned)
    level = float(ctx.attack.ci["level"])
    auc, loo = ulira_pair_aucs(phi_u, phi_r, mask, fixed)
    out["auc_ci"] = list(jackknife_normal_interval(auc, loo, level, (0.0, 1.0)))
    out["ci_method"] = f"delete-one-pair jackknife, refitted, {100 * level:g} %"
    acc = s.per_example_accuracy()
    out["per_example_accuracy"] = {"mean": float(acc.mean()), "median": float(np.median(acc)),
                                   "p90": float(np.percentile(acc, 90)), "n_examples": int(acc.size)}
    out["fixed_variance"] = fixed
    return out, (auc, loo)


def ulira_audit(ctx: AuditContext, target: Classifier | None = None, oracle: Classifier | None = None) -> dict[str, Any]:
    """The ``ulira`` block of the forgetting audit (module docstring); the target level where the audited
    checkpoint and the oracle are given."""
    t0 = time.perf_counter()
    bank = shadow_bank_of(ctx)
    bank.train()
    forget = np.asarray(ctx.scenario.forget_idx)
    mask = bank.keep[:, forget]  # (E, F): was forget example x in shadow k's training data?
    retrain_bank = shadow_retrain_bank(ctx, bank)
    retrain_bank.train()
    phi_r = retrain_bank.shadow_phi(["identity"])[0][..., 0][:, forget]  # (E, F)
    phi_u, computed = unlearned_shadows(ctx, bank, ctx.method, ctx.hparams)
    summary, aucs = _pairs_summary(ctx, phi_u[:, forget], phi_r, mask)
    out: dict[str, Any] = {**summary, "n_pairs": int(bank.n_shadow), "computed_now": computed}
    controls: dict[str, Any] = {}
    if ctx.attack.forgetting["controls"]:
        level = float(ctx.attack.ci["level"])
        phi_none = bank.shadow_phi(["identity"])[0][..., 0][:, forget]  # U_k = the shadow unchanged
        controls["none"], _ = _pairs_summary(ctx, phi_none, phi_r, mask)
        phi_ret, _ = unlearned_shadows(ctx, bank, "retrain", {})
        controls["retrain"], aucs_ret = _pairs_summary(ctx, phi_ret[:, forget], phi_r, mask)
        # the method and the retrain control share the retrained shadows R_k: their difference's interval
        out["auc_minus_retrain"] = ulira_difference(aucs, aucs_ret, level)
    out["controls"] = controls
    if target is not None and oracle is not None:  # the audited checkpoint against the oracle, all pairs fitted
        fit = fit_gaussians(phi_u[:, forget], phi_r, mask, mask, bool(ctx.attack.fixed_variance))
        phi_t = ctx.model_phi(target)["phi_train"][forget]
        phi_o = ctx.model_phi(oracle)["phi_train"][forget]
        s = np.concatenate([fit.score(phi_t), fit.score(phi_o)])
        lab = np.r_[np.ones(len(forget), dtype=bool), np.zeros(len(forget), dtype=bool)]
        out["target"] = _attack_summary(ctx, s, lab)
    out["time_s"] = round(time.perf_counter() - t0, 3)
    return out
