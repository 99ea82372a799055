"""Checks of a whole Hydra sweep (``-m``) before its first job starts.

Hydra composes and runs the jobs of a multirun one after another, so a misspelt key, an unknown group option
or a bad value in the last job used to surface after every earlier job had run (minutes to hours), with
Hydra's multi-line report or our one-line error only then, and a half-finished sweep directory. Here every
job's overrides are composed up front (the sweep's command-line overrides and the ``hydra.sweeper.params`` of
configs such as ``+sweep=methods``), and each composed config gets the checks that need no data: the
mandatory ``???`` values, the shared numbers (``seed``, flags), the method's name, its hyperparameter keys,
whether it supports the scenario, and the experiment logger (its backend installed). Checks that need the
data set (class ids in range, forget-id files) still run in each job.

To stay cheap the jobs are not all composed: every combination of the sweeps over config *groups*
(``method=``, ``scenario=``, ``+experiment=`` ...: they decide which keys exist), and each value of every
other sweep once (with the first value of the rest). Sweeps Hydra cannot enumerate (``interval``, ``glob``)
are left to Hydra.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from duck.errors import DuckInputError


def _is_group(key: str, root: Path) -> bool:
    name = key.lstrip("+~")
    return "." not in name and (root / name).is_dir()


def _parse(args: list[str]) -> list[Any] | None:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        return OverridesParser.create().parse_overrides(args)
    except Exception:  # Hydra's grammar errors: Hydra reports them itself
        return None


def _dimensions(overrides: list[Any], root: Path) -> tuple[list[str], list[list[str]], list[list[str]]] | None:
    """``(fixed, group sweeps, value sweeps)`` as ``key=value`` strings; None if a sweep cannot be enumerated."""
    fixed, groups, values = [], [], []
    for o in overrides:
        key = o.get_key_element()
        if not o.is_sweep_override():
            fixed.append(f"{key}={o.get_value_element_as_str()}")
            continue
        if not o.is_discrete_sweep() or o.value_type.name == "GLOB_CHOICE_SWEEP":
            return None
        items = [f"{key}={v}" for v in o.sweep_string_iterator()]
        (groups if _is_group(key, root) else values).append(items)
    return fixed, groups, values


def job_overrides(config_name: str, args: list[str], root: Path) -> list[list[str]]:
    """The override lists of the sweep's jobs that :func:`check_sweep` composes (see the module docstring)."""
    from hydra import compose

    parsed = _parse(args)
    if parsed is None:
        return []
    dims = _dimensions(parsed, root)
    if dims is None:
        return []
    fixed, groups, values = dims
    first = [*fixed, *(d[0] for d in groups), *(d[0] for d in values)]
    # sweeps a config defines (hydra.sweeper.params, e.g. +sweep=methods); the command line wins over them
    hydra_cfg = compose(config_name, overrides=first, return_hydra_config=True).hydra
    params = dict(hydra_cfg.sweeper.get("params") or {})
    given = {a.split("=", 1)[0].lstrip("+~") for a in [*fixed, *(d[0] for d in groups), *(d[0] for d in values)]}
    extra = [f"{k}={v}" for k, v in params.items() if str(k).lstrip("+~") not in given]
    if extra:
        parsed_extra = _parse(extra)
        more = None if parsed_extra is None else _dimensions(parsed_extra, root)
        if more is None:
            return []
        fixed, groups, values = fixed + more[0], groups + more[1], values + more[2]
    jobs = []
    base_values = [d[0] for d in values]
    for combo in itertools.product(*groups) if groups else [()]:
        jobs.append([*fixed, *combo, *base_values])
        for i, dim in enumerate(values):
            for v in dim[1:]:
                jobs.append([*fixed, *combo, *base_values[:i], v, *base_values[i + 1:]])
    return jobs


def check_job_config(cfg: Any) -> None:
    """The data-free checks of one job's composed config (module docstring)."""
    from omegaconf import OmegaConf

    from duck.pipeline.config import JobSettings, Trust, check_required

    check_required(cfg)
    JobSettings.parse(cfg)  # the sweep's pre-flight: each job parses its own settings again when it runs
    Trust.parse(cfg)
    check_logger(cfg)
    if "method" in cfg and "scenario" in cfg and cfg.method is not None:
        from duck.pipeline.job import method_settings
        from duck.unlearn import get_unlearner_class, list_unlearners
        from duck.unlearn.registry import resolve_method_cfg

        name, method_cfg = method_settings(cfg)
        kind = cfg.scenario.get("kind")
        data_name = cfg.data.get("name") if cfg.get("data") is not None else None
        if kind is not None and isinstance(data_name, str):  # its values and names: the presets need no data loaded
            resolve_method_cfg(method_cfg, data_name, kind, name)
        get_unlearner_class(name).check_trainer_cfg(OmegaConf.to_container(cfg.trainer, resolve=True)
                                                    if cfg.get("trainer") is not None else None)
        supported = get_unlearner_class(name).supported_scenarios
        if kind is not None and kind not in supported:
            able = [m for m in list_unlearners() if kind in get_unlearner_class(m).supported_scenarios]
            raise DuckInputError(f"method {name!r} does not support scenario {kind!r} (it supports "
                                 f"{', '.join(supported)}); sweep only the methods that do: method={','.join(able)}")


def check_logger(cfg: Any) -> None:
    """The experiment logger's settings, and its backend installed (:func:`duck.pipeline.tracking.logger_settings`)."""
    if cfg.get("logger") is not None:
        from duck.pipeline.tracking import logger_settings

        logger_settings(cfg.logger)


def check_sweep(config_name: str, args: list[str], root: Path) -> None:
    """Compose and check every job of a ``-m`` sweep (module docstring); raise :class:`DuckInputError` naming
    the job's overrides and the problem. Composition errors Hydra words better are left to Hydra."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException, MissingConfigException

    overrides = [a for a in args if not a.startswith("-") and not a.startswith(("hydra.", "hydra/"))]
    with initialize_config_dir(str(root), version_base="1.3"):
        try:
            jobs = job_overrides(config_name, overrides, root)
        except MissingConfigException as e:
            raise DuckInputError(_missing_option(e, overrides, root)) from None
        except ConfigCompositionException as e:
            raise DuckInputError(_composition(e)) from None
        # the logger every job shares, once (also for sweeps only Hydra enumerates: a search's intervals)
        fixed = [f"{o.get_key_element()}={o.get_value_element_as_str()}" for o in _parse(overrides) or []
                 if not o.is_sweep_override()]
        try:
            shared = compose(config_name, overrides=fixed)
        except (MissingConfigException, ConfigCompositionException):
            shared = None  # reported below, per job, or by Hydra
        if shared is not None:
            check_logger(shared)
        for job in jobs:
            try:
                cfg = compose(config_name, overrides=job)
            except MissingConfigException as e:
                raise DuckInputError(_missing_option(e, job, root)) from None
            except ConfigCompositionException as e:
                raise DuckInputError(f"sweep job {' '.join(job)}: {_composition(e)}") from None
            try:
                check_job_config(cfg)
            except DuckInputError as e:
                raise DuckInputError(f"sweep job {' '.join(job)}: {e} (no job of the sweep was run)") from None


def _missing_option(e: Exception, overrides: list[str], root: Path) -> str:
    from duck.cli._overrides import unknown_group_choice

    return unknown_group_choice(overrides, root) or str(e).splitlines()[0]


def _composition(e: Exception) -> str:
    from duck.cli._overrides import unknown_key_message

    return unknown_key_message(e) or str(e).splitlines()[0]
