"""Data loaders: the bundled digits, Fashion-MNIST IDX files, CIFAR pickles, ImageFolder and TinyImageNet
layouts (built in a temp dir in the real formats and read through the real loaders)."""

from __future__ import annotations

import gzip
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from duck.data.augment import apply_augment, random_crop
from duck.data.idx import fashion_mnist_arrays, read_idx
from duck.data.loaders import make_loader, stack_dataset
from duck.data.registry import build_datasets, list_datasets
from duck.errors import DuckInputError


def test_registry_lists_every_dataset():
    assert set(list_datasets()) >= {"digits", "fashion_mnist", "cifar10", "cifar100", "tinyimagenet",
                                    "imagefolder", "synthetic"}
    with pytest.raises(DuckInputError, match="unknown data set 'mnist2'"):
        build_datasets("mnist2")


def test_digits_split_is_stratified_deterministic_and_indexed(digits):
    assert (len(digits.train), len(digits.test)) == (1347, 450)
    assert np.bincount(digits.test.labels).tolist() == [45, 45, 45, 46, 45, 46, 45, 45, 43, 45] or \
        np.abs(np.bincount(digits.test.labels) - 45).max() <= 2
    again = build_datasets("digits")
    assert np.array_equal(again.train.labels, digits.train.labels)
    x, y, idx = digits.train[17]
    assert x.shape == (1, 8, 8) and int(y) == digits.train.labels[17] and idx == 17
    # the same pixels as sklearn's image, normalised
    from sklearn.datasets import load_digits

    src = digits.extra["source_index_train"][17]
    raw = load_digits().images[src] / 16.0
    np.testing.assert_allclose((x[0].numpy() * 0.3760 + 0.3053), raw, atol=1e-4)


def test_loader_keeps_stable_indices_and_shuffles_reproducibly(digits):
    ids = np.array([5, 9, 100, 7, 42])
    x, y, i = stack_dataset(digits.train, ids)
    assert i.tolist() == ids.tolist() and y.tolist() == digits.train.labels[ids].tolist()
    a = [b[2].tolist() for b in make_loader(digits.train, 64, shuffle=True, seed=3)]
    b = [b[2].tolist() for b in make_loader(digits.train, 64, shuffle=True, seed=3)]
    c = [b[2].tolist() for b in make_loader(digits.train, 64, shuffle=True, seed=4)]
    assert a == b and a != c and sorted(sum(a, [])) == list(range(len(digits.train)))


def _write_idx(path: Path, arr: np.ndarray) -> None:
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(s).to_bytes(4, "big") for s in arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def _fake_fashion_mnist(root: Path, n_train: int = 20, n_test: int = 10) -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("t10k", n_test)):
        _write_idx(root / f"{split}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28)))
        _write_idx(root / f"{split}-labels-idx1-ubyte.gz", np.arange(n) % 10)


def test_fashion_mnist_reads_idx_gz_files(tmp_path):
    _fake_fashion_mnist(tmp_path)
    data = build_datasets("fashion_mnist", root=str(tmp_path))
    assert (len(data.train), len(data.test), data.num_classes, data.img_size) == (20, 10, 10, 28)
    imgs, labels = fashion_mnist_arrays(tmp_path, "train")
    x, y, i = data.train[3]
    np.testing.assert_allclose(x[0].numpy() * 0.3530 + 0.2860, imgs[3] / 255.0, atol=1e-4)
    assert int(y) == 3 and labels.dtype == np.int64


def test_idx_reader_rejects_truncated_and_foreign_files(tmp_path):
    _fake_fashion_mnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    raw = gzip.decompress(p.read_bytes())
    (tmp_path / "trunc.idx").write_bytes(raw[:-100])
    with pytest.raises(DuckInputError, match="truncated or corrupt"):
        read_idx(tmp_path / "trunc.idx")
    (tmp_path / "foreign.idx").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DuckInputError, match="not an IDX file"):
        read_idx(tmp_path / "foreign.idx")
    with pytest.raises(DuckInputError, match="dataset-fashion-mnist"):
        build_datasets("fashion_mnist", root=str(tmp_path / "nowhere"))


