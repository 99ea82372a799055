"""ImageFolder layouts (``root/<split>/<class>/*.png``) and TinyImageNet (``tiny-imagenet-200``).

Images are decoded lazily with PIL, resized to ``img_size`` and normalised; the sample index is the
position in the file list, sorted as torchvision's ``ImageFolder`` sorts it (hidden files skipped), so it is
stable across runs and machines.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from duck.data.augment import AUGMENT
from duck.data.base import ROOT, DatasetSplits, IndexedDataset, check_path_text
from duck.data.registry import DataSettings, register_dataset
from duck.errors import DuckInputError
from duck.paths import resolved
from duck.schema import Check, option, settings
from duck.utils import check_number, check_positive_int

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
TINY_MEAN, TINY_STD = (0.4802, 0.4481, 0.3975), (0.2770, 0.2691, 0.2821)
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".pgm", ".tif", ".tiff", ".webp")
MAX_IMG_SIZE = 1024


def check_img_size(img_size: object, key: str = "data.img_size") -> int:
    """``data.img_size`` as an int in ``1..MAX_IMG_SIZE``, else a ``DuckInputError``."""
    size = check_positive_int(img_size, key)
    if size > MAX_IMG_SIZE:
        raise DuckInputError(f"{key}={img_size!r} is too large; use an integer in 1..{MAX_IMG_SIZE}")
    return size


def check_in_chans(in_chans: object, key: str = "data.in_chans") -> int:
    """``data.in_chans`` as 1 (grey) or 3 (RGB), else a ``DuckInputError``."""
    if isinstance(in_chans, bool) or not hasattr(in_chans, "__index__") or int(in_chans.__index__()) not in (1, 3):
        raise DuckInputError(f"{key}={in_chans!r} must be 1 (greyscale) or 3 (RGB)")
    return int(in_chans.__index__())


def check_split_folder(split: object, key: str) -> str:
    """``data.train_split`` / ``data.test_split``: a folder name under ``data.root``."""
    if not check_path_text(split, key):
        raise DuckInputError(f"{key}={split!r} must name the split's folder under data.root, e.g. "
                             f"{key}={key.removeprefix('data.')[:-6]}")
    return str(split)


#: rules of the image options (:mod:`duck.schema`)
IMG_SIZE = Check(check_img_size, f"an integer in 1..{MAX_IMG_SIZE}")
IN_CHANS = Check(check_in_chans, "1 (greyscale) or 3 (RGB)")
SPLIT = Check(check_split_folder, "a folder name under data.root")
#: ``data.mean`` / ``data.std``: checked against ``data.in_chans`` by the settings (:func:`check_norm`)
NORM = Check(lambda value, key: value, "null (ImageNet's), or one number per channel (std > 0)")


def check_norm(values: object, name: str, in_chans: int, default: tuple[float, ...], positive: bool) -> tuple[float, ...]:
    """Per-channel normalisation ``data.mean`` / ``data.std``: ``in_chans`` finite numbers (``> 0`` for std);
    ``None`` gives ``default`` cut to ``in_chans`` channels."""
    if values is None:
        return tuple(default[:in_chans])
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        raise DuckInputError(f"{name}={values!r} must be a list of {in_chans} numbers (one per channel), "
                             f"e.g. {name}={list(default[:in_chans])}")
    if len(values) != in_chans:
        raise DuckInputError(f"{name}={list(values)!r} has {len(values)} values; data.in_chans={in_chans} needs "
                             f"{in_chans} (one per channel)")
    return tuple(check_number(v, f"{name}[{i}]", 0.0 if positive else -float("inf"), positive)
                 for i, v in enumerate(values))


class FileImageDataset(IndexedDataset):
    """Images on disk: ``(path, label)`` pairs decoded on access into ``(C, img_size, img_size)`` tensors."""

    def __init__(self, files: list[Path], labels: np.ndarray, img_size: int, in_chans: int,
                 mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        self.files = files
        self.labels = np.asarray(labels, dtype=np.int64)
        self.img_size, self.in_chans = img_size, in_chans
        self.mean = torch.tensor(mean[:in_chans]).view(-1, 1, 1)
        self.std = torch.tensor(std[:in_chans]).view(-1, 1, 1)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        path = self.files[i]
        try:
            with Image.open(path) as im:
                im = _to_8bit(im, path)
                im = im.convert("L" if self.in_chans == 1 else "RGB")
                if im.size != (self.img_size, self.img_size):
                    im = im.resize((self.img_size, self.img_size), Image.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
        except Image.DecompressionBombError as e:
            raise DuckInputError(f"image {path} is too large to decode safely ({e}); shrink or remove the file") \
                from None
        except (OSError, UnidentifiedImageError) as e:
            raise DuckInputError(f"cannot decode image {path}: {e}; remove or replace the file") from None
        x = torch.from_numpy(arr.copy()).float().div_(255.0)
        x = x.unsqueeze(0) if x.ndim == 2 else x.permute(2, 0, 1)
        return (x - self.mean) / self.std, torch.tensor(self.labels[i]), int(i)


def _to_8bit(im: Image.Image, path: Path) -> Image.Image:
    """Wide single-channel images (medical and scientific data) scaled to 0..255 by a fixed range, the same
    for every image: 16-bit (``I;16*``, or 32-bit ``I`` holding 0..65535) by 65535, float (``F``) holding
    0..1 by 1; Pillow's ``convert("L")`` clips them instead (a 16-bit image became white). Other ranges are
    refused, naming the file."""
    if im.mode not in ("I", "F") and not im.mode.startswith("I;16"):
        return im
    arr = np.asarray(im, dtype=np.float64)
    top = 1.0 if im.mode == "F" else 65535.0
    if arr.size and (arr.min() < 0 or arr.max() > top):
        raise DuckInputError(f"image {path} is {im.mode} with values in [{arr.min():g}, {arr.max():g}], outside "
                             f"[0, {top:g}]; convert it to 8- or 16-bit (or floats in [0, 1])")
    return Image.fromarray(np.round(arr / top * 255.0).astype(np.uint8))  # 2-D uint8: mode L


def _hidden(name: str) -> bool:
    """Folders and files a file manager or notebook leaves behind (``.ipynb_checkpoints``, ``.DS_Store``,
    macOS ``._x.png`` forks, ``__MACOSX``): never classes or samples."""
    return name.startswith(".") or name == "__MACOSX"


def _is_image(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in IMG_EXTENSIONS


def _class_files(folder: Path) -> list[Path]:
    """The image files under one class folder in torchvision's ``ImageFolder`` order (``sorted(os.walk(folder,
    followlinks=True))``, then each folder's file names sorted), so sample indices equal the positions in
    ``torchvision.datasets.ImageFolder(split_dir).samples``. Unlike torchvision, hidden files and folders
    (:func:`_hidden`) are skipped: on a tree holding some, the positions after them differ."""
    walked = []
    for root, dirs, fnames in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if not _hidden(d)]  # pruned in place: never entered
        walked.append((root, fnames))
    return [p for root, fnames in sorted(walked) for name in sorted(fnames)
            if not _hidden(name) and _is_image(p := Path(root) / name)]


def _scan_class_folders(split_dir: Path, classes: list[str] | None = None) -> tuple[list[Path], np.ndarray, list[str]]:
    if not split_dir.is_dir():
        raise DuckInputError(f"folder {split_dir} not found; expected an ImageFolder layout <root>/<split>/<class>/")
    found = sorted(d.name for d in split_dir.iterdir() if d.is_dir() and not _hidden(d.name))
    classes = classes or found
    if not classes:
        raise DuckInputError(f"no class folders under {split_dir}; expected <split>/<class>/<image files>")
    unknown = sorted(set(found) - set(classes))
    if unknown:
        raise DuckInputError(f"{split_dir} has class folders {unknown[:5]} absent from the training split")
    files, labels = [], []
    for c, name in enumerate(classes):
        folder = split_dir / name
        found_here = _class_files(folder)
        if not found_here and classes is found:  # a training class without images: labels the model never saw
            raise DuckInputError(f"class folder {folder} holds no image files ({', '.join(IMG_EXTENSIONS)}); add "
                                 "images or remove the folder")
        files += found_here
        labels += [c] * len(found_here)
    if not files:
        raise DuckInputError(f"no image files ({', '.join(IMG_EXTENSIONS)}) under {split_dir}")
    return files, np.asarray(labels, dtype=np.int64), classes


#: whether building an ImageFolder data set checks the images' size against ``data.img_size`` (False inside
#: :func:`listing_only`)
_RESIZE_CHECK: ContextVar[bool] = ContextVar("duck_imagefolder_resize_check", default=True)


@contextmanager
def listing_only() -> Iterator[None]:
    """Data sets built inside this block are only listed (their files' paths and labels, as ``duck-data index``
    does), never loaded: no image is opened, and there is no warning that the images are resized to
    ``data.img_size`` (nothing is resized)."""
    token = _RESIZE_CHECK.set(False)
    try:
        yield
    finally:
        _RESIZE_CHECK.reset(token)


def _warn_resize(first: Path, img_size: int) -> None:
    """A warning when the images are not ``img_size`` pixels a side (read from the first file's header): they
    are resized, which is right only if the model was trained on resized images too (a user's 28x28 images
    read at the default data.img_size=32 lost 7 points of accuracy without a word). Skipped inside
    :func:`listing_only`, where nothing is loaded."""
    if not _RESIZE_CHECK.get():
        return
    try:
        with Image.open(first) as im:
            w, h = im.size
    except (OSError, UnidentifiedImageError):
        return  # decoding errors are reported, with the file, when the image is read
    if (w, h) != (img_size, img_size):
        from duck.utils import warn_line

        warn_line(f"the images are {w}x{h} pixels ({first.name}) and data.img_size={img_size}: they are resized to "
                  f"{img_size}x{img_size}; set data.img_size={max(w, h)} if the model was trained on them as they are")


@settings
class ImageFolderData(DataSettings):
    """``data=imagefolder``'s options (conf/data/imagefolder.yaml is their preset)."""

    root: str | None = option(None, ROOT, "the folder holding the split folders (required)")
    train_split: str = option("train", SPLIT, "the training split's folder under root")
    test_split: str = option("test", SPLIT, "the test split's folder under root")
    img_size: int = option(32, IMG_SIZE, "images are resized to img_size x img_size")
    in_chans: int = option(3, IN_CHANS, "channels the images are read with")
    mean: tuple[float, ...] | None = option(None, NORM, "per-channel normalisation mean (null: ImageNet's)")
    std: tuple[float, ...] | None = option(None, NORM, "per-channel normalisation SD (null: ImageNet's)")
    augment: list[str] = option((), AUGMENT, "train-time augmentation on the device: any of [crop, flip]")

    def __post_init__(self) -> None:  # per channel (data.in_chans), as floats; null: ImageNet's
        object.__setattr__(self, "mean", check_norm(self.mean, "data.mean", self.in_chans, IMAGENET_MEAN, False))
        object.__setattr__(self, "std", check_norm(self.std, "data.std", self.in_chans, IMAGENET_STD, True))


@register_dataset("imagefolder", ImageFolderData)
def imagefolder(options: ImageFolderData) -> DatasetSplits:
    """Any ``root/{train,test}/<class>/<image>`` tree (class ids = sorted training folder names)."""
    root, train_split, test_split = options.root, options.train_split, options.test_split
    in_chans, img_size, augment = options.in_chans, options.img_size, options.augment
    if not root:
        raise DuckInputError("data.root is not set for imagefolder; pass data.root=DIR with DIR/train/<class>/...")
    root_p = Path(root).expanduser()
    mean_t, std_t = options.mean, options.std
    resolved(root_p, "data.root")  # a loop of links: one line, not pathlib's RuntimeError
    if resolved(root_p / train_split, "data.train_split") == resolved(root_p / test_split, "data.test_split"):
        raise DuckInputError(
            f"data.train_split={train_split!r} and data.test_split={test_split!r} name the same folder "
            f"{root_p / train_split}: every test sample would be a training sample (a member), so test accuracy "
            "and the membership audit would mean nothing; pass a held-out split, e.g. data.test_split=test")
    tr_files, tr_y, classes = _scan_class_folders(root_p / train_split)
    te_files, te_y, _ = _scan_class_folders(root_p / test_split, classes)
    _warn_resize(tr_files[0], img_size)
    return DatasetSplits(
        name="imagefolder",
        train=FileImageDataset(tr_files, tr_y, img_size, in_chans, mean_t, std_t),
        test=FileImageDataset(te_files, te_y, img_size, in_chans, mean_t, std_t),
        num_classes=len(classes), in_chans=in_chans, img_size=img_size, class_names=classes,
        augment=augment,
    )


def _read_val_annotations(ann: Path, images: Path, cls_id: dict[str, int]) -> tuple[list[Path], list[int]]:
    """TinyImageNet ``val_annotations.txt``: one ``<file>\\t<wnid>[\\t<box>...]`` line per validation image."""
    fmt = "one tab-separated line per image: <file name>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1>"
    try:
        text = ann.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DuckInputError(f"{ann} is not UTF-8 text ({e}); expected {fmt}; re-extract tiny-imagenet-200.zip") \
            from None
    files, labels = [], []
    # sorted by line text, so the sample order (and index) does not depend on the file's line order
    for lineno, line in sorted(enumerate(text.splitlines(), 1), key=lambda t: t[1]):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) < 2 or not parts[0].strip() or not parts[1].strip():
            raise DuckInputError(f"{ann} line {lineno}: {line[:80]!r} is not in the expected format ({fmt})")
        name, wnid = parts[0].strip(), parts[1].strip()
        if Path(name).name != name or name in (".", ".."):  # a plain file name inside val/images, never a path
            raise DuckInputError(f"{ann} line {lineno}: {name!r} is not a file name inside {images}; re-extract "
                                 "tiny-imagenet-200.zip")
        if wnid not in cls_id:
            raise DuckInputError(f"{ann}: class {wnid!r} of {name} is not a training class")
        files.append(images / name)
        labels.append(cls_id[wnid])
    if not files:
        raise DuckInputError(f"{ann} lists no validation images; expected {fmt}; re-extract tiny-imagenet-200.zip")
    return files, labels


