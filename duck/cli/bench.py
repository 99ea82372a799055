"""``duck-bench SUITE [overrides...]``: run a benchmark suite, print its table, write ``bench.json``."""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path

from duck.cli._app import fail, hydra_entry, print_and_exit
from duck.pipeline.config import conf_dir


def available_suites() -> list[str]:
    return sorted(p.stem for p in (conf_dir() / "bench").glob("*.yaml"))


def _task(cfg) -> dict:
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    from benchmarks.common import SUITE_SETTINGS, THREADS, machine_info
    from duck.io import atomic_save_json

    suite = cfg.bench.name
    module = importlib.import_module(f"benchmarks.{suite}")  # the suites sit above the library
    settings = SUITE_SETTINGS[suite].parse(cfg.bench)  # every bench.* key, checked once, before any work
    threads = THREADS(cfg.get("threads"), "threads")
    if threads is not None:  # the whole benchmark's (a suite's own bench.threads / torch_threads come after)
        import torch

        torch.set_num_threads(threads)
    t0 = time.perf_counter()
    result = module.run(settings)
    out = {
        "suite": suite,
        "machine": machine_info(),
        "config": OmegaConf.to_container(cfg.bench, resolve=True),
        "wall_time_s": time.perf_counter() - t0,
        "quick_run": bool(cfg.bench.get("quick", False)),
        **result,
    }
    path = Path(HydraConfig.get().runtime.output_dir) / "bench.json"
    atomic_save_json(path, out)
    if out["quick_run"]:  # smoke settings: say so where the numbers are read, not only in bench.json
        print(f"QUICK RUN (bench.quick=true): smoke settings, not the {suite} protocol; the numbers and any "
              "met / not met verdicts below say nothing about the targets\n")
    print(result.get("table", ""))
    print(f"\nbench.json written to {path}")
    return out


_hydra_main = hydra_entry("bench_main", _task)


def main() -> None:
    args = sys.argv[1:]
    suites = available_suites()
    if not args or args[0] in ("-h", "--help") or "=" in args[0] or args[0].startswith("-"):
        lines = ["duck-bench: run a benchmark suite, print its table and write bench.json", "",
                 "usage: duck-bench SUITE [bench.KEY=VALUE ...]   (duck-bench SUITE --help: the suite's settings)", "",
                 "suites:"]
        for name in suites:
            first = next((ln.lstrip("# ").strip() for ln in (conf_dir() / "bench" / f"{name}.yaml").read_text()
                          .splitlines() if ln.startswith("#")), "")
            lines.append(f"  {name:<8} {first}")
        print_and_exit("\n".join(lines), 0 if args and args[0] in ("-h", "--help") else 2)
    suite, rest = args[0], args[1:]
    if suite not in suites:
        fail(f"unknown benchmark suite {suite!r}; choose one of: {', '.join(suites)}")
    if any(a in ("-h", "--help") for a in rest):  # the suite's settings, with their comments
        print_and_exit(f"duck-bench {suite} [bench.KEY=VALUE ...]; its settings (conf/bench/{suite}.yaml):\n\n"
                       + (conf_dir() / "bench" / f"{suite}.yaml").read_text())
    sys.argv = [sys.argv[0], f"bench={suite}", *rest]
    _hydra_main()


if __name__ == "__main__":
    main()
