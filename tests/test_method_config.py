"""Method hyperparameters (duck/unlearn/config.py and each method's settings class): explicit values win over
presets, the data set's preset over the family default, targeted removal reads the class-removal presets and custom
ids the homogeneous ones, a value left unset is refused by name, every field's rule is its method's, unknown names
are refused naming the valid ones, the stopping rule's delay is refused where it cannot act, and each method's
config file declares exactly its settings class's fields (issue 37: the YAML files are presets of the types)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import method_file_keys

from duck.errors import DuckInputError
from duck.pipeline.config import conf_dir
from duck.schema import PARSES, Either, option, plain, settings
from duck.unlearn import get_unlearner_class, list_unlearners
from duck.unlearn.config import (
    COUNT,
    POSITIVE,
    MethodSettings,
    Milestones,
    Preset,
    scenario_family,
)
from duck.unlearn.registry import resolve_method_cfg

DOCS = Path(__file__).resolve().parents[1] / "docs"


@settings
class ToyParams(MethodSettings):
    method_name: ClassVar[str] = "toy"

    lr: float | None = option(None, Preset(POSITIVE), "learning rate")
    epochs: int | None = option(None, Preset(COUNT), "epochs")
    other: int | None = option(None, Either((None,), COUNT), "a value whose null means something")


@settings
class NoOptions(MethodSettings):
    method_name: ClassVar[str] = "bare"


PRESETS = {"class_removal": {"default": {"lr": 0.1, "epochs": 5}, "digits": {"lr": 0.2}},
           "homogeneous_removal": {"default": {"lr": 0.01, "epochs": 7}}}


@pytest.mark.parametrize("kind, family", [("class_removal", "class_removal"), ("targeted", "class_removal"),
                                          ("homogeneous_removal", "homogeneous_removal"),
                                          ("custom", "homogeneous_removal")])
def test_scenario_families(kind, family):
    assert scenario_family(kind) == family


@pytest.mark.parametrize("cfg, dataset, kind, expected", [
    ({"lr": None, "epochs": None}, "digits", "class_removal", {"lr": 0.2, "epochs": 5}),  # data set over default
    ({"lr": None, "epochs": None}, "cifar10", "class_removal", {"lr": 0.1, "epochs": 5}),  # the family default
    ({"lr": None, "epochs": None}, "digits", "targeted", {"lr": 0.2, "epochs": 5}),  # targeted: class removal's
    ({"lr": None, "epochs": None}, "digits", "custom", {"lr": 0.01, "epochs": 7}),  # custom: homogeneous's
    ({"lr": 0.5, "epochs": None}, "digits", "class_removal", {"lr": 0.5, "epochs": 5}),  # explicit wins
    ({"epochs": 2}, "digits", "class_removal", {"lr": 0.2, "epochs": 2}),  # a preset key the config lacks: added
])
def test_presets_fill_what_the_config_leaves_unset(cfg, dataset, kind, expected):
    params = ToyParams.resolve({**cfg, "presets": PRESETS}, dataset, kind)
    assert dict(params) == {**expected, "other": None} and "presets" not in params
    assert isinstance(params["lr"], float) and isinstance(params["epochs"], int)


def test_a_config_without_presets_keeps_the_class_defaults_and_names_what_it_lacks():
    params = ToyParams.resolve({"lr": 0.3}, "digits", "class_removal")
    assert params.lr == 0.3 and params.epochs is None and params.other is None
    assert dict(params) == {"lr": 0.3, "other": None} and "epochs" not in params and len(params) == 2
    assert params.get("epochs", 4) == 4 and params.get("other", 4) is None and params.get("nothing", 1) == 1
    with pytest.raises(DuckInputError) as e:
        params["epochs"]
    assert str(e.value) == ("method 'toy' needs the hyperparameter 'epochs', which cfg does not give; pass it (the "
                            "presets are in conf/method/toy.yaml)")
    with pytest.raises(KeyError):
        params["nothing"]
    for presets in (None, {"class_removal": None}):
        assert ToyParams.resolve({"lr": 0.3, "presets": presets}, "digits", "class_removal") == params


def test_a_preset_that_leaves_a_value_unset_is_refused_by_name():
    presets = {"class_removal": {"default": {"lr": None, "epochs": 3}}}
    with pytest.raises(DuckInputError) as e:
        ToyParams.resolve({"lr": None, "presets": presets}, "digits", "class_removal")
    assert str(e.value) == ("method hyperparameters ['lr'] have no value for data set 'digits'; set them, e.g. "
                            "method.lr=...")


def test_resolved_values_are_checked_by_the_fields_rule():
    with pytest.raises(DuckInputError, match=r"^method\.lr must be a finite number > 0\.0, got -1\.0$"):
        ToyParams.resolve({"lr": None, "presets": {"class_removal": {"default": {"lr": -1.0}}}}, "d", "class_removal")
    with pytest.raises(DuckInputError, match=r"^method\.other=0 must be null or an integer >= 1$"):
        ToyParams.resolve({"other": 0}, "d", "class_removal")


def test_unknown_names_are_refused_naming_the_valid_ones():
    with pytest.raises(DuckInputError) as e:
        ToyParams.resolve({"lr": 1.0, "lrr": 2}, "d", "class_removal")
    assert str(e.value) == ("method 'toy' has no hyperparameter(s) ['lrr']; its hyperparameters are: epochs, lr, other "
                            "(conf/method/toy.yaml)")
    with pytest.raises(DuckInputError) as e:
        resolve_method_cfg({"lambda_fgtt": 3}, "digits", "class_removal", "duck")
    assert str(e.value).startswith("method 'duck' has no hyperparameter(s) ['lambda_fgtt']; its hyperparameters are: "
                                   "batch_ratio, batch_size, joint_forward, label_smoothing, lambda_fgt, lambda_ret,")
    with pytest.raises(DuckInputError, match=r"^method config 'scrub' given to method 'toy'"):
        ToyParams.resolve({"name": "scrub"}, "d", "class_removal")
    with pytest.raises(DuckInputError, match=r"needs its method's name"):
        resolve_method_cfg({"lr": 1.0}, "d", "class_removal")


def test_the_stopping_rule_delay_only_where_it_acts():
    cls = get_unlearner_class("neggrad_plus").params
    cls.parse({"min_epochs": 2, "stop_at_target": True, "epochs": 2})  # min_epochs = epochs: fine
    cls.parse({"min_epochs": None, "stop_at_target": False})
    cls.parse({"min_epochs": 3, "stop_at_target": True})  # no epochs cap given
    with pytest.raises(DuckInputError) as e:
        cls.parse({"min_epochs": 2, "stop_at_target": False})
    assert str(e.value) == ("method.min_epochs=2 only acts with method.stop_at_target=true (it delays the stopping "
                            "rule); set that or drop min_epochs")
    with pytest.raises(DuckInputError, match=r"^method\.min_epochs=2 only acts"):
        cls.parse({"min_epochs": 2})
    with pytest.raises(DuckInputError) as e:
        cls.parse({"min_epochs": 3, "stop_at_target": True, "epochs": 2})
    assert str(e.value) == ("method.min_epochs=3 is above method.epochs=2 (the cap of the stopping rule); raise "
                            "epochs or lower min_epochs")


@pytest.mark.parametrize("method, key, good, bad", [
    ("duck", "lr", 1e-9, 0.0), ("finetune", "weight_decay", 0.0, -1e-9), ("duck", "tolerance", -5.0, float("nan")),
    ("bad_teacher", "retain_fraction", 0.0, 1.0001), ("bad_teacher", "retain_fraction", 1.0, -0.1),
    ("erm_ktp", "mask_density", 1.0, 0.0), ("finetune", "momentum", 0.0, 1.0), ("neggrad_plus", "beta", 1.0, 1.5),
    ("salun", "mask_ratio", 1.0, 0.0), ("duck", "label_smoothing", 0.0, 1.0), ("finetune", "epochs", 1, 0),
    ("duck", "low_epochs", 0, -1), ("scrub", "msteps", 0, -1), ("duck", "batch_ratio", 1, 0),
    ("salun", "stop_at_target", False, "false"), ("neggrad", "stop_check", "batch", "step"),
    ("duck", "low_pairing", "first_forget", "x"), ("ssd", "full_order", "dataset", "random"),
    ("finetune", "milestones", [1, 5], [1.5]), ("finetune", "milestones", [], "5"),
    ("finetune", "optimizer", "adam", "SGD"), ("ssd", "alpha", 1e-9, 0.0), ("ssd", "lam", 1e-9, 0.0),
    ("kgltop2", "init_rate", 1.0, 1.01), ("duck_reinit", "init_rate", 0.0, 1.0), ("kgltop2", "layers", "conv+linear", "fc"),
    ("kgltop2", "kept_grad_scale", 0.0, -0.1), ("kgltop1", "augment", True, "yes"), ("kgltop1", "eta_min", 0.0, -1e-9),
    ("kgltop1", "retain_lr", 1e-9, 0.0), ("oracle_matching", "targets", "mean", "median"),
    ("oracle_matching", "num_oracles", 1, 0), ("oracle_matching", "retain_multiplier", 0.5, 0.0),
    ("datamodel_matching", "spread", "none", "wide"), ("datamodel_matching", "multiplier", 1e-9, 0.0),
    ("duck", "max_per_class", None, 0), ("duck", "low_lr", None, 0.0),
])
def test_each_field_has_its_domain(method, key, good, bad):
    cls = get_unlearner_class(method).params
    assert cls.parse({key: good})[key] == (tuple(good) if isinstance(good, list) else good)
    with pytest.raises(DuckInputError, match=rf"^method\.{key}\b"):
        cls.parse({key: bad})


def test_milestones_message_in_full():
    with pytest.raises(DuckInputError) as e:
        Milestones()([0], "method.milestones")
    assert str(e.value) == ("method.milestones=[0] must be a list of integer epochs >= 1 (e.g. [8, 15]), or [] for a "
                            "constant learning rate")


@pytest.mark.parametrize("name", list_unlearners())
def test_each_method_config_file_is_a_preset_of_its_settings_class(name):
    """conf/method/NAME.yaml (with the files its defaults list builds on) declares exactly the class's fields, and
    its top-level values are the class's defaults."""
    raw = method_file_keys(conf_dir() / "method" / f"{name}.yaml")
    assert raw.pop("name") == name
    raw.pop("presets", None)
    cls = get_unlearner_class(name).params
    assert cls.method_name == name
    fields = {f.name: f.default for f in dataclasses.fields(cls)}
    assert list(raw) == [k for k in fields if k in raw] and set(raw) == set(fields), name
    assert plain(fields) == raw
    cls.parse(raw)  # the file's own values pass the rules