@settings
class TinyImageNetData(DataSettings):
    """``data=tinyimagenet``'s options (conf/data/tinyimagenet.yaml is their preset)."""

    root: str | None = option(None, ROOT, "the folder that contains tiny-imagenet-200/ (required)")
    img_size: int = option(64, IMG_SIZE, "images are resized to img_size x img_size")
    augment: list[str] = option(("crop", "flip"), AUGMENT, "train-time augmentation on the device")


@register_dataset("tinyimagenet", TinyImageNetData)
def tinyimagenet(options: TinyImageNetData) -> DatasetSplits:
    """TinyImageNet-200: ``root/tiny-imagenet-200/train/<wnid>/images/*.JPEG`` and the validation split
    (``val/images`` + ``val/val_annotations.txt``) used as the test set, as in the DUCK paper."""
    root, img_size, augment = options.root, options.img_size, options.augment
    if not root:
        raise DuckInputError(
            "data.root is not set for tinyimagenet; download http://cs231n.stanford.edu/tiny-imagenet-200.zip, "
            "unzip it and pass data.root=DIR (the folder containing tiny-imagenet-200/)"
        )
    base = Path(root).expanduser() / "tiny-imagenet-200"
    ann = base / "val" / "val_annotations.txt"
    if not (base / "train").is_dir() or not ann.is_file():
        raise DuckInputError(
            f"TinyImageNet not found under {base} (need train/ and val/val_annotations.txt); "
            "unzip tiny-imagenet-200.zip into data.root"
        )
    tr_files, tr_y, classes = _scan_class_folders(base / "train")
    wnids = base / "wnids.txt"
    if wnids.is_file():  # the archive's class list: the training folders must be exactly these classes
        listed = sorted({w.strip() for w in wnids.read_text(encoding="utf-8", errors="replace").split() if w.strip()})
        if listed != classes:
            extra, absent = sorted(set(classes) - set(listed)), sorted(set(listed) - set(classes))
            raise DuckInputError(f"{base / 'train'} does not hold the classes of {wnids}: folders not listed "
                                 f"{extra[:5]}, listed classes without a folder {absent[:5]}; re-extract "
                                 "tiny-imagenet-200.zip")
    cls_id = {c: i for i, c in enumerate(classes)}
    te_files, te_y = _read_val_annotations(ann, base / "val" / "images", cls_id)
    return DatasetSplits(
        name="tinyimagenet",
        train=FileImageDataset(tr_files, tr_y, img_size, 3, TINY_MEAN, TINY_STD),
        test=FileImageDataset(te_files, np.asarray(te_y), img_size, 3, TINY_MEAN, TINY_STD),
        num_classes=len(classes), in_chans=3, img_size=img_size, class_names=classes,
        augment=augment,
    )
