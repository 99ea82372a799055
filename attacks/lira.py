"""The Likelihood Ratio Attack (LiRA; Carlini et al. 2022, "Membership Inference Attacks From First
Principles") as the DUCK paper uses it for unlearning audits (seeds/003 §IV-D, Eq. 7–8, Supp. V-E;
ALGORITHMS.md §4).

- **Statistic** (Eq. 7, the logit-scaled confidence): ``φ = log p_y − log(1 − p_y)``, computed in the
  stable form ``φ = z_y − logsumexp_{y'≠y} z_{y'}`` from the logits ``z`` (float64).
- **Query views**: one φ per deterministic view of the input (``identity``, ``flip``, ``shift`` = the four
  translations by ``img_size // 8`` pixels that the ``crop`` augmentation produces).
- **Offline** (Eq. 8, the variant of the DUCK paper): per example, a Gaussian ``N(μ_out, σ_out²)`` fitted
  to the φ of the shadows that did *not* train on it (μ = median, σ = population std, as in the
  reference code); one-sided score ``−log(1 − Φ((φ_target − μ_out)/σ_out))``; *option* two-sided
  ``−log(2·Φ(−|z|))``.
- **Online**: ``log N(φ_target; μ_in, σ_in) − log N(φ_target; μ_out, σ_out)``.
- **Fixed variance**: one global σ (the root of the mean per-example variance) instead of per-example σ.
- **Truncation** (reference code): every example is scored from the same number of IN/OUT shadows,
  the minimum over examples (a random subset of that size per example, see :func:`_selected`).

All scores are "larger means member" and are averaged over views. Inference is in eval mode.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from scipy.special import log_ndtr

from duck.data.loaders import make_loader
from duck.errors import DuckInputError

VARIANTS = ("offline", "online")
OFFLINE_TESTS = ("one_sided", "two_sided")
VIEW_NAMES = ("identity", "flip", "shift")


# ----------------------------------------------------------------------------------------------------------
# the statistic


def lira_phi(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``φ = z_y − logsumexp_{y'≠y} z_{y'}`` (= ``log(p_y / (1 − p_y))``) in float64.

    ``logits (..., C)``, ``labels`` broadcastable to ``(...)`` (e.g. ``(V, N, C)`` with ``(N,)``)
    -> ``φ (...)``.
    Finite for any finite logits (no ``log(p + ε)``).
    """
    z = logits.double()
    y = labels.long().to(z.device).expand(z.shape[:-1]).unsqueeze(-1)  # (..., 1)
    z_y = z.gather(-1, y).squeeze(-1)  # (...)
    others = z.scatter(-1, y, float("-inf"))  # (..., C) with the true class masked out
    return z_y - torch.logsumexp(others, dim=-1)


# ----------------------------------------------------------------------------------------------------------
# query views


