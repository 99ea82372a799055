"""Method hyperparameters: explicit values, else the paper preset for (scenario family, data set).

A method config (``conf/method/NAME.yaml``) holds its hyperparameters at the top level; ``null`` means
"take it from ``presets``". ``presets.<family>.<dataset>`` (family ``class_removal`` or
``homogeneous_removal``) overrides ``presets.<family>.default``. Targeted removal uses the class-removal
presets (the paper's bias experiment did); custom forget ids use the homogeneous ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from duck.errors import DuckInputError


def scenario_family(kind: str) -> str:
    return "class_removal" if kind in ("class_removal", "targeted") else "homogeneous_removal"


def resolve_method_cfg(cfg: Mapping[str, Any], dataset: str, scenario_kind: str) -> dict[str, Any]:
    """Flatten a method config into its effective hyperparameters (``presets`` removed)."""
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
    return out
