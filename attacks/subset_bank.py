"""A random-subset bank (datamodel data, ALGORITHMS.md §11; issue 36): model ``k`` trains on a uniformly random
``keep_fraction`` of the training set (drawn for it alone) with a seed of its own, so an example is left out by
about ``(1 − keep_fraction)·E`` of the ``E`` models.

For a random forget set of about ``1 − keep_fraction`` of the data (homogeneous removal with ``fraction = 0.1``
and ``keep_fraction = 0.9``), a model that left forget example ``x`` out was trained like a model retrained
without the forget set — on as many examples, never on ``x`` — and differs from one only in *which* other
random examples it missed. Its output on ``x`` is close to a draw from the retrained models' distribution, with
the full data's confidence (the LiRA bank's models on random halves are 1.2 logits less confident on digits,
issue 36's session-g probe). Measured on digits 10 % homogeneous removal (docs/results.md, issue 36): with 320
models (17–46 OUT models per forget example) one distinct OUT model per run, used as the runs' outputs directly,
is judged ``forgotten`` by the audit (F 0.103–0.108 against the retrain control's 0.115); a leave-fold-out
design (every OUT model of ``x`` missing the same fold) is not (F 0.087): the fold it misses is a fixed set
other than the forget set, a per-example bias of 0.52 retrained standard deviations against 0.30 here.
:class:`baselines.subset_matching.SubsetMatching` matches those outputs. A whole class is not such a request
(the rest of the class is still in every OUT model).

The bank is a :class:`~attacks.shadow.ShadowBank` with its own keep matrix: caching in the artifact store
(``<cache_dir>/store-v1/subset_banks/<key>/``), the lock per key, atomic writes, resuming, batched training where
it is faster. Model ``k``'s subset (the ``k``-th draw of one seeded stream) and seed do not depend on ``E``, so
raising ``E`` trains only the new models. :meth:`SubsetBank.out_logits` stores every example's logits under each
model that left it out (``out_logits.npz``, packed by example; each model is run only on the examples it left
out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attacks.shadow import ShadowBank
from attacks.threads import intra_op_threads
from duck.data.base import DatasetSplits
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.training import Recipe


def subset_keep(n_models: int, n: int, keep_fraction: float, seed: int) -> np.ndarray:
    """``(E, n)`` bool: row ``k`` is IN for ``round(keep_fraction · n)`` examples, the first of the ``k``-th
    permutation of one stream seeded with ``seed`` (so row ``k`` does not depend on ``E``)."""
    n_in = int(round(float(keep_fraction) * n))
    rng = np.random.default_rng([int(seed), 0x5B5E7])
    keep = np.zeros((n_models, n), dtype=bool)
    for k in range(n_models):
        keep[k, rng.permutation(n)[:n_in]] = True
    return keep


def out_offsets(keep: np.ndarray) -> np.ndarray:
    """``(n + 1,)`` offsets of the packed OUT rows: example ``i``'s OUT models (ascending) are rows
    ``offsets[i]:offsets[i + 1]`` of :meth:`SubsetBank.out_logits`."""
    return np.concatenate([[0], np.cumsum((~keep).sum(0))]).astype(np.int64)


class SubsetBank(ShadowBank):
    """``n_models`` models, each trained on a random ``keep_fraction`` of the training set (module docstring)."""

    folder = "subset_banks"
    label = "subset bank"
    role = "subset_bank"
    size_setting = "method.n_models"
    shares_models_across_sizes = True  # model k: the k-th subset of the seeded stream and shadow_seed(seed, k)

    def __init__(self, cache_dir: str | Path, data: DatasetSplits, model_factory: Callable[[], Classifier],
                 recipe: Recipe, *, n_models: int, keep_fraction: float, seed: int = 0, **kwargs: Any) -> None:
        n = len(data.train)
        if isinstance(keep_fraction, bool) or not isinstance(keep_fraction, (int, float)) \
                or not 0 < round(float(keep_fraction) * n) < n:
            raise DuckInputError(f"method.keep_fraction={keep_fraction!r} must leave each model between 1 and "
                                 f"{n - 1} of the {n} training samples (0.9 for a 10 % forget set)")
        if isinstance(n_models, bool) or not isinstance(n_models, int) or n_models < 2:
            raise DuckInputError(f"method.n_models={n_models!r} must be an integer >= 2")
        self.keep_fraction = float(keep_fraction)
        kwargs.pop("pool", None)
        super().__init__(cache_dir, data, model_factory, recipe, n_shadow=n_models, seed=seed, pool="train",
                         **kwargs)

    def extra_spec(self) -> dict[str, Any]:
        return {"kind": "subset", "fraction": self.keep_fraction}

    def expected_keep(self) -> np.ndarray:
        return subset_keep(self.n_shadow, self.n_pool, self.keep_fraction, self.seed)

    def out_logits(self, *, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray]:
        """``(logits (n_out, C) float32, offsets (N + 1,))``: rows ``offsets[i]:offsets[i+1]`` are example
        ``i``'s eval-mode logits under each model that left it out, in ascending model order
        (:func:`out_offsets`). Trains the missing models first; cached in ``out_logits.npz`` (a damaged file
        is recomputed with a warning)."""
        from duck.metrics import predict_logits

        self.train()
        keep = np.asarray(self.keep, dtype=bool)
        offsets = out_offsets(keep)
        path = self.dir / "out_logits.npz"
        self.cache.check_layout()
        num_classes = int(self.model_factory().num_classes)
        cached = self.cache.read_arrays(path, {"out_logits": (int(offsets[-1]), num_classes)}, kind="f")
        if cached is not None:
            return cached["out_logits"], offsets
        rank = np.cumsum(~keep, axis=0) - 1  # rank[k, i]: model k's position among example i's OUT models
        out = np.zeros((int(offsets[-1]), num_classes), dtype=np.float32)
        with intra_op_threads(self.threads):
            for k in range(self.n_shadow):
                left_out = np.flatnonzero(~keep[k])
                model = self._load_or_retrain(k).to(self.device)
                logits, _, idx = predict_logits(model, self.data.train, indices=left_out, batch_size=batch_size,
                                                device=self.device)
                i = idx.numpy()
                out[offsets[i] + rank[k, i]] = logits.to(torch.float32).numpy()
        self.cache.write_arrays(path, out_logits=out)
        return out, offsets