@pytest.mark.skipif(not Path("/usr/share/datasets/fashion-mnist").is_dir(), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist_shapes():
    imgs, labels = fashion_mnist_arrays(split="test")
    assert imgs.shape == (10000, 28, 28) and np.bincount(labels).tolist() == [1000] * 10


def _fake_cifar(root: Path, kind: str = "cifar10", per_batch: int = 6,
                protocol: int = 2) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    if kind == "cifar10":
        folder, files, key, ncls = root / "cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)] + [
            "test_batch"], b"labels", 10
        meta = ("batches.meta", {b"label_names": [f"c{i}".encode() for i in range(10)]})
    else:
        folder, files, key, ncls = root / "cifar-100-python", ["train", "test"], b"fine_labels", 100
        meta = ("meta", {b"fine_label_names": [f"f{i}".encode() for i in range(100)]})
    folder.mkdir(parents=True)
    first = None
    for name in files:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, ncls, per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({b"batch_label": name.encode(), key: labels, b"data": data}, f, protocol=protocol)
        first = first if first is not None else (data, np.array(labels))
    with open(folder / meta[0], "wb") as f:
        pickle.dump(meta[1], f, protocol=2)
    return first


@pytest.mark.parametrize("kind,protocol", [("cifar10", 2), ("cifar100", 2), ("cifar10", 4), ("cifar10", 5)])
def test_cifar_loader_reads_torchvision_layout(tmp_path, kind, protocol):
    """The official archive's protocol-2 pickles, and batches re-saved by numpy with protocols 4-5 (5 pickles
    arrays through numpy's ``_frombuffer``, which the safe unpickler must allow)."""
    data0, labels0 = _fake_cifar(tmp_path, kind, protocol=protocol)
    ds = build_datasets(kind, root=str(tmp_path))
    n_train = 30 if kind == "cifar10" else 6
    assert len(ds.train) == n_train and len(ds.test) == 6 and ds.in_chans == 3 and ds.img_size == 32
    assert ds.train.labels[:6].tolist() == labels0.tolist()
    x, _, _ = ds.train[0]
    mean, std = ds.train.mean.view(-1, 1, 1), ds.train.std.view(-1, 1, 1)
    np.testing.assert_allclose((x * std + mean).numpy(), data0[0].reshape(3, 32, 32) / 255.0, atol=1e-4)
    assert ds.class_names[0] in ("c0", "f0") and ds.augment == ["crop", "flip"]


def test_cifar_missing_root_says_where_to_put_files(tmp_path):
    with pytest.raises(DuckInputError, match="data.root is not set"):
        build_datasets("cifar10", root=None)
    with pytest.raises(DuckInputError, match=r"not found under .*cifar-10-batches-py.*cifar-10-python.tar.gz"):
        build_datasets("cifar10", root=str(tmp_path))


def test_cifar_pickle_cannot_execute_code(tmp_path):
    _fake_cifar(tmp_path)
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": [0]}, f)
    with pytest.raises(DuckInputError, match="forbidden global"):
        build_datasets("cifar10", root=str(tmp_path))
    assert not marker.exists()


def _png(path: Path, value: int, size: int = 12) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((size, size, 3), value, dtype=np.uint8)).save(path)


