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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attacks.lira import OFFLINE_TESTS, VARIANTS, lira_phi, lira_scores, resolve_views, view_logits
from attacks.roc import CI_METHODS, roc_summary
from attacks.shadow import MODES, POOLS, ShadowBank
from attacks.svm_mia import SCORERS, checked_counts, svm_mia
from attacks.threads import resolve_threads
from duck.data.base import DatasetSplits
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_save_npz
from duck.models import Classifier
from duck.training import Recipe
from duck.utils import check_bool, check_number, check_positive_int, check_seed

REFERENCE_NAMES = ("original", "retrained")
SVM_OPTIONS = {"enabled", "member_ratio_cr", "member_ratio_hr", "runs", "C", "gamma", "cv", "test_size",
               "max_per_side", "scoring"}
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


@dataclass
class AuditSettings:
    """``conf/attack/lira.yaml`` as a typed object (validated on construction)."""

    n_shadow: int = 16
    seed: int = 0
    variant: str = "offline"
    offline_test: str = "one_sided"
    fixed_variance: bool = False
    truncate: bool = True
    views: Any = "auto"
    shadow_pool: str = "train"
    mode: str = "auto"
    chunk_size: int = 16
    threads: Any = "auto"  # torch intra-op threads while training / running the bank (attacks.shadow)
    fpr_levels: tuple[float, ...] = (0.001, 0.01, 0.05)
    ci: dict[str, Any] = field(default_factory=lambda: {"method": "bootstrap", "level": 0.95, "n_boot": 2000})
    svm_mia: dict[str, Any] = field(default_factory=lambda: {"enabled": True})
    forgetting: dict[str, Any] = field(default_factory=lambda: {"enabled": False})
    save_stats: bool = True
    eval_batch_size: int = 1024
    num_shards: int = 1  # > 1: the job trains only slice `shard` of its banks into the shared cache, then stops
    shard: int = 0

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any] | None) -> AuditSettings:
        """Every option checked here (types, ranges, names), so that a bad one fails before any shadow is
        trained or any file written; errors name the key (``attack.ci.level``) and the value."""
        if cfg is not None and not isinstance(cfg, Mapping):
            raise DuckInputError(f"attack must be a mapping of options, got {cfg!r}")
        raw = dict(cfg or {})
        raw.pop("name", None)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(raw) - known)
        if unknown:
            raise DuckInputError(f"unknown attack option(s) {unknown}; known: {sorted(known)}")
        s = cls(**raw)
        if isinstance(s.n_shadow, bool) or not isinstance(s.n_shadow, int) or s.n_shadow < 4 or s.n_shadow % 2:
            raise DuckInputError(f"attack.n_shadow={s.n_shadow!r} must be an even number >= 4 (each forget "
                                 f"sample is "
                                 "OUT for half of the shadows and a Gaussian needs >= 2 of them); 16 or 64 "
                                 "are usual")
        s.seed = check_seed(s.seed, "attack.seed")
        if s.variant not in VARIANTS:
            raise DuckInputError(f"attack.variant={s.variant!r}; choose one of {list(VARIANTS)}")
        if s.offline_test not in OFFLINE_TESTS:
            raise DuckInputError(f"attack.offline_test={s.offline_test!r}; choose one of "
                                 f"{list(OFFLINE_TESTS)}")
        for key in ("fixed_variance", "truncate", "save_stats"):
            check_bool(getattr(s, key), f"attack.{key}")
        s.fpr_levels = tuple(check_number(f, "attack.fpr_levels[]", 0.0, True, 1.0, True)
                             for f in _number_list(s.fpr_levels, "attack.fpr_levels", "[0.001, 0.01, 0.05]"))
        if len({f"{f:g}" for f in s.fpr_levels}) != len(s.fpr_levels):  # keyed by their text in audit.json
            raise DuckInputError(f"attack.fpr_levels={list(s.fpr_levels)} lists a level twice; give each once")
        if s.shadow_pool not in POOLS:
            raise DuckInputError(f"attack.shadow_pool={s.shadow_pool!r}; choose one of {list(POOLS)}")
        if s.mode not in MODES:
            raise DuckInputError(f"attack.mode={s.mode!r}; choose one of {list(MODES)}")
        if s.variant == "online" and s.shadow_pool != "train+test":
            raise DuckInputError(
                "online LiRA needs IN shadows for the non-members (test samples); set "
                "attack.shadow_pool=train+test "
                "(shadows train on random halves of train and test; attack=lira_online does both) or use "
                "attack.variant=offline")
        s.chunk_size = check_positive_int(s.chunk_size, "attack.chunk_size")
        s.num_shards = check_positive_int(s.num_shards, "attack.num_shards")
        if isinstance(s.shard, bool) or not isinstance(s.shard, int) or not 0 <= s.shard < s.num_shards:
            raise DuckInputError(f"attack.shard={s.shard!r} must be an integer in 0..{s.num_shards - 1} "
                                 f"(attack.num_shards={s.num_shards})")
        s.eval_batch_size = check_positive_int(s.eval_batch_size, "attack.eval_batch_size")
        resolve_threads(s.threads)
        if isinstance(s.views, str):
            resolve_views(s.views, 8)
        elif isinstance(s.views, (list, tuple)) and all(isinstance(v, str) for v in s.views):
            s.views = list(s.views)
            resolve_views(s.views, 8)
        else:
            raise DuckInputError(f"attack.views={s.views!r}; use 'auto' or a list of view names")
        s.ci = _check_ci(s.ci)
        s.svm_mia = _check_svm(s.svm_mia)
        s.forgetting = check_forgetting(s.forgetting)
        return s


