"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes): the embedded default data set."""

from __future__ import annotations

import math

import numpy as np
import torch

from duck.data.augment import AUGMENT
from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.registry import DataSettings, register_dataset
from duck.errors import DuckInputError
from duck.schema import Check, Real, option, settings
from duck.utils import JOB_SEED_MAX, check_seed

# per-pixel values are 0..16; scaled to [0, 1], then normalised with the whole set's mean and std
DIGITS_MEAN, DIGITS_STD = (0.3053,), (0.3760,)


def check_split_sizes(test_fraction: float, labels: np.ndarray) -> None:
    """Refuse a ``data.test_fraction`` that leaves a split with fewer images than classes, so that some class
    would have no training or no test image (scikit-learn's stratified split rounds the test size up)."""
    n, k = len(labels), len(np.unique(labels))
    n_test = math.ceil(test_fraction * n)
    n_train = n - n_test
    if min(n_train, n_test) < k:
        lo = math.floor((k - 1) / n * 1000) / 1000 + 0.001  # smallest 3-decimal fraction giving k test images
        hi = math.floor((n - k) / n * 1000) / 1000  # largest one leaving k training images
        raise DuckInputError(
            f"data.test_fraction={test_fraction!r} splits the {n} images into {n_train} train / {n_test} test, "
            f"which leaves some of the {k} classes without a {'training' if n_train < k else 'test'} image; "
            f"use a value between {lo:.3f} and {hi:.3f}"
        )


def _split_seed(value: object, key: str) -> int:
    seed = check_seed(value, key)
    if seed > JOB_SEED_MAX:  # scikit-learn's splitters take 32-bit seeds, as numpy's legacy generator
        raise DuckInputError(f"{key}={seed} is too large; scikit-learn's splits take seeds in [0, 2^32 - 1]")
    return seed


@settings
class DigitsData(DataSettings):
    """``data=digits``'s options (conf/data/digits.yaml is their preset)."""

    test_fraction: float = option(0.25, Real(0.0, True, 1.0, hi_open=True), "share of the 1,797 images held out")
    split_seed: int = option(0, Check(_split_seed, "an integer in [0, 2^32 - 1]"), "seed of the stratified split")
    augment: list[str] = option((), AUGMENT, "train-time augmentation on the device: any of [crop, flip]")


@register_dataset("digits", DigitsData)
def digits(options: DigitsData) -> DatasetSplits:
    """Deterministic stratified train/test split (``split_seed``) of ``sklearn.datasets.load_digits``.

    With the default 25 % test fraction: 1,347 train / 450 test images (45 per class). Each split keeps
    ``load_digits`` order; ``extra["source_index_train"]`` / ``["source_index_test"]`` give each sample's row
    in ``load_digits()`` (the ``source`` of ``index.csv``, :mod:`duck.data.index`).
    """
    test_fraction, split_seed, augment = options.test_fraction, options.split_seed, options.augment
    # scikit-learn is imported here, not at the top: the package imports this module to register it, and
    # scikit-learn would add most of a second to every import of duck.data
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    images = bunch.images.astype(np.float32) / 16.0  # (1797, 8, 8) in [0, 1]
    labels = bunch.target.astype(np.int64)
    check_split_sizes(test_fraction, labels)
    idx = np.arange(len(labels))
    tr, te = train_test_split(idx, test_size=test_fraction, stratify=labels, random_state=split_seed)
    tr, te = np.sort(tr), np.sort(te)
    as_t = lambda ids: torch.from_numpy(images[ids]).unsqueeze(1)  # (N, 1, 8, 8)
    return DatasetSplits(
        name="digits",
        train=TensorImageDataset(as_t(tr), labels[tr], DIGITS_MEAN, DIGITS_STD),
        test=TensorImageDataset(as_t(te), labels[te], DIGITS_MEAN, DIGITS_STD),
        num_classes=10, in_chans=1, img_size=8, class_names=[str(i) for i in range(10)], augment=augment,
        extra={"source_index_train": tr, "source_index_test": te},
    )
