"""``python scripts/bench_dp.py [key=value ...]`` = ``duck-bench dp [key=value ...]``."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "dp", *sys.argv[1:]]
    main()