#: the most bootstrap resamples attack.ci.n_boot may ask for (2000 is the default; more only costs time)
MAX_N_BOOT = 100_000
#: the fewest resamples a percentile interval is computed from
MIN_N_BOOT = 100


def _number_list(value: Any, name: str, example: str) -> list[Any]:
    """A non-empty list of numbers; a single number is taken as a one-element list."""
    if not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)):
        return [value]
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)) or not value:
        raise DuckInputError(f"{name}={value!r} must be a non-empty list of numbers, e.g. {example}")
    return list(value)


def _check_ci(ci: Any) -> dict[str, Any]:
    if ci is not None and not isinstance(ci, Mapping):
        raise DuckInputError(f"attack.ci={ci!r} must be a mapping with method, level and n_boot")
    ci = {"method": "bootstrap", "level": 0.95, "n_boot": 2000, **dict(ci or {})}
    unknown = sorted(set(ci) - {"method", "level", "n_boot"})
    if unknown:
        raise DuckInputError(f"unknown attack.ci option(s) {unknown}; known: ['level', 'method', 'n_boot']")
    if ci["method"] not in CI_METHODS:
        raise DuckInputError(f"attack.ci.method={ci['method']!r}; choose one of {list(CI_METHODS)}")
    ci["level"] = check_number(ci["level"], "attack.ci.level", 0.5, False, 1.0, True)  # below 0.5: no CI anyone reads
    n_boot = check_positive_int(ci["n_boot"], "attack.ci.n_boot", MIN_N_BOOT)
    if n_boot > MAX_N_BOOT:
        raise DuckInputError(f"attack.ci.n_boot={n_boot} exceeds the maximum of {MAX_N_BOOT} resamples; "
                             "2000 is usual")
    ci["n_boot"] = n_boot
    return ci


#: the options of ``attack.forgetting`` (the forgetting audit of ALGORITHMS.md §10 and its verdict, §11) and their
#: defaults
FORGETTING_DEFAULTS = {"enabled": False, "n_unlearned": 8, "n_retrained": 8, "controls": True, "intervals": True,
                       "ci_level": 0.95, "seed": 0, "klom_max_examples": 2000, "ulira": False, "margin": 0.25,
                       "replicates": 60, "calibration_examples": 300, "max_utility_loss": 0.05}


