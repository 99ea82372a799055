"""``python scripts/bench_spn.py [key=value ...]`` = ``duck-bench spn [key=value ...]``."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "spn", *sys.argv[1:]]
    main()
