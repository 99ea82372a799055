"""User data sets (duck.data.user): a torchvision ImageFolder with its own transforms, a TensorDataset, a
Subset, a plain Dataset without declared labels, as DatasetSplits that the loaders and metrics take."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch.utils.data import Dataset, Subset, TensorDataset
from torchvision import datasets, transforms

from duck.data.base import DatasetSplits
from duck.data.loaders import make_loader
from duck.data.scenarios import build_scenario
from duck.data.user import UserDataset, as_splits
from duck.errors import DuckInputError
from duck.metrics import metrics_record, predict_logits, split_accuracies

CLASSES = ["cat", "dog", "emu"]
GREY = transforms.Compose([transforms.Grayscale(), transforms.ToTensor(), transforms.Normalize((0.5,), (0.25,))])
RGB = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.4, 0.5, 0.6), (0.2, 0.25, 0.3))])


def png_tree(root: Path, per_class: dict[str, int], size: int = 8, nested: bool = False, seed: int = 0) -> Path:
    """``root/<split>/<class>/*.png`` of random ``size``x``size`` RGB images (``per_class[split]`` per class);
    with ``nested``, a class's first image sits in a sub-folder ``<class>/a_sub/`` (listed after the files
    directly in ``<class>/`` by torchvision, before ``<class>/b.png`` by a plain recursive sort)."""
    rng = np.random.default_rng(seed)
    for split, n in per_class.items():
        for name in CLASSES:
            for k in range(n):
                path = root / split / name / (f"a_sub/{k}.png" if nested and k == 0 else f"{chr(97 + k)}.png")
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(path)
    return root


@pytest.fixture
def folders(tmp_path: Path) -> Path:
    return png_tree(tmp_path, {"train": 10, "test": 4})  # 30 train / 12 test PNGs


def _model(in_chans: int, size: int, num_classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_chans * size * size, num_classes)).eval()


class Counting(Dataset):
    """A data set without ``targets``: every label is only known by reading the sample."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, extra: bool = False) -> None:
        self.x, self.y, self.extra, self.reads = x, y, extra, 0

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple:
        self.reads += 1
        return (self.x[i], int(self.y[i]), "meta") if self.extra else (self.x[i], int(self.y[i]))


def test_imagefolder_labels_classes_and_files_come_from_torchvision(folders):
    train = datasets.ImageFolder(folders / "train", transform=GREY)
    ds = UserDataset(train)
    assert ds.labels.tolist() == train.targets and ds.labels.dtype == np.int64
    assert ds.class_names == CLASSES and ds.files == [p for p, _ in train.samples]
    x, y, i = ds[13]
    ref_x, ref_y = train[13]
    assert torch.equal(x, ref_x) and x.dtype == torch.float32 and int(y) == ref_y and i == 13


@pytest.mark.parametrize("transform,chans", [(GREY, 1), (RGB, 3)])
def test_imagefolder_splits_through_loaders_and_metrics(folders, transform, chans):
    train = datasets.ImageFolder(folders / "train", transform=transform)
    test = datasets.ImageFolder(folders / "test", transform=transform)
    data = as_splits(train, test, name="pets")
    assert (data.num_classes, data.in_chans, data.img_size, data.class_names) == (3, chans, 8, CLASSES)
    assert data.augment == [] and data.describe() == f"pets: 30 train / 12 test, 3 classes, {chans}x8x8"
    x, y, idx = next(iter(make_loader(data.train, 7)))
    assert x.shape == (7, chans, 8, 8) and y.dtype == torch.int64 and idx.tolist() == list(range(7))
    model = _model(chans, 8)
    logits, labels, ids = predict_logits(model, data.test, batch_size=5)
    direct = model(torch.stack([test[i][0] for i in range(len(test))]))
    assert torch.allclose(logits, direct, atol=1e-6) and labels.tolist() == test.targets
    assert ids.tolist() == list(range(12))
    sc = build_scenario("class_removal", data.train.labels, data.test.labels, data.num_classes, forget_classes=["dog"],
                        class_names=data.class_names)
    acc = split_accuracies(model, data, sc, batch_size=4)
    pred = direct.argmax(1)
    t = torch.as_tensor(test.targets)
    assert acc["test"] == pytest.approx(float((pred == t).float().mean()))
    assert acc["test_forget"] == pytest.approx(float((pred[t == 1] == 1).float().mean()))
    assert set(acc) == {"test", "train_retain", "train_forget", "test_retain", "test_forget"}


def test_fingerprint_stats_the_files_and_hashes_the_transform(folders):
    train = datasets.ImageFolder(folders / "train", transform=GREY)
    first = as_splits(train).fingerprint()
    assert as_splits(datasets.ImageFolder(folders / "train", transform=GREY)).fingerprint() == first
    assert as_splits(datasets.ImageFolder(folders / "train", transform=RGB)).fingerprint() != first
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(folders / "train" / "dog" / "b.png")
    assert as_splits(datasets.ImageFolder(folders / "train", transform=GREY)).fingerprint() != first


def test_tensor_dataset_labels_without_a_pass_and_content_in_the_fingerprint():
    x, y = torch.randn(24, 1, 8, 8), torch.arange(24) % 4
    data = as_splits(TensorDataset(x, y), TensorDataset(x[:8], y[:8]), name="tensors")
    assert data.train.labels.tolist() == y.tolist() and data.num_classes == 4
    assert data.class_names == ["0", "1", "2", "3"] and (data.in_chans, data.img_size) == (1, 8)
    model = _model(1, 8, 4)
    logits, labels, _ = predict_logits(model, data.train, batch_size=5)
    assert torch.allclose(logits, model(x), atol=1e-6) and labels.tolist() == y.tolist()
    other = x.clone()
    other[0, 0, 0, 0] += 1
    assert as_splits(TensorDataset(other, y)).fingerprint() != as_splits(TensorDataset(x, y)).fingerprint()
    # uint8 inputs and numpy arrays become float32 with their values kept
    u8 = UserDataset(TensorDataset(torch.full((2, 1, 2, 2), 7, dtype=torch.uint8), torch.tensor([0, 1])))
    assert u8[0][0].dtype == torch.float32 and u8[0][0].max() == 7
    with pytest.raises(DuckInputError, match=r"TensorDataset holds 1 tensor\(s\); give the inputs and their labels"):
        UserDataset(TensorDataset(x))


def test_dataset_without_targets_is_read_once_and_extras_are_ignored():
    x, y = torch.randn(12, 3, 4, 4), torch.tensor([2, 0, 1] * 4)
    raw = Counting(x, y, extra=True)
    ds = UserDataset(raw)
    assert raw.reads == 12 and ds.labels.tolist() == y.tolist() and ds.classes is None
    xs, ys, ids = next(iter(make_loader(ds, 12)))
    assert torch.equal(xs, x) and ys.tolist() == y.tolist() and ids.tolist() == list(range(12))
    assert raw.reads == 24  # one read per sample for the labels, one per batch fetch


def test_subset_uses_the_base_labels_at_its_indices(folders):
    train = datasets.ImageFolder(folders / "train", transform=GREY)
    sub = Subset(train, [25, 3, 14, 0])
    data = as_splits(sub)
    assert data.train.labels.tolist() == [train.targets[i] for i in (25, 3, 14, 0)] == [2, 0, 1, 0]
    assert data.train.files == [train.samples[i][0] for i in (25, 3, 14, 0)] and data.class_names == CLASSES
    assert data.extra["source_index_train"].tolist() == [25, 3, 14, 0]
    raw = Counting(torch.randn(10, 1, 2, 2), torch.arange(10) % 2)
    raw.targets = raw.y.tolist()
    nested = UserDataset(Subset(Subset(raw, [9, 8, 7, 6]), [1, 3]))
    assert raw.reads == 0 and nested.labels.tolist() == [0, 0] and nested.source_positions.tolist() == [8, 6]


def test_pil_images_are_refused_with_the_totensor_hint(folders):
    with pytest.raises(DuckInputError, match=r"sample 0 of the train data set has input x that is a PIL image, not a "
                                             r"tensor of numbers; add transforms.ToTensor\(\)"):
        as_splits(datasets.ImageFolder(folders / "train"))
    with pytest.raises(DuckInputError, match=r"input x that is a list.*ToTensor"):
        UserDataset(Counting([[1.0, 2.0]] * 2, torch.tensor([0, 1])))[0]


class Pairs(Dataset):
    def __init__(self, items: list, **attrs: object) -> None:
        self.items = items
        self.__dict__.update(attrs)

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> object:
        return self.items[i]


X = torch.zeros(1, 2, 2)


@pytest.mark.parametrize("dataset,match", [
    (Pairs([X, X]), r"sample 0 of the user data set is a Tensor, not a pair \(x, y\)"),
    (Pairs([(X, -1), (X, 0)]), r"sample 0 of the user data set has label y=-1; labels must be integer class ids"),
    (Pairs([(X, 0.5), (X, 0)]), r"label y=0.5"),
    (Pairs([(X, 0), (X, 1)], targets=[0, 1, 1]), r"dataset.targets of the user data set holds 3 labels but the data "
                                                 r"set has 2 samples"),
    (Pairs([(X, 0), (X, 1)], targets=torch.eye(2)), r"dataset.targets of the user data set has shape \(2, 2\); give "
                                                     r"one integer class label per sample"),
    (Pairs([(X, 0), (X, 1)], labels=np.array([0, -2])), r"holds negative labels \[-2\]"),
    (Pairs([(X, 0), (X, 1)], targets=["a", "b"]), r"dataset.targets of the user data set must hold integer ids"),
    (Pairs([(X, 0), (X, 3)], classes=["a", "b"]), r"has label 3 but dataset.classes names only 2 classes"),
    (Pairs([(X, 0), (X, 1)], classes=["a", "a"]), r"dataset.classes names \['a'\] more than once"),
    (Pairs([]), "the user data set is empty"),
])
def test_bad_user_data_sets_are_refused_in_one_line(dataset, match):
    with pytest.raises(DuckInputError, match=match) as err:
        UserDataset(dataset)
    assert "\n" not in str(err.value)


def test_a_sample_whose_label_differs_from_the_declared_one_is_refused():
    ds = UserDataset(Pairs([(X, 0), (X, 0)], targets=[0, 1]))
    with pytest.raises(DuckInputError, match=r"sample 1 of the user data set has label 0 but dataset.targets gives 1 "
                                             r"\(a target_transform"):
        ds[1]


def test_as_splits_checks_classes_shapes_and_test_labels(folders):
    x, y = torch.randn(6, 1, 4, 4), torch.tensor([0, 1, 2] * 2)
    train = TensorDataset(x, y)
    with pytest.raises(DuckInputError, match=r"test data set has label 5 but the train data set has 3 classes"):
        as_splits(train, TensorDataset(x[:2], torch.tensor([0, 5])))
    assert as_splits(train, TensorDataset(x[:2], torch.tensor([0, 5])), num_classes=6).num_classes == 6
    with pytest.raises(DuckInputError, match=r"num_classes=2 but the train data set has label 2"):
        as_splits(train, num_classes=2)
    with pytest.raises(DuckInputError, match=r"test inputs have shape \(1, 5, 5\) but train inputs \(1, 4, 4\)"):
        as_splits(train, TensorDataset(torch.randn(2, 1, 5, 5), torch.tensor([0, 1])))
    with pytest.raises(DuckInputError, match="holds a single class"):
        as_splits(TensorDataset(x, torch.zeros(6, dtype=torch.long)))
    with pytest.raises(DuckInputError, match=r"name=''"):
        as_splits(train, name="")
    (folders / "test" / "emu").rename(folders / "test" / "yak")  # torchvision would relabel nothing: ids would shift
    with pytest.raises(DuckInputError, match=r"test data set's classes .* differ from the train data set's"):
        as_splits(datasets.ImageFolder(folders / "train", transform=GREY),
                  datasets.ImageFolder(folders / "test", transform=GREY))
    splits = as_splits(train)
    assert isinstance(splits, DatasetSplits) and as_splits(splits.train).train is splits.train  # passes through


def test_no_test_split_gives_training_accuracies_only():
    x, y = torch.randn(30, 1, 4, 4), torch.arange(30) % 3
    data = as_splits(TensorDataset(x, y))
    assert data.test is None and data.describe() == "user: 30 train / no test split, 3 classes, 1x4x4"
    assert data.fingerprint() != as_splits(TensorDataset(x, y), TensorDataset(x, y)).fingerprint()
    model = _model(1, 4)
    assert set(split_accuracies(model, data, None)) == {"train"}
    sc = build_scenario("class_removal", data.train.labels, None, 3, forget_classes=[1])
    assert sc.test_forget_idx is None and sc.test_retain_idx is None
    acc = split_accuracies(model, data, sc)
    assert set(acc) == {"train_retain", "train_forget"}
    rec = metrics_record(method="x", data_name="user", model_name="m", seed=0, acc=acc, original_acc=acc, scenario=sc)
    assert rec["aus"] is None and set(rec["original_acc"]) == {"train_retain", "train_forget"}
