"""The forgetting audit stage (ALGORITHMS.md §10): is the method, on each forget example, distributed like
models retrained without it?

Model sets (all cached under the job's cache directory):
- the **retrain bank**: R models on the retain set (:class:`attacks.retrain_bank.RetrainBank`; shared by every
  method and audit of the forget set);
- the **unlearned set**: N runs of the job's method from the same original with seeds ``seed .. seed + N − 1``
  (run 0 is the audited model's own seed), their φ and correctness on every train and test sample
  (the store entry ``unlearned_sets/<key>/run_KKK.npz``, keyed by the original's weights, the method and its
  resolved hyperparameters, the forget set, the data and the training-relevant trainer settings; computed under
  the entry's lock, so a concurrent audit of the same method waits and reuses the runs);
- the **controls**: ``none`` (R originals, each trained on the full training set with its own seed: models that
  saw the forget set; :class:`OriginalBank`, shared by every forget set) and ``retrain`` (N more retrains with
  other seeds: the ceiling an indistinguishable method can reach at this N and R).

Each set is scored against the retrain bank with the ε-based forgetting quality F and the final score of the
NeurIPS 2023 challenge, and KLOM on forget, retain and test examples (:mod:`attacks.forgetting`). **Verdict**: an
equivalence test (:mod:`attacks.equivalence`, ALGORITHMS.md §11): ``forgotten`` only when the method is shown to
keep less than ``attack.forgetting.margin`` of the original's shift away from retrained models (an interval from
a shift-back permutation test of F), ``not_forgotten`` when it is shown to keep more, ``inconclusive`` otherwise
or when the ``none`` control itself is not shown farther than the margin (no power). The controls' scores and
calibrations are stored too (``forgetting_scores``, ``forgetting_calibrations``). With
``attack.forgetting.ulira``, U-LiRA on shadow pairs (:mod:`attacks.ulira_audit`) joins the rule: a method whose
U-LiRA AUC exceeds the retrain control's (the interval of the paired difference above 0) is ``not_forgotten``
whatever F says.
"""

from __future__ import annotations

import copy
import hashlib
import time
from typing import Any

import numpy as np
import torch

from attacks.context import AuditContext
from attacks.equivalence import DEFAULT_SHIFTS, Calibration, verdict_and_calibrations
from attacks.forgetting import (
    epsilon_points,
    epsilons,
    final_score,
    klom,
    klom_median_interval,
    summarize,
)
from attacks.retrain_bank import RetrainBank
from duck._version import __version__
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.store import JSON, NPZ, ArtifactSpec, Codec, Store, has_arrays
from duck.training import data_parallel_size, training_trainer_settings
from duck.unlearn import create_unlearner, get_unlearner_class


class OriginalBank(RetrainBank):
    """R models trained on the whole training set with their own seeds: the ``none`` control (models that saw
    every forget example); one bank per setup, whatever the forget set."""

    folder = "original_banks"
    label = "original bank"
    role = "original_bank"
    size_setting = "attack.forgetting.n_unlearned"

    def extra_spec(self) -> dict[str, Any]:
        return {"kind": "original"}


def _weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in model.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


#: the arrays of one stored unlearning run (:meth:`attacks.context.AuditContext.model_phi` and its time)
RUN_ARRAYS = ("phi_train", "phi_test", "correct_train", "correct_test", "time_s")


def unlearned_set_spec(ctx: AuditContext, original: Classifier) -> ArtifactSpec:
    """What an unlearned set depends on (the store entry of its runs)."""
    spec = {"original": _weights_digest(original), "method": ctx.method, "hparams": ctx.hparams,
            "forget": ctx.scenario.forget_hash, "data": ctx.data.fingerprint(),
            "trainer": training_trainer_settings(ctx.trainer_cfg), "version": __version__}
    if get_unlearner_class(ctx.method).data_parallel:  # DUCK under DDP: other sample order, other weights
        world = data_parallel_size(ctx.trainer_cfg)
        if world > 1:
            spec["ddp_processes"] = world
    return ArtifactSpec("unlearned_sets", 1, spec)