@pytest.mark.parametrize("name", sorted(set(list_unlearners()) - {"none", "retrain"}))
def test_each_method_resolves_its_own_presets_for_every_family(name):
    cfg = method_file_keys(conf_dir() / "method" / f"{name}.yaml")
    cls = get_unlearner_class(name).params
    for kind in get_unlearner_class(name).supported_scenarios:
        params = resolve_method_cfg(cfg, "digits", kind)
        assert type(params) is cls
        assert len(params) == len(dataclasses.fields(cls)), (name, kind)  # every preset-filled value given for digits


def test_resolved_parameters_are_read_only_and_survive_copies():
    params = ToyParams.resolve({"lr": None, "epochs": 2, "presets": {"class_removal": {"default": {"lr": 0.1}}}},
                               "digits", "class_removal")
    assert params == {"lr": 0.1, "epochs": 2, "other": None}
    assert ToyParams.resolve(params, "other", "homogeneous_removal") is params  # not resolved again
    assert resolve_method_cfg(params, "other", "homogeneous_removal") is params
    before = PARSES["ToyParams"]
    for copied in (copy.deepcopy(params), pickle.loads(pickle.dumps(params))):
        assert type(copied) is ToyParams and copied == params
    assert PARSES["ToyParams"] == before  # copies are not parsed again
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.lr = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        params["lr"] = 1.0  # type: ignore[index]
    assert hash(params) == hash(copy.deepcopy(params))


