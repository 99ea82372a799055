"""The one-call Python API (issue 24 item 2): ``duck.unlearn`` on models and data the toolkit did not write."""

from __future__ import annotations

import copy
import os

import numpy as np
import pytest
import torch
import torchvision
from conftest import method_file_keys
from torch import nn
from torch.utils.data import TensorDataset

import duck
from duck import DuckInputError
from duck.pipeline.config import conf_dir
from duck.unlearn import get_unlearner_class, list_unlearners


class TinyCNN(nn.Module):
    """A user's own model: no timm interface, a head named ``out``, a Linear before it."""

    def __init__(self, in_chans: int = 1, num_classes: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(in_chans, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, 16), nn.ReLU())
        self.out = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(x))


def _signal_data(n: int, in_chans: int = 1, num_classes: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % num_classes
    x = torch.randn(n, in_chans, 8, 8, generator=g) * 0.5
    for c in range(num_classes):  # each class lights up its own 2x2 patch
        x[y == c, :, 2 * c:2 * c + 2, 2:4] += 2.0
    return x, y


def _fit(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int = 80) -> nn.Module:
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    model.train()
    for i in range(steps):
        rows = torch.arange(i * 32, i * 32 + 32) % len(y)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
        opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def user_setup():
    """A TinyCNN trained outside the toolkit on a TensorDataset, its data and its test accuracy."""
    x, y = _signal_data(360)
    train, test = TensorDataset(x[:270], y[:270]), TensorDataset(x[270:], y[270:])
    model = _fit(TinyCNN(), x[:270], y[:270])
    with torch.no_grad():
        acc = float((model(x[270:]).argmax(1) == y[270:]).float().mean())
    assert acc > 0.9
    return model, train, test, acc


def test_unlearn_a_plain_module_and_load_the_weights_into_the_users_class(user_setup):
    model, train, test, _ = user_setup
    before = copy.deepcopy(model.state_dict())
    result = duck.unlearn(model, train, test=test, forget_classes=[1], batch_size=32)
    m = result.metrics
    assert m["method"] == "duck" and m["scenario"] == "class_removal" and m["n_forget"] == 90
    assert m["acc"]["test_forget"] <= 0.1 and m["acc"]["test_retain"] > 0.8 and 0 < m["aus"] <= 1.1
    assert m["acc"]["train_forget"] <= 0.1 and isinstance(m["reached_target"], bool) and m["time_s"] > 0
    assert type(result.model) is TinyCNN  # the caller's own type back
    fresh = TinyCNN()
    fresh.load_state_dict(result.state_dict())  # the input model's own key names, strict
    assert list(result.state_dict()) == list(before)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the input is untouched


def test_forget_ids_fraction_and_exactly_one_forget_keyword(user_setup):
    model, train, test, _ = user_setup
    r = duck.unlearn(model, train, test=test, forget_ids=[0, 5, 7, 11, 40, 41, 42, 100], max_epochs=1)
    assert r.metrics["scenario"] == "custom" and r.metrics["n_forget"] == 8
    r = duck.unlearn(model, train, test=test, forget_fraction=0.1, max_epochs=1)
    assert r.metrics["scenario"] == "homogeneous_removal" and r.metrics["n_forget"] == 27
    with pytest.raises(DuckInputError, match="pass exactly one of forget_classes=, forget_ids=, forget_fraction="):
        duck.unlearn(model, train, forget_classes=[1], forget_ids=[3])
    with pytest.raises(DuckInputError, match="got none"):
        duck.unlearn(model, train)


def test_the_api_builds_its_job_from_the_presets_without_composing_a_config(user_setup, monkeypatch):
    """duck.unlearn reads the method, trainer and recipe presets and parses them as the command line does, but composes
    no Hydra config (issue 37); the method config it records is the resolved hyperparameters."""
    import duck.pipeline.config as pipeline_config

    monkeypatch.setattr(pipeline_config, "compose", lambda *a, **k: pytest.fail("the API composed a config"))
    model, train, test, _ = user_setup
    r = duck.unlearn(model, train, test=test, forget_classes=[2], method="finetune", epochs=1, lr=0.05)
    assert r.metrics["method"] == "finetune" and r.metrics["hparams"]["lr"] == 0.05 and r.metrics["hparams"]["epochs"] == 1


@pytest.mark.parametrize("name", sorted(p.stem for p in (conf_dir() / "recipe").glob("*.yaml")))
def test_every_packaged_recipe_reads_as_the_api_reads_it(name):
    """``recipe=NAME`` in duck.unlearn / duck.audit: the preset resolves its interpolations as a job config does
    (``T_max: ${recipe.epochs}`` read alone raised InterpolationKeyError for every recipe but synthetic's) and
    parses as the job's Recipe."""
    from duck.pipeline.config import compose, container, preset
    from duck.training import Recipe

    values = preset("recipe", name)
    assert values == container(compose("run", [f"recipe={name}"]).recipe)  # what a job composes
    assert "${" not in repr(values)
    if "T_max" in repr(values):
        assert values["scheduler"]["T_max"] == values["epochs"]
    assert Recipe.from_cfg(values).epochs == values["epochs"]


def test_the_audit_settings_defaults_are_the_packaged_lira_preset():
    """duck.audit parses its attack keywords with AuditSettings alone: its defaults must be conf/attack/lira.yaml's."""
    from attacks.audit import AuditSettings
    from duck.pipeline.config import preset
    from duck.schema import plain

    packaged = preset("attack", "lira")
    assert packaged.pop("name") == "lira" and plain(AuditSettings.from_cfg({})) == packaged


def test_without_a_test_set_the_training_splits_are_measured(user_setup):
    model, train, _, _ = user_setup
    r = duck.unlearn(model, train, forget_classes=[2], max_epochs=2)
    assert set(r.metrics["acc"]) == {"train_retain", "train_forget"} and r.metrics["aus"] is None


@pytest.mark.parametrize("kwargs,match", [
    ({"lambda_fgtt": 2.0}, "method 'duck' has no hyperparameter(s) ['lambda_fgtt']"),
    ({"method": "nope"}, "unknown method 'nope'"),
    ({"lr": -1.0}, "method.lr must be a finite number > 0.0"),
    ({"forget_classes": [7]}, "forget class 7"),
    ({"forget_classes": ["seven"]}, "seven"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"forget_classes": None, "forget_fraction": 1.0}, "forget_fraction=1.0 must be in (0, 1)"),
    ({"forget_classes": None, "forget_ids": "nofile.txt"}, "pass forget_ids=PATH to a .txt/.npy/.csv file"),
    *([({"device": "cuda"}, "device='cuda' but CUDA is not available; pass device='cpu' or device='auto'")]
      if not torch.cuda.is_available() else []),
    ({"threads": 0}, "threads=0 must be auto, null or an integer >= 1"),
    ({"head": "nope"}, "head="),
])
def test_bad_input_raises_duck_input_error_naming_the_value(user_setup, kwargs, match):
    model, train, test, _ = user_setup
    args = {"forget_classes": [1], **kwargs}
    with pytest.raises(DuckInputError, match=match.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]")):
        duck.unlearn(model, train, test=test, **args)


