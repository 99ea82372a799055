"""Run the ``audit`` benchmark suite (same as ``duck-bench audit ...``)."""

import sys

from duck.cli.bench import main

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "audit", *sys.argv[1:]]
    main()
