"""Fashion-MNIST (Xiao et al. 2017) from the IDX ``.gz`` files as distributed (Debian: dataset-fashion-mnist)."""

from __future__ import annotations

import torch

from duck.data.augment import AUGMENT
from duck.data.base import ROOT, DatasetSplits, TensorImageDataset
from duck.data.idx import FASHION_MNIST_DEFAULT_ROOT, fashion_mnist_arrays
from duck.data.registry import DataSettings, register_dataset
from duck.schema import option, settings

FMNIST_MEAN, FMNIST_STD = (0.2860,), (0.3530,)
FMNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


@settings
class FashionMnistData(DataSettings):
    """``data=fashion_mnist``'s options (conf/data/fashion_mnist.yaml is their preset)."""

    root: str | None = option(FASHION_MNIST_DEFAULT_ROOT, ROOT, "the IDX files' folder (null: the default)")
    augment: list[str] = option((), AUGMENT, "train-time augmentation on the device: any of [crop, flip]")


@register_dataset("fashion_mnist", FashionMnistData)
def fashion_mnist(options: FashionMnistData) -> DatasetSplits:
    """60,000 train / 10,000 test 28x28 grey images; ``root`` defaults to ``/usr/share/datasets/fashion-mnist``."""
    root, augment = options.root or FASHION_MNIST_DEFAULT_ROOT, options.augment
    (xtr, ytr), (xte, yte) = fashion_mnist_arrays(root, "train"), fashion_mnist_arrays(root, "test")
    to_t = lambda a: torch.from_numpy(a.copy()).unsqueeze(1)  # (N, 1, 28, 28) uint8
    return DatasetSplits(
        name="fashion_mnist",
        train=TensorImageDataset(to_t(xtr), ytr, FMNIST_MEAN, FMNIST_STD),
        test=TensorImageDataset(to_t(xte), yte, FMNIST_MEAN, FMNIST_STD),
        num_classes=10, in_chans=1, img_size=28, class_names=list(FMNIST_CLASSES),
        augment=augment,
    )
