"""Small generated image data for fast tests: one random prototype per class plus Gaussian noise."""

from __future__ import annotations

import numpy as np
import torch

from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.registry import register_dataset


@register_dataset("synthetic")
def synthetic(n_train: int = 400, n_test: int = 200, num_classes: int = 4, img_size: int = 8,
              in_chans: int = 1, noise: float = 0.6, seed: int = 0, **_: object) -> DatasetSplits:
    """Class c's images are ``prototype_c + noise·N(0, I)`` (labels balanced, order shuffled by ``seed``)."""
    rng = np.random.default_rng(seed)
    protos = rng.normal(size=(num_classes, in_chans, img_size, img_size)).astype(np.float32)

    def make(n: int) -> tuple[torch.Tensor, np.ndarray]:
        y = rng.permutation(np.arange(n) % num_classes).astype(np.int64)
        x = protos[y] + noise * rng.normal(size=(n, in_chans, img_size, img_size)).astype(np.float32)
        return torch.from_numpy(x), y

    (xtr, ytr), (xte, yte) = make(n_train), make(n_test)
    zero, one = (0.0,) * in_chans, (1.0,) * in_chans
    return DatasetSplits(
        name="synthetic",
        train=TensorImageDataset(xtr, ytr, zero, one),
        test=TensorImageDataset(xte, yte, zero, one),
        num_classes=num_classes, in_chans=in_chans, img_size=img_size,
        class_names=[f"class{c}" for c in range(num_classes)],
    )
