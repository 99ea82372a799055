"""The objective of a hyperparameter search (``duck-run -m +tune=METHOD``, Hydra's Optuna sweeper; issue 27):
one number per trial that rewards forgetting and penalises damage.

- ``imprint`` (the default where the forgetting audit ran, ``attack.forgetting.enabled=true``): ``1 − |s|`` with s
  the verdict's equivalent share of the original's shift that the method keeps (:mod:`attacks.equivalence`,
  ALGORITHMS.md §11; 0 = like retraining, either direction counts): the statistic the verdict decides on;
- ``final_score``: the NeurIPS 2023 challenge's score ``F × (RA_U / RA_R) × (TA_U / TA_R)`` of the method against
  models retrained without the forget set (ALGORITHMS.md §10): forgetting quality times retained utility;
- ``aus`` without the forgetting audit: the DUCK paper's AUS (ALGORITHMS.md §2).

With the forgetting objectives, ``TIE_BREAK × AUS`` (1e-3) is added: configurations that the forgetting audit
scores alike (often all at 0 for a method told apart from retraining at small N) are then ranked by AUS.

Either way a trial whose forget set did not reach its target (class removal: accuracy ``<= tolerance``;
homogeneous: ``<=`` the original's test accuracy) scores 1 less, so every configuration that reaches the
target ranks above every one that does not (the target as a constraint). With ``retained_margin`` (``tune.
retained_margin``, a fraction; 0.05 in ``conf/tune/common.yaml``, off when null or not passed) a trial whose
retained test accuracy ``A_t`` (ALGORITHMS.md §2) fell more than that below the original's is penalised the same
way: the final score alone let a search on a small Fashion-MNIST subset pick configurations that cost 5-10 points
of ``A_t``. The search runs on a *validation* forget set chosen by ``conf/tune/*.yaml`` (docs/tuning.md says how
it is kept apart from the reported ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from duck.errors import DuckInputError
from duck.io import atomic_save_json
from duck.metrics import forget_target, forget_target_met
from duck.pipeline.job import Job
from duck.schema import Either, OneOf, Real, Settings, option, settings

OBJECTIVES = ("auto", "imprint", "final_score", "aus")
#: subtracted from a trial whose forget set missed its target
MISSED_TARGET_PENALTY = 1.0
#: weight of AUS added to the final score, so that trials with equal final scores (often 0: every configuration
#: of a method told apart from retraining at small N, as SCRUB on digits) are ranked by AUS instead of tying
TIE_BREAK = 1e-3


@settings
class TuneSettings(Settings):
    """``tune.*`` (conf/tune/common.yaml): a search trial's objective and its retained-accuracy constraint, parsed
    before the trial does any work."""

    prefix: ClassVar[str] = "tune"

    objective: str = option("auto", OneOf(OBJECTIVES), "what a trial scores (auto: imprint with the forgetting audit, "
                                                       "else AUS)")
    retained_margin: float | None = option(
        None, Either((None,), Real(0.0, False, 1.0), "a fraction in [0, 1] (0.05: at most 5 points of retained "
                                                     "accuracy lost) or null"),
        "a trial whose retained test accuracy falls more than this below the original's scores 1 less")


def tune_objective(job: Job, metrics: dict[str, Any], extra: dict[str, Any],
                   settings_: TuneSettings | None = None) -> dict[str, Any]:
    """The trial's objective and what it is made of, from ``duck-run``'s results (``metrics``: the unlearned
    model's record; ``extra``: the original's record and, with the audit, the audits; ``settings_``: the parsed
    ``tune`` options, the defaults where None)."""
    from duck.metrics import aus_inputs

    opts = settings_ or TuneSettings()
    objective, retained_margin = opts.objective, opts.retained_margin
    sc = job.scenario
    tolerance = float(job.hparams.get("tolerance", 0.01) if job.hparams else 0.01)
    target = forget_target(sc, extra["original"]["acc"], tolerance)
    train_forget = float(metrics["acc"]["train_forget"])
    reached = forget_target_met(train_forget, target)
    forgetting = ((extra.get("audits") or {}).get("unlearned") or {}).get("forgetting")
    kind = ("imprint" if forgetting else "aus") if objective == "auto" else objective
    if kind in ("imprint", "final_score"):
        if not forgetting:
            raise DuckInputError(f"tune.objective={kind} needs the forgetting audit: audit=true "
                                 "attack.forgetting.enabled=true (or tune.objective=aus)")
        if kind == "imprint" and forgetting.get("shift") is None:
            raise DuckInputError("tune.objective=imprint needs the forgetting audit's verdict, which needs its "
                                 "controls: attack.forgetting.controls=true (or tune.objective=final_score)")
        value = float(forgetting["final_score"]) if kind == "final_score" else 1.0 - abs(float(forgetting["shift"]))
    else:
        value = float(metrics["aus"])
    tie_break = TIE_BREAK * float(metrics["aus"]) if kind != "aus" else 0.0
    retained = None
    if retained_margin is not None:  # the retained-accuracy constraint: A_t at most `margin` below the original's
        a_or, a_t, _ = aus_inputs(metrics["acc"], extra["original"]["acc"], sc)
        retained = {"A_t": a_t, "original": a_or, "margin": float(retained_margin),
                    "kept": a_t >= a_or - float(retained_margin) - 1e-9}
    kept = retained is None or retained["kept"]
    score = value + tie_break - (0.0 if reached else MISSED_TARGET_PENALTY) - (0.0 if kept else MISSED_TARGET_PENALTY)
    return {"objective": score, "kind": kind, "value": value, "aus": float(metrics["aus"]), "reached_target": reached,
            "retained": retained,
            "train_forget": train_forget, "target": target, "method": job.method,
            "hparams": dict(job.hparams or {}), "data": job.data.name, "scenario": sc.summary()}


def write_tune_result(out: Path, result: dict[str, Any]) -> float:
    """``tune.json`` in the trial's directory (read by the sweep's end, :mod:`duck.report.tune`); the objective."""
    atomic_save_json(Path(out) / "tune.json", result)
    print(f"tune: objective {result['objective']:.4f} ({result['kind']} {result['value']:.4f}"
          + ("" if result["reached_target"] else f", forget target missed: {result['train_forget']:.3f} > "
             f"{result['target']:.3f}") + ")")
    return float(result["objective"])
