"""Experiment tracking: the ``logger`` config group (``conf/logger/{none,csv,tensorboard,mlflow,wandb}.yaml``,
default ``csv``, as lightning-hydra-template's ``logger/`` group) for every job: ``duck-train``, ``duck-unlearn``,
``duck-audit``, ``duck-run``, their sweeps (``-m``) and searches (``+tune=METHOD``).

A job is one *run* (a sweep: one experiment, one run per job, a search one run per trial):

- **curves**, through Lightning's loggers: :meth:`Tracker.stage` hands the stage's logger to every Trainer the
  stage builds (:func:`duck.training.stage_logger`): the unlearning method's loss into the job's run; an original
  or oracle the job trains (not one reused from the cache) into a run of its own, a child of the job's run;
- **the results**, read when the job ends from the files it wrote in its run directory (:func:`job_results`): the
  resolved configuration as parameters; the accuracies, AUS, LiRA AUC (with its interval), the forgetting audit's
  F, normalised forgetting q and imprint kept with their intervals, a search trial's objective and the stage
  times as metrics; the forgetting verdict, method, scenario, forget classes, seed as tags; ``report.html``,
  ``metrics.json``, ``summary.json`` (and ``audit.json``, ``tune.json``) as artifacts.

Where each backend writes: :mod:`duck.pipeline.loggers`. This module imports neither Lightning nor a backend:
:func:`logger_settings` checks the settings, and that the backend is installed, before any work.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from duck.errors import DuckInputError, DuckTerminated
from duck.schema import Either, Flag, OneOf, Settings, Text, option, settings
from duck.utils import warn_line

#: the loggers, each with the module it needs (installed by the package extra of the same name)
BACKENDS: dict[str, str | None] = {"none": None, "csv": None, "tensorboard": "tensorboard", "mlflow": "mlflow",
                                   "wandb": "wandb"}
#: the settings of each logger besides its ``name`` (conf/logger/NAME.yaml)
SETTINGS: dict[str, tuple[str, ...]] = {"mlflow": ("tracking_uri", "experiment"),
                                        "wandb": ("experiment", "project", "entity", "offline")}
#: the models of a job, each in its own folder of a duck-run run directory
ROLES = ("original", "unlearned", "retrained")
#: the job's files that become a run's artifacts, where it wrote them (top level or a model's folder)
ARTIFACTS = ("report.html", "summary.json", "summary.md", "metrics.json", "audit.json", "tune.json")


@settings
class LoggerSettings(Settings):
    """The ``logger`` config (conf/logger/*.yaml), parsed by :func:`logger_settings` (each backend takes only its
    own settings, :data:`SETTINGS`)."""

    prefix: ClassVar[str] = "logger"

    name: str = option("none", OneOf(tuple(BACKENDS)), "the experiment logger")
    tracking_uri: str | None = option(None, Either((None,), Text(), "a non-empty string or null"),
                                      "mlflow: the store (null: ./mlruns in the launch directory)")
    experiment: str | None = option(None, Either((None,), Text(), "a non-empty string or null"),
                                    "mlflow's experiment, wandb's group (null: the sweep, or duck-COMMAND)")
    project: str = option("duck-unlearn", Text(), "wandb: the project")
    entity: str | None = option(None, Either((None,), Text(), "a non-empty string or null"),
                                "wandb: the team or user (null: your login's default)")
    offline: bool = option(True, Flag(), "wandb: log offline (wandb sync uploads)")


def module_available(module: str) -> bool:
    """Whether ``module`` can be imported (found without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def logger_settings(node: Any) -> LoggerSettings:
    """The ``logger`` config node parsed (before any work, without importing torch): a known logger, its own
    settings only, and its backend installed (else one line with the install command). ``None`` (a job built
    without a config) logs nothing."""
    if node is None:
        return LoggerSettings()
    from omegaconf import DictConfig, OmegaConf

    values = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else dict(node)
    key = json.dumps(values, sort_keys=True, default=str)
    if key in _PARSED_LOGGERS:  # the command line parsed it before torch was imported; the job reuses that
        return _PARSED_LOGGERS[key]
    name = values.get("name")
    if name not in BACKENDS:
        raise DuckInputError(f"logger.name={name!r}: choose logger={'|'.join(BACKENDS)}")
    allowed = SETTINGS.get(name, ())
    unknown = sorted(set(values) - {"name", *allowed})
    if unknown:
        raise DuckInputError(f"logger={name} has no setting(s) {unknown}"
                             + (f"; its settings: {', '.join(allowed)}" if allowed else ""))
    settings_ = LoggerSettings.parse(values)
    module = BACKENDS[name]
    if module is not None and not module_available(module):
        raise DuckInputError(f"logger={name} needs the {module} package, which is not installed: pip install "
                             f"'duck-unlearn[{name}]' (or logger=csv, which needs nothing)")
    _PARSED_LOGGERS[key] = settings_
    return settings_


#: logger configs parsed in this process, by their values (a job's logger is parsed once, when the command line
#: first reads it)
_PARSED_LOGGERS: dict[str, LoggerSettings] = {}


@dataclass(frozen=True)
class JobContext:
    """Where a job runs: its sweep directory and number there (None for a single job), the directory the
    command was launched from, and a search's study name (``+tune``)."""

    sweep_dir: str | None = None
    job_num: int | None = None
    launch_dir: Path = field(default_factory=Path.cwd)
    study: str | None = None


def hydra_context(cfg: Any) -> JobContext:
    """The :class:`JobContext` of the Hydra job running now (a plain one outside Hydra)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return JobContext()
    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    study = OmegaConf.select(hc, "sweeper.study_name", default=None) if cfg.get("tune") is not None else None
    return JobContext(sweep_dir=str(hc.sweep.dir) if multirun else None, job_num=int(hc.job.num) if multirun else None,
                      launch_dir=Path(hc.runtime.cwd), study=str(study) if study else None)


# ----------------------------------------------------------------------------------- parameters and tags
def param_value(value: Any) -> str:
    """A configuration value as a parameter, written as on the command line (``null``, ``true``, ``[0,4]``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def flat_params(node: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """A nested configuration as ``{"method.lr": "0.01", ...}`` (the keys as overrides name them)."""
    out: dict[str, str] = {}
    for key, value in node.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flat_params(value, f"{name}."))
        else:
            out[name] = param_value(value)
    return out


def resolved_config(cfg: Any) -> dict[str, Any]:
    """``cfg`` as plain Python, interpolations resolved where they can be (else left as written)."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if not isinstance(cfg, DictConfig):
        return dict(cfg)
    try:
        return OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(cfg, resolve=False)


def job_tags(config: Mapping[str, Any], command: str, context: JobContext) -> dict[str, str]:
    """The job run's tags: command, method (``original`` / ``retrain`` for duck-train), scenario, forget classes,
    seed, data, model, and in a sweep the sweep directory and job number (a search: the study and the trial)."""
    def get(path: str) -> Any:
        node: Any = config
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    method = get("method.name") if command in ("unlearn", "run") else None
    if command == "train":
        method = "retrain" if get("retrain") else "original"
    tags = {"command": f"duck-{command}", "role": "job", "method": method, "scenario": get("scenario.kind"),
            "forget_classes": get("scenario.forget_classes"), "seed": get("seed"), "data": get("data.name"),
            "model": get("model.name")}
    if context.sweep_dir is not None:
        tags.update(sweep=context.sweep_dir, job=context.job_num)
    if context.study is not None:
        tags.update(study=context.study, trial=context.job_num)
    if tags["scenario"] in (None, "none"):
        tags.pop("forget_classes")
    return {k: param_value(v) for k, v in tags.items() if v is not None}


def run_name(tags: Mapping[str, str], context: JobContext) -> str:
    """``duck class_removal [3] seed 0``; in a sweep prefixed with the job number (``4: ...``)."""
    name = " ".join(p for p in (tags.get("method") or tags["command"], tags.get("scenario"),
                                tags.get("forget_classes"), f"seed {tags['seed']}" if "seed" in tags else None) if p)
    return f"{context.job_num}: {name}" if context.job_num is not None else name


# ----------------------------------------------------------------------------------------------- results
def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _put(out: dict[str, float], key: str, value: Any) -> None:
    number = _number(value)
    if number is not None:
        out[key] = number


def _put_interval(out: dict[str, float], key: str, value: Any, interval: Any) -> None:
    """``key`` and, where the interval is given, ``key_ci_low`` / ``key_ci_high``."""
    _put(out, key, value)
    if isinstance(interval, (list, tuple)) and len(interval) == 2:
        _put(out, f"{key}_ci_low", interval[0])
        _put(out, f"{key}_ci_high", interval[1])


def record_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """A metrics.json record's numbers: ``acc/<split>``, ``aus``, ``time_s``, ``epochs``, ``forget_target_met``."""
    out: dict[str, float] = {}
    for split, value in (record.get("acc") or {}).items():
        _put(out, f"acc/{split}", value)
    for key in ("aus", "time_s", "epochs"):
        _put(out, key, record.get(key))
    if isinstance(record.get("forget_target_met"), bool):
        out["forget_target_met"] = float(record["forget_target_met"])
    return out


def audit_metrics(audit: Mapping[str, Any]) -> dict[str, float]:
    """An audit.json record's membership-inference numbers: LiRA's AUC with its interval and TPR at each FPR, the
    SVM MIA's F1 and accuracy."""
    out: dict[str, float] = {}
    lira = audit.get("lira") or {}
    _put_interval(out, "lira/auc", lira.get("auc"), lira.get("auc_ci"))
    for level, value in (lira.get("tpr_at_fpr") or {}).items():
        _put(out, f"lira/tpr_at_fpr_{level}", value)
    svm = audit.get("svm_mia") or {}
    _put(out, "svm_mia/f1", svm.get("f1"))
    _put(out, "svm_mia/accuracy", svm.get("accuracy"))
    return out


def forgetting_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The forgetting audit's numbers (audit.json ``forgetting``; ALGORITHMS.md §10-11): F, the normalised
    forgetting q and the imprint kept (the verdict's statistic), each with its interval; the challenge's final
    score; KLOM's median on the forget set; N and R; the utility ratios."""
    out: dict[str, float] = {}
    for name, key in (("F", "quality"), ("q", "quality_normalised"), ("imprint_kept", "shift")):
        _put_interval(out, f"forgetting/{name}", record.get(key), record.get(f"{key}_ci"))
    for key in ("final_score", "n_unlearned", "n_retrained"):
        _put(out, f"forgetting/{key}", record.get(key))
    _put(out, "forgetting/klom_forget_median", ((record.get("klom") or {}).get("forget") or {}).get("median"))
    utility = record.get("utility") or {}
    for key in ("retain_ratio", "test_ratio"):
        _put(out, f"forgetting/{key}", utility.get(key))
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _trained_role(record: Mapping[str, Any]) -> str:
    """The model duck-train's metrics.json describes: ``original``, or ``retrained`` (method ``retrain``)."""
    return "retrained" if record.get("method") == "retrain" else "original"


@dataclass
class JobResults:
    """What a job's run directory says (:func:`job_results`)."""

    metrics: dict[str, float] = field(default_factory=dict)  # the job run's
    tags: dict[str, str] = field(default_factory=dict)
    files: list[tuple[Path, str]] = field(default_factory=list)  # (file, its folder in the run)
    models: dict[str, dict[str, float]] = field(default_factory=dict)  # each model's own metrics


def job_results(out: Path, command: str = "run") -> JobResults:
    """The results of the job whose run directory is ``out``, from the files it wrote: ``metrics.json`` (top
    level: duck-train / duck-unlearn; ``<model>/metrics.json``: duck-run), ``audit.json`` (likewise; the model
    from its ``target``), ``summary.json`` (duck-run's A_t / A_f rows) and ``tune.json`` (a search trial). Metric
    names are ``<model>/...`` (``unlearned/acc/test``, ``original/lira/auc``), ``forgetting/...`` and
    ``tune/...``; a file a failed job did not write is left out. ``command``: the job's (``train``'s top-level
    metrics.json is an original's or an oracle's, ``unlearn``'s the unlearned model's)."""
    res = JobResults()
    records: dict[str, dict[str, Any]] = {}
    audits: dict[str, dict[str, Any]] = {}
    top = _read_json(out / "metrics.json")
    if top is not None:
        records[_trained_role(top) if command == "train" else "unlearned"] = top
    top_audit = _read_json(out / "audit.json")
    if top_audit is not None:
        audits[str(top_audit.get("target") or "target")] = top_audit
    for role in ROLES:
        for name, found in (("metrics.json", records), ("audit.json", audits)):
            data = _read_json(out / role / name)
            if data is not None:
                found[role] = data
    for role, record in records.items():
        res.models[role] = record_metrics(record)
        if role == "unlearned" and "original" not in records and record.get("original_acc"):
            res.metrics.update({f"original/{k}": v for k, v in record_metrics({"acc": record["original_acc"]}).items()})
        if isinstance(record.get("reused_from_cache"), bool):
            res.tags[f"{role}_from_cache"] = param_value(record["reused_from_cache"])
    for role, audit in audits.items():
        res.models.setdefault(role, {}).update(audit_metrics(audit))
    for role, values in res.models.items():
        res.metrics.update({f"{role}/{k}": v for k, v in values.items()})
    summary = _read_json(out / "summary.json") or {}
    for row in summary.get("rows") or []:  # "original", "unlearned (duck)", "retrained"
        role = str(row.get("model", "")).split(" ", 1)[0]
        for key in ("A_t", "A_f"):
            _put(res.metrics, f"{role}/{key}", row.get(key))
    for role in sorted(audits, key=lambda r: (r != "unlearned", r != "margins")):  # the method's audit first
        forgetting = audits[role].get("forgetting")
        if isinstance(forgetting, dict) and "verdict" in forgetting:
            res.metrics.update(forgetting_metrics(forgetting))
            res.tags.update(verdict=str(forgetting["verdict"]), verdict_rule=str(forgetting.get("rule", ""))[:4000])
            break
    if top_audit is not None:
        res.tags["audited"] = str(top_audit.get("target"))
    tune = _read_json(out / "tune.json")
    if tune is not None:
        for key in ("objective", "value", "aus"):
            _put(res.metrics, f"tune/{key}", tune.get(key))
        res.tags.update(tune_objective=str(tune.get("kind")), reached_target=param_value(tune.get("reached_target")))
    for folder in ("", *ROLES):
        for name in ARTIFACTS:
            path = out / folder / name
            if path.is_file():
                res.files.append((path, folder))
    return res


# ------------------------------------------------------------------------------------------------ tracker
class Tracker:
    """The runs of one job (:func:`tracked` opens and closes them): the job's run, the runs of the models it
    trains, and the stage times. The job's run is opened when the job first trains (its curves) or when it ends
    well (its results): a job refused before any work has no run. With ``logger=none`` nothing is logged."""

    def __init__(self, settings: LoggerSettings, command: str, out: Path, context: JobContext | None = None) -> None:
        self.settings, self.command, self.out = settings, command, Path(out)
        self.context = context or JobContext()
        self.backend: Any = None
        self._job_run: Any = None
        self.model_runs: dict[str, Any] = {}
        self.stage_times: dict[str, float] = {}
        self.tags: dict[str, str] = {}
        self.params: dict[str, str] = {}
        self.name = ""
        self._t0 = time.perf_counter()

    @property
    def enabled(self) -> bool:
        return self.settings.name != "none"

    def experiment(self) -> str:
        """``logger.experiment``, else the sweep directory (one experiment per sweep), else ``duck-COMMAND``."""
        return self.settings.experiment or self.context.sweep_dir or f"duck-{self.command}"

    def start(self, cfg: Any) -> None:
        """Read the job's tags and parameters (the resolved configuration) from its config."""
        if not self.enabled:
            return
        config = resolved_config(cfg)
        self.tags = job_tags(config, self.command, self.context)
        self.params = flat_params(config)
        self.name = run_name(self.tags, self.context)

    def job_run(self) -> Any:
        """The job's run (:mod:`duck.pipeline.loggers`), opened on first use."""
        if self._job_run is None:
            from duck.pipeline.loggers import open_backend

            self.backend = open_backend(self.settings.name, self.settings, self.out, self.experiment(),
                                        self.context.launch_dir)
            self._job_run = self.backend.open("job", self.name, self.tags, None)
            self._job_run.start(self.params)
        return self._job_run

    def model_run(self, role: str) -> Any:
        """The run of a model the job trains (a child of the job's run), opened on first use."""
        if role not in self.model_runs:
            parent = self.job_run()
            run = self.backend.open(role, f"{role}: {self.name}", self.model_tags(role), parent)
            run.start(self.params)
            self.model_runs[role] = run
        return self.model_runs[role]

    def model_tags(self, role: str) -> dict[str, str]:
        """The tags of a model's run: the job's, with its role and its own method (``original`` / ``retrain``)."""
        return {**self.tags, "role": role, "method": {"original": "original", "retrained": "retrain"}.get(role, role)}

    @contextmanager
    def stage(self, name: str, *, own_run: bool = False, training: bool = True) -> Iterator[None]:
        """Time the block as stage ``name``; the Trainers built inside log to the job's run, or with ``own_run``
        to a run of the model ``name`` (``original``, ``retrained``) made when its first fit starts (a model
        reused from the cache gets none); ``training=False``: the block's Trainers (the audit's banks) log
        nothing."""
        from duck.training import stage_logger

        if not self.enabled:
            with stage_logger(None):
                yield
            return
        source = None
        if training:
            source = (lambda: self.model_run(name).training_logger()) if own_run else (
                lambda: self.job_run().training_logger())
        t0 = time.perf_counter()
        try:
            with stage_logger(source):
                yield
        finally:
            self.stage_times[name] = time.perf_counter() - t0

    def finish(self, status: str = "FINISHED", error: str | None = None, refused: bool = False) -> None:
        """Log the job's results (:func:`job_results`) and the stage times, and close its runs with ``status``.
        A failed job's runs are closed only where they were opened (it had started training); a job refused with
        an input error (``refused``) then also takes back what they wrote in its run directory: such a job writes
        nothing there but Hydra's logs (docs/commands.md, exit status 2)."""
        if not self.enabled or (status != "FINISHED" and self._job_run is None):
            return
        job_run = self.job_run()
        results = job_results(self.out, self.command)
        metrics = {**results.metrics, **{f"stage_time_s/{k}": v for k, v in self.stage_times.items()},
                   "stage_time_s/job": time.perf_counter() - self._t0}
        tags = {**self.tags, **results.tags, "status": status.lower()}
        if error:
            tags["error"] = error[:4000]
        runs = [*((run, results.models.get(role, {}), {**tags, **self.model_tags(role)}, [])
                  for role, run in self.model_runs.items()), (job_run, metrics, tags, results.files)]
        for run, run_metrics, run_tags, files in runs:
            run.finish(run_metrics, run_tags, files, status)
            if refused:
                run.discard(self.out)


#: the tracker of a job run without a config (the Python API, benchmarks): logs nothing
UNTRACKED = Tracker(LoggerSettings(), "run", Path("."))


@contextmanager
def tracked(cfg: Any, command: str, out: Path) -> Iterator[Tracker]:
    """Track the job ``command`` of config ``cfg`` writing into ``out`` (:class:`Tracker`): its results logged and
    its runs closed after the block; a job that fails is closed as ``FAILED`` (``KILLED`` when stopped) with its
    error as a tag where it had opened a run, and the error goes on."""
    tracker = Tracker(logger_settings(cfg.get("logger")), command, out, hydra_context(cfg))
    tracker.start(cfg)
    try:
        yield tracker
    except BaseException as e:
        killed = isinstance(e, DuckTerminated) or not isinstance(e, Exception)
        try:
            tracker.finish("KILLED" if killed else "FAILED", error=str(e) or type(e).__name__,
                           refused=isinstance(e, DuckInputError))
        except Exception as closing:  # the job's own error is the one to report
            warn_line(f"logger={tracker.settings.name}: the failed job's run was not closed: {closing}")
        raise
    tracker.finish()
