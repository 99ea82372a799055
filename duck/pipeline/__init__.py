"""The job as a library (DESIGN.md §2): a config resolved once into a :class:`Job`
(:mod:`duck.pipeline.job`), then stages (train or reuse from the cache, unlearn, audit, report) and the four
jobs of the command line (:mod:`duck.pipeline.jobs`). Used by the console scripts (:mod:`duck.cli`), the
Python API (:func:`duck.unlearn`) and the benchmark suites; it never imports any of them."""
