"""Forget scenarios: which training samples (and test samples) are forgotten (seeds/003 §IV-A).

- ``class_removal``: every training sample of ``forget_classes``; the test set splits into
  ``test_retain`` / ``test_forget`` by class.
- ``homogeneous_removal``: a random ``fraction`` of the training set (drawn with ``seed``), any class.
- ``custom``: training-set indices read from a ``.txt`` / ``.npy`` / ``.csv`` file.
- ``targeted``: forget ids (file or list) plus a ``target_class`` whose centroid DUCK pushes them to
  (the bias-removal experiment, seeds/003 §IV-G).

Classes (``forget_classes``, ``target_class``) are given by id or by name (``scenario.forget_classes=[Trouser]``),
names resolving through the data set's ``class_names``.
"""

from __future__ import annotations

import csv
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from duck.errors import DuckInputError
from duck.paths import forget_id_file
from duck.schema import REQUIRED, Check, OneOf, Settings, config_values, option, settings
from duck.utils import INT64_MAX, INT64_MIN, check_number, check_seed, int64_array

SCENARIOS = ("class_removal", "homogeneous_removal", "custom", "targeted")
#: the settings each kind reads besides ``seed`` (``conf/scenario/KIND.yaml``)
_KIND_SETTINGS = {"class_removal": ("forget_classes",), "homogeneous_removal": ("fraction", "seed"),
                  "custom": ("forget_ids",), "targeted": ("forget_ids", "target_class")}


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
    forget_class_names: list[str] | None = None  # where the data set names its classes
    target_class_name: str | None = None

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
        """The scenario as recorded in manifests and reports; ``forget_class_names`` / ``target_class_name``
        only where the data set names its classes."""
        out = {"scenario": self.kind, "forget_classes": self.forget_classes, "n_forget": int(len(self.forget_idx)),
               "n_retain": int(len(self.retain_idx)), "target_class": self.target_class, "seed": self.seed,
               "forget_hash": self.forget_hash}
        if self.forget_class_names is not None:
            out["forget_class_names"] = self.forget_class_names
        if self.target_class_name is not None:
            out["target_class_name"] = self.target_class_name
        return out


def _is_header(token: str) -> bool:
    """A ``.csv`` first cell is a header only when it holds a letter and is not a number (``nan``/``inf``
    and ``1e5`` are numbers, so they are parsed and refused, not dropped)."""
    if not any(ch.isalpha() for ch in token):
        return False
    try:
        float(token)
    except ValueError:
        return True
    return False


def _parse_int_token(token: str, where: str) -> int:
    t = token.strip()
    if re.fullmatch(r"[+-]?\d+\.0*", t):  # an integral float such as 3.0 (as .npy files and int64_array accept)
        t = t.split(".")[0]
    body = t[1:] if t[:1] in "+-" else t
    if not body.isascii() or not body.isdigit():
        raise DuckInputError(f"{where} holds the non-integer value {token!r}; write one integer id per entry")
    v = int(t) if len(body) <= 20 else INT64_MAX + 1
    if not INT64_MIN <= v <= INT64_MAX:
        raise DuckInputError(f"{where} holds id {token[:30]} which is far too large; ids are training-set indices")
    return v


#: bytes a text id file may take per training sample (an id of up to 20 digits and its separator, with room for
#: quoting and spaces), plus a fixed allowance for comments and headers
_TEXT_BYTES_PER_ID = 32
_TEXT_BYTES_EXTRA = 1 << 20


