"""The backends of the experiment loggers (:mod:`duck.pipeline.tracking`): a run of each is a Lightning logger
(``CSVLogger``, ``TensorBoardLogger``, ``WandbLogger``; for MLflow :class:`SidecarLogger`, which logs what
``MLFlowLogger`` does through a sidecar process), which the Trainers of a job's training stages log their curves
to, plus what Lightning's logger interface lacks for the job's results: tags and files (artifacts). Imported only
when a job logs (Lightning and the backend's client are imported here; MLflow's in its sidecar).

Where each backend writes (``out``: the job's run directory):

- ``csv``: ``out/csv/<run>/metrics.csv`` (curves, then the results in one row), ``hparams.yaml`` (the resolved
  configuration), ``tags.json``; the artifacts are the job's own files beside them;
- ``tensorboard``: event files in ``out/tensorboard/<run>/`` (the configuration and results also in the HPARAMS
  tab, the tags as text); ``tensorboard --logdir`` on a sweep directory shows every job's runs;
- ``mlflow``: a run in the tracking store (a local file store by default, :func:`mlflow_uri`); results as metrics,
  tags and artifacts; a model trained by the job is a child run (``mlflow.parentRunId``). The calls go through
  the process's MLflow sidecar (:mod:`duck.pipeline.mlflow_sidecar`; :class:`SidecarLogger` stands for
  Lightning's ``MLFlowLogger``): the job's process never imports MLflow;
- ``wandb``: a run under ``out/wandb/`` (offline by default: ``wandb sync`` uploads it), grouped by experiment.

``<run>`` is ``job`` for the job's own run, ``original`` / ``retrained`` for a model the job trained.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger
from lightning.pytorch.utilities import rank_zero_only

from duck.errors import DuckInputError
from duck.io import atomic_write_text

#: Lightning's statuses for a logger's ``finalize`` per run status
_LIGHTNING_STATUS = {"FINISHED": "success", "FAILED": "failed", "KILLED": "failed"}


class ContinuedLogger(Logger):
    """A run's Lightning logger as the successive fits of a stage see it (DUCK's two phases, SCRUB's max and min
    steps, one Trainer each): every fit's steps continue the previous fit's, and the end of a fit only saves
    (Lightning finalises its loggers after every fit: MLflow would mark the run finished before the job's
    results). The run itself is finalised by :meth:`Run.finish`. The modules' own hyperparameters (none are
    saved) are not logged: a run's parameters are the job's configuration."""

    def __init__(self, inner: Logger) -> None:
        super().__init__()
        self.inner = inner
        self._offset = 0  # the first step of the current fit
        self._next = 0  # one past the last step logged

    @property
    def name(self) -> str | None:
        return self.inner.name

    @property
    def version(self) -> int | str | None:
        return self.inner.version

    @property
    def save_dir(self) -> str | None:
        return self.inner.save_dir

    @property
    def experiment(self) -> Any:
        return self.inner.experiment

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        if step is not None:
            step = int(step) + self._offset
            self._next = max(self._next, step + 1)
        self.inner.log_metrics(metrics, step)

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """Nothing: the run's parameters are the job's configuration (:meth:`Run.start`)."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Nothing (no model graphs)."""

    def save(self) -> None:
        self.inner.save()

    def finalize(self, status: str) -> None:
        """The end of one fit: save, and let the next fit's steps follow this one's."""
        self.inner.save()
        self._offset = self._next


