"""Split accuracies and the Adaptive Unlearning Score (AUS, seeds/003 Eq. 6; ALGORITHMS.md §2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from duck.data.base import DatasetSplits
from duck.data.loaders import make_loader
from duck.data.scenarios import Scenario
from duck.errors import DuckInputError
from duck.utils import check_number


@torch.no_grad()
def predict_logits(model: torch.nn.Module, dataset: Any, *, indices: Any = None, batch_size: int = 1024,
                   device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode logits ``(N, C)`` on CPU, labels ``(N,)`` and stable sample indices ``(N,)``. Every submodule's
    mode is restored afterwards as it was (a BatchNorm the caller froze in eval mode inside a model in train
    mode stays frozen)."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    out, ys, ids = [], [], []
    try:
        for x, y, i in make_loader(dataset, batch_size, indices=indices):
            out.append(model(x.to(device, non_blocking=True)).float().cpu())
            ys.append(y), ids.append(torch.as_tensor(i))
    finally:
        for m, mode in modes:
            m.training = mode
    return torch.cat(out), torch.cat(ys), torch.cat(ids)


def forget_target(scenario: Any, original_acc: Mapping[str, float], tolerance: float = 0.01) -> float:
    """The stopping rules' target for the forget-set accuracy ``A_f`` (ALGORITHMS.md §1.4; seeds/003 §III):
    ``0 + tolerance`` (class removal, targeted) or the original model's test accuracy (homogeneous, custom)."""
    return float(tolerance) if scenario.forget_target_rule == "zero" else float(original_acc["test"])


def forget_target_met(forget_acc: float, target: float) -> bool:
    """Is the forget-set accuracy at or below its target? Accuracies are recorded to 6 decimals, so the target is
    compared at that precision too (a forget set exactly at the original's test accuracy counts as met)."""
    return bool(forget_acc <= round(float(target), 6) + 1e-9)


def accuracy(logits: torch.Tensor, labels: torch.Tensor) -> float:
    return float((logits.argmax(1) == labels).float().mean()) if len(labels) else float("nan")


def split_accuracies(model: torch.nn.Module, data: DatasetSplits, scenario: Scenario | None, *,
                     device: torch.device | str = "cpu", batch_size: int = 1024) -> dict[str, float]:
    """Accuracy (fraction) on every split: ``test`` (when the data set has a test split); without a scenario
    ``train``, with one ``train_retain``/``train_forget``; in class removal also ``test_retain``/``test_forget``
    (again only with a test split)."""
    acc: dict[str, float] = {}
    if data.test is not None:
        test_logits, test_y, _ = predict_logits(model, data.test, batch_size=batch_size, device=device)
        acc["test"] = accuracy(test_logits, test_y)
    tr_logits, tr_y, _ = predict_logits(model, data.train, batch_size=batch_size, device=device)
    if scenario is None:
        acc["train"] = accuracy(tr_logits, tr_y)
        return acc
    r, f = torch.as_tensor(scenario.retain_idx), torch.as_tensor(scenario.forget_idx)
    acc["train_retain"] = accuracy(tr_logits[r], tr_y[r])
    acc["train_forget"] = accuracy(tr_logits[f], tr_y[f])
    if data.test is not None and scenario.test_forget_idx is not None:
        tr_, tf_ = torch.as_tensor(scenario.test_retain_idx), torch.as_tensor(scenario.test_forget_idx)
        acc["test_retain"] = accuracy(test_logits[tr_], test_y[tr_])
        acc["test_forget"] = accuracy(test_logits[tf_], test_y[tf_])
    return acc


def aus(a_or: float, a_t: float, a_f: float, *, class_removal: bool) -> float:
    """AUS (seeds/003 Eq. 6). Class removal: ``(1 − (A_or − A_t)) / (1 + |A_f|)``;
    homogeneous removal: ``(1 − (A_or − A_t)) / (1 + |A_f − A_t|)``. Accuracies are fractions in [0, 1]
    (percentages are refused: they would give a meaningless score without a word)."""
    a_or, a_t, a_f = (check_number(v, name, 0.0, False, 1.0) for v, name in ((a_or, "A_or"), (a_t, "A_t"), (a_f, "A_f")))
    denom = 1.0 + (abs(a_f) if class_removal else abs(a_f - a_t))
    return (1.0 - (a_or - a_t)) / denom


def aus_inputs(acc: dict[str, float], original_acc: dict[str, float], scenario: Scenario) -> tuple[float, float, float]:
    """``(A_or, A_t, A_f)`` for a scenario (ALGORITHMS.md §2). Class removal uses the test split by class;
    homogeneous/custom use test accuracy and the forget (training) set; targeted uses the forget set with
    the class-removal form (its forget accuracy should go to zero). Without a test split there is no AUS: a
    ``DuckInputError`` says so."""
    a_or = "test_retain" if scenario.is_class_removal else "test"
    if a_or not in original_acc or a_or not in acc:
        raise DuckInputError("AUS needs test-set accuracies and this data set has no test split; give a test set "
                             "(duck.data.user.as_splits(train, test))")
    if scenario.is_class_removal:
        return original_acc["test_retain"], acc["test_retain"], acc["test_forget"]
    return original_acc["test"], acc["test"], acc["train_forget"]


def scenario_aus(acc: dict[str, float], original_acc: dict[str, float], scenario: Scenario) -> float:
    a_or, a_t, a_f = aus_inputs(acc, original_acc, scenario)
    return aus(a_or, a_t, a_f, class_removal=scenario.forget_target_rule == "zero")


def metrics_record(*, method: str, data_name: str, model_name: str, seed: int, acc: dict[str, float],
                   original_acc: dict[str, float] | None = None, scenario: Scenario | None = None,
                   time_s: float | None = None, epochs: float | None = None, **extra: Any) -> dict[str, Any]:
    """The ``metrics.json`` record of DESIGN.md §3."""
    rec: dict[str, Any] = {"method": method, "scenario": scenario.kind if scenario else None,
                           "dataset": data_name, "model": model_name, "seed": int(seed)}
    if scenario is not None:
        rec["forget_classes"] = scenario.forget_classes
        if getattr(scenario, "forget_class_names", None):
            rec["forget_class_names"] = scenario.forget_class_names
        rec["n_forget"] = int(len(scenario.forget_idx))
        if scenario.target_class is not None:
            rec["target_class"] = scenario.target_class
    rec["acc"] = {k: round(float(v), 6) for k, v in acc.items()}
    if original_acc is not None:
        # every split, so that the forget accuracies before and after unlearning sit side by side
        rec["original_acc"] = {k: round(float(v), 6) for k, v in original_acc.items()}
        if scenario is not None:  # no test split (user data): no AUS
            rec["aus"] = round(scenario_aus(acc, original_acc, scenario), 6) if "test" in acc else None
    rec["time_s"] = None if time_s is None else round(float(time_s), 3)
    rec["epochs"] = epochs
    rec.update(extra)
    return rec