def _check_id_file_size(p: Path, where: str, max_count: int | None) -> None:
    """Refuse an id file larger than any valid forget set before reading it: forget ids are distinct training
    indices, so there are at most ``max_count`` (the training-set size) of them. A ``.npy`` file's header gives
    its element count; a text file may take :data:`_TEXT_BYTES_PER_ID` bytes per id."""
    if max_count is None:
        return
    if p.suffix == ".npy":
        try:
            with p.open("rb") as f:
                version = np.lib.format.read_magic(f)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, _ = read_header(f)  # the header only, no data
        except (ValueError, OSError, EOFError, SyntaxError) as e:
            raise DuckInputError(f"cannot read {where} as a numpy array ({e}); save a 1-D integer array with "
                                 "numpy.save") from None
        count = math.prod(int(d) for d in shape)
        if count > max_count:
            raise DuckInputError(f"{where} holds {count} ids by its header, more than the {max_count} training "
                                 "samples (forget ids are distinct training indices); check the file")
        return
    size = p.stat().st_size
    limit = max_count * _TEXT_BYTES_PER_ID + _TEXT_BYTES_EXTRA
    if size > limit:
        raise DuckInputError(f"{where} is {size / 2**20:.1f} MiB, more than {max_count} training-sample ids can "
                             f"take ({limit / 2**20:.1f} MiB); check the file")


def read_forget_ids(path: str | Path, max_count: int | None = None) -> np.ndarray:
    """Read integer ids from ``.txt`` (whitespace/comma separated; lines starting with ``#`` are comments, as in
    the ``forget_ids.txt`` every job writes), ``.csv`` (first column; a first row holding a non-numeric word
    is a header) or ``.npy`` (a 1-D integer array, loaded without pickle). With ``max_count`` (the training-set
    size), a file that holds more ids than that is refused before it is read (:func:`_check_id_file_size`)."""
    p = forget_id_file(path)
    where = f"forget-id file {p}"
    _check_id_file_size(p, where, max_count)
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except (ValueError, OSError, EOFError) as e:
            raise DuckInputError(f"cannot read {where} as a numpy array ({e}); save a 1-D integer array with "
                                 "numpy.save") from None
        return int64_array(arr, where, hint="store integer training-sample ids")
    if p.suffix not in (".txt", ".csv"):
        raise DuckInputError(f"forget-id file {p} has unsupported suffix {p.suffix!r}; use .txt, .npy or .csv")
    try:
        text = p.read_text(encoding="utf-8-sig")  # a byte-order mark (spreadsheet exports) is not an id
    except UnicodeDecodeError as e:
        raise DuckInputError(f"{where} is not UTF-8 text ({e}); write one integer id per entry") from None
    if p.suffix == ".csv":  # first column, with csv quoting ("3")
        records = [(i + 1, r) for i, r in enumerate(csv.reader(text.splitlines())) if any(c.strip() for c in r)]
        rows = [r[0].strip() for _, r in records]
        if rows and _is_header(rows[0]):
            records, rows = records[1:], rows[1:]  # header
        empty = [line for (line, _), cell in zip(records, rows, strict=True) if not cell]
        if empty:
            raise DuckInputError(f"{where} has an empty first cell on line(s) {empty[:5]}; the first column must "
                                 "hold one integer id per row")
    else:
        rows = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    tokens = " ".join(rows).replace(",", " ").split()
    return np.array([_parse_int_token(t, where) for t in tokens], dtype=np.int64)


def _inline_ids(values: Any) -> np.ndarray:
    """``scenario.forget_ids=[...]`` given inline: a flat list of integers (not bools; integral floats such as
    3.0 count as integers, as everywhere else ids are read)."""
    where = "scenario.forget_ids"
    if isinstance(values, (bool, int, float, np.integer, np.floating)) or not isinstance(values, (list, tuple, np.ndarray)):
        raise DuckInputError(f"{where}={values!r} must be a PATH to a .txt/.npy/.csv file or a list of integer "
                             "ids, e.g. scenario.forget_ids=[3,17,42]")
    if isinstance(values, np.ndarray):
        return int64_array(values, where, hint="give integer training-sample ids")
    out = []
    for v in values:
        if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise DuckInputError(f"{where} holds the non-integer value {v!r}; give a flat list of integer "
                                 "ids, e.g. scenario.forget_ids=[3,17,42]")
        if not INT64_MIN <= int(v) <= INT64_MAX:
            raise DuckInputError(f"{where} holds id {v} which is far too large; ids are training-set indices")
        out.append(int(v))
    return np.array(out, dtype=np.int64)


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


