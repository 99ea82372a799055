"""Small generated image data for fast tests: one random prototype per class plus Gaussian noise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from duck.data.augment import check_augment
from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.imagefolder import check_img_size
from duck.data.registry import register_dataset
from duck.errors import DuckInputError
from duck.utils import check_number, check_positive_int, check_seed

#: most float32 pixel values generated (train + test), 8 GiB
MAX_VALUES = 2**31


@register_dataset("synthetic")
def synthetic(n_train: int = 400, n_test: int = 200, num_classes: int = 4, img_size: int = 8,
              in_chans: int = 1, noise: float = 0.6, seed: int = 0,
              augment: Sequence[str] | None = ()) -> DatasetSplits:
    """Class c's images are ``prototype_c + noise·N(0, I)`` (labels balanced, order shuffled by ``seed``)."""
    num_classes = check_positive_int(num_classes, "data.num_classes", 2)
    n_train, n_test = check_positive_int(n_train, "data.n_train"), check_positive_int(n_test, "data.n_test")
    for key, n in (("n_train", n_train), ("n_test", n_test)):
        if n < num_classes:
            raise DuckInputError(f"data.{key}={n!r} is below data.num_classes={num_classes}: every class needs an "
                                 f"image in each split; use data.{key} >= {num_classes}")
    img_size, in_chans = check_img_size(img_size), check_positive_int(in_chans, "data.in_chans")
    noise = check_number(noise, "data.noise", 0.0, False)
    seed = check_seed(seed, "data.seed")
    augment = check_augment(augment)
    values = (n_train + n_test) * in_chans * img_size**2
    if values > MAX_VALUES:
        raise DuckInputError(
            f"data.n_train={n_train} + data.n_test={n_test} images of {in_chans}x{img_size}x{img_size} make "
            f"{values:.3g} float32 values ({values * 4 / 2**30:.0f} GiB), above the {MAX_VALUES:.3g} allowed; "
            "use fewer or smaller images"
        )
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
        class_names=[f"class{c}" for c in range(num_classes)], augment=augment,
    )
