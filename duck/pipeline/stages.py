"""The stages of a job, each on a resolved :class:`~duck.pipeline.job.Job`: train a model, evaluate it, refuse
an untrustworthy original, unlearn, and the records and files they produce (metrics.json records, manifests,
``forget_ids.txt``, the summary table)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np

from attacks.context import AuditContext
from duck.checkpoint import build_manifest, save_checkpoint
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_write_text
from duck.metrics import aus_inputs, forget_target_met, metrics_record, split_accuracies
from duck.models import Classifier
from duck.pipeline.job import Job
from duck.report.tables import markdown_table
from duck.training import train_classifier
from duck.unlearn import UnlearnData, UnlearnResult, create_unlearner
from duck.utils import warn_line


def evaluate(job: Job, model: Classifier) -> dict[str, float]:
    """Split accuracies of ``model`` for the job's scenario (:func:`duck.metrics.split_accuracies`)."""
    return split_accuracies(model, job.data, job.scenario, device=job.device, batch_size=job.eval_batch_size)


def fit_model(job: Job, retrain: bool, original_acc: dict[str, float] | None = None
              ) -> tuple[Classifier, dict[str, Any]]:
    """Train the original (``retrain=False``) or the oracle on the retain set, and evaluate it.

    Returns ``(model on the job's device, metrics record)``."""
    if job.recipe is None:
        raise DuckInputError("this job has no training recipe; pass recipe=NAME")
    L.seed_everything(job.seed, workers=True, verbose=False)  # the initial weights depend on the seed too
    model = job.build_model()
    scenario = job.scenario
    indices = scenario.retain_idx if retrain else None
    model, seconds = train_classifier(model, job.data.train, job.recipe, indices=indices, augment=job.data.augment,
                                      seed=job.seed, trainer_cfg=job.trainer_cfg, progress=job.progress)
    model.to(job.device)
    acc = evaluate(job, model)
    if original_acc is None and scenario is not None and not retrain:
        original_acc = acc  # the original is its own reference
    metrics = metrics_record(method="retrain" if retrain else "original", data_name=job.data.name,
                             model_name=job.model_name, seed=job.seed, acc=acc, original_acc=original_acc,
                             scenario=scenario, time_s=seconds, epochs=job.recipe.epochs)
    return model, metrics


def manifest_of(job: Job, model: Classifier, method: str, **extra: Any) -> dict[str, Any]:
    """The manifest of a checkpoint the job writes (model spec, data set, method, scenario, config, seed)."""
    return build_manifest(model.spec(), job.data.name, method=method,
                          scenario=job.scenario.summary() if job.scenario else None, config=job.config,
                          seed=job.seed, **extra)


def save_model(directory: Path, name: str, model: Classifier, metrics: dict[str, Any], job: Job) -> Path:
    """Write ``directory/name`` (checkpoint with manifest) and ``directory/metrics.json`` atomically."""
    path = save_checkpoint(directory / name, model.state_dict(), manifest_of(job, model, metrics["method"]))
    atomic_save_json(directory / "metrics.json", metrics)
    return path


def check_original(job: Job, acc: dict[str, float], what: str = "the original") -> None:
    """Refuse a model that cannot be trusted as the starting point (issue 24 item 5): test accuracy (the
    training accuracy where the job has no test set) below ``min_acc_factor / num_classes``, or off by more
    than ``expect_acc_tol`` from ``expect_acc``. The message names the likely causes and the settings."""
    split = "test" if "test" in acc else "train_retain" if "train_retain" in acc else "train"
    value = float(acc[split])
    trust, k = job.trust, job.data.num_classes
    causes = job.hint("prep")
    if trust.expect_acc is not None and abs(value - trust.expect_acc) > trust.expect_acc_tol:
        raise DuckInputError(
            f"{what} measures {split} accuracy {value:.4f} here but expect_acc={trust.expect_acc:g} "
            f"(tolerance expect_acc_tol={trust.expect_acc_tol:g}): the data or the model is not prepared as in "
            f"your pipeline; check {causes}")
    threshold = trust.min_acc_factor / k
    if value < threshold:
        raise DuckInputError(
            f"{what} is near chance: {split} accuracy {value:.4f} < min_acc_factor/num_classes = "
            f"{trust.min_acc_factor:g}/{k} = {threshold:.4f}; unlearning or auditing it would mean nothing. Likely "
            f"causes: {causes}; if it was trained here, the recipe (recipe.epochs, recipe.optimizer.lr). "
            f"Pass expect_acc=<its accuracy in your pipeline> to check a known value, or {job.hint('min_acc')} to "
            "skip")


