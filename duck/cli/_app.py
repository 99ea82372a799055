"""Shared plumbing of the Hydra console scripts: checks of the command line before Hydra starts, the help
text, clean error exits, and the entry point that turns a composed config into a job."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from duck.cli._overrides import unknown_group_choice, unknown_key_message
from duck.errors import DuckInputError
from duck.pipeline.config import (
    check_required,
    conf_dir,
    hydra_config_path,
    hydra_output_dir,
)


def fail(message: str, code: int = 2) -> None:
    """Print one clear error line and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def print_and_exit(text: str, code: int = 0) -> None:
    """Print ``text`` (help, a listing) on stdout and exit with ``code``.

    A reader that stops early (``duck-run --help | head``) closes the pipe; the write then fails with
    :class:`BrokenPipeError`, which ends the command quietly with the same code instead of a traceback. As the
    Python documentation's note on SIGPIPE advises, stdout is pointed at ``os.devnull`` first, so that the
    interpreter's last flush at exit cannot raise again.
    """
    try:
        print(text, flush=True)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(code)


#: longest override key accepted (the longest real setting is under 60 characters; Hydra would try a key as a
#: config group's file name, which the file system refuses beyond 255 bytes)
MAX_KEY_LENGTH = 200


def check_key_lengths(args: list[str]) -> None:
    """Fail with one line for an override whose key is far longer than any setting."""
    for arg in args:
        if "=" in arg and not arg.startswith("-"):
            key = arg.split("=", 1)[0].lstrip("+~")
            if len(key) > MAX_KEY_LENGTH:
                fail(f"the override key {key[:40]}... is {len(key)} characters long: no setting has such a name; "
                     "check the command line (--cfg job prints every setting)")


def check_tune_plugin(args: list[str]) -> None:
    """``+tune=METHOD`` needs Hydra's Optuna sweeper plugin: one line saying how to install it (Hydra's own
    message names a missing config, not the package)."""
    if not any(a.lstrip("+").startswith("tune=") for a in args):
        return
    import importlib.util

    if importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None:
        fail("the hyperparameter search (+tune=...) runs on Hydra's Optuna sweeper, which is not installed: "
             "pip install 'duck-unlearn[tune]' (the hydra-optuna-sweeper package)")


def check_group_choices(args: list[str], root: Path) -> None:
    """Fail with one line for an unknown group choice (:func:`unknown_group_choice`; Hydra's own message is a
    page long)."""
    message = unknown_group_choice(args, root)
    if message:
        fail(message)


def compose_checked(config_name: str, args: list[str], root: Path) -> Any:
    """Compose the config of a single job as Hydra will (~0.1 s, before torch is imported) and fail with one line
    for ``key=value`` overrides of keys it does not have (``attack.nshadow=4``: Hydra's own report is six lines and
    exit status 1). Returns the composed config, or None for sweeps (``-m``), other flags, and anything Hydra
    reports itself."""
    if any(a in ("-m", "--multirun") or a.startswith("-") for a in args):
        return None
    overrides = [a for a in args if "=" in a and not a.startswith(("hydra.", "hydra/", "~"))]
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    try:
        with initialize_config_dir(str(root), version_base="1.3"):
            return compose(config_name, overrides=overrides)
    except ConfigCompositionException as e:
        message = unknown_key_message(e)
        if message:
            fail(message)
    except Exception:  # Hydra reports everything else itself, as before
        return None
    return None


#: settings naming a checkpoint file the job reads
CHECKPOINT_KEYS = ("ckpt", "original_ckpt", "retrained_ckpt")


