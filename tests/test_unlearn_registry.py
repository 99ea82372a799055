"""The method registry (duck/unlearn/registry.py) and the ``none`` control (duck/unlearn/none.py): a name maps to one
class, a second class under a taken name is refused, plugins load once through their entry points, an unknown
name lists the registered ones; ``none`` returns the original weights untouched, in every scenario."""

from __future__ import annotations

import copy

import pytest
import torch

from duck.data.scenarios import SCENARIOS, build_scenario
from duck.errors import DuckInputError
from duck.metrics import split_accuracies
from duck.unlearn import UnlearnData, create_unlearner, registry
from duck.unlearn.base import Unlearner
from duck.unlearn.none import NoUnlearning


@pytest.fixture
def fresh_registry(monkeypatch):
    """An empty registry whose entry points are the ones the test sets (the real table is restored after)."""
    monkeypatch.setattr(registry, "_UNLEARNERS", {})
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)
    return registry


def test_a_name_holds_one_class(fresh_registry):
    class A(Unlearner):
        pass

    class B(Unlearner):
        pass

    assert fresh_registry.register_unlearner("a")(A) is A and A.method_name == "a"
    assert fresh_registry.register_unlearner("a")(A) is A  # the same class again (a module imported twice): fine
    with pytest.raises(ValueError, match=r"unlearning method 'a' registered twice"):
        fresh_registry.register_unlearner("a")(B)
    assert fresh_registry._UNLEARNERS["a"] is A


def test_plugins_load_once_and_unknown_names_list_the_known_ones(fresh_registry, monkeypatch):
    loads = []

    class EP:
        def load(self):
            loads.append(1)

            class P(Unlearner):
                pass

            class Q(Unlearner):
                pass

            fresh_registry.register_unlearner("plugin")(P)
            fresh_registry.register_unlearner("another")(Q)

    groups = []
    monkeypatch.setattr(registry, "entry_points", lambda group: (groups.append(group), [EP()])[1])
    assert fresh_registry.list_unlearners() == ["another", "plugin"]
    assert fresh_registry.get_unlearner_class("plugin").method_name == "plugin"
    assert loads == [1] and groups == ["duck_unlearn.methods"]  # once, from the documented group
    with pytest.raises(DuckInputError) as e:
        fresh_registry.get_unlearner_class("pluginn")
    assert str(e.value) == "unknown unlearning method 'pluginn'; choose one of: another, plugin"


def test_create_passes_its_arguments(fresh_registry):
    seen = []

    class Recorder(Unlearner):
        def __init__(self, *args, **kwargs):
            seen.append((args, kwargs))

    fresh_registry.register_unlearner("rec")(Recorder)
    fresh_registry._PLUGINS_LOADED = True
    assert isinstance(fresh_registry.create_unlearner("rec", 1, 2, seed=3), Recorder)
    assert seen == [((1, 2), {"seed": 3})]


def test_the_registry_lists_its_methods_sorted():
    names = registry.list_unlearners()
    assert names == sorted(names) and {"duck", "none"} <= set(names)
    assert registry.get_unlearner_class("none") is NoUnlearning


@pytest.mark.parametrize("kind", ["class_removal", "homogeneous_removal"])
def test_none_keeps_the_original_weights(kind, synthetic, synthetic_model):
    assert NoUnlearning.supported_scenarios == SCENARIOS
    labels = synthetic.train.labels
    kw = {"forget_classes": [1]} if kind == "class_removal" else {"fraction": 0.1}
    sc = build_scenario(kind, labels, synthetic.test.labels, 4, **kw)
    data = UnlearnData(synthetic.train, sc, 4, "synthetic", split_accuracies(synthetic_model, synthetic, sc))
    before = copy.deepcopy(synthetic_model.state_dict())
    result = create_unlearner("none", copy.deepcopy(synthetic_model), data, {}, seed=0).unlearn()
    after = result.model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k].cpu()) for k in before)
    assert result.epochs == 0.0 and result.reached_target is False
    assert set(result.info) == {"phases"}  # epochs and reached_target were read off its record: nothing else in it
