"""The retrain bank of the forgetting audit (ALGORITHMS.md §10 "Model sets"): R models retrained on the retain
set ``D_r`` with seeds 0..R−1 and the target's recipe — the distribution of models that never saw the forget
set, against which every unlearned model of the same forget set is compared.

It is a :class:`~attacks.shadow.ShadowBank` whose every model trains on the retain set (the "keep matrix" is
the retain mask in every row) with its own seed: the caching in the artifact store
(``<cache_dir>/store-v1/retrain_banks/<key>/``, :mod:`attacks.bank_cache`), the lock per key, the atomic writes,
resuming after an interruption, batched training where it is faster and the φ of every train and test sample
per set of views are the shadow bank's. The key holds everything the shadow bank's does (data content, model,
recipe, trainer settings, R, seed) plus the forget set's hash, so a different forget set never reuses a bank,
and every method and audit of the same forget set shares one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attacks.shadow import ShadowBank
from duck.data.base import DatasetSplits
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.training import Recipe


def retrain_seed(seed: int, k: int) -> int:
    """Seed of retrained model ``k``: independent of the shadow seeds (another stream of the same seed)."""
    return int(np.random.SeedSequence([int(seed), 0x5E7A1, int(k)]).generate_state(1)[0] & 0x7FFFFFFF)


class RetrainBank(ShadowBank):
    """R retrained models of one forget set (see the module docstring). ``retain_idx``: the training indices
    of the retain set; ``n_models`` = R (at least 2)."""

    folder = "retrain_banks"
    label = "retrain bank"
    role = "retrain_bank"
    size_setting = "attack.forgetting.n_retrained"
    shares_models_across_sizes = True  # model k: the retain set, seed retrain_seed(seed, k), whatever R

    def __init__(self, cache_dir: str | Path, data: DatasetSplits, model_factory: Callable[[], Classifier],
                 recipe: Recipe, retain_idx: np.ndarray, *, n_models: int, seed: int = 0, **kwargs: Any) -> None:
        retain = np.unique(np.asarray(retain_idx, dtype=np.int64))
        if retain.size == 0 or retain[0] < 0 or retain[-1] >= len(data.train):
            raise DuckInputError(f"the retain set must be training indices in 0..{len(data.train) - 1}")
        if isinstance(n_models, bool) or not isinstance(n_models, int) or n_models < 2:
            raise DuckInputError(f"the retrain bank needs at least 2 models, got {n_models!r}")
        self.retain_idx = retain
        self.retain_hash = hashlib.sha256(retain.tobytes()).hexdigest()
        kwargs.pop("pool", None)
        super().__init__(cache_dir, data, model_factory, recipe, n_shadow=n_models, seed=seed, pool="train",
                         **kwargs)

    def extra_spec(self) -> dict[str, Any]:
        return {"kind": "retrain", "retain_sha256": self.retain_hash}

    def expected_keep(self) -> np.ndarray:
        row = np.zeros(self.n_pool, dtype=bool)
        row[self.retain_idx] = True
        return np.tile(row, (self.n_shadow, 1))

    def model_seed(self, k: int) -> int:
        return retrain_seed(self.seed, k)

    def phi(self, *, batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray, bool]:
        """φ (identity view) of every model on every train and test sample: ``((R, N_train), (R, N_test),
        reused)``; trains the missing models first."""
        self.train()
        phi_train, phi_test, reused = self.shadow_phi(["identity"], batch_size=batch_size)
        return phi_train[..., 0], phi_test[..., 0], reused

    def accuracies(self, *, batch_size: int = 1024) -> np.ndarray:
        """``(R, N_train + N_test)`` bool: is model k right on each train then test sample (from the stored
        models; used for the retain / test accuracies of the final score). Cached in ``correct.npz`` beside
        the φ file, so a later audit of the same forget set (another method, trial or comparison row) does not
        run the R models again; a damaged file is recomputed with a warning."""
        from duck.metrics import predict_logits

        path = self.dir / "correct.npz"
        self.cache.check_layout()
        shape = (self.n_shadow, len(self.data.train) + len(self.data.test))
        cached = self.cache.read_arrays(path, {"correct": shape}, kind="b")
        if cached is not None:
            return cached["correct"]
        rows = []
        for k in range(self.n_shadow):
            model = self._load_or_retrain(k).to(self.device)
            correct = []
            for ds in (self.data.train, self.data.test):
                logits, labels, _ = predict_logits(model, ds, batch_size=batch_size, device=self.device)
                correct.append((logits.argmax(1) == labels).numpy())
            rows.append(np.concatenate(correct))
        out = np.stack(rows)
        self.cache.write_arrays(path, correct=out)
        return out



class ShadowRetrainBank(ShadowBank):
    """The retrained half of U-LiRA's shadow pairs (ALGORITHMS.md §10 (c)): model k trains on shadow k's IN
    examples without the forget set (``IN_k \\ D_f``) with shadow k's own seed, so that ``R_k`` differs from
    shadow ``M_k`` only by the forget examples it never saw. Keyed like the shadow bank plus the forget set."""

    folder = "shadow_retrain_banks"
    label = "shadow retrain bank"
    role = "shadow_retrain"

    def __init__(self, cache_dir: str | Path, data: DatasetSplits, model_factory: Callable[[], Classifier],
                 recipe: Recipe, forget_idx: np.ndarray, *, n_shadow: int, seed: int = 0, **kwargs: Any) -> None:
        self.forget_idx = np.unique(np.asarray(forget_idx, dtype=np.int64))
        self.forget_hash = hashlib.sha256(self.forget_idx.tobytes()).hexdigest()
        kwargs.pop("pool", None)
        super().__init__(cache_dir, data, model_factory, recipe, n_shadow=n_shadow, seed=seed, pool="train", **kwargs)

    def extra_spec(self) -> dict[str, Any]:
        return {"kind": "shadow_retrain", "forget_sha256": self.forget_hash}

    def expected_keep(self) -> np.ndarray:
        keep = super().expected_keep().copy()  # shadow k's IN examples (the LiRA keep matrix of this seed)
        keep[:, self.forget_idx] = False
        return keep
