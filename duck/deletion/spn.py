"""Removal-enabled LearnSPN and UnlearnSPN (Becker & Liebig, *Certified Data Removal in Sum-Product Networks*,
seeds/001), as ALGORITHMS.md §7 states them, with batched torch ops for the analyses and for inference.

LearnSPN (Alg. 1) builds a tree-shaped SPN top-down with five operations, chosen by the decision process of
Fig. 1 (``_spn_rules.learnspn_operation``):

* CreateLeaf (CL, one variable): a Gaussian leaf (sufficient statistics n, sum x, sum x^2) or a
  categorical leaf (counts over the declared domain, additive smoothing ``alpha``);
* NaiveFactorization (NF): a product of one leaf per variable, when all variables are uninformative
  (zero variance), when ``|X| <= t``, or when there are neither independencies nor clusters;
* SplitUninformativeVariables (SU): a product of a leaf per uninformative variable and LearnSPN on the rest;
* SplitData (SD): a sum node over the two clusters of Q-k-means (k = 2, ``duck.deletion.QKMeans``), weights
  the cluster fractions;
* SplitVariables (SV): a product node over the connected components of the thresholded pairwise RDC matrix
  (``duck.deletion.rdc``; projections stored per node).

No pruning (§4.1). Every node keeps the state of §4.1, the 8-tuple (scope, op, X, N, independencies, clusters,
exist_uninformative, all_uninformative) with X as the stable row ids, plus its Q-k-means model and its RDC
projections when LearnSPN computed them there.

UnlearnSPN (Alg. 2-7) removes rows (one id or a batch) from the root down. At a node holding removed rows it
re-evaluates the operation on the remaining rows with the revision function of Def. 3
(``_spn_rules.revise_operation``), reading the analyses lazily and *updating* the stored ones instead of
recomputing them: Q-k-means ``delete`` (exact: keeps the model or retrains replaying its draws), the RDC with
the stored projections. If the operation changes, the sub-SPN is relearned (Alg. 2 l. 6-9; NF directly). If it
is unchanged: leaves subtract the removed rows' statistics (Alg. 4), NF/SU update their leaves and flags
(Alg. 3, 5), SD re-weights and recurses into the children holding removed rows when the clustering keeps its
partition (Alg. 6), SV recurses into its children when the components are unchanged (Alg. 7).

Refinements of Alg. 6-7, all exact under the replay statement below (docs/spn.md): when a Q-k-means retrain
moves rows between the clusters, the child that only lost rows is unlearned, and the child that gained rows is
updated node by node keeping its stored draws (``relearn="replay"``) or relearned from fresh draws
(``relearn="fresh"``, Alg. 6 literally); when the variable components change, children whose scope survived
are unlearned and only new components are learned; and the RDC components are first confirmed by an exact
certificate (a spanning forest and the cross-component pairs, ``rdc.components_still_hold``) before the full
matrix is recomputed.

Certified removal, as tested (Theorem 2 with the random draws made explicit). Every random draw of LearnSPN
is a function of ``(seed, node path)``: the RDC projections of the node at path p come from the generator
``(seed, RDC_TAG, hash(p))``, its Q-k-means has seed ``(seed, QK_TAG, hash(p))``. Paths name a node by the
choices above it (``/d0`` = cluster 0 of the root, ``/v0-3,7`` = the SV child over variables {0,1,2,3,7},
``/u`` = the informative child of SU). ``random_state_`` collects, per path, the node's projections and its
Q-k-means ``random_state_`` (which after deletions may hold re-drawn seeds). Then, after any sequence of
``unlearn`` calls,

    spn == learn_spn(X_remaining, types, ids=remaining_ids, replay=spn.random_state_, **spn.learn_params_)

node by node: same paths, operations, scopes, row ids and flags; equal Q-k-means models; leaf parameters and
weights equal to float rounding. A replay is used only by the learning call it is passed to: sub-SPNs
relearned later during unlearning draw from ``(seed, path)`` as a fresh LearnSPN on their rows would.

Rows are kept in stable-id order everywhere (storage, node row lists, Q-k-means fits), so every analysis of a
node sees its rows in the same order in the unlearned and in the fresh model, and its decisions agree exactly.
Everything is float64.
"""

from __future__ import annotations

import copy
import hashlib
import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from duck.deletion._kmeans_ops import derive_seed, make_generator
from duck.deletion._spn_circuit import Circuit, CircuitBuilder
from duck.deletion._spn_circuit import log_likelihood as circuit_log_likelihood
from duck.deletion._spn_circuit import sample as circuit_sample
from duck.deletion._spn_rules import (
    CREATE_LEAF,
    NAIVE_FACTORIZATION,
    SHORT_NAMES,
    SPLIT_DATA,
    SPLIT_UNINFORMATIVE,
    SPLIT_VARIABLES,
    learnspn_operation,
    revise_operation,
)
from duck.deletion.qkmeans import QKMeans, check_replay_draws
from duck.deletion.rdc import (
    Combinations,
    FeatureMap,
    Features,
    canonical_directions,
    certificate_pairs,
    components_still_hold,
    dependency_components,
    draw_projections,
    ecdf_counts_after_removal,
    rdc_from_whitened,
    rdc_lower_bounds,
)
from duck.deletion.rdc_taylor import TaylorReference
from duck.errors import DuckInputError
from duck.utils import (
    check_device,
    check_number,
    check_positive_int,
    check_seed,
    int64_array,
    real_array_tensor,
)

TYPES = ("gaussian", "categorical")
#: generator tags of the per-node random draws: derive_seed(seed, tag, path hash)
_RDC_TAG, _QK_TAG = 11, 12
_QK_KEYS = ("n_iter", "gamma", "eps", "eps_scale", "n_local_trials")
#: keys of a QKMeans.random_state_ (a node's ``qkmeans`` entry in a replay)
_QK_REPLAY_KEYS = ("seed_ids", "phases", "eps_phase", "n_reseeds")
#: the draws a node may carry in a replay (``SPN.random_state_["nodes"][path]``)
_REPLAY_ENTRY_KEYS = ("rdc_projections", "qkmeans")
#: most categories K one categorical variable may have. Memory grows with K: every categorical leaf keeps K
#: counts, the compiled circuit a (categorical leaves, Kmax) table, and every node's RDC draws (V, Kmax+1, k)
#: projections (all variables padded to the largest domain). Larger domains: model the column as Gaussian or
#: merge categories
MAX_CATEGORIES = 2**16
#: most entries of one node's RDC projections, V x (Kmax + 1) x rdc_features float64 values (2 GiB)
MAX_PROJECTION_ENTRIES = 2**28
#: values (rows x variables) one ``SPN.sample`` call may return
MAX_SAMPLE_VALUES = 2**28
#: SplitData's Q-k-means defaults: a lattice 8x coarser than QKMeans' own (eps = 4 sigma_hat); see docs/spn.md
QKMEANS_DEFAULTS: dict[str, Any] = {"eps_scale": 4.0}
#: margin around the RDC threshold inside which a component check falls back to the full matrix
_RDC_GUARD = 1e-9
#: margin above the RDC threshold a forest edge's lower bound (rdc.rdc_lower_bounds) must clear to certify it
#: without whitening: covers the rounding of the whitened RDC that a fresh LearnSPN computes (~1e-6 at worst,
#: unit roundoff times the 1e10 condition the EIG_RCOND truncation allows)
_BOUND_GUARD = 1e-4
#: an update removing at most this many rows from a node updates its ECDF counts instead of sorting again
_MAX_INCREMENTAL_REMOVALS = 32
_F64 = torch.float64


def _path_hash(path: str) -> int:
    return int.from_bytes(hashlib.blake2b(path.encode(), digest_size=8).digest(), "little")


