"""Fashion-MNIST (Xiao et al. 2017) from the IDX ``.gz`` files as distributed (Debian: dataset-fashion-mnist)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from duck.data.augment import check_augment
from duck.data.base import DatasetSplits, TensorImageDataset, check_path_text
from duck.data.idx import FASHION_MNIST_DEFAULT_ROOT, fashion_mnist_arrays
from duck.data.registry import register_dataset

FMNIST_MEAN, FMNIST_STD = (0.2860,), (0.3530,)
FMNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


@register_dataset("fashion_mnist")
def fashion_mnist(root: str | None = None, augment: Sequence[str] | None = ()) -> DatasetSplits:
    """60,000 train / 10,000 test 28x28 grey images; ``root`` defaults to ``/usr/share/datasets/fashion-mnist``."""
    root = check_path_text(root, "data.root") or FASHION_MNIST_DEFAULT_ROOT
    augment = check_augment(augment)
    (xtr, ytr), (xte, yte) = fashion_mnist_arrays(root, "train"), fashion_mnist_arrays(root, "test")
    to_t = lambda a: torch.from_numpy(a.copy()).unsqueeze(1)  # (N, 1, 28, 28) uint8
    return DatasetSplits(
        name="fashion_mnist",
        train=TensorImageDataset(to_t(xtr), ytr, FMNIST_MEAN, FMNIST_STD),
        test=TensorImageDataset(to_t(xte), yte, FMNIST_MEAN, FMNIST_STD),
        num_classes=10, in_chans=1, img_size=28, class_names=list(FMNIST_CLASSES),
        augment=augment,
    )
