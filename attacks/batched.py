"""Batched training of K models of one architecture: one forward/backward for all of them
(ALGORITHMS.md §4 "Batched shadow training").

The K models' parameters live stacked, one ``(G, ...)`` leaf tensor per parameter name and *cohort*
(models with the same number and size of batches per epoch: their subsets have about the same size), and
one ``torch.func.vmap`` over ``functional_call`` runs the forward passes of all models that have a batch at
this step. Each model keeps

- its own data: the loader :func:`duck.training.train_classifier` would build for it (same indices,
  batch size, ``drop_last`` rule and shuffling seed), iterated in lock step, epoch by epoch;
- its own BatchNorm running statistics: buffers are stacked ``(K, ...)``; under ``vmap`` batch norm in
  train mode updates the stacked running mean/var/count of each model in place, exactly as it would
  for one model (``num_batches_tracked`` too);
- its own optimiser state: one optimiser from the recipe per cohort, over the cohort's stacked tensors.
  The optimisers allowed here (SGD, Adam, AdamW, RMSprop, ...: :func:`check_batchable`) update every
  entry of a tensor from that entry's gradient and state alone, with per-tensor scalars (the step count)
  shared; a cohort's models take their steps together, so their step counts agree, and a stacked tensor
  is updated exactly as its K slices would be by K optimisers. A cohort without a batch at this step (its
  epoch has ended) gets no gradient and its optimiser does not step;
- its own augmentation randomness: the global RNG state is swapped per model (seeded like
  ``train_classifier``'s ``seed_everything``), so augmented batches are the same as when trained alone.

So K models trained here equal K models trained one after another by ``train_classifier`` with the same
seeds, up to float rounding (tests/test_attacks_shadow.py). Dropout masks under ``vmap`` are drawn
differently (same distribution). Mixed precision is not supported here (use sequential mode).
"""

from __future__ import annotations

import copy
import functools
import itertools
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from duck.data.augment import apply_augment, check_augment
from duck.data.loaders import collate_indexed, fetch, make_loader
from duck.errors import DuckInputError
from duck.models import Classifier
from duck.training import Recipe, make_optimizer, make_scheduler, training_trainer_settings

# optimisers whose update of an entry depends on other entries (several tensors: LBFGS; the tensor's shape:
# Adafactor's factored second moment; sparse gradients: SparseAdam) cannot update stacked models
COUPLED_OPTIMIZERS = ("LBFGS", "Adafactor", "SparseAdam")



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