def check_inputs_early(cfg: Any) -> None:
    """The checks a composed config can pass before torch and Lightning are imported (about 4 s): the required
    settings (:func:`check_required`), the checkpoint and forget-id files (the loaders' own checks, same lines),
    a margins file (read and checked whole), a ``data.root`` that is a loop of links, and the experiment logger.
    Values that need the job's context are checked by the job."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from duck.paths import checkpoint_file, forget_id_file, resolved

    def value(key: str) -> Any:
        try:
            found = OmegaConf.select(cfg, key, default=None)
        except OmegaConfBaseException:  # an interpolation only the job resolves
            return None
        return found if isinstance(found, str) and found.strip() else None

    if value("margins") is None:  # duck-audit margins=FILE needs no checkpoint nor forget set
        check_required(cfg)
    else:  # the whole file is checked (numpy only, ~0.1 s)
        from attacks.equivalence import read_margins

        read_margins(value("margins"))
    for key in CHECKPOINT_KEYS:
        if value(key) is not None:
            checkpoint_file(value(key))
    if value("scenario.forget_ids") is not None:
        forget_id_file(value("scenario.forget_ids"))
    if value("data.root") is not None:
        resolved(value("data.root"), "data.root")
    if cfg.get("logger") is not None:  # its settings, and its backend installed (one line with the extra to install)
        from duck.pipeline.tracking import logger_settings

        if logger_settings(cfg.logger).name == "mlflow":  # MLflow imported by its sidecar while the job starts
            from duck.pipeline.mlflow_sidecar import prestart

            prestart()


def _results_in(folder: Path) -> list[str]:
    """Files a job wrote in ``folder`` (Hydra's own ``.hydra/``, ``*.log`` and ``multirun.yaml`` excluded, and a
    killed writer's temporary ``.*.tmp`` files: they are no results, and the next writer removes them)."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in (".hydra", "multirun.yaml") and not p.name.endswith(".log")
                  and not (p.name.startswith(".") and p.name.endswith(".tmp"))
                  and not (p.is_dir() and not _results_in(p)))


def check_output_dir(args: list[str]) -> None:
    """Refuse an explicit ``hydra.run.dir`` / ``hydra.sweep.dir`` that already holds an earlier job's results:
    the new job's ``.hydra/`` would sit beside the old ``summary.json``, ``audit.json``, checkpoints (and a
    refused job would look finished). The default directories are time-stamped to the microsecond."""
    multirun = any(a in ("-m", "--multirun") for a in args)
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    for arg in args:
        if arg.startswith(f"{key}="):
            folder = Path(arg.split("=", 1)[1]).expanduser()
            try:
                found = _results_in(folder)
            except OSError as e:  # a name too long for the file system, a loop of links, no permission
                shown = str(folder) if len(str(folder)) <= 80 else str(folder)[:77] + "..."
                fail(f"{key}={shown} cannot be used as the output directory: {e.strerror or e}; choose another "
                     f"{key} (each path component at most 255 bytes)")
            if found:
                fail(f"{key}={folder} already holds results of an earlier run ({', '.join(found[:4])}"
                     f"{', ...' if len(found) > 4 else ''}); a job writes into a directory of its own: choose "
                     f"another {key} or delete those files")


#: settings holding paths the user typed (relative to the launch directory)
INPUT_PATHS = ("ckpt", "original_ckpt", "retrained_ckpt", "cache_dir", "scenario.forget_ids", "data.root", "margins")


