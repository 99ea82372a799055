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
    # ids 1-3 are class 0: pushed to their own centroid they cannot be forgotten (ran every epoch before)
    with pytest.raises(DuckInputError, match=r"forget ids \[1, 2, 3\] \(3 of 3\) are labelled with the target class 0"):
        build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=str(p), target_class=0)
    assert build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=[2.0, 3], target_class=2).forget_idx.tolist() == [2, 3]


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


@pytest.mark.parametrize("name,content,match", [
    ("ids.txt", "99999999999999999999999", "far too large"),
    ("ids.txt", "9" * 5000, "far too large"),
    ("ids.txt", "1.5 2", "non-integer value '1.5'"),
    ("ids.csv", "+5\n6\n", None),
    ("ids.csv", "1.5\n6\n", "non-integer value '1.5'"),
    ("ids.csv", "nan\n6\n", "non-integer value 'nan'"),
    ("ids.csv", "id\n6\n", None),
    # an empty first cell was dropped silently; quoted cells, a byte-order mark and integral floats (as .npy and
    # inline lists accept them) were refused
    ("ids.csv", "5,1\n,6\n", r"empty first cell on line\(s\) \[2\]"),
    ("ids.csv", 'id,name\n"5",a\n"6",b\n', None),
    ("ids.txt", "\ufeff5 6", None),
    ("ids.txt", "5.0 6", None),
])
def test_forget_id_text_files_are_parsed_strictly(tmp_path, name, content, match):
    p = tmp_path / name
    p.write_text(content, encoding="utf-8")
    if match is None:
        ids = read_forget_ids(p)
        assert ids.tolist() == ([6] if content.startswith("id\n") else [5, 6])
    else:
        with pytest.raises(DuckInputError, match=match):
            read_forget_ids(p)


@pytest.mark.parametrize("arr,match", [
    (np.array([[1, 2], [3, 4]]), r"shape \(2, 2\).*1-D"),
    (np.array([1e30, 2.0]), r"\[1e\+30\] outside the int64 range"),
    (np.array([2**64 - 1, 3], dtype=np.uint64), r"\[18446744073709551615\] outside the int64 range"),
    (np.array([True, False]), "non-integer"),
    (np.array(["1", "2"]), "non-integer"),
])
def test_forget_id_npy_refuses_bad_arrays(tmp_path, arr, match):
    np.save(tmp_path / "ids.npy", arr)
    with pytest.raises(DuckInputError, match=match):
        read_forget_ids(tmp_path / "ids.npy")
    assert read_forget_ids(_save(tmp_path, np.array([3.0, 4.0]))).tolist() == [3, 4]


def _save(tmp_path, arr):
    np.save(tmp_path / "ok.npy", arr)
    return tmp_path / "ok.npy"


@pytest.mark.parametrize("ids,match", [
    (["a", "b"], "non-integer value 'a'"),
    ([[1, 2], [3]], r"non-integer value \[1, 2\]"),
    (5, "must be a PATH .* or a list of integer ids"),
    ([1.5, 2], "non-integer value 1.5"),
    ([True, 2], "non-integer value True"),
    ([10**30], "far too large"),
])
def test_inline_forget_ids_are_validated(ids, match):
    with pytest.raises(DuckInputError, match=match):
        build_scenario("custom", Y_TRAIN, Y_TEST, 5, forget_ids=ids)
    assert build_scenario("custom", Y_TRAIN, Y_TEST, 5, forget_ids=[4, 1]).forget_idx.tolist() == [1, 4]


def test_forget_classes_scalar_zero_and_strings():
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=2).forget_classes == [2]
    zero = build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[0])
    assert zero.forget_classes == [0] and zero.forget_idx.tolist() == list(range(20))
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=0).forget_classes == [0]
    with pytest.raises(DuckInputError, match="forget_classes=2.5 must be a list of class ids or names"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=2.5)
    with pytest.raises(DuckInputError, match="forget class 'abc' is not an integer class id and this data set has no "
                                             "class names"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes="abc")
    with pytest.raises(DuckInputError, match="forget class 'a' is not an integer"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=["a"])
    for empty in (None, []):
        with pytest.raises(DuckInputError, match="needs scenario.forget_classes"):
            build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=empty)


@pytest.mark.parametrize("seed", [-1, "abc", 1.5, True, 2**64])
def test_bad_scenario_seed(seed):
    with pytest.raises(DuckInputError, match="scenario.seed"):
        build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=0.1, seed=seed)


@pytest.mark.parametrize("fraction", ["abc", None, True, float("nan"), 0, 1])
def test_bad_fraction(fraction):
    with pytest.raises(DuckInputError, match="scenario.fraction"):
        build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=fraction)


def test_settings_a_kind_does_not_use_are_refused():
    """``+scenario.fraction=0.5`` with class removal (or a typo such as ``forget_class``) was ignored silently."""
    with pytest.raises(DuckInputError, match=r"scenario class_removal does not use scenario.fraction; remove it"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[1], fraction=0.5)
    with pytest.raises(DuckInputError, match=r"does not use scenario.forget_class\b.*scenario.fraction, scenario.seed"):
        build_scenario("homogeneous_removal", Y_TRAIN, Y_TEST, 5, fraction=0.1, forget_class=2)
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[1], seed=3).seed == 3