def test_imagefolder_layout(tmp_path, capsys):
    for split, n in (("train", 3), ("test", 2)):
        for c, name in enumerate(["cat", "dog"]):
            for k in range(n):
                _png(tmp_path / split / name / f"{k}.png", 40 * c + k)
    build_datasets("imagefolder", root=str(tmp_path), img_size=12)
    assert capsys.readouterr().err == ""  # the images' own size: nothing to say
    ds = build_datasets("imagefolder", root=str(tmp_path), img_size=8)
    warning = capsys.readouterr().err  # resized: said, with the setting that keeps them as they are
    assert "the images are 12x12 pixels" in warning and "set data.img_size=12" in warning
    assert ds.class_names == ["cat", "dog"] and len(ds.train) == 6 and len(ds.test) == 4
    x, y, i = ds.train[4]
    assert x.shape == (3, 8, 8) and int(y) == 1 and i == 4
    with pytest.raises(DuckInputError, match="not found"):
        build_datasets("imagefolder", root=str(tmp_path / "missing"))


def test_tinyimagenet_layout(tmp_path):
    base = tmp_path / "tiny-imagenet-200"
    wnids = ["n01443537", "n01629819"]
    for c, w in enumerate(wnids):
        for k in range(2):
            _png(base / "train" / w / "images" / f"{w}_{k}.JPEG", 10 * c + k, 64)
    lines = []
    for k, w in enumerate([wnids[1], wnids[0], wnids[1]]):
        _png(base / "val" / "images" / f"val_{k}.JPEG", k, 64)
        lines.append(f"val_{k}.JPEG\t{w}\t0\t0\t63\t63")
    (base / "val" / "val_annotations.txt").write_text("\n".join(lines) + "\n")
    ds = build_datasets("tinyimagenet", root=str(tmp_path))
    assert ds.num_classes == 2 and len(ds.train) == 4 and ds.test.labels.tolist() == [1, 0, 1]
    assert ds.train[0][0].shape == (3, 64, 64)


def test_augmentations_keep_shape_and_content():
    torch.manual_seed(0)
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    y = apply_augment(x, ["crop", "flip"])
    assert y.shape == x.shape
    c = random_crop(x, pad=0)
    assert torch.equal(c, x)  # no padding: the only crop is the identity


@pytest.mark.parametrize("fraction", [0.0, 1.0, 2, float("nan")])
def test_digits_test_fraction_out_of_range_is_refused(fraction):
    with pytest.raises(DuckInputError, match="data.test_fraction must be a finite number > 0.0 and < 1.0"):
        build_datasets("digits", test_fraction=fraction)


def _cifar_batch(tmp_path: Path, obj: object, name: str = "data_batch_1") -> Path:
    _fake_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / name
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)
    return path


_GOOD = np.zeros((2, 3072), dtype=np.uint8)


@pytest.mark.parametrize("obj,match", [
    ([1, 2], "holds a list, not a dict"),
    ({b"labels": [0, 1]}, "has no 'data' entry"),
    ({b"data": _GOOD}, "has no 'labels' entry"),
    ({b"data": _GOOD, b"labels": [0, 1, 2]}, "2 images but 3 'labels'"),
    ({b"data": _GOOD, b"labels": "ab"}, "'labels' is str"),
    ({b"data": _GOOD, b"labels": None}, "'labels' is NoneType"),
    ({b"data": _GOOD, b"labels": np.zeros((2, 1), dtype=np.int64)}, "'labels' is 2-D"),
    ({b"data": _GOOD, b"labels": [1.7, 0.0]}, "'labels' is 1-D float64"),
    ({b"data": _GOOD, b"labels": [0, 10]}, r"labels \[10\] outside 0..9"),
    ({b"data": _GOOD, b"labels": [-1, 0]}, r"labels \[-1\] outside 0..9"),
    ({b"data": "xyz", b"labels": [0]}, "'data' is str"),
    ({b"data": np.full((2, 3072), 300, dtype=np.int64), b"labels": [0, 1]}, r"pixel values 300..300 outside 0..255"),
    ({b"data": np.full((2, 3072), -1, dtype=np.int16), b"labels": [0, 1]}, r"pixel values -1..-1 outside 0..255"),
    ({b"data": np.zeros((2, 3072), dtype=np.float32), b"labels": [0, 1]}, "dtype float32"),
    ({b"data": np.zeros((0, 3072), dtype=np.uint8), b"labels": []}, r"holds no images \(0 rows\)"),
    ({b"data": np.zeros((2, 100), dtype=np.uint8), b"labels": [0, 1]}, r"shape \(2, 100\)"),
])
def test_cifar_batch_structure_is_validated(tmp_path, obj, match):
    path = _cifar_batch(tmp_path, obj)
    with pytest.raises(DuckInputError, match=match) as e:
        build_datasets("cifar10", root=str(tmp_path))
    assert str(path) in str(e.value)


