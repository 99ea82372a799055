"""``python scripts/bench_lsh.py [key=value ...]`` = ``duck-bench lsh [key=value ...]``."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "lsh", *sys.argv[1:]]
    main()
