"""Helpers shared by benchmark suites: machine description, timing, mean (std), Markdown tables, and the base of
the suites' typed settings (:class:`BenchSettings`)."""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar

import torch

from duck.errors import DuckInputError
from duck.report.tables import fmt_mean_std, markdown_table, mean_std  # noqa: F401  (the suites' tables)
from duck.schema import Check, Either, Integer, Settings, Text, option, settings


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


# --------------------------------------------------------------------------------------- settings
#: each suite's settings class, by suite name (filled as the suites' modules are imported)
SUITE_SETTINGS: dict[str, type[BenchSettings]] = {}


@settings
class BenchSettings(Settings):
    """A suite's settings: each suite declares every key of conf/bench/SUITE.yaml (which holds its defaults) in a
    subclass, with its rule and meaning (duck.schema); ``duck-bench`` parses them once, before any work, and the
    suite's ``run`` reads the checked instance (``run`` parses a raw config itself, as the tests pass one)."""

    prefix: ClassVar[str] = "bench"
    #: the suite's name (conf/bench/SUITE.yaml)
    suite: ClassVar[str] = ""

    name: str | None = option(None, Either((None,), Text()), "the suite (null: this one)")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.suite:
            SUITE_SETTINGS[cls.suite] = cls

    def __post_init__(self) -> None:
        if self.name is None:
            object.__setattr__(self, "name", self.suite)
        elif self.name != self.suite:
            raise DuckInputError(f"bench.name={self.name!r} is not this suite ({self.suite}); run duck-bench "
                                 f"{self.name} instead")

    @classmethod
    def unknown_message(cls, prefix: str, unknown: list[str]) -> str:
        known = ", ".join(f"bench.{f.name}" for f in dataclasses.fields(cls) if f.name != "name")
        return (f"duck-bench {cls.suite} has no setting(s) {', '.join(f'bench.{k}' for k in unknown)}; its settings: "
                f"{known} (conf/bench/{cls.suite}.yaml)")


#: a torch thread count: null (torch's default) or >= 1
THREADS = Either((None,), Integer(1))


def _keywords(value: Any, key: str) -> Mapping[str, Any]:
    if value is None:
        return MappingProxyType({})
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise DuckInputError(f"{key}={value!r} must be a mapping of keyword arguments, e.g. {key}.NAME=VALUE")
    return MappingProxyType(dict(value))


#: keyword arguments of a library class, checked by building it (the class's constructor is their schema)
KEYWORDS = Check(_keywords, "keyword arguments of the class (its constructor checks them)")
