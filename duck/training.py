"""Training the original classifier and the retrained oracle (retain set only) with Lightning.

``train_classifier`` is the one training recipe used for originals, retrained oracles and (batched)
shadow models' reference runs: cross-entropy, optimiser and scheduler from config (``_partial_``
callables), batched on-device augmentation, seeded and deterministic on CPU.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from duck.data.augment import apply_augment, check_augment
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.schema import REQUIRED, Integer, Real, Settings, option, settings
from duck.utils import check_number


def quiet_lightning() -> None:
    """Silence Lightning's start-up banners and the single-process DataLoader hints."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*Checkpoint directory.*")
    # a short fit with an experiment logger: its curve is the epoch means (the loss is logged on_epoch too)
    warnings.filterwarnings("ignore", message=".*smaller than the logging interval.*")


# Trainer arguments the jobs set themselves, and the setting a user changes instead: a ``trainer.*`` value for
# one of these would be replaced without a word, so it is refused.
_JOB_SET_TRAINER_KEYS = {
    "max_epochs": "the epochs come from recipe.epochs (training) or the method's epoch settings "
                  "(unlearning: method.max_epochs, method.epochs, ...; see conf/method/NAME.yaml)",
    "enable_progress_bar": "use progress=true|false",
    "callbacks": "the jobs set their own callbacks",
    "num_sanity_val_steps": "unlearning phases run no sanity validation",
}


def build_trainer(trainer_cfg: Mapping[str, Any] | None = None, **overrides: Any) -> L.Trainer:
    """A ``lightning.Trainer`` from a ``conf/trainer/*.yaml`` mapping (``_target_`` ignored) plus overrides.

    A ``trainer_cfg`` key that ``overrides`` also sets is refused (DuckInputError naming the setting to use)
    instead of being replaced silently."""
    quiet_lightning()
    kw = {k: v for k, v in dict(trainer_cfg or {}).items() if not str(k).startswith("_")}
    clash = sorted(set(kw) & set(overrides))
    if clash:
        key = clash[0]
        why = _JOB_SET_TRAINER_KEYS.get(key, "the job sets it itself")
        raise DuckInputError(f"trainer.{key}={kw[key]!r} cannot be set here: {why}; remove the trainer.{key} override")
    kw.setdefault("logger", False)
    kw.setdefault("enable_checkpointing", False)
    kw.setdefault("enable_model_summary", False)
    kw.update(overrides)
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    try:
        return L.Trainer(**kw)
    except (MisconfigurationException, TypeError, ValueError) as e:  # e.g. trainer.devices=0, +trainer.foo=1
        if isinstance(e, TypeError) and "unexpected keyword" not in str(e):
            raise
        settings = ", ".join(f"{k}={v!r}" for k, v in kw.items() if k in (trainer_cfg or {}))
        raise DuckInputError(f"invalid trainer settings ({settings}): {str(e).splitlines()[0]}; "
                             "fix the trainer.* overrides (conf/trainer/*.yaml lists the defaults)") from None


# trainer.* settings that say where and how a run executes or what it logs, not what the model learns; every
# other one (gradient_clip_val, accumulate_grad_batches, max_steps, limit_train_batches, precision, ...)
# changes the training: it enters the cache keys of trained models and shadow banks, and batched shadow
# training, which does not implement it, refuses it (attack.mode=auto then trains the shadows one by one with
# Lightning, which applies it)
PLACEMENT_TRAINER_KEYS = frozenset({
    "accelerator", "devices", "num_nodes", "strategy", "deterministic", "benchmark", "logger",
    "enable_checkpointing", "enable_model_summary", "enable_progress_bar", "default_root_dir",
    "log_every_n_steps", "num_sanity_val_steps", "check_val_every_n_epoch", "val_check_interval",
    "limit_val_batches", "limit_test_batches", "limit_predict_batches", "barebones", "profiler",
})
FLOAT32_PRECISIONS = (None, 32, "32", "32-true")


