"""Method hyperparameters: explicit values, else the paper preset for (scenario family, data set).

A method config (``conf/method/NAME.yaml``) holds its hyperparameters at the top level; ``null`` means
"take it from ``presets``". ``presets.<family>.<dataset>`` (family ``class_removal`` or
``homogeneous_removal``) overrides ``presets.<family>.default``. Targeted removal uses the class-removal
presets (the paper's bias experiment did); custom forget ids use the homogeneous ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from duck.errors import DuckInputError
from duck.schema import Flag, Integer, OneOf, Real, Rule
from duck.utils import check_number


@dataclass(frozen=True)
class Milestones:
    """``milestones``: a list of integer epochs >= 1 for a step schedule, or [] for a constant rate."""

    def __call__(self, value: Any, key: str) -> list[int]:
        if not isinstance(value, (list, tuple)) or any(isinstance(m, bool) or not isinstance(m, int) or m < 1
                                                       for m in value):
            raise DuckInputError(f"{key}={value!r} must be a list of integer epochs >= 1 (e.g. [8, 15]), or [] for "
                                 "a constant learning rate")
        return list(value)

    def describe(self) -> str:
        return "a list of integer epochs >= 1, or []"


#: the rules of the hyperparameters the methods share by name (duck.schema's rules; a method's own keys not
#: listed here are checked where it reads them); None stays allowed: "unset" or "taken from a preset"
HYPERPARAMETER_RULES: dict[str, Rule] = {
    **dict.fromkeys(("lr", "erm_lr", "low_lr", "temperature", "kd_T", "bound", "step", "lr_gamma"), Real(0.0, True)),
    **dict.fromkeys(("weight_decay", "lambda_fgt", "lambda_ret", "low_lambda_ret", "lambda_reg", "lam", "alpha",
                     "gamma", "low_lambda_scale_cr", "low_lambda_scale_hr"), Real(0.0, False)),
    # a negative tolerance: a target never reached (max_epochs epochs)
    **dict.fromkeys(("tolerance", "prohibit_threshold"), Real(-math.inf, True)),
    "retain_fraction": Real(0.0, False, 1.0), "mask_density": Real(0.0, True, 1.0),
    "momentum": Real(0.0, False, 1.0, hi_open=True), "beta": Real(0.0, False, 1.0),
    "mask_ratio": Real(0.0, True, 1.0), "label_smoothing": Real(0.0, False, 1.0, hi_open=True),
    # counts (batch ratios count retain batches per forget batch)
    **dict.fromkeys(("epochs", "max_epochs", "erm_epochs", "batch_size", "forget_batch_size", "attack_steps",
                     "max_per_class", "batch_ratio", "low_batch_ratio", "low_retain_batch_size"), Integer(1)),
    **dict.fromkeys(("low_epochs", "msteps", "min_epochs"), Integer(0)),
    # true / false only: a string such as "no" is refused
    **dict.fromkeys(("recompute_targets", "joint_forward", "low_joint_forward", "low_cosine", "stop_at_target"), Flag()),
    "stop_check": OneOf(("epoch", "batch")), "low_pairing": OneOf(("ratio", "first_forget")),
    "full_order": OneOf(("authors", "dataset")), "milestones": Milestones(),
}


def scenario_family(kind: str) -> str:
    return "class_removal" if kind in ("class_removal", "targeted") else "homogeneous_removal"


class MethodParams(dict):
    """A method's effective hyperparameters for one data set and scenario, resolved once
    (:func:`resolve_method_cfg`) and read-only afterwards: the job carries them, and the unlearners, the forgetting
    audit's N runs and U-LiRA's shadow runs take them as they are instead of resolving the config again."""

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("MethodParams are read-only: resolve the method config again to change them")

    __setitem__ = __delitem__ = update = pop = popitem = setdefault = clear = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:  # copies and pickles (joblib / submitit sweeps) stay MethodParams
        return (MethodParams, (dict(self),))


def resolve_method_cfg(cfg: Mapping[str, Any], dataset: str, scenario_kind: str) -> MethodParams:
    """Flatten a method config into its effective hyperparameters (``presets`` removed), checked; already
    resolved parameters (:class:`MethodParams`) are returned as they are."""
    if isinstance(cfg, MethodParams):
        return cfg
    cfg = dict(cfg)
    presets = cfg.pop("presets", None) or {}
    family = presets.get(scenario_family(scenario_kind), {}) or {}
    preset = {**(family.get("default") or {}), **(family.get(dataset) or {})}
    out = {k: (preset.get(k) if v is None and k in preset else v) for k, v in cfg.items()}
    for k, v in preset.items():
        out.setdefault(k, v)
    missing = [k for k, v in out.items() if v is None and k in preset]
    if missing:
        raise DuckInputError(f"method hyperparameters {missing} have no value for data set {dataset!r}; "
                             f"set them, e.g. method.{missing[0]}=...")
    check_hyperparameters(out)
    return MethodParams(out)


def check_hyperparameters(hp: Mapping[str, Any]) -> None:
    """Raise DuckInputError, before any training, for a shared numeric hyperparameter out of its range (a
    negative epoch count would make Lightning train forever, a NaN learning rate fails deep inside torch)."""
    for key, value in hp.items():
        if value is not None and key in HYPERPARAMETER_RULES:
            HYPERPARAMETER_RULES[key](value, f"method.{key}")
    if hp.get("min_epochs") is not None:  # NegGrad+, SalUn: the stopping rule's delay, refused where it cannot act
        if not hp.get("stop_at_target"):
            raise DuckInputError(f"method.min_epochs={hp['min_epochs']} only acts with method.stop_at_target=true (it "
                                 "delays the stopping rule); set that or drop min_epochs")
        if hp.get("epochs") is not None and hp["min_epochs"] > hp["epochs"]:
            raise DuckInputError(f"method.min_epochs={hp['min_epochs']} is above method.epochs={hp['epochs']} (the "
                                 "cap of the stopping rule); raise epochs or lower min_epochs")


def check_positive(hp: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    """A method's own hyperparameters that must be > 0 (shared names such as SSD's ``alpha``, ``lam`` may be
    0 for other methods)."""
    for key in keys:
        if hp.get(key) is not None:
            check_number(hp[key], f"method.{key}", 0.0, True)


def check_known_keys(cfg: Mapping[str, Any], known: Mapping[str, Any], method: str) -> None:
    """Refuse hyperparameters the method's config file does not define (``+method.lambda_fgtt=3``: a typo that
    would otherwise be ignored), naming them and the valid ones."""
    unknown = sorted(set(cfg) - set(known))
    if unknown:
        valid = ", ".join(sorted(k for k in known if k not in ("name", "presets")))
        raise DuckInputError(f"method {method!r} has no hyperparameter(s) {unknown}; its hyperparameters are: "
                             f"{valid} (conf/method/{method}.yaml)")
