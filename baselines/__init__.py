"""The unlearning methods DUCK is compared with (seeds/003 §II, §IV-A; ALGORITHMS.md §3), one file each.

Importing this package registers every method in :mod:`duck.unlearn.registry` (it is declared as the
``duck_unlearn.methods`` entry point, so ``duck.unlearn.list_unlearners()`` imports it).
"""

from baselines import (  # noqa: F401  (imports register the methods)
    bad_teacher,
    boundary_expand,
    boundary_shrink,
    datamodel_matching,
    duck_reinit,
    erm_ktp,
    finetune,
    kgltop1,
    kgltop2,
    l1_sparse,
    neggrad,
    neggrad_plus,
    oracle_matching,
    random_label,
    retrain,
    salun,
    scrub,
    ssd,
    subset_matching,
)

METHODS = ("retrain", "finetune", "neggrad", "random_label", "boundary_shrink", "boundary_expand", "scrub",
           "l1_sparse", "ssd", "bad_teacher", "erm_ktp", "neggrad_plus", "salun",
           "oracle_matching", "datamodel_matching", "subset_matching", "kgltop1", "kgltop2", "duck_reinit")
