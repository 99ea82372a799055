"""Benchmark suites for ``duck-bench SUITE``.

Each suite is a module ``benchmarks.<suite>`` with ``run(cfg: DictConfig) -> dict`` and a config
``conf/bench/<suite>.yaml`` (``name: <suite>`` plus its parameters). ``run`` returns a JSON-able dict
with at least ``"table"`` (Markdown text printed at the end); ``duck-bench`` adds the machine
description and writes ``bench.json`` atomically in the Hydra run directory.
"""