class _MatmulConv2d(nn.Conv2d):
    """``nn.Conv2d`` whose convolution is an im2col product (shifted strided views of the padded input,
    stacked, then one matrix product), for the architecture copy that batched training runs under ``vmap``.

    ``vmap`` turns a convolution with per-model weights into one grouped convolution (groups = K models),
    which cuDNN runs group by group for small layers: hundreds of kernel launches and host syncs per step
    (measured on an H100: 1.3 ms of host time per grouped forward convolution of the digits CNN). Here the
    K models' products are one batched matrix product. ``F.unfold`` is not used: its CUDA kernel loops over
    the samples (one launch per image; measured 1,856 launches per step for K = 64, B = 64). Same function
    as the convolution (exact in float64; float32 products round differently); it stores the stacked
    input, ``K B C k_h k_w L`` values per layer, so layers above ``max_elements`` keep the grouped
    convolution. Off by default: its GPU speed is not measured yet (``scripts/profile_batched.py``)."""

    max_elements: int = 1 << 26
    n_models: int = 1

    def _conv_forward(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        n, c, h, w = x.shape
        (kh, kw), (ph, pw), (sh, sw), (dh, dw) = self.kernel_size, self.padding, self.stride, self.dilation
        h_out = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
        w_out = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
        if self.n_models * n * c * kh * kw * h_out * w_out > self.max_elements:
            return super()._conv_forward(x, weight, bias)
        xp = F.pad(x, (pw, pw, ph, ph))
        cols = torch.stack([xp[:, :, i * dh: i * dh + sh * (h_out - 1) + 1: sh,
                               j * dw: j * dw + sw * (w_out - 1) + 1: sw]
                            for i in range(kh) for j in range(kw)], 2)  # (N, C, kh kw, h_out, w_out)
        out = (weight.reshape(weight.shape[0], -1) @ cols.reshape(n, c * kh * kw, -1)).view(n, -1, h_out, w_out)
        return out if bias is None else out + bias.view(1, -1, 1, 1)


def _use_matmul_convs(model: nn.Module, n_models: int, max_elements: int) -> None:
    """Switch the plain convolutions of ``model`` (a meta-device copy) to :class:`_MatmulConv2d`."""
    for mod in model.modules():
        if (type(mod) is nn.Conv2d and mod.groups == 1 and mod.padding_mode == "zeros"
                and not isinstance(mod.padding, str)):
            mod.__class__ = _MatmulConv2d  # same parameters and attributes, another forward
            mod.n_models, mod.max_elements = n_models, max_elements


def _matmul_budget(device: torch.device) -> int:
    """Most unfolded values one layer may hold: 2^28 (1 GiB of float32), on a GPU at most 1/16 of its free
    memory."""
    if device.type != "cuda":
        return 1 << 28
    return min(1 << 28, torch.cuda.mem_get_info(device)[0] // 64)


class _Positions(torch.utils.data.Dataset):
    """Stand-in for a data set of ``n`` samples whose batched fetch returns the sample indices only: a
    :func:`~duck.data.loaders.make_loader` over it draws exactly the batches (same generator draws) that one
    over the real data set would, without touching the data."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitems__(self, idx: list[int]) -> tuple[torch.Tensor]:
        return (torch.as_tensor(idx, dtype=torch.long),)


def device_dataset(dataset: torch.utils.data.Dataset, device: torch.device,
                   max_fraction: float = 0.25) -> torch.utils.data.Dataset | None:
    """``dataset`` copied to ``device`` when it holds its tensors in memory (``to``, and ``nbytes()`` not
    None, e.g. :class:`~duck.data.base.TensorImageDataset`) and, on a GPU, takes at most ``max_fraction`` of
    the free memory; else None (batches are then gathered on the CPU and copied)."""
    size = dataset.nbytes() if hasattr(dataset, "to") and hasattr(dataset, "nbytes") else None
    if size is None:
        return None
    if device.type == "cuda" and size > max_fraction * torch.cuda.mem_get_info(device)[0]:
        return None
    return dataset.to(device)


class _BatchSource:
    """Each model's batches, epoch after epoch, gathered for all models at once.

    Model ``k`` sees the batches a ``make_loader(dataset, batch_size, shuffle=True, seed=seeds[k],
    indices=index_sets[k], drop_last=len > batch_size)`` yields for exactly ``len(loader)`` batches per epoch,
    i.e. what :func:`duck.training.train_classifier` feeds it under Lightning. Those draws are made directly
    (:meth:`_draw`: the loader iterator's base seed, then the sampler's permutation: 2 ops per model and
    epoch instead of a loader ``next()`` per batch, ~2.5 ms of host time per step for 64 models); the
    constructor checks them against real loaders over index-only data (:class:`_Positions`) for two epochs
    and uses those loaders instead if they differ (another torch version). An epoch's indices go to the
    device in one copy; each step gathers the images of all models of a group in one indexing op from the
    data set held on the device (:func:`device_dataset`)."""

    def __init__(self, dataset: torch.utils.data.Dataset, index_sets: Sequence[np.ndarray],
                 seeds: Sequence[int], batch_size: int, device: torch.device) -> None:
        self.subsets = [torch.as_tensor(np.asarray(i, dtype=np.int64)) for i in index_sets]
        self.seeds, self.batch_size, self.n_data = [int(s) for s in seeds], int(batch_size), len(dataset)
        self.n_batches = [batch_shape(len(i), batch_size)[0] for i in index_sets]
        check = self._make_loaders()
        gens = [torch.Generator().manual_seed(seed) for seed in self.seeds]
        self.direct = all(torch.equal(self._from_loader(check[k], self.n_batches[k]), self._draw(k, gens[k]))
                          for _ in range(2) for k in range(len(self.subsets)))
        self.generators = [torch.Generator().manual_seed(seed) for seed in self.seeds]
        self.dataset, self.device = dataset, device
        self.on_device = device_dataset(dataset, device)

    def _make_loaders(self) -> list[torch.utils.data.DataLoader]:
        """The models' own loaders (``train_classifier``'s), over index-only data."""
        return [make_loader(_Positions(self.n_data), self.batch_size, shuffle=True, seed=seed,
                            indices=idx.numpy(), drop_last=len(idx) > self.batch_size)
                for idx, seed in zip(self.subsets, self.seeds, strict=True)]

    @functools.cached_property
    def loaders(self) -> list[torch.utils.data.DataLoader]:
        """Used instead of :meth:`_draw` when the check in the constructor failed."""
        return self._make_loaders()

    @staticmethod
    def _from_loader(loader: torch.utils.data.DataLoader, n_batches: int) -> torch.Tensor:
        """One epoch of ``loader`` as a (batches, batch size) tensor of sample indices; exactly
        ``n_batches`` ``next()`` calls, like Lightning's loop (a further one would exhaust the sampler and
        draw another permutation)."""
        it = iter(loader)
        return torch.stack([next(it)[0] for _ in range(n_batches)]) if n_batches else torch.empty(0, 0, dtype=torch.long)

    def _draw(self, k: int, gen: torch.Generator) -> torch.Tensor:
        """The draws one epoch of model ``k``'s loader makes from its generator, and its batches."""
        n = len(self.subsets[k])
        nb, width = batch_shape(n, self.batch_size)
        torch.empty((), dtype=torch.int64, device="cpu").random_(generator=gen)  # the loader iterator's base seed
        perm = torch.randperm(n, generator=gen, device="cpu")  # RandomSampler
        if 0 < n < self.batch_size:  # a partial last batch is closed by exhausting the sampler: one more draw
            torch.randperm(n, generator=gen, device="cpu")
        return self.subsets[k][perm[: nb * width]].view(nb, width)

    def _gather(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images and labels of the (G, B) sample indices ``ids``, on the device: (G, B, ...), (G, B)."""
        flat = ids.flatten()
        if self.on_device is not None:
            x, y, _ = self.on_device.__getitems__(flat)
        else:
            x, y, _ = collate_indexed(fetch(self.dataset, flat.cpu().tolist()))
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        return x.view(*ids.shape, *x.shape[1:]), y.view(ids.shape)

    def epoch(self) -> Iterator[list[tuple[list[int], torch.Tensor, torch.Tensor]]]:
        """Yields, per step, ``[(models, x (G, B, ...), y (G, B)), ...]``: models grouped by batch size."""
        if self.direct:
            plans = [self._draw(k, g) for k, g in enumerate(self.generators)]
        else:
            plans = [self._from_loader(dl, nb) for dl, nb in zip(self.loaders, self.n_batches, strict=True)]
        steps = []
        for step in range(max(self.n_batches)):
            groups: dict[int, list[int]] = {}
            for k, plan in enumerate(plans):
                if step < len(plan):
                    groups.setdefault(plan.shape[1], []).append(k)
            steps.append([(ks, torch.stack([plans[k][step] for k in ks])) for ks in groups.values()])
        flat = torch.cat([ids.flatten() for step in steps for _, ids in step]).to(self.device, non_blocking=True)
        views = iter(flat.split([ids.numel() for step in steps for _, ids in step]))
        for step in steps:
            yield [(group, *self._gather(next(views).view(ids.shape))) for group, ids in step]


def check_batchable(recipe: Recipe, trainer_cfg: Mapping[str, Any] | None = None) -> None:
    """Raise if the recipe cannot be trained batched: a coupled optimiser, mixed precision, or any other
    ``trainer.*`` setting that changes training (:func:`training_trainer_settings`), which only Lightning's
    sequential training applies."""
    spec = recipe.optimizer
    name = str(getattr(spec, "func", None) or (spec.get("_target_") if isinstance(spec, dict) else spec))
    if any(c in name for c in COUPLED_OPTIMIZERS):
        raise DuckInputError(f"optimizer {name} couples parameter entries and cannot be trained batched; "
                             "set attack.mode=sequential")
    settings = training_trainer_settings(trainer_cfg)
    if "precision" in settings:
        raise DuckInputError(f"trainer.precision={settings['precision']} is not supported by batched shadow "
                             "training (float32 only); set attack.mode=sequential")
    if settings:
        key = sorted(settings)[0]
        raise DuckInputError(f"trainer.{key}={settings[key]!r} changes training and batched shadow training "
                             "does not apply it; set attack.mode=sequential (or auto)")


def train_batched(models: Sequence[Classifier], dataset: torch.utils.data.Dataset, recipe: Recipe,
                  index_sets: Sequence[np.ndarray], seeds: Sequence[int], *, augment: Sequence[str] = (),
                  device: torch.device | str = "cpu", progress: bool = False,
                  matmul_convs: bool = False) -> list[Classifier]:
    """Train ``models[k]`` on ``dataset[index_sets[k]]`` with ``recipe`` and seed ``seeds[k]``, all at once.

    ``models`` must be freshly built, identical architectures (their initial weights are used as given).
    ``matmul_convs``: run convolutions as im2col products (:class:`_MatmulConv2d`) instead of the grouped
    convolution ``vmap`` makes (default off).
    Returns the trained models (moved to ``device``, left in train mode like ``train_classifier``)."""
    if not (len(models) == len(index_sets) == len(seeds)) or not models:
        raise DuckInputError(f"need one index set and one seed per model (got {len(models)} models, "
                             f"{len(index_sets)} index sets, {len(seeds)} seeds)")
    empty = [k for k, idx in enumerate(index_sets) if len(idx) == 0]
    if empty:
        raise DuckInputError(f"the index sets of models {empty[:5]} are empty; every model needs training rows")
    augment = check_augment(list(augment))
    device = torch.device(device)
    k_models = len(models)
    # cohorts: same (batches per epoch, batch length), i.e. the same steps; ordered so that the models with a
    # batch at any step form one contiguous range per batch length (by length, then most batches first)
    shapes = [batch_shape(len(i), recipe.batch_size) for i in index_sets]
    order = sorted(range(k_models), key=lambda k: (shapes[k][1], -shapes[k][0]))
    cohorts: list[tuple[int, int, int]] = []  # (start, end, batches per epoch) in sorted positions
    for (nb, _), members in itertools.groupby(order, key=lambda k: shapes[k]):
        start = cohorts[-1][1] if cohorts else 0
        cohorts.append((start, start + len(list(members)), nb))
    sorted_models = [models[k].to(device).train() for k in order]
    base = copy.deepcopy(models[0]).to("meta")  # the architecture; weights come from the stacked tensors
    if matmul_convs:
        _use_matmul_convs(base, k_models, _matmul_budget(device))
    with torch.no_grad():
        stacked = [{n: torch.stack([dict(m.named_parameters())[n] for m in sorted_models[a:b]]).requires_grad_()
                    for n, _ in models[0].named_parameters()} for a, b, _ in cohorts]
        buffers = {n: torch.stack([dict(m.named_buffers())[n] for m in sorted_models])
                   for n, _ in models[0].named_buffers()}  # (K, ...)
    optimizers = [make_optimizer(recipe.optimizer, list(p.values())) for p in stacked]
    schedulers = [make_scheduler(recipe.scheduler, opt) for opt in optimizers]
    source = _BatchSource(dataset, [index_sets[k] for k in order], [seeds[k] for k in order],
                          recipe.batch_size, device)
    rng = _PerModelRNG([seeds[k] for k in order], device) if augment else None

    def forward(params: dict[str, torch.Tensor], bufs: dict[str, torch.Tensor],
                x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (params, bufs), (x,))

    batched_forward = vmap(forward, randomness="different")
    from tqdm.auto import tqdm

    for _ in tqdm(range(recipe.epochs), desc=f"batched training of {k_models} models", disable=not progress,
                  leave=False):
        for step, step_groups in enumerate(source.epoch()):
            losses = []
            for group, x, y in step_groups:  # models with the same batch size (normally all active ones)
                a, b = group[0], group[-1] + 1
                assert group == list(range(a, b)), "active models must be contiguous (cohort order)"
                if rng is not None:
                    x = torch.stack([rng.run(k, apply_augment, xk, augment) for k, xk in zip(group, x, strict=True)])
                parts = [c for c, (ca, cb, _) in enumerate(cohorts) if a <= ca and cb <= b]
                params = {n: stacked[parts[0]][n] if len(parts) == 1 else torch.cat([stacked[c][n] for c in parts])
                          for n in stacked[0]}
                bufs = {n: t[a:b] for n, t in buffers.items()}  # views: batch norm updates them in place
                logits = batched_forward(params, bufs, x)  # (G, B, num_classes)
                ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none",
                                     label_smoothing=recipe.label_smoothing)  # (G·B,)
                losses.append(ce.view(b - a, -1).mean(1).sum())  # sum of the per-model mean losses
            for opt in optimizers:
                opt.zero_grad(set_to_none=True)
            torch.stack(losses).sum().backward()
            for opt, (_, _, nb) in zip(optimizers, cohorts, strict=True):
                if step < nb:  # a cohort whose epoch has ended takes no step (no gradient either)
                    opt.step()
        for sched in schedulers:
            if sched is not None:
                sched.step()  # epoch interval, as ClassifierModule configures it
    with torch.no_grad():
        for (a, b, _), params in zip(cohorts, stacked, strict=True):
            for i, m in enumerate(sorted_models[a:b]):
                for n, p in m.named_parameters():
                    p.copy_(params[n][i])
        for pos, m in enumerate(sorted_models):
            for n, t in m.named_buffers():
                t.copy_(buffers[n][pos])
    return list(models)


def batch_shape(n: int, batch_size: int) -> tuple[int, int]:
    """(batches per epoch, batch length) of a loader over ``n`` samples with ``train_classifier``'s rule
    ``drop_last = n > batch_size`` (a subset smaller than a batch is one short batch)."""
    return (n // batch_size, batch_size) if n > batch_size else (int(n > 0), n)


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
