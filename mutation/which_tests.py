"""Which tests kill which mutants: for commit messages of the form "this test fails on mutant X, which survived".

    python mutation/which_tests.py duck/metrics.py MUTANT... [-k EXPR]
    python mutation/which_tests.py duck/metrics.py --from mutation/survivors/duck__metrics.txt -k "not direct_count"

Runs the file's own tests (mutation/targets.toml) as they are in the checkout now, once per mutant, without -x,
against the mutated copy that the last `make mutation FILE=...` left in mutation/work/<file>/mutants (mutmut picks
the mutant from MUTANT_UNDER_TEST), and prints, for every test that failed on some mutant, the mutants it failed on.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from mutate import ROOT, WORK, load_targets, slug


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("mutants", nargs="*")
    p.add_argument("--from", dest="source", help="a survivors file of mutation/survivors/ (its '## NAME' lines)")
    p.add_argument("-k", default=None, help="pytest -k expression selecting the tests to try")
    a = p.parse_args()
    names = list(a.mutants)
    if a.source:
        names += re.findall(r"^## (\S+)", Path(a.source).read_text(), flags=re.M)
    # the checkout's tests as they are now (the mutated copy holds those of the last run), run from inside that copy
    tests = [str(ROOT / t) for t in load_targets()[0][a.file]]
    mutants_dir = WORK / slug(a.file) / "mutants"
    if not mutants_dir.is_dir():
        raise SystemExit(f"no mutated copy in {mutants_dir}: run `make mutation FILE={a.file}` first")
    kills: dict[str, list[str]] = defaultdict(list)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(mutants_dir)}
    for name in names:
        cmd = [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "-m", "not slow",
               *(["-k", a.k] if a.k else []), *tests]
        out = subprocess.run(["nice", "-n", "10", *cmd], cwd=mutants_dir, env=env | {"MUTANT_UNDER_TEST": name},
                             capture_output=True, text=True).stdout
        failed = re.findall(r"^FAILED (\S+?)(?: - |$)", out, flags=re.M)
        print(f"{name}: {len(failed)} failed", flush=True)
        for t in failed:
            kills[t].append(name)
    print()
    for t in sorted(kills):
        print(f"{t}: {' '.join(m.rsplit('.', 1)[-1] for m in kills[t])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
