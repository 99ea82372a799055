"""Thin wrapper: ``python scripts/bench_duck.py [overrides]`` == ``duck-bench duck [overrides]``."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "duck", *sys.argv[1:]]
    main()