def test_class_removal_needs_test_samples_on_both_sides():
    """A forgotten class absent from the test split gave A_f = NaN, AUS = NaN and a metrics.json with a bare NaN."""
    y_test = Y_TEST[Y_TEST != 1]
    with pytest.raises(DuckInputError, match=r"no sample of the forgotten classes \(forget classes \[1\]\)"):
        build_scenario("class_removal", Y_TRAIN, y_test, 5, forget_classes=[1])
    with pytest.raises(DuckInputError, match="no sample of the retained classes"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST[Y_TEST == 1], 5, forget_classes=[1])


NAMES = ["ant", "bee", "cat", "dog", "eel"]


def test_forget_classes_by_name_or_id():
    by_name = build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=["dog", 0], class_names=NAMES)
    by_id = build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[3, 0], class_names=NAMES)
    assert by_name.forget_classes == by_id.forget_classes == [0, 3] and by_name.forget_hash == by_id.forget_hash
    assert by_name.forget_class_names == ["ant", "dog"] and by_name.summary()["forget_class_names"] == ["ant", "dog"]
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes="cat",  # a scalar, as Hydra gives it
                          class_names=NAMES).forget_classes == [2]
    assert "forget_class_names" not in build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=[1]).summary()
    # digit-string names (digits' "0".."9") resolve as names, which there equal the ids
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=["3"],
                          class_names=[str(c) for c in range(5)]).forget_classes == [3]
    # a folder named "3" that is class 1: the name wins over the digits
    assert build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=["3"],
                          class_names=["1", "3", "5", "7", "9"]).forget_classes == [1]
    with pytest.raises(DuckInputError, match=r"duplicated forget classes in \['dog', 3\]"):
        build_scenario("class_removal", Y_TRAIN, Y_TEST, 5, forget_classes=["dog", 3], class_names=NAMES)


def test_target_class_by_name():
    sc = build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=[1, 2], target_class="bee", class_names=NAMES)
    assert sc.target_class == 1 and sc.target_class_name == "bee"
    assert sc.summary()["target_class"] == 1 and sc.summary()["target_class_name"] == "bee"
    with pytest.raises(DuckInputError, match=r"labelled with the target class 0"):
        build_scenario("targeted", Y_TRAIN, Y_TEST, 5, forget_ids=[1, 2], target_class="ant", class_names=NAMES)
    with pytest.raises(DuckInputError, match=r"target class 'eel' \(id 4\) has no training sample; choose a class"):
        build_scenario("targeted", Y_TRAIN[Y_TRAIN < 4], Y_TEST, 5, forget_ids=[1, 2], target_class="eel",
                       class_names=NAMES)


@pytest.mark.parametrize("names,given,match", [
    (NAMES, "yak", r"forget class 'yak' is not a class name of this data set; give one of 'ant', 'bee', 'cat', 'dog', "
                   r"'eel' \(exact spelling\) or an integer id 0..4"),
    (NAMES, "Dog", r"forget class 'Dog' is not a class name of this data set; did you mean 'dog'\? give one of"),
    (NAMES, "dogs", r"forget class 'dogs' is not a class name of this data set; did you mean 'dog'\? give one of"),
    ([f"c{i}" for i in range(30)], "zz", r"give one of 'c0', .*'c19', \.\.\. \(exact spelling\) or an integer id 0..29"),
    (None, "dog", r"forget class 'dog' is not an integer class id and this data set has no class names"),
])
def test_unknown_class_names_list_the_valid_ones(names, given, match):
    n = 5 if names is None else len(names)
    y = np.repeat(np.arange(n), 4)
    with pytest.raises(DuckInputError, match=match) as err:
        build_scenario("class_removal", y, y, n, forget_classes=[given], class_names=names)
    assert "\n" not in str(err.value)
    with pytest.raises(DuckInputError, match=match.replace("forget class", "target class")):
        build_scenario("targeted", y, y, n, forget_ids=[0], target_class=given, class_names=names)


def test_scenarios_without_a_test_split():
    """User data without a test set: class removal has no test_forget / test_retain split."""
    sc = build_scenario("class_removal", Y_TRAIN, None, 5, forget_classes=["bee"], class_names=NAMES)
    assert sc.forget_idx.tolist() == list(range(20, 40)) and sc.test_forget_idx is None and sc.test_retain_idx is None
    assert len(build_scenario("homogeneous_removal", Y_TRAIN, None, 5, fraction=0.1).forget_idx) == 10


