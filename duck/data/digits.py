"""scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes): the embedded default data set."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from duck.data.base import DatasetSplits, TensorImageDataset
from duck.data.registry import register_dataset
from duck.utils import check_number

# per-pixel values are 0..16; scaled to [0, 1], then normalised with the whole set's mean and std
DIGITS_MEAN, DIGITS_STD = (0.3053,), (0.3760,)


@register_dataset("digits")
def digits(test_fraction: float = 0.25, split_seed: int = 0, **_: object) -> DatasetSplits:
    """Deterministic stratified train/test split (``split_seed``) of ``sklearn.datasets.load_digits``.

    With the default 25 % test fraction: 1,347 train / 450 test images (45 per class).
    """
    check_number(test_fraction, "data.test_fraction", 0.0, True, 1.0, hi_open=True)
    bunch = load_digits()
    images = bunch.images.astype(np.float32) / 16.0  # (1797, 8, 8) in [0, 1]
    labels = bunch.target.astype(np.int64)
    idx = np.arange(len(labels))
    tr, te = train_test_split(idx, test_size=test_fraction, stratify=labels, random_state=split_seed)
    tr, te = np.sort(tr), np.sort(te)
    as_t = lambda ids: torch.from_numpy(images[ids]).unsqueeze(1)  # (N, 1, 8, 8)
    return DatasetSplits(
        name="digits",
        train=TensorImageDataset(as_t(tr), labels[tr], DIGITS_MEAN, DIGITS_STD),
        test=TensorImageDataset(as_t(te), labels[te], DIGITS_MEAN, DIGITS_STD),
        num_classes=10, in_chans=1, img_size=8, class_names=[str(i) for i in range(10)],
        extra={"source_index_train": tr, "source_index_test": te},
    )
