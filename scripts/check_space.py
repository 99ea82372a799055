"""Refuse an install that cannot fit: `make install` runs this before pip (issue 36's CI run, session v, died after
17 s with pip's "No space left on device" half-way through torch; a full disk gets one `error:` line and exit 2
instead). Standard library only: it runs under the system Python before the virtual environment exists.

Usage: python scripts/check_space.py DIR MIN_GB
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    """Exit 0 when the file system holding DIR (or its nearest existing parent) has MIN_GB free, else 2."""
    if len(argv) != 2:
        print("error: usage: check_space.py DIR MIN_GB", file=sys.stderr)
        return 2
    try:
        need_gb = float(argv[1])
    except ValueError:
        need_gb = float("nan")
    if not need_gb >= 0:  # NaN and negatives too
        print(f"error: MIN_FREE_GB={argv[1]!r} is not a number of GB >= 0: give one, e.g. MIN_FREE_GB=8",
              file=sys.stderr)
        return 2
    path = Path(argv[0]).resolve()
    while not path.exists():
        path = path.parent
    free_gb = shutil.disk_usage(path).free / 1e9
    if free_gb < need_gb:
        print(f"error: only {free_gb:.1f} GB free on the file system of {path}; installing the environment "
              f"(torch's CUDA build among it) needs about {need_gb:g} GB: free some space there (or set "
              f"VENV=a path on another disk) and rerun", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