def test_id_files_larger_than_any_forget_set_are_refused_before_reading(tmp_path):
    """A 200-byte .npy whose header claims 10^12 ids, and a 2 GB (sparse) text file: refused from the header
    and the file size, before any allocation (forget ids are distinct training indices)."""
    from duck.data.scenarios import read_forget_ids

    np.save(tmp_path / "ok.npy", np.arange(5))
    raw = (tmp_path / "ok.npy").read_bytes()
    (tmp_path / "huge.npy").write_bytes(raw.replace(b"(5,)", b"(1000000000000,)")[:200])
    with pytest.raises(DuckInputError, match=r"holds 1000000000000 ids by its header, more than the 1347"):
        read_forget_ids(tmp_path / "huge.npy", max_count=1347)
    big = tmp_path / "ids.txt"
    with big.open("wb") as f:
        f.truncate(2 * 2**30)
    with pytest.raises(DuckInputError, match=r"ids\.txt is 2048\.0 MiB, more than 1347 training-sample ids"):
        read_forget_ids(big, max_count=1347)
    assert read_forget_ids(tmp_path / "ok.npy", max_count=1347).tolist() == [0, 1, 2, 3, 4]


# ------------------------------------------------------------------------------- the typed settings (issue 37)
def test_a_setting_the_kind_does_not_read_is_refused_before_its_value():
    from duck.data.scenarios import ScenarioSettings

    with pytest.raises(DuckInputError, match=r"^scenario class_removal does not use scenario\.fraction; remove it "
                                             r"\(its settings: scenario\.forget_classes\)$"):
        ScenarioSettings.parse({"kind": "class_removal", "forget_classes": [1], "fraction": 5})
    for raw, match in (({"kind": "homogeneous_removal"}, r"^homogeneous_removal needs scenario\.fraction"),
                       ({"kind": "custom"}, r"^custom needs scenario\.forget_ids=PATH"),
                       ({"kind": "targeted", "forget_ids": [1]}, r"^targeted needs scenario\.target_class"),
                       ({"kind": "class_removal", "forget_classes": []}, r"^class_removal needs scenario\.forget_cl"),
                       ({"kind": "class_removal", "forget_classes": {"a": 1}}, r"^scenario\.forget_classes=\{'a': 1\} "
                                                                              r"must be a list of class ids or names"),
                       ({"kind": "homogeneous_removal", "fraction": 0.1, "seed": -1}, r"^scenario\.seed=-1"),
                       ("class_removal", r"^scenario='class_removal' must be a mapping")):
        with pytest.raises(DuckInputError, match=match):
            ScenarioSettings.parse(raw)
    one = ScenarioSettings.parse({"kind": "class_removal", "forget_classes": 3})
    assert one.forget_classes == (3,) and one.seed == 0


@pytest.mark.parametrize("overrides", [["scenario=class_removal", "scenario.forget_classes=[1]"],
                                       ["scenario=homogeneous_removal"], ["scenario=demo_class3"],
                                       ["scenario=custom", "scenario.forget_ids=[1,2]"],
                                       ["scenario=targeted", "scenario.forget_ids=[1]", "scenario.target_class=2"]])
def test_every_shipped_scenario_parses_into_its_settings(overrides):
    from duck.data.scenarios import ScenarioSettings
    from duck.pipeline.config import compose
    from duck.pipeline.job import scenario_settings

    cfg = compose("run", overrides)
    parsed = scenario_settings(cfg)
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg.scenario, resolve=True)
    assert parsed == ScenarioSettings.parse({"seed": cfg.seed, **raw}) and parsed.seed == cfg.seed
    assert {k for k, v in parsed.items() if v is not None} == {*raw, "seed"}


def test_a_job_refuses_a_bad_scenario_before_loading_the_data(monkeypatch):
    import duck.pipeline.job as job_module
    from duck.pipeline.config import compose

    def no_data(cfg):
        raise AssertionError("the data were loaded before the scenario was checked")

    monkeypatch.setattr(job_module, "build_data", no_data)
    cfg = compose("run", ["scenario=class_removal", "scenario.forget_classes=[1]", "+scenario.fraction=0.5"])
    with pytest.raises(DuckInputError, match="does not use scenario.fraction"):
        job_module.Job.from_cfg(cfg, "run")


def test_an_id_that_is_another_classs_name_is_ambiguous():
    """An ImageFolder of numbered folders sorts '10' < '2' < '3': forget class 2 would silently be folder '3'. The
    integer is refused, naming both readings; the quoted name and a name that is its own id are accepted."""
    names, y = ["10", "2", "3"], np.repeat(np.arange(3), 4)
    with pytest.raises(DuckInputError, match=r"forget class 2 is ambiguous: id 2 is the class named '3', but a class "
                                             r"is named '2' \(id 1\); .*scenario.forget_classes=\[\"2\"\]"):
        build_scenario("class_removal", y, y, 3, forget_classes=[2], class_names=names)
    with pytest.raises(DuckInputError, match=r"forget class 10 is ambiguous: id 10 is no class, but a class is named "
                                             r"'10' \(id 0\)"):
        build_scenario("class_removal", y, y, 3, forget_classes=[10], class_names=names)
    assert build_scenario("class_removal", y, y, 3, forget_classes=["2"], class_names=names).forget_classes == [1]
    digits = [str(i) for i in range(10)]  # digits' names are their ids: no ambiguity
    y10 = np.repeat(np.arange(10), 2)
    assert build_scenario("class_removal", y10, y10, 10, forget_classes=[3], class_names=digits).forget_classes == [3]
