"""The reference models a method may learn from (:class:`duck.unlearn.ReferenceModels`; ALGORITHMS.md §11),
trained and cached by the pipeline on demand:

- ``oracle(seed, pool)``: a :class:`~attacks.retrain_bank.RetrainBank` of ``pool`` models retrained on the job's
  retain set with bank seed ``seed`` (oracle matching's targets), each model trained on first use (model k of a
  retrain bank does not depend on the bank's size). The forgetting audit's own banks use
  ``attack.forgetting.seed`` and the next seed: an oracle bank with either seed is refused there (the method
  would match the very models it is judged against).
- ``shadows(n, seed)``: the LiRA shadow bank of ``n`` models (random halves of the training set; the audit's own
  bank when the settings agree), its keep matrix and its training time (datamodel matching's data).
- ``subsets(n, keep_fraction, seed)``: a :class:`~attacks.subset_bank.SubsetBank` of ``n`` models, each trained on
  a random ``keep_fraction`` of the training set, with every example's logits under the models that left it out
  (subset matching's targets).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

from duck.pipeline.job import Job
from duck.unlearn import ModelBank, ReferenceModels, get_unlearner_class


def default_cache_dir() -> Path:
    """``$DUCK_CACHE_DIR`` or ``~/.cache/duck-unlearn``, as the command-line jobs default to (``cache_dir``)."""
    return Path(os.environ.get("DUCK_CACHE_DIR") or Path.home() / ".cache" / "duck-unlearn")


def _cache_dir(job: Job) -> Path:
    """The job's cache directory; the API's jobs name none: :func:`default_cache_dir`."""
    return Path(job.cache_dir) if job.cache_dir is not None else default_cache_dir()


def _bank_settings(job: Job) -> dict[str, Any]:
    a = job.audit.attack if job.audit is not None else None
    return {"mode": a.mode if a else "auto", "chunk_size": a.chunk_size if a else 16,
            "threads": a.threads if a else "auto", "trainer_cfg": job.trainer_cfg, "device": job.device,
            "augment": job.data.augment, "progress": job.progress}


def _check_recipe(job: Job) -> None:
    if job.recipe is None:
        from duck.errors import DuckInputError

        raise DuckInputError(f"method {job.method!r} learns from reference models trained with the original's recipe "
                             "(models retrained without the forget set / the shadow bank): pass recipe=... (a "
                             "conf/recipe name such as 'digits', or your training settings)")


def oracle_bank(job: Job, retain: np.ndarray, seed: int, pool: int) -> Any:
    """The :class:`~attacks.retrain_bank.RetrainBank` of ``pool`` oracles (at least 2) retrained on ``retain`` with
    bank seed ``seed``, untrained; refused with the forgetting audit's own seeds."""
    from attacks.retrain_bank import RetrainBank

    f = job.audit.attack.forgetting if job.audit is not None else None
    if f is not None and f["enabled"] and int(seed) in (int(f["seed"]), int(f["seed"]) + 1):
        from duck.errors import DuckInputError

        raise DuckInputError(f"method.oracle_seed={seed} is the seed of the forgetting audit's retrain bank or "
                             f"retrain control (attack.forgetting.seed={f['seed']} and the next): the oracles "
                             "would be the very models the method is judged against; pick another oracle_seed")
    # a bank holds at least 2 models; only those asked for are trained (num_oracles=1: model 0 alone)
    return RetrainBank(_cache_dir(job), job.data, job.model_factory, job.recipe, retain,
                       n_models=max(int(pool), 2), seed=int(seed), **_bank_settings(job))


def shadow_bank(job: Job, n: int, seed: int) -> Any:
    """The LiRA :class:`~attacks.shadow.ShadowBank` of ``n`` models on random halves of the training set, untrained
    (the audit's own bank when the settings agree)."""
    from attacks.shadow import ShadowBank

    return ShadowBank(_cache_dir(job), job.data, job.model_factory, job.recipe, n_shadow=int(n), seed=int(seed),
                      pool="train", **_bank_settings(job))


