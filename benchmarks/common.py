"""Helpers shared by benchmark suites: machine description, timing, mean (std), Markdown tables."""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable
from typing import Any

import torch

from duck.report.tables import fmt_mean_std, markdown_table, mean_std  # noqa: F401  (the suites' tables)


def machine_info() -> dict[str, Any]:
    """Hardware and versions, recorded in every ``bench.json``."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "cuda": torch.cuda.is_available(),
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["cuda_version"] = torch.version.cuda
    return info


def sync(device: torch.device | str | None = None) -> None:
    """Wait for queued CUDA work so wall-clock timings are honest."""
    if torch.cuda.is_available() and (device is None or torch.device(device).type == "cuda"):
        torch.cuda.synchronize()


def timed(fn: Callable[[], Any], device: torch.device | str | None = None) -> tuple[Any, float]:
    """Run ``fn()`` and return ``(result, seconds)`` with CUDA synchronised on both ends."""
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


# --------------------------------------------------------------------------------------- config checks
#: a rule checks one value (its name, e.g. ``bench.n_queries``, for the message) and raises DuckInputError
Rule = Callable[[Any, str], Any]


def validate(cfg: Any, rules: dict[str, Rule]) -> None:
    """Check the suite config ``cfg`` against ``{key: rule}`` before any work. ``key`` may be dotted
    (``gaussian.n``); a missing key is checked as ``None`` (so only ``optional`` rules accept it). Every
    failure raises :class:`~duck.errors.DuckInputError` naming ``bench.<key>`` and the value."""
    from omegaconf import OmegaConf

    for key, rule in rules.items():
        value = OmegaConf.select(cfg, key, default=None) if not isinstance(cfg, dict) else cfg.get(key)
        rule(value, f"bench.{key}")


def _fail(message: str) -> None:
    from duck.errors import DuckInputError

    raise DuckInputError(message)


def integer(minimum: int = 1, maximum: int | None = None) -> Rule:
    """An integer (not a bool, not a float) in ``[minimum, maximum]``."""
    from duck.utils import check_positive_int

    def rule(value: Any, name: str) -> int:
        v = check_positive_int(value, name, minimum)
        if maximum is not None and v > maximum:
            _fail(f"{name}={value!r} must be an integer <= {maximum}")
        return v

    return rule


def number(lo: float = -math.inf, lo_open: bool = False, hi: float = math.inf, hi_open: bool = False) -> Rule:
    """A finite real number in the given interval."""
    from duck.utils import check_number

    return lambda value, name: check_number(value, name, lo, lo_open, hi, hi_open)


def optional(rule: Rule) -> Rule:
    """``None`` or a value passing ``rule``."""
    return lambda value, name: None if value is None else rule(value, name)


def auto_or(rule: Rule) -> Rule:
    """The string ``"auto"`` or a value passing ``rule`` (whose message then also offers ``auto``)."""
    from duck.errors import DuckInputError

    def checked(value: Any, name: str) -> Any:
        if value == "auto":
            return value
        try:
            return rule(value, name)
        except DuckInputError as e:
            raise DuckInputError(f"{e}, or auto") from None

    return checked


def one_of(*choices: Any) -> Rule:
    def rule(value: Any, name: str) -> Any:
        if isinstance(value, bool) or value not in choices:
            _fail(f"{name}={value!r} must be one of {', '.join(map(str, choices))}")
        return value

    return rule


def boolean() -> Rule:
    from duck.utils import check_bool

    return check_bool


def list_of(rule: Rule, nonempty: bool = True) -> Rule:
    """A list (or tuple / ListConfig) whose items all pass ``rule`` (named ``bench.key[i]``)."""

    def check(value: Any, name: str) -> list:
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__") or hasattr(value, "keys"):
            _fail(f"{name}={value!r} must be a list, e.g. {name}=[...]")
        items = list(value)
        if nonempty and not items:
            _fail(f"{name}=[] must list at least one value")
        for i, item in enumerate(items):
            rule(item, f"{name}[{i}]")
        return items

    return check


def device_rule() -> Rule:
    from duck.utils import check_device

    return lambda value, name: check_device(value, name)


def dir_path() -> Rule:
    """A directory path that, if it exists, is a directory (not a file)."""

    def rule(value: Any, name: str) -> Any:
        if not isinstance(value, str) or not value:
            _fail(f"{name}={value!r} must be a directory path")
        path = os.path.expanduser(value)
        if os.path.exists(path) and not os.path.isdir(path):
            _fail(f"{name}={value!r} is an existing file, not a directory; name a directory")
        return value

    return rule


def known_names(*choices: str, what: str = "data sets") -> Rule:
    """A non-empty list of names from ``choices``."""

    def rule(value: Any, name: str) -> list:
        items = list_of(lambda v, n: v, nonempty=True)(value, name)
        bad = [v for v in items if v not in choices]
        if bad:
            _fail(f"unknown {what} {bad} in {name}; choose from {', '.join(choices)}")
        return items

    return rule