#: most class names an error message lists
_NAMES_SHOWN = 20


def class_id(name: str, class_names: list[str] | None, what: str) -> int:
    """The id of the class called ``name`` (exact match in ``class_names``); a ``DuckInputError`` listing the
    valid names (the first 20) when there is none. A digit string naming a class (digits' ``"3"``) resolves
    as that name, which there is the id too."""
    if not class_names:
        raise DuckInputError(f"{what} {name!r} is not an integer class id and this data set has no class names; "
                             "give the class id (an integer)")
    if name in class_names:
        return class_names.index(name)
    folded = [n for n in class_names if n.casefold() == name.casefold()]
    if len(folded) != 1:  # a misspelling: the closest name (Trousers, Trousr -> Trouser)
        import difflib

        by_fold = {n.casefold(): n for n in class_names}
        folded = [by_fold[m] for m in difflib.get_close_matches(name.casefold(), list(by_fold), n=1, cutoff=0.75)]
    hint = f"did you mean {folded[0]!r}? " if len(folded) == 1 else ""
    shown = ", ".join(repr(n) for n in class_names[:_NAMES_SHOWN]) + (", ..." if len(class_names) > _NAMES_SHOWN else "")
    raise DuckInputError(f"{what} {name!r} is not a class name of this data set; {hint}give one of {shown} "
                         f"(exact spelling) or an integer id 0..{len(class_names) - 1}")


def _check_class(c: int | str, num_classes: int, labels: np.ndarray, what: str,
                 class_names: list[str] | None = None) -> int:
    """Class ``c`` (an id, or a name resolved by :func:`class_id`) as an id present in ``labels``."""
    shown, by_name = f"{c!r}", isinstance(c, str)
    if by_name:
        c = class_id(c, class_names, what)
        shown += f" (id {c})"
    if not isinstance(c, (int, np.integer)) or isinstance(c, bool):
        raise DuckInputError(f"{what} {c!r} is not an integer class id or a class name")
    c = int(c)
    named = class_names.index(str(c)) if class_names and not by_name and str(c) in class_names else None
    if named is not None and named != c:  # an ImageFolder of numbered folders: '10' < '2' in its sorted order
        at = f"the class named {class_names[c]!r}" if 0 <= c < len(class_names) else "no class"
        raise DuckInputError(f"{what} {c} is ambiguous: id {c} is {at}, but a class is named '{c}' (id {named}); for "
                             f"that class give its name as a string, quoted (on the command line "
                             f"'scenario.forget_classes=[\"{c}\"]'), for id {c} its name")
    if c < 0 or c >= num_classes:
        raise DuckInputError(f"{what} {shown} is not a class of this data set (classes are 0..{num_classes - 1})")
    if not (labels == c).any():
        raise DuckInputError(f"{what} {shown} has no training sample; choose a class the training set holds")
    return c


def _forget_classes(value: Any, key: str) -> tuple[int | str, ...] | None:
    """Class ids or names (resolved against the data set when the scenario is built); a single one is a list of
    one; an empty list is no list."""
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        return None
    if isinstance(value, (int, np.integer, str)) and not isinstance(value, bool):
        return (value,)
    if not isinstance(value, (list, tuple)):
        raise DuckInputError(f"{key}={value!r} must be a list of class ids or names, e.g. {key}=[3]")
    return tuple(value)


def _fraction(value: Any, key: str) -> float | None:
    if value is None:
        return None
    ok = not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
    if not ok or not (0.0 < float(value) < 1.0):
        raise DuckInputError(f"{key}={value!r} must be in (0, 1), e.g. 0.1 for 10 %")
    return check_number(value, key, 0.0, True, 1.0, True)


