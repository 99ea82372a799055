"""Dataset containers shared by every loader: indexed samples ``(x, y, idx)`` and train/test splits.

Every dataset yields ``(image, label, index)`` where ``index`` is the sample's stable position in its
split (0..N-1 in the order the loader defines). Scenarios, forget ids, LiRA keep matrices and reports
all refer to samples by this index.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from duck.errors import DuckInputError
from duck.schema import Check


def check_path_text(value: Any, name: str) -> str | None:
    """A folder option such as ``data.root``: text (or ``None`` where the option may be unset), else a
    ``DuckInputError`` naming the value (``data.root=123`` reaches here as an int: quote it)."""
    if value is None or isinstance(value, str):
        return value
    raise DuckInputError(f"{name}={value!r} must be a folder path (text); quote it if it looks like a number: "
                         f"{name}=\"'{value}'\"")


#: a ``data.root`` option's rule (:mod:`duck.schema`)
ROOT = Check(check_path_text, "a folder path (text), or null")


class IndexedDataset(Dataset):
    """Base class: ``__getitem__(i) -> (x (C,H,W) float, y int64 scalar, i)``; ``labels`` is an int64 array."""

    labels: np.ndarray

    def __len__(self) -> int:
        return len(self.labels)


class TensorImageDataset(IndexedDataset):
    """In-memory images ``(N, C, H, W)`` (uint8 or float) normalised on the fly with ``mean``/``std`` per channel.

    Supports batched fetching (``__getitems__``) so a ``DataLoader`` over it costs one tensor gather per batch;
    use :func:`duck.data.loaders.make_loader`, which pairs it with the matching collate function.
    """

    def __init__(self, images: torch.Tensor, labels: np.ndarray | torch.Tensor,
                 mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        if images.ndim != 4:
            raise ValueError(f"images must be (N, C, H, W), got shape {tuple(images.shape)}")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(self.labels)} labels")
        self._labels_t = torch.from_numpy(self.labels)
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1)
        self._scale = 255.0 if images.dtype == torch.uint8 else 1.0

    def _normalise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.float() / self._scale - self.mean) / self.std

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self._normalise(self.images[i : i + 1])[0], self._labels_t[i], int(i)

    def __getitems__(self, idx: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        ids = torch.as_tensor(idx, dtype=torch.long)
        return self._normalise(self.images[ids]), self._labels_t[ids], ids

    def to(self, device: torch.device | str) -> TensorImageDataset:
        """The same data set with its images, labels and normalisation on ``device`` (images keep their
        dtype, so uint8 data costs a quarter of float). ``__getitems__`` then takes device index tensors and
        gathers batches there; a copy shares nothing mutable with ``self``."""
        out = copy.copy(self)
        out.images, out._labels_t = self.images.to(device), self._labels_t.to(device)
        out.mean, out.std = self.mean.to(device), self.std.to(device)
        return out

    def nbytes(self) -> int:
        """Bytes of the stored images and labels (what :meth:`to` copies)."""
        return sum(t.numel() * t.element_size() for t in (self.images, self._labels_t))

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """All samples at once: ``(x (N,C,H,W) normalised float, y (N,))``."""
        return self._normalise(self.images), self._labels_t.clone()


@dataclass
class DatasetSplits:
    """A data set as the rest of the framework sees it. ``test`` is ``None`` for user data without a held-out
    split (:func:`duck.data.user.as_splits`): then only training-set accuracies exist."""

    name: str
    train: IndexedDataset
    test: IndexedDataset | None
    num_classes: int
    in_chans: int
    img_size: int
    class_names: list[str] = field(default_factory=list)
    # batched train-time augmentations applied on device (see duck.data.augment); e.g. ["crop", "flip"]
    augment: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        test = f"{len(self.test)} test" if self.test is not None else "no test split"
        return (f"{self.name}: {len(self.train)} train / {test}, {self.num_classes} classes, "
                f"{self.in_chans}x{self.img_size}x{self.img_size}")

    def fingerprint(self) -> str:
        """sha256 identifying the data's content, for cache keys (trained originals and oracles, shadow
        banks): the labels of both splits and, for images held in memory, their bytes; for images read from
        files (``files``), each file's path, size, modification time and inode (a ``stat``, not a read: a
        replaced, edited or relabelled file, or folders swapped by renaming, give another fingerprint); anything
        else by its labels and length only. A data set with a ``content_digest()`` method (user data,
        :class:`duck.data.user.UserDataset`: its tensors, its transforms) adds that digest. A missing test split
        (``None``) hashes as such."""
        import hashlib
        import os

        h = hashlib.sha256()
        for ds in (self.train, self.test):
            if ds is None:
                h.update(b"no test split\n")
                continue
            h.update(np.ascontiguousarray(np.asarray(ds.labels, dtype=np.int64)).tobytes())
            images = getattr(ds, "images", None)
            files = getattr(ds, "files", None)
            if isinstance(images, torch.Tensor):
                h.update(images.contiguous().cpu().numpy().tobytes())
            elif files is not None:
                for f in files:
                    st = os.stat(f)
                    h.update(f"{os.fspath(f)}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}\n".encode())
            else:
                h.update(str(len(ds)).encode())
            if hasattr(ds, "content_digest"):
                h.update(ds.content_digest().encode())
        return h.hexdigest()


class ReindexedDataset(IndexedDataset):
    """The samples ``ids`` of ``base`` as a data set of their own, indexed ``0 .. len(ids) − 1`` (a shadow model's
    training set, unlearned as if it were the whole training split); ``ids[i]`` is sample i's index in ``base``."""

    def __init__(self, base: IndexedDataset, ids: np.ndarray) -> None:
        self.base, self.ids = base, np.asarray(ids, dtype=np.int64)
        self.labels = np.asarray(base.labels)[self.ids]
        self._ids_t = torch.from_numpy(self.ids)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y, _ = self.base[int(self.ids[i])]
        return x, y, int(i)

    def __getitems__(self, idx: list[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        from duck.data.loaders import collate_indexed, fetch

        pos = torch.as_tensor(idx, dtype=torch.long)
        x, y, _ = collate_indexed(fetch(self.base, self._ids_t[pos].tolist()))
        return x, y, pos


def subset_splits(data: DatasetSplits, n_train: int | None, n_test: int | None, seed: int) -> DatasetSplits:
    """A fixed random subset of the training (and test) images, re-indexed 0..n-1, with the full set's
    normalisation constants (``data.subset``: quick experiments and audits on a part of a large data set). Only
    for images held in memory (:class:`TensorImageDataset`); ``None`` or a size at least the split's keeps it."""
    import dataclasses

    rng = np.random.default_rng(seed)

    def cut(ds: IndexedDataset | None, n: int | None, split: str) -> IndexedDataset | None:
        if ds is None or n is None or n >= len(ds):
            return ds
        if not isinstance(ds, TensorImageDataset):
            raise DuckInputError(f"data.subset.n_{split}={n}: {data.name}'s images are read from files, not held in "
                                 "memory; subsets work for digits, fashion_mnist, cifar10/100 (or build a smaller "
                                 "image folder)")
        idx = np.sort(rng.choice(len(ds), size=int(n), replace=False))
        mean, std = tuple(ds.mean.flatten().tolist()), tuple(ds.std.flatten().tolist())
        return TensorImageDataset(ds.images[torch.from_numpy(idx)], ds.labels[idx], mean, std)

    return dataclasses.replace(data, train=cut(data.train, n_train, "train"), test=cut(data.test, n_test, "test"))

