"""``python scripts/compare.py [key=value ...]`` = ``duck-bench compare [key=value ...]``: DUCK against every
baseline over the paper protocol (docs/baselines.md)."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "compare", *sys.argv[1:]]
    main()
