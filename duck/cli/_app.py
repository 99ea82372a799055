"""Shared plumbing for the Hydra console scripts: config location and clean error exits."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from duck.errors import DuckInputError
from duck.utils import JOB_SEED_MAX, check_bool, check_positive_int


def conf_dir() -> Path:
    """The Hydra config tree: ``$DUCK_CONF_DIR`` or the repository's top-level ``conf/``."""
    env = os.environ.get("DUCK_CONF_DIR")
    path = Path(env) if env else Path(__file__).resolve().parents[2] / "conf"
    if not path.is_dir():
        raise SystemExit(
            f"error: config directory {path} not found; set DUCK_CONF_DIR to the repository's conf/ folder"
        )
    return path


def fail(message: str, code: int = 2) -> None:
    """Print one clear error line and exit non-zero."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(code)


def unknown_group_choice(args: list[str], root: Path) -> str | None:
    """The message for the first ``group=choice`` (or ``+group=choice``) override naming a config that does not
    exist (e.g. ``method=foo``), listing the available choices; None if there is none. Comma lists are read
    value by value; sweep functions (``choice(...)``...) are left to the sweep check."""
    for arg in args:
        if "=" not in arg or arg.startswith(("~", "-")):
            continue
        key, value = arg.split("=", 1)
        key = key.lstrip("+")  # +experiment=NAME, +sweep=NAME: groups added to the defaults list
        group = root / key
        if "." in key or not group.is_dir() or value in ("", "null"):
            continue
        if re.match(r"\s*[A-Za-z_]+\(", value):  # a sweep function: choice(...), glob(...), range(...)
            continue
        choices = sorted(p.stem for p in group.glob("*.yaml"))
        for v in value.split(","):
            if v.strip() not in choices:
                return f"unknown {key} {v.strip()!r}; choose one of: {', '.join(choices)}"
    return None


def check_group_choices(args: list[str], root: Path) -> None:
    """Fail with one line for an unknown group choice (:func:`unknown_group_choice`; Hydra's own message is a
    page long)."""
    message = unknown_group_choice(args, root)
    if message:
        fail(message)


def check_override_keys(config_name: str, args: list[str], root: Path) -> None:
    """Fail with one line for ``key=value`` overrides of keys the config does not have (``attack.nshadow=4``:
    Hydra's own report is six lines and exit status 1). Composes the config once (~0.1 s); sweeps (``-m``)
    and anything else Hydra may still accept are left to Hydra."""
    if any(a in ("-m", "--multirun") or a.startswith("-") for a in args):
        return
    overrides = [a for a in args if "=" in a and not a.startswith(("hydra.", "hydra/", "~"))]
    if not overrides:
        return
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    try:
        with initialize_config_dir(str(root), version_base="1.3"):
            compose(config_name, overrides=overrides)
    except ConfigCompositionException as e:
        text = str(e)
        found = re.match(r"Could not override '([^']+)'", text)
        if found is not None and "not in struct" in str(e.__cause__ or text):
            key = found.group(1)
            fail(f"{key} is not a setting of this command; check the spelling (--cfg job prints every setting)")
    except Exception:  # Hydra reports everything else itself, as before
        return


def _results_in(folder: Path) -> list[str]:
    """Files a job wrote in ``folder`` (Hydra's own ``.hydra/``, ``*.log`` and ``multirun.yaml`` excluded)."""
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir()
                  if p.name not in (".hydra", "multirun.yaml") and not p.name.endswith(".log")
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
            found = _results_in(folder)
            if found:
                fail(f"{key}={folder} already holds results of an earlier run ({', '.join(found[:4])}"
                     f"{', ...' if len(found) > 4 else ''}); a job writes into a directory of its own: choose "
                     f"another {key} or delete those files")


def configure_threads(threads: Any) -> None:
    """``threads: auto`` (the default in every job config) uses one torch intra-op thread on machines with
    at most 4 cores: small models gain little from a second thread, and on a busy 2-core machine two threads
    per process stall each other (measured here: a digits original took 792 s with 2 threads next to other
    jobs, 21 s with 1). An integer sets the count; ``null`` keeps torch's default."""
    import torch

    if threads is None:
        return
    if threads == "auto":
        if (os.cpu_count() or 1) <= 4:
            torch.set_num_threads(1)
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise DuckInputError(f"threads={threads!r} must be auto, null or an integer >= 1")
    torch.set_num_threads(threads)


def check_job_numbers(cfg: Any) -> None:
    """The top-level settings job configs share: ``seed`` in ``[0, 2^32 - 1]``, ``eval_batch_size >= 1`` (neither
    null), and the flags ``retrain``, ``audit``, ``reuse_cached``, ``progress`` as true/false (a string like
    ``no`` is refused, not read as true)."""
    for key, minimum in (("seed", 0), ("eval_batch_size", 1)):
        if key in cfg:
            check_positive_int(cfg.get(key), key, minimum)
    if "seed" in cfg and cfg.get("seed") > JOB_SEED_MAX:
        raise DuckInputError(f"seed={cfg.get('seed')} must be at most {JOB_SEED_MAX} (Lightning seeds numpy, "
                             "which takes 32-bit seeds)")
    for key in ("retrain", "audit", "reuse_cached", "progress"):
        if key in cfg:
            check_bool(cfg.get(key), key)


def check_required(cfg: Any) -> None:
    """Refuse a run whose config still holds mandatory ``???`` values (``ckpt``, ``scenario.forget_ids``...),
    naming every one (OmegaConf raised a traceback at the first access, or the literal ``???`` was read as a
    file name)."""
    from omegaconf import OmegaConf

    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise DuckInputError(f"required setting{'s' if len(missing) > 1 else ''} {', '.join(missing)} not given; "
                             f"pass {' '.join(f'{k}=...' for k in missing)} on the command line")


#: settings holding paths the user typed (relative to the launch directory)
INPUT_PATHS = ("ckpt", "original_ckpt", "retrained_ckpt", "cache_dir", "scenario.forget_ids", "data.root")


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


def hydra_entry(config_name: str, task: Callable[[Any], Any]) -> Callable[[], None]:
    """Build a console-script ``main`` that runs ``task(cfg)`` under Hydra.

    A :class:`DuckInputError` raised anywhere in ``task`` becomes one ``error: ...`` line on stderr and
    exit status 2 (Hydra's own logs are the only thing left in the run directory).
    """

    def main() -> None:
        import hydra

        check_group_choices(sys.argv[1:], conf_dir())
        check_override_keys(config_name, sys.argv[1:], conf_dir())
        check_output_dir(sys.argv[1:])
        if any(a in ("-m", "--multirun") for a in sys.argv[1:]):
            from duck.cli._sweep import check_sweep

            try:
                check_sweep(config_name, sys.argv[1:], conf_dir())
            except DuckInputError as e:
                fail(str(e))
        from omegaconf import DictConfig

        @hydra.main(config_path=str(conf_dir()), config_name=config_name, version_base="1.3")
        def _run(cfg: DictConfig) -> None:
            try:
                check_required(cfg)
                resolve_input_paths(cfg)
                configure_threads(cfg.get("threads", "auto"))
                check_job_numbers(cfg)
                task(cfg)
            except DuckInputError as e:
                fail(str(e))

        _run()

    return main
