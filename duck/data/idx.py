"""Reader for the IDX format (MNIST / Fashion-MNIST), plain or gzip-compressed, numpy only.

Format (LeCun et al.): big-endian magic ``0x00 0x00 <type> <ndim>``, ``ndim`` big-endian uint32 sizes,
then the raw data. Only unsigned-byte data (type 0x08) occurs in (Fashion-)MNIST; the other IDX types
are read too.
"""

from __future__ import annotations

import gzip
import math
import os
import zlib
from pathlib import Path

import numpy as np

from duck.errors import DuckInputError

_IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}

FASHION_MNIST_DEFAULT_ROOT = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}


#: most dimensions an IDX header may declare (images, volumes, videos: 1-4 in practice)
_IDX_MAX_DIMS = 8

def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read one IDX file (``.gz`` or uncompressed) into a numpy array of its stored shape."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError, zlib.error) as e:
        raise DuckInputError(f"cannot read IDX file {path}: {e}; re-download or reinstall the data set") from None
    if len(raw) == 0:
        raise DuckInputError(f"IDX file {path} is empty; re-download or reinstall the data set")
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_TYPES:
        raise DuckInputError(f"{path} is not an IDX file (bad magic number); check the data set files")
    dtype, ndim = np.dtype(_IDX_TYPES[raw[2]]), raw[3]
    if not 1 <= ndim <= _IDX_MAX_DIMS:  # numpy arrays hold at most 64 dimensions; data sets use 1-4
        raise DuckInputError(f"{path} is corrupt: its header declares {ndim} dimensions (IDX data sets have 1 to "
                             f"{_IDX_MAX_DIMS}); re-download the data set")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DuckInputError(f"{path} is truncated: its header ({ndim} dimensions) needs {header} bytes, file "
                             f"holds {len(raw)}; re-download the data set")
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    expected = math.prod(shape) * dtype.itemsize  # exact Python int: no overflow
    if len(raw) - header != expected:
        raise DuckInputError(
            f"{path} is truncated or corrupt: header says shape {shape} ({expected} bytes), "
            f"file holds {len(raw) - header}; re-download the data set"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def _find(root: Path, stem: str) -> Path:
    for name in (stem + ".gz", stem):
        if (root / name).is_file():
            return root / name
    raise DuckInputError(
        f"Fashion-MNIST file {stem}[.gz] not found under {root}; install the Debian package "
        f"dataset-fashion-mnist (apt-get install dataset-fashion-mnist, files in {FASHION_MNIST_DEFAULT_ROOT}) "
        "or set data.root to a folder holding the four IDX files"
    )


def fashion_mnist_arrays(root: str | os.PathLike | None = None, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ``(images uint8 (N, 28, 28), labels int64 (N,))`` read from the IDX files under ``root``."""
    if split not in FASHION_MNIST_FILES:
        raise DuckInputError(f"unknown Fashion-MNIST split {split!r}; use 'train' or 'test'")
    root = Path(root or FASHION_MNIST_DEFAULT_ROOT)
    img_stem, lbl_stem = FASHION_MNIST_FILES[split]
    img_path, lbl_path = _find(root, img_stem), _find(root, lbl_stem)
    images, labels = read_idx(img_path), read_idx(lbl_path)
    if images.dtype != np.uint8:
        raise DuckInputError(
            f"{img_path} stores {images.dtype} pixels; Fashion-MNIST images must be unsigned bytes (IDX type 0x08, "
            "values 0..255); re-download the data set"
        )
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise DuckInputError(
            f"{img_path} holds images of shape {images.shape[1:]} (array {images.shape}); Fashion-MNIST images "
            "are 28x28 (N, 28, 28); re-download the data set"
        )
    if len(images) == 0:
        raise DuckInputError(f"{img_path} holds no images (0 rows); re-download the data set")
    if labels.ndim != 1 or len(images) != len(labels):
        raise DuckInputError(
            f"Fashion-MNIST files under {root} disagree: images {images.shape}, labels {labels.shape}"
        )
    if labels.dtype.kind not in "iu":
        raise DuckInputError(f"{lbl_path} stores {labels.dtype} labels; expected integer class ids 0..9")
    labels = labels.astype(np.int64)
    bad = labels[(labels < 0) | (labels > 9)]
    if bad.size:
        raise DuckInputError(
            f"{lbl_path} holds labels {bad[:5].tolist()} outside 0..9 (Fashion-MNIST has 10 classes); "
            "re-download the data set"
        )
    return images, labels
