"""The cache of trained originals and retrained oracles: a model trained once for a setup is reused by every
later job of the same setup (the artifact store's ``models`` entries: ``<cache_dir>/store-v1/models/<key>/``
with ``model.ckpt`` and ``metrics.json``)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from duck._version import __version__
from duck.errors import DuckInputError
from duck.io import DISK_ERRNOS, atomic_save_json, disk_error, remove_stale_temps, temp_name
from duck.metrics import metrics_record
from duck.models import Classifier
from duck.pipeline.job import Job
from duck.pipeline.stages import evaluate, fit_model, save_model
from duck.store import ArtifactSpec, Store
from duck.training import data_parallel_size, training_trainer_settings
from duck.utils import warn_line

#: the store's kind of a cached original or oracle, and its version
MODEL_KIND, MODEL_VERSION = "models", 1


def cache_spec(job: Job, retrain: bool) -> ArtifactSpec:
    """What a trained model depends on: data config and content (``DatasetSplits.fingerprint``), model, recipe,
    seed, precision and every other ``trainer.*`` setting that changes training (gradient clipping,
    accumulation, ...: ``duck.training.training_trainer_settings``), the number of DDP processes where there
    are several (``trainer.devices`` x ``num_nodes``), and the forget ids for an oracle."""
    training = training_trainer_settings(job.trainer_cfg, precision=False)
    world = data_parallel_size(job.trainer_cfg)  # DDP: another sample order per step, other weights
    spec = {"data": job.data_cfg, "model": job.model_cfg, "recipe": job.recipe_cfg,
            "seed": int(job.seed), "precision": str(job.trainer_cfg.get("precision")), "version": __version__,
            "forget": job.scenario.forget_hash if retrain else None,
            **({"trainer": training} if training else {}),  # absent by default: existing cache keys unchanged
            **({"ddp_processes": world} if world > 1 else {}),
            "content": job.data.fingerprint()}
    return ArtifactSpec(MODEL_KIND, MODEL_VERSION, spec)


def cache_key(job: Job, retrain: bool) -> str:
    """The store key of the job's original (or, with ``retrain``, its oracle): :func:`cache_spec`'s."""
    return cache_spec(job, retrain).key


def link_or_copy(src: Path, dst: Path) -> None:
    """Hard-link (else copy) ``src`` to ``dst`` through a temporary name, replacing ``dst`` atomically. A ``dst``
    that already is ``src`` (a hard link to it) is left as it is: renaming one link of a file over another link
    of the same file does nothing and would leave the temporary name behind."""
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.exists() and os.path.samefile(src, dst):
            return
        remove_stale_temps(dst)
    except OSError as e:
        if e.errno in DISK_ERRNOS:
            raise disk_error(dst, e) from None
        raise
    tmp = temp_name(dst)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        if e.errno in DISK_ERRNOS:
            raise disk_error(dst, e) from None
        raise


def check_cached_metrics(metrics: Any) -> None:
    """Raise ``ValueError`` unless a cached ``metrics.json`` holds what a run reads from it (a dict with the
    :func:`record_args` fields and an ``acc`` dict with a numeric ``test`` accuracy)."""
    if not isinstance(metrics, dict):
        raise ValueError(f"metrics.json holds a {type(metrics).__name__}, not an object")
    missing = [k for k in ("method", "dataset", "model", "seed", "acc", "time_s", "epochs") if k not in metrics]
    if missing:
        raise ValueError(f"metrics.json lacks {missing}")
    acc = metrics["acc"]
    if not isinstance(acc, dict) or not isinstance(acc.get("test"), (int, float)) or isinstance(acc["test"], bool):
        raise ValueError(f"metrics.json has no usable accuracies: acc={acc!r}")
    if metrics["time_s"] is not None and not isinstance(metrics["time_s"], (int, float)):
        raise ValueError(f"metrics.json time_s={metrics['time_s']!r} is not a number")


def record_args(m: dict[str, Any]) -> dict[str, Any]:
    """The :func:`duck.metrics.metrics_record` arguments a stored record holds."""
    return {"method": m["method"], "data_name": m["dataset"], "model_name": m["model"], "seed": m["seed"],
            "acc": m["acc"], "time_s": m["time_s"], "epochs": m["epochs"]}


def load_cached(job: Job, ckpt: Path) -> Classifier:
    """A cached model of the job's setup (its manifest checked against the job)."""
    from duck.pipeline.models import load_model

    model, _, _ = load_model(job, ckpt)
    return model.to(job.device)


def train_or_reuse(job: Job, role: str, out: Path, original_acc: dict[str, float] | None = None,
                   check: Callable[[dict[str, float]], None] | None = None) -> tuple[Classifier, dict[str, Any], bool]:
    """The original (``role="original"``) or the oracle (``"retrained"``), from the cache when it holds one
    for the same setup; the checkpoint and metrics.json also go to ``out/role``. ``check(accuracies)`` runs
    before anything is written (the trust check of the original: a refused model is neither cached nor
    copied)."""
    retrain = role == "retrained"
    if job.cache_dir is None:
        raise DuckInputError("this job has no cache_dir; pass cache_dir=DIR")
    entry = Store(job.cache_dir).open(cache_spec(job, retrain), label=f"cached {role} model")
    cached = entry.dir
    ckpt, mfile = entry.path("model.ckpt"), entry.path("metrics.json")
    reused = False
    # one job trains a cache entry at a time; a second job of the same setup waits and then reuses it
    with entry.lock(waiting=f"the {role} model {cached} is being trained by another job; waiting"):
        if job.reuse_cached and ckpt.is_file() and mfile.is_file():
            try:
                model = load_cached(job, ckpt)
                metrics = json.loads(mfile.read_text())
                check_cached_metrics(metrics)
                reused = True
            except (DuckInputError, ValueError, UnicodeDecodeError, OSError) as e:
                warn_line(f"ignoring unusable cached model {ckpt} ({e}); training again")
        if not reused:
            # the original's metrics are computed against the scenario so that its A_f / AUS can be reported
            model, metrics = fit_model(job, retrain, original_acc=original_acc)
            if check is not None:
                check(metrics["acc"])
            save_model(cached, "model.ckpt", model, metrics, job)
    if reused:  # the cached metrics.json holds the scenario the model was first trained for: evaluate on this one
        acc = evaluate(job, model)
        if check is not None:
            check(acc)
        metrics = metrics_record(**{**record_args(metrics), "acc": acc, "scenario": job.scenario,
                                    "original_acc": original_acc if retrain else acc})
    if retrain and original_acc is not None:  # AUS of the oracle against this run's original
        metrics = metrics_record(**{**record_args(metrics), "original_acc": original_acc, "scenario": job.scenario})
    link_or_copy(ckpt, out / role / "model.ckpt")
    atomic_save_json(out / role / "metrics.json", {**metrics, "reused_from_cache": reused})
    return model, metrics, reused
