"""index.csv (duck.data.index) for built-in and user data sets, the ImageFolder sample order (torchvision's),
and the ``duck-data index`` command."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import written_files
from sklearn.datasets import load_digits
from test_data_user import GREY, png_tree
from torch.utils.data import TensorDataset
from torchvision import datasets

from duck.data.index import INDEX_HEADER, index_csv, write_index
from duck.data.registry import build_datasets
from duck.data.user import as_splits
from duck.errors import DuckInputError


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == INDEX_HEADER
        return list(reader)


def test_digits_index_names_the_load_digits_row(digits, tmp_path):
    path = write_index(digits, tmp_path / "index.csv")
    rows = _rows(path)
    assert len(rows) == 1347 and [int(r["index"]) for r in rows] == list(range(1347))
    bunch = load_digits()
    for i in (0, 17, 1346):
        dataset, split, row = rows[i]["source"].split(":")
        assert (dataset, split) == ("digits", "train")
        assert int(rows[i]["label"]) == bunch.target[int(row)] == int(digits.train.labels[i])
        assert rows[i]["class_name"] == str(bunch.target[int(row)])
        x = digits.train.images[i, 0].numpy()  # stored in [0, 1]
        assert np.allclose(x, bunch.images[int(row)] / 16.0)
    test_rows = _rows(write_index(digits, tmp_path / "test.csv", split="test"))
    assert len(test_rows) == 450 and test_rows[0]["source"].startswith("digits:test:")
    sources = {r["source"].split(":")[2] for r in rows} | {r["source"].split(":")[2] for r in test_rows}
    assert len(sources) == 1797  # every load_digits row once, in one split


def test_synthetic_index_is_the_position_with_class_names(synthetic):
    rows = list(csv.reader(index_csv(synthetic, "test").splitlines()))
    assert rows[0] == list(INDEX_HEADER) and len(rows) == 121
    label = int(synthetic.test.labels[5])
    assert rows[6] == ["5", "synthetic:test:5", str(label), f"class{label}"]


def test_imagefolder_order_and_index_follow_torchvision_with_nested_folders(tmp_path):
    png_tree(tmp_path, {"train": 3, "test": 2}, nested=True)
    ours = build_datasets("imagefolder", root=str(tmp_path), img_size=8)
    for split in ("train", "test"):
        reference = datasets.ImageFolder(str(tmp_path / split))
        rows = _rows(write_index(ours, tmp_path / f"{split}.csv", split))
        assert [r["source"] for r in rows] == [p for p, _ in reference.samples]
        assert [int(r["label"]) for r in rows] == reference.targets
        assert [r["class_name"] for r in rows] == [reference.classes[t] for t in reference.targets]
    # torchvision lists <class>/b.png, <class>/c.png before <class>/a_sub/0.png (a plain recursive sort did not)
    assert [Path(p).relative_to(tmp_path / "train").as_posix() for p in map(str, ours.train.files[:3])] == \
        ["cat/b.png", "cat/c.png", "cat/a_sub/0.png"]


def test_user_data_index_lists_files_or_positions(tmp_path):
    png_tree(tmp_path, {"train": 2})
    folder = datasets.ImageFolder(str(tmp_path / "train"), transform=GREY)
    rows = _rows(write_index(as_splits(folder, name="pets"), tmp_path / "index.csv"))
    assert [r["source"] for r in rows] == [p for p, _ in folder.samples]
    assert [r["class_name"] for r in rows] == ["cat", "cat", "dog", "dog", "emu", "emu"]
    tensors = as_splits(TensorDataset(torch.randn(4, 1, 2, 2), torch.tensor([1, 0, 1, 0])), name="mine")
    assert index_csv(tensors).splitlines()[1:3] == ["0,mine:train:0,1,1", "1,mine:train:1,0,0"]
    with pytest.raises(DuckInputError, match="data set mine has no test split; use split=train"):
        index_csv(tensors, "test")
    with pytest.raises(DuckInputError, match="split='val' must be one of train, test"):
        index_csv(tensors, "val")


def test_paths_with_commas_are_quoted(tmp_path):
    for name in ("a,b", "c"):
        png_tree(tmp_path / name, {"train": 1, "test": 1})
    data = build_datasets("imagefolder", root=str(tmp_path / "a,b"), img_size=8)
    rows = _rows(write_index(data, tmp_path / "index.csv"))
    assert rows[0]["source"] == str(data.train.files[0]) and "a,b" in rows[0]["source"]


def test_duck_data_index_command(run_cli):
    code, out, err, run_dir = run_cli("data", "index", "data=synthetic", "data.n_train=40", "data.n_test=20")
    assert code == 0, err
    assert written_files(run_dir) == {"index.csv"} and f"wrote {run_dir / 'index.csv'}" in out
    rows = _rows(run_dir / "index.csv")
    assert len(rows) == 40 and rows[3]["source"] == "synthetic:train:3"
    code, out, err, run_dir = run_cli("data", "data=digits", "split=both")  # `index` is the default command
    assert code == 0, err
    assert written_files(run_dir) == {"index_train.csv", "index_test.csv"}
    assert len(_rows(run_dir / "index_test.csv")) == 450


@pytest.mark.parametrize("args,match", [
    (("index", "data=synthetic", "split=val"), "error: split='val' must be train, test or both"),
    (("list", "data=synthetic"), "error: unknown duck-data command 'list'; choose one of: index"),
    (("index", "data=imagefolder"), "error: data.root is not set for imagefolder"),
])
def test_duck_data_bad_input_exits_with_one_line(run_cli, args, match):
    code, _, err, run_dir = run_cli("data", *args)
    assert code == 2 and match in err and len(err.strip().splitlines()) == 1
    assert written_files(run_dir) == set()
