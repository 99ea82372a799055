"""Forget scenarios and their validation."""

from __future__ import annotations

import numpy as np
import pytest

from duck.data.scenarios import build_scenario, read_forget_ids
from duck.errors import DuckInputError

Y_TRAIN = np.repeat(np.arange(5), 20)  # 100 samples, 5 classes
Y_TEST = np.repeat(np.arange(5), 6)


def test_class_removal_single_and_multi():
    sc = build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[3])
    assert sc.forget_idx.tolist() == list(range(60, 80))
    assert len(sc.retain_idx) == 80 and set(sc.retain_idx) | set(sc.forget_idx) == set(range(100))
    assert (Y_TEST[sc.test_forget_idx] == 3).all() and (Y_TEST[sc.test_retain_idx] != 3).all()
    multi = build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[4, 0])
    assert multi.forget_classes == [0, 4] and len(multi.forget_idx) == 40
    assert multi.forget_target_rule == "zero"


def test_homogeneous_removal_fraction_and_seed():
    a = build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=0.1, seed=1)
    b = build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=0.1, seed=1)
    c = build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=0.1, seed=2)
    assert len(a.forget_idx) == 10 and np.array_equal(a.forget_idx, b.forget_idx)
    assert not np.array_equal(a.forget_idx, c.forget_idx)
    assert a.test_forget_idx is None and a.forget_target_rule == "test_accuracy"
    assert a.forget_hash == b.forget_hash != c.forget_hash


@pytest.mark.parametrize("suffix", [".txt", ".npy", ".csv"])
def test_custom_ids_from_files(tmp_path, suffix):
    ids = [7, 3, 55]
    p = tmp_path / f"ids{suffix}"
    if suffix == ".npy":
        np.save(p, np.array(ids))
    elif suffix == ".csv":
        p.write_text("index,reason\n7,a\n3,b\n55,c\n")
    else:
        p.write_text("7 3\n55\n")
    sc = build_scenario("custom", Y_TRAIN, Y_TEST, 5, forget_ids=str(p))
    assert sc.forget_idx.tolist() == [3, 7, 55]


def test_targeted_scenario(tmp_path):
    p = tmp_path / "ids.txt"
    p.write_text("1,2,3")
    sc = build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=str(p), target_class=2)
    assert sc.target_class == 2 and sc.forget_target_rule == "zero"
    with pytest.raises(DuckInputError, match="target class 9 is not a class"):
        build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=str(p), target_class=9)


@pytest.mark.parametrize("content,match", [
    ("1 2 100", r"out of range: \[100\].*0\.\.99"),
    ("-1 2", r"out of range: \[-1\]"),
    ("4 4 5", r"duplicated forget ids: \[4\]"),
    ("", "forget set is empty"),
    (" ".join(map(str, range(100))), "covers all 100 training samples"),
    ("1 two", "non-integer"),
])
def test_bad_forget_ids(tmp_path, content, match):
    p = tmp_path / "ids.txt"
    p.write_text(content)
    with pytest.raises(DuckInputError, match=match):
        build_scenario("custom", Y_TRAIN, Y_TEST, 5, forget_ids=str(p))


def test_bad_scenarios(tmp_path):
    with pytest.raises(DuckInputError, match="unknown scenario 'forget_all'"):
        build_scenario("forget_all", Y_TRAIN, Y_TEST, 5)
    with pytest.raises(DuckInputError, match="forget class 7 is not a class"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[7])
    with pytest.raises(DuckInputError, match="leaves nothing to retain"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[0, 1, 2, 3, 4])
    with pytest.raises(DuckInputError, match=r"fraction=1.5 must be in \(0, 1\)"):
        build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=1.5)
    with pytest.raises(DuckInputError, match="not found"):
        build_scenario("custom", Y_TRAIN, Y_TEST, 5, forget_ids=str(tmp_path / "none.txt"))
    np.save(tmp_path / "f.npy", np.array([1.5, 2.0]))
    with pytest.raises(DuckInputError, match="non-integer"):
        read_forget_ids(tmp_path / "f.npy")
