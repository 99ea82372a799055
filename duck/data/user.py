"""User data sets: any map-style ``Dataset`` yielding ``(x, y)`` as the framework's indexed data.

A user holds their own data: a torchvision ``ImageFolder`` (or any ``DatasetFolder``) with their own
transforms and normalisation, a ``TensorDataset``, a ``Subset`` of one, or any ``Dataset`` whose items are
``(x, y)`` or ``(x, y, *extra)`` (extras are ignored). :class:`UserDataset` wraps one as an
:class:`~duck.data.base.IndexedDataset` (the index is the sample's position) and :func:`as_splits` turns a
train (and optional test) data set into the :class:`~duck.data.base.DatasetSplits` every stage takes.

The data set's own transforms are applied as they are: no resizing, no normalisation and no train-time
augmentation is added (``augment=[]``).
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset, Subset, TensorDataset

from duck.data.base import DatasetSplits, IndexedDataset
from duck.errors import DuckInputError
from duck.utils import check_positive_int, int64_array

#: the fix for a sample that is not a tensor (a PIL image, a list)
TO_TENSOR_HINT = ("add transforms.ToTensor() to its transform, e.g. transforms.Compose([transforms.ToTensor(), "
                  "transforms.Normalize(mean, std)])")


def _unwrap_subset(dataset: Dataset) -> tuple[Dataset, np.ndarray | None]:
    """``(base data set, positions in it)`` of a (nested) ``Subset``; ``(dataset, None)`` for anything else."""
    positions = None
    while isinstance(dataset, Subset):
        idx = int64_array(dataset.indices, "Subset.indices", floats=False, hint="give integer positions")
        positions = idx if positions is None else idx[positions]
        dataset = dataset.dataset
    return dataset, positions


def _declared_labels(dataset: Dataset) -> tuple[Any, str] | None:
    """The labels a data set declares without reading its samples, with where they came from: a
    ``TensorDataset``'s second tensor, ``dataset.targets`` or ``dataset.labels`` (torchvision's conventions);
    ``None`` when it declares none."""
    if isinstance(dataset, TensorDataset):
        if len(dataset.tensors) < 2:
            raise DuckInputError(f"TensorDataset holds {len(dataset.tensors)} tensor(s); give the inputs and their "
                                 "labels: TensorDataset(x, y)")
        return dataset.tensors[1], "TensorDataset.tensors[1]"
    for attr in ("targets", "labels"):
        value = getattr(dataset, attr, None)
        if isinstance(value, (list, tuple, np.ndarray, torch.Tensor)):
            return value, f"dataset.{attr}"
    return None


def _check_labels(values: Any, n: int, where: str) -> np.ndarray:
    """``values`` as ``n`` non-negative int64 class labels (integral floats count), else a ``DuckInputError``."""
    shape = tuple(values.shape) if isinstance(values, (np.ndarray, torch.Tensor)) else None
    if shape is not None and len(shape) != 1:
        raise DuckInputError(f"{where} has shape {shape}; give one integer class label per sample (not one-hot "
                             "or multi-label targets)")
    labels = int64_array(values, where, hint="class labels must be integers 0..K-1")
    if len(labels) != n:
        raise DuckInputError(f"{where} holds {len(labels)} labels but the data set has {n} samples; give one "
                             "label per sample")
    if (labels < 0).any():
        raise DuckInputError(f"{where} holds negative labels {np.unique(labels[labels < 0])[:5].tolist()}; class "
                             "labels must be 0..K-1 (remap them)")
    return labels


def _sample_pair(sample: Any, i: int, where: str) -> tuple[Any, Any]:
    """``(x, y)`` of one item ``(x, y)`` or ``(x, y, *extra)``."""
    if not isinstance(sample, (tuple, list)) or len(sample) < 2:
        raise DuckInputError(f"sample {i} of {where} is a {type(sample).__name__}, not a pair (x, y); the data set "
                             "must yield (input, label)")
    return sample[0], sample[1]


def _as_input(x: Any, i: int, where: str) -> torch.Tensor:
    """A sample's input as a float32 tensor: tensors and numeric numpy arrays are converted (values kept),
    anything else (a PIL image, a list) is refused with the ``ToTensor`` hint."""
    if isinstance(x, np.ndarray) and x.dtype.kind in "iuf":
        x = torch.from_numpy(np.ascontiguousarray(x))
    if isinstance(x, torch.Tensor) and not (x.is_complex() or x.dtype == torch.bool) and x.ndim >= 1:
        return x.float()
    what = ("a PIL image" if isinstance(x, Image.Image)
            else f"a {x.ndim}-D {x.dtype} {type(x).__name__}" if isinstance(x, (np.ndarray, torch.Tensor))
            else f"a {type(x).__name__}")
    raise DuckInputError(f"sample {i} of {where} has input x that is {what}, not a tensor of numbers; {TO_TENSOR_HINT}")


def _as_label(y: Any, i: int, where: str) -> int:
    """A sample's label as an int (a Python or numpy integer, or a one-element integer tensor/array)."""
    if (isinstance(y, torch.Tensor) and y.numel() == 1) or (isinstance(y, np.ndarray) and y.size == 1):
        y = y.item()
    if isinstance(y, (float, np.floating)) and float(y).is_integer():
        y = int(y)
    if isinstance(y, bool) or not isinstance(y, (int, np.integer)) or int(y) < 0:
        raise DuckInputError(f"sample {i} of {where} has label y={y!r}; labels must be integer class ids 0..K-1")
    return int(y)