class Run:
    """One run of a backend: a Lightning logger (:attr:`logger`) and the job's parameters, results, tags and
    files. :meth:`start` once at the job's start, :meth:`finish` once at its end (also after a failure)."""

    def __init__(self, logger: Logger) -> None:
        self.logger = logger
        self._training: ContinuedLogger | None = None

    def training_logger(self) -> ContinuedLogger:
        """The logger the stage's Trainers get (:class:`ContinuedLogger`; one per run, so that a stage's later
        fits continue its steps)."""
        if self._training is None:
            self._training = ContinuedLogger(self.logger)
        return self._training

    def _next_step(self) -> int:
        return 0 if self._training is None else self._training._next

    def start(self, params: dict[str, str]) -> None:
        """Log the resolved configuration as the run's parameters."""
        self.logger.log_hyperparams(params)

    def finish(self, metrics: dict[str, float], tags: dict[str, str], files: list[tuple[Path, str]],
               status: str) -> None:
        """Log the results (one step after the curves), the tags and the files (``(path, folder in the run)``),
        and close the run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        if metrics:
            self.logger.log_metrics(metrics, step=self._next_step())
        self.set_tags(tags)
        self.log_files(files)
        self.logger.finalize(_LIGHTNING_STATUS[status])

    def set_tags(self, tags: dict[str, str]) -> None:
        raise NotImplementedError

    def log_files(self, files: list[tuple[Path, str]]) -> None:
        """The files of the job (report.html, metrics.json, ...). The folder loggers (csv, tensorboard) write
        inside the job's run directory, next to them: nothing to copy."""

    def local_folder(self) -> Path | None:
        """Where the run writes inside the job's run directory (None: elsewhere, e.g. an MLflow store)."""
        return None

    def discard(self, out: Path) -> None:
        """After :meth:`finish`: remove what the run wrote in the job's run directory ``out`` (a refused job
        writes nothing there but Hydra's logs), and the logger's folder there once empty."""
        folder = self.local_folder()
        if folder is None:
            return
        shutil.rmtree(folder, ignore_errors=True)
        for parent in folder.parents:
            if parent == out or out not in parent.parents:
                break
            try:
                parent.rmdir()  # only if empty
            except OSError:
                break


class FolderRun(Run):
    """A run of a logger that writes into the job's run directory (``csv``, ``tensorboard``)."""

    def __init__(self, logger: Logger, folder: Path) -> None:
        super().__init__(logger)
        self.folder = folder

    def local_folder(self) -> Path | None:
        return self.folder

    def set_tags(self, tags: dict[str, str]) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.folder / "tags.json", json.dumps(tags, indent=2, sort_keys=True) + "\n")


class CsvRun(FolderRun):
    """Lightning's ``CSVLogger`` in ``folder``: ``metrics.csv``, ``hparams.yaml``, ``tags.json``."""

    def __init__(self, folder: Path) -> None:
        from lightning.pytorch.loggers import CSVLogger

        super().__init__(CSVLogger(save_dir=folder.parent, name=folder.name, version=""), folder)


class TensorBoardRun(FolderRun):
    """Lightning's ``TensorBoardLogger`` in ``folder``: the parameters go into TensorBoard's HPARAMS tab with
    the results at the end (one hparams record per run), the tags into ``tags.json`` and a text summary."""

    def __init__(self, folder: Path) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger

        super().__init__(TensorBoardLogger(save_dir=folder.parent, name=folder.name, version="",
                                           default_hp_metric=False), folder)
        self._params: dict[str, str] = {}

    def start(self, params: dict[str, str]) -> None:
        self._params = params

    def finish(self, metrics: dict[str, float], tags: dict[str, str], files: list[tuple[Path, str]],
               status: str) -> None:
        self.logger.log_hyperparams(self._params, metrics=metrics or None)  # also logs the metrics at step 0
        writer = self.logger.experiment
        writer.add_text("tags", "\n".join(f"- {k}: {v}" for k, v in sorted(tags.items())), global_step=0)
        self.set_tags(tags)
        self.logger.finalize(_LIGHTNING_STATUS[status])


def mlflow_uri(tracking_uri: str | None, launch_dir: Path) -> str:
    """The MLflow tracking URI: ``tracking_uri`` (``logger.tracking_uri``, by default ``$MLFLOW_TRACKING_URI``),
    or a local file store ``./mlruns`` in the directory the command was launched from (MLflow's own default
    place: ``mlflow ui`` started there shows every job's and sweep's runs). A file store given as a relative path
    (``mlruns``, ``file:./mlruns``) is taken relative to the launch directory too (a job may run in its output
    directory: ``hydra.job.chdir=true``)."""
    uri = tracking_uri or "mlruns"
    if "://" in uri and not uri.startswith("file://"):
        return uri  # a server, a database
    path = Path(uri.removeprefix("file://") if uri.startswith("file://") else uri.removeprefix("file:")).expanduser()
    return (path if path.is_absolute() else launch_dir / path).resolve().as_uri()


#: MLflow's limits (Lightning's ``MLFlowLogger`` keeps the same): parameters per batch, a parameter's characters
_MLFLOW_PARAMS_PER_BATCH, _MLFLOW_PARAM_CHARS, _MLFLOW_METRICS_PER_BATCH = 100, 250, 1000


