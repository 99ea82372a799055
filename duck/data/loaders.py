"""DataLoaders over (subsets of) indexed data sets, seeded and deterministic on CPU."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from torch.utils.data._utils.collate import default_collate


def collate_indexed(data: Any) -> Any:
    """Batched fetches (``__getitems__``) already return stacked tensors; lists of samples are collated."""
    if isinstance(data, tuple) and all(isinstance(t, torch.Tensor) for t in data):
        return data
    return default_collate(data)


def fetch(dataset: Dataset, ids: list[int] | torch.Tensor) -> Any:
    """The samples ``ids`` of ``dataset`` as one batch: its batched fetch (``__getitems__``) where it has
    one, else its items one by one (pass the result through :func:`collate_indexed`)."""
    if hasattr(dataset, "__getitems__"):
        return dataset.__getitems__(ids)
    return [dataset[i] for i in ids]


def subset(dataset: Dataset, indices: Sequence[int] | np.ndarray | None) -> Dataset:
    """``Subset`` keeping the base data set's stable sample indices (``None`` = everything)."""
    if indices is None:
        return dataset
    return Subset(dataset, np.asarray(indices, dtype=np.int64).tolist())


def make_loader(dataset: Dataset, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False, num_workers: int = 0, indices: Sequence[int] | np.ndarray | None = None,
                ) -> DataLoader:
    """A ``DataLoader`` yielding ``(x, y, idx)``; shuffling uses its own generator seeded with ``seed``."""
    ds = subset(dataset, indices)
    gen = torch.Generator().manual_seed(int(seed)) if shuffle else None
    return DataLoader(ds, batch_size=int(batch_size), shuffle=shuffle, generator=gen, drop_last=drop_last,
                      num_workers=num_workers, collate_fn=collate_indexed,
                      persistent_workers=num_workers > 0)


def cycle(loader: DataLoader) -> Iterator[Any]:
    """Endless iterator over a loader; each pass reshuffles (a fresh epoch of the loader's sampler)."""
    while True:
        yield from loader


def stack_dataset(dataset: Dataset, indices: Sequence[int] | np.ndarray | None = None,
                  batch_size: int = 1024) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All of ``dataset`` (or ``indices`` of it) as tensors ``(x, y, idx)`` — for small data sets."""
    xs, ys, ids = [], [], []
    for x, y, i in make_loader(dataset, batch_size, indices=indices):
        xs.append(x), ys.append(y), ids.append(torch.as_tensor(i))
    return torch.cat(xs), torch.cat(ys), torch.cat(ids)