def _shift(dy: int, dx: int) -> Callable[[torch.Tensor], torch.Tensor]:
    def view(x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> translated by (dy, dx), zero fill
        h, w = x.shape[-2:]
        p = max(abs(dy), abs(dx))
        xp = F.pad(x, (p, p, p, p))
        return xp[..., p + dy: p + dy + h, p + dx: p + dx + w]

    return view


def resolve_views(names: Sequence[str] | str, img_size: int, augment: Sequence[str] = ()) -> list[str]:
    """Expand view names: ``"auto"`` = identity plus the views matching the training augmentations
    (``flip`` if the recipe flips, ``shift`` if it crops); ``shift`` = four translations ``shift:dy,dx``."""
    if isinstance(names, str):
        if names != "auto":
            raise DuckInputError(f"attack.views={names!r}; use 'auto' or a list from {list(VIEW_NAMES)}")
        names = (["identity"] + (["flip"] if "flip" in augment else [])
                 + (["shift"] if "crop" in augment else []))
    bad = [n for n in names if n not in VIEW_NAMES]
    if bad or not names:
        raise DuckInputError(f"unknown query view(s) {bad or names}; choose from {list(VIEW_NAMES)} or "
                             f"'auto'")
    out: list[str] = []
    p = max(1, img_size // 8)
    for n in names:
        out += [f"shift:{dy},{dx}" for dy, dx in ((p, 0), (-p, 0), (0, p), (0, -p))] if n == "shift" else [n]
    if len(set(out)) != len(out):
        raise DuckInputError(f"attack.views={list(names)} lists a view twice")
    return out


def view_fn(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if name == "identity":
        return lambda x: x
    if name == "flip":
        return lambda x: x.flip(-1)
    if name.startswith("shift:"):
        dy, dx = (int(v) for v in name.split(":", 1)[1].split(","))
        return _shift(dy, dx)
    raise DuckInputError(f"unknown query view {name!r}")


@torch.no_grad()
def view_logits(model: torch.nn.Module, dataset: torch.utils.data.Dataset, indices: np.ndarray | None,
                views: Sequence[str], *, device: torch.device | str = "cpu",
                batch_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor]:
    """Eval-mode logits of every view: ``(V, N, C)`` float32 on CPU, and the labels ``(N,)``.

    Eval mode matters: BatchNorm must use its running statistics (the reference code's train-mode
    inference is a known bug, ALGORITHMS.md §4)."""
    fns = [view_fn(v) for v in views]
    was_training = model.training
    model.eval()
    out, ys = [], []
    for x, y, _ in make_loader(dataset, batch_size, indices=indices):
        x = x.to(device, non_blocking=True)
        out.append(torch.stack([model(fn(x)).float() for fn in fns]).cpu())  # (V, B, C)
        ys.append(y)
    model.train(was_training)
    return torch.cat(out, dim=1), torch.cat(ys)


# ----------------------------------------------------------------------------------------------------------
# Gaussian fits and scores


@dataclass
class GaussianFit:
    """Per-example Gaussian parameters ``(Q, V)`` and how many shadows each was fitted on."""

    mu: np.ndarray
    sigma: np.ndarray
    n_shadow: int | np.ndarray


TRUNCATION_SEED = 0x11AA


def _selected(shadow_phi: np.ndarray, select: np.ndarray,
              truncate: bool) -> tuple[np.ndarray, int | np.ndarray]:
    """φ of the selected shadows per example: ``(m, Q, V)`` (truncated to the minimum count ``m``) or,
    without truncation, ``(E, Q, V)`` with NaN where not selected.

    Truncation keeps a uniformly random ``m``-subset of each example's selected shadows (fixed seed). The
    reference code keeps the first ``m`` in shadow order, which scores every test sample (OUT for all E
    shadows) against the same ``m`` shadows: a baseline shared by all non-members that biases the AUC when
    those shadows happen to be more or less confident than average. A forget sample's OUT set is a
    uniformly random ``E/2``-subset (keep matrix), so random subsets treat members and non-members alike."""
    counts = select.sum(0)  # (Q,)
    if counts.min() < 1:
        raise DuckInputError("some query examples have no shadow model in the required IN/OUT role")
    if truncate:
        m = int(counts.min())
        key = np.random.default_rng(TRUNCATION_SEED).uniform(size=select.shape)  # (E, Q)
        # (m, Q) random selected rows
        rows = np.argsort(np.where(select, key, 2.0), axis=0, kind="stable")[:m]
        return np.take_along_axis(shadow_phi, rows[..., None], axis=0), m
    return np.where(select[..., None], shadow_phi, np.nan), counts


def fit_gaussians(shadow_phi: np.ndarray, select: np.ndarray, *, truncate: bool = True,
                  fixed_variance: bool = False) -> GaussianFit:
    """μ = median, σ = population std (ddof 0) of the selected shadows' φ per example and view.

    ``shadow_phi (E, Q, V)``, ``select (E, Q)`` bool. Fixed variance: one σ for all, the root of the
    mean per-example variance (the reference code's ``np.std`` over everything would add the spread of
    the per-example means)."""
    vals, n = _selected(np.asarray(shadow_phi, dtype=np.float64), np.asarray(select, dtype=bool), truncate)
    mu = np.nanmedian(vals, axis=0)  # (Q, V)
    sigma = np.nanstd(vals, axis=0)  # (Q, V)
    if fixed_variance:
        sigma = np.full_like(sigma, np.sqrt(np.mean(sigma**2)))
    return GaussianFit(mu, sigma, n)


def _norm_logpdf(x: np.ndarray, mu: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    return -0.5 * ((x - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi)


EPS_SIGMA = 1e-30  # the reference code's guard against σ = 0


def offline_scores(target_phi: np.ndarray, out: GaussianFit, *, two_sided: bool = False) -> np.ndarray:
    """Offline LiRA (seeds/003 Eq. 8): one-sided ``−log(1 − Φ(z))`` or two-sided ``−log(2Φ(−|z|))`` with
    ``z = (φ_target − μ_out)/σ_out``; averaged over views. ``target_phi (Q, V)`` -> ``(Q,)``."""
    z = (np.asarray(target_phi, dtype=np.float64) - out.mu) / (out.sigma + EPS_SIGMA)  # (Q, V)
    per_view = -(np.log(2.0) + log_ndtr(-np.abs(z))) if two_sided else -log_ndtr(-z)
    return per_view.mean(axis=1)


def online_scores(target_phi: np.ndarray, inn: GaussianFit, out: GaussianFit) -> np.ndarray:
    """Online LiRA: ``log N(φ; μ_in, σ_in) − log N(φ; μ_out, σ_out)`` averaged over views -> ``(Q,)``."""
    phi = np.asarray(target_phi, dtype=np.float64)
    return (_norm_logpdf(phi, inn.mu, inn.sigma + EPS_SIGMA)
            - _norm_logpdf(phi, out.mu, out.sigma + EPS_SIGMA)).mean(axis=1)


def lira_scores(target_phi: np.ndarray, shadow_phi: np.ndarray, shadow_in: np.ndarray, *,
                variant: str = "offline", offline_test: str = "one_sided", fixed_variance: bool = False,
                truncate: bool = True) -> tuple[np.ndarray, dict[str, int]]:
    """Membership scores ``(Q,)`` of the target from its φ ``(Q, V)``, the shadows' φ ``(E, Q, V)`` and
    ``shadow_in (E, Q)`` (True where shadow e trained on query example q). Returns ``(scores, info)`` with
    the number of IN/OUT shadows each example was scored from (when truncated)."""
    if variant not in VARIANTS:
        raise DuckInputError(f"attack.variant={variant!r}; choose one of {list(VARIANTS)}")
    if offline_test not in OFFLINE_TESTS:
        raise DuckInputError(f"attack.offline_test={offline_test!r}; choose one of {list(OFFLINE_TESTS)}")
    target_phi, shadow_phi = np.asarray(target_phi), np.asarray(shadow_phi)
    shadow_in = np.asarray(shadow_in, dtype=bool)
    if (shadow_phi.ndim != 3 or target_phi.shape != shadow_phi.shape[1:]
            or shadow_in.shape != shadow_phi.shape[:2]):
        raise DuckInputError(f"shape mismatch: target φ {target_phi.shape}, shadow φ {shadow_phi.shape} "
                             f"(want (E, Q, V)), shadow_in {shadow_in.shape} (want (E, Q))")
    if (~shadow_in).sum(0).min() < 2:
        raise DuckInputError("every query example needs at least 2 OUT shadows to fit a Gaussian; "
                             "use more shadows (attack.n_shadow)")
    out = fit_gaussians(shadow_phi, ~shadow_in, truncate=truncate, fixed_variance=fixed_variance)
    info = {"n_out": int(np.min(out.n_shadow))}
    if variant == "offline":
        return offline_scores(target_phi, out, two_sided=offline_test == "two_sided"), info
    if shadow_in.sum(0).min() < 2:
        raise DuckInputError(
            "online LiRA needs at least 2 IN shadows for every query example, but some (the non-members: "
            "test "
            "samples) were never in a shadow's training data; set attack.shadow_pool=train+test (shadows "
            "train on random halves of train and test) or use attack.variant=offline")
    inn = fit_gaussians(shadow_phi, shadow_in, truncate=truncate, fixed_variance=fixed_variance)
    info["n_in"] = int(np.min(inn.n_shadow))
    return online_scores(target_phi, inn, out), info
