"""Forget scenarios: which training samples (and test samples) are forgotten (seeds/003 §IV-A).

- ``class_removal``: every training sample of ``forget_classes``; the test set splits into
  ``test_retain`` / ``test_forget`` by class.
- ``homogeneous_removal``: a random ``fraction`` of the training set (drawn with ``seed``), any class.
- ``custom``: training-set indices read from a ``.txt`` / ``.npy`` / ``.csv`` file.
- ``targeted``: forget ids (file or list) plus a ``target_class`` whose centroid DUCK pushes them to
  (the bias-removal experiment, seeds/003 §IV-G).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from duck.errors import DuckInputError

SCENARIOS = ("class_removal", "homogeneous_removal", "custom", "targeted")


@dataclass
class Scenario:
    kind: str
    forget_idx: np.ndarray  # (F,) sorted training-set indices
    retain_idx: np.ndarray  # (N - F,) sorted
    forget_classes: list[int] | None = None
    test_forget_idx: np.ndarray | None = None  # class removal only
    test_retain_idx: np.ndarray | None = None
    target_class: int | None = None
    seed: int = 0

    @property
    def is_class_removal(self) -> bool:
        return self.kind == "class_removal"

    @property
    def forget_target_rule(self) -> str:
        """Forget-accuracy target of the stopping rules (ALGORITHMS.md §1.4): ``"zero"`` (class removal and
        targeted: the forget set must stop being recognised) or ``"test_accuracy"`` (homogeneous/custom:
        forget samples should look like unseen test data)."""
        return "zero" if self.kind in ("class_removal", "targeted") else "test_accuracy"

    @property
    def forget_hash(self) -> str:
        """sha256 of the sorted forget ids: identifies the forget set in checkpoint manifests."""
        return hashlib.sha256(np.ascontiguousarray(self.forget_idx, dtype=np.int64).tobytes()).hexdigest()

    def summary(self) -> dict[str, Any]:
        return {"scenario": self.kind, "forget_classes": self.forget_classes, "n_forget": int(len(self.forget_idx)),
                "n_retain": int(len(self.retain_idx)), "target_class": self.target_class, "seed": self.seed,
                "forget_hash": self.forget_hash}


def read_forget_ids(path: str | Path) -> np.ndarray:
    """Read integer ids from ``.txt`` (whitespace/comma separated), ``.csv`` (first column; header skipped)
    or ``.npy`` (loaded without pickle)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise DuckInputError(f"forget-id file {p} not found; pass scenario.forget_ids=PATH to a .txt/.npy/.csv file")
    try:
        if p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        elif p.suffix in (".txt", ".csv"):
            rows = [line.split(",")[0].strip() if p.suffix == ".csv" else line
                    for line in p.read_text().splitlines() if line.strip()]
            if p.suffix == ".csv" and rows and not rows[0].lstrip("-").isdigit():
                rows = rows[1:]  # header
            tokens = " ".join(rows).replace(",", " ").split()
            arr = np.array([int(t) for t in tokens], dtype=np.int64)
        else:
            raise DuckInputError(f"forget-id file {p} has unsupported suffix {p.suffix!r}; use .txt, .npy or .csv")
    except ValueError as e:
        if isinstance(e, DuckInputError):
            raise
        raise DuckInputError(f"forget-id file {p} holds a non-integer value ({e}); write one integer id per entry") \
            from None
    arr = np.asarray(arr)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise DuckInputError(f"forget-id file {p} holds non-integer values (dtype {arr.dtype}); store integer ids")
    return arr.reshape(-1).astype(np.int64)


def validate_forget_ids(ids: np.ndarray, n_train: int) -> np.ndarray:
    """Check ids are non-empty, unique, within ``0..n_train-1`` and leave something to retain; return sorted."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size == 0:
        raise DuckInputError("the forget set is empty; give at least one training-sample id to forget")
    bad = ids[(ids < 0) | (ids >= n_train)]
    if bad.size:
        raise DuckInputError(
            f"forget ids out of range: {bad[:5].tolist()} (valid ids are 0..{n_train - 1} for this training set)"
        )
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise DuckInputError(f"duplicated forget ids: {uniq[counts > 1][:5].tolist()}; list every id once")
    if uniq.size == n_train:
        raise DuckInputError(
            f"the forget set covers all {n_train} training samples; nothing would be retained (train a new model instead)"
        )
    return uniq


def _check_class(c: int, num_classes: int, labels: np.ndarray, what: str) -> int:
    if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
        raise DuckInputError(f"{what} {c!r} is not an integer class id")
    if c < 0 or c >= num_classes or not (labels == c).any():
        raise DuckInputError(f"{what} {c} is not a class of this data set (classes are 0..{num_classes - 1})")
    return int(c)


def build_scenario(kind: str, train_labels: np.ndarray, test_labels: np.ndarray, num_classes: int, *,
                   forget_classes: list[int] | None = None, fraction: float | None = None,
                   forget_ids: str | list[int] | None = None, target_class: int | None = None,
                   seed: int = 0, **_: Any) -> Scenario:
    """Build and validate a scenario (arguments mirror ``conf/scenario/KIND.yaml``)."""
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    n = len(train_labels)
    if kind not in SCENARIOS:
        raise DuckInputError(f"unknown scenario {kind!r}; choose one of: {', '.join(SCENARIOS)}")
    test_f = test_r = None
    classes = None
    if kind == "class_removal":
        if not forget_classes:
            raise DuckInputError("class_removal needs scenario.forget_classes, e.g. scenario.forget_classes=[3]")
        classes = sorted({_check_class(c, num_classes, train_labels, "forget class") for c in forget_classes})
        if len(classes) != len(list(forget_classes)):
            raise DuckInputError(f"duplicated forget classes in {list(forget_classes)}")
        if len(classes) == num_classes:
            raise DuckInputError("class_removal of every class leaves nothing to retain; keep at least one class")
        forget = np.flatnonzero(np.isin(train_labels, classes))
        test_f = np.flatnonzero(np.isin(test_labels, classes))
        test_r = np.flatnonzero(~np.isin(test_labels, classes))
    elif kind == "homogeneous_removal":
        if fraction is None or not (0.0 < float(fraction) < 1.0):
            raise DuckInputError(f"scenario.fraction={fraction!r} must be in (0, 1), e.g. 0.1 for 10 %")
        k = int(round(float(fraction) * n))
        if k < 1:
            raise DuckInputError(f"scenario.fraction={fraction} selects no sample of {n}; increase it")
        forget = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    else:  # custom / targeted
        if forget_ids is None:
            raise DuckInputError(f"{kind} needs scenario.forget_ids=PATH (.txt/.npy/.csv of training-set indices)")
        ids = read_forget_ids(forget_ids) if isinstance(forget_ids, (str, Path)) else np.asarray(list(forget_ids))
        forget = validate_forget_ids(ids, n)
        if kind == "targeted":
            if target_class is None:
                raise DuckInputError("targeted needs scenario.target_class (the class whose centroid to push to)")
            target_class = _check_class(target_class, num_classes, train_labels, "target class")
    forget = validate_forget_ids(forget, n)
    retain = np.setdiff1d(np.arange(n), forget)
    return Scenario(kind=kind, forget_idx=forget, retain_idx=retain, forget_classes=classes,
                    test_forget_idx=test_f, test_retain_idx=test_r,
                    target_class=target_class if kind == "targeted" else None, seed=int(seed))