def check_unlearned(job: Job, acc: dict[str, float], original_acc: dict[str, float]) -> None:
    """Refuse an unlearned model that collapsed (finite weights, predictions no better than a constant): its
    retained accuracy (``test_retain`` for class removal, else ``test``; ``train_retain`` without a test set)
    below ``min_acc_factor / k`` for the k classes that data holds, and below the original's on that split (a
    model no worse than its original was not collapsed by unlearning), as :func:`check_original` refuses such an
    original. Nothing is written; the message names the method's settings and the way to keep it."""
    split = next((s for s in (("test_retain",) if job.scenario.is_class_removal else ()) + ("test", "train_retain")
                  if s in acc), None)
    kept = job.data.num_classes - (len(job.scenario.forget_classes or ())
                                   if job.scenario.is_class_removal and split != "test" else 0)
    if split is None or kept < 2 or job.trust.min_acc_factor <= 0:
        return
    value, threshold = float(acc[split]), job.trust.min_acc_factor / kept
    before = float(original_acc.get(split, float("nan")))
    if value < threshold and not value >= before:  # near chance, and unlearning made it so (nan: no original value)
        raise DuckInputError(
            f"unlearning with {job.method} collapsed the model: {split} accuracy {value:.4f} < min_acc_factor/{kept} "
            f"retained classes = {threshold:.4f} (the original: {before:.4f}); nothing was written. Lower "
            f"{job.hint('step')}, or pass {job.hint('min_acc')} to keep it")


#: refuse when the first BatchNorm layer sees inputs whose per-channel statistics differ from its running
#: statistics by more than this (mean |mean shift| in running std, or mean |log variance ratio|): measured on
#: Fashion-MNIST, the right preparation gives 0.002 / 0.04, ImageNet's normalisation instead of the data's
#: 0.56 / 0.93 (accuracy 0.15 instead of 0.81), (x - 0.5) / 0.5 0.29 / 0.63, unnormalised pixels 0.18 / 2.1
INPUT_SHIFT_LIMIT = 0.5
#: warn (not refuse) above this: a user's 16x16 ImageFolder net trained on (x - 0.3) / 0.4 measures 0.014 / 0.034
#: with it and 0.35 / 0.34 with (x - 0.5) / 0.5 (test accuracy 0.711 instead of 0.986), under the limit; a
#: mean or standard deviation 0.05 off already gives 0.1-0.3. Heavy training augmentation can also move the
#: statistics by this much, hence a warning with the way to make it a check (expect_acc)
INPUT_SHIFT_WARN = 0.2
#: warn when unlearning raises the retained test accuracy A_t above the original's A_or by more than this: an
#: unlearned model far better than its original on the data it kept usually means the original was evaluated on
#: inputs prepared differently from its training, and the method's retain training adapted the model to them
ADAPTATION_WARN = 0.1


def _first_batchnorm(model: Classifier) -> tuple[str, Any] | None:
    """``(name, module)`` of the model's first BatchNorm layer with running statistics that were updated."""
    import torch

    for name, m in model.named_modules():
        if (isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats
                and m.running_var is not None):
            if m.num_batches_tracked is not None and int(m.num_batches_tracked) == 0:
                return None  # never trained: the statistics are the initial 0 / 1
            return name, m
    return None


