"""Batched training of K models of one architecture: one forward/backward for all of them
(ALGORITHMS.md §4 "Batched shadow training").

The K models' parameters are stacked each step (``torch.stack``, differentiable, so gradients reach each
model's own leaf tensors) and one ``torch.func.vmap`` over ``functional_call`` runs all K forward passes.
Each model keeps

- its own data: the loader :func:`duck.training.train_classifier` would build for it (same indices,
  batch size, ``drop_last`` rule and shuffling seed), iterated in lock step, epoch by epoch;
- its own BatchNorm running statistics: buffers are stacked ``(K, ...)``; under ``vmap`` batch norm in
  train mode updates the stacked running mean/var/count of each model in place, exactly as it would
  for one model (``num_batches_tracked`` too);
- its own optimiser state: one optimiser from the recipe over all K models' parameter tensors. Built-in
  optimisers (SGD, Adam, AdamW, RMSprop...) update each parameter tensor independently, so this equals
  K separate optimisers; a model without a batch at this step (its subset is smaller, the epoch ended
  for it) has ``grad = None`` and is skipped, its step count included;
- its own augmentation randomness: the global RNG state is swapped per model (seeded like
  ``train_classifier``'s ``seed_everything``), so augmented batches are the same as when trained alone.

So K models trained here equal K models trained one after another by ``train_classifier`` with the same
seeds, up to float rounding (tests/test_attacks_shadow.py). Dropout masks under ``vmap`` are drawn
differently (same distribution). Mixed precision is not supported here (use sequential mode).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

from duck.data.augment import apply_augment, check_augment
from duck.data.loaders import make_loader
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.training import Recipe, make_optimizer, make_scheduler

# optimisers that couple parameter tensors (one update depends on several tensors) cannot be shared
COUPLED_OPTIMIZERS = ("LBFGS",)


class _PerModelRNG:
    """Global-RNG state per model: model k's random ops see the stream ``manual_seed(seed_k)`` starts."""

    def __init__(self, seeds: Sequence[int], device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.states: list[tuple[torch.Tensor, torch.Tensor | None]] = []
        saved = self._get()
        for s in seeds:
            torch.manual_seed(int(s))
            self.states.append(self._get())
        self._set(saved)

    def _get(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        return torch.get_rng_state(), torch.cuda.get_rng_state() if self.cuda else None

    def _set(self, state: tuple[torch.Tensor, torch.Tensor | None]) -> None:
        torch.set_rng_state(state[0])
        if self.cuda and state[1] is not None:
            torch.cuda.set_rng_state(state[1])

    def run(self, k: int, fn: Any, *args: Any) -> Any:
        saved = self._get()
        self._set(self.states[k])
        try:
            return fn(*args)
        finally:
            self.states[k] = self._get()
            self._set(saved)


def check_batchable(recipe: Recipe, precision: Any = None) -> None:
    """Raise if the recipe cannot be trained batched (coupled optimiser, mixed precision)."""
    spec = recipe.optimizer
    name = str(getattr(spec, "func", None) or (spec.get("_target_") if isinstance(spec, dict) else spec))
    if any(c in name for c in COUPLED_OPTIMIZERS):
        raise DuckInputError(f"optimizer {name} couples parameter tensors and cannot be trained batched; "
                             "set attack.mode=sequential")
    if precision not in (None, 32, "32", "32-true"):
        raise DuckInputError(f"trainer.precision={precision} is not supported by batched shadow training "
                             "(float32 only); set attack.mode=sequential")


def train_batched(models: Sequence[Classifier], dataset: torch.utils.data.Dataset, recipe: Recipe,
                  index_sets: Sequence[np.ndarray], seeds: Sequence[int], *, augment: Sequence[str] = (),
                  device: torch.device | str = "cpu", progress: bool = False) -> list[Classifier]:
    """Train ``models[k]`` on ``dataset[index_sets[k]]`` with ``recipe`` and seed ``seeds[k]``, all at once.

    ``models`` must be freshly built, identical architectures (their initial weights are used as given).
    Returns the trained models (moved to ``device``, left in train mode like ``train_classifier``)."""
    if not (len(models) == len(index_sets) == len(seeds)) or not models:
        raise DuckInputError(f"need one index set and one seed per model (got {len(models)} models, "
                             f"{len(index_sets)} index sets, {len(seeds)} seeds)")
    augment = check_augment(list(augment))
    device = torch.device(device)
    k_models = len(models)
    for m in models:
        m.to(device).train()
    base = copy.deepcopy(models[0]).to("meta")  # the architecture; weights come from the stacked tensors
    param_names = [n for n, _ in models[0].named_parameters()]
    buffer_names = [n for n, _ in models[0].named_buffers()]
    leaves = [dict(m.named_parameters()) for m in models]  # each model's own leaf tensors
    buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in models]) for n in buffer_names}  # (K, ...)

    optimizer = make_optimizer(recipe.optimizer, [p for m in models for p in m.parameters()])
    scheduler = make_scheduler(recipe.scheduler, optimizer)
    loaders = []
    for idx, seed in zip(index_sets, seeds, strict=True):
        n = len(idx)
        loaders.append(make_loader(dataset, recipe.batch_size, shuffle=True, seed=int(seed), indices=idx,
                                   drop_last=n > recipe.batch_size))
    n_batches = [len(dl) for dl in loaders]
    rng = _PerModelRNG(seeds, device) if augment else None

    def forward(params: dict[str, torch.Tensor], bufs: dict[str, torch.Tensor],
                x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (params, bufs), (x,))

    batched_forward = vmap(forward, randomness="different")
    from tqdm.auto import tqdm

    for _ in tqdm(range(recipe.epochs), desc=f"batched training of {k_models} models", disable=not progress,
                  leave=False):
        iters = [iter(dl) for dl in loaders]
        for step in range(max(n_batches)):
            # exactly len(loader) batches per epoch and no further next(): like Lightning's loop, which
            # never exhausts the sampler (exhausting it would draw one more permutation from its generator)
            batches = [next(iters[k]) if step < n_batches[k] else None for k in range(k_models)]
            active = [k for k, b in enumerate(batches) if b is not None]
            # models whose batches have the same size share one vmap call (normally all of them)
            groups: dict[int, list[int]] = {}
            for k in active:
                groups.setdefault(len(batches[k][1]), []).append(k)
            losses = []
            for group in groups.values():
                xs = []
                for k in group:
                    x = batches[k][0].to(device, non_blocking=True)
                    xs.append(rng.run(k, apply_augment, x, augment) if rng is not None else x)
                x = torch.stack(xs)  # (G, B, C, H, W)
                y = torch.stack([batches[k][1] for k in group]).to(device)  # (G, B)
                params = {n: torch.stack([leaves[k][n] for k in group]) for n in param_names}
                gidx = torch.tensor(group, device=device)
                bufs = {n: b.index_select(0, gidx) for n, b in buffers.items()}  # (G, ...) updated in place
                logits = batched_forward(params, bufs, x)  # (G, B, num_classes)
                for n, b in bufs.items():
                    buffers[n].index_copy_(0, gidx, b)
                ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none",
                                     label_smoothing=recipe.label_smoothing)  # (G·B,)
                losses.append(ce.view(len(group), -1).mean(1).sum())  # sum of the per-model mean losses
            optimizer.zero_grad(set_to_none=True)  # inactive models keep grad None: the optimiser skips them
            torch.stack(losses).sum().backward()
            optimizer.step()
        if scheduler is not None:
            scheduler.step()  # epoch interval, as ClassifierModule configures it
    with torch.no_grad():
        for k, m in enumerate(models):
            for n, b in m.named_buffers():
                b.copy_(buffers[n][k])
    return list(models)