def unlearned_set(ctx: AuditContext, original: Classifier, original_acc: dict[str, float], n: int,
                  progress: bool = False) -> dict[str, Any]:
    """N runs of the job's method from ``original`` (seeds ``ctx.seed + i``): stacked φ and correctness
    ``(N, samples)``, each run stored as soon as it is done (an interrupted set resumes); a concurrent audit of
    the same set waits on the entry's lock, then reuses the runs."""
    from tqdm.auto import tqdm

    entry = Store(ctx.cache_dir).open(unlearned_set_spec(ctx, original), label=f"unlearned set of {ctx.method}")
    names = [f"run_{i:03d}.npz" for i in range(n)]
    with entry.lock(waiting=f"the runs of {ctx.method} in {entry.dir} are being computed by another job; waiting"):
        runs = [entry.read(name, NPZ, has_arrays(*RUN_ARRAYS)) for name in names]
        missing = [i for i, run in enumerate(runs) if run is None]
        if missing:
            print(f"forgetting audit: {len(missing)} of the {n} runs of {ctx.method} from the original to compute "
                  f"({n - len(missing)} cached)", flush=True)
            udata = ctx.unlearn_data(original_acc)
        for count, i in enumerate(tqdm(missing, desc=f"unlearning runs ({ctx.method})", disable=not progress)):
            t_run = time.perf_counter()
            unlearner = create_unlearner(ctx.method, copy.deepcopy(original), udata, ctx.hparams,
                                         seed=ctx.seed + i, trainer_cfg=ctx.trainer_cfg, progress=False)
            result = unlearner.unlearn()
            runs[i] = {**ctx.model_phi(result.model.to(ctx.device)), "time_s": np.array(result.time_s)}
            entry.save(names[i], runs[i], NPZ)
            left = len(missing) - count - 1
            if count == 0 and left:  # the time the user waits for, from the first run measured
                per = time.perf_counter() - t_run
                print(f"forgetting audit: {ctx.method} run {i + 1} of {n} from the original took {per:.2f} s; the "
                      f"other {left} (not cached) about {left * per:.0f} s", flush=True)
    stacked = {k: np.stack([r[k] for r in runs]) for k in RUN_ARRAYS[:4]}
    return {**stacked, "dir": str(entry.dir), "key": entry.key, "computed_now": len(missing),
            "unlearning_s": [float(r["time_s"]) for r in runs]}


def bank_set(bank: RetrainBank) -> dict[str, Any]:
    """A trained bank's φ and correctness in the layout of :func:`unlearned_set`."""
    t0 = time.perf_counter()
    info = bank.train()
    phi_train, phi_test, _ = bank.phi()
    correct = bank.accuracies()
    n_train = phi_train.shape[1]
    return {"phi_train": phi_train, "phi_test": phi_test, "correct_train": correct[:, :n_train],
            "correct_test": correct[:, n_train:], "dir": str(bank.dir), "key": bank.key,
            "computed_now": len(info["trained"]),
            "seconds": round(time.perf_counter() - t0, 3)}


