"""The cache part of a model bank (the LiRA shadow bank of :mod:`attacks.shadow` and the banks built on it in
:mod:`attacks.retrain_bank`): the bank's files in the artifact store (:mod:`duck.store`), their checks and its
lock. What the models train on, their training and their scoring stay in :mod:`attacks.shadow`.

One bank is one store entry, ``<cache_dir>/store-v1/<kind>/<key>/`` (kind: ``shadow_banks``, ``retrain_banks``,
``original_banks``, ``shadow_retrain_banks``; the key from the bank's spec, :func:`attacks.shadow.bank_spec`,
and :data:`BANK_FORMAT`):

- ``meta.json``: the spec, its key, the models trained so far (``trained``), the seconds spent training them and
  one record per training run (updated under the entry's short index lock: the slices of a sharded build, which
  hold the bank's lock shared, lose none of each other's records);
- ``keep.npy``: which pool examples each model trains on (deterministic in the spec, rewritten if damaged);
- ``shadows/shadow_KKKK.ckpt``: the models, each saved as soon as it is trained;
- ``phi_<views>.npz`` (φ of every model on every sample, per set of query views) and ``correct.npz`` (retrain
  banks: is each model right on each sample), computed once.

The bank's directory is a cache: a damaged entry (unreadable or malformed ``meta.json``, ``keep.npy`` or array
file, an array file holding NaN/inf, a file where a directory belongs or the reverse) is rebuilt with a one-line
``warning: ...``; it is never used as it is and never ends the job with a traceback.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from duck.errors import DuckInputError, warn_line
from duck.io import atomic_save_json, atomic_save_npz, atomic_write
from duck.store import CORRUPT_ERRORS, NPZ, ArtifactSpec, Store

#: the version of the banks' stored format (their :class:`~duck.store.ArtifactSpec` version)
BANK_FORMAT = 1


def _first_line(e: BaseException, n: int = 120) -> str:
    return (str(e).splitlines() or [""])[0][:n] or type(e).__name__


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and bool(np.isfinite(x))


class BankCache:
    """The stored files of one bank of ``n_models`` models (module docstring); ``kind`` is the store folder,
    ``spec`` what the bank depends on, ``label`` its name in messages."""

    def __init__(self, cache_dir: str | Path, kind: str, spec: Mapping[str, Any], *, label: str,
                 n_models: int) -> None:
        self.entry = Store(cache_dir).open(ArtifactSpec(kind, BANK_FORMAT, spec), label=label)
        self.spec: dict[str, Any] = dict(self.entry.spec.fields)
        self.key, self.dir, self.label, self.n_models = self.entry.key, self.entry.dir, label, int(n_models)
        self._keep: np.ndarray | None = None

    # -- layout ---------------------------------------------------------------------------------------------
    def model_path(self, k: int) -> Path:
        return self.dir / "shadows" / f"shadow_{k:04d}.ckpt"

    def phi_path(self, views: Sequence[str]) -> Path:
        tag = hashlib.sha256("|".join(views).encode()).hexdigest()[:10]
        return self.dir / f"phi_{tag}.npz"

    def check_layout(self) -> None:
        """Directories where the bank needs directories (a file in their place is removed, with a warning)."""
        for path in (self.dir.parent, self.dir, self.dir / "shadows"):
            self.entry.make_room(path, "dir")

    @contextmanager
    def lock(self, shared: bool = False) -> Iterator[None]:
        """Hold the bank's lock (:meth:`duck.store.Entry.lock`): exclusive, or shared by the slices of a sharded
        build; says once that it waits for another job."""
        self.check_layout()
        with self.entry.lock(shared=shared,
                             waiting=f"{self.label} {self.dir} is being trained or checked by another job; waiting for it"):
            yield

    # -- meta.json ------------------------------------------------------------------------------------------
    def meta_problem(self, meta: Any) -> str | None:
        """Why ``meta`` (a parsed ``meta.json``) is not a valid description of this bank, or None.

        The directory name is a hash of the spec, so a stored spec that differs from this setup's spec is
        damage (an empty or malformed spec, an edited or copied file) whenever it does not hash to this
        directory's key: the bank is then rebuilt like any damaged entry. Only a different spec that does hash
        to this key (a key collision: not expected to happen) is refused, by :meth:`meta`."""
        if not isinstance(meta, dict):
            return f"a JSON {type(meta).__name__}, not a bank description"
        spec = meta.get("spec")
        if not isinstance(spec, dict) or set(spec) != set(self.spec):
            return "malformed spec" if isinstance(spec, dict) and spec else "missing or empty spec"
        if spec != self.spec and ArtifactSpec(self.entry.spec.kind, BANK_FORMAT, spec).key != self.key:
            return "its spec does not belong to this directory (edited or copied?)"
        if "key" in meta and meta["key"] != self.key:
            return f"key {str(meta['key'])[:40]!r}, expected {self.key!r}"
        trained = meta.get("trained")
        if not isinstance(trained, list) or not all(_is_int(k) and 0 <= k < self.n_models for k in trained):
            return f"'trained' is {json.dumps(trained)[:60]}, not a list of shadow ids"
        seconds = meta.get("train_seconds", 0.0)
        if not _is_number(seconds) or seconds < 0:
            return f"'train_seconds' is {json.dumps(seconds)[:60]}, not a non-negative number"
        if not isinstance(meta.get("runs", []), list):
            return "'runs' is not a list"
        return None

    def meta(self) -> dict[str, Any]:
        """``meta.json`` (written for a new bank). A corrupt or malformed one is rebuilt: the whole bank
        directory is removed with a warning (see :meth:`meta_problem`)."""
        self.check_layout()
        path = self.dir / "meta.json"
        self.entry.make_room(path)
        if path.is_file():
            try:
                meta = json.loads(path.read_text())
                problem = self.meta_problem(meta)
            except CORRUPT_ERRORS as e:
                problem = _first_line(e)
            if problem:
                warn_line(f"{self.label} {self.dir} has a corrupt meta.json ({problem}); rebuilding the bank")
                shutil.rmtree(self.dir, ignore_errors=True)
                if path.exists():
                    raise DuckInputError(f"{self.label} {self.dir} cannot be removed; delete it by hand")
                self._keep = None
                return self.meta()
            if meta["spec"] != self.spec:  # hashes to this key (see meta_problem): a real key collision
                raise DuckInputError(f"{self.label} {self.dir} was written for another setup whose description "
                                     "hashes to the same key; delete the directory to rebuild it")
            return meta
        meta = {"spec": self.spec, "key": self.key, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "train_seconds": 0.0, "trained": []}
        atomic_save_json(path, meta)
        return meta

    def record(self, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        """Apply ``change(meta)`` to ``meta.json`` under the entry's index lock (read-modify-write: concurrent
        jobs lose none of each other's records); returns the new content."""
        with self.entry.index_lock():
            meta = self.meta()
            change(meta)
            atomic_save_json(self.dir / "meta.json", meta)
        return meta

    def train_seconds(self) -> float:
        """Seconds spent training this bank's models so far (every job's share; the one-off cost of the bank)."""
        return float(self.meta().get("train_seconds", 0.0))

    # -- keep.npy and the models ----------------------------------------------------------------------------
    def keep(self, expected: Callable[[], np.ndarray]) -> np.ndarray:
        """``(E, N_pool)`` bool: which examples each model trains on, ``expected()`` (deterministic in the spec),
        stored once in ``keep.npy``; a stored matrix that differs from it is damage, rewritten."""
        if self._keep is None:
            path = self.dir / "keep.npy"
            self.meta()
            want = expected()
            self.entry.make_room(path)
            keep = None
            if path.is_file():
                try:
                    keep = np.load(path, allow_pickle=False)
                    ok = (isinstance(keep, np.ndarray) and keep.shape == want.shape and keep.dtype == bool
                          and np.array_equal(keep, want))
                    problem = "" if ok else "not this bank's keep matrix"
                except CORRUPT_ERRORS as e:
                    problem = _first_line(e)
                if problem:
                    warn_line(f"{self.label} {self.dir}: corrupt keep.npy ({problem}); rewriting it")
                    keep = None
            if keep is None:
                keep = want
                atomic_write(path, lambda f: np.save(f, keep))
            self._keep = keep
        return self._keep

    def missing(self) -> list[int]:
        """Models not saved yet (all of them for a new bank; the rest after an interruption)."""
        self.check_layout()
        for k in range(self.n_models):
            self.entry.make_room(self.model_path(k))
        return [k for k in range(self.n_models) if not self.model_path(k).is_file()]

    def siblings(self, sizes: Iterable[int]) -> list[tuple[Path, str]]:
        """``(directory, key)`` of the stored banks of this setup with another number of models among ``sizes``,
        largest first."""
        folder = self.dir.parent
        if not folder.is_dir():
            return []
        present = {p.name for p in folder.iterdir() if p.is_dir()}
        keys = {(m, self.entry.spec.with_fields(n_shadow=m).key) for m in sizes if m != self.n_models}
        return [(folder / key, key) for m, key in sorted(keys, reverse=True) if key in present]

    # -- array files ----------------------------------------------------------------------------------------
    def read_arrays(self, path: Path, shapes: Mapping[str, tuple[int, ...]], *, kind: str,
                    check: Callable[[Mapping[str, np.ndarray]], None] | None = None) -> dict[str, np.ndarray] | None:
        """The arrays ``shapes`` names from the stored ``path`` if each has its shape and dtype kind (``"f"``:
        finite floats, ``"b"``: bool) and ``check(arrays)`` passes; otherwise one warning and None (recompute)."""
        def valid(arrays: Mapping[str, np.ndarray]) -> None:
            if check is not None:
                check(arrays)
            for k, shape in shapes.items():
                a = arrays[k]
                if a.shape != shape or a.dtype.kind != kind:
                    raise ValueError(f"{k} is a {a.shape} {a.dtype} array, expected {shape}")
                if kind == "f" and not np.isfinite(a).all():
                    raise ValueError(f"{k} holds {int((~np.isfinite(a)).sum())} NaN or inf values")

        arrays = self.entry.read(str(path.relative_to(self.dir)), NPZ, valid)
        return None if arrays is None else {k: arrays[k] for k in shapes}

    def write_arrays(self, path: Path, **arrays: np.ndarray) -> Path:
        """Store named arrays in ``path`` (in the bank) atomically."""
        return atomic_save_npz(path, **arrays)

    def warn_corrupt(self, path: Path, e: BaseException) -> None:
        """One warning line for a damaged stored file of this bank that is about to be recomputed."""
        self.entry.warn_corrupt(path, e)
