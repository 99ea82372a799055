"""``duck-audit ckpt=PATH scenario=...``: LiRA (+ SVM MIA) audit of any checkpoint with the cached shadow bank.

Optional references (``original_ckpt=``, ``retrained_ckpt=``) are audited with the same bank. Writes, in the
run directory: ``audit.json`` and ``lira_stats.npz`` of the checkpoint (references under ``<role>/``),
``report.html``, ``report.md`` and ``plots/*.png``."""

import sys

from duck.cli._app import job_entry

#: the run directory of ``duck-audit margins=FILE`` (no data set nor scenario: the margins carry their own)
MARGINS_RUN_DIR = "outputs/audit/margins/${now:%Y-%m-%d_%H-%M-%S-%f}"

_main = job_entry("audit", "membership-inference audit (LiRA + SVM MIA) of ckpt=PATH for the scenario's forget set, "
                          "with a cached shadow bank; original_ckpt= / retrained_ckpt= are audited beside it; writes "
                          "audit.json, report.html, report.md")


def main() -> None:
    """``duck-audit``; with ``margins=FILE`` (and no ``hydra.run.dir=``) its run directory is under
    ``outputs/audit/margins/``, not under the default data set and scenario the margins have nothing to do with."""
    args = sys.argv[1:]
    if any(a.startswith("margins=") for a in args) and not any(a.startswith("hydra.run.dir=") for a in args) \
            and not any(a in ("-m", "--multirun") for a in args):
        sys.argv.append(f"hydra.run.dir={MARGINS_RUN_DIR}")
    _main()

if __name__ == "__main__":
    main()
