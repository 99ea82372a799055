"""``duck-bench loggers``: what the experiment loggers (:mod:`duck.pipeline.tracking`) add to a ``duck-run`` job
(issue 38 target: at most 5 % with ``logger=csv`` or ``logger=mlflow``, against ``logger=none``).

The job (``bench.args``; by default the demo: digits, small CNN, DUCK, class 3, with the audit) runs once untimed
to fill the cache, then ``bench.repetitions`` times per logger, alternating (the order rotated every repetition,
so that a slow spell of the machine falls on every logger alike), each as its own ``duck-run`` process: the
cost measured includes importing the backend (MLflow's client: about 1.2 s here) and writing its files. MLflow
logs into a file store in the benchmark's directory. Reported per logger: mean (std) of the wall time and of the
CPU time (user + sys of the process), and their ratio to ``logger=none``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from benchmarks.common import BenchSettings, markdown_table, mean_std
from duck.errors import DuckInputError
from duck.schema import Directory, Either, Integer, ListOf, OneOf, Real, Text, option, settings


@settings
class LoggersBench(BenchSettings):
    """conf/bench/loggers.yaml."""

    suite: ClassVar[str] = "loggers"

    loggers: tuple[str, ...] = option(("csv", "mlflow"), ListOf(OneOf(("csv", "tensorboard", "mlflow", "wandb"))),
                                      "each compared with logger=none")
    repetitions: int = option(5, Integer(1), "jobs per logger, alternating")
    args: tuple[str, ...] = option((), ListOf(Text(), nonempty=False), "duck-run overrides of the job ([]: the demo)")
    cache_dir: str | None = option(None, Either((None,), Directory()), "the cache the jobs share (null: duck-run's)")
    target: float = option(0.05, Real(0.0, True), "the largest overhead allowed (a fraction of logger=none's time)")


def _job(args: list[str], logger: str, run_dir: Path, env: dict[str, str]) -> dict[str, float]:
    """One ``duck-run`` process: ``{"wall_s", "cpu_s"}``."""
    extra = [f"logger.tracking_uri={run_dir.parent / 'mlruns'}"] if logger == "mlflow" else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "duck.cli.run", *args, "progress=false", f"logger={logger}", *extra,
                           f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise DuckInputError(f"duck-run logger={logger} failed (exit {proc.returncode}): "
                             f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu}


def run(cfg: Any) -> dict[str, Any]:
    from duck.pipeline.config import hydra_output_dir
    from duck.pipeline.tracking import logger_settings

    cfg = LoggersBench.parse(cfg)
    for name in cfg.loggers:  # installed: one line with the extra to install, before any work
        logger_settings({"name": name})
    args = list(cfg.args)
    out = hydra_output_dir()
    env = dict(os.environ)
    if cfg.cache_dir is not None:
        env["DUCK_CACHE_DIR"] = str(Path(str(cfg.cache_dir)).expanduser().resolve())
    loggers = ["none", *[str(n) for n in cfg.loggers if n != "none"]]
    print(f"warm-up: duck-run {' '.join(args)} (fills the cache; untimed)", flush=True)
    _job(args, "none", out / "warmup", env)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in loggers}
    for r in range(int(cfg.repetitions)):
        order = loggers[r % len(loggers):] + loggers[:r % len(loggers)]
        for name in order:
            runs[name].append(_job(args, name, out / f"{name}_{r}", env))
        print(f"repetition {r + 1}: " + ", ".join(f"{n} {runs[n][-1]['wall_s']:.1f} s" for n in loggers), flush=True)
    stats = {name: {k: mean_std([row[k] for row in rows]) for k in ("wall_s", "cpu_s")} for name, rows in runs.items()}
    base = stats["none"]
    overhead = {name: {k: stats[name][k]["mean"] / base[k]["mean"] - 1.0 for k in ("wall_s", "cpu_s")}
                for name in loggers}
    target = float(cfg.target)
    table = markdown_table(
        ["logger", "wall time (s)", "CPU time (s)", "wall vs none", "CPU vs none"],
        [[name, *(f"{stats[name][k]['mean']:.2f} ({stats[name][k]['std']:.2f})" for k in ("wall_s", "cpu_s")),
          *(f"{100 * overhead[name][k]:+.1f} %" for k in ("wall_s", "cpu_s"))] for name in loggers])
    table += (f"\n\n{int(cfg.repetitions)} jobs per logger, alternating; the job: duck-run {' '.join(args) or '(the demo)'}"
              f", cache warm. Target: at most {100 * target:g} % over logger=none; "
              + "; ".join(f"{name}: {100 * overhead[name]['wall_s']:+.1f} % wall, {100 * overhead[name]['cpu_s']:+.1f} % "
                          f"CPU ({'met' if overhead[name]['wall_s'] <= target else 'NOT met'})" for name in loggers[1:]))
    return {"table": table, "runs": runs, "summary": stats, "overhead": overhead,
            "targets": [{"target": f"logger={name} adds <= {100 * target:g} % to a duck-run job's time",
                         "met": overhead[name]["wall_s"] <= target, "measured": round(overhead[name]["wall_s"], 4)}
                        for name in loggers[1:]]}