def test_the_hash_follows_the_values():
    """Equal settings hash alike however they were built; settings that differ in one value hash apart (a constant
    hash, e.g. of ``None`` instead of the values, is refused: kills ``__hash__`` 1, 2, 6)."""
    lrs = [0.01 * (i + 1) for i in range(20)]
    hashes = {hash(ToyParams.parse({"lr": lr, "epochs": 3})) for lr in lrs}
    assert len(hashes) == len(lrs)
    assert hash(ToyParams.parse({"lr": 0.5, "epochs": 3})) == hash(ToyParams.resolve(
        {"lr": None, "epochs": 3, "presets": {"class_removal": {"default": {"lr": 0.5}}}}, "digits", "targeted"))
    milestones = get_unlearner_class("finetune").params
    assert hash(milestones.parse({"milestones": [2, 5]})) == hash(milestones.parse({"milestones": (2, 5)}))


def test_a_method_without_hyperparameters_says_so_when_given_one():
    with pytest.raises(DuckInputError) as e:
        NoOptions.parse({"lr": 0.1})
    assert str(e.value) == ("method 'bare' has no hyperparameter(s) ['lr']; its hyperparameters are: (none) "
                            "(conf/method/bare.yaml)")


def hyperparameter_tables() -> str:
    """Every method's hyperparameters, one table per method, for docs/hyperparameters.md."""
    from duck.report.tables import markdown_table

    parts = []
    for name in list_unlearners():
        rows = get_unlearner_class(name).params.describe()
        if not rows:
            continue
        parts.append(f"### `method={name}`\n\n" + markdown_table(
            ["option", "default", "allowed", "meaning"],
            [(f"`{key}`", f"`{default}`", allowed, doc) for key, default, allowed, doc in rows]))
    return "\n\n".join(parts)


def test_docs_hyperparameter_tables_are_the_settings_classes():
    block = re.search(r"<!-- hyperparameter tables: begin -->\n(.*?)\n<!-- hyperparameter tables: end -->",
                      (DOCS / "hyperparameters.md").read_text(), re.S)
    assert block and block.group(1) == hyperparameter_tables()