def subset_bank(job: Job, n: int, keep_fraction: float, seed: int) -> Any:
    """The :class:`~attacks.subset_bank.SubsetBank` of ``n`` models on random ``keep_fraction`` shares, untrained."""
    from attacks.subset_bank import SubsetBank

    return SubsetBank(_cache_dir(job), job.data, job.model_factory, job.recipe, n_models=int(n),
                      keep_fraction=float(keep_fraction), seed=int(seed), **_bank_settings(job))


def reference_banks(job: Job) -> dict[str, tuple[Any, list[int] | None]]:
    """The banks the job's method will ask for (:meth:`duck.unlearn.Unlearner.reference_requests` with the
    job's parameters), untrained and keyed as the runs will key them, each with the models its runs will load
    (None: all; :meth:`~duck.unlearn.Unlearner.reference_models_used` for the job's run and the forgetting
    audit's N runs, seeds ``seed .. seed + N − 1``), for array tasks that build them ahead of the runs
    (``attack.num_shards``, :func:`attacks.bank_shards.train_bank_slices`); ``{}`` for a method that learns
    from none."""
    if job.method is None or job.scenario is None:
        return {}
    cls = get_unlearner_class(job.method)
    if not cls.needs:
        return {}
    _check_recipe(job)
    hp = cls.params.resolve(job.hparams, job.data.name, job.scenario.kind)
    retain = np.asarray(job.scenario.retain_idx)
    f = job.audit.attack.forgetting if job.audit is not None else None
    runs = int(f["n_unlearned"]) if f is not None and f["enabled"] else 1
    used = cls.reference_models_used(hp, [job.seed + i for i in range(runs)])
    build = {"oracle": lambda seed, pool: oracle_bank(job, retain, seed, pool), "shadows": lambda n, seed:
             shadow_bank(job, n, seed), "subsets": lambda n, kf, seed: subset_bank(job, n, kf, seed)}
    names = {"oracle": "oracles", "shadows": "shadow bank", "subsets": "subset bank"}
    return {f"{job.method}: {names[need]}": (build[need](*args), used.get(need))
            for need, args in cls.reference_requests(hp).items()}


def reference_models(job: Job, retain_idx: np.ndarray | None = None) -> ReferenceModels | None:
    """The job's reference models for its method (None when the method needs none)."""
    needs = get_unlearner_class(job.method).needs
    if not needs:
        return None
    _check_recipe(job)
    retain = np.asarray(job.scenario.retain_idx if retain_idx is None else retain_idx)

    def oracle(seed: int, pool: int) -> ModelBank:
        bank = oracle_bank(job, retain, seed, pool)

        def load(k: int) -> Any:  # oracle k, trained on first use (a run of per-run matching needs one of them)
            bank.train_models([int(k)])
            return bank.load_shadow(int(k)).to(job.device)

        return ModelBank(load=load, one_off_s=bank.train_seconds())

    @functools.cache  # one bank check and read per job: a forgetting audit's N runs share these references
    def shadows(n: int, seed: int) -> ModelBank:
        bank = shadow_bank(job, n, seed)
        bank.train()
        return ModelBank(load=lambda k: bank.load_shadow(int(k)).to(job.device), one_off_s=bank.train_seconds(),
                         keep=np.asarray(bank.keep))

    @functools.cache  # the packed OUT logits read once per job, not once per run
    def subsets(n: int, keep_fraction: float, seed: int) -> ModelBank:
        bank = subset_bank(job, n, keep_fraction, seed)
        logits, offsets = bank.out_logits()  # trains the missing models first
        return ModelBank(load=lambda k: bank.load_shadow(int(k)).to(job.device), one_off_s=bank.train_seconds(),
                         keep=np.asarray(bank.keep), out_logits=logits, out_offsets=offsets)

    return ReferenceModels(oracle=oracle if "oracle" in needs else None,
                           shadows=shadows if "shadows" in needs else None,
                           subsets=subsets if "subsets" in needs else None)