def training_trainer_settings(trainer_cfg: Mapping[str, Any] | None, *, precision: bool = True) -> dict[str, Any]:
    """The ``trainer.*`` settings that change what a model learns (not in :data:`PLACEMENT_TRAINER_KEYS`;
    Hydra's ``_target_``-style keys dropped); float32 precision counts as no setting, and ``precision=False``
    leaves precision out (cache keys record it on its own)."""
    out = {str(k): v for k, v in dict(trainer_cfg or {}).items()
           if not str(k).startswith("_") and str(k) not in PLACEMENT_TRAINER_KEYS}
    if not precision or out.get("precision", None) in FLOAT32_PRECISIONS:
        out.pop("precision", None)
    return out


def check_trainer_settings(trainer_cfg: Mapping[str, Any] | None) -> None:
    """Build (and drop) the Trainer the jobs will build from ``trainer_cfg``, so that a setting Lightning
    rejects, or one the jobs set themselves, fails before any work (a few ms; nothing is launched)."""
    build_trainer(trainer_cfg, max_epochs=1, enable_progress_bar=False, callbacks=[], num_sanity_val_steps=0)


#: DDP strategies a job accepts, and the strategy it trains with: Lightning's own workers started from this
#: process (spawn; fork where asked), so that the job's one process prepares, decides, writes files, prints and
#: holds locks, and the workers only train. Lightning's script launcher (``ddp``) would rerun the whole command
#: once per rank instead: every stage twice, both ranks writing the same files.
_DDP_STRATEGIES = {
    None: "ddp_spawn", "auto": "ddp_spawn", "ddp": "ddp_spawn", "ddp_spawn": "ddp_spawn", "ddp_fork": "ddp_fork",
    "ddp_notebook": "ddp_notebook", "ddp_find_unused_parameters_true": "ddp_spawn_find_unused_parameters_true",
    "ddp_spawn_find_unused_parameters_true": "ddp_spawn_find_unused_parameters_true",
    "ddp_fork_find_unused_parameters_true": "ddp_fork_find_unused_parameters_true",
}
#: environment variables that say this process is one of several started by a launcher (torchrun, srun)
_LAUNCHER_VARIABLES = ("WORLD_SIZE", "SLURM_NTASKS")