@pytest.mark.parametrize("obj,match", [
    ({b"other": 1}, "has no 'label_names' entry"),
    ([b"a"], "holds a list, not a dict"),
    (7, "holds a int, not a dict"),
    ({b"label_names": 5}, "'label_names' is int"),
])
def test_cifar_meta_is_validated(tmp_path, obj, match):
    path = _cifar_batch(tmp_path, obj, "batches.meta")
    with pytest.raises(DuckInputError, match=match) as e:
        build_datasets("cifar10", root=str(tmp_path))
    assert str(path) in str(e.value)


def _write_idx_raw(path: Path, arr: np.ndarray, type_code: int = 0x08, shape: tuple | None = None) -> None:
    shape = arr.shape if shape is None else shape
    header = bytes([0, 0, type_code, len(shape)]) + b"".join(int(s).to_bytes(4, "big") for s in shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(arr.dtype.newbyteorder(">")).tobytes())


def test_idx_reader_refuses_corrupt_gzip_bad_headers_and_empty_files(tmp_path):
    _fake_fashion_mnist(tmp_path)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    blob = bytearray(p.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (tmp_path / "flip.idx.gz").write_bytes(bytes(blob))
    with pytest.raises(DuckInputError, match="cannot read IDX file .*flip.idx.gz"):
        read_idx(tmp_path / "flip.idx.gz")
    _write_idx_raw(tmp_path / "huge.gz", np.zeros(4, np.uint8), shape=(2**32 - 1,) * 4)
    with pytest.raises(DuckInputError, match="truncated or corrupt"):
        read_idx(tmp_path / "huge.gz")
    _write_idx_raw(tmp_path / "mismatch.gz", np.zeros(10, np.uint8), shape=(3, 3))
    with pytest.raises(DuckInputError, match="truncated or corrupt"):
        read_idx(tmp_path / "mismatch.gz")
    (tmp_path / "hdr.idx").write_bytes(bytes([0, 0, 8, 3, 0, 0]))
    with pytest.raises(DuckInputError, match="truncated"):
        read_idx(tmp_path / "hdr.idx")
    (tmp_path / "empty.idx").write_bytes(b"")
    with pytest.raises(DuckInputError, match="empty"):
        read_idx(tmp_path / "empty.idx")
    with gzip.open(tmp_path / "empty.gz", "wb"):
        pass
    with pytest.raises(DuckInputError, match="empty"):
        read_idx(tmp_path / "empty.gz")


@pytest.mark.parametrize("split,stem,arr,match", [
    ("train", "train-labels", np.array([200] + [0] * 19, dtype=np.uint8), r"labels \[200\] outside 0..9"),
    ("test", "t10k-labels", np.array([200] + [0] * 9, dtype=np.uint8), r"labels \[200\] outside 0..9"),
    ("train", "train-labels", np.array([-1] + [0] * 19, dtype=np.int8), r"labels \[-1\] outside 0..9"),
    ("train", "train-images", np.zeros((20, 10, 10), np.uint8), r"shape \(10, 10\).*28x28"),
    ("train", "train-images", np.zeros((20, 1, 28, 28), np.uint8), "28x28"),
    ("train", "train-images", np.zeros((20, 28, 28), np.float32), "float32 pixels.*unsigned bytes"),
    ("train", "train-images", np.zeros((20, 28, 28), np.int32), "int32 pixels"),
])
def test_fashion_mnist_refuses_bad_labels_shapes_and_dtypes(tmp_path, split, stem, arr, match):
    _fake_fashion_mnist(tmp_path)
    code = {np.dtype(np.uint8): 0x08, np.dtype(np.int8): 0x09, np.dtype(np.float32): 0x0D,
            np.dtype(np.int32): 0x0C}[arr.dtype]
    _write_idx_raw(tmp_path / f"{stem}-idx{3 if 'images' in stem else 1}-ubyte.gz", arr, code)
    with pytest.raises(DuckInputError, match=match):
        build_datasets("fashion_mnist", root=str(tmp_path))


def _tiny_imagefolder(root: Path) -> None:
    for split in ("train", "test"):
        for c, name in enumerate(["cat", "dog"]):
            _png(root / split / name / "0.png", 40 * c)


@pytest.mark.parametrize("kw,match", [
    ({"in_chans": 0}, "data.in_chans=0 must be 1 .* or 3"),
    ({"in_chans": 2}, "data.in_chans=2"),
    ({"in_chans": 4}, "data.in_chans=4"),
    ({"in_chans": "abc"}, "data.in_chans='abc'"),
    ({"img_size": 0}, "data.img_size=0 must be an integer >= 1"),
    ({"img_size": -4}, "data.img_size=-4"),
    ({"img_size": "abc"}, "data.img_size='abc'"),
    ({"img_size": 100000}, "data.img_size=100000 is too large"),
    ({"mean": [0.5, 0.5]}, r"data.mean=\[0.5, 0.5\] has 2 values; data.in_chans=3 needs 3"),
    ({"mean": ["a", "b", "c"]}, r"data.mean\[0\] must be a finite number, got 'a'"),
    ({"mean": [float("nan"), 0.5, 0.5]}, r"data.mean\[0\] must be a finite number"),
    ({"mean": 0.5}, "data.mean=0.5 must be a list of 3 numbers"),
    ({"std": [0, 0, 0]}, r"data.std\[0\] must be a finite number > 0"),
    ({"std": [0.2, -1, 0.2]}, r"data.std\[1\] must be a finite number > 0"),
    ({"in_chans": 1, "std": [0.2, 0.2, 0.2]}, "data.in_chans=1 needs 1"),
    ({"test_split": "train"}, "name the same folder .* every test sample would be a training sample"),
    ({"test_split": "./train/"}, "name the same folder"),
])
def test_imagefolder_options_are_validated(tmp_path, kw, match):
    _tiny_imagefolder(tmp_path)
    with pytest.raises(DuckInputError, match=match):
        build_datasets("imagefolder", root=str(tmp_path), **kw)


def test_imagefolder_grey_defaults_and_decompression_bomb(tmp_path, monkeypatch):
    _tiny_imagefolder(tmp_path)
    ds = build_datasets("imagefolder", root=str(tmp_path), img_size=4, in_chans=1, mean=[0.5], std=[0.25])
    assert ds.train[0][0].shape == (1, 4, 4)
    ds = build_datasets("imagefolder", root=str(tmp_path), img_size=4)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 10)  # a 12x12 image stands in for a 20000x20000 one
    with pytest.raises(DuckInputError, match=r"image .*0.png is too large to decode safely"):
        ds.train[0]


