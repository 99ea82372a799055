"""Reading a job's Hydra config: where the packaged configs live, and the checks of the settings every job
shares. Everything here runs before any work; the rest of the pipeline receives the resolved
:class:`duck.pipeline.job.Job` and never reads the config again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar

from omegaconf import DictConfig, OmegaConf

from duck.errors import DuckInputError
from duck.schema import Check, Either, Flag, Integer, OneOf, Real, Settings, option, settings
from duck.utils import JOB_SEED_MAX

#: the Python package that holds the config tree (the repository's top-level ``conf/``, shipped as package
#: data: pyproject.toml maps ``duck.conf`` to ``conf/``), for Hydra's ``pkg://`` search path
CONF_PACKAGE = "duck.conf"


#: ``threads``: torch intra-op threads (:func:`configure_threads`)
THREADS = Either(("auto", None), Integer(1))


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


def preset(group: str, name: str) -> dict[str, Any]:
    """The packaged preset ``conf/<group>/<name>.yaml`` as plain values (interpolations resolved), with the presets
    of its own group that its ``defaults`` list builds on (``method/duck_reinit.yaml`` on ``method/duck.yaml``):
    what the Python API reads instead of composing a job config. An unknown name is refused listing the
    group's presets."""
    folder = conf_dir() / group
    path = folder / f"{name}.yaml" if isinstance(name, str) and name.isidentifier() else None
    if path is None or not path.is_file():
        raise DuckInputError(f"{group}={name!r} is not a packaged {group}; choose one of: "
                             + ", ".join(sorted(p.stem for p in folder.glob("*.yaml"))))
    # under its group's key, as in a job config, so that its interpolations (``T_max: ${recipe.epochs}``) resolve
    raw = OmegaConf.to_container(OmegaConf.create({group: OmegaConf.load(path)}), resolve=True)[group]
    base: dict[str, Any] = {}
    for entry in raw.pop("defaults", None) or []:
        if isinstance(entry, str) and entry != "_self_":
            base.update(preset(group, entry))
    return {**base, **raw}


def container(node: Any) -> Any:
    """A config node as plain Python (interpolations resolved); anything else unchanged."""
    return OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node


def _cache_dir(value: Any, key: str) -> str:
    from duck.store import check_cache_dir  # numpy and the store's codecs: not on the command line's fast path

    return str(check_cache_dir(value))  # ~ expanded


#: ``out_format`` choices of duck-unlearn: the file the unlearned weights are written to
OUT_FORMATS = {"safetensors": "unlearned.safetensors", "pt": "unlearned.pt"}


@settings
class JobSettings(Settings):
    """The top-level settings every job config shares (``conf/{train,unlearn,audit,run}.yaml``); the other
    top-level keys are groups of their own (``data``, ``attack``...) or the original's :class:`Trust`."""

    open_keys: ClassVar[bool] = True

    seed: int = option(0, Integer(0, JOB_SEED_MAX, " (Lightning seeds numpy, which takes 32-bit seeds)"),
                       "the job's seed (training, unlearning, sampling)")
    eval_batch_size: int = option(1024, Integer(1), "batch size of every evaluation pass")
    retrain: bool = option(False, Flag(), "also train the oracle retrained without the forget set")
    audit: bool = option(False, Flag(), "audit the unlearned model (attack.*) and write its report")
    reuse_cached: bool = option(True, Flag(), "reuse trained originals, oracles and banks from the cache")
    progress: Any = option("auto", Either(("auto",), Flag()), "progress bars (auto: only on a terminal)")
    input_check: bool = option(True, Flag(), "refuse data prepared differently from the original's training")
    threads: Any = option("auto", THREADS, "torch intra-op threads (auto: 1 on machines with at most 4 cores)")
    out_format: str = option("safetensors", OneOf(tuple(OUT_FORMATS)),
                             "duck-unlearn's output: unlearned.safetensors (manifest in its metadata) or "
                             "unlearned.pt (a plain state dict)")
    cache_dir: Any = option(None, Either((None,), Check(_cache_dir, "a directory path, not a file")),
                            "where originals, oracles and banks are cached (the configs: $DUCK_CACHE_DIR or "
                            "~/.cache/duck-unlearn)")


@settings
class Trust(Settings):
    """When an original model is too broken to unlearn or audit (issue 24 item 5): its test accuracy must be
    at least ``min_acc_factor / num_classes`` (1.5x chance by default; the unlearned model's retained accuracy
    likewise over the classes it keeps) and, with ``expect_acc`` (the accuracy
    the user measured in their own pipeline), within ``expect_acc_tol`` of it."""

    open_keys: ClassVar[bool] = True

    min_acc_factor: float = option(1.5, Real(0.0, False), "the original's test accuracy must be at least this "
                                                          "times chance, and the unlearned model's retained "
                                                          "accuracy this times chance among the classes it keeps "
                                                          "(0: no check)")
    expect_acc: float | None = option(None, Either((None,), Real(0.0, False, 1.0)),
                                      "the test accuracy you measured for the original in your own pipeline")
    expect_acc_tol: float = option(0.02, Real(0.0, False, 1.0), "how far the measured accuracy may be from it")


def configure_threads(threads: Any) -> None:
    """``threads: auto`` (the default in every job config and in :func:`duck.unlearn`) uses one torch
    intra-op thread on machines with at most 4 cores: small models gain little from a second thread, and on a
    busy 2-core machine two threads per process stall each other (measured here: a digits original took 792 s
    with 2 threads next to other jobs, 21 s with 1). An integer sets the count; ``None`` keeps torch's default."""
    import torch

    threads = THREADS(threads, "threads")
    if threads is None:
        return
    if threads == "auto":
        if (os.cpu_count() or 1) <= 4:
            torch.set_num_threads(1)
        return
    torch.set_num_threads(threads)


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