def check_forgetting(cfg: Any) -> dict[str, Any]:
    """``attack.forgetting``: ``enabled`` and ``controls`` true/false; ``n_unlearned`` (N) and ``n_retrained``
    (R) integers >= 3 (N >= 3 for any ε score: ⌈ln(N − 1)⌉ > 0); ``intervals`` true/false (KLOM's jackknife);
    ``ci_level`` in (0.5, 1) (the verdict's interval and KLOM's); ``seed`` >= 0 (the banks' and the
    calibration's); ``klom_max_examples`` >= 1 (retain and test examples scored by KLOM, a fixed random subset
    beyond it); the verdict's ``margin`` in (0, 1) (the share of the original's shift a forgotten method may
    keep), ``replicates`` >= 20 (permutation splits per shift), ``calibration_examples`` >= 10 (forget examples
    the verdict's test scores, a fixed random subset beyond) and ``max_utility_loss`` in [0, 1) (the utility
    ratios' allowance)."""
    if cfg is not None and not isinstance(cfg, Mapping):
        raise DuckInputError(f"attack.forgetting={cfg!r} must be a mapping of options")
    out = {**FORGETTING_DEFAULTS, **dict(cfg or {})}
    unknown = sorted(set(out) - set(FORGETTING_DEFAULTS))
    if unknown:
        raise DuckInputError(f"unknown attack.forgetting option(s) {unknown}; known: {sorted(FORGETTING_DEFAULTS)}")
    for key in ("enabled", "controls", "intervals", "ulira"):
        out[key] = check_bool(out[key], f"attack.forgetting.{key}")
    out["n_unlearned"] = check_positive_int(out["n_unlearned"], "attack.forgetting.n_unlearned", 3)
    out["n_retrained"] = check_positive_int(out["n_retrained"], "attack.forgetting.n_retrained", 3)
    out["ci_level"] = check_number(out["ci_level"], "attack.forgetting.ci_level", 0.5, True, 1.0, True)
    out["seed"] = check_seed(out["seed"], "attack.forgetting.seed")
    out["klom_max_examples"] = check_positive_int(out["klom_max_examples"], "attack.forgetting.klom_max_examples")
    out["margin"] = check_number(out["margin"], "attack.forgetting.margin", 0.0, True, 1.0, True)
    out["replicates"] = check_positive_int(out["replicates"], "attack.forgetting.replicates", 20)
    out["calibration_examples"] = check_positive_int(out["calibration_examples"],
                                                     "attack.forgetting.calibration_examples", 10)
    out["max_utility_loss"] = check_number(out["max_utility_loss"], "attack.forgetting.max_utility_loss", 0.0, False,
                                           1.0, True)
    return out


def _check_svm(svm: Any) -> dict[str, Any]:
    if svm is not None and not isinstance(svm, Mapping):
        raise DuckInputError(f"attack.svm_mia={svm!r} must be a mapping of options")
    svm = {"enabled": True, **dict(svm or {})}
    bad_svm = sorted(set(svm) - SVM_OPTIONS)
    if bad_svm:
        raise DuckInputError(f"unknown attack.svm_mia option(s) {bad_svm}; known: {sorted(SVM_OPTIONS)}")
    check_bool(svm["enabled"], "attack.svm_mia.enabled")
    for key in ("member_ratio_cr", "member_ratio_hr"):
        if key in svm:
            svm[key] = check_number(svm[key], f"attack.svm_mia.{key}", 0.0, True)
    if "runs" in svm:
        svm["runs"] = check_positive_int(svm["runs"], "attack.svm_mia.runs", 1)
    if "cv" in svm:
        svm["cv"] = check_positive_int(svm["cv"], "attack.svm_mia.cv", 2)
    if "max_per_side" in svm:
        svm["max_per_side"] = check_positive_int(svm["max_per_side"], "attack.svm_mia.max_per_side", 2)
    if "test_size" in svm:
        svm["test_size"] = check_number(svm["test_size"], "attack.svm_mia.test_size", 0.0, True, 1.0, True)
    for key, example in (("C", "[1, 5, 10, 100]"), ("gamma", "[1, 0.1, 0.01]")):
        if key in svm:
            name = f"attack.svm_mia.{key}"
            svm[key] = [check_number(v, f"{name}[]", 0.0, True) for v in _number_list(svm[key], name, example)]
    if "scoring" in svm and svm["scoring"] not in SCORERS:
        raise DuckInputError(f"attack.svm_mia.scoring={svm['scoring']!r}; choose one of {sorted(SCORERS)}")
    return svm


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