def single_device(trainer_cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """``trainer_cfg`` on one device (``devices=1``, no ``strategy`` / ``num_nodes``): for the work that runs in
    the job's own process (unlearning methods, shadow and retrain banks, evaluation)."""
    cfg = {**dict(trainer_cfg or {}), "devices": 1}
    cfg.pop("strategy", None)
    cfg.pop("num_nodes", None)
    return cfg


def data_parallel_size(trainer_cfg: Mapping[str, Any] | None) -> int:
    """How many DDP processes ``trainer_cfg`` trains with (Lightning's resolution of ``devices`` x
    ``num_nodes``: ``devices=-1`` counts the GPUs); 1 for single-device training. Builds (and drops) a
    Trainer, which launches nothing."""
    kw = dict(trainer_cfg or {})
    if kw.get("devices", 1) in (1, "1", [0]) and kw.get("num_nodes", 1) in (1, None):
        return 1
    trainer = build_trainer(kw, max_epochs=1, enable_progress_bar=False, callbacks=[], num_sanity_val_steps=0)
    return int(trainer.world_size)


def check_data_parallel(trainer_cfg: Mapping[str, Any] | None, batch_size: int | None = None) -> int:
    """The DDP process count of ``trainer_cfg`` (:func:`data_parallel_size`) after the checks that keep a DDP
    job one job: DuckInputError for a strategy other than DDP, several nodes, a process that a launcher started
    as one of several (the job starts its own workers), or a batch size that does not split evenly."""
    import os

    cfg = dict(trainer_cfg or {})
    if cfg.get("devices", 1) in (1, "1", [0]) and cfg.get("num_nodes", 1) in (1, None):
        return 1
    strategy = cfg.get("strategy")
    if not ((strategy is None or isinstance(strategy, str)) and strategy in _DDP_STRATEGIES):
        raise DuckInputError(f"trainer.strategy={strategy!r} with trainer.devices={cfg.get('devices')!r}: the jobs "
                             "train on several devices with DDP only; use trainer.strategy=ddp (or trainer=ddp)")
    if int(cfg.get("num_nodes") or 1) > 1:
        raise DuckInputError(f"trainer.num_nodes={cfg['num_nodes']}: a job trains on the devices of one node (it "
                             "starts its DDP workers itself); use trainer.num_nodes=1 with trainer.devices=N, and "
                             "spread work over nodes as sweep jobs or bank shards (attack.num_shards)")
    for var in _LAUNCHER_VARIABLES:
        value = os.environ.get(var, "1")
        if value.isdigit() and int(value) > 1:
            raise DuckInputError(f"{var}={value}: this job was started as one of {value} processes (torchrun / srun "
                                 "--ntasks); start it once (one task per job): it starts its DDP workers itself "
                                 f"(trainer.devices={cfg.get('devices')!r})")
    world = data_parallel_size(cfg)
    if world > 1 and batch_size is not None and batch_size % world:
        raise DuckInputError(f"recipe.batch_size={batch_size} does not split over {world} DDP processes: each "
                             f"takes batch_size / {world} samples per step (the recipe's batch, as on one device); "
                             f"use a multiple of {world}")
    return world


def make_optimizer(spec: Any, params: Any) -> torch.optim.Optimizer:
    """``spec`` is a partial (Hydra ``_partial_``) or a mapping ``{_target_, ...}``."""
    if callable(spec):
        return spec(params)
    from hydra.utils import instantiate

    return instantiate(dict(spec), _partial_=True)(params)


def make_scheduler(spec: Any, optimizer: torch.optim.Optimizer) -> Any:
    if spec is None:
        return None
    if callable(spec):
        return spec(optimizer)
    from hydra.utils import instantiate

    return instantiate(dict(spec), _partial_=True)(optimizer)


class QuietWorker(L.Callback):
    """Carried to every DDP worker with the trainer: unpickling it there silences Lightning's banners and hints
    in that process (:func:`quiet_lightning`, before the worker's set-up prints them), so the job's output
    shows each stage once."""

    def __init__(self) -> None:
        self.quiet = True  # a non-empty state: pickle calls __setstate__ only for one

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        quiet_lightning()


class CloseProcessGroup(L.Callback):
    """Carried to every DDP worker: when its fit has finished (``on_fit_end``: the success path only, so a
    worker that raised never waits here for one that did not), wait for the other workers and destroy the
    process group, so the worker's interpreter exits with no gloo/NCCL threads of the group alive. Lightning
    leaves the group to interpreter finalization, where a gloo worker aborted now and then in C++ ("terminate
    called without an active exception", SIGABRT; 2 of 4 clean-clone CI runs on 2026-11-28, after the worker
    had finished training). torch asks for ``destroy_process_group`` before exit."""

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.barrier()
            dist.destroy_process_group()


class NonFiniteGuard(L.Callback):
    """Stop a run the moment its loss (or any logged metric) becomes NaN or infinite, with a
    :class:`DuckInputError` naming ``setting`` (the learning rate to lower): a diverged model must never be
    written or reported (issue 24 item 5). :func:`check_finite_weights` checks the weights at the end."""

    def __init__(self, what: str, setting: str) -> None:
        self.what, self.setting = what, setting

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        values = {"loss": outputs.get("loss") if isinstance(outputs, Mapping) else outputs}
        values.update(trainer.callback_metrics)
        for name, value in values.items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not bool(torch.isfinite(value).all()):
                raise DuckInputError(
                    f"{self.what} diverged: {name} became {float(value.detach().float().flatten()[0])} at epoch "
                    f"{trainer.current_epoch}, step {trainer.global_step}; nothing was written. Lower {self.setting} "
                    "(or check the data for NaN/inf values)")


def check_finite_weights(model: torch.nn.Module, what: str, setting: str) -> None:
    """Refuse a model whose parameters or buffers hold NaN/inf (a diverged run), naming ``setting``."""
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise DuckInputError(f"{what} diverged: {name} holds {bad} NaN/inf values; nothing was written. Lower "
                                 f"{setting} (or check the data for NaN/inf values)")


class ClassifierModule(L.LightningModule):
    """Cross-entropy training of a :class:`Classifier` (batches are ``(x, y, idx)``)."""

    def __init__(self, model: Classifier, optimizer: Any, scheduler: Any = None,
                 augment: Sequence[str] = (), label_smoothing: float = 0.0) -> None:
        super().__init__()
        self.model = model
        self.optimizer_spec, self.scheduler_spec = optimizer, scheduler
        self.augment = check_augment(list(augment))
        self.label_smoothing = float(label_smoothing)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y, _ = batch
        if self.augment:
            x = apply_augment(x, self.augment)
        loss = F.cross_entropy(self.model(x), y, label_smoothing=self.label_smoothing)
        # every log_every_n_steps steps (trainer.*) and each epoch's mean: the curves of an experiment logger
        self.log("train_loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=len(y))
        return loss

    def configure_optimizers(self) -> Any:
        opt = make_optimizer(self.optimizer_spec, self.parameters())
        sched = make_scheduler(self.scheduler_spec, opt)
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


#: Hydra keys a recipe's optimizer / scheduler mapping may carry besides the constructor's arguments
_HYDRA_KEYS = {"_target_", "_partial_"}


def check_torch_target(spec: Mapping[str, Any], name: str, package: str, base: type | tuple[type, ...]) -> None:
    """A config's optimizer / scheduler: ``_target_`` must name a class of ``package`` (``torch.optim`` /
    ``torch.optim.lr_scheduler``) derived from ``base``, and every other key must be one of that class's
    constructor arguments with a plain value (no nested mapping: a nested ``_target_`` would be instantiated
    by Hydra). So a config can build an optimiser, never call an arbitrary function."""
    import importlib
    import inspect

    target = spec.get("_target_")
    if not isinstance(target, str) or not target.startswith(package + ".") or target.count(".") != package.count(".") + 1:
        raise DuckInputError(f"{name}._target_={target!r} must name a class of {package} (e.g. {package}."
                             f"{'SGD' if package == 'torch.optim' else 'CosineAnnealingLR'}); other callables are "
                             "not allowed in configs")
    cls = getattr(importlib.import_module(package), target.rsplit(".", 1)[1], None)
    bases = base if isinstance(base, tuple) else (base,)
    if not (inspect.isclass(cls) and issubclass(cls, bases)) or cls in bases:
        raise DuckInputError(f"{name}._target_={target!r} is not a {package} class; choose one of "
                             + ", ".join(sorted(n for n, c in vars(importlib.import_module(package)).items()
                                                if inspect.isclass(c) and issubclass(c, bases) and c not in bases)[:12]))
    params = set(inspect.signature(cls.__init__).parameters) - {"self", "params", "optimizer", "args", "kwargs"}
    for key, value in spec.items():
        if key in _HYDRA_KEYS:
            continue
        if key not in params:
            raise DuckInputError(f"{name}.{key} is not an argument of {target}; its arguments: {sorted(params)} "
                                 f"(left from the recipe's own {name.rsplit('.', 1)[-1]}? drop it with ~{name}.{key})")
        if isinstance(value, Mapping):
            raise DuckInputError(f"{name}.{key} holds a mapping ({dict(value)!r}); give a plain value")


@dataclass(frozen=True)
class TorchClass:
    """The rule of a recipe's optimizer / scheduler: a mapping whose ``_target_`` names a class of ``package``
    derived from ``base`` (:func:`check_torch_target`; no other callable), with positive ``lr`` and non-negative
    ``weight_decay`` where given; or, from Python, a callable already made (``lambda p: torch.optim.SGD(p, ...)``).
    ``optional``: ``null`` is allowed (no scheduler)."""

    package: str
    optional: bool = False

    def base(self) -> tuple[type, ...]:
        if self.package == "torch.optim":
            return (torch.optim.Optimizer,)
        return (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)

    def __call__(self, value: Any, key: str) -> Any:
        if value is None and self.optional:
            return None
        if callable(value) and not isinstance(value, Mapping):
            return value
        if not isinstance(value, Mapping):
            raise DuckInputError(f"{key}={value!r} must be a mapping with _target_ (a {self.package} class) and its "
                                 "arguments")
        check_torch_target(value, key, self.package, self.base())
        for arg, lo_open in (("lr", True), ("weight_decay", False)):
            if value.get(arg) is not None:
                check_number(value[arg], f"{key}.{arg}", 0.0, lo_open)
        return value

    def describe(self) -> str:
        return (("null or " if self.optional else "") + f"a {self.package} class (`_target_`, with `_partial_: true`) "
                "and its arguments")


@settings
class RecipeSettings(Settings):
    """``recipe``: how the original, the oracle, the banks' models and the retrain-based baselines train
    (``conf/recipe/*.yaml``)."""

    prefix: ClassVar[str] = "recipe"

    epochs: int = option(REQUIRED, Integer(1), "training epochs")
    batch_size: int = option(REQUIRED, Integer(1), "batch size (split evenly over DDP processes)")
    optimizer: Any = option(REQUIRED, TorchClass("torch.optim"), "the optimizer")
    label_smoothing: float = option(0.0, Real(0.0, False, 1.0, hi_open=True), "label smoothing of the loss")
    scheduler: Any = option(None, TorchClass("torch.optim.lr_scheduler", optional=True),
                            "the learning-rate schedule, stepped per epoch")


@dataclass
class Recipe:
    """A training recipe (``conf/recipe/*.yaml``), with the optimizer and scheduler as config mappings or, from
    Python, as callables."""

    epochs: int
    batch_size: int
    optimizer: Any
    scheduler: Any = None
    label_smoothing: float = 0.0

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> Recipe:
        """From a ``recipe`` config, parsed by :class:`RecipeSettings` (one refusal per bad value)."""
        s = RecipeSettings.parse(cfg)
        return cls(epochs=s.epochs, batch_size=s.batch_size, optimizer=s.optimizer, scheduler=s.scheduler,
                   label_smoothing=s.label_smoothing)


def worker_trainer_settings(trainer_cfg: Mapping[str, Any] | None, world: int
                            ) -> tuple[dict[str, Any], list[L.Callback]]:
    """``(trainer settings, extra callbacks)`` for a fit on ``world`` processes: above one, the DDP strategy
    that starts its workers from this process (:data:`_DDP_STRATEGIES`; this process gets the trained weights
    back), :class:`QuietWorker` and :class:`CloseProcessGroup`."""
    cfg = dict(trainer_cfg or {})
    if world == 1:
        return cfg, []
    return {**cfg, "strategy": _DDP_STRATEGIES[cfg.get("strategy")]}, [QuietWorker(), CloseProcessGroup()]


#: where the fits of the stage running now log their curves (:func:`stage_logger`): a callable that returns the
#: stage's Lightning logger (made when the first fit asks for it), or None: no logger
_STAGE_LOGGER: ContextVar[Callable[[], Any] | None] = ContextVar("duck_stage_logger", default=None)


@contextmanager
def stage_logger(source: Callable[[], Any] | None) -> Iterator[None]:
    """Inside the block every :func:`fit` (the original's and the oracle's training, an unlearning method's
    phases) logs to the Lightning logger ``source()`` returns; ``None`` switches logging off (the audit's banks,
    a method's reference models). The experiment loggers (:mod:`duck.pipeline.tracking`) set it per stage, so
    the training code and the unlearners take no logger argument; a stage that trains nothing (a model reused
    from the cache) never calls ``source``."""
    token = _STAGE_LOGGER.set(source)
    try:
        yield
    finally:
        _STAGE_LOGGER.reset(token)


def fit(trainer: L.Trainer, module: L.LightningModule, loader: Any, world: int = 1) -> None:
    """``trainer.fit(module, loader)``; on ``world`` > 1 DDP workers train and this process gets the weights
    back. A worker's :class:`DuckInputError` is raised here as one (:func:`raise_worker_input_error`). Inside a
    :func:`stage_logger` block the trainer logs to the stage's logger; under DDP it does not: the workers are
    processes of their own, whose copies of the logger would write the same files as this process's."""
    source = _STAGE_LOGGER.get()
    if source is not None and world == 1:
        trainer.loggers = [*trainer.loggers, source()]
    # the model and data go to the workers through files in /dev/shm: passing descriptors failed on a
    # sandboxed Linux here ("unable to resize file ... Invalid argument" in the worker); restored afterwards
    sharing = torch.multiprocessing.get_sharing_strategy()
    if world > 1:
        torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        for attempt in (1, 2):
            try:
                trainer.fit(module, loader)
                break
            except torch.multiprocessing.ProcessExitedException as e:  # a worker was killed (SIGTERM to the job)
                from duck.errors import DuckTerminated, warn_line

                if e.signal_name == "SIGABRT" and attempt == 1:
                    # a worker aborted in C++ (gloo); nothing reached this process (the weights come back only
                    # when every worker exited cleanly) and the workers start again from this process's seed
                    # state, so the same fit, run again, trains the same weights
                    warn_line(f"a DDP worker aborted ({e}); training this model once more")
                    continue
                raise DuckTerminated(f"a DDP worker of this job was stopped ({e}); nothing of this training was "
                                     "kept: run the job again (finished models and banks are reused from the "
                                     "cache)") from None
    except Exception as e:  # a worker's DuckInputError (divergence) arrives as the text of its traceback
        raise_worker_input_error(e)
        raise
    finally:
        torch.multiprocessing.set_sharing_strategy(sharing)


def raise_worker_input_error(error: BaseException) -> None:
    """Re-raise a DDP worker's :class:`DuckInputError` (``torch.multiprocessing`` passes it on as the text of
    its traceback) as the DuckInputError it was, so that the job ends in one ``error:`` line."""
    text = str(error)
    marker = "DuckInputError: "
    if marker in text and not isinstance(error, DuckInputError):
        raise DuckInputError(text.rsplit(marker, 1)[1].strip().splitlines()[0]) from None


def train_classifier(model: Classifier, dataset: Any, recipe: Recipe, *, indices: Sequence[int] | np.ndarray | None = None,
                     augment: Sequence[str] = (), seed: int = 0, trainer_cfg: Mapping[str, Any] | None = None,
                     progress: bool = False, callbacks: list[Any] | None = None,
                     epochs: int | None = None) -> tuple[Classifier, float]:
    """Train ``model`` on ``dataset`` (restricted to ``indices``, e.g. the retain set for the oracle).

    Returns ``(model, wall seconds)``. Same seed, same data, same machine -> same weights on CPU.
    """
    world = check_data_parallel(trainer_cfg, recipe.batch_size)
    L.seed_everything(seed, workers=True, verbose=False)
    n = len(dataset) if indices is None else len(indices)
    # drop the ragged last batch (a batch of 3 makes BatchNorm statistics noisy) unless that is all there is;
    # under DDP each of the ``world`` processes takes its share of the recipe's batch (Lightning's
    # DistributedSampler gives each a disjoint part of every epoch, seeded by the global seed)
    loader = make_loader(dataset, recipe.batch_size // world, shuffle=True, seed=seed, indices=indices,
                         drop_last=n > recipe.batch_size)
    model.train()  # Lightning keeps submodules' modes: a model handed over in eval mode would train in eval mode
    module = ClassifierModule(model, recipe.optimizer, recipe.scheduler, augment, recipe.label_smoothing)
    guard = NonFiniteGuard("training", "recipe.optimizer.lr")
    trainer_cfg, extra = worker_trainer_settings(trainer_cfg, world)
    trainer = build_trainer(trainer_cfg, max_epochs=epochs or recipe.epochs, enable_progress_bar=progress,
                            callbacks=[*(callbacks or []), guard, *extra])
    t0 = time.perf_counter()
    fit(trainer, module, loader, world)
    seconds = time.perf_counter() - t0
    check_finite_weights(model, "training", "recipe.optimizer.lr")
    return model, seconds