def _member(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.isin(a, b)`` for ascending arrays of unique row positions (node row lists), by binary search."""
    if b.size == 0:
        return np.zeros(a.size, dtype=bool)
    at = np.minimum(np.searchsorted(b, a), b.size - 1)
    return b[at] == a


def _scope_label(variables: Sequence[int]) -> str:
    """Compact, canonical name of a variable set: ``0-3,7`` for {0, 1, 2, 3, 7}."""
    parts, vs = [], list(variables)
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        parts.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ",".join(parts)


# ----------------------------------------------------------------------------------------------- state
@dataclass
class _RDCState:
    """RDC analysis of a node: the stored projections (|scope|, Dmax+1, k), the last known RDC matrix (entries
    not re-checked by an update may be older), and the components (always those of the current rows)."""

    projections: torch.Tensor
    matrix: np.ndarray  # (s, s)
    components: list[tuple[int, ...]]  # positions within the node's scope
    certificate: tuple[np.ndarray, int] | None  # pairs that certify the components on an update, forest size
    gauss_counts: torch.Tensor | None = None  # (n, Vg) int32 ECDF counts of the Gaussian variables (node rows)
    #: canonical directions of the certificate pairs when they are a spanning forest only (one component):
    #: certify the next update by rdc.rdc_lower_bounds, without whitening
    directions: Combinations | None = None
    feature_map: FeatureMap | None = None  # the projections prepared for the node's features (rdc.FeatureMap)
    #: first-order reference of the certified directions (rdc_taylor): certifies later removals without features
    taylor: TaylorReference | None = None
    #: when fresh directions could not certify the components (the lower bound fell below the threshold), how
    #: far below the forest's smallest RDC their bound was: refreshing them waits until that RDC has risen
    bound_gap: float | None = None


@dataclass(eq=False)
class _Node:
    """One SPN node with its removal state (§4.1): scope, operation, rows (= X), N, the four flags, the
    analyses LearnSPN ran here (RDC projections and result, Q-k-means), children; leaves hold statistics."""

    path: str
    op: str
    scope: np.ndarray  # (s,) variable indices, ascending
    rows: np.ndarray | None  # (n,) storage positions, ascending (= stable-id order); None without state
    n: int
    exist_uninformative: bool = False
    all_uninformative: bool = False
    independencies: bool | None = None  # None: LearnSPN did not evaluate it at this node
    clusters: bool | None = None
    children: list[_Node] = field(default_factory=list)
    rdc: _RDCState | None = None
    qkmeans: QKMeans | None = None
    var: int = -1  # leaf: its variable
    #: leaf: Gaussian [sum (x - c), sum (x - c)^2, c] with c the leaf's mean when it was created (centred sums:
    #: no cancellation for values far from 0); categorical counts (K,)
    stats: np.ndarray | None = None
    #: per variable, rows holding its largest and smallest value (-1: constant variable), kept once an update
    #: has evaluated them: while both are present a removal cannot make the variable constant
    witnesses: np.ndarray | None = None  # (2, s)


# ------------------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class _Params:
    seed: int
    min_instances: int  # t
    rdc_threshold: float
    rdc_features: int  # k
    rdc_scale: float  # s
    alpha: float
    min_std: float
    n_categories: tuple[int, ...]  # 0 for a Gaussian variable
    qkmeans: dict[str, Any]
    relearn: str  # "replay" | "fresh": how a child that gained rows is brought up to date (Alg. 6)

    def as_kwargs(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "min_instances": self.min_instances,
            "rdc_threshold": self.rdc_threshold,
            "rdc_features": self.rdc_features,
            "rdc_scale": self.rdc_scale,
            "alpha": self.alpha,
            "min_std": self.min_std,
            "n_categories": [k if k > 0 else None for k in self.n_categories],
            "qkmeans": dict(self.qkmeans),
            "relearn": self.relearn,
        }


def _brief(value: Any) -> str:
    """``repr`` shortened to one line for an error message (long lists, arrays and tensors elided)."""
    return " ".join(reprlib.repr(value).split())


def _check_bool(value: Any, name: str) -> bool:
    """A switch: True or False (Python or numpy bool), not a string or a number that merely looks truthy."""
    if not isinstance(value, (bool, np.bool_)):
        raise DuckInputError(f"{name} must be True or False, got {_brief(value)}")
    return bool(value)


def _check_qkmeans_options(qkmeans: Any) -> dict[str, Any]:
    """The SplitData Q-k-means keyword arguments over ``QKMEANS_DEFAULTS``: a mapping of known options (their
    values are QKMeans' own checks)."""
    if qkmeans is None:
        qkmeans = {}
    if not isinstance(qkmeans, Mapping):
        raise DuckInputError(
            f"qkmeans must be a dict of Q-k-means options (keys among {list(_QK_KEYS)}) or None, "
            f"got {_brief(qkmeans)}"
        )
    unknown = [key for key in qkmeans if key not in _QK_KEYS]
    if unknown:
        raise DuckInputError(f"unknown qkmeans options {unknown}; allowed: {list(_QK_KEYS)}")
    return {**QKMEANS_DEFAULTS, **qkmeans}


def _check_projection_size(n_categories: tuple[int, ...], k: int) -> None:
    """Every node's RDC draws (V, Kmax+1, k) projections: refuse sizes that cannot be allocated."""
    d_max = max(max(n_categories), 1)
    entries = len(n_categories) * (d_max + 1) * k
    if entries > MAX_PROJECTION_ENTRIES:
        raise DuckInputError(
            f"rdc_features={k} with {len(n_categories)} variables and up to {d_max} categories needs "
            f"{entries:,} RDC projection values per node (at most {MAX_PROJECTION_ENTRIES:,}); "
            "reduce rdc_features or the largest categorical domain"
        )


def _as_matrix(X: Any, name: str, allow_nan: bool) -> torch.Tensor:
    """(n, V) float64 CPU tensor from numpy/torch/list; NaN only where allowed, never inf."""
    t = real_array_tensor(X, name, "(n, V)").cpu()
    if t.ndim != 2 or t.numel() == 0:
        raise DuckInputError(
            f"{name} must be a non-empty 2-D (n_rows, n_variables) array, got shape {tuple(t.shape)}"
        )
    t = t.to(_F64)
    bad = torch.isinf(t) if allow_nan else ~torch.isfinite(t)
    if bool(bad.any()):
        rows = bad.any(1).nonzero().flatten()[:5].tolist()
        what = "inf" if allow_nan else "NaN or inf"
        hint = (
            ""
            if allow_nan
            else " (NaN marks a missing value only at inference: log_likelihood marginalises it)"
        )
        raise DuckInputError(
            f"{name} contains {what} values (first bad rows: {rows}){hint}; clean those rows"
        )
    return t


def _check_types(types: Any, n_vars: int) -> tuple[str, ...]:
    if isinstance(types, str) or not isinstance(types, Sequence):
        raise DuckInputError(
            f"types must be a sequence with one of {TYPES} per column, got {types!r}; "
            f"e.g. ['gaussian'] * {n_vars}"
        )
    if len(types) != n_vars:
        raise DuckInputError(
            f"types has {len(types)} entries but X has {n_vars} columns; give one type per column"
        )
    unknown = sorted({str(t) for t in types if t not in TYPES})
    if unknown:
        raise DuckInputError(f"unknown variable types {unknown} in types; use {TYPES[0]!r} or {TYPES[1]!r}")
    return tuple(types)


def _check_codes(X: torch.Tensor, n_categories: Sequence[int], name: str) -> None:
    """Categorical columns must hold integer codes in [0, K); NaN (missing) is allowed where X may hold it."""
    cat_cols = [v for v, K in enumerate(n_categories) if K > 0]
    if not cat_cols:
        return
    C = X[:, cat_cols]  # (m, Vc)
    K = torch.tensor([n_categories[v] for v in cat_cols], dtype=X.dtype, device=X.device)  # (Vc,)
    bad = ~torch.isnan(C) & ((C != C.round()) | (C < 0) | (C >= K))
    if bool(bad.any()):
        j = int(bad.any(0).nonzero()[0])
        v, k = cat_cols[j], int(K[j])
        values = sorted({float(x) for x in C[:, j][bad[:, j]][:5].tolist()})
        raise DuckInputError(
            f"{name} column {v} is categorical with {k} categories (codes 0..{k - 1}) but holds {values}; "
            f"encode categories as integers 0..K-1 and declare K with n_categories "
            f"(a value outside the declared domain has no probability mass)"
        )


def _resolve_categories(X: torch.Tensor, types: tuple[str, ...], n_categories: Any) -> tuple[int, ...]:
    if n_categories is None:
        n_categories = [None] * len(types)
    if (
        isinstance(n_categories, (str, bytes))
        or not isinstance(n_categories, Sequence)
        or len(n_categories) != len(types)
    ):
        raise DuckInputError(
            f"n_categories must be a sequence with one entry per column (an int K for a categorical column, "
            f"None for a Gaussian one), got {n_categories!r}"
        )
    out = []
    for v, (kind, K) in enumerate(zip(types, n_categories, strict=True)):
        if kind == "gaussian":
            if K not in (None, 0):
                raise DuckInputError(f"n_categories[{v}] = {K!r} but column {v} is Gaussian; use None")
            out.append(0)
            continue
        if K is None:
            col = X[:, v]
            if bool((col != col.round()).any()) or bool((col < 0).any()):
                raise DuckInputError(
                    f"X column {v} is categorical but holds non-integer or negative values; encode its "
                    "categories as integers 0..K-1"
                )
            K = int(col.max().item()) + 1
            what = f"X column {v} is categorical with codes up to {K - 1} ({K} categories)"
        else:
            K = check_positive_int(K, f"n_categories[{v}]")
            what = f"n_categories[{v}]={K}"
        if K > MAX_CATEGORIES:
            raise DuckInputError(
                f"{what}, more than the {MAX_CATEGORIES} categories a variable may have; model column {v} "
                "as 'gaussian' or merge its categories into fewer codes 0..K-1"
            )
        out.append(K)
    return tuple(out)


def _keys_or_type(value: Any) -> str:
    """What a malformed state mapping holds, short enough for a one-line message: its keys, or its type."""
    return str(sorted(map(str, value))) if isinstance(value, Mapping) else type(value).__name__


def _check_replay(replay: Any, params: _Params, n_iter: int) -> dict[str, Any]:
    """An ``SPN.random_state_`` checked whole before any work (keys, types, shapes, finiteness): -> the
    replay with every node's projections as float64 CPU tensors. Which node uses which draws, and whether
    a projection fits that node's scope or a Q-k-means state its rows, is checked where they are used."""
    hint = "pass spn.random_state_ (learn_spn(..., replay=spn.random_state_, **spn.learn_params_))"
    if not isinstance(replay, Mapping) or set(replay) != {"seed", "nodes"}:
        raise DuckInputError(
            f"replay must be a dict with exactly the keys 'seed' and 'nodes', got {_keys_or_type(replay)}; {hint}"
        )
    seed = check_seed(replay["seed"], "replay['seed']")
    if seed != params.seed:
        raise DuckInputError(
            f"replay was drawn with seed={seed} but seed={params.seed}; pass the same seed "
            "(e.g. learn_spn(..., replay=spn.random_state_, **spn.learn_params_))"
        )
    nodes = replay["nodes"]
    if not isinstance(nodes, Mapping):
        raise DuckInputError(
            f"replay['nodes'] must be a dict from node path to its draws, got {type(nodes).__name__}; {hint}"
        )
    n_vars, k = len(params.n_categories), params.rdc_features
    shape = (max(max(params.n_categories), 1) + 1, k)  # projections: (|scope|, Dmax+1, k)
    checked: dict[str, dict[str, Any]] = {}
    for path, entry in nodes.items():
        where = f"replay['nodes'][{_brief(path)}]"
        if not (isinstance(path, str) and isinstance(entry, Mapping) and set(entry) <= set(_REPLAY_ENTRY_KEYS)):
            raise DuckInputError(
                f"{where} must be a dict with keys among {list(_REPLAY_ENTRY_KEYS)} under a path string, "
                f"got {_keys_or_type(entry)}; {hint}"
            )
        checked[path] = dict(entry)
        if "rdc_projections" in entry:
            name = f"{where}['rdc_projections']"
            W = real_array_tensor(entry["rdc_projections"], name, "(s, Dmax+1, k)")
            if W.ndim != 3 or not 1 <= W.shape[0] <= n_vars or tuple(W.shape[1:]) != shape:
                raise DuckInputError(
                    f"{name} has shape {tuple(W.shape)}, not (s <= {n_vars}, {shape[0]}, {k}) as this SPN's "
                    f"n_categories and rdc_features={k} draw; replay the state of an SPN learned with the same "
                    "parameters on these columns"
                )
            W = W.to(device="cpu", dtype=_F64)
            if not bool(torch.isfinite(W).all()):
                raise DuckInputError(f"{name} contains NaN or inf values; {hint}")
            checked[path]["rdc_projections"] = W
        if "qkmeans" in entry:
            _check_qkmeans_replay(entry["qkmeans"], f"{where}['qkmeans']", n_iter)
    return {"seed": seed, "nodes": checked}


def _check_qkmeans_replay(state: Any, where: str, n_iter: int) -> None:
    """A node's stored Q-k-means draws (``QKMeans.random_state_``, k = 2), checked up front by QKMeans' own
    replay check; the seed rows and the number of features are checked by ``QKMeans.fit`` on the node's rows."""
    if isinstance(state, Mapping) and set(state) != set(_QK_REPLAY_KEYS):
        raise DuckInputError(
            f"{where} must be a QKMeans.random_state_ dict with keys {list(_QK_REPLAY_KEYS)}, got {_keys_or_type(state)}"
        )
    check_replay_draws(state, 2, n_iter, None, where)


# ---------------------------------------------------------------------------------------- evaluation
class _Conditions:
    """LearnSPN's view of one node's data (the conditions of Alg. 1), computed lazily and cached.

    ``prior`` is the node being updated (None for a fresh learn); its stored analyses are updated instead of
    recomputed: the RDC reuses the stored projections; the Q-k-means model deletes ``lost_ids`` (exact
    deletion) and, when the node also ``gained`` rows, is refitted on the new rows replaying its draws.
    """

    def __init__(
        self,
        spn: SPN,
        rows: np.ndarray,
        scope: np.ndarray,
        path: str,
        prior: _Node | None = None,
        lost_ids: np.ndarray | None = None,
        gained: bool = False,
        kept: np.ndarray | None = None,
        lost: np.ndarray | None = None,
    ) -> None:
        self.spn, self.rows, self.scope, self.path = spn, rows, scope, path
        self.prior, self.lost_ids, self.gained = prior, lost_ids, gained
        self.kept = kept  # (prior's n,) which of the prior node's rows are among ``rows``
        self.lost = lost  # the prior node's rows not among ``rows`` (storage positions, ascending)
        self.witnesses: np.ndarray | None = None  # set by ``constant`` on an update
        #: set by ``qkmeans``: the prior node's model deleted the lost rows without retraining and no row was
        #: gained, so every kept row stays in its cluster (a SplitData child only loses rows)
        self.partition_kept = False
        self.n = int(rows.size)
        self.n_vars = int(scope.size)

    @cached_property
    def data(self) -> torch.Tensor:
        """(n, s) the node's rows restricted to its scope, in stable-id order."""
        return self.spn._gather(self.rows, self.scope)

    @cached_property
    def constant(self) -> np.ndarray:
        """(s,) sigma^2(X_v) = 0, tested exactly as max == min.

        On an update that only removed rows, the prior node's flags stand for every variable whose stored
        ``witnesses`` (two rows with different values; none for a constant variable) are still among the
        rows: a constant variable stays constant, and one with two distinct values left is not constant.
        Only the variables that lost a witness row are evaluated (max == min on their columns, new
        witnesses). Otherwise (and for a fresh learn) max == min on the data; updates then store new
        witnesses."""
        prior = self.prior
        if prior is not None and prior.witnesses is not None and not self.gained:
            w = prior.witnesses
            hit = self._witnesses_lost(w)
            if hit is None:  # lost rows unknown: every witness searched among the rows
                informative = w[0] >= 0
                if _member(w[:, informative].ravel(), self.rows).all():
                    self.witnesses = w
                    return ~informative
            else:
                self.witnesses = w if not hit.any() else self._refreshed_witnesses(w, np.flatnonzero(hit))
                return self.witnesses[0] < 0
        d = self.data
        if d.is_cpu:  # numpy: two reductions without device-op overhead
            x = d.numpy()
            top, bottom = x.argmax(0), x.argmin(0)
            cols = np.arange(x.shape[1])
            constant = x[top, cols] == x[bottom, cols]
        else:
            hi, top = d.max(0)
            lo, bottom = d.min(0)
            constant, top, bottom = (hi == lo).cpu().numpy(), top.cpu().numpy(), bottom.cpu().numpy()
        if prior is not None:  # an update: keep witnesses for the next one (a fresh learn has no use for them)
            witnesses = self.rows[np.concatenate([top, bottom])].reshape(2, -1)
            witnesses[:, constant] = -1
            self.witnesses = witnesses
        return constant

    def _witnesses_lost(self, w: np.ndarray) -> np.ndarray | None:
        """(s,) which variables lost a witness row of ``w`` (2, s) (-1: a constant variable, no witness), after
        removals only; None when the lost rows are not known (or many). The witnesses are rows of the prior
        node, so this compares them with the few lost rows instead of searching the kept ones."""
        lost = self.lost
        if lost is None or lost.size > _MAX_INCREMENTAL_REMOVALS:
            return None
        if lost.size == 1:
            return (w == lost[0]).any(0)
        return (w[:, :, None] == lost).any((0, 2))  # a lost row is never -1

    def _refreshed_witnesses(self, w: np.ndarray, cols: np.ndarray) -> np.ndarray:
        """``w`` with new witnesses (the rows of the largest and smallest value; -1 if now constant) for the
        variables at positions ``cols``: max == min evaluated on those columns only."""
        x = self.spn._gather_host(self.rows, self.scope[cols])  # (n, c)
        top, bottom = x.argmax(0), x.argmin(0)
        j = np.arange(cols.size)
        now_constant = x[top, j] == x[bottom, j]
        new = w.copy()
        new[0, cols] = np.where(now_constant, -1, self.rows[top])
        new[1, cols] = np.where(now_constant, -1, self.rows[bottom])
        return new

    @cached_property
    def exist_uninformative(self) -> bool:  # read by the rules and stored: evaluated once
        return bool(self.constant.any())

    @cached_property
    def all_uninformative(self) -> bool:
        return bool(self.constant.all())

    @cached_property
    def rdc(self) -> _RDCState:
        """The RDC split of the node's variables, with the stored projections when the node had them.

        On an update the stored components are confirmed, cheapest test first: (0) for a single component
        after removals only, the first-order bound of ``rdc_taylor`` (no features: the stored reference and
        the exact new ECDF counts) clears the threshold by ``_BOUND_GUARD``; (1) lower bounds
        (``rdc_lower_bounds``, no eigendecomposition) on its spanning forest's RDCs do (skipped when (0) was
        evaluated and failed: it is within ~1e-3 of this bound); on the whitened features, (2a) the bound
        with fresh canonical directions (unless an earlier try left a gap), which then also becomes the next
        first-order reference, (2b) ``components_still_hold`` (a spanning forest stays above the threshold,
        pairs across components stay below, both by more than ``_RDC_GUARD``); (3) the full matrix is
        recomputed. Either way the components are those of the full
        RDC matrix on the new rows. Matrix entries not re-evaluated keep their last computed value.
        """
        p = self.spn.params_
        stored = None if self.prior is None else self.prior.rdc
        projections = (
            stored.projections if stored is not None else self.spn._projections(self.path, self.scope)
        )
        fmap = stored.feature_map if stored is not None else None
        if fmap is None:
            cats = [p.n_categories[v] for v in self.scope]
            fmap = FeatureMap.build(cats, projections.to(self.spn.device), p.rdc_scale, self.data)
        counts = self._updated_counts(stored)
        taylor_failed = False
        if stored is not None and stored.taylor is not None:
            bounds = self._taylor_bounds(stored.taylor, counts, fmap)
            if bounds is not None and bool((bounds >= p.rdc_threshold + _BOUND_GUARD).all()):
                self.spn._counters["components_taylor"] += 1
                state = copy.copy(stored)  # the same analysis; only the counts follow the rows
                state.gauss_counts = None if counts is None else counts.to(torch.int32)
                return state
            # within ~1e-3 of the direct bound with the same directions: that one would fail as well
            taylor_failed = bounds is not None
        F = fmap(self.data, counts)
        counts = None if F.gauss_counts is None else F.gauss_counts.to(torch.int32)  # int32: half the state
        if stored is not None and stored.directions is not None and not taylor_failed:
            bounds = rdc_lower_bounds(F, stored.directions)
            if bool((bounds >= p.rdc_threshold + _BOUND_GUARD).all()):
                self.spn._counters["components_bounded"] += 1
                return _RDCState(
                    projections, stored.matrix, stored.components, stored.certificate, counts, stored.directions,
                    fmap, TaylorReference.build(fmap, F, stored.directions, self.rows),
                )
        Z = F.whitened()
        if stored is not None and stored.certificate is not None:
            pairs, n_forest = stored.certificate
            fresh = None
            if stored.bound_gap is None:  # (2a) fresh directions that certify now make the pairwise test moot
                fresh = self._certifying(fmap, F, self._directions(Z, stored.certificate))
                if fresh is not None and fresh[1] is not None:
                    self.spn._counters["components_bounded"] += 1
                    return _RDCState(
                        projections, stored.matrix, stored.components, stored.certificate, counts,
                        directions=fresh[0], feature_map=fmap, taylor=fresh[1],
                    )
            holds, values = components_still_hold(Z, pairs, n_forest, p.rdc_threshold, _RDC_GUARD)
            if holds:
                matrix = stored.matrix.copy()
                matrix[pairs[:, 0], pairs[:, 1]] = matrix[pairs[:, 1], pairs[:, 0]] = values
                weakest = float(values[:n_forest].min()) if n_forest else 1.0
                gap = stored.bound_gap
                if gap is not None and weakest - gap >= p.rdc_threshold + _BOUND_GUARD:  # worth another try
                    fresh = self._certifying(fmap, F, self._directions(Z, stored.certificate))
                directions = taylor = None
                if fresh is not None:
                    directions, taylor, smallest = fresh
                    gap = None if taylor is not None else weakest - smallest
                return _RDCState(
                    projections, matrix, stored.components, stored.certificate, counts, directions, fmap, taylor, gap
                )
        R = rdc_from_whitened(Z).cpu().numpy()
        components = dependency_components(R, p.rdc_threshold)
        certificate = certificate_pairs(components, R)
        directions = None if stored is None else self._directions(Z, certificate)  # a fresh learn: none
        return _RDCState(projections, R, components, certificate, counts, directions, fmap)

    @staticmethod
    def _directions(
        Z: Features, certificate: tuple[np.ndarray, int] | None
    ) -> Combinations | None:
        """Canonical directions of the certificate pairs for the next update's lower-bound test, when the
        certificate is a spanning forest only (no pairs across components, which would need upper bounds)."""
        if certificate is None or certificate[0].shape[0] == 0 or certificate[1] != certificate[0].shape[0]:
            return None
        return canonical_directions(Z, certificate[0])

    def _certifying(
        self, fmap: FeatureMap, F: Features, directions: Combinations | None
    ) -> tuple[Combinations | None, TaylorReference | None, float] | None:
        """Fresh directions with their first-order reference when their lower bound certifies the current rows:
        (directions, reference, smallest bound); then the next removals are checked without features, and the
        bound (below every forest edge's RDC) certifies the components now. Otherwise (None, None, smallest
        bound): a bound below the threshold now would only fail later. None without directions."""
        if directions is None:
            return None
        taylor = TaylorReference.build(fmap, F, directions, self.rows)
        fresh = taylor.bounds(np.arange(self.n), F.gauss_counts)  # no rank moves: rdc_lower_bounds on these rows
        if bool((fresh >= self.spn.params_.rdc_threshold + _BOUND_GUARD).all()):
            return directions, taylor, float(fresh.min())
        return None, None, float(fresh.min())

    def _taylor_bounds(
        self, taylor: TaylorReference, counts: torch.Tensor | None, fmap: FeatureMap
    ) -> np.ndarray | None:
        """``rdc_taylor`` lower bounds on the node's rows when they are a subset of the reference's (removals
        only) and their ECDF counts are known; None otherwise."""
        if self.gained or self.n < 2 or (counts is None and fmap.gauss.size):
            return None
        kept = np.minimum(np.searchsorted(taylor.rows, self.rows), taylor.rows.size - 1)
        if not np.array_equal(taylor.rows[kept], self.rows):
            return None
        return taylor.bounds(kept, counts)

    def _updated_counts(self, stored: _RDCState | None) -> torch.Tensor | None:
        """The Gaussian variables' ECDF counts on the new rows from the stored ones (a few removed rows, none
        gained: no sort, ``rdc.ecdf_counts_after_removal``); None when they must be recomputed."""
        if stored is None or stored.gauss_counts is None or self.gained or self.kept is None:
            return None
        if not 0 < self.lost_ids.size <= _MAX_INCREMENTAL_REMOVALS:
            return None
        kept = self.kept
        lost = self.prior.rows[~kept] if self.lost is None else self.lost
        gauss = self.scope[stored.feature_map.gauss]  # the counts' columns (FeatureMap: Gaussian positions)
        counts = stored.gauss_counts
        host = self.spn._X_host
        if host is not None and counts.is_cpu:  # host path: a few numpy ops on the same memory, no device ops
            # np.take along both axes: row-major results (fancy column indexing gives column-major ones, which
            # the comparison with the row-major counts walks more slowly); the counts are exact either way
            return torch.from_numpy(
                ecdf_counts_after_removal(
                    counts.numpy().compress(kept, axis=0),  # = [kept], at half the cost of boolean indexing
                    host.take(self.rows, 0).take(gauss, 1),
                    host.take(lost, 0).take(gauss, 1),
                )
            )
        return ecdf_counts_after_removal(
            counts[torch.from_numpy(kept).to(counts.device)],
            self.spn._gather(self.rows, gauss),
            self.spn._gather(lost, gauss),
        )

    @property
    def independencies(self) -> bool:
        return len(self.rdc.components) > 1

    @cached_property
    def qkmeans(self) -> QKMeans:
        qk = None if self.prior is None else self.prior.qkmeans
        if qk is not None and self.lost_ids is not None and self.lost_ids.size:
            if (
                qk.n_samples_ - self.lost_ids.size < 2
            ):  # nothing left to delete from: the stored draws are moot
                qk = None
            else:  # exact deletion (seeds/000): keeps the model or retrains replaying
                self.partition_kept = not qk.delete(self.lost_ids) and not self.gained
        if qk is None:
            return self.spn._fit_qkmeans(self.data, self.spn._ids[self.rows], self.path)
        if self.gained:  # the rows kept + the new ones, clustered with the same seeds and lattice phases
            return self.spn._fit_qkmeans(self.data, self.spn._ids[self.rows], self.path, replay=qk.random_state_)
        return qk

    @cached_property
    def labels(self) -> np.ndarray:
        """(n,) the Q-k-means cluster of every row, aligned with ``rows`` (both in stable-id order)."""
        return self.qkmeans.labels_.cpu().numpy()

    @cached_property
    def clusters(self) -> bool:  # read by the rule and stored: counted once
        sizes = np.bincount(self.labels, minlength=2)
        return bool(sizes[0] > 0 and sizes[1] > 0)

    def evaluated(self, name: str) -> Any:
        """The cached value of a lazy analysis, or None when it was not computed."""
        return self.__dict__.get(name)


# ------------------------------------------------------------------------------------------------- SPN
class SPN:
    """A removal-enabled sum-product network (seeds/001 §4). Build it with :func:`learn_spn`.

    Methods: ``log_likelihood(X)`` (batched, NaN = marginalised), ``unlearn(ids)`` (UnlearnSPN),
    ``sample(n, seed=)``, ``describe()``. Attributes: ``random_state_`` (every random draw, per node path),
    ``learn_params_`` (the keyword arguments of :func:`learn_spn` that built it), ``ids_``, ``n_samples_``,
    ``types_``, ``n_categories_``, ``n_nodes_``, ``depth_``, ``last_unlearning_``.
    """

    def __init__(
        self,
        X: torch.Tensor,
        ids: np.ndarray,
        types: tuple[str, ...],
        params: _Params,
        device: torch.device,
        removal_enabled: bool,
        replay: dict[str, Any] | None,
    ) -> None:
        order = np.argsort(ids, kind="stable")
        self.device = device
        self.params_ = params
        self.types_ = types
        self.removal_enabled = removal_enabled
        self._ids = ids[order]  # (N,) stable ids, ascending
        self._X = X[torch.from_numpy(order)].to(device)  # (N, V) float64 storage in id order
        self._alive = np.ones(ids.size, dtype=bool)
        self._replay_nodes = None if replay is None else replay["nodes"]
        self._circuit: Circuit | None = None
        self.last_unlearning_: dict[str, Any] | None = None
        self._counters: dict[str, Any] = self._new_counters()
        self.root = self._build(np.arange(ids.size), np.arange(X.shape[1]), "")
        self._replay_nodes = None  # a replay serves only the learning call it was passed to
        if not removal_enabled:
            self._X = None
            self._drop_state(self.root)

    # ------------------------------------------------------------------------------------ random draws
    def _projections(self, path: str, scope: np.ndarray) -> torch.Tensor:
        """RDC projections of the node at ``path`` for its scope: replayed, else drawn from (seed, path)."""
        p = self.params_
        if self._replay_nodes is not None and "rdc_projections" in self._replay_nodes.get(path, {}):
            W = self._replay_nodes[path]["rdc_projections"]  # float64 CPU, shape checked by _check_replay
            if W.shape[0] != scope.size:
                raise DuckInputError(
                    f"replay projections of node {path or '/'} have shape {tuple(W.shape)}, which does not "
                    f"fit its {scope.size} variables; replay the state of an SPN learned with the same "
                    "parameters on these rows"
                )
            return W.clone()
        generator = make_generator(p.seed, _RDC_TAG, _path_hash(path))
        return draw_projections(generator, p.n_categories, p.rdc_features)[torch.from_numpy(scope)]

    def _fit_qkmeans(
        self, data: torch.Tensor, ids: np.ndarray, path: str, replay: dict[str, Any] | None = None
    ) -> QKMeans:
        """Q-k-means, k = 2, of a node (SplitData's clustering, seeds/001 §5) with the node's seed; ``replay``
        (or the learning call's replay for this path) supplies the seeds and phases instead of drawing
        them."""
        p = self.params_
        qk = QKMeans(
            2,
            seed=derive_seed(p.seed, _QK_TAG, _path_hash(path)),
            device=self.device,
            dtype=_F64,
            **p.qkmeans,
        )
        # distances as sums of squared differences: with the expansion, rows far from the origin or
        # near-identical rows split by rounding noise, which differs between a model after deletions and the
        # replayed fresh fit (certified removal then failed)
        qk.exact_distances = True
        if replay is None and self._replay_nodes is not None:
            replay = self._replay_nodes.get(path, {}).get("qkmeans")
        return qk.fit(data, ids=ids, replay=replay)

    # -------------------------------------------------------------------------------------- data access
    @property
    def _X_host(self) -> np.ndarray | None:
        """The CPU storage as a numpy view of the same memory (taken per use, so it can never go stale, e.g.
        in a deep copy); None on a GPU."""
        return self._X.numpy() if self._X is not None and self._X.is_cpu else None

    def _gather(self, rows: np.ndarray, scope: np.ndarray) -> torch.Tensor:
        """``X[rows][:, scope]`` on the device (on the CPU through numpy indexing: a few rows, many calls)."""
        host = self._X_host
        if host is not None:
            return torch.from_numpy(host[rows][:, scope])
        r = torch.from_numpy(rows).to(self.device)
        s = torch.from_numpy(scope).to(self.device)
        return self._X.index_select(0, r).index_select(1, s)

    def _erase(self, rows: np.ndarray) -> None:
        """Zero the stored values of ``rows``."""
        host = self._X_host
        if host is not None:
            host[rows] = 0.0
        else:
            self._X[torch.from_numpy(rows).to(self.device)] = 0.0

    def _gather_host(self, rows: np.ndarray, scope: np.ndarray) -> np.ndarray:
        """``X[rows][:, scope]`` as a host array."""
        host = self._X_host
        return host[rows][:, scope] if host is not None else self._gather(rows, scope).cpu().numpy()

    # ---------------------------------------------------------------------------------------- LearnSPN
    def _build(
        self, rows: np.ndarray, scope: np.ndarray, path: str, cond: _Conditions | None = None
    ) -> _Node:
        """LearnSPN (Alg. 1) on ``rows`` x ``scope``; ``cond`` carries analyses already evaluated on them."""
        cond = cond if cond is not None else _Conditions(self, rows, scope, path)
        op = learnspn_operation(cond, self.params_.min_instances)
        if op == CREATE_LEAF:
            return self._leaves(rows, scope, path, own_path=True)[0]
        node = _Node(path, op, scope, rows, cond.n)
        self._store_conditions(node, cond)
        if op == NAIVE_FACTORIZATION:
            node.children = self._leaves(rows, scope, path)
        elif op == SPLIT_UNINFORMATIVE:
            node.children = self._leaves(rows, scope[cond.constant], path) + [
                self._build(rows, scope[~cond.constant], path + "/u")
            ]
        elif op == SPLIT_VARIABLES:
            node.children = [
                self._build(rows, scope[list(comp)], self._sv_child_path(path, scope[list(comp)]))
                for comp in cond.rdc.components
            ]
        else:  # SPLIT_DATA
            labels = cond.labels
            node.children = [self._build(rows[labels == c], scope, f"{path}/d{c}") for c in (0, 1)]
        return node

    @staticmethod
    def _sv_child_path(path: str, variables: np.ndarray) -> str:
        return f"{path}/v{_scope_label(variables.tolist())}"

    @staticmethod
    def _store_conditions(node: _Node, cond: _Conditions) -> None:
        """The node's flags and analyses are exactly those LearnSPN evaluated for it."""
        node.n = cond.n
        node.witnesses = cond.witnesses
        node.exist_uninformative = cond.exist_uninformative
        node.all_uninformative = cond.all_uninformative
        rdc, qk = cond.evaluated("rdc"), cond.evaluated("qkmeans")
        node.rdc, node.qkmeans = rdc, qk
        node.independencies = None if rdc is None else len(rdc.components) > 1
        node.clusters = None if qk is None else cond.clusters

    def _leaves(
        self, rows: np.ndarray, variables: np.ndarray, path: str, own_path: bool = False
    ) -> list[_Node]:
        """CreateLeaf for each of ``variables`` on ``rows`` (statistics of all of them in one batched op).

        Leaves of an NF/SU node at ``path`` are named ``path/x<var>``; a CreateLeaf node (``own_path``, one
        variable) keeps its own path.
        """
        out = []
        for v, stats in zip(variables.tolist(), self._leaf_stats(rows, variables), strict=True):
            leaf_path = path if own_path else f"{path}/x{v}"
            out.append(_Node(leaf_path, CREATE_LEAF, np.array([v]), rows, int(rows.size), var=v, stats=stats))
        return out

    def _leaf_stats(self, rows: np.ndarray, variables: np.ndarray) -> list[np.ndarray]:
        """Sufficient statistics of every variable on ``rows``: Gaussian [sum (x - c), sum (x - c)^2, c] centred
        at the rows' mean c, categorical counts (K,). Computed on the host: the statistics are host arrays, and
        on the update path ``rows`` are the few removed ones, where one (n, s) copy beats a dozen device ops."""
        sums, counts, cats = self._leaf_moments(rows, variables)
        return [counts[j, : cats[j]].copy() if cats[j] else sums[j].copy() for j in range(variables.size)]

    def _leaf_moments(self, rows: np.ndarray, variables: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(s, 3) sums of x - c and (x - c)^2 with c the mean over ``rows`` (third column), (s, Kmax) category
        counts (categorical variables' rows) and (s,) K (0: Gaussian) of ``variables`` on ``rows`` (a
        categorical variable's sums are computed and not used). Uncentred sums would lose the variance to
        cancellation for values far from 0 (mean 1e9, std 1: ``E[x^2] - E[x]^2`` keeps no correct digit)."""
        cats = np.asarray(self.params_.n_categories)[variables]  # (s,)
        d = self._gather_host(rows, variables)  # (n, s)
        sums = np.empty((variables.size, 3))
        sums[:, 2] = d.mean(0)
        r = d - sums[:, 2]
        sums[:, 0], sums[:, 1] = r.sum(0), np.einsum("ij,ij->j", r, r)
        is_cat = cats > 0
        counts = np.zeros((variables.size, max(int(cats.max()), 1)))
        if is_cat.any():
            K = counts.shape[1]
            codes = d[:, is_cat].astype(np.int64) + K * np.arange(int(is_cat.sum()))  # (n, sc), offset per column
            counts[is_cat] = np.bincount(codes.ravel(), minlength=codes.shape[1] * K).reshape(-1, K)
        return sums, counts, cats

    # --------------------------------------------------------------------------------------- UnlearnSPN
    def unlearn(self, ids: Any) -> SPN:
        """UnlearnSPN (seeds/001 Alg. 2-7): remove the rows with these stable ids (one request; a batch of ids
        is removed together). Afterwards the SPN equals a fresh ``learn_spn`` on the remaining rows that
        replays ``random_state_`` (module docstring). Raises DuckInputError, before any change, for unknown
        ids, ids removed before, duplicates, or a request that would remove every row.
        """
        if not self.removal_enabled:
            raise DuckInputError(
                "this SPN was learned with removal_enabled=False and keeps no removal state; "
                "learn it with removal_enabled=True (the default) to unlearn rows"
            )
        pos = self._positions_to_remove(ids)
        self._counters = self._new_counters()
        if pos.size:
            self._alive[pos] = False
            kept = ~_member(self.root.rows, pos)
            self.root = self._update(self.root, self.root.rows[kept], kept)
            self._erase(pos)  # the removed rows' values are not kept
            self._circuit = None
        self.last_unlearning_ = {"n_ids": int(pos.size), **self._counters}
        return self

    @staticmethod
    def _new_counters() -> dict[str, Any]:
        """What one ``unlearn`` call did (``last_unlearning_``): nodes updated in place or relearned, the
        operation changes (path, old, new) and the analyses whose result changed."""
        return {
            "nodes_updated": 0,
            "subtrees_relearned": 0,
            "rows_relearned": 0,
            "operation_changes": [],
            "partitions_changed": 0,
            "components_changed": 0,
            "components_bounded": 0,
            "components_taylor": 0,
            "uninformative_changed": 0,
        }

    def _relearned(self, n_rows: int) -> None:
        self._counters["subtrees_relearned"] += 1
        self._counters["rows_relearned"] += int(n_rows)

    def _positions_to_remove(self, ids: Any) -> np.ndarray:
        req = int64_array(ids, "ids")
        if req.size > 1 and np.unique(req).size != req.size:
            raise DuckInputError(f"ids to remove contain duplicates: {req[:10].tolist()}; pass each id once")
        pos = np.minimum(np.searchsorted(self._ids, req), self._ids.size - 1)
        unknown = self._ids[pos] != req
        if unknown.any():
            raise DuckInputError(
                f"unknown ids {req[unknown][:10].tolist()}: not among the ids this SPN was learned on "
                f"(ids run from {int(self._ids[0])} to {int(self._ids[-1])})"
            )
        if not self._alive[pos].all():
            gone = ~self._alive[pos]
            raise DuckInputError(
                f"ids {req[gone][:10].tolist()} were already removed; each row can be removed once"
            )
        if self.root.n - req.size < 1:  # the root holds every remaining row
            raise DuckInputError(
                f"removing {req.size} rows would leave the SPN without data "
                f"({self.root.n} rows left); an SPN needs at least one row"
            )
        return np.sort(pos) if pos.size > 1 else pos

    def _update(self, node: _Node, rows: np.ndarray, kept: np.ndarray | None = None) -> _Node:
        """UnlearnSPN at ``node`` (Alg. 2), generalised to any new row set ``rows`` of its sub-SPN.

        Only removals reach the root; a child can also gain rows when its parent's clustering moved rows
        between clusters (Alg. 6). For a pure removal the operation is revised with Def. 3 (and checked
        against Alg. 1); with gained rows it is Alg. 1's choice on the new rows. Changed operation: relearn
        the sub-SPN (Alg. 2 l. 6-9). Unchanged: update in place (Alg. 3-7). ``kept``: which of the node's rows
        are among ``rows``, when the caller already knows it (the root: ``rows = node.rows[kept]``).
        """
        if rows.size == node.rows.size and np.array_equal(rows, node.rows):  # Alg. 2 l. 2-3
            return node
        if kept is None:
            kept = _member(node.rows, rows)
        lost = node.rows[~kept]
        # rows are unique: when every new row is a kept old one, nothing was gained (no second search)
        gained = rows[:0] if node.rows.size - lost.size == rows.size else rows[~_member(rows, node.rows)]
        self._counters["nodes_updated"] += 1
        if node.op == CREATE_LEAF:  # Alg. 4
            self._update_leaves([node], rows, lost, gained)
            return node
        cond = _Conditions(
            self, rows, node.scope, node.path, prior=node, lost_ids=self._ids[lost], gained=gained.size > 0,
            kept=kept, lost=lost,
        )
        t = self.params_.min_instances
        op_new = revise_operation(node.op, node, cond, t) if gained.size == 0 else learnspn_operation(cond, t)
        if op_new != node.op:  # Alg. 2 l. 6-9: relearn (NF directly: LearnSPN chooses NF at once)
            self._relearned(rows.size)
            self._counters["operation_changes"].append((node.path, SHORT_NAMES[node.op], SHORT_NAMES[op_new]))
            new = self._build(rows, node.scope, node.path, cond)
            if new.op != op_new:  # Theorem 1 (rev is sound and complete), checked whenever the operation changes
                raise RuntimeError(f"revision gave {op_new} but LearnSPN chose {new.op} at {node.path!r}")
            return new
        if node.op == NAIVE_FACTORIZATION:  # Alg. 3
            self._update_leaves(node.children, rows, lost, gained)
        elif node.op == SPLIT_UNINFORMATIVE:  # Alg. 5
            self._update_split_uninformative(node, cond, rows, lost, gained)
        elif node.op == SPLIT_DATA:  # Alg. 6
            self._update_split_data(node, cond, rows)
        else:  # Alg. 7
            self._update_split_variables(node, cond, rows)
        node.rows = rows
        self._store_conditions(node, cond)
        return node

    def _update_leaves(
        self, leaves: list[_Node], rows: np.ndarray, lost: np.ndarray, gained: np.ndarray
    ) -> None:
        """UnlearnCreateLeaf (Alg. 4) for leaves over the same rows: subtract the lost rows' statistics (and
        add the gained rows').

        The Gaussian leaves' statistics are stacked and updated in one operation, with the moments of the
        moved rows about each leaf's own centre (the sums of ``_leaf_moments``); every leaf gets a row of the
        new (s, 3) array (they are only ever replaced, never written in place); categorical leaves add or
        subtract the moved rows' category counts."""
        cats = self.params_.n_categories
        gauss = [leaf for leaf in leaves if not cats[leaf.var]]
        categorical = [leaf for leaf in leaves if cats[leaf.var]]
        for moved, sign in ((lost, -1.0), (gained, 1.0)):
            if not moved.size:
                continue
            if gauss:
                # (sg, 3): sum (x - c), sum (x - c)^2, c (np.concatenate: a third of np.stack's overhead)
                stats = np.concatenate([leaf.stats for leaf in gauss]).reshape(-1, 3)
                r = self._gather_host(moved, np.array([leaf.var for leaf in gauss])) - stats[:, 2]
                if sign < 0:  # a fresh array: updated in place; the centre (column 2) stays
                    stats[:, 0] -= r.sum(0)
                    stats[:, 1] -= np.einsum("ij,ij->j", r, r)
                else:
                    stats[:, 0] += r.sum(0)
                    stats[:, 1] += np.einsum("ij,ij->j", r, r)
                for leaf, new in zip(gauss, stats, strict=True):
                    leaf.stats = new
            if categorical:
                codes = self._gather_host(moved, np.array([leaf.var for leaf in categorical])).astype(np.int64)
                for leaf, column in zip(categorical, codes.T, strict=True):
                    leaf.stats = leaf.stats + sign * np.bincount(column, minlength=leaf.stats.size)
        n = int(rows.size)
        for leaf in leaves:
            leaf.rows, leaf.n = rows, n

    def _update_split_uninformative(
        self, node: _Node, cond: _Conditions, rows: np.ndarray, lost: np.ndarray, gained: np.ndarray
    ) -> None:
        """Alg. 5: the uninformative variables' leaves are updated; if the set of uninformative variables is
        unchanged the informative child is updated recursively, else the new ones get leaves and the
        informative rest is relearned."""
        leaves, informative = node.children[:-1], node.children[-1]
        constant = cond.constant
        uninformative = node.scope[constant].tolist()
        if uninformative == [leaf.var for leaf in leaves]:
            self._update_leaves(leaves, rows, lost, gained)
            node.children = leaves + [self._update(informative, rows)]
            return
        self._counters["uninformative_changed"] += 1
        self._relearned(rows.size)
        node.children = self._leaves(rows, node.scope[constant], node.path) + [
            self._build(rows, node.scope[~constant], node.path + "/u")
        ]

    def _update_split_data(self, node: _Node, cond: _Conditions, rows: np.ndarray) -> None:
        """Alg. 6. The clustering is already updated (exact Q-k-means deletion; refit replaying its draws
        where rows were gained). Each child is updated to its cluster's rows: with an unchanged partition only
        the children holding removed rows change; rows that moved between clusters are removed from one child
        and added to the other (``relearn="fresh"``: a child that gained rows is relearned from fresh
        draws)."""
        labels = cond.labels
        new_rows = [rows[labels == c] for c in range(len(node.children))]
        if cond.partition_kept and cond.lost is not None:
            # the same model: the kept rows keep their clusters, a child only loses the removed rows it held
            # (Alg. 2 l. 2-3 for the others: their rows are unchanged)
            children = []
            for child_rows, child in zip(new_rows, node.children, strict=True):
                if child_rows.size == child.rows.size:
                    children.append(child)
                else:
                    lost = cond.lost
                    kept = child.rows != lost[0] if lost.size == 1 else ~_member(child.rows, lost)
                    if int(kept.sum()) != child_rows.size:  # a safeguard (the counts always agree): search
                        kept = None
                    children.append(self._update(child, child_rows, kept))
            node.children = children
            return
        gains = [not _member(r, child.rows).all() for r, child in zip(new_rows, node.children, strict=True)]
        self._counters["partitions_changed"] += any(gains)  # rows moved between the clusters
        children = []
        for child_rows, child, gained in zip(new_rows, node.children, gains, strict=True):
            if self.params_.relearn == "fresh" and gained:
                self._relearned(child_rows.size)
                children.append(self._build(child_rows, node.scope, child.path))
            else:
                children.append(self._update(child, child_rows))
        node.children = children

    def _update_split_variables(self, node: _Node, cond: _Conditions, rows: np.ndarray) -> None:
        """Alg. 7 with the stored projections: each component keeps (and updates) the child with the same
        scope; a new component is learned."""
        by_scope = {tuple(child.scope.tolist()): child for child in node.children}
        if len(cond.rdc.components) != len(node.children) or any(
            tuple(node.scope[list(comp)].tolist()) not in by_scope for comp in cond.rdc.components
        ):
            self._counters["components_changed"] += 1
        children = []
        for comp in cond.rdc.components:
            variables = node.scope[list(comp)]
            old = by_scope.get(tuple(variables.tolist()))
            if old is not None:
                children.append(self._update(old, rows))
            else:
                self._relearned(rows.size)
                children.append(self._build(rows, variables, self._sv_child_path(node.path, variables)))
        node.children = children

    # ---------------------------------------------------------------------------------------- inference
    def _leaf_params(self, leaf: _Node) -> tuple[str, Any]:
        p = self.params_
        K = p.n_categories[leaf.var]
        if K == 0:
            s1, s2, centre = leaf.stats  # centred sums (see _leaf_moments)
            shift = s1 / leaf.n
            var = max(s2 / leaf.n - shift * shift, 0.0)
            return "gaussian", (centre + shift, max(math.sqrt(var), p.min_std))
        probs = (leaf.stats + p.alpha) / (leaf.n + p.alpha * K)
        return "categorical", probs

    def _compile(self) -> Circuit:
        if self._circuit is None:
            builder = CircuitBuilder(len(self.types_))

            def add(node: _Node) -> int:
                if node.op == CREATE_LEAF:
                    kind, params = self._leaf_params(node)
                    if kind == "gaussian":
                        return builder.gaussian(node.var, *params)
                    return builder.categorical(node.var, params.tolist())
                kids = [add(c) for c in node.children]
                if node.op == SPLIT_DATA:
                    return builder.sum(kids, [c.n / node.n for c in node.children])
                return builder.product(kids)

            self._circuit = builder.build(add(self.root), self.device)
        return self._circuit

    def log_likelihood(self, X: Any) -> torch.Tensor:
        """Log-density of every row of X (m, V), evaluated layer by layer as tensor ops (no per-row
        recursion).

        NaN marks a missing value and is marginalised. Categorical columns must hold codes inside the declared
        domain 0..K-1 (codes never seen by a leaf get the smoothing mass ``alpha / (n + alpha K)``); a code
        outside the domain raises DuckInputError. -> (m,) float64 on the SPN's device
        """
        Xt = _as_matrix(X, "X", allow_nan=True)
        if Xt.shape[1] != len(self.types_):
            raise DuckInputError(
                f"X has {Xt.shape[1]} columns but this SPN models {len(self.types_)} variables; "
                "pass rows with the training columns in the training order"
            )
        _check_codes(Xt, self.params_.n_categories, "X")
        return circuit_log_likelihood(self._compile(), Xt.to(self.device))

    def sample(self, n: int, *, seed: int = 0) -> torch.Tensor:
        """``n`` rows drawn from the SPN (ancestral sampling, batched by tree height). -> (n, V) float64"""
        n = check_positive_int(n, "n")
        if n * len(self.types_) > MAX_SAMPLE_VALUES:
            raise DuckInputError(
                f"n={n} rows of {len(self.types_)} variables is more than {MAX_SAMPLE_VALUES} values (2 GiB of "
                "float64) in one call; draw them in several calls with different seeds"
            )
        generator = torch.Generator().manual_seed(check_seed(seed, "seed"))
        return circuit_sample(self._compile(), n, generator, self.device)

    # -------------------------------------------------------------------------------------- inspection
    def _nodes(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(node.children))
        return out

    @property
    def random_state_(self) -> dict[str, Any]:
        """Every random draw, per node path: ``{"seed": s, "nodes": {path: {"rdc_projections", "qkmeans"}}}``.

        ``learn_spn(..., replay=spn.random_state_)`` uses them instead of drawing (module docstring).
        """
        self._check_state()
        nodes: dict[str, dict[str, Any]] = {}
        for node in self._nodes():
            entry: dict[str, Any] = {}
            if node.rdc is not None:
                entry["rdc_projections"] = node.rdc.projections.clone()
            if node.qkmeans is not None:
                entry["qkmeans"] = node.qkmeans.random_state_
            if entry:
                nodes[node.path] = entry
        return {"seed": self.params_.seed, "nodes": nodes}

    @property
    def learn_params_(self) -> dict[str, Any]:
        """Keyword arguments of :func:`learn_spn` that reproduce this SPN's hyperparameters."""
        return self.params_.as_kwargs()

    @property
    def ids_(self) -> np.ndarray:
        """Stable ids of the rows currently in the SPN, ascending."""
        self._check_state()
        return self._ids[self._alive].copy()

    @property
    def n_samples_(self) -> int:
        return int(self.root.n)

    @property
    def n_categories_(self) -> tuple[int, ...]:
        """Declared domain size K of every categorical variable (0 for Gaussian variables)."""
        return self.params_.n_categories

    @property
    def n_nodes_(self) -> int:
        return len(self._nodes())

    @property
    def depth_(self) -> int:
        def depth(node: _Node) -> int:
            return 1 + max((depth(c) for c in node.children), default=0)

        return depth(self.root)

    def operation_counts(self) -> dict[str, int]:
        """Number of nodes created by each operation (CL, NF, SU, SD, SV)."""
        counts = dict.fromkeys(SHORT_NAMES.values(), 0)
        for node in self._nodes():
            counts[SHORT_NAMES[node.op]] += 1
        return counts

    def describe(self) -> dict[str, Any]:
        """The whole SPN with its removal state as nested plain Python (JSON-able): per node its path,
        operation, scope, row ids, the flags, the sum weights or leaf parameters, and the Q-k-means
        centroids."""
        self._check_state()

        def node_dict(node: _Node) -> dict[str, Any]:
            d: dict[str, Any] = {
                "path": node.path,
                "op": SHORT_NAMES[node.op],
                "scope": node.scope.tolist(),
                "n": node.n,
                "ids": self._ids[node.rows].tolist(),
            }
            if node.op == CREATE_LEAF:
                kind, params = self._leaf_params(node)
                d["leaf"] = (
                    {"type": kind, "mean": float(params[0]), "std": float(params[1])}
                    if kind == "gaussian"
                    else {"type": kind, "probs": params.tolist()}
                )
                return d
            d.update(
                exist_uninformative=node.exist_uninformative,
                all_uninformative=node.all_uninformative,
                independencies=node.independencies,
                clusters=node.clusters,
            )
            if node.rdc is not None:
                d["components"] = [list(map(int, node.scope[list(c)])) for c in node.rdc.components]
            if node.qkmeans is not None:
                d["qkmeans_centers"] = node.qkmeans.cluster_centers_.cpu().tolist()
            if node.op == SPLIT_DATA:
                d["weights"] = [c.n / node.n for c in node.children]
            d["children"] = [node_dict(c) for c in node.children]
            return d

        return node_dict(self.root)

    def _check_state(self) -> None:
        if not self.removal_enabled:
            raise DuckInputError(
                "this SPN was learned with removal_enabled=False and keeps no removal state; "
                "learn it with removal_enabled=True (the default)"
            )

    def _drop_state(self, node: _Node) -> None:
        """LearnSPN without removal state (the baseline of seeds/001 Table 3): keep only what inference
        needs."""
        node.rows, node.rdc, node.qkmeans = None, None, None
        for child in node.children:
            self._drop_state(child)


# ---------------------------------------------------------------------------------------------- LearnSPN
def learn_spn(
    X: Any,
    types: Sequence[str],
    *,
    ids: Any = None,
    seed: int = 0,
    min_instances: int = 100,
    rdc_threshold: float = 0.3,
    rdc_features: int = 10,
    rdc_scale: float = 1.0 / 6.0,
    alpha: float = 1.0,
    min_std: float = 1e-3,
    n_categories: Sequence[int | None] | None = None,
    qkmeans: dict[str, Any] | None = None,
    device: str | torch.device | None = "auto",
    relearn: str = "replay",
    removal_enabled: bool = True,
    replay: dict[str, Any] | None = None,
) -> SPN:
    """Removal-enabled LearnSPN (seeds/001 Alg. 1 and §4.1) on X (n, V) with one type per column.

    Args:
        X: complete training rows (no NaN), numpy or torch. Categorical columns hold integer codes 0..K-1.
        types: ``"gaussian"`` or ``"categorical"`` per column.
        ids: stable row ids (unique integers; default ``0..n-1``); ``unlearn`` takes these ids.
        seed: root of every random draw (per-node RDC projections and Q-k-means).
        min_instances: t of Alg. 1: a node with at most t rows is naively factorised.
        rdc_threshold, rdc_features, rdc_scale: RDC independence threshold, number k of random features,
            projection scale s (SPFlow's 0.3, 10, 1/6).
        alpha: additive smoothing of categorical leaves, ``P(j) = (n_j + alpha) / (n + alpha K)``.
        min_std: lower bound on a Gaussian leaf's standard deviation (zero-variance leaves; data units).
        n_categories: declared K per column (None for Gaussian columns, or None to infer ``max code + 1``).
            The domain is part of the model: removals never shrink it. At most ``MAX_CATEGORIES`` (2^16)
            per variable, and every node's RDC projections (V x (Kmax + 1) x rdc_features values) at most
            ``MAX_PROJECTION_ENTRIES``: model a larger domain as Gaussian or merge its categories.
        qkmeans: keyword arguments for the SplitData Q-k-means (``n_iter``, ``gamma``, ``eps``, ``eps_scale``,
            ``n_local_trials``); QKMeans' defaults otherwise, except ``eps_scale=4`` (``QKMEANS_DEFAULTS``).
        device: "auto" | "cpu" | "cuda".
        relearn: how unlearning brings a cluster that *gained* rows (moved from the other cluster when a
            removal changed a Q-k-means partition) up to date: "replay" updates its sub-SPN node by node,
            keeping each node's stored draws (RDC projections, Q-k-means seeds and phases); "fresh" relearns
            it from the draws of (seed, path) as Alg. 6 does. Both are exact under the replay statement.
        removal_enabled: False builds the same SPN without keeping removal state (no ``unlearn``); a bool.
        replay: a ``random_state_`` whose draws replace the ones derived from ``seed`` (the certified-removal
            comparison; see the module docstring); its structure is checked whole before any work.

    Raises DuckInputError, before any work, for bad data or options.
    """
    Xt = _as_matrix(X, "X", allow_nan=False)
    n, n_vars = Xt.shape
    kinds = _check_types(types, n_vars)
    cats = _resolve_categories(Xt, kinds, n_categories)
    _check_codes(Xt, cats, "X")
    if not (isinstance(relearn, str) and relearn in ("replay", "fresh")):
        raise DuckInputError(f"relearn must be 'replay' or 'fresh', got {_brief(relearn)}")
    dev = check_device(device, "device")
    keep_state = _check_bool(removal_enabled, "removal_enabled")
    qk_args = _check_qkmeans_options(qkmeans)
    # QKMeans checks its options' values; its n_iter is the replayed phases' length
    n_iter = QKMeans(2, device=dev, dtype=_F64, **qk_args).n_iter
    params = _Params(
        seed=check_seed(seed, "seed"),
        min_instances=check_positive_int(min_instances, "min_instances"),
        rdc_threshold=check_number(rdc_threshold, "rdc_threshold", 0.0, True, 1.0),
        rdc_features=check_positive_int(rdc_features, "rdc_features"),
        rdc_scale=check_number(rdc_scale, "rdc_scale", 0.0, True),
        alpha=check_number(alpha, "alpha", 0.0, False),
        min_std=check_number(min_std, "min_std", 0.0, True),
        n_categories=cats,
        qkmeans=qk_args,
        relearn=str(relearn),
    )
    _check_projection_size(cats, params.rdc_features)
    if ids is None:
        row_ids = np.arange(n, dtype=np.int64)
    else:
        row_ids = int64_array(ids, "ids")
        if row_ids.size != n:
            raise DuckInputError(f"ids has {row_ids.size} entries but X has {n} rows; pass one id per row")
        if np.unique(row_ids).size != n:
            raise DuckInputError("ids must be unique (one stable id per row); found duplicates")
    checked_replay = None if replay is None else _check_replay(replay, params, n_iter)
    return SPN(Xt, row_ids, kinds, params, dev, keep_state, checked_replay)
