"""Scoring a trained bank (ALGORITHMS.md §4 "Shadow bank"): each model loaded from its checkpoint (checked to be the
model the bank expects), φ of every model on every train and test sample per set of query views (cached beside the
models), and which models trained on which query samples. The bank's caching, locking and training are
:class:`attacks.shadow.ShadowBank`'s and :class:`attacks.bank_cache.BankCache`'s; this mixin reads what they
provide: ``cache``, ``data``, ``n_shadow``, ``key``, ``dir``, ``label``, ``pool``, ``device``, ``threads``,
``progress``, ``model_factory``, ``keep``, ``model_seed``, ``shadow_path``, ``phi_path``, ``missing`` and
``train``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attacks.lira import lira_phi, view_logits
from attacks.threads import intra_op_threads
from duck.checkpoint import load_checkpoint, load_into
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.utils import warn_line


class BankScoring:
    """Loading and scoring the models of a trained bank (module docstring)."""

    def _names(self, manifest: Any, k: int, key: str) -> tuple[Any, Any, Any] | None:
        """None if ``manifest`` names model ``k`` of bank ``key`` with this bank's seed for it; else what it
        names instead ``(shadow_id, bank_key, seed)``."""
        got = ((manifest.get("shadow_id"), manifest.get("bank_key"), manifest.get("seed"))
               if isinstance(manifest, Mapping) else (None, None, None))
        return None if got == (k, key, self.model_seed(k)) else got

    def load_shadow(self, k: int) -> Classifier:
        """Shadow ``k`` from its checkpoint; :class:`DuckInputError` if it does not load or its manifest does
        not name shadow ``k`` of this bank (e.g. another shadow's checkpoint copied over it)."""
        sd, manifest = load_checkpoint(self.shadow_path(k))
        if not isinstance(manifest, Mapping):
            raise DuckInputError(f"checkpoint {self.shadow_path(k)} has no manifest naming its shadow")
        got = self._names(manifest, k, self.key)
        if got is not None:
            raise DuckInputError(f"checkpoint {self.shadow_path(k)} holds shadow {str(got[0])[:20]} of bank "
                                 f"{str(got[1])[:40]}, not shadow {k} of bank {self.key}")
        model = self.model_factory()
        load_into(model, sd, self.shadow_path(k))
        return model

    # -- inference ------------------------------------------------------------------------------------
    def shadow_phi(self, views: Sequence[str], *,
                   batch_size: int = 1024) -> tuple[np.ndarray, np.ndarray, bool]:
        """φ of every shadow on every train and test sample for each view (eval mode):
        ``(phi_train (E, N_train, V), phi_test (E, N_test, V), reused)``; cached in ``phi_<views>.npz``."""
        path = self.phi_path(views)
        self.cache.check_layout()
        cached = self._read_phi(path, views)
        if cached is not None:
            return cached[0], cached[1], True
        if self.missing():
            raise DuckInputError(f"{self.label} {self.dir} is incomplete ({len(self.missing())} shadows "
                                 "missing); train it first (ShadowBank.train)")
        from tqdm.auto import tqdm

        parts: dict[str, list[np.ndarray]] = {"train": [], "test": []}
        with intra_op_threads(self.threads):
            for k in tqdm(range(self.n_shadow), desc="shadow inference", disable=not self.progress,
                          leave=False):
                model = self._load_or_retrain(k).to(self.device)
                for split, ds in (("train", self.data.train), ("test", self.data.test)):
                    logits, labels = view_logits(model, ds, None, views, device=self.device,
                                                 batch_size=batch_size)  # (V, N, C), (N,)
                    parts[split].append(lira_phi(logits, labels).T.numpy())  # (N, V)
        phi_train, phi_test = np.stack(parts["train"]), np.stack(parts["test"])  # (E, N, V)
        self.cache.write_arrays(path, phi_train=phi_train, phi_test=phi_test, views=np.array(list(views)))
        return phi_train, phi_test, False

    def _read_phi(self, path: Path, views: Sequence[str]) -> tuple[np.ndarray, np.ndarray] | None:
        """The cached φ arrays if ``path`` is intact and matches this bank; otherwise warn and return None
        (the file is then recomputed)."""
        def same_views(f: Mapping[str, np.ndarray]) -> None:
            if list(f["views"]) != list(views):
                raise ValueError(f"views {list(f['views'])}, expected {list(views)}")

        arrays = self.cache.read_arrays(path, {"phi_train": (self.n_shadow, len(self.data.train), len(views)),
                                         "phi_test": (self.n_shadow, len(self.data.test), len(views))},
                                  kind="f", check=same_views)
        return None if arrays is None else (arrays["phi_train"], arrays["phi_test"])

    def _load_or_retrain(self, k: int) -> Classifier:
        """Shadow ``k``; a corrupt, unloadable or misplaced checkpoint (see :meth:`load_shadow`) is deleted and
        the shadow trained again (counted in :attr:`job`)."""
        try:
            return self.load_shadow(k)
        except DuckInputError as e:
            # the path is already in the line: name the file only (a deep cache directory pushed the reason past
            # the cut), and drop the advice after "; " meant for a user's own file (this one is trained again)
            first = (str(e).splitlines() or [""])[0].replace(str(self.shadow_path(k)), self.shadow_path(k).name)
            reason = first.split("; ")[0][:160] or type(e).__name__
            warn_line(f"{self.label} {self.dir}: corrupt {self.shadow_path(k).name} ({reason}); training it again")
        self.shadow_path(k).unlink(missing_ok=True)
        self.train()
        return self.load_shadow(k)

    def shadow_in(self, train_idx: np.ndarray, test_idx: np.ndarray) -> np.ndarray:
        """``(E, Q)`` bool: did shadow e train on query sample q (train samples first, then test samples)?"""
        keep, test_idx = self.keep, np.asarray(test_idx, dtype=np.int64)
        test_in = (keep[:, len(self.data.train) + test_idx] if self.pool == "train+test"
                   else np.zeros((self.n_shadow, len(test_idx)), dtype=bool))
        return np.concatenate([keep[:, np.asarray(train_idx, dtype=np.int64)], test_in], axis=1)
