"""CIFAR-10 / CIFAR-100 from the torchvision (python pickle) layout under a user-given root.

The batches are Python pickles; they are read with a restricted unpickler that only reconstructs
numpy arrays and plain containers, so a tampered file cannot execute code.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import numpy as np
import torch

from duck.data.augment import AUGMENT
from duck.data.base import ROOT, DatasetSplits, TensorImageDataset
from duck.data.registry import DataSettings, register_dataset
from duck.errors import DuckInputError
from duck.schema import Flag, option, settings

CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)

_SPECS = {
    "cifar10": {"folder": "cifar-10-batches-py", "train": [f"data_batch_{i}" for i in range(1, 6)],
                "test": ["test_batch"], "label_key": "labels", "meta": ("batches.meta", "label_names"),
                "num_classes": 10, "mean": CIFAR10_MEAN, "std": CIFAR10_STD,
                "url": "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"},
    "cifar100": {"folder": "cifar-100-python", "train": ["train"], "test": ["test"],
                 "label_key": "fine_labels", "meta": ("meta", "fine_label_names"),
                 "num_classes": 100, "mean": CIFAR100_MEAN, "std": CIFAR100_STD,
                 "url": "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz"},
}

_ALLOWED_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    # pickle protocol 5 (arrays re-saved by numpy >= 1.16 with protocol=5): frombuffer(bytes, dtype).reshape
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    # an empty bytes payload (a 0-row array) is pickled as a call to bytes(); harmless
    ("__builtin__", "bytes"), ("builtins", "bytes"),
}


class _SafeUnpickler(pickle.Unpickler):
    """Unpickler that only resolves the globals needed for numpy arrays (no code execution)."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"forbidden global {module}.{name} in data file")


