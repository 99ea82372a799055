"""The unlearning audit: LiRA (+ SVM MIA) of every model of a run with one shadow bank
(ALGORITHMS.md §4 "Unlearning audit"; seeds/003 §IV-D, Supp. V-E/V-F).

Members are the forget samples (the original trained on them); non-members are the test samples
(homogeneous / custom / targeted removal) or the test samples of the forgotten classes (class removal).
The unlearned model is the target; the original (should be attackable) and the retrained oracle (should
be at chance) are audited with the same bank for reference.

Entry point for the CLIs: :func:`audit_models`. It returns ``{name: audit dict}`` in the ``audit.json``
format of DESIGN.md §3 (plus confidence intervals, the ROC, bank and timing fields) and, given
``out_dirs``, writes ``audit.json`` and ``lira_stats.npz`` (everything needed to recompute the attack)
for each model.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from attacks.lira import OFFLINE_TESTS, VARIANTS, VIEW_NAMES, lira_phi, lira_scores, resolve_views, view_logits
from attacks.roc import CI_METHODS, roc_summary
from attacks.shadow import MODES, POOLS, ShadowBank
from attacks.svm_mia import SCORERS, checked_counts, svm_mia
from duck.data.base import DatasetSplits
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_save_npz
from duck.models import Classifier
from duck.schema import SEED, Either, Flag, Group, Integer, Numbers, OneOf, Real, Settings, option, settings
from duck.training import Recipe

REFERENCE_NAMES = ("original", "retrained")
SCORE_SETTINGS = ("variant", "offline_test", "fixed_variance", "truncate")  # lira_scores() keyword arguments


#: fewest members (and non-members) for an attackable / at-chance verdict: with fewer, a stratified bootstrap
#: or the Hanley-McNeil SE sees almost no variance on the small side and the interval is far too narrow
MIN_VERDICT_SAMPLES = 10

def lira_verdict(lira: Mapping[str, Any]) -> str:
    """The words for a LiRA result (stored in ``audit.json`` as ``lira.verdict`` and shown by the report)."""
    if lira.get("too_few_for_verdict"):
        return (f"inconclusive: {lira.get('n_members')} members / {lira.get('n_nonmembers')} non-members are too "
                "few for a reliable interval (10 of each at least)")
    if lira.get("separated_from_chance"):
        return "attackable (CI above 0.5)"
    if lira.get("below_chance"):
        return "distinguishable: CI below 0.5 (forget samples less member-like than unseen data)"
    if lira.get("within_2se_of_chance"):
        return "at chance (within 2 SE of 0.5)"
    return "inconclusive"


def lira_summary(audits: Mapping[str, Mapping[str, Any]], *, forgetting_ran: bool = False) -> str:
    """One sentence on what LiRA says about the audited model (``unlearned`` where present) and whether it
    could say anything: LiRA has power on a forget set only where the original itself is attackable there; an
    original at chance makes every other model's chance-level AUC meaningless, and without the original the
    audit cannot tell. ``forgetting_ran``: the forgetting audit ran beside (its verdict is the one to read)."""
    def auc(name: str) -> str:
        lira = audits[name]["lira"]
        lo, hi = lira["auc_ci"]
        return f"AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}], {lira.get('verdict') or lira_verdict(lira)}"

    others = [n for n in audits if n != "original"]
    target = "unlearned" if "unlearned" in audits else (others[0] if others else "original")
    if "original" not in audits:
        return (f"LiRA on the {target} model: {auc(target)}. Without the original (original_ckpt=PATH) the audit "
                "cannot tell whether LiRA has power on this forget set: a chance-level AUC is evidence of "
                "forgetting only where the original is attackable.")
    if target == "original":
        return f"LiRA on the original: {auc('original')}."
    if not audits["original"]["lira"].get("separated_from_chance"):
        advice = ("Read the forgetting audit's verdict instead" if forgetting_ran else
                  "Use the forgetting audit against retrained models (attack.forgetting.enabled=true)")
        return (f"LiRA had no power on this forget set: the original itself is not attackable ({auc('original')}), "
                f"so the {target} model's result ({auc(target)}) says nothing about forgetting. {advice}, more "
                "shadow models (attack.n_shadow), or a forget set the original memorises.")
    text = f"LiRA: the original is attackable ({auc('original')}); the {target} model: {auc(target)}"
    if "retrained" in audits and target != "retrained":
        text += f"; the retrained oracle: {auc('retrained')}"
    return text + "."


#: the most bootstrap resamples attack.ci.n_boot may ask for (2000 is the default; more only costs time)
MAX_N_BOOT = 100_000
#: the fewest resamples a percentile interval is computed from
MIN_N_BOOT = 100


@settings
class CISettings(Settings):
    """``attack.ci``: the interval of every AUC (:func:`attacks.roc.auc_with_ci`)."""

    prefix: ClassVar[str] = "attack.ci"

    method: str = option("bootstrap", OneOf(tuple(CI_METHODS)), "how AUC intervals are made")
    level: float = option(0.95, Real(0.5, False, 1.0, hi_open=True),
                          "their confidence level (below 0.5: no interval anyone reads)")
    n_boot: int = option(2000, Integer(MIN_N_BOOT, MAX_N_BOOT, " resamples; 2000 is usual"),
                       "bootstrap resamples (2000 is usual)")


@settings
class ForgettingSettings(Settings):
    """``attack.forgetting``: the forgetting audit against retrained models (ALGORITHMS.md §10) and its verdict
    (§11)."""

    prefix: ClassVar[str] = "attack.forgetting"

    enabled: bool = option(False, Flag(), "run the forgetting audit (N runs of the method against R retrained models)")
    n_unlearned: int = option(8, Integer(3), "N, runs of the method from the original (≥ 3: ⌈ln(N − 1)⌉ > 0 for "
                                             "any ε score)")
    n_retrained: int = option(8, Integer(3), "R, models retrained without the forget set")
    controls: bool = option(True, Flag(), "score the retrain and none controls beside the method")
    intervals: bool = option(True, Flag(), "intervals on F and KLOM (without them the verdict compares points)")
    ci_level: float = option(0.95, Real(0.5, True, 1.0, hi_open=True), "level of the verdict's and KLOM's intervals")
    seed: int = option(0, SEED, "seed of the banks (the retrain control takes the next) and of the calibration")
    klom_max_examples: int = option(2000, Integer(1), "retain and test examples KLOM scores (a fixed random subset "
                                                      "beyond)")
    ulira: bool = option(False, Flag(), "U-LiRA (Hayes et al.) beside the ε score")
    margin: float = option(0.25, Real(0.0, True, 1.0, hi_open=True),
                           "the largest share of the original's shift a `forgotten` method may keep")
    replicates: int = option(60, Integer(20), "permutation splits per shift of the verdict's test")
    calibration_examples: int = option(300, Integer(10), "forget examples the verdict's test scores (a fixed random "
                                                         "subset beyond)")
    max_utility_loss: float = option(0.05, Real(0.0, False, 1.0, hi_open=True),
                                     "allowance on the utility ratios RA_U/RA_R and TA_U/TA_R")


@dataclass(frozen=True)
class ShadowCount:
    """``attack.n_shadow``: an even integer >= 4 (each forget sample is OUT for half of the shadows, and a
    Gaussian needs two of them)."""

    def __call__(self, value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 4 or value % 2:
            raise DuckInputError(f"{key}={value!r} must be an even number >= 4 (each forget sample is OUT for half of "
                                 "the shadows and a Gaussian needs >= 2 of them); 16 or 64 are usual")
        return int(value)

    def describe(self) -> str:
        return "an even integer >= 4"


@dataclass(frozen=True)
class Views:
    """``attack.views``: ``auto`` or a list of view names (:func:`attacks.lira.resolve_views`)."""

    def __call__(self, value: Any, key: str) -> Any:
        if isinstance(value, str):
            resolve_views(value, 8)
            return value
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            resolve_views(list(value), 8)
            return tuple(value)
        raise DuckInputError(f"{key}={value!r}; use 'auto' or a list of view names")

    def describe(self) -> str:
        return f"auto or a list of {list(VIEW_NAMES)}"


@settings
class SVMSettings(Settings):
    """``attack.svm_mia``: the SVM membership-inference attack (:func:`attacks.svm_mia.svm_mia`, Supp. V-F)."""

    prefix: ClassVar[str] = "attack.svm_mia"

    enabled: bool = option(True, Flag(), "run the SVM MIA")
    member_ratio_cr: float = option(3.0, Real(0.0, True), "members per non-member on class removal")
    member_ratio_hr: float = option(1.0, Real(0.0, True), "members per non-member on homogeneous removal")
    runs: int = option(5, Integer(1), "resamples / splits averaged")
    C: tuple[float, ...] = option((1.0, 5.0, 10.0, 100.0), Numbers(0.0, example="[1, 5, 10, 100]"),
                                  "the RBF-SVC's C grid")
    gamma: tuple[float, ...] = option((1.0, 0.1, 0.01), Numbers(0.0, example="[1, 0.1, 0.01]"),
                                      "the RBF-SVC's gamma grid")
    cv: int = option(3, Integer(2), "cross-validation folds of the grid search")
    test_size: float = option(0.2, Real(0.0, True, 1.0, hi_open=True), "held-out share of each run")
    max_per_side: int = option(3000, Integer(2), "members and non-members per run, at most")
    scoring: str = option("f1", OneOf(tuple(sorted(SCORERS))), "the grid search's score")


@settings
class AuditSettings(Settings):
    """``attack``: LiRA with its shadow bank (``conf/attack/lira.yaml``), the SVM MIA, the AUC intervals and the
    forgetting audit; parsed before any shadow is trained or any file written."""

    prefix: ClassVar[str] = "attack"

    n_shadow: int = option(16, ShadowCount(), "shadow models of the LiRA bank (16 or 64 are usual)")
    seed: int = option(0, SEED, "seed of the shadow bank")
    variant: str = option("offline", OneOf(tuple(VARIANTS)), "LiRA's variant (online needs shadow_pool=train+test)")
    offline_test: str = option("one_sided", OneOf(tuple(OFFLINE_TESTS)), "offline LiRA's test")
    fixed_variance: bool = option(False, Flag(), "one variance for every example instead of per-example ones")
    truncate: bool = option(True, Flag(), "clip the logit-scaled confidences")
    views: Any = option("auto", Views(), "query views (auto: identity plus the training augmentations)")
    shadow_pool: str = option("train", OneOf(tuple(POOLS)), "what the shadows train on random halves of")
    mode: str = option("auto", OneOf(tuple(MODES)), "shadows trained one by one or batched (auto: the faster)")
    chunk_size: int = option(16, Integer(1), "shadows trained at once in batched mode")
    threads: Any = option("auto", Either(("auto", None), Integer(1)), "torch intra-op threads of the bank")
    fpr_levels: tuple[float, ...] = option((0.001, 0.01, 0.05),
                                           Numbers(0.0, 1.0, True, "[0.001, 0.01, 0.05]", distinct=True),
                                           "false-positive rates the TPR is reported at")
    ci: CISettings = option(CISettings(), Group(CISettings), "the AUC intervals")
    svm_mia: SVMSettings = option(SVMSettings(), Group(SVMSettings), "the SVM MIA")
    forgetting: ForgettingSettings = option(ForgettingSettings(), Group(ForgettingSettings), "the forgetting audit")
    save_stats: bool = option(True, Flag(), "write lira_stats.npz beside audit.json")
    eval_batch_size: int = option(1024, Integer(1), "batch size of the bank's evaluation")
    num_shards: int = option(1, Integer(1),
                             "> 1: the job trains only slice `shard` of its banks (the audit's and the method's), then stops")
    shard: int = option(0, Integer(0), "the slice this job trains (0 .. num_shards - 1)")

    def __post_init__(self) -> None:
        """The checks across options."""
        if self.variant == "online" and self.shadow_pool != "train+test":
            raise DuckInputError(
                "online LiRA needs IN shadows for the non-members (test samples); set attack.shadow_pool=train+test "
                "(shadows train on random halves of train and test; attack=lira_online does both) or use "
                "attack.variant=offline")
        if self.shard >= self.num_shards:
            raise DuckInputError(f"attack.shard={self.shard!r} must be an integer in 0..{self.num_shards - 1} "
                                 f"(attack.num_shards={self.num_shards})")

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | None) -> AuditSettings:
        """The ``attack`` config (its ``name`` key, the config's own name, dropped)."""
        if cfg is not None and not isinstance(cfg, Mapping):
            raise DuckInputError(f"attack must be a mapping of options, got {cfg!r}")
        return cls.parse({k: v for k, v in dict(cfg or {}).items() if k != "name"})


def query_indices(scenario: Scenario) -> tuple[np.ndarray, np.ndarray | None, str]:
    """``(member train ids, non-member test ids or None = all test, non-member set name)``."""
    if scenario.is_class_removal:
        if scenario.test_forget_idx is None or len(scenario.test_forget_idx) == 0:
            raise DuckInputError("class-removal audit needs test samples of the forgotten classes; the test "
                                 "split "
                                 "has none")
        return scenario.forget_idx, scenario.test_forget_idx, "test_forget"
    return scenario.forget_idx, None, "test"


def _svm_setup(settings: AuditSettings, scenario: Scenario) -> tuple[bool, float, dict[str, Any]]:
    """``(enabled, member ratio for this scenario, the other svm_mia keyword arguments)`` of the SVM MIA."""
    svm_kwargs = dict(settings.svm_mia)
    enabled = bool(svm_kwargs.pop("enabled", True))
    ratio_cr, ratio_hr = svm_kwargs.pop("member_ratio_cr", 3), svm_kwargs.pop("member_ratio_hr", 1)
    return enabled, float(ratio_cr if scenario.is_class_removal else ratio_hr), svm_kwargs


def check_audit_data(settings: AuditSettings, n_test: int, scenario: Scenario) -> None:
    """What the audit of this scenario needs from the data, checked before any training: the non-member
    samples exist (class removal: test samples of the forgotten classes) and, with the SVM MIA on, enough
    members and non-members for its cross-validated grid search (:func:`attacks.svm_mia.checked_counts`)."""
    member_idx, test_idx, _ = query_indices(scenario)
    enabled, ratio, svm_kwargs = _svm_setup(settings, scenario)
    if enabled:
        counts = {k: svm_kwargs[k] for k in ("max_per_side", "cv", "test_size") if k in svm_kwargs}
        checked_counts(len(member_idx), n_test if test_idx is None else len(test_idx), ratio, **counts)


def _svm_features(logits: torch.Tensor) -> np.ndarray:
    return torch.softmax(logits.double(), dim=-1).numpy()


def audit_models(cfg_attack: AuditSettings | Mapping[str, Any] | None, data: DatasetSplits, scenario: Scenario,
                 models: Mapping[str, Classifier], *, recipe: Recipe, model_factory: Callable[[], Classifier],
                 augment: list[str] | tuple[str, ...] = (), cache_dir: str | Path,
                 device: torch.device | str = "cpu",
                 seed: int = 0, trainer_cfg: Mapping[str, Any] | None = None,
                 out_dirs: Mapping[str, str | Path] | None = None,
                 progress: bool = False) -> dict[str, dict[str, Any]]:
    """Audit ``models`` (name -> model; ``"unlearned"`` is the target, ``"original"``/``"retrained"`` the
    references; any may be missing, other names are audited like targets) with one shadow bank.

    The bank (E = ``attack.n_shadow`` shadows of ``model_factory()`` trained with ``recipe`` and
    ``augment``) is loaded from ``<cache_dir>/store-v1/shadow_banks/<key>/`` or trained there first. ``seed``
    drives the bootstrap and the SVM splits. ``out_dirs`` (name -> directory) says where to write each
    model's ``audit.json`` and ``lira_stats.npz``. Returns ``{name: audit dict}``."""
    if not models:
        raise DuckInputError("nothing to audit: pass at least one model")
    cfg = cfg_attack if isinstance(cfg_attack, AuditSettings) else AuditSettings.from_cfg(cfg_attack)
    device = torch.device(device)
    t_start = time.perf_counter()
    views = resolve_views(cfg.views, data.img_size, augment)
    member_idx, test_idx, nonmember_name = query_indices(scenario)
    test_ids = np.arange(len(data.test)) if test_idx is None else np.asarray(test_idx)
    check_audit_data(cfg, len(data.test), scenario)  # before the bank is trained

    bank = ShadowBank(cache_dir, data, model_factory, recipe, n_shadow=cfg.n_shadow, seed=cfg.seed,
                      pool=cfg.shadow_pool, augment=augment, device=device, mode=cfg.mode,
                      chunk_size=cfg.chunk_size, trainer_cfg=trainer_cfg, threads=cfg.threads,
                      progress=progress)
    train_info = bank.train()
    t_trained = time.perf_counter()
    phi_train, phi_test, phi_reused = bank.shadow_phi(views, batch_size=cfg.eval_batch_size)
    t_phi = time.perf_counter()
    shadow_phi = np.concatenate([phi_train[:, member_idx], phi_test[:, test_ids]], axis=1)  # (E, Q, V)
    shadow_in = bank.shadow_in(member_idx, test_ids)  # (E, Q)
    is_member = np.r_[np.ones(len(member_idx), dtype=bool), np.zeros(len(test_ids), dtype=bool)]  # (Q,)
    job = bank.job  # all shadows trained in this job: train() above and damaged ones retrained while loading
    retrain_s = job["seconds"] - train_info["seconds"]
    bank_info = {"key": bank.key, "dir": str(bank.dir), "n_shadow": bank.n_shadow, "pool": bank.pool,
                 "seed": bank.seed, "trained_now": len(job["trained"]), "mode": job["mode"],
                 "mode_info": job["mode_info"], "train_s": round(job["seconds"], 3),
                 "phi_reused": phi_reused, "phi_s": round(max(0.0, t_phi - t_trained - retrain_s), 3)}

    audits: dict[str, dict[str, Any]] = {}
    svm_enabled, svm_ratio, svm_kwargs = _svm_setup(cfg, scenario)
    for name, model in models.items():
        t0 = time.perf_counter()
        model.to(device)
        bs = cfg.eval_batch_size
        # (V, F, C) and (V, T, C) logits of the members (forget) and non-members (test)
        logits_m, y_m = view_logits(model, data.train, member_idx, views, device=device, batch_size=bs)
        logits_n, y_n = view_logits(model, data.test, test_ids, views, device=device, batch_size=bs)
        target_phi = torch.cat([lira_phi(logits_m, y_m), lira_phi(logits_n, y_n)], dim=1).T.numpy()  # (Q, V)
        scores, fit_info = lira_scores(target_phi, shadow_phi, shadow_in, variant=cfg.variant,
                                       offline_test=cfg.offline_test, fixed_variance=cfg.fixed_variance,
                                       truncate=cfg.truncate)
        summary = roc_summary(scores, is_member, fpr_levels=cfg.fpr_levels, ci_method=cfg.ci["method"],
                              ci_level=float(cfg.ci["level"]), n_boot=int(cfg.ci["n_boot"]), seed=seed)
        lo, hi = summary["auc_ci"]
        n_pos, n_neg = int(is_member.sum()), int((~is_member).sum())
        too_few = min(n_pos, n_neg) < MIN_VERDICT_SAMPLES  # resampling 1 member shows no member-side variance
        lira = {"variant": cfg.variant, "offline_test": cfg.offline_test,
                "fixed_variance": cfg.fixed_variance, "truncate": cfg.truncate, "n_shadow": cfg.n_shadow,
                "views": views, **fit_info, **summary,
                "too_few_for_verdict": bool(too_few),
                "separated_from_chance": bool(lo > 0.5 and not too_few),
                # forget samples look *less* like members than non-members do (over-forgetting): also a
                # membership signal: an auditor can tell the forget samples from unseen data
                "below_chance": bool(hi < 0.5 and not too_few),
                "within_2se_of_chance": bool(abs(summary["auc"] - 0.5) <= 2 * summary["auc_se"] and not too_few)}
        lira["verdict"] = lira_verdict(lira)  # the report's words, also for parsers of audit.json
        audit: dict[str, Any] = {"target": name, "members": "forget", "nonmembers": nonmember_name,
                                 "scenario": scenario.kind, "n_members": int(len(member_idx)),
                                 "n_nonmembers": int(len(test_ids)), "lira": lira}
        if svm_enabled:
            ident = views.index("identity") if "identity" in views else None
            if ident is None:
                logits_m, _ = view_logits(model, data.train, member_idx, ["identity"], device=device)
                logits_n, _ = view_logits(model, data.test, test_ids, ["identity"], device=device)
                ident = 0
            audit["svm_mia"] = svm_mia(_svm_features(logits_m[ident]), _svm_features(logits_n[ident]),
                                       member_ratio=svm_ratio, seed=seed, **svm_kwargs)
        audit["bank"] = bank_info
        audit["time_s"] = round(time.perf_counter() - t0, 3)
        audits[name] = audit
        if out_dirs and name in out_dirs:
            out = Path(out_dirs[name])
            if cfg.save_stats:
                atomic_save_npz(out / "lira_stats.npz", keep=bank.keep, shadow_in=shadow_in,
                                shadow_phi=shadow_phi,
                                target_phi=target_phi, scores=scores, member=is_member,
                                labels=np.r_[y_m.numpy(), y_n.numpy()], train_idx=np.asarray(member_idx),
                                test_idx=test_ids, views=np.array(views),
                                settings=np.array(json.dumps({k: lira[k] for k in SCORE_SETTINGS})))
                audit["lira_stats"] = "lira_stats.npz"
    for name, audit in audits.items():  # every audit carries the others' headline numbers
        audit["reference"] = {other: {k: a["lira"][k] for k in ("auc", "auc_se", "auc_ci", "tpr_at_fpr")}
                              for other, a in audits.items() if other != name}
        audit["total_audit_s"] = round(time.perf_counter() - t_start, 3)
        if out_dirs and name in out_dirs:
            atomic_save_json(Path(out_dirs[name]) / "audit.json", audit)
    return audits