def test_a_near_chance_original_is_refused_before_any_unlearning(user_setup):
    _, train, test, _ = user_setup
    torch.manual_seed(1)
    untrained = TinyCNN()
    with torch.no_grad():
        untrained.out.weight.zero_()
        untrained.out.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))  # predicts class 0 for everything: 1/3
    with pytest.raises(DuckInputError, match=r"near chance: test accuracy 0\.3333 < min_acc_factor/num_classes"):
        duck.unlearn(untrained, train, test=test, forget_classes=[1])
    r = duck.unlearn(untrained, train, test=test, forget_classes=[1], min_acc_factor=0, max_epochs=1)
    assert r.metrics["original_acc"]["test"] == pytest.approx(1 / 3, abs=1e-4)


def test_a_collapsed_unlearned_model_is_refused_unless_min_acc_factor_is_0(user_setup):
    """NegGrad at lr 1e3 keeps finite weights but predicts one retained class for everything: its retained test
    accuracy 0.5 is below 1.5 / 2 retained classes, so it is refused as an untrusted result, naming the step."""
    model, train, test, _ = user_setup
    with pytest.raises(DuckInputError, match=r"neggrad collapsed the model: test_retain accuracy 0\.5000 < "
                       r"min_acc_factor/2 retained classes = 0\.7500 \(the original: (1\.0000|0\.9\d{3})\).*keywords lr="):
        duck.unlearn(model, train, test=test, forget_classes=[1], method="neggrad", lr=1e3)
    r = duck.unlearn(model, train, test=test, forget_classes=[1], method="neggrad", lr=1e3, min_acc_factor=0)
    assert r.metrics["acc"]["test_retain"] == pytest.approx(0.5, abs=1e-4)


