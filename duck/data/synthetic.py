"""Small generated image data for fast tests: one random prototype per class plus Gaussian noise."""

from __future__ import annotations

import numpy as np
import torch

from duck.data.augment import AUGMENT
from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.imagefolder import IMG_SIZE
from duck.data.registry import DataSettings, register_dataset
from duck.errors import DuckInputError
from duck.schema import SEED, Integer, Real, option, settings

#: most float32 pixel values generated (train + test), 8 GiB
MAX_VALUES = 2**31


@settings
class SyntheticData(DataSettings):
    """``data=synthetic``'s options (conf/data/synthetic.yaml is their preset)."""

    n_train: int = option(400, Integer(1), "training images (at least one per class)")
    n_test: int = option(200, Integer(1), "test images (at least one per class)")
    num_classes: int = option(4, Integer(2), "classes")
    img_size: int = option(8, IMG_SIZE, "image side")
    in_chans: int = option(1, Integer(1), "channels")
    noise: float = option(0.6, Real(0.0, False), "SD of the Gaussian noise around each class's prototype")
    seed: int = option(0, SEED, "seed of the prototypes, the noise and the order")
    augment: list[str] = option((), AUGMENT, "train-time augmentation on the device: any of [crop, flip]")

    def __post_init__(self) -> None:
        for key in ("n_train", "n_test"):
            n = getattr(self, key)
            if n < self.num_classes:
                raise DuckInputError(f"data.{key}={n!r} is below data.num_classes={self.num_classes}: every class "
                                     f"needs an image in each split; use data.{key} >= {self.num_classes}")
        values = (self.n_train + self.n_test) * self.in_chans * self.img_size**2
        if values > MAX_VALUES:
            raise DuckInputError(
                f"data.n_train={self.n_train} + data.n_test={self.n_test} images of {self.in_chans}x{self.img_size}x"
                f"{self.img_size} make {values:.3g} float32 values ({values * 4 / 2**30:.0f} GiB), above the "
                f"{MAX_VALUES:.3g} allowed; use fewer or smaller images"
            )


@register_dataset("synthetic", SyntheticData)
def synthetic(options: SyntheticData) -> DatasetSplits:
    """Class c's images are ``prototype_c + noise·N(0, I)`` (labels balanced, order shuffled by ``seed``)."""
    n_train, n_test, num_classes, noise, seed = (options.n_train, options.n_test, options.num_classes, options.noise,
                                                 options.seed)
    img_size, in_chans, augment = options.img_size, options.in_chans, options.augment
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