def _tiny_layout(tmp_path: Path) -> Path:
    base = tmp_path / "tiny-imagenet-200"
    for w in ("n01", "n02"):
        _png(base / "train" / w / "images" / f"{w}_0.JPEG", 1, 8)
    _png(base / "val" / "images" / "val_0.JPEG", 1, 8)
    return base / "val" / "val_annotations.txt"


@pytest.mark.parametrize("content,match", [
    (b"", "lists no validation images; expected one tab-separated line"),
    (b"\n\n", "lists no validation images"),
    (b"val_0.JPEG n01 0 0 7 7\n", r"line 1: .* is not in the expected format \(one tab-separated line"),
    (b"val_0.JPEG\t\xff\xfe\n", "is not UTF-8 text.*tab-separated"),
    (b"../../../../etc/passwd\tn01\t0\t0\t7\t7\n", "is not a file name inside"),  # was read outside val/images
])
def test_tinyimagenet_bad_annotations(tmp_path, content, match):
    ann = _tiny_layout(tmp_path)
    ann.write_bytes(content)
    with pytest.raises(DuckInputError, match=match) as e:
        build_datasets("tinyimagenet", root=str(tmp_path))
    assert str(ann) in str(e.value)
    with pytest.raises(DuckInputError, match="data.img_size=0"):
        build_datasets("tinyimagenet", root=str(tmp_path), img_size=0)