def test_expect_acc_catches_data_prepared_differently(user_setup):
    """The user measured 0.95+ in their own pipeline; here the inputs are scaled differently (another
    normalisation): refused before any unlearning, naming the transforms (input_check=False: the BatchNorm check
    would refuse it first; this tests the accuracy check on its own)."""
    model, train, test, acc = user_setup
    x, y = test.tensors
    shifted = TensorDataset((x - 1.5) / 0.25, y)
    with pytest.raises(DuckInputError, match=r"expect_acc=.*transforms of the data sets you pass \(Normalize"):
        duck.unlearn(model, train, test=shifted, forget_classes=[1], expect_acc=acc, input_check=False)
    duck.unlearn(model, train, test=test, forget_classes=[1], expect_acc=acc, max_epochs=1)  # same data: accepted


def test_a_diverging_run_stops_with_a_clear_error_and_returns_nothing(user_setup):
    model, train, test, _ = user_setup
    with pytest.raises(DuckInputError, match=r"unlearning with duck diverged: .*Lower method\.lr=1e\+30"):
        duck.unlearn(model, train, test=test, forget_classes=[1], lr=1e30)


def test_threads_auto_uses_one_thread_on_small_machines(user_setup, monkeypatch):
    model, train, test, _ = user_setup
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    torch.set_num_threads(2)
    duck.unlearn(model, train, test=test, forget_classes=[1], max_epochs=1)
    assert torch.get_num_threads() == 1


def test_imagefolder_of_pngs_with_its_own_normalisation_and_class_names(tmp_path):
    """A torchvision ImageFolder (PNG files, the user's transforms) and forget classes given by name."""
    from PIL import Image
    from torchvision import transforms

    x, y = _signal_data(150, num_classes=3, seed=3)
    names = ["ankle_boot", "bag", "trouser"]
    pixels = ((x.clamp(-1, 3) + 1) / 4 * 255).round().to(torch.uint8)
    for split, rows in (("train", range(0, 120)), ("test", range(120, 150))):
        for i in rows:
            folder = tmp_path / split / names[int(y[i])]
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels[i, 0].numpy()).save(folder / f"{i:04d}.png")
    tf = transforms.Compose([transforms.Grayscale(), transforms.ToTensor(), transforms.Normalize([0.286], [0.353])])
    train = torchvision.datasets.ImageFolder(str(tmp_path / "train"), transform=tf)
    test = torchvision.datasets.ImageFolder(str(tmp_path / "test"), transform=tf)
    xs = torch.stack([train[i][0] for i in range(len(train))])
    model = _fit(TinyCNN(), xs, torch.tensor(train.targets), steps=100)
    r = duck.unlearn(model, train, test=test, forget_classes=["trouser"], batch_size=32)
    assert r.metrics["forget_classes"] == [2] and r.metrics["acc"]["test_forget"] <= 0.1
    r = duck.unlearn(model, train, test=test, forget_classes=["bag"], method="boundary_shrink", epochs=1)
    assert r.metrics["method"] == "boundary_shrink"  # the attack's pixel units from the transform's Normalize


# ------------------------------------------------------------------- every method, on the user's models
FAST = {"epochs": 1, "max_epochs": 1, "low_epochs": 1, "erm_epochs": 1, "msteps": 1, "batch_size": 32,
        "forget_batch_size": 32, "batch_ratio": 1, "low_batch_ratio": 1, "milestones": [],
        "n_shadow": 2, "num_oracles": 1,  # the reference banks of oracle / datamodel matching, smallest
        "n_models": 8, "keep_fraction": 0.3}  # subset matching's: each example left out by some model (0.3^8)


def _fast(name: str) -> dict:
    keys = method_file_keys(conf_dir() / "method" / f"{name}.yaml")
    return {k: v for k, v in FAST.items() if k in keys}


@pytest.fixture(scope="module")
def rgb_data():
    x, y = _signal_data(96, in_chans=3, num_classes=4, seed=5)
    x = nn.functional.interpolate(x, size=16)
    return TensorDataset(x[:64], y[:64]), TensorDataset(x[64:], y[64:])