class SidecarLogger(Logger):
    """A Lightning logger of one MLflow run that makes its calls through the job's MLflow sidecar
    (:mod:`duck.pipeline.mlflow_sidecar`) instead of importing MLflow: what Lightning's ``MLFlowLogger`` logs
    (metric names cleaned to the characters MLflow allows, parameters cut to 250 characters, 100 per batch), the
    curves buffered and sent in batches (at the end of each fit, and every 1,000 values)."""

    def __init__(self, side: Any, uri: str, run_id: str) -> None:
        super().__init__()
        self.side, self.uri, self.run_id = side, uri, run_id
        self._buffer: list[list[Any]] = []

    @property
    def name(self) -> str:
        return "mlflow"

    @property
    def version(self) -> str:
        return self.run_id

    @property
    def experiment(self) -> Any:
        return None

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pairs = [[str(k), str(v)[:_MLFLOW_PARAM_CHARS]] for k, v in dict(params).items()]
        for i in range(0, len(pairs), _MLFLOW_PARAMS_PER_BATCH):
            self.side.call("log_batch", self.uri, run_id=self.run_id, params=pairs[i:i + _MLFLOW_PARAMS_PER_BATCH])

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        now = int(time.time() * 1000)
        for k, v in metrics.items():
            if isinstance(v, str):
                continue
            self._buffer.append([re.sub("[^a-zA-Z0-9_/. -]+", "", k), float(v), now, int(step or 0)])
        if len(self._buffer) >= _MLFLOW_METRICS_PER_BATCH:
            self.save()

    def save(self) -> None:
        while self._buffer:
            batch, self._buffer = self._buffer[:_MLFLOW_METRICS_PER_BATCH], self._buffer[_MLFLOW_METRICS_PER_BATCH:]
            self.side.call("log_batch", self.uri, run_id=self.run_id, metrics=batch)

    def finalize(self, status: str) -> None:
        self.save()


class MlflowRun(Run):
    """A run of an MLflow experiment, made and logged to through the job's sidecar (:class:`SidecarLogger`)."""

    def __init__(self, side: Any, uri: str, experiment_id: str, name: str, tags: dict[str, str],
                 parent: MlflowRun | None = None) -> None:
        if parent is not None:
            tags = {**tags, "mlflow.parentRunId": parent.run_id}
        self.side, self.uri = side, uri
        self.run_id = side.call("create_run", uri, experiment_id=experiment_id, run_name=name, tags=tags)
        super().__init__(SidecarLogger(side, uri, self.run_id))

    def set_tags(self, tags: dict[str, str]) -> None:
        self.side.call("log_batch", self.uri, run_id=self.run_id, tags=[[k, v] for k, v in tags.items()])

    def log_files(self, files: list[tuple[Path, str]]) -> None:
        for path, folder in files:
            self.side.call("log_artifact", self.uri, run_id=self.run_id, path=str(path), artifact_path=folder or None)

    def finish(self, metrics: dict[str, float], tags: dict[str, str], files: list[tuple[Path, str]],
               status: str) -> None:
        super().finish(metrics, tags, files, status)
        self.side.call("set_terminated", self.uri, run_id=self.run_id, status=status)


class MlflowBackend:
    """The MLflow tracking store and the experiment of a job's runs (one per sweep), through the job's sidecar
    (:func:`duck.pipeline.mlflow_sidecar.sidecar`: MLflow is imported there, not in the job's process)."""

    def __init__(self, tracking_uri: str | None, experiment: str, launch_dir: Path) -> None:
        from duck.pipeline.mlflow_sidecar import SidecarError, sidecar

        self.uri = mlflow_uri(tracking_uri, launch_dir)
        self.side = sidecar()
        try:
            self.experiment_id = self._experiment(experiment)
        except SidecarError as e:
            raise DuckInputError(f"logger=mlflow: the tracking store {self.uri} refused the experiment "
                                 f"{experiment!r}: {e}; check logger.tracking_uri (MLFLOW_TRACKING_URI) or choose "
                                 "logger.experiment=NAME") from None

    def _experiment(self, name: str) -> str:
        """The experiment's id, created if new (a sweep's parallel jobs may create it at the same time)."""
        from duck.pipeline.mlflow_sidecar import SidecarError

        for attempt in range(2):
            found = self.side.call("get_experiment", self.uri, name=name)
            if found is not None:
                if found["deleted"]:
                    raise DuckInputError(f"logger=mlflow: the experiment {name!r} in {self.uri} was deleted; restore "
                                         "it (mlflow experiments restore) or choose logger.experiment=NAME")
                return str(found["id"])
            try:
                return str(self.side.call("create_experiment", self.uri, name=name))
            except SidecarError:  # created by another job of the sweep meanwhile: read it again
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def open(self, key: str, name: str, tags: dict[str, str], parent: Run | None) -> Run:
        return MlflowRun(self.side, self.uri, self.experiment_id, name, tags,
                         parent if isinstance(parent, MlflowRun) else None)