@pytest.mark.parametrize("name", ["digits", "synthetic"])
def test_augment_is_kept_for_every_data_set(name):
    assert build_datasets(name, augment=["flip"]).augment == ["flip"]  # was dropped by the builders' **_
    assert build_datasets(name, augment=None).augment == [] and build_datasets(name).augment == []


def test_augment_null_means_none_even_where_the_default_augments(tmp_path):
    _fake_cifar(tmp_path)
    assert build_datasets("cifar10", root=str(tmp_path), augment=None).augment == []  # was replaced by crop+flip
    assert build_datasets("cifar10", root=str(tmp_path), augment=["flip"]).augment == ["flip"]


@pytest.mark.parametrize("name", ["digits", "synthetic", "cifar10", "tinyimagenet", "imagefolder", "fashion_mnist"])
@pytest.mark.parametrize("augment,match", [
    (["rotate"], r"unknown augmentation\(s\) \['rotate'\] in data.augment; choose from \['crop', 'flip'\]"),
    ("flip", r"data.augment='flip' must be a list of augmentation names .* e.g. data.augment=\[crop,flip\]"),
])
def test_bad_augment_is_refused_before_reading_files(name, augment, match):
    kw = {} if name in ("digits", "synthetic") else {"root": "/nonexistent"}
    with pytest.raises(DuckInputError, match=match):
        build_datasets(name, augment=augment, **kw)


def test_every_data_config_file_is_a_preset_of_its_settings_class():
    """conf/data/NAME.yaml declares exactly its data set's settings fields (but name and subset, which the job
    reads), in their order, with the class's defaults as its values; the file's values pass the rules."""
    import dataclasses

    from omegaconf import OmegaConf

    from duck.data.registry import dataset_settings, list_datasets
    from duck.schema import plain

    confs = sorted((Path(__file__).parents[1] / "conf" / "data").glob("*.yaml"))
    assert len(confs) == 7 and sorted(c.stem for c in confs) == list_datasets()
    for conf in confs:
        raw = OmegaConf.to_container(OmegaConf.load(conf), resolve=True)  # ${oc.env:CIFAR_ROOT,null}: unset here
        name = raw.pop("name")
        # subset: taken by the pipeline (duck.pipeline.job.build_data) for the in-memory data sets, not the builder
        assert ("subset" in raw) == (name in ("digits", "fashion_mnist", "cifar10", "cifar100")), conf
        raw.pop("subset", None)
        cls = dataset_settings(name)
        assert cls.dataset == name
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        assert list(raw) == list(defaults) and raw == plain(defaults), conf
        expected = {k: (list(v) if isinstance(v, tuple) else v) for k, v in raw.items()}
        if name == "imagefolder":  # null normalisation: ImageNet's, per channel, filled in when parsed
            expected |= {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225)}
        assert dict(cls.parse(raw)) == expected