def _declared_classes(dataset: Dataset, where: str) -> list[str] | None:
    """``dataset.classes`` (torchvision's list of class names, label ``c`` named ``classes[c]``), or ``None``."""
    classes = getattr(dataset, "classes", None)
    if classes is None:
        return None
    if isinstance(classes, (str, bytes)) or not isinstance(classes, (list, tuple)):
        raise DuckInputError(f"{where}.classes is a {type(classes).__name__}; give a list of class names (label c "
                             "named classes[c]) or remove the attribute")
    names = [str(c) for c in classes]
    dup = sorted(c for c, k in Counter(names).items() if k > 1)
    if dup:
        raise DuckInputError(f"{where}.classes names {dup[:5]} more than once; class names must be unique")
    return names


def _declared_files(dataset: Dataset, n: int) -> list[str] | None:
    """The sample files of a torchvision ``DatasetFolder`` (``dataset.samples`` or ``dataset.imgs``: a list of
    ``(path, label)``), or ``None`` when the data set lists none."""
    for attr in ("samples", "imgs"):
        entries = getattr(dataset, attr, None)
        if (isinstance(entries, (list, tuple)) and len(entries) == n
                and all(isinstance(e, (tuple, list)) and e and isinstance(e[0], (str, os.PathLike)) for e in entries)):
            return [os.fspath(e[0]) for e in entries]
    return None


