"""``python scripts/bench_kmeans.py [key=value ...]`` = ``duck-bench kmeans [key=value ...]``."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "kmeans", *sys.argv[1:]]
    main()
