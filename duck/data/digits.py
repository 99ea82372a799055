"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes): the embedded default data set."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from duck.data.augment import check_augment
from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.registry import register_dataset
from duck.errors import DuckInputError
from duck.utils import JOB_SEED_MAX, check_number, check_seed

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


@register_dataset("digits")
def digits(test_fraction: float = 0.25, split_seed: int = 0, augment: Sequence[str] | None = ()) -> DatasetSplits:
    """Deterministic stratified train/test split (``split_seed``) of ``sklearn.datasets.load_digits``.

    With the default 25 % test fraction: 1,347 train / 450 test images (45 per class). Each split keeps
    ``load_digits`` order; ``extra["source_index_train"]`` / ``["source_index_test"]`` give each sample's row
    in ``load_digits()`` (the ``source`` of ``index.csv``, :mod:`duck.data.index`).
    """
    test_fraction = check_number(test_fraction, "data.test_fraction", 0.0, True, 1.0, hi_open=True)
    split_seed = check_seed(split_seed, "data.split_seed")
    if split_seed > JOB_SEED_MAX:  # scikit-learn's splitters take 32-bit seeds, as numpy's legacy generator
        raise DuckInputError(f"data.split_seed={split_seed} is too large; scikit-learn's splits take seeds in "
                             "[0, 2^32 - 1]")
    augment = check_augment(augment)
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
