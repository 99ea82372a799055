"""``data.*`` and ``model.*`` options through ``duck-train``: augmentation reaches the training, and unknown keys
or bad numbers exit with one ``error:`` line and no output (unit checks: tests/test_data.py, tests/test_models.py);
``duck-data index`` on an ImageFolder lists its files without opening them (tests/test_data_index.py: the rows)."""

from __future__ import annotations

import csv
import re

import numpy as np
import pytest
import torch
from conftest import SYNTH_ARGS, written_files
from PIL import Image

from duck.checkpoint import load_checkpoint
from duck.data.registry import build_datasets

BASE = ("progress=false", "trainer=cpu")  # SYNTH_ARGS without its data / model settings


def test_augment_changes_training_on_synthetic(run_cli):
    weights = []
    for augment in ("[]", "[flip]"):
        code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1", f"data.augment={augment}")
        assert code == 0, err
        weights.append(load_checkpoint(run_dir / "model.ckpt")[0])
    plain, flipped = weights
    assert any(not torch.equal(plain[k], flipped[k]) for k in plain)  # data.augment was ignored for synthetic


@pytest.mark.parametrize("args,match", [
    ((*SYNTH_ARGS, "data.augment=[rotate]"), "error: unknown augmentation(s) ['rotate'] in data.augment; choose from"),
    ((*SYNTH_ARGS, "+data.foo=1"), "error: unknown option(s) data.foo for data set 'synthetic'; its options are data.n_train,"),
    (("data=digits", *BASE, "+data.foo=1"), "its options are data.test_fraction, data.split_seed, data.augment"),
    (("data=digits", *BASE, "data.split_seed=1.5"), "error: data.split_seed=1.5 must be an integer >= 0"),
    (("data=digits", *BASE, "data.test_fraction=0.999"), "use a value between 0.006 and 0.994"),
    ((*SYNTH_ARGS, "data.n_train=0"), "error: data.n_train=0 must be an integer >= 1"),
    ((*SYNTH_ARGS, "data.noise=nan"), "error: data.noise must be a finite number >= 0.0, got nan"),
    ((*SYNTH_ARGS, "data.img_size=1"), "error: smallcnn needs images of at least 2x2 pixels"),
    ((*SYNTH_ARGS, "model.width=1.5"), "error: model.width=1.5 must be an integer >= 1"),
    ((*SYNTH_ARGS, "+model.drop_rate=2"), "error: model.drop_rate must be a finite number >= 0.0 and < 1.0, got 2"),
    ((*SYNTH_ARGS, "+model.foo=1"), "error: model.foo=1 is not an option of model 'smallcnn'; its options are model.width"),
    ((*SYNTH_ARGS, "+model.cifar_stem=true"), "error: model.cifar_stem=True does not apply to smallcnn"),
    (("data=synthetic", "model=resnet18", *BASE, "+model.foo=1"), "error: model.foo=1 is not an option of model 'resnet18'"),
])
def test_bad_data_and_model_options_exit_cleanly(run_cli, args, match):
    code, _, err, run_dir = run_cli("train", *args)
    assert code == 2 and match in err, err
    assert err.strip().count("\n") == 0  # one line
    assert written_files(run_dir) == set()


def _pets(root, size: int = 16) -> None:
    """An ImageFolder of ``size``x``size`` RGB PNGs: 3 training and 1 test image for each of cat and dog."""
    for split, n in (("train", 3), ("test", 1)):
        for c, name in enumerate(("cat", "dog")):
            for k in range(n):
                path = root / split / name / f"{k}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(np.full((size, size, 3), 40 * c + k, dtype=np.uint8)).save(path)


@pytest.mark.parametrize("size_args", [(), ("data.img_size=64",)])  # the default (32) and another, both not 16
def test_duck_data_index_lists_image_files_without_opening_them(run_cli, tmp_path, monkeypatch, capsys, size_args):
    root = tmp_path / "pets"
    _pets(root)
    opened, real_open = [], Image.open
    monkeypatch.setattr(Image, "open", lambda fp, *a, **kw: opened.append(fp) or real_open(fp, *a, **kw))
    code, out, err, run_dir = run_cli("data", "index", "data=imagefolder", f"data.root={root}", *size_args)
    assert code == 0, err
    assert "resize" not in err and "warning" not in err, err  # indexing resizes nothing: nothing to warn about
    assert opened == []  # paths and labels only: no image is decoded
    # the counts, and no CxHxW (3x32x32 was data.img_size, not the images' 16x16 on disk)
    assert out.splitlines() == ["imagefolder: 6 train / 2 test image files, 2 classes", f"wrote {run_dir / 'index.csv'}"]
    with open(run_dir / "index.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["index"], r["source"], r["label"], r["class_name"]) for r in rows] == [
        (str(i), str(root / "train" / name / f"{k}.png"), str(c), name)
        for i, (c, name, k) in enumerate((c, name, k) for c, name in enumerate(("cat", "dog")) for k in range(3))]
    build_datasets("imagefolder", root=str(root))  # a job that loads them is still told they are resized
    warning = capsys.readouterr().err
    assert "the images are 16x16 pixels" in warning and "set data.img_size=16" in warning


def test_duck_data_index_summary_of_data_in_memory_keeps_its_shape(run_cli):
    code, out, err, _ = run_cli("data", "index", "data=synthetic", "data.n_train=40", "data.n_test=20")
    assert code == 0 and err == "", err
    assert re.fullmatch(r"synthetic: 40 train / 20 test, \d+ classes, \dx\d+x\d+", out.splitlines()[0]), out
