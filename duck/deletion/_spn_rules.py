"""The operation decision of LearnSPN (seeds/001 Alg. 1, Fig. 1) and the revision function (Def. 3).

Both are pure functions of a node's *conditions* (``NodeConditions``): number of variables and rows, the
uninformative-variable flags, and the two analyses ``independencies`` (RDC split has more than one
component) and ``clusters`` (the k = 2 clustering has two non-empty clusters). The analyses are read lazily
(an implementation may compute them on first access), and both functions read them in the order of Alg. 1:
``independencies`` before ``clusters``, and neither unless the cheaper conditions leave the choice open.
So a node never runs an analysis that LearnSPN itself would not run, which keeps the random draws of a
removal-enabled SPN identical to those of a fresh LearnSPN on the remaining rows.
"""

from __future__ import annotations

from typing import Protocol

CREATE_LEAF = "create_leaf"  # CL
NAIVE_FACTORIZATION = "naive_factorization"  # NF
SPLIT_UNINFORMATIVE = "split_uninformative"  # SU
SPLIT_DATA = "split_data"  # SD (sum node)
SPLIT_VARIABLES = "split_variables"  # SV (product node)

OPERATIONS = (CREATE_LEAF, NAIVE_FACTORIZATION, SPLIT_UNINFORMATIVE, SPLIT_DATA, SPLIT_VARIABLES)
SHORT_NAMES = {
    CREATE_LEAF: "CL",
    NAIVE_FACTORIZATION: "NF",
    SPLIT_UNINFORMATIVE: "SU",
    SPLIT_DATA: "SD",
    SPLIT_VARIABLES: "SV",
}


class NodeConditions(Protocol):
    """What Alg. 1 looks at for a data set X over variables V (attributes may be computed lazily)."""

    n_vars: int  # |V|
    n: int  # |X|
    exist_uninformative: bool  # exists v in V: sigma^2(X_v) = 0
    all_uninformative: bool  # for all v in V: sigma^2(X_v) = 0
    independencies: bool  # the variable split has more than one component
    clusters: bool  # the clustering has more than one non-empty cluster


def learnspn_operation(c: NodeConditions, t: int) -> str:
    """The operation LearnSPN (Alg. 1, Fig. 1) chooses for data with conditions ``c``; t = min instances."""
    if c.n_vars == 1:  # line 1
        return CREATE_LEAF
    if c.exist_uninformative:  # lines 3-7
        return NAIVE_FACTORIZATION if c.all_uninformative else SPLIT_UNINFORMATIVE
    if c.n <= t or (not c.independencies and not c.clusters):  # line 8
        return NAIVE_FACTORIZATION
    if not c.independencies:  # line 10
        return SPLIT_DATA
    return SPLIT_VARIABLES  # line 13


def revise_operation(op: str, old: NodeConditions, new: NodeConditions, t: int) -> str:
    """The revision function rev of Def. 3: the operation LearnSPN chooses on X' = X minus the removed rows.

    ``op`` is the operation chosen on X with conditions ``old``; ``new`` are the conditions on X'. The cases
    are tried in the order of Def. 3 (each assumes the ones above it failed). Theorem 1 states that the result
    equals ``learnspn_operation(new, t)``; the tests check that on random data and removals.
    """
    if op == CREATE_LEAF:
        return CREATE_LEAF
    if op == SPLIT_UNINFORMATIVE:
        return SPLIT_UNINFORMATIVE if not new.all_uninformative else NAIVE_FACTORIZATION
    if op == NAIVE_FACTORIZATION:
        if old.all_uninformative or new.all_uninformative:  # cases 1-2
            return NAIVE_FACTORIZATION
        if new.exist_uninformative and not old.exist_uninformative:  # case 3
            return SPLIT_UNINFORMATIVE
        if new.n <= t or (not new.independencies and not new.clusters):  # case 4
            return NAIVE_FACTORIZATION
        return SPLIT_DATA if not new.independencies else SPLIT_VARIABLES  # cases 5-6
    if op in (SPLIT_DATA, SPLIT_VARIABLES):
        if new.exist_uninformative:  # cases 1-2
            return NAIVE_FACTORIZATION if new.all_uninformative else SPLIT_UNINFORMATIVE
        if new.n <= t:  # case 3
            return NAIVE_FACTORIZATION
        if not new.independencies and not new.clusters:  # case 4
            return NAIVE_FACTORIZATION
        if op == SPLIT_DATA:  # cases 5-6 of rev(SD)
            return SPLIT_VARIABLES if new.independencies else SPLIT_DATA
        return SPLIT_DATA if (not new.independencies and new.clusters) else SPLIT_VARIABLES  # rev(SV) 5-6
    raise ValueError(f"unknown operation {op!r}; expected one of {OPERATIONS}")