def _load_batch(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = _SafeUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise
    except Exception as e:
        raise DuckInputError(f"cannot read CIFAR batch {path}: {e}; re-extract the archive") from None
    if not isinstance(raw, dict) or not all(isinstance(k, (str, bytes)) for k in raw):
        raise DuckInputError(
            f"CIFAR file {path} holds a {type(raw).__name__}, not a dict with string keys as in the official "
            "python archive; re-extract the archive"
        )
    return {(k.decode("latin1") if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _get(batch: dict[str, Any], key: str, path: Path) -> Any:
    if key not in batch:
        raise DuckInputError(
            f"CIFAR file {path} has no {key!r} entry (keys: {sorted(batch)[:6]}); re-extract the archive"
        )
    return batch[key]


def _batch_arrays(path: Path, label_key: str, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(images uint8 (n, 3, 32, 32), labels int64 (n,))`` of one batch file, validated."""
    batch = _load_batch(path)
    data, labels = _get(batch, "data", path), _get(batch, label_key, path)
    arr = None if isinstance(data, (str, bytes)) else np.asarray(data)
    if arr is None or arr.dtype.kind not in "iu":
        what = type(data).__name__ if arr is None else f"dtype {arr.dtype}"
        raise DuckInputError(f"CIFAR file {path}: 'data' is {what}, expected an integer (uint8) array "
                             "of shape (N, 3072); re-extract the archive")
    if arr.ndim != 2 or arr.shape[1] != 3 * 32 * 32:
        raise DuckInputError(f"CIFAR file {path}: 'data' has shape {arr.shape}, expected (N, 3072); "
                             "re-extract the archive")
    if arr.shape[0] == 0:
        raise DuckInputError(f"CIFAR file {path} holds no images (0 rows); re-extract the archive")
    if arr.dtype != np.uint8 and (arr.min() < 0 or arr.max() > 255):
        raise DuckInputError(f"CIFAR file {path}: pixel values {arr.min()}..{arr.max()} outside 0..255; "
                             "re-extract the archive")
    y = None if isinstance(labels, (str, bytes)) or labels is None else np.asarray(labels)
    if y is None or y.ndim != 1 or y.dtype.kind not in "iu":
        what = type(labels).__name__ if y is None else f"{y.ndim}-D {y.dtype} array"
        raise DuckInputError(f"CIFAR file {path}: {label_key!r} is {what}, expected a list of integer class "
                             f"ids; re-extract the archive")
    if len(y) != len(arr):
        raise DuckInputError(f"CIFAR file {path}: {len(arr)} images but {len(y)} {label_key!r}; "
                             "re-extract the archive")
    bad = y[(y < 0) | (y >= num_classes)]
    if bad.size:
        raise DuckInputError(f"CIFAR file {path}: labels {bad[:5].tolist()} outside 0..{num_classes - 1}; "
                             "corrupt file? re-extract the archive")
    return arr.astype(np.uint8).reshape(-1, 3, 32, 32), y.astype(np.int64)


def _load_split(folder: Path, files: list[str], label_key: str, num_classes: int) -> tuple[torch.Tensor, np.ndarray]:
    xs, ys = [], []
    for name in files:
        x, y = _batch_arrays(folder / name, label_key, num_classes)
        xs.append(x)
        ys.append(y)
    return torch.from_numpy(np.concatenate(xs)), np.concatenate(ys)


def _class_names(path: Path, key: str) -> list[str]:
    raw = _get(_load_batch(path), key, path)
    if isinstance(raw, (str, bytes)) or not isinstance(raw, (list, tuple)) \
            or not all(isinstance(n, (str, bytes)) for n in raw):
        raise DuckInputError(f"CIFAR file {path}: {key!r} is {type(raw).__name__}, expected a list of class "
                             "names; re-extract the archive or delete the file")
    return [n.decode("latin1") if isinstance(n, bytes) else n for n in raw]


def _cifar(kind: str, root: str | None, download: bool, augment: list[str]) -> DatasetSplits:
    spec = _SPECS[kind]
    if not root:
        raise DuckInputError(
            f"data.root is not set for {kind}; download {spec['url']}, extract it and pass "
            f"data.root=DIR (the folder that contains {spec['folder']}/)"
        )
    folder = Path(root).expanduser() / spec["folder"]
    missing = [n for n in spec["train"] + spec["test"] if not (folder / n).is_file()]
    if missing:
        if download:
            raise DuckInputError(
                f"{kind}: download=true is not supported offline; fetch {spec['url']} yourself and extract it "
                f"under {root}"
            )
        raise DuckInputError(
            f"{kind} files {missing} not found under {folder}; download {spec['url']}, extract it into "
            f"{Path(root).expanduser()} (so that {spec['folder']}/ exists) or fix data.root"
        )
    xtr, ytr = _load_split(folder, spec["train"], spec["label_key"], spec["num_classes"])
    xte, yte = _load_split(folder, spec["test"], spec["label_key"], spec["num_classes"])
    names: list[str] = []
    meta_file, meta_key = spec["meta"]
    if (folder / meta_file).is_file():
        names = _class_names(folder / meta_file, meta_key)
        if len(names) != spec["num_classes"]:  # the names label plots and reports: they must match the labels
            raise DuckInputError(f"CIFAR file {folder / meta_file} names {len(names)} classes, {kind} has "
                                 f"{spec['num_classes']}; re-extract the archive or delete the file")
    return DatasetSplits(
        name=kind,
        train=TensorImageDataset(xtr, ytr, spec["mean"], spec["std"]),
        test=TensorImageDataset(xte, yte, spec["mean"], spec["std"]),
        num_classes=spec["num_classes"], in_chans=3, img_size=32, class_names=names,
        augment=augment,
    )


@settings
class Cifar10Data(DataSettings):
    """``data=cifar10``'s options (conf/data/cifar10.yaml is their preset)."""

    root: str | None = option(None, ROOT, "the folder that contains cifar-10-batches-py/ (required)")
    download: bool = option(False, Flag(), "refused offline: fetch the archive yourself")
    augment: list[str] = option(("crop", "flip"), AUGMENT, "train-time augmentation on the device")


@settings
class Cifar100Data(Cifar10Data):
    """``data=cifar100``'s options (conf/data/cifar100.yaml is their preset)."""

    root: str | None = option(None, ROOT, "the folder that contains cifar-100-python/ (required)")


@register_dataset("cifar10", Cifar10Data)
def cifar10(options: Cifar10Data) -> DatasetSplits:
    """CIFAR-10 (50,000 / 10,000 32x32 colour images) from ``root/cifar-10-batches-py``."""
    return _cifar("cifar10", options.root, options.download, options.augment)


@register_dataset("cifar100", Cifar100Data)
def cifar100(options: Cifar100Data) -> DatasetSplits:
    """CIFAR-100 (fine labels) from ``root/cifar-100-python``."""
    return _cifar("cifar100", options.root, options.download, options.augment)
