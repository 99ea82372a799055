"""``duck-audit ckpt=PATH scenario=...``: LiRA (+ SVM MIA) audit of any checkpoint with the cached shadow bank.

Optional references (``original_ckpt=``, ``retrained_ckpt=``) are audited with the same bank. Writes, in the
run directory: ``audit.json`` and ``lira_stats.npz`` of the checkpoint (references under ``<role>/``),
``report.html``, ``report.md`` and ``plots/*.png``."""

from duck.cli._app import job_entry

main = job_entry("audit", "membership-inference audit (LiRA + SVM MIA) of ckpt=PATH for the scenario's forget set, "
                          "with a cached shadow bank; original_ckpt= / retrained_ckpt= are audited beside it; writes "
                          "audit.json, report.html, report.md")

if __name__ == "__main__":
    main()