def input_shift(model: Classifier, bn: Any, dataset: Any, device: Any, n: int = 512) -> tuple[float, float]:
    """``(mean shift, |log variance ratio|)`` of ``bn``'s inputs on up to ``n`` samples of ``dataset`` against
    its running statistics (per channel, averaged over channels)."""
    import torch

    from duck.metrics import predict_logits

    seen: dict[str, torch.Tensor] = {}

    def hook(_: Any, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().float()
        dims = [d for d in range(x.ndim) if d != 1]
        seen["mean"], seen["var"] = x.mean(dims), x.var(dims)

    rows = np.sort(np.random.default_rng(0).permutation(len(dataset))[:n])
    handle = bn.register_forward_pre_hook(hook)
    try:
        predict_logits(model, dataset, indices=rows, batch_size=len(rows), device=device)
    finally:
        handle.remove()
    scale = (bn.running_var.float() + bn.eps).sqrt()
    shift = float(((seen["mean"] - bn.running_mean.float()).abs() / scale).mean())
    log_var = float((seen["var"] / scale**2).clamp_min(1e-12).log().abs().mean())
    return shift, log_var


def check_inputs(job: Job, model: Classifier, what: str = "the original", n: int = 512) -> dict[str, Any] | None:
    """Refuse data prepared differently from the model's training data (wrong normalisation, channels or scale),
    read off the model itself: its first BatchNorm layer's running statistics are those of the inputs it was
    trained on; the same layer's statistics on up to ``n`` training samples, and ``n`` test samples, prepared
    by this job must match (:data:`INPUT_SHIFT_LIMIT`): a test set normalised differently from the training
    set is caught too. Models without BatchNorm running statistics (or whose statistics were never updated)
    are not checked (``None``); ``input_check=false`` skips it. Returns the measured statistics."""
    if not job.input_check:
        return None
    found = _first_batchnorm(model)
    if found is None:
        return None
    name, bn = found
    stats: dict[str, Any] = {"layer": name}
    splits = [("training", job.data.train)] + ([("test", job.data.test)] if job.data.test is not None else [])
    for split, dataset in splits:
        shift, log_var = input_shift(model, bn, dataset, job.device, n)
        stats[split] = {"mean_shift": round(shift, 4), "log_var_ratio": round(log_var, 4)}
        seen = (f"its first BatchNorm layer ({name.removeprefix('net.')}) sees per-channel means {shift:.2f} running "
                f"std away from its running statistics and variances {math.exp(log_var):.2f}x off")
        if max(shift, log_var) > INPUT_SHIFT_LIMIT:
            raise DuckInputError(
                f"the {split} data, as this job prepares them, do not look like the inputs {what} was trained on: "
                f"{seen} (limit {INPUT_SHIFT_LIMIT}); check {job.hint('prep')}; {job.hint('input_check')} skips this "
                "check")
        if max(shift, log_var) > INPUT_SHIFT_WARN and "warning" not in stats:
            stats["warning"] = (f"the {split} data may not be prepared as the data {what} was trained on: {seen} "
                                f"(refused above {INPUT_SHIFT_LIMIT}; the right preparation typically gives < 0.05); "
                                f"check {job.hint('prep')}; pass expect_acc=<the accuracy you measured> to make this "
                                "a check")
            warn_line(stats["warning"])
    return stats


def unlearn_data(job: Job, original_acc: dict[str, float]) -> UnlearnData:
    """What the job's method sees: the training data, the scenario, the original's accuracies, the recipe, a
    model factory and, for the methods that learn from them, the reference models
    (:func:`duck.pipeline.references.reference_models`)."""
    from duck.pipeline.references import reference_models

    return UnlearnData(train=job.data.train, scenario=job.scenario, num_classes=job.data.num_classes,
                       dataset_name=job.data.name, original_acc=original_acc, augment=job.data.augment,
                       recipe=job.recipe, model_factory=job.model_factory, references=reference_models(job))


def unlearn_model(job: Job, model: Classifier, original_acc: dict[str, float], earlier: Sequence[str] = ()
                  ) -> tuple[dict[str, Any], UnlearnResult]:
    """Unlearn ``model`` (in place) with the job's method and evaluate it: ``(metrics record, UnlearnResult)``.
    ``earlier``: warnings printed before (the input check's), recorded with the run's own in ``warnings``."""
    unlearner = create_unlearner(job.method, model, unlearn_data(job, original_acc), job.hparams, seed=job.seed,
                                 trainer_cfg=job.trainer_cfg, progress=job.progress)
    result = unlearner.unlearn()
    result.model.to(job.device)
    acc = evaluate(job, result.model)
    check_unlearned(job, acc, original_acc)
    target = unlearner.forget_target(float(unlearner.hp.get("tolerance", 0.01)))
    forget_acc = acc.get("train_forget")
    met = None if forget_acc is None else forget_target_met(forget_acc, target)
    metrics = metrics_record(method=job.method, data_name=job.data.name, model_name=job.model_name, seed=job.seed,
                             acc=acc, original_acc=original_acc, scenario=job.scenario, time_s=result.time_s,
                             epochs=round(result.epochs, 4), reached_target=result.reached_target,
                             forget_target=target, forget_target_met=met,
                             hparams=dict(unlearner.hp))  # the values used, presets resolved
    if "one_off_s" in result.info:  # reference models trained once per forget set (or setup), not per request
        metrics["one_off_s"] = round(float(result.info["one_off_s"]), 3)
    warnings = unlearning_warnings(job, metrics)
    for text in warnings:
        warn_line(text)
    if earlier or warnings:
        metrics["warnings"] = [*earlier, *warnings]
    return metrics, result


def unlearning_warnings(job: Job, metrics: dict[str, Any]) -> list[str]:
    """What makes an unlearning result doubtful although the job ran: a forget target missed at the end (also
    after a stopping rule reached it mid-way: ``reached_target`` is the rule's, ``forget_target_met`` the final
    model's), and a retained accuracy far above the original's (:data:`ADAPTATION_WARN`)."""
    out = []
    target, forget_acc = metrics.get("forget_target"), metrics["acc"].get("train_forget")
    if metrics.get("forget_target_met") is False and job.scenario.forget_target_rule == "zero":
        rule = (" (its stopping rule reached the target during unlearning; a later phase raised it again)"
                if metrics.get("reached_target") else "")
        out.append(f"{job.method}: the forget set's accuracy is {forget_acc:.4f} at the end, above the forget target "
                   f"{target:.4g}{rule}; see forget_target_met in metrics.json and the method's settings (more "
                   "epochs, a larger lr)")
    if "aus" in metrics and metrics["aus"] is not None:
        a_or, a_t, _ = aus_inputs(metrics["acc"], metrics["original_acc"], job.scenario)
        if a_t - a_or > ADAPTATION_WARN:
            out.append(f"the unlearned model is {a_t - a_or:.4f} more accurate on the retained test data than the "
                       f"original (A_t {a_t:.4f} vs A_or {a_or:.4f}): the original was probably evaluated on inputs "
                       f"prepared differently from its training and the method's retain training adapted the model "
                       f"to them, so the unlearned model may be worse in your own pipeline; check {job.hint('prep')}, "
                       "or pass expect_acc=<the accuracy you measured>")
    return out


def audit_context(job: Job) -> AuditContext:
    """The narrow view of ``job`` the audit's stages take (:class:`attacks.context.AuditContext`): the data, the
    forget set, the architecture, the recipe, ``attack.*``, the cache, and the method with its parameters as
    resolved once for the job and what it sees (:func:`unlearn_data`)."""
    if job.audit is None or job.cache_dir is None or job.scenario is None:
        raise DuckInputError("the audit needs attack settings, a cache directory and a forget set (audit=true)")
    return AuditContext(data=job.data, scenario=job.scenario, model_factory=job.model_factory, recipe=job.recipe,
                        attack=job.audit.attack, cache_dir=job.cache_dir, device=job.device,
                        trainer_cfg=job.trainer_cfg, method=job.method, hparams=job.hparams,
                        unlearn_data=lambda original_acc: unlearn_data(job, original_acc), seed=job.seed,
                        eval_batch_size=job.eval_batch_size, progress=job.progress)


def write_forget_ids(path: Path, scenario: Scenario) -> Path:
    """``forget_ids.txt``: the resolved training-set indices of the forget set, one per line (ascending), the
    file format ``scenario=custom scenario.forget_ids=...`` reads back."""
    ids = np.asarray(scenario.forget_idx, dtype=np.int64)
    header = f"# {scenario.kind}: {len(ids)} training-set indices (the data set's sample order; duck-data index lists it)\n"
    return atomic_write_text(path, header + "".join(f"{i}\n" for i in ids.tolist()))


def summary_table(rows: list[tuple[str, dict[str, Any]]], scenario: Scenario) -> tuple[str, list[dict[str, Any]]]:
    """Markdown table of A_t, A_f, AUS, time for the original, the unlearned and the retrained model."""
    cr = scenario.is_class_removal
    out, records = [], []
    for label, m in rows:
        a_or, a_t, a_f = aus_inputs(m["acc"], m.get("original_acc") or m["acc"], scenario)
        rec = {"model": label, "method": m["method"], "A_t": a_t, "A_f": a_f, "AUS": m.get("aus"),
               "train_forget": m["acc"].get("train_forget"), "time_s": m["time_s"], "epochs": m["epochs"]}
        if m.get("forget_target") is not None:  # an unlearning method: did it reach its forget target?
            rec["forget_target"] = target_text(m["acc"].get("train_forget"), float(m["forget_target"]))
        records.append(rec)
        out.append([label, f"{a_t:.4f}", f"{a_f:.4f}", "" if m.get("aus") is None else f"{m['aus']:.4f}",
                    f"{m['acc'].get('train_forget', float('nan')):.4f}",
                    "" if m["time_s"] is None else f"{m['time_s']:.2f}", "" if m["epochs"] is None else m["epochs"]])
    a_t_name = "A_t (test, retained classes)" if cr else "A_t (test)"
    a_f_name = "A_f (test, forgotten classes)" if cr else "A_f (forget set)"
    return markdown_table(["model", a_t_name, a_f_name, "AUS", "train-forget acc", "time (s)", "epochs"], out), records


def target_text(forget_acc: float | None, target: float) -> str:
    """``reached (0.0000 <= 0.01)`` or ``not reached: 0.1330 > 0.01`` for the forget-set accuracy (the
    stopping rules' measure) against the method's forget target."""
    if forget_acc is None:
        return ""
    if forget_target_met(forget_acc, target):
        return f"reached ({forget_acc:.4f} <= {target:.4g})"
    return f"not reached: {forget_acc:.4f} > {target:.4g}"


def format_metrics_line(m: dict[str, Any]) -> str:
    accs = ", ".join(f"{k}={v:.4f}" for k, v in m["acc"].items())
    aus = m.get("aus")
    hp = ", ".join(f"{k}={v}" for k, v in (m.get("hparams") or {}).items() if v is not None)
    return (f"{m['method']} ({m['scenario']}): {accs}" + ("" if aus is None else f", AUS={aus:.4f}")
            + f", {m['time_s']:.2f} s" + (f"\n  hyperparameters: {hp}" if hp else ""))