def _as_given(value: Any, key: str) -> Any:
    return value


@settings
class ScenarioSettings(Settings):
    """``scenario.*`` (conf/scenario/KIND.yaml): which kind of forget set and the settings that kind reads. What
    can be checked without the data is checked here, once; the rest (class names and ids against the data set's,
    forget-id files and ranges against its training set) when :func:`make_scenario` builds the forget set."""

    prefix: ClassVar[str] = "scenario"

    kind: str = option(REQUIRED, OneOf((*SCENARIOS, "none")), "the kind of forget set")
    forget_classes: tuple[int | str, ...] | None = option(
        None, Check(_forget_classes, "a list of class ids or names"), "class_removal: the classes removed")
    fraction: float | None = option(None, Check(_fraction, "a number in (0, 1)"),
                                    "homogeneous_removal: the share of the training set forgotten")
    forget_ids: Any = option(None, Check(_as_given, "a PATH (.txt/.npy/.csv) or a list of training-set ids"),
                             "custom / targeted: the training-set indices forgotten")
    target_class: int | str | None = option(None, Check(_as_given, "a class id or name"),
                                            "targeted: the class whose centroid the forget set is pushed to")
    seed: int = option(0, Check(lambda v, k: check_seed(v, k), "an integer in [0, 2^63 - 1]"),
                       "homogeneous_removal: the seed of the draw (a job's: its seed)")

    @classmethod
    def parse(cls, raw: Any = None, prefix: str | None = None) -> ScenarioSettings:
        """The kind first, and a setting the kind does not read refused before any value is checked (a typo such
        as ``+scenario.fraction=0.5`` with class removal would otherwise be ignored)."""
        if isinstance(raw, cls):
            return raw
        raw = config_values(raw) if raw is not None else {}
        if not isinstance(raw, Mapping):
            raise DuckInputError(f"scenario={raw!r} must be a mapping of the scenario's settings")
        raw = dict(raw)
        kind = raw.get("kind")
        if kind not in (*SCENARIOS, "none"):
            raise DuckInputError(f"unknown scenario {kind!r}; choose one of: {', '.join(SCENARIOS)}")
        reads = _KIND_SETTINGS.get(kind, ())
        unused = sorted(k for k, v in raw.items() if v is not None and k not in (*reads, "kind", "seed"))
        if unused:
            raise DuckInputError(f"scenario {kind} does not use {', '.join(f'scenario.{k}' for k in unused)}; remove "
                                 f"it (its settings: {', '.join(f'scenario.{k}' for k in reads)})")
        return super().parse(raw, prefix)

    def __post_init__(self) -> None:
        if self.kind == "class_removal" and self.forget_classes is None:
            raise DuckInputError("class_removal needs scenario.forget_classes, e.g. scenario.forget_classes=[3]")
        if self.kind in ("custom", "targeted") and self.forget_ids is None:
            raise DuckInputError(f"{self.kind} needs scenario.forget_ids=PATH (.txt/.npy/.csv of training-set "
                                 "indices)")
        if self.kind == "targeted" and self.target_class is None:
            raise DuckInputError("targeted needs scenario.target_class (the class whose centroid to push to)")
        if self.kind == "homogeneous_removal" and self.fraction is None:
            raise DuckInputError("homogeneous_removal needs scenario.fraction, e.g. scenario.fraction=0.1")


def build_scenario(kind: str, train_labels: np.ndarray, test_labels: np.ndarray | None, num_classes: int, *,
                   class_names: list[str] | None = None, **settings_: Any) -> Scenario:
    """Build and validate a scenario from its settings as keywords (arguments mirror ``conf/scenario/KIND.yaml``):
    :class:`ScenarioSettings` then :func:`make_scenario`. A setting the kind does not use (``+scenario.fraction=0.5``
    with class removal, a typo) is refused: it would be ignored.

    ``forget_classes`` and ``target_class`` take class ids or names (resolved through ``class_names``, the
    data set's; exact spelling). ``test_labels`` may be ``None`` (user data without a test split): class
    removal then has no ``test_forget`` / ``test_retain`` split."""
    return make_scenario(ScenarioSettings.parse({"kind": kind, **settings_}), train_labels, test_labels, num_classes,
                         class_names=class_names)