def _utility(s: dict[str, Any], retain: np.ndarray, test_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-model retain accuracy (training samples of the retain set) and test accuracy (A_t's test split)."""
    return s["correct_train"][:, retain].mean(axis=1), s["correct_test"][:, test_ids].mean(axis=1)


def score_set(s: dict[str, Any], ref: dict[str, Any], ctx: AuditContext, level: float | None,
              klom_ids: dict[str, np.ndarray]) -> dict[str, Any]:
    """F, the final score and KLOM of set ``s`` against the retrain bank ``ref`` (the verdict's intervals come
    from :mod:`attacks.equivalence`); with ``level``, jackknife intervals for each split's KLOM median
    (:func:`attacks.forgetting.klom_median_interval`)."""
    sc = ctx.scenario
    forget, retain = np.asarray(sc.forget_idx), np.asarray(sc.retain_idx)
    test_ids = (np.asarray(sc.test_retain_idx) if sc.test_retain_idx is not None
                else np.arange(s["phi_test"].shape[1]))
    u_f, r_f = s["phi_train"][:, forget], ref["phi_train"][:, forget]
    n_u, n_r = u_f.shape[0], r_f.shape[0]
    ra_u, ta_u = _utility(s, retain, test_ids)
    ra_r, ta_r = _utility(ref, retain, test_ids)

    eps = epsilons(u_f, r_f)
    q = float(epsilon_points(eps, n_u).mean())
    out: dict[str, Any] = {
        "quality": q, "final_score": final_score(q, ra_u, ra_r, ta_u, ta_r),
        "epsilon": {"median": float(np.median(eps)), "p95": float(np.percentile(eps, 95))},
        "retain_acc": float(ra_u.mean()), "test_acc": float(ta_u.mean()), "n_models": int(n_u),
        "retain_accs": ra_u.tolist(), "test_accs": ta_u.tolist()}
    k = min(n_u, n_r)  # KLOM compares as many models a side (the reference asserts it)
    klom_pairs = {"forget": (u_f[:k], r_f[:k]),
                  "retain": (s["phi_train"][:k, klom_ids["retain"]], ref["phi_train"][:k, klom_ids["retain"]]),
                  "test": (s["phi_test"][:k, klom_ids["test"]], ref["phi_test"][:k, klom_ids["test"]])}
    out["klom"] = {split: summarize(klom(pu, pr)) for split, (pu, pr) in klom_pairs.items()}
    if level is not None:
        for split, (pu, pr) in klom_pairs.items():  # the median's interval: models left out, KLOM recomputed
            _, lo, hi = klom_median_interval(pu, pr, level)
            out["klom"][split]["median_ci"] = None if lo is None else [lo, hi]
        out["ci"] = f"KLOM: delete-one-pair jackknife over models, {100 * level:g} %"
    return out


def cached_score(ctx: AuditContext, s: dict[str, Any], ref: dict[str, Any], level: float | None,
                 klom_ids: dict[str, np.ndarray]) -> dict[str, Any]:
    """:func:`score_set` of a control against the retrain bank, stored (``forgetting_scores``): the controls of a
    forget set score the same for every method, so a second method's audit scores only its own runs. A set or
    bank computed (even partly) now is scored again."""
    spec = {"set": s["key"], "ref": ref["key"], "level": level, "forget": ctx.scenario.forget_hash,
            "klom": {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in klom_ids.items()}}
    entry = Store(ctx.cache_dir).open(ArtifactSpec("forgetting_scores", 3, spec), label="forgetting score")
    out, _ = entry.get_or_compute("score.json", lambda: score_set(s, ref, ctx, level, klom_ids), JSON,
                                  reuse=not s["computed_now"] and not ref["computed_now"])
    return out


def _ulira_separated(ulira: dict[str, Any] | None) -> bool:
    """Does U-LiRA tell the method's shadows from retrained ones better than the retrain control's (the interval
    of the paired AUC difference, method minus retrain control, above 0)?"""
    diff = (ulira or {}).get("auc_minus_retrain")
    return bool(diff and diff["ci"][0] > 0)


def _calibration_entry(ctx: AuditContext, name: str, sets: dict[str, dict[str, Any]], ref: dict[str, Any],
                       opts: dict[str, Any]) -> Any:
    """The store entry of control ``name``'s calibration (``forgetting_calibrations``)."""
    spec = {"set": sets[name]["key"], "ref": ref["key"], "none": sets["none"]["key"], "retrain": sets["retrain"]["key"],
            "forget": ctx.scenario.forget_hash, "margin": opts["margin"], "replicates": opts["replicates"],
            "seed": opts["seed"], "examples": opts["calibration_examples"], "level": opts["ci_level"],
            "shifts": list(DEFAULT_SHIFTS)}
    return Store(ctx.cache_dir).open(ArtifactSpec("forgetting_calibrations", 6, spec), label="verdict calibration")


def _load_calibration(path: Any) -> Calibration:
    with np.load(path, allow_pickle=False) as f:
        meta = np.asarray(f["meta"], dtype=np.int64)
        return Calibration(np.asarray(f["shifts"]), np.asarray(f["location_z"]), np.asarray(f["f_shifts"]),
                           np.asarray(f["samples"]), float(f["observed"]), *map(int, meta))


def _save_calibration(path: Any, c: Calibration) -> None:
    NPZ.save(path, {"shifts": c.shifts, "location_z": c.location_z, "f_shifts": c.f_shifts, "samples": c.samples,
                    "observed": np.array(c.observed),
                    "meta": np.array([c.n_models, c.n_bank, c.n_examples, c.n_scored])})


#: a verdict calibration (:class:`attacks.equivalence.Calibration`) in one ``.npz`` file
CALIBRATION = Codec(load=_load_calibration, save=_save_calibration)


def verdict_block(ctx: AuditContext, sets: dict[str, dict[str, Any]], ref: dict[str, Any], scores: dict[str, Any]
                  ) -> dict[str, Any]:
    """The equivalence verdict (:func:`attacks.equivalence.verdict_and_calibrations`) of the method's runs
    against the retrain bank with the two controls; the controls' calibrations cached (they serve every method
    of the forget set)."""
    opts = ctx.attack.forgetting
    forget = np.asarray(ctx.scenario.forget_idx)
    phi = {name: s["phi_train"][:, forget] for name, s in sets.items()}
    cached, entries = {}, {}
    for name in ("retrain", "none"):
        entries[name] = _calibration_entry(ctx, name, sets, ref, opts)
        if not sets[name]["computed_now"] and not ref["computed_now"]:
            cal = entries[name].read("calibration.npz", CALIBRATION)
            if cal is not None:
                cached[name] = cal
    m = scores["method"]
    accuracies = {"retain": (m["retain_accs"], scores["retrained"]["retain_accs"]),
                  "test": (m["test_accs"], scores["retrained"]["test_accs"])}
    record, cals = verdict_and_calibrations(
        phi["method"], ref["phi_train"][:, forget], phi["retrain"], phi["none"], margin=opts["margin"],
        level=opts["ci_level"], replicates=opts["replicates"], seed=opts["seed"],
        max_examples=opts["calibration_examples"], accuracies=accuracies,
        max_utility_loss=opts["max_utility_loss"], calibrations=cached)
    for name in ("retrain", "none"):  # deterministic: a concurrent job writes the same file (atomically)
        if name not in cached:
            entries[name].save("calibration.npz", cals[name], CALIBRATION)
    return record


def forgetting_banks(ctx: AuditContext) -> dict[str, RetrainBank]:
    """The forgetting audit's banks of the job: ``retrained`` (R models on the retain set) and, with the
    controls, ``retrain`` (N more, the next seed) and ``none`` (N originals)."""
    opts = ctx.attack.forgetting
    n, r, seed = int(opts["n_unlearned"]), int(opts["n_retrained"]), int(opts["seed"])
    common = dict(mode=ctx.attack.mode, chunk_size=ctx.attack.chunk_size, trainer_cfg=ctx.trainer_cfg,
                  threads=ctx.attack.threads, device=ctx.device, augment=ctx.data.augment,
                  progress=ctx.progress)
    retain = ctx.scenario.retain_idx
    banks = {"retrained": RetrainBank(ctx.cache_dir, ctx.data, ctx.model_factory, ctx.recipe, retain, n_models=r,
                                      seed=seed, **common)}
    if opts["controls"]:
        banks["retrain"] = RetrainBank(ctx.cache_dir, ctx.data, ctx.model_factory, ctx.recipe, retain, n_models=n,
                                       seed=seed + 1, **common)
        banks["none"] = OriginalBank(ctx.cache_dir, ctx.data, ctx.model_factory, ctx.recipe,
                                     np.arange(len(ctx.data.train)), n_models=n, seed=seed, **common)
    return banks


def forgetting_audit(ctx: AuditContext, original: Classifier, original_acc: dict[str, float],
                     target: Classifier | None = None, oracle: Classifier | None = None) -> dict[str, Any]:
    """The ``forgetting`` block of ``audit.json`` for the job's method and forget set (module docstring)."""
    opts = ctx.attack.forgetting
    if ctx.method is None or ctx.recipe is None:
        raise DuckInputError("the forgetting audit needs the method and the training recipe (duck-run, or "
                             "duck-unlearn audit=true)")
    t0 = time.perf_counter()
    n, r = int(opts["n_unlearned"]), int(opts["n_retrained"])
    retain = ctx.scenario.retain_idx
    banks = forgetting_banks(ctx)
    ref = bank_set(banks["retrained"])
    sets: dict[str, dict[str, Any]] = {"method": unlearned_set(ctx, original, original_acc, n, ctx.progress)}
    if opts["controls"]:
        sets["retrain"] = bank_set(banks["retrain"])
        sets["none"] = bank_set(banks["none"])
    rng = np.random.default_rng([int(opts["seed"]), 0xF0E7])  # the KLOM subsets of retain / test examples
    cap = int(opts["klom_max_examples"])
    klom_ids = {name: np.sort(rng.permutation(ids)[:cap]) for name, ids in
                (("retain", np.asarray(retain)), ("test", np.arange(len(ctx.data.test))))}
    level = float(opts["ci_level"]) if opts["intervals"] else None
    scores = {name: (cached_score(ctx, s, ref, level, klom_ids) if name != "method" else
                     score_set(s, ref, ctx, level, klom_ids)) for name, s in sets.items()}
    ulira = None
    if opts["ulira"]:
        from attacks.ulira_audit import ulira_audit

        ulira = ulira_audit(ctx, target, oracle)
    t_verdict = time.perf_counter()
    if opts["controls"]:
        sc = ctx.scenario
        test_ids = (np.asarray(sc.test_retain_idx) if sc.test_retain_idx is not None
                    else np.arange(ref["phi_test"].shape[1]))
        ra_r, ta_r = _utility(ref, np.asarray(retain), test_ids)
        scores["retrained"] = {"retain_accs": ra_r.tolist(), "test_accs": ta_r.tolist()}
        verdict = verdict_block(ctx, sets, ref, scores)
        del scores["retrained"]
    else:
        verdict = {"verdict": "inconclusive",
                   "rule": "the controls are off (attack.forgetting.controls=false): without the none control the "
                           "original's shift, hence the margin, is unknown, so no verdict is possible"}
    if _ulira_separated(ulira):
        d = ulira["auc_minus_retrain"]
        verdict["verdict"] = "not_forgotten"
        verdict["rule"] = (f"U-LiRA tells the method's shadows from retrained ones better than the retrain control's: "
                           f"AUC difference {d['value']:.3f} [{d['ci'][0]:.3f}, {d['ci'][1]:.3f}] above 0; "
                           f"F's test: {verdict['rule']}")
    method = scores.pop("method")
    for key in ("retain_accs", "test_accs"):
        method.pop(key, None)
        for c in scores.values():
            c.pop(key, None)
    for name, c in verdict.get("controls", {}).items():  # each control's F interval and equivalent shift
        scores[name].update({k: c[k] for k in ("quality_ci", "shift", "shift_ci", "shift_beyond", "decision")})
    block = {**method, **{k: v for k, v in verdict.items() if k != "controls"}, "method": ctx.method,
             "n_unlearned": n, "n_retrained": r, "ci_level": float(opts["ci_level"]),
             "controls": scores, "sets": {name: {k: s[k] for k in ("dir", "computed_now")} for name, s in
                                          {**sets, "retrained": ref}.items()},
             "unlearning_s": sets["method"]["unlearning_s"], "verdict_s": round(time.perf_counter() - t_verdict, 3),
             "time_s": round(time.perf_counter() - t0, 3),
             "estimators": "epsilon score F and final score: google-deepmind/unlearning_evaluation metric.py; "
                           "KLOM: RoyRin/data-unlearning-bench eval.py, KL(P_U || P_R); U-LiRA: Hayes et al. 2024, "
                           "shadow pairs, leave one pair out; verdict: equivalence test (docs/audit.md, forgetting verdict)"}
    if ulira is not None:
        block["ulira"] = ulira
    return block
