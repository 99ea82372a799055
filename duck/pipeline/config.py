"""Reading a job's Hydra config: where the packaged configs live, and the checks of the settings every job
shares. Everything here runs before any work; the rest of the pipeline receives the resolved
:class:`duck.pipeline.job.Job` and never reads the config again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from duck.errors import DuckInputError
from duck.utils import JOB_SEED_MAX, check_bool, check_positive_int

#: the Python package that holds the config tree (the repository's top-level ``conf/``, shipped as package
#: data: pyproject.toml maps ``duck.conf`` to ``conf/``), for Hydra's ``pkg://`` search path
CONF_PACKAGE = "duck.conf"


def conf_dir() -> Path:
    """The Hydra config tree on disk: ``$DUCK_CONF_DIR`` where set, else the installed ``duck.conf`` package
    (the repository's ``conf/`` in an editable install, ``site-packages/duck/conf`` from a wheel)."""
    env = os.environ.get("DUCK_CONF_DIR")
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise DuckInputError(f"DUCK_CONF_DIR={env} is not a directory; point it at a config tree like the "
                                 "repository's conf/ (or unset it to use the packaged configs)")
        return path
    from importlib.resources import files

    return Path(str(files(CONF_PACKAGE)))


def hydra_config_path() -> str:
    """``config_path`` for ``hydra.main``: the ``pkg://`` path of the packaged configs, or ``$DUCK_CONF_DIR``."""
    return str(conf_dir()) if os.environ.get("DUCK_CONF_DIR") else f"pkg://{CONF_PACKAGE}"


def container(node: Any) -> Any:
    """A config node as plain Python (interpolations resolved); anything else unchanged."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def configure_threads(threads: Any) -> None:
    """``threads: auto`` (the default in every job config and in :func:`duck.unlearn`) uses one torch
    intra-op thread on machines with at most 4 cores: small models gain little from a second thread, and on a
    busy 2-core machine two threads per process stall each other (measured here: a digits original took 792 s
    with 2 threads next to other jobs, 21 s with 1). An integer sets the count; ``None`` keeps torch's default."""
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
    null), and the flags ``retrain``, ``audit``, ``reuse_cached`` as true/false (a string like ``no`` is
    refused, not read as true), ``progress`` as true, false or auto."""
    for key, minimum in (("seed", 0), ("eval_batch_size", 1)):
        if key in cfg:
            check_positive_int(cfg.get(key), key, minimum)
    if "seed" in cfg and cfg.get("seed") > JOB_SEED_MAX:
        raise DuckInputError(f"seed={cfg.get('seed')} must be at most {JOB_SEED_MAX} (Lightning seeds numpy, "
                             "which takes 32-bit seeds)")
    for key in ("retrain", "audit", "reuse_cached"):
        if key in cfg:
            check_bool(cfg.get(key), key)
    if "progress" in cfg and cfg.get("progress") != "auto":
        check_bool(cfg.get("progress"), "progress")


def check_required(cfg: Any) -> None:
    """Refuse a run whose config still holds mandatory ``???`` values (``ckpt``, ``scenario.forget_ids``...),
    naming every one (OmegaConf raised a traceback at the first access, or the literal ``???`` was read as a
    file name)."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        raise DuckInputError(f"required setting{'s' if len(missing) > 1 else ''} {', '.join(missing)} not given; "
                             f"pass {' '.join(f'{k}=...' for k in missing)} on the command line")


def resolve_progress(progress: Any) -> bool:
    """``progress: auto`` shows progress bars only when the output is a terminal (a log file of one demo run
    was 238 KB of bar redraws); true / false force them on / off."""
    import sys

    if progress == "auto":
        return bool(getattr(sys.stderr, "isatty", lambda: False)())
    return bool(progress)


def compose(config_name: str, overrides: list[str]) -> DictConfig:
    """The packaged config ``config_name`` (``run``, ``unlearn``, ...) composed with ``overrides``, as the command
    line composes it (a Hydra search path is opened on the packaged configs when none is open)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    try:
        if GlobalHydra.instance().is_initialized():
            return hydra_compose(config_name, overrides=overrides)
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return hydra_compose(config_name, overrides=overrides)
    except HydraException as e:
        raise DuckInputError(f"cannot compose the {config_name} config with {overrides}: "
                             f"{str(e).splitlines()[0]}") from None


def hydra_output_dir() -> Path:
    """The run directory of the current Hydra job (``${hydra:runtime.output_dir}``)."""
    from hydra.core.hydra_config import HydraConfig

    return Path(HydraConfig.get().runtime.output_dir)