def resolve_input_paths(cfg: Any) -> None:
    """With ``hydra.job.chdir=true`` the job runs inside its output directory; relative input paths
    (``ckpt=model.ckpt``, ``scenario.forget_ids=ids.txt``, ``data.root``...) are made absolute against the
    directory the command was launched from, as the user meant them."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf, open_dict

    if not HydraConfig.initialized():
        return
    launch = Path(HydraConfig.get().runtime.cwd)
    if Path.cwd() == launch:
        return
    with open_dict(cfg):
        for key in INPUT_PATHS:
            value = OmegaConf.select(cfg, key, default=None)
            if isinstance(value, str) and value not in ("", "???") and not Path(value).expanduser().is_absolute():
                OmegaConf.update(cfg, key, str(launch / value), merge=False)


def _top_level_settings(path: Path) -> list[str]:
    """The top-level ``key: value  # comment`` lines of a config file, each with its comment's continuation
    lines (indented ``#`` lines right below it), up to the ``hydra:`` block."""
    lines: list[str] = []
    for raw in path.read_text().splitlines():
        if raw.startswith("hydra:"):
            break
        if raw and not raw.startswith((" ", "#", "-", "defaults:")):
            lines.append(f"  {raw}")
        elif lines and raw.lstrip().startswith("#") and raw.startswith(" ") and lines[-1].strip():
            lines.append(f"  {raw}")
    return lines


def _group_keys(path: Path, width: int = 110) -> str:
    """``key=value`` of a group option's top-level settings on one line (cut at ``width``)."""
    from omegaconf import OmegaConf

    node = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    preset = "presets" in node  # a null there is the preset's value for the scenario and data set (a method's file)
    items = [f"{k}={'(preset)' if v is None and preset else v}" for k, v in node.items()
             if k not in ("name", "defaults", "presets") and not isinstance(v, dict)]
    text = " ".join(items)
    return text if len(text) <= width else text[: width - 3] + "..."


def help_text(command: str, config_name: str, about: str, root: Path) -> str:
    """``duck-COMMAND --help``: what the command does, its config groups with their choices (the default
    marked ``*``) and the default choice's settings, its own settings with their defaults and comments (the
    config file's top level), and where to read more. Hydra's own help stays under ``--hydra-help``."""
    from omegaconf import OmegaConf

    top = root / f"{config_name}.yaml"
    defaults = OmegaConf.to_container(OmegaConf.load(top), resolve=False).get("defaults", [])
    chosen = {}
    for d in defaults:
        if isinstance(d, dict):
            chosen.update({str(group): str(choice) for group, choice in d.items()})
    lines = [f"{command}: {about}", "", f"usage: {command} [group=choice ...] [key=value ...]    "
             "(-m with comma-separated values runs a sweep)", "", "config groups (group=choice; * the default) and "
             "the default choice's settings (group.key=value; (preset): the method's preset for the scenario and data "
             "set):"]
    example = None
    for group, choice in chosen.items():
        folder = root / group
        if not folder.is_dir():
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        shown = [f"{o}*" if o == choice else o for o in options]
        note = "" if choice in options else "  (default: the data set's)" if "${" in choice else f"  (default: {choice})"
        lines.append(f"  {group:<9} {' '.join(shown)}{note}")
        if choice in options:
            keys = _group_keys(folder / f"{choice}.yaml")
            if keys:
                lines.append(f"  {'':<9}   {keys}")
                example = example or f"{group}.{keys.split('=', 1)[0]}=..."
    lines += ["", "settings (key=value):", *_top_level_settings(top)]
    lines += ["", f"{command} --cfg job prints every setting of the composed config"
              + (f"; group settings are group.key=value (e.g. {example})" if example else "")
              + f". Reference: docs/commands.md in the repository; {command} --hydra-help for Hydra's own options."]
    return "\n".join(lines)


#: the error line of a job stopped by SIGTERM while training
TERMINATED = ("the job received SIGTERM (a scheduler's time limit or pre-emption, or kill) and stopped while "
              "training; its run directory holds only the stages finished before, and unfinished cache entries "
              "were not written: run it again (finished models and banks are reused from the cache)")


def hydra_entry(config_name: str, task: Callable[[Any], Any], about: str = "") -> Callable[[], None]:
    """Build a console-script ``main`` that runs ``task(cfg)`` under Hydra.

    A :class:`DuckInputError` raised anywhere in ``task`` becomes one ``error: ...`` line on stderr and
    exit status 2 (Hydra's own logs are the only thing left in the run directory). ``-h``/``--help`` prints
    :func:`help_text` with ``about``.
    """

    def main() -> None:
        import hydra

        try:
            root = conf_dir()
        except DuckInputError as e:
            fail(str(e))
        args = sys.argv[1:]
        if any(a in ("-h", "--help") for a in args):
            print_and_exit(help_text(Path(sys.argv[0]).name, config_name, about, root))
        check_key_lengths(args)
        check_tune_plugin(args)
        check_group_choices(args, root)
        composed = compose_checked(config_name, args, root)
        if composed is not None:
            try:
                check_inputs_early(composed)
            except DuckInputError as e:
                fail(str(e))
        check_output_dir(args)
        multirun = any(a in ("-m", "--multirun") for a in args)
        if multirun:
            from duck.cli._sweep import check_sweep

            try:
                check_sweep(config_name, args, root)
            except DuckInputError as e:
                fail(str(e))
        from omegaconf import DictConfig

        @hydra.main(config_path=hydra_config_path(), config_name=config_name, version_base="1.3")
        def _run(cfg: DictConfig) -> Any:
            from lightning.pytorch.utilities.exceptions import SIGTERMException

            from duck.errors import DuckTerminated

            try:
                if cfg.get("margins") is None:  # duck-audit margins=FILE needs no checkpoint nor forget set
                    check_required(cfg)
                resolve_input_paths(cfg)
                # the job's settings are parsed once, where it is resolved (Job.from_cfg); a search's trial
                # returns its objective (the Optuna sweeper reads it)
                return task(cfg)
            except (SIGTERMException, DuckTerminated) as e:  # Lightning's SIGTERM exit would say 0: a success
                fail(str(e) if isinstance(e, DuckTerminated) else TERMINATED, DuckTerminated.exit_status)
            except DuckInputError as e:
                if not multirun:
                    fail(str(e))
                record_failed_job(str(e))  # the sweep's other jobs go on; the sweep exits non-zero at its end
                return FAILED_TRIAL if cfg.get("tune") is not None else None

        _run()  # the output directory is checked by the OutputDirCheck callback (duck/cli/_output.py)
        if multirun:
            from duck.report.sweep import LAST_FAILED

            if LAST_FAILED:
                first = LAST_FAILED[0]
                fail(f"{len(LAST_FAILED)} sweep job(s) failed, the others finished (each failed job's directory "
                     f"holds job_error.json; duck-run's sweep summary lists them): job {first['job']}: "
                     f"{first['error']}")

    return main


#: the objective of a search trial that failed with an input error (below any real trial's: AUS and the final
#: score are >= 0, a missed target subtracts 1)
FAILED_TRIAL = -2.0


def record_failed_job(message: str) -> None:
    """A sweep job's input error: one ``error: sweep job N (overrides): ...`` line on stderr and
    ``job_error.json`` in its directory (read by the sweep's end, :class:`duck.report.sweep.SweepStatus`); the
    job ends normally, so that the launcher (basic, joblib, submitit) runs the other jobs."""
    from hydra.core.hydra_config import HydraConfig

    from duck.io import atomic_save_json
    from duck.report.sweep import JOB_ERROR

    hc = HydraConfig.get()
    overrides = [str(o) for o in hc.overrides.task]
    print(f"error: sweep job {hc.job.num} ({' '.join(overrides)}): {message}", file=sys.stderr)
    atomic_save_json(Path(hc.runtime.output_dir) / JOB_ERROR, {"error": message, "overrides": overrides,
                                                                "job": hc.job.num})


def job_entry(command: str, about: str) -> Callable[[], None]:
    """The console script of a pipeline job: compose the config, run it into the Hydra run directory
    (:func:`duck.pipeline.jobs.run_command`: resolved into a Job, every setting checked before any work, tracked
    by the ``logger`` config group)."""

    def task(cfg: Any) -> Any:
        from duck.pipeline.jobs import run_command

        return run_command(command, cfg, hydra_output_dir())

    return hydra_entry(command, task, about)
