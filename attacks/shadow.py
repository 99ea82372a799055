"""The shadow bank of the LiRA audit (ALGORITHMS.md §4 "Shadow bank"; Carlini et al. 2022 §IV).

E shadow models with the target's architecture and training recipe. Keep matrix: a uniform ``E×N``
matrix, and per column the ``E/2`` smallest entries are IN, so every example of the pool is in the
training data of exactly half of the shadows. Shadow ``k`` trains on its IN examples with seed
``shadow_seed(seed, k)`` (initialisation, shuffling, augmentation).

The bank depends only on (data, model, recipe, E, seed, pool): it is one entry of the artifact store,
``<cache_dir>/store-v1/shadow_banks/<key>/`` (``meta.json``, ``keep.npy``, ``shadows/shadow_KKKK.ckpt``, and
the shadows' φ on every train/test sample per set of query views, ``phi_<views>.npz``), all written atomically;
its files, their checks and its lock are :class:`attacks.bank_cache.BankCache`'s. Training proceeds in chunks
of ``chunk_size`` models (batched, or one after another) and saves each shadow as soon as its chunk is done, so
a bank larger than memory trains chunk by chunk and an interrupted bank resumes from the shadows already saved.
The next audit on the same setup only runs inference (or nothing, once the φ file exists).

Concurrent audits of one bank (a Hydra sweep over methods, jobs sharing a cache directory) take turns: training
runs under the bank's lock in the store (``shadow_banks/<key>.lock``, :func:`duck.store.file_lock`; released by
the OS when a job dies), so a second audit waits for the first, then finds the shadows saved and trains none of
them again; ``meta.json`` is updated under the entry's index lock, so neither loses the other's entries.

The bank directory is a cache: a damaged entry (see :mod:`attacks.bank_cache`; here also a checkpoint that does
not load or whose manifest names another shadow or bank) is rebuilt with a one-line ``warning: ...``; it is
never used as it is and never ends the job with a traceback.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from lightning.pytorch.callbacks import Callback

from attacks.bank_cache import BANK_FORMAT, BankCache  # noqa: F401 (BANK_FORMAT: the banks' store version)
from attacks.bank_scoring import BankScoring
from attacks.batched import calibrate, check_batchable, train_batched
from attacks.threads import intra_op_threads, resolve_threads
from duck._version import __version__
from duck.checkpoint import build_manifest, load_checkpoint, save_checkpoint
from duck.data.base import DatasetSplits, IndexedDataset
from duck.data.loaders import collate_indexed, fetch
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.store import CORRUPT_ERRORS
from duck.training import Recipe, single_device, train_classifier, training_trainer_settings
from duck.utils import available_memory, human_bytes

POOLS = ("train", "train+test")
MODES = ("auto", "batched", "sequential")


class _FirstEpochTimer(Callback):
    """Calls ``report(seconds)`` once, when the first training epoch ends (the bank's time estimate)."""

    def __init__(self, report: Callable[[float], None]) -> None:
        self.report, self.t0 = report, 0.0

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == 0:
            self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == 0:
            self.report(time.perf_counter() - self.t0)


def state_bytes(model: torch.nn.Module) -> int:
    """Bytes of ``model``'s state dict (about its checkpoint's size)."""
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def _free_disk(path: Path) -> int | None:
    """Free bytes on the file system that will hold ``path`` (its nearest existing parent)."""
    import shutil

    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


#: bytes of memory per model and example while a bank is built and scored: the keep matrix's draws and ranks
#: (float64 + int64) and φ with correctness per view, with room for copies
RAM_BYTES_PER_CELL = 64


def check_bank_resources(n_models: int, n_examples: int, model_bytes: int, where: Path, label: str,
                         setting: str) -> None:
    """Refuse a bank larger than this machine before anything is allocated: its checkpoints (``n_models`` x
    ``model_bytes``) against the free space under ``where``, its per-model arrays against the available memory;
    one error naming both sizes and ``setting``, the option to lower."""
    need_disk, need_ram = n_models * model_bytes, RAM_BYTES_PER_CELL * n_models * n_examples
    for need, free, what in ((need_disk, _free_disk(where), "on disk under the cache directory"),
                             (need_ram, available_memory(), "of memory")):
        if free is not None and need > free:
            raise DuckInputError(f"{setting}={n_models}: the {label} of {n_models} models needs about {human_bytes(need)} "
                                 f"{what}, and {human_bytes(free)} is free; lower {setting}"
                                 + (" or choose another cache_dir" if "disk" in what else ""))


def keep_matrix(n_shadow: int, n: int, seed: int) -> np.ndarray:
    """``(E, N)`` bool: per column the ``E/2`` smallest entries of a uniform matrix are IN (ALGORITHMS.md §4),
    so every example is IN for exactly ``E/2`` shadows."""
    if n_shadow < 2 or n_shadow % 2:
        raise DuckInputError(f"attack.n_shadow={n_shadow} must be an even number >= 2 (every example is IN "
                             "for exactly half of the shadows); 16 or 64 are usual")
    u = np.random.default_rng([int(seed), 0x5AD0]).uniform(size=(n_shadow, n))  # (E, N)
    rank = u.argsort(axis=0, kind="stable").argsort(axis=0, kind="stable")  # rank of each entry in its column
    return rank < n_shadow // 2


def shadow_seed(seed: int, k: int) -> int:
    """Seed of shadow ``k`` (initialisation, data order, augmentation): independent streams per shadow."""
    return int(np.random.SeedSequence([int(seed), int(k)]).generate_state(1)[0] & 0x7FFFFFFF)


class PoolDataset(IndexedDataset):
    """Train and test splits as one pool (``attack.shadow_pool=train+test``): index ``i < N_train`` is
    training sample ``i``, index ``N_train + j`` is test sample ``j``."""

    def __init__(self, train: IndexedDataset, test: IndexedDataset) -> None:
        self.train, self.test, self.n_train = train, test, len(train)
        self.labels = np.concatenate([np.asarray(train.labels), np.asarray(test.labels)])

    @staticmethod
    def _fetch(ds: IndexedDataset, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # in-memory tensors (``to``) gather where they live, from ids on the same device
        x, y, _ = collate_indexed(fetch(ds, ids if hasattr(ds, "to") else ids.tolist()))
        return x, y

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y, _ = self.train[i] if i < self.n_train else self.test[i - self.n_train]
        return x, y, int(i)

    def __getitems__(self, idx: list[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.as_tensor(idx, dtype=torch.long)
        in_train = ids < self.n_train
        x = y = None
        for mask, ds, offset in ((in_train, self.train, 0), (~in_train, self.test, self.n_train)):
            pos = mask.nonzero().flatten()
            if pos.numel():
                xs, ys = self._fetch(ds, ids[pos] - offset)
                if x is None:
                    x = xs.new_empty((len(ids), *xs.shape[1:]))
                    y = ys.new_empty((len(ids),))
                x[pos], y[pos] = xs, ys
        return x, y, ids

    def to(self, device: torch.device | str) -> PoolDataset:
        """Both splits on ``device`` (only when both hold their tensors in memory: see
        :func:`attacks.batched.device_dataset`)."""
        return PoolDataset(self.train.to(device), self.test.to(device))

    def nbytes(self) -> int | None:
        """Bytes :meth:`to` would copy; None when a split reads its samples lazily (cannot move)."""
        if not all(hasattr(ds, "nbytes") for ds in (self.train, self.test)):
            return None
        return self.train.nbytes() + self.test.nbytes()


def _callable_spec(spec: Any) -> Any:
    """A JSON-able description of an optimiser/scheduler spec (Hydra mapping or ``functools.partial``)."""
    if spec is None:
        return None
    if isinstance(spec, functools.partial):
        f = spec.func
        return {"_target_": f"{f.__module__}.{getattr(f, '__qualname__', f)}", **spec.keywords}
    if isinstance(spec, Mapping):
        return {str(k): v for k, v in spec.items() if k != "_partial_"}
    return repr(spec)


def bank_spec(data: DatasetSplits, model: Classifier, recipe: Recipe, *, n_shadow: int, seed: int, pool: str,
              augment: Sequence[str], trainer_cfg: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a bank depends on: data (content fingerprint), model (spec + parameter shapes), recipe, E, seed,
    the training pool, the precision and every other ``trainer.*`` setting that changes training
    (``duck.training.training_trainer_settings``; not where the run executes). The store key is a hash of
    this, the bank's kind and :data:`~attacks.bank_cache.BANK_FORMAT`."""
    precision = dict(trainer_cfg or {}).get("precision")
    training = training_trainer_settings(trainer_cfg, precision=False)

    shapes = [[n, list(t.shape)] for n, t in model.state_dict().items()]
    return json.loads(json.dumps({
        "duck_version": __version__,
        "data": {"name": data.name, "n_train": len(data.train), "n_test": len(data.test),
                 "fingerprint": data.fingerprint()},
        "augment": list(augment),
        "model": {**model.spec(), "class": type(model.net).__name__,
                  "shapes_sha256": hashlib.sha256(json.dumps(shapes).encode()).hexdigest()},
        "recipe": {"epochs": recipe.epochs, "batch_size": recipe.batch_size,
                   "optimizer": _callable_spec(recipe.optimizer),
                   "scheduler": _callable_spec(recipe.scheduler),
                   "label_smoothing": recipe.label_smoothing},
        "n_shadow": int(n_shadow), "seed": int(seed), "pool": pool, "precision": str(precision),
        **({"trainer": training} if training else {}),  # absent by default: keys of existing banks unchanged
    }, sort_keys=True, default=str))


class ShadowBank(BankScoring):
    """E shadow models of one setup, trained once and cached (see the module docstring); loading and scoring
    the trained models (φ per view, who trained on what) are :class:`attacks.bank_scoring.BankScoring`'s.

    ``model_factory()`` returns a freshly initialised model of the target's architecture (it is called
    after ``torch.manual_seed(shadow_seed(seed, k))``); ``recipe`` is the target's training recipe;
    ``trainer_cfg`` is passed to :func:`duck.training.train_classifier` in sequential mode.

    Subclasses (:class:`attacks.retrain_bank.RetrainBank`) change what each model trains on and its seed
    (:meth:`expected_keep`, :meth:`model_seed`), the spec (:meth:`extra_spec`) and where the bank lives
    (:attr:`folder`, :attr:`label`); caching, locking, resuming and inference are shared.
    """

    folder = "shadow_banks"  # under the cache directory
    label = "shadow bank"  # in messages
    role = "shadow"  # the manifest's method

    def __init__(self, cache_dir: str | Path, data: DatasetSplits, model_factory: Callable[[], Classifier],
                 recipe: Recipe, *, n_shadow: int = 16, seed: int = 0, pool: str = "train",
                 augment: Sequence[str] = (), device: torch.device | str = "cpu", mode: str = "auto",
                 chunk_size: int = 16, trainer_cfg: Mapping[str, Any] | None = None,
                 threads: int | str | None = "auto", progress: bool = False) -> None:
        if pool not in POOLS:
            raise DuckInputError(f"attack.shadow_pool={pool!r}; choose one of {list(POOLS)}")
        if mode not in MODES:
            raise DuckInputError(f"attack.mode={mode!r}; choose one of {list(MODES)}")
        if int(chunk_size) < 1:
            raise DuckInputError(f"attack.chunk_size={chunk_size} must be >= 1 (models trained at once)")
        self.data, self.model_factory, self.recipe = data, model_factory, recipe
        self.n_shadow, self.seed, self.pool = int(n_shadow), int(seed), pool
        self.augment, self.device, self.mode = list(augment), torch.device(device), mode
        # the bank trains in this process on one device (a DDP job's original trains with its workers; bank
        # models are small and many: one device each, batched where that is faster)
        self.chunk_size, self.trainer_cfg, self.progress = int(chunk_size), single_device(trainer_cfg), progress
        self.dataset = data.train if pool == "train" else PoolDataset(data.train, data.test)
        self.n_pool = len(self.dataset)
        self.threads = resolve_threads(threads)
        model = model_factory()
        spec = {**bank_spec(data, model, recipe, n_shadow=self.n_shadow, seed=self.seed, pool=pool,
                            augment=self.augment, trainer_cfg=self.trainer_cfg), **self.extra_spec()}
        #: the bank's files in the artifact store: layout, checks, lock (attacks.bank_cache)
        self.cache = BankCache(cache_dir, self.folder, spec, label=self.label, n_models=self.n_shadow)
        self.spec, self.key, self.dir = self.cache.spec, self.cache.key, self.cache.dir
        self.model_bytes = state_bytes(model)  # one checkpoint's size: the resource check, the "MB on disk" line
        self._check_resources(self.model_bytes)
        self._estimate: Callable[[float], None] | None = None  # called with the first epoch's seconds
        #: what this object trained (``train()`` calls, including retraining damaged shadows while loading)
        self.job: dict[str, Any] = {"trained": [], "seconds": 0.0, "mode": None, "mode_info": {}}

    #: the setting that sets this bank's number of models (named by the resource check)
    size_setting = "attack.n_shadow"

    def _check_resources(self, model_bytes: int) -> None:
        """Refuse a bank larger than this machine before anything is allocated (:func:`check_bank_resources`)."""
        check_bank_resources(self.n_shadow, self.n_pool, model_bytes, self.dir, self.label, self.size_setting)

    def _say_estimate(self, seconds_per_model: float, n_models: int) -> None:
        """One line: how long the models still to train will take, from the first one measured."""
        self._estimate = None  # said once
        total = seconds_per_model * n_models
        when = f"{total / 60:.1f} min" if total >= 90 else f"{total:.0f} s"
        print(f"{self.label} {self.key[:8]}: about {when} for {n_models} model{'s' if n_models != 1 else ''} "
              f"({seconds_per_model:.1f} s each, "
              "from the first measured)", flush=True)

    # -- what each model trains on ------------------------------------------------------------------------
    def extra_spec(self) -> dict[str, Any]:
        """Keys a subclass adds to the bank's spec (and so to its key)."""
        return {}

    def expected_keep(self) -> np.ndarray:
        """``(E, N_pool)`` bool: the examples each model trains on (LiRA's keep matrix)."""
        return keep_matrix(self.n_shadow, self.n_pool, self.seed)

    def model_seed(self, k: int) -> int:
        """Seed of model ``k`` (initialisation, data order, augmentation)."""
        return shadow_seed(self.seed, k)

    # -- the stored files (attacks.bank_cache) -----------------------------------------------------------
    def shadow_path(self, k: int) -> Path:
        return self.cache.model_path(k)

    def phi_path(self, views: Sequence[str]) -> Path:
        return self.cache.phi_path(views)

    def train_seconds(self) -> float:
        """Seconds spent training this bank's models so far (every job's share; the one-off cost of the bank)."""
        return self.cache.train_seconds()

    @property
    def keep(self) -> np.ndarray:
        """``(E, N_pool)`` bool keep matrix (:meth:`expected_keep`), created once and stored in ``keep.npy``."""
        return self.cache.keep(self.expected_keep)

    def missing(self) -> list[int]:
        """Shadows not saved yet (all of them for a new bank; the rest after an interruption)."""
        return self.cache.missing()

    def read_arrays(self, path: Path, shapes: Mapping[str, tuple[int, ...]], *, kind: str,
                    check: Callable[[Mapping[str, np.ndarray]], None] | None = None) -> dict[str, np.ndarray] | None:
        """:meth:`attacks.bank_cache.BankCache.read_arrays`."""
        return self.cache.read_arrays(path, shapes, kind=kind, check=check)

    # -- training -------------------------------------------------------------------------------------
    def _fresh(self, k: int) -> Classifier:
        torch.manual_seed(self.model_seed(k))
        return self.model_factory()

    def resolve_mode(self) -> tuple[str, dict[str, Any]]:
        """``batched`` or ``sequential`` for this device; ``auto`` calibrates (batched only if it is faster
        and the recipe allows it; ALGORITHMS.md §4, issue: "never slower")."""
        if self.mode == "sequential":
            return "sequential", {"reason": "attack.mode=sequential"}
        if self.mode == "batched":
            check_batchable(self.recipe, self.trainer_cfg)
            return "batched", {"reason": "attack.mode=batched"}
        try:
            check_batchable(self.recipe, self.trainer_cfg)
        except DuckInputError as e:
            return "sequential", {"reason": f"auto: batching unsupported ({e})"}
        n = min(self.chunk_size, self.n_shadow)
        if n < 2:
            return "sequential", {"reason": "auto: chunk of one model"}
        cal = calibrate(self.model_factory, self.dataset, self.recipe, n, device=self.device)
        mode = "batched" if cal["speedup"] > 1.0 else "sequential"
        reason = f"auto: calibrated speed-up {cal['speedup']:.2f}x on {self.device.type}"
        return mode, {"reason": reason, **cal}

    def _save(self, k: int, model: Classifier) -> None:
        manifest = build_manifest(model.spec(), self.data.name, method=self.role,
                                  seed=self.model_seed(k),
                                  shadow_id=k, bank_key=self.key, n_in=int(self.keep[k].sum()))
        save_checkpoint(self.shadow_path(k), model.state_dict(), manifest)

    def _train_chunk(self, chunk: Sequence[int], mode: str) -> None:
        index_sets = [np.flatnonzero(self.keep[k]) for k in chunk]
        seeds = [self.model_seed(k) for k in chunk]
        if mode == "batched":
            fresh = [self._fresh(k) for k in chunk]
            models = train_batched(fresh, self.dataset, self.recipe, index_sets, seeds,
                                   augment=self.augment, device=self.device, progress=self.progress)
            for k, m in zip(chunk, models, strict=True):
                self._save(k, m)
            return
        for k, idx, s in zip(chunk, index_sets, seeds, strict=True):
            timer = [_FirstEpochTimer(self._estimate)] if self._estimate is not None else []
            model, _ = train_classifier(self._fresh(k), self.dataset, self.recipe, indices=idx,
                                        augment=self.augment, seed=s, trainer_cfg=self.trainer_cfg, callbacks=timer)
            self._save(k, model)

    def train(self) -> dict[str, Any]:
        """Train the missing shadows chunk by chunk, saving each chunk as it completes. Returns what this call
        did (``{"trained": [...], "seconds": ..., "mode": ..., "mode_info": ...}``); :attr:`job` sums all calls,
        including the retraining of damaged shadows found while loading them (:meth:`shadow_phi`). Runs under
        the bank's lock: a concurrent job's shadows are waited for, not trained twice."""
        with self.cache.lock():
            return self._train_unlocked()

    def train_models(self, ks: Sequence[int]) -> dict[str, Any]:
        """Train only the missing models among ``ks`` (under the bank's exclusive lock): a bank whose models are
        used one at a time (oracle matching's per-run oracles) trains those asked for, not all of them."""
        wanted = {int(k) for k in ks}
        with self.cache.lock():
            return self._train_unlocked(lambda k: k in wanted)

    def train_slice(self, shard: int, num_shards: int, models: Collection[int] | None = None) -> dict[str, Any]:
        """Train only slice ``shard`` of ``num_shards`` (the missing models ``k`` with ``k % num_shards ==
        shard``, among ``models`` when given: a bank whose models are used one at a time), for array jobs that
        build one bank together: the slices hold the bank's lock *shared* (they train disjoint models, every
        file written atomically), so they run side by side while a whole-bank :meth:`train` waits for all of
        them and then finds the bank complete."""
        if not 0 <= shard < num_shards:
            raise DuckInputError(f"attack.shard={shard} must be in 0..{num_shards - 1}")
        wanted = None if models is None else {int(k) for k in models}
        with self.cache.lock(shared=True):
            return self._train_unlocked(lambda k: k % num_shards == shard and (wanted is None or k in wanted))

    #: may model k be taken from a bank of the same setup with another number of models? Only where model k's
    #: training set and seed do not depend on the number of models (every model trains on the same set:
    #: the retrain banks); a LiRA shadow's IN set comes from a keep matrix drawn for E models
    shares_models_across_sizes = False

    def _siblings(self) -> list[tuple[Path, str]]:
        """``(directory, key)`` of the banks of this setup with another number of models, largest first."""
        if not self.shares_models_across_sizes:
            return []
        return self.cache.siblings(range(2, max(4 * self.n_shadow, 256) + 1))

    def _adopt(self, todo: Sequence[int]) -> list[int]:
        """Copy the models in ``todo`` that a sibling bank (:meth:`_siblings`) holds already, re-labelled as this
        bank's: raising R (``attack.forgetting.n_retrained`` 3 -> 4) trains only the new models. A sibling's
        checkpoint is taken only if its manifest names that model of that bank with this model's seed."""
        adopted, siblings = [], self._siblings()
        for k in todo:
            for directory, key in siblings:
                path = directory / "shadows" / self.shadow_path(k).name
                try:
                    sd, manifest = load_checkpoint(path)
                except (DuckInputError, *CORRUPT_ERRORS):
                    continue
                if self._names(manifest, k, key) is not None:
                    continue
                manifest = {**manifest, "bank_key": self.key, "adopted_from": key}
                save_checkpoint(self.shadow_path(k), sd, manifest)
                adopted.append(k)
                break
        if adopted:
            print(f"{self.label} {self.key[:8]}: {len(adopted)} of its {self.n_shadow} models taken from a bank of "
                  "the same setup with another number of models", flush=True)

            def add(meta: dict[str, Any]) -> None:
                meta["trained"] = sorted(set(meta.get("trained", [])) | set(adopted))
                meta["adopted"] = sorted(set(meta.get("adopted", [])) | set(adopted))

            self.cache.record(add)
        return adopted

    def _train_unlocked(self, only: Callable[[int], bool] | None = None) -> dict[str, Any]:
        _ = self.keep  # creates meta.json and keep.npy first
        todo = [k for k in self.missing() if only is None or only(k)]
        if todo and self.shares_models_across_sizes:
            adopted = set(self._adopt(todo))
            todo = [k for k in todo if k not in adopted]
        if not todo:
            return {"trained": [], "seconds": 0.0, "mode": None, "mode_info": {}}
        from tqdm.auto import tqdm

        t0 = time.perf_counter()
        with intra_op_threads(self.threads):
            mode, info = self.resolve_mode()
            chunk = self.chunk_size if mode == "batched" else 1
            size = self.model_bytes
            print(f"{self.label} {self.key[:8]}: training {len(todo)} of {self.n_shadow} models ({mode}), "
                  f"{len(todo) * size / 1e6:.1f} MB on disk", flush=True)
            # the time estimate: after the first epoch of the first model (one at a time), or the first chunk
            self._estimate = (lambda s: self._say_estimate(s * self.recipe.epochs, len(todo))) \
                if mode == "sequential" else None
            bar = tqdm(total=len(todo), desc=f"{self.label} {self.key[:8]} ({mode})",
                       disable=not self.progress)
            for start in range(0, len(todo), chunk):
                part = todo[start: start + chunk]
                t_chunk = time.perf_counter()
                self._train_chunk(part, mode)
                if mode == "batched" and start == 0 and len(todo) > len(part):
                    self._say_estimate((time.perf_counter() - t_chunk) / len(part), len(todo))
                bar.update(len(part))
            bar.close()
            self._estimate = None
        seconds = time.perf_counter() - t0
        self.job["trained"] = sorted(set(self.job["trained"]) | set(todo))
        self.job["seconds"] += seconds
        if self.job["mode"] is None:
            self.job["mode"], self.job["mode_info"] = mode, info
        run = {"trained": todo, "seconds": seconds, "mode": mode, "mode_info": info}

        def add(meta: dict[str, Any]) -> None:
            meta["train_seconds"] = float(meta.get("train_seconds", 0.0)) + seconds
            meta["trained"] = sorted(set(meta.get("trained", [])) | set(todo))
            meta.setdefault("runs", []).append(run)

        self.cache.record(add)
        return {"trained": todo, "seconds": seconds, "mode": mode, "mode_info": info}