def make_scenario(settings_: ScenarioSettings, train_labels: np.ndarray, test_labels: np.ndarray | None,
                  num_classes: int, *, class_names: list[str] | None = None) -> Scenario:
    """The forget set of parsed ``settings_`` on this data (the checks that need the data: class names and ids,
    forget-id files, ranges)."""
    kind, forget_classes, fraction = settings_.kind, settings_.forget_classes, settings_.fraction
    forget_ids, target_class, seed = settings_.forget_ids, settings_.target_class, settings_.seed
    if kind == "none":
        raise DuckInputError("scenario=none has no forget set; choose class_removal, homogeneous_removal, custom "
                             "or targeted")
    train_labels = np.asarray(train_labels)
    test_labels = None if test_labels is None else np.asarray(test_labels)
    class_names = None if class_names is None else [str(c) for c in class_names]
    n = len(train_labels)
    test_f = test_r = None
    classes = None
    if kind == "class_removal":
        classes = sorted({_check_class(c, num_classes, train_labels, "forget class", class_names)
                          for c in forget_classes})
        if len(classes) != len(list(forget_classes)):
            raise DuckInputError(f"duplicated forget classes in {list(forget_classes)}")
        if len(classes) == num_classes:
            raise DuckInputError("class_removal of every class leaves nothing to retain; keep at least one class")
        forget = np.flatnonzero(np.isin(train_labels, classes))
        if test_labels is not None:
            test_f = np.flatnonzero(np.isin(test_labels, classes))
            test_r = np.flatnonzero(~np.isin(test_labels, classes))
        if test_labels is not None and (test_f.size == 0 or test_r.size == 0):  # A_f or A_t (and AUS) would be NaN
            side = "forgotten" if test_f.size == 0 else "retained"
            raise DuckInputError(f"the test split has no sample of the {side} classes (forget classes {classes}), so "
                                 f"the {side} classes' test accuracy is undefined; use a test split holding every "
                                 "class, or scenario=custom with these classes' training ids")
    elif kind == "homogeneous_removal":
        k = int(round(float(fraction) * n))
        if k < 1:
            raise DuckInputError(f"scenario.fraction={fraction} selects no sample of {n}; increase it")
        forget = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    else:  # custom / targeted
        ids = (read_forget_ids(forget_ids, max_count=n) if isinstance(forget_ids, (str, Path))
               else _inline_ids(forget_ids))
        forget = validate_forget_ids(ids, n)
        if kind == "targeted":
            target_class = _check_class(target_class, num_classes, train_labels, "target class", class_names)
            own = forget[train_labels[forget] == target_class]
            if own.size:
                raise DuckInputError(
                    f"forget ids {own[:5].tolist()}{' ...' if own.size > 5 else ''} ({own.size} of {forget.size}) are "
                    f"labelled with the target class {target_class}: pushing them to their own class centroid "
                    "cannot make them forgotten; drop them from the forget set or choose another target class")
    forget = validate_forget_ids(forget, n)
    retain = np.setdiff1d(np.arange(n), forget)
    target_class = target_class if kind == "targeted" else None
    named = class_names is not None and len(class_names) >= num_classes
    return Scenario(kind=kind, forget_idx=forget, retain_idx=retain, forget_classes=classes,
                    test_forget_idx=test_f, test_retain_idx=test_r, target_class=target_class, seed=int(seed),
                    forget_class_names=[class_names[c] for c in classes] if named and classes is not None else None,
                    target_class_name=class_names[target_class] if named and target_class is not None else None)