@pytest.mark.parametrize("kind", ["plain", "torchvision_resnet18"])
@pytest.mark.parametrize("name", list_unlearners())
def test_every_method_through_the_api(name, kind, rgb_data):
    train, test = rgb_data
    torch.manual_seed(0)
    model = TinyCNN(3, 4) if kind == "plain" else torchvision.models.resnet18(num_classes=4)
    r = duck.unlearn(model, train, test=test, forget_classes=[1], method=name, min_acc_factor=0,
                     recipe="synthetic" if name == "retrain" or get_unlearner_class(name).needs else None,
                     normalization=((0.0,) * 3, (1.0,) * 3) if name == "boundary_shrink" else None, **_fast(name))
    assert type(r.model) is type(model) and r.metrics["method"] == name
    assert list(r.state_dict()) == list(model.state_dict())
    assert all(torch.isfinite(v).all() for v in r.state_dict().values() if v.is_floating_point())
    out = r.model.eval()(test.tensors[0][:3])
    assert out.shape == (3, 4) and np.isfinite(r.metrics["acc"]["test_retain"])


def test_the_none_control_returns_the_original_unchanged(user_setup):
    model, train, test, _ = user_setup
    r = duck.unlearn(model, train, test=test, forget_classes=[1], method="none")
    assert all(torch.equal(a, b) for a, b in zip(r.state_dict().values(), model.state_dict().values(), strict=True))
    assert r.metrics["reached_target"] is False and r.metrics["epochs"] == 0.0
    assert r.metrics["acc"]["test_forget"] > 0.9  # nothing forgotten


def test_a_test_set_normalised_otherwise_is_refused_by_the_input_check(user_setup):
    """Train prepared right, test with another normalisation: the model's BatchNorm statistics show it on the
    test split (the accuracy check alone would pass it: a new user's report)."""
    model, train, test, _ = user_setup
    x, y = test.tensors
    with pytest.raises(DuckInputError, match=r"the test data, as this job prepares them, do not look like the inputs.*Normalize"):
        duck.unlearn(model, train, test=TensorDataset(x * 2.0 + 0.5, y), forget_classes=[1])


def test_train_and_test_transforms_with_different_normalize_are_refused():
    from torchvision import transforms

    from duck.data.user import as_splits

    class WithTransform(torch.utils.data.Dataset):
        def __init__(self, mean: float) -> None:
            self.transform = transforms.Compose([transforms.Normalize([mean], [0.3])])
            self.targets = [0, 1, 0, 1]

        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int):
            return self.transform(torch.zeros(1, 4, 4)), self.targets[i]

    assert as_splits(WithTransform(0.2), WithTransform(0.2)).train.normalization == ((0.2,), (0.3,))
    with pytest.raises(DuckInputError, match="normalise differently"):
        as_splits(WithTransform(0.2), WithTransform(0.5))


def test_duck_audit_of_a_users_model_with_a_reference(user_setup, tmp_path):
    """duck.audit: LiRA on the forget samples of the user's model, a shadow bank of its architecture trained
    with the named recipe and cached; a second audit reuses the bank."""
    model, train, test, _ = user_setup
    unlearned = duck.unlearn(model, train, test=test, forget_classes=[1], batch_size=32).model
    a = duck.audit(unlearned, train, test, forget_classes=[1], recipe="synthetic", original=model, n_shadow=4,
                   svm_mia={"enabled": False}, cache_dir=str(tmp_path))
    assert a["target"] == "unlearned" and a["members"] == "forget" and a["n_members"] == 90
    assert 0.0 <= a["lira"]["auc"] <= 1.0 and a["lira"]["verdict"] and "original" in a["reference"]
    assert a["bank"]["trained_now"] == 4
    again = duck.audit(unlearned, train, test, forget_classes=[1], recipe="synthetic", n_shadow=4,
                       svm_mia={"enabled": False}, cache_dir=str(tmp_path))
    assert again["bank"]["trained_now"] == 0 and again["lira"]["auc"] == a["lira"]["auc"]
    with pytest.raises(DuckInputError, match="recipe=None: name the packaged recipe"):
        duck.audit(unlearned, train, test, forget_classes=[1])
    with pytest.raises(DuckInputError, match="unknown attack option"):
        duck.audit(unlearned, train, test, forget_classes=[1], recipe="synthetic", nshadow=4)
