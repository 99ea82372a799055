"""The user's own models: any ``nn.Module`` (plain, torchvision, timm) through ``duck.models.wrap_model`` and
``create_model("custom", ...)``, and every registered unlearning method on such models."""

from __future__ import annotations

import copy
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
import torchvision
import yaml
from conftest import method_file_keys
from torch import nn

from duck.data.registry import build_datasets
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.metrics import split_accuracies
from duck.models import Classifier, create_model, wrap_model
from duck.training import Recipe, train_classifier
from duck.unlearn import UnlearnData, create_unlearner, list_unlearners
from duck.unlearn.registry import resolve_method_cfg

CONF = Path(__file__).resolve().parents[1] / "conf"


class PlainCNN(nn.Module):
    """A user's model: no timm interface, no conventional head name; the classifier is registered *before*
    another Linear (``proj``, used earlier in forward), so "the last Linear" alone would be wrong."""

    def __init__(self, num_classes: int = 4, in_chans: int = 3) -> None:
        super().__init__()
        self.classify = nn.Linear(16, num_classes)
        self.conv = nn.Conv2d(in_chans, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.proj = nn.Linear(8 * 2 * 2, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = nn.functional.adaptive_avg_pool2d(torch.relu(self.bn(self.conv(x))), 2).flatten(1)  # (B, 32)
        return self.classify(torch.relu(self.proj(h)))


class Softmaxed(PlainCNN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).softmax(dim=1)


class AddsAfterHead(PlainCNN):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 1.0


class ReturnsTuple(PlainCNN):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(x), x


BUILDERS = {
    "plain": (lambda: PlainCNN(10), "classify"),
    "torchvision_resnet18": (lambda: torchvision.models.resnet18(num_classes=10), "fc"),
    "torchvision_mobilenet_v3_small": (lambda: torchvision.models.mobilenet_v3_small(num_classes=10), "classifier.3"),
    "timm_resnet18": (lambda: timm.create_model("resnet18", num_classes=10), None),  # timm's own split
}


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_split_is_found_and_reproduces_the_model(kind):
    build, head = BUILDERS[kind]
    torch.manual_seed(0)
    net = build()
    x = torch.randn(4, 3, 32, 32)
    clf = wrap_model(net, example=x)
    assert isinstance(clf, Classifier) and clf.head_path == head
    assert (clf.num_classes, clf.in_chans, clf.img_size) == (10, 3, 32)
    assert clf.spec()["num_classes"] == 10 and clf.spec().get("head") == head
    clf.eval()
    with torch.no_grad():
        z = clf.embed(x)
        assert z.shape == (4, clf.embed_dim)
        torch.testing.assert_close(clf.head(z), net(x))
        torch.testing.assert_close(clf(x), net(x))
    assert clf.classifier().out_features == 10
    # gradients flow through embed into the backbone (DUCK backpropagates its forget loss through it)
    clf.train()
    clf.embed(x).pow(2).mean().backward()
    first = next(p for p in net.parameters() if p.ndim == 4)
    assert first.grad is not None and first.grad.abs().sum() > 0
    # the user's own key names, loadable into a fresh instance of the user's class
    plain = clf.plain_state_dict()
    assert list(plain) == list(net.state_dict())
    fresh = build()
    fresh.load_state_dict(plain, strict=True)
    fresh.eval(), net.eval()
    with torch.no_grad():
        torch.testing.assert_close(fresh(x), net(x))


def test_feature_map_and_set_classifier_on_a_generic_model():
    net = torchvision.models.mobilenet_v3_small(num_classes=10)
    clf = wrap_model(net, example=torch.zeros(2, 3, 32, 32))
    x = torch.randn(2, 3, 32, 32)
    assert clf.feature_map(x) is None  # no timm notion of a feature map: erm_ktp gates the pooled embedding
    with pytest.raises(DuckInputError, match="has no feature map"):
        clf.pool_features(x)
    clf.set_classifier(nn.Linear(clf.embed_dim, 11))
    assert clf.num_classes == 11 and net.classifier[3].out_features == 11 and clf(x).shape == (2, 11)
    timm_clf = create_model("smallcnn", 4, 1, 8)
    assert timm_clf.feature_map(torch.zeros(2, 1, 8, 8)).shape[1] == timm_clf.embed_dim


@pytest.mark.parametrize("training", [True, False])
def test_verification_restores_the_training_flags(training):
    net = PlainCNN()
    net.train(training)
    net.bn.eval()  # a user's frozen BatchNorm stays in eval mode
    wrap_model(net, example=torch.randn(3, 3, 8, 8))
    assert all(m.training == (training and m is not net.bn) for m in net.modules())


def test_without_an_example_the_conventional_head_is_taken():
    clf = wrap_model(torchvision.models.resnet18(num_classes=7))
    assert clf.head_path == "fc" and clf.num_classes == 7 and clf.in_chans == 3 and clf.img_size is None


def test_a_generic_net_needs_a_head_path():
    with pytest.raises(DuckInputError, match=r"PlainCNN has no timm-style split.*wrap_model"):
        Classifier(PlainCNN(), "plain", 4, 3, 8)


@pytest.mark.parametrize("net,head,match", [
    (nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten()), None,
     r"cannot find the classification head of Sequential: it has no nn.Linear module .*pass head='<attribute path"),
    (PlainCNN(), "nope", r"head='nope' is not a module of PlainCNN; its nn.Linear modules are 'classify', 'proj'"),
    (PlainCNN(), "conv", r"head='conv' is a Conv2d, not an nn.Linear, in PlainCNN"),
    (Softmaxed(), None, r"cannot find the classification head of Softmaxed: no nn.Linear's output is the model's "
                        r"output .*no softmax or other op after it.*head='<attribute path of the final nn.Linear>'"),
    (AddsAfterHead(), "classify", r"head='classify' does not produce AddsAfterHead's logits \(its output is not the "
                                  r"model's output.*its nn.Linear modules are 'classify', 'proj'"),
    (ReturnsTuple(), None, r"ReturnsTuple returns a tuple, not a logits tensor"),
    (PlainCNN(in_chans=1), None, r"PlainCNN fails on an example batch of shape \(2, 3, 8, 8\).*data.in_chans"),
])
def test_models_without_a_usable_split_get_one_clear_error(net, head, match):
    with pytest.raises(DuckInputError, match=match):
        wrap_model(net, head=head, example=torch.randn(2, 3, 8, 8))


# ----------------------------------------------------------------------------------- model=custom
MODULE_SOURCE = textwrap.dedent('''
    import torch
    from torch import nn


    class TinyCNN(nn.Module):
        def __init__(self, num_classes, in_chans=3, width=4):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(in_chans, width, 3, padding=1), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.out = nn.Linear(width, num_classes)

        def forward(self, x):
            return self.out(self.body(x))


    class FixedTen(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3 * 8 * 8, 10)

        def forward(self, x):
            return self.fc(x.flatten(1))


    def build_tiny():
        return TinyCNN(4)
''')


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's models in a folder put on ``sys.path``; its name is unique to the test."""
    name = f"user_models_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_create_custom_model_from_an_import_path(user_module):
    clf = create_model("custom", 4, 3, 8, _target_=f"{user_module}.TinyCNN", width=6)
    assert type(clf.net).__name__ == "TinyCNN" and clf.head_path == "out" and clf.embed_dim == 6
    assert clf.spec() == {"model": "custom", "num_classes": 4, "in_chans": 3, "img_size": 8, "head": "out",
                          "target": f"{user_module}.TinyCNN"}
    assert clf(torch.randn(2, 3, 8, 8)).shape == (2, 4)
    assert create_model("custom", 4, 3, 8, _target_=f"{user_module}.TinyCNN", head="out").head_path == "out"


def test_custom_module_is_found_in_the_current_directory(tmp_path, monkeypatch):
    name = f"cwd_models_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(MODULE_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    try:
        assert create_model("custom", 3, 3, 8, _target_=f"{name}.TinyCNN").num_classes == 3
    finally:
        sys.modules.pop(name, None)
    assert str(tmp_path) not in sys.path  # the directory was on the path for the import only


@pytest.mark.parametrize("target,kw,match", [
    ("os.system", {}, r"model._target_='os.system' is a builtin_function_or_method, not a torch.nn.Module class"),
    ("USER.build_tiny", {}, r"model._target_='USER.build_tiny' is a function, not a torch.nn.Module class"),
    ("torchvision.models.get_model", {}, r"is a function, not a torch.nn.Module class"),  # not a model builder
    ("no_such_package_xyz.models.Net", {}, r"model._target_='no_such_package_xyz.models.Net': cannot import "
                                           r"'no_such_package_xyz.models' .*put its package on PYTHONPATH"),
    ("USER.Missing", {}, r"module 'USER' has no attribute 'Missing'"),
    ("???", {}, r"model=custom needs model._target_=pkg.module.ClassName"),
    ("USER.FixedTen", {}, r"USER.FixedTen outputs 10 logits but the data set has 4 classes \(model.num_classes comes "
                          r"from the data\); give its constructor a num_classes parameter"),
    ("USER.TinyCNN", {"depth": 3}, r"model.depth=3 is not a parameter of USER.TinyCNN; its options are model.width"),
    ("USER.TinyCNN", {"pretrained": True}, r"model.pretrained=True does not apply to model=custom"),
])
def test_custom_model_refusals(user_module, target, kw, match):
    with pytest.raises(DuckInputError, match=match.replace("USER", user_module)):
        create_model("custom", 4, 3, 8, _target_=target.replace("USER", user_module), **kw)


def test_custom_model_config_reaches_create_model(user_module):
    """``conf/model/custom.yaml`` composes, and ``model._target_`` arrives at create_model as a keyword, as the
    pipeline passes ``cfg.model`` minus ``name`` (Hydra never instantiates model configs)."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    assert yaml.safe_load((CONF / "model" / "custom.yaml").read_text()) == {"name": "custom", "_target_": "???",
                                                                             "head": None}
    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = compose("run", overrides=["model=custom", f"model._target_={user_module}.TinyCNN", "+model.width=5"])
    kw = OmegaConf.to_container(cfg.model, resolve=True)
    clf = create_model(kw.pop("name"), 4, 1, 8, **kw)
    assert clf.spec()["target"] == f"{user_module}.TinyCNN" and clf.embed_dim == 5 and clf.in_chans == 1


# ------------------------------------------------------------------ every method on the user's models
FAST = {"epochs": 1, "max_epochs": 1, "low_epochs": 1, "erm_epochs": 1, "msteps": 1, "batch_size": 32,
        "forget_batch_size": 32, "batch_ratio": 1, "low_batch_ratio": 1, "milestones": []}
USER_MODELS = {
    "plain": lambda: PlainCNN(4, 3),
    "torchvision_resnet18": lambda: torchvision.models.resnet18(num_classes=4),
}


@pytest.fixture(scope="module")
def small_rgb():
    return build_datasets("synthetic", n_train=96, n_test=32, num_classes=4, img_size=16, in_chans=3)


def _fresh_references(factory, n_train):
    """Reference models for the methods that learn from them (oracle / datamodel / subset matching), freshly initialised
    user models: this test checks that the method runs on the user's architecture, not what it learns."""
    from duck.unlearn import ModelBank, ReferenceModels

    keep = np.random.default_rng(0).random((4, n_train)) < 0.5
    out = np.random.default_rng(1).standard_normal((int((~keep).sum()), 4)).astype(np.float32)
    offsets = np.concatenate([[0], np.cumsum((~keep).sum(0))])
    bank = ModelBank(load=lambda k: factory(), one_off_s=0.0, keep=keep, out_logits=out, out_offsets=offsets)
    return ReferenceModels(oracle=lambda seed, pool: ModelBank(load=lambda k: factory(), one_off_s=0.0),
                           shadows=lambda n, seed: ModelBank(load=lambda k: factory(), one_off_s=0.0, keep=keep),
                           subsets=lambda n, keep_fraction, seed: bank)


@pytest.mark.parametrize("kind", sorted(USER_MODELS))
@pytest.mark.parametrize("name", list_unlearners())
def test_every_method_runs_on_a_users_model(name, kind, small_rgb):
    example = torch.zeros(2, 3, 16, 16)

    def factory() -> Classifier:
        return wrap_model(USER_MODELS[kind](), example=example)

    torch.manual_seed(0)
    model = factory()
    sc = build_scenario("class_removal", small_rgb.train.labels, small_rgb.test.labels, 4, forget_classes=[1])
    raw = method_file_keys(CONF / "method" / f"{name}.yaml")  # with the configs it builds on
    raw.pop("name")
    resolved = resolve_method_cfg(raw, "synthetic", "class_removal", name)
    hp = {**resolved, **{k: v for k, v in FAST.items() if k in resolved}}
    rec = Recipe(epochs=1, batch_size=32, optimizer=lambda p: torch.optim.SGD(p, lr=0.01))
    data = UnlearnData(small_rgb.train, sc, 4, "synthetic", split_accuracies(model, small_rgb, sc), recipe=rec,
                       model_factory=factory, references=_fresh_references(factory, len(small_rgb.train)))
    before = copy.deepcopy(model.plain_state_dict())
    result = create_unlearner(name, model, data, hp, seed=0).unlearn()
    out = result.model.eval()(torch.randn(3, 3, 16, 16))
    assert out.shape == (3, 4) and result.model.num_classes == 4
    after = result.model.plain_state_dict()
    assert list(after) == list(before)  # still the user's architecture and key names
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    if name not in ("ssd", "none"):  # SSD dampens only parameters specialised to the forget set (possibly none);
        # none is the unchanged original (the negative control)
        assert any(not torch.equal(before[k], after[k]) for k in before)


def test_batched_training_of_generic_models_equals_sequential(small_rgb):
    """Shadow banks train generic models batched (``functional_call`` + ``vmap`` over ``forward = net(x)``;
    the split's hook is only set inside ``embed``): same result as one model at a time."""
    from attacks.batched import train_batched

    rec = Recipe(epochs=1, batch_size=16, optimizer={"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.05})
    index_sets, seeds = [np.arange(0, 48), np.arange(48, 96)], [3, 4]

    def fresh(seed: int) -> Classifier:
        torch.manual_seed(seed)
        return wrap_model(PlainCNN(4, 3), example=torch.zeros(2, 3, 16, 16))

    cpu = {"accelerator": "cpu", "devices": 1}
    separate = [train_classifier(fresh(s), small_rgb.train, rec, indices=i, seed=s, trainer_cfg=cpu)[0]
                for i, s in zip(index_sets, seeds, strict=True)]
    batched = train_batched([fresh(s) for s in seeds], small_rgb.train, rec, index_sets, seeds)
    for a, b in zip(separate, batched, strict=True):
        for key, value in a.state_dict().items():
            torch.testing.assert_close(b.state_dict()[key], value, rtol=1e-4, atol=1e-5, msg=key)


def test_torchvision_model_builders_are_allowed_as_targets():
    """torchvision's registered builders (an allowlist: torchvision.models.list_models()) build like classes."""
    clf = create_model("custom", 7, 3, 32, _target_="torchvision.models.resnet18")
    assert clf.num_classes == 7 and clf.head_path == "fc" and clf.spec()["target"] == "torchvision.models.resnet18"
