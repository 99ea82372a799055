"""Method hyperparameters (duck/unlearn/config.py): explicit values win over presets, the data set's preset over
the family default, targeted removal reads the class-removal presets and custom ids the homogeneous ones, a
value left unset is refused by name, and the stopping rule's delay is refused where it cannot act."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from duck.errors import DuckInputError
from duck.unlearn.config import (
    HYPERPARAMETER_RULES,
    MethodParams,
    check_hyperparameters,
    check_known_keys,
    check_positive,
    resolve_method_cfg,
    scenario_family,
)

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
    ({"lr": None, "other": None}, "digits", "class_removal", {"lr": 0.2, "other": None, "epochs": 5}),  # no preset
])
def test_presets_fill_what_the_config_leaves_unset(cfg, dataset, kind, expected):
    params = resolve_method_cfg({**cfg, "presets": PRESETS}, dataset, kind)
    assert dict(params) == expected and "presets" not in params


def test_a_config_without_presets_is_taken_as_it_is():
    assert dict(resolve_method_cfg({"lr": 0.3}, "digits", "class_removal")) == {"lr": 0.3}
    assert dict(resolve_method_cfg({"lr": 0.3, "presets": None}, "digits", "class_removal")) == {"lr": 0.3}
    empty_family = {"class_removal": None}
    assert dict(resolve_method_cfg({"lr": 0.3, "presets": empty_family}, "digits", "class_removal")) == {"lr": 0.3}


def test_a_preset_that_leaves_a_value_unset_is_refused_by_name():
    presets = {"class_removal": {"default": {"lr": None, "epochs": 3}}}
    with pytest.raises(DuckInputError, match=r"^method hyperparameters \['lr'\] have no value for data set 'digits'; "
                                             r"set them, e\.g\. method\.lr=\.\.\.$"):
        resolve_method_cfg({"lr": None, "presets": presets}, "digits", "class_removal")


def test_resolved_values_are_checked():
    with pytest.raises(DuckInputError, match=r"^method\.lr must be a finite number > 0"):
        resolve_method_cfg({"lr": None, "presets": {"class_removal": {"default": {"lr": -1.0}}}}, "d", "class_removal")


def test_the_stopping_rule_delay_only_where_it_acts():
    check_hyperparameters({"min_epochs": 2, "stop_at_target": True, "epochs": 2})  # min_epochs = epochs: fine
    check_hyperparameters({"min_epochs": None, "stop_at_target": False})
    check_hyperparameters({"min_epochs": 3, "stop_at_target": True})  # no epochs cap given
    with pytest.raises(DuckInputError, match=r"^method\.min_epochs=2 only acts with method\.stop_at_target=true"):
        check_hyperparameters({"min_epochs": 2, "stop_at_target": False})
    with pytest.raises(DuckInputError, match=r"^method\.min_epochs=2 only acts"):
        check_hyperparameters({"min_epochs": 2})
    with pytest.raises(DuckInputError, match=r"^method\.min_epochs=3 is above method\.epochs=2"):
        check_hyperparameters({"min_epochs": 3, "stop_at_target": True, "epochs": 2})


def test_unknown_and_non_positive_keys_are_refused_by_name():
    known = {"name": "x", "presets": {}, "lr": 0.1, "epochs": 3}
    check_known_keys({"lr": 1, "epochs": 2}, known, "x")
    with pytest.raises(DuckInputError) as e:
        check_known_keys({"lr": 1, "lrr": 2}, known, "x")
    assert str(e.value) == ("method 'x' has no hyperparameter(s) ['lrr']; its hyperparameters are: epochs, lr "
                            "(conf/method/x.yaml)")
    check_positive({"alpha": 0.5, "lam": None}, ("alpha", "lam"))
    with pytest.raises(DuckInputError, match=r"^method\.alpha must be a finite number > 0"):
        check_positive({"alpha": 0.0}, ("alpha",))
    check_positive({"alpha": 0.0}, ())  # only the keys named


@pytest.mark.parametrize("key, good, bad", [
    ("lr", 1e-9, 0.0), ("weight_decay", 0.0, -1e-9), ("tolerance", -5.0, float("nan")),
    ("retain_fraction", 0.0, 1.0001), ("retain_fraction", 1.0, -0.1), ("mask_density", 1.0, 0.0),
    ("momentum", 0.0, 1.0), ("beta", 1.0, 1.5), ("mask_ratio", 1.0, 0.0), ("label_smoothing", 0.0, 1.0),
    ("epochs", 1, 0), ("low_epochs", 0, -1), ("msteps", 0, -1), ("batch_ratio", 1, 0),
    ("stop_at_target", False, "false"), ("stop_check", "batch", "step"), ("low_pairing", "first_forget", "x"),
    ("full_order", "dataset", "random"), ("milestones", [1, 5], [1.5]), ("milestones", [], "5"),
])
def test_each_shared_rule_has_its_domain(key, good, bad):
    check_hyperparameters({key: good})
    with pytest.raises(DuckInputError, match=rf"^method\.{key}\b"):
        check_hyperparameters({key: bad})
    assert key in HYPERPARAMETER_RULES


def hyperparameter_table() -> str:
    """The shared method hyperparameters' rules as a table, for docs/configuration.md."""
    from duck.report.tables import markdown_table

    return markdown_table(["hyperparameter", "allowed"],
                          [(f"`method.{k}`", r.describe()) for k, r in sorted(HYPERPARAMETER_RULES.items())])


def test_docs_hyperparameter_table_is_the_rules():
    block = re.search(r"<!-- hyperparameter table: begin -->\n(.*?)\n<!-- hyperparameter table: end -->",
                      (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text(), re.S)
    assert block and block.group(1) == hyperparameter_table()



def test_messages_in_full():
    with pytest.raises(DuckInputError) as e:
        check_hyperparameters({"min_epochs": 2, "stop_at_target": False})
    assert str(e.value) == ("method.min_epochs=2 only acts with method.stop_at_target=true (it delays the stopping "
                            "rule); set that or drop min_epochs")
    with pytest.raises(DuckInputError) as e:
        check_hyperparameters({"min_epochs": 3, "stop_at_target": True, "epochs": 2})
    assert str(e.value) == ("method.min_epochs=3 is above method.epochs=2 (the cap of the stopping rule); raise "
                            "epochs or lower min_epochs")
    with pytest.raises(DuckInputError) as e:
        check_hyperparameters({"milestones": [0]})
    assert str(e.value) == ("method.milestones=[0] must be a list of integer epochs >= 1 (e.g. [8, 15]), or [] for a "
                            "constant learning rate")
    with pytest.raises(TypeError) as te:
        MethodParams({"lr": 1.0})["lr"] = 2.0
    assert str(te.value) == "MethodParams are read-only: resolve the method config again to change them"
