"""``index.csv``: what each sample index of a data set is, so that forget ids can be chosen and read by people.

One row per sample of a split, in index order, with the header ``index,source,label,class_name``:

- ``index``: the sample index every scenario, forget-id file, report and audit uses (0..N-1);
- ``source``: where the sample comes from. For data read from files (``imagefolder``, ``tinyimagenet``, user
  data sets listing their files, such as a torchvision ``ImageFolder``) the file's path, as the data set
  holds it (``data.root`` joined with the file's path under it). For data held in memory it is
  ``<dataset>:<split>:<position>``, the position being the sample's row in the original source, where the
  loader records it (``DatasetSplits.extra["source_index_<split>"]``), else its position in the split:

  - ``digits``: the row of ``sklearn.datasets.load_digits()`` (the stratified split draws rows from it);
  - ``fashion_mnist``: the image's position in the split's IDX file (``train-*`` or ``t10k-*``);
  - ``cifar10`` / ``cifar100``: the position in the split's batch files read in order (CIFAR-10 train:
    ``data_batch_1`` .. ``data_batch_5`` concatenated, 10,000 per file);
  - ``synthetic``: the position in the generated split (the data are generated, not read);
  - user data in memory: the position in the wrapped data set, or in the data set under a ``Subset``;
- ``label``: the integer class id; ``class_name``: its name (empty where the data set names no classes).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np

from duck.data.base import DatasetSplits, IndexedDataset
from duck.errors import DuckInputError
from duck.io import atomic_write_text

INDEX_HEADER = ("index", "source", "label", "class_name")
SPLITS = ("train", "test")


def split_dataset(data: DatasetSplits, split: str) -> IndexedDataset:
    """``data.train`` or ``data.test`` by name; a ``DuckInputError`` for another name or a missing test split."""
    if split not in SPLITS:
        raise DuckInputError(f"split={split!r} must be one of {', '.join(SPLITS)}")
    ds = getattr(data, split)
    if ds is None:
        raise DuckInputError(f"data set {data.name} has no {split} split; use split=train")
    return ds


def sample_sources(data: DatasetSplits, split: str = "train") -> list[str]:
    """The ``source`` column of ``index.csv`` (see the module docstring): one entry per sample index."""
    ds = split_dataset(data, split)
    files = getattr(ds, "files", None)
    if files is not None:
        return [os.fspath(f) for f in files]
    positions = data.extra.get(f"source_index_{split}")
    positions = np.arange(len(ds)) if positions is None else np.asarray(positions, dtype=np.int64)
    return [f"{data.name}:{split}:{p}" for p in positions.tolist()]


def index_csv(data: DatasetSplits, split: str = "train") -> str:
    """The text of ``index.csv`` for ``split`` (header ``index,source,label,class_name``)."""
    ds = split_dataset(data, split)
    labels = np.asarray(ds.labels, dtype=np.int64)
    names = list(data.class_names)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(INDEX_HEADER)
    for i, (source, label) in enumerate(zip(sample_sources(data, split), labels.tolist(), strict=True)):
        writer.writerow((i, source, label, names[label] if label < len(names) else ""))
    return out.getvalue()


def write_index(data: DatasetSplits, path: str | os.PathLike, split: str = "train") -> Path:
    """Write ``index.csv`` for ``split`` of ``data`` to ``path`` atomically; returns the path."""
    return atomic_write_text(path, index_csv(data, split))