def data_tables() -> str:
    """Every data set's options, one table per data set, for docs/configuration.md."""
    from duck.data.registry import dataset_settings, list_datasets
    from duck.report.tables import markdown_table

    return "\n\n".join(f"`data={name}`:\n\n" + markdown_table(
        ["option", "default", "allowed", "meaning"],
        [(f"`{key}`", f"`{default}`", allowed, doc) for key, default, allowed, doc in dataset_settings(name).describe()])
        for name in list_datasets())


def test_docs_data_tables_are_the_settings_classes():
    block = re.search(r"<!-- data tables: begin -->\n(.*?)\n<!-- data tables: end -->",
                      (Path(__file__).parents[1] / "docs" / "configuration.md").read_text(), re.S)
    assert block and block.group(1) == data_tables()


@pytest.mark.parametrize("name", ["digits", "synthetic", "cifar10", "cifar100", "fashion_mnist", "imagefolder",
                                  "tinyimagenet"])
def test_unknown_data_option_is_refused_naming_the_valid_ones(name):
    with pytest.raises(DuckInputError, match=rf"unknown option\(s\) data.bar, data.foo for data set '{name}'; "
                                             r"its options are data\..*data.augment"):
        build_datasets(name, foo=1, bar=2)


@pytest.mark.parametrize("name,kw,match", [
    ("digits", {"split_seed": -1}, "data.split_seed=-1 must be an integer >= 0"),
    ("digits", {"split_seed": 1.5}, "data.split_seed=1.5 must be an integer >= 0"),
    ("digits", {"split_seed": True}, "data.split_seed=True must be an integer"),
    ("digits", {"split_seed": 2**32}, r"data.split_seed=4294967296 is too large; .* \[0, 2\^32 - 1\]"),
    ("digits", {"test_fraction": 0.999}, r"data.test_fraction=0.999 splits the 1797 images into 1 train / 1796 test, "
                                         r"which leaves some of the 10 classes without a training image; use a value "
                                         r"between 0.006 and 0.994"),
    ("digits", {"test_fraction": 0.004}, "without a test image; use a value between 0.006 and 0.994"),
    ("synthetic", {"n_train": 0}, "data.n_train=0 must be an integer >= 1"),
    ("synthetic", {"n_train": 3}, "data.n_train=3 is below data.num_classes=4: every class needs an image"),
    ("synthetic", {"n_test": 2.5}, "data.n_test=2.5 must be an integer >= 1"),
    ("synthetic", {"num_classes": 1}, "data.num_classes=1 must be an integer >= 2"),
    ("synthetic", {"img_size": 0}, "data.img_size=0 must be an integer >= 1"),
    ("synthetic", {"img_size": 100000}, "data.img_size=100000 is too large"),
    ("synthetic", {"in_chans": 0}, "data.in_chans=0 must be an integer >= 1"),
    ("synthetic", {"noise": float("nan")}, "data.noise must be a finite number >= 0.0, got nan"),
    ("synthetic", {"noise": -1}, "data.noise must be a finite number >= 0.0, got -1"),
    ("synthetic", {"seed": -3}, "data.seed=-3 must be an integer >= 0"),
    ("synthetic", {"n_train": 10**8, "img_size": 64}, "float32 values .* use fewer or smaller images"),
    ("cifar10", {"root": "/nonexistent", "download": "yes"}, "data.download='yes' must be true or false"),
    ("cifar10", {"root": 123}, "data.root=123 must be a folder path"),
    ("fashion_mnist", {"root": 123}, "data.root=123 must be a folder path"),
    ("imagefolder", {"root": "/nonexistent", "train_split": 2019}, "data.train_split=2019 must be a folder path"),
    ("imagefolder", {"root": "/nonexistent", "test_split": None}, "data.test_split=None must name the split's folder"),
])
def test_data_numbers_and_paths_are_checked_by_name(name, kw, match):
    with pytest.raises(DuckInputError, match=match):
        build_datasets(name, **kw)


