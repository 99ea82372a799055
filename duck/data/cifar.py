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

from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.registry import register_dataset
from duck.errors import DuckInputError

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
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in raw.items()}


def _load_split(folder: Path, files: list[str], label_key: str) -> tuple[torch.Tensor, np.ndarray]:
    xs, ys = [], []
    for name in files:
        batch = _load_batch(folder / name)
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DuckInputError(f"{folder / name}: 'data' has shape {data.shape}, expected (N, 3072)")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return torch.from_numpy(np.concatenate(xs)), np.concatenate(ys)


def _cifar(kind: str, root: str | None, download: bool, augment: list[str] | None) -> DatasetSplits:
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
    xtr, ytr = _load_split(folder, spec["train"], spec["label_key"])
    xte, yte = _load_split(folder, spec["test"], spec["label_key"])
    names: list[str] = []
    meta_file, meta_key = spec["meta"]
    if (folder / meta_file).is_file():
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in _load_batch(folder / meta_file)[meta_key]]
    for split, y in (("train", ytr), ("test", yte)):
        if y.min() < 0 or y.max() >= spec["num_classes"]:
            raise DuckInputError(f"{kind} {split} labels outside 0..{spec['num_classes'] - 1}; corrupt files?")
    return DatasetSplits(
        name=kind,
        train=TensorImageDataset(xtr, ytr, spec["mean"], spec["std"]),
        test=TensorImageDataset(xte, yte, spec["mean"], spec["std"]),
        num_classes=spec["num_classes"], in_chans=3, img_size=32, class_names=names,
        augment=list(["crop", "flip"] if augment is None else augment),
    )


@register_dataset("cifar10")
def cifar10(root: str | None = None, download: bool = False, augment: list[str] | None = None,
            **_: object) -> DatasetSplits:
    """CIFAR-10 (50,000 / 10,000 32x32 colour images) from ``root/cifar-10-batches-py``."""
    return _cifar("cifar10", root, download, augment)


@register_dataset("cifar100")
def cifar100(root: str | None = None, download: bool = False, augment: list[str] | None = None,
             **_: object) -> DatasetSplits:
    """CIFAR-100 (fine labels) from ``root/cifar-100-python``."""
    return _cifar("cifar100", root, download, augment)