class UserDataset(IndexedDataset):
    """Any map-style ``Dataset`` yielding ``(x, y)`` (or ``(x, y, *extra)``; extras ignored) as an
    :class:`~duck.data.base.IndexedDataset` yielding ``(x float32 tensor, y int64 scalar, index)``, the index
    being the sample's position.

    Labels are read once, at construction: from ``dataset.targets`` or ``dataset.labels`` where present (a
    list, array or tensor; torchvision's convention), from a ``TensorDataset``'s second tensor, from the base
    data set's labels at the subset's indices for a ``torch.utils.data.Subset``; otherwise by **one pass over
    the whole data set** (every sample is loaded and transformed once, which for images on disk means
    decoding them all). Every later access checks that the sample's label is the one read (a
    ``target_transform`` changing labels is refused, not trained on silently).

    ``x`` must be a tensor (or a numeric numpy array, converted); it becomes float32 with its values kept: the
    data set's own transform does any normalisation. A PIL image is refused: add ``transforms.ToTensor()``.

    Attributes: ``labels`` (int64, one per sample); ``classes`` (``dataset.classes`` where present, else
    ``None``) and ``class_names`` (``classes`` or ``["0", "1", ...]``); ``files`` (the sample paths of a
    torchvision ``ImageFolder``/``DatasetFolder``, from ``dataset.samples``/``dataset.imgs``, else ``None``:
    :meth:`DatasetSplits.fingerprint` then stats the files and ``duck-data index`` lists them);
    ``source_positions`` (for a ``Subset``: each sample's position in the data set under it, else ``None``).
    """

    def __init__(self, dataset: Dataset, *, role: str = "user") -> None:
        where = f"the {role} data set"
        if isinstance(dataset, IterableDataset):
            raise DuckInputError(f"{where} is an IterableDataset; give a map-style Dataset (with __len__ and "
                                 "__getitem__) so that every sample has a stable index")
        try:
            n = len(dataset)
        except TypeError:
            raise DuckInputError(f"{where} ({type(dataset).__name__}) has no len(); give a map-style Dataset with "
                                 "__len__ and __getitem__") from None
        if n == 0:
            raise DuckInputError(f"{where} is empty; give at least one sample")
        self.dataset, self.role, self._where = dataset, role, where
        base, positions = _unwrap_subset(dataset)
        if positions is not None and ((positions < 0) | (positions >= len(base))).any():
            raise DuckInputError(f"the Subset behind {where} has indices outside 0..{len(base) - 1}; fix its indices")
        declared = _declared_labels(base)
        if declared is None:  # one pass over the data set
            self.labels = np.array([_as_label(_sample_pair(dataset[i], i, where)[1], i, where) for i in range(n)],
                                   dtype=np.int64)
            self.label_source = "one pass over the samples"
        else:
            values, source = declared
            labels = _check_labels(values, len(base), f"{source} of {where}")
            self.labels = labels if positions is None else labels[positions]
            self.label_source = source if positions is None else f"{source} at the Subset's indices"
        self.classes = _declared_classes(base, "dataset")
        if self.classes is not None and self.labels.max() >= len(self.classes):
            raise DuckInputError(f"{where} has label {int(self.labels.max())} but dataset.classes names only "
                                 f"{len(self.classes)} classes; fix the labels or the class list")
        files = _declared_files(base, len(base))
        self.files = None if files is None else (files if positions is None else [files[p] for p in positions])
        self.source_positions = positions  # a Subset's positions in the data set under it
        self._labels_t = torch.from_numpy(self.labels)
        self._normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @property
    def normalization(self) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
        """``(mean, std)`` per channel of the data set's input normalisation: set by :func:`as_splits`
        (``normalization=``), else read from a ``torchvision.transforms.Normalize`` in its ``transform``
        (directly or inside a ``Compose``), else ``None`` (unknown: methods that work in pixel units, such as
        boundary_shrink, then ask for it)."""
        if self._normalization is not None:
            return self._normalization
        base, _ = _unwrap_subset(self.dataset)
        stack = [getattr(base, "transform", None)]
        while stack:
            t = stack.pop()
            if t is None:
                continue
            if type(t).__name__ == "Normalize" and hasattr(t, "mean") and hasattr(t, "std"):
                mean, std = (tuple(float(v) for v in np.atleast_1d(np.asarray(a, dtype=float))) for a in (t.mean, t.std))
                return mean, std
            stack.extend(getattr(t, "transforms", None) or [])
        return None

    @property
    def mean(self) -> tuple[float, ...] | None:
        norm = self.normalization
        return None if norm is None else norm[0]

    @property
    def std(self) -> tuple[float, ...] | None:
        norm = self.normalization
        return None if norm is None else norm[1]

    @property
    def class_names(self) -> list[str]:
        """``dataset.classes`` where present, else ``["0", ..., str(max label)]``."""
        return list(self.classes) if self.classes is not None else [str(c) for c in range(int(self.labels.max()) + 1)]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y = _sample_pair(self.dataset[i], i, self._where)
        label = _as_label(y, i, self._where)
        if label != self.labels[i]:
            raise DuckInputError(
                f"sample {i} of {self._where} has label {label} but {self.label_source} gives "
                f"{int(self.labels[i])} (a target_transform or random labels?); the data set must yield the labels "
                "it declares")
        return _as_input(x, i, self._where), self._labels_t[i], int(i)

    def content_digest(self) -> str:
        """sha256 of what identifies the data beyond labels and files (added to
        :meth:`DatasetSplits.fingerprint`): the wrapped type, its ``transform``/``target_transform`` (their
        ``repr``) and, for a ``TensorDataset``, the bytes of its tensors. Data of other kinds held in memory is
        not read: two such data sets with equal labels, transforms and types get the same digest."""
        base, positions = _unwrap_subset(self.dataset)
        h = hashlib.sha256(f"{type(base).__module__}.{type(base).__qualname__}\n".encode())
        for attr in ("transform", "target_transform", "transforms"):
            if getattr(base, attr, None) is not None:
                h.update(f"{attr}={getattr(base, attr)!r}\n".encode())
        if positions is not None:
            h.update(positions.tobytes())
        if isinstance(base, TensorDataset):
            for t in base.tensors:
                t = t.detach().cpu().contiguous()
                h.update(f"{t.dtype}{tuple(t.shape)}\n".encode())
                h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()