class WandbRun(Run):
    """A Weights & Biases run (``wandb.init``, several at once: ``reinit="create_new"``, wandb >= 0.19.10) handed
    to Lightning's ``WandbLogger``; the results also go into the run's summary, the files into its files."""

    def __init__(self, run: Any, out: Path) -> None:
        from lightning.pytorch.loggers import WandbLogger

        super().__init__(WandbLogger(experiment=run))
        self.run, self.out = run, out

    def start(self, params: dict[str, str]) -> None:
        self.run.config.update(params, allow_val_change=True)

    def set_tags(self, tags: dict[str, str]) -> None:
        self.run.summary.update({f"tag/{k}": v for k, v in tags.items()})
        self.run.tags = tuple(dict.fromkeys([*self.run.tags, *wandb_tags(tags)]))

    def log_files(self, files: list[tuple[Path, str]]) -> None:
        """Copied into the run's files folder, which W&B uploads with the run (``run.save`` would print a line
        per call)."""
        for path, folder in files:
            target = Path(self.run.dir) / folder / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)

    def local_folder(self) -> Path | None:
        """W&B's folder in the run directory (an offline run, W&B's logs; an online run's record is W&B's)."""
        return self.out / "wandb"

    def finish(self, metrics: dict[str, float], tags: dict[str, str], files: list[tuple[Path, str]],
               status: str) -> None:
        if metrics:
            self.run.summary.update(metrics)
        super().finish(metrics, tags, files, status)
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)


def wandb_tags(tags: dict[str, str]) -> list[str]:
    """W&B's tags are plain strings of at most 64 characters: ``key:value``."""
    return [f"{k}:{v}"[:64] for k, v in tags.items()]


class WandbBackend:
    """Weights & Biases runs under the job's directory, offline by default; the experiment is the run group."""

    def __init__(self, out: Path, project: str, entity: str | None, group: str, offline: bool) -> None:
        self.out, self.project, self.entity, self.group, self.offline = out, project, entity, group, offline

    def open(self, key: str, name: str, tags: dict[str, str], parent: Run | None) -> Run:
        import wandb

        run = wandb.init(project=self.project, entity=self.entity, group=self.group, name=name,
                         job_type=tags.get("role"), tags=wandb_tags(tags), dir=str(self.out),
                         mode="offline" if self.offline else "online", reinit="create_new",
                         settings=wandb.Settings(silent=True))  # the job prints its own lines
        return WandbRun(run, self.out)


class FolderBackend:
    """``csv`` or ``tensorboard``: a folder per run, ``out/<backend>/<run key>``."""

    def __init__(self, kind: type[FolderRun], folder: Path) -> None:
        self.kind, self.folder = kind, folder

    def open(self, key: str, name: str, tags: dict[str, str], parent: Run | None) -> Run:
        return self.kind(self.folder / key)


def open_backend(name: str, settings: Any, out: Path, experiment: str, launch_dir: Path) -> Any:
    """The backend ``name`` (``csv``, ``tensorboard``, ``mlflow``, ``wandb``) of a job writing into ``out``, with
    its logger settings; its ``open(key, run name, tags, parent run)`` starts a run (``key``: ``job``,
    ``original``, ``retrained``; the folder of a csv / tensorboard run)."""
    if name in ("csv", "tensorboard"):
        return FolderBackend(CsvRun if name == "csv" else TensorBoardRun, out / name)
    if name == "mlflow":
        return MlflowBackend(settings.tracking_uri, experiment, launch_dir)
    if name == "wandb":
        return WandbBackend(out, settings.project, settings.entity, experiment, settings.offline)
    raise ValueError(f"unknown logger backend {name!r}")