def test_synthetic_accepts_the_smallest_valid_settings():
    ds = build_datasets("synthetic", n_train=2, n_test=2, num_classes=2, img_size=1, in_chans=1, noise=0, seed=0)
    assert sorted(ds.train.labels.tolist()) == [0, 1] and torch.isfinite(ds.train.tensors()[0]).all()


def test_imagefolder_skips_hidden_folders_and_refuses_empty_training_classes(tmp_path):
    """.ipynb_checkpoints / __MACOSX became classes (every label shifted by one) and checkpoint copies inside
    class folders became extra samples; an empty training class gave labels the model never saw."""
    _tiny_imagefolder(tmp_path)
    _png(tmp_path / "train" / ".ipynb_checkpoints" / "x.png", 9)
    _png(tmp_path / "train" / "__MACOSX" / "x.png", 9)
    _png(tmp_path / "train" / "cat" / ".ipynb_checkpoints" / "0-checkpoint.png", 9)
    ds = build_datasets("imagefolder", root=str(tmp_path), img_size=8)
    assert ds.class_names == ["cat", "dog"] and len(ds.train) == 2 and ds.train.labels.tolist() == [0, 1]
    (tmp_path / "train" / "empty").mkdir()
    with pytest.raises(DuckInputError, match=r"class folder .*train/empty holds no image files"):
        build_datasets("imagefolder", root=str(tmp_path), img_size=8)


def test_wide_images_are_scaled_not_clipped(tmp_path):
    """Pillow's convert('L') clips a 16-bit image (a 0..65535 ramp became 0, 255, 255, ...)."""
    for split in ("train", "test"):
        path = tmp_path / split / "a" / "0.png"
        path.parent.mkdir(parents=True)
        Image.fromarray(np.linspace(0, 65535, 64).reshape(8, 8).astype(np.uint16)).save(path)
    ds = build_datasets("imagefolder", root=str(tmp_path), img_size=8, in_chans=1, mean=[0.0], std=[1.0])
    x = ds.train[0][0].flatten().numpy()
    np.testing.assert_allclose(x, np.round(np.linspace(0, 255, 64)) / 255, atol=1e-6)


def test_idx_headers_with_absurd_dimensions_and_empty_splits_are_refused(tmp_path):
    """ndim 100 was a numpy ValueError traceback; 0 training images failed later inside the DataLoader."""
    bad = tmp_path / "bad.gz"
    bad.write_bytes(gzip.compress(bytes([0, 0, 8, 100]) + b"\0" * 400))
    with pytest.raises(DuckInputError, match="declares 100 dimensions"):
        read_idx(bad)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", np.zeros((0, 28, 28)))
    _write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(0))
    with pytest.raises(DuckInputError, match=r"holds no images \(0 rows\)"):
        fashion_mnist_arrays(tmp_path, "train")


def test_cifar_class_names_must_match_the_class_count(tmp_path):
    _fake_cifar(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "batches.meta", "wb") as f:
        pickle.dump({b"label_names": [b"a", b"b"]}, f, protocol=2)
    with pytest.raises(DuckInputError, match="names 2 classes, cifar10 has 10"):
        build_datasets("cifar10", root=str(tmp_path))


def test_tinyimagenet_training_folders_must_match_wnids(tmp_path):
    """wnids.txt (the archive's class list) was ignored: a missing or extra class folder shifted the labels."""
    ann = _tiny_layout(tmp_path)
    ann.write_text("val_0.JPEG\tn01\t0\t0\t7\t7\n")
    (ann.parents[1] / "wnids.txt").write_text("n01\nn02\n")
    assert build_datasets("tinyimagenet", root=str(tmp_path), img_size=8).class_names == ["n01", "n02"]
    (ann.parents[1] / "wnids.txt").write_text("n01\nn02\nn03\n")
    with pytest.raises(DuckInputError, match=r"listed classes without a folder \['n03'\]"):
        build_datasets("tinyimagenet", root=str(tmp_path), img_size=8)