def _check_normalization(value: Any, in_chans: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """``normalization=(mean, std)``: two sequences of ``in_chans`` finite numbers (std > 0)."""
    hint = f"give normalization=(mean, std) with {in_chans} number(s) each, e.g. ({[0.5] * in_chans}, {[0.25] * in_chans})"
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise DuckInputError(f"normalization={value!r}: {hint}")
    out = []
    for name, part, positive in (("mean", value[0], False), ("std", value[1], True)):
        vals = np.atleast_1d(np.asarray(part, dtype=float)) if not isinstance(part, str) else np.array([np.nan])
        if vals.size != in_chans or not np.isfinite(vals).all() or (positive and (vals <= 0).any()):
            raise DuckInputError(f"normalization {name}={part!r}: {hint}")
        out.append(tuple(float(v) for v in vals))
    return out[0], out[1]


def _wrap(dataset: Dataset, role: str) -> IndexedDataset:
    return dataset if isinstance(dataset, IndexedDataset) else UserDataset(dataset, role=role)


def _input_shape(dataset: IndexedDataset, role: str) -> tuple[int, ...]:
    """The shape of the first sample's input."""
    x = dataset[0][0]
    if not isinstance(x, torch.Tensor):
        raise DuckInputError(f"sample 0 of the {role} data set has input of type {type(x).__name__}; {TO_TENSOR_HINT}")
    return tuple(x.shape)


def _num_classes(labels: np.ndarray, classes: list[str] | None, num_classes: Any) -> int:
    """``num_classes`` given or inferred (``len(classes)``, else the largest training label + 1), checked
    against the training labels and class names; at least 2."""
    if num_classes is None:
        k = len(classes) if classes is not None else int(labels.max()) + 1
        if k < 2:
            raise DuckInputError("the train data set holds a single class (label 0); a classifier needs at least 2 "
                                 "classes, or pass num_classes=K")
        return k
    k = check_positive_int(num_classes, "num_classes", 2)
    if classes is not None and k != len(classes):
        raise DuckInputError(f"num_classes={k} but dataset.classes names {len(classes)} classes; leave num_classes "
                             "unset or fix the class list")
    if labels.max() >= k:
        raise DuckInputError(f"num_classes={k} but the train data set has label {int(labels.max())}; labels must be "
                             f"0..{k - 1}: raise num_classes or fix the labels")
    return k


def as_splits(train: Dataset, test: Dataset | None = None, *, name: str = "user",
              num_classes: int | None = None, normalization: Any = None) -> DatasetSplits:
    """User data as :class:`~duck.data.base.DatasetSplits`: ``train`` and ``test`` (``None``: no test split;
    only training-set accuracies exist then) wrapped as :class:`UserDataset` (an ``IndexedDataset`` passes
    through). ``in_chans`` is the first sample's leading dimension for a ``(C, H, W)`` input, else 1;
    ``img_size`` its last dimension (the full shape is ``extra["input_shape"]``); ``num_classes`` is the
    given value, else ``len(dataset.classes)``, else the largest training label + 1; a test label beyond it
    is an error, as are test images of another shape and a test ``classes`` list differing from the
    training one. ``class_names`` come from ``dataset.classes`` where present, else ``"0"``, ``"1"``, ....
    ``augment`` is empty: a user data set applies its own transforms. For a ``Subset``,
    ``extra["source_index_<split>"]`` holds each sample's position in the data set under it (``index.csv``'s
    source, :mod:`duck.data.index`). ``normalization=(mean, std)`` (per channel, pixels in [0, 1]) states the
    input normalisation the data sets' transforms apply, where it is not a ``Normalize`` transform they hold
    (:attr:`UserDataset.normalization`)."""
    if not isinstance(name, str) or not name.strip():
        raise DuckInputError(f"name={name!r} must be a non-empty text naming the data set, e.g. name='xray'")
    train_ds = _wrap(train, "train")
    test_ds = None if test is None else _wrap(test, "test")
    shape = _input_shape(train_ds, "train")
    test_shape = shape if test_ds is None else _input_shape(test_ds, "test")
    if test_shape != shape:
        raise DuckInputError(f"test inputs have shape {test_shape} but train inputs {shape}; give both splits the "
                             "same transform (size, channels)")
    classes = getattr(train_ds, "classes", None)
    test_classes = getattr(test_ds, "classes", None)
    if classes is not None and test_classes is not None and test_classes != classes:
        raise DuckInputError(f"the test data set's classes {test_classes[:5]}... differ from the train data set's "
                             f"{classes[:5]}...: class ids would not match; give both the same class folders")
    k = _num_classes(train_ds.labels, classes, num_classes)
    if test_ds is not None and len(test_ds.labels) and test_ds.labels.max() >= k:
        raise DuckInputError(f"the test data set has label {int(test_ds.labels.max())} but the train data set has "
                             f"{k} classes (0..{k - 1}); give a test set of the training classes or pass "
                             "num_classes=K")
    in_chans = shape[0] if len(shape) == 3 else 1
    norms = [ds.normalization for ds in (train_ds, test_ds) if isinstance(ds, UserDataset)]
    if normalization is None and len(norms) == 2 and None not in norms and not np.allclose(
            np.r_[norms[0][0], norms[0][1]], np.r_[norms[1][0], norms[1][1]]):
        raise DuckInputError(f"the train and test data sets normalise differently (Normalize mean/std {norms[0]} vs "
                             f"{norms[1]}): the test accuracies would mean nothing; give both the transform the "
                             "model was trained with")
    if normalization is not None:
        norm = _check_normalization(normalization, int(in_chans))
        for ds in (train_ds, test_ds):
            if isinstance(ds, UserDataset):
                ds._normalization = norm
    extra: dict[str, Any] = {"input_shape": shape}
    for split, ds in (("train", train_ds), ("test", test_ds)):
        if getattr(ds, "source_positions", None) is not None:  # index.csv names the rows under a Subset
            extra[f"source_index_{split}"] = ds.source_positions
    return DatasetSplits(name=name, train=train_ds, test=test_ds, num_classes=k, in_chans=int(in_chans),
                         img_size=int(shape[-1]), class_names=classes or [str(c) for c in range(k)],
                         augment=[], extra=extra)
