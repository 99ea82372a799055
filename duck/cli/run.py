"""``duck-run``: the main job — original (trained or reused from the cache) → unlearn → retrained oracle →
audit all three → report (:func:`duck.pipeline.jobs.run`)."""

from duck.cli._app import job_entry

main = job_entry("run", "the main job: train (or reuse) the original, unlearn the scenario's forget set with "
                        "method=NAME, retrain the oracle, audit all three (LiRA + SVM MIA), write the report. "
                        "Default: bundled digits, small CNN, DUCK, class removal of digit 3")

if __name__ == "__main__":
    main()