def calibrate(model_factory: Any, dataset: torch.utils.data.Dataset, recipe: Recipe, n_models: int, *,
              device: torch.device | str = "cpu", steps: int = 4, warmup: int = 2) -> dict[str, float]:
    """Seconds per model-step of batched training (``n_models`` at once) and of one-model-at-a-time steps,
    measured on one real batch with throw-away models (``attack.mode=auto`` picks the faster one).

    The batched figure includes its set-up (stacking, loaders) and the sequential one counts bare steps
    only (no Lightning overhead), so the choice errs towards sequential: batching is chosen only where it
    wins on the device at hand."""
    import time

    device = torch.device(device)
    batch = min(len(dataset), recipe.batch_size)
    x, y, _ = next(iter(make_loader(dataset, batch, indices=np.arange(batch))))
    sgd = {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.0}  # lr 0: the cost of a step only
    one_epoch = Recipe(epochs=1, batch_size=batch, optimizer=sgd)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def batched_seconds(n_steps: int) -> float:
        models = [model_factory() for _ in range(n_models)]
        sync()
        t0 = time.perf_counter()
        train_batched(models, _Repeat(x, y, n_steps), one_epoch, [np.arange(batch * n_steps)] * n_models,
                      list(range(n_models)), device=device)
        sync()
        return time.perf_counter() - t0

    def sequential_seconds(n_steps: int) -> float:
        model = model_factory().to(device).train()
        opt = make_optimizer(sgd, model.parameters())
        xd, yd = x.to(device), y.to(device)
        sync()
        t0 = time.perf_counter()
        for _ in range(n_steps):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(xd), yd).backward()
            opt.step()
        sync()
        return time.perf_counter() - t0

    batched_seconds(warmup)  # first-call costs (allocator, kernels) out of the way
    batched = batched_seconds(steps) / (steps * n_models)  # includes stacking/loader set-up: conservative
    sequential_seconds(warmup)
    sequential = sequential_seconds(steps) / steps
    return {"batched_s_per_model_step": batched, "sequential_s_per_model_step": sequential,
            "speedup": sequential / batched, "n_models": n_models}


class _Repeat(torch.utils.data.Dataset):
    """``times`` copies of one batch, as an indexed data set (calibration only)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, times: int) -> None:
        self.x, self.y, self.n = x, y, len(y)
        self.total = self.n * times

    def __len__(self) -> int:
        return self.total

    def __getitems__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.as_tensor(idx) % self.n
        return self.x[ids], self.y[ids], torch.as_tensor(idx)
