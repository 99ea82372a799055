"""The own-model workflow from the command line (issue 24 items 3-6): a model class the toolkit did not write
(``model=custom model._target_=...``), plain checkpoints in and out, the trust checks, forget ids a user can
follow."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
import torch
from conftest import method_file_keys, written_files
from test_api import FAST  # every method's fast settings, its reference banks smallest

from duck.pipeline.config import conf_dir
from duck.unlearn import list_unlearners

USER_MODULE = textwrap.dedent("""
    import torch
    from torch import nn
    from torchvision.models.resnet import BasicBlock, ResNet


    class TinyCNN(nn.Module):
        def __init__(self, num_classes: int = 4, width: int = 8):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.out = nn.Linear(width, num_classes)

        def forward(self, x):
            return self.out(self.body(x))


    class TVResNet18(ResNet):  # torchvision's resnet18 as a class a config can name
        def __init__(self, num_classes: int = 4):
            super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
            self.conv1 = nn.Conv2d(1, 64, 3, padding=1, bias=False)
""")
DATA = ("data=synthetic", "data.n_train=240", "data.n_test=120", "progress=false", "trainer=cpu")


@pytest.fixture(scope="module")
def user_package(tmp_path_factory: pytest.TempPathFactory):
    """A package ``usermodels_cli`` on the Python path, as a user's own code would be."""
    root = tmp_path_factory.mktemp("userpkg")
    (root / "usermodels_cli.py").write_text(USER_MODULE)
    sys.path.insert(0, str(root))
    yield "usermodels_cli"
    sys.path.remove(str(root))
    sys.modules.pop("usermodels_cli", None)


def _train_outside(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int = 30) -> torch.nn.Module:
    """The user's own training loop (Adam, batches of 32), outside the toolkit (the caller seeds torch)."""
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    for _ in range(epochs):
        for rows in torch.randperm(len(y)).split(32):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[rows]), y[rows]).backward()
            opt.step()
    return model.eval()


@pytest.fixture(scope="module")
def trained(user_package, tmp_path_factory: pytest.TempPathFactory):
    """The user's TinyCNN trained outside the toolkit on the synthetic images, saved as a plain state dict."""
    import importlib

    from duck.data.registry import build_datasets

    data = build_datasets("synthetic", n_train=240, n_test=120)
    torch.manual_seed(0)
    model = _train_outside(importlib.import_module(user_package).TinyCNN(num_classes=4), *data.train.tensors())
    path = tmp_path_factory.mktemp("own") / "tiny.pt"
    torch.save(model.state_dict(), path)
    return path, model


def _fast_args(name: str) -> list[str]:
    keys = method_file_keys(conf_dir() / "method" / f"{name}.yaml")
    return [f"method.{k}={v if not isinstance(v, list) else '[' + ','.join(map(str, v)) + ']'}"
            for k, v in FAST.items() if k in keys]


def test_unlearn_a_users_model_class_and_load_the_result_into_it(run_cli, user_package, trained):
    path, model = trained
    code, out, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                      f"ckpt={path}", "scenario.forget_classes=[1]")
    assert code == 0, err
    assert written_files(run_dir) == {"unlearned.safetensors", "metrics.json", "forget_ids.txt"}
    from safetensors.torch import load_file

    sd = load_file(run_dir / "unlearned.safetensors")
    assert sorted(sd) == sorted(model.state_dict())  # the input's own key names, no net. prefix
    fresh = type(model)(num_classes=4)
    fresh.load_state_dict(sd)  # strict
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["model"] == "custom" and m["acc"]["test_forget"] <= 0.1
    ids = [int(t) for t in (run_dir / "forget_ids.txt").read_text().split("\n") if t and not t.startswith("#")]
    from duck.data.registry import build_datasets

    labels = build_datasets("synthetic", n_train=240, n_test=120).train.labels
    assert ids == sorted(i for i in range(240) if labels[i] == 1)  # the resolved training indices, ascending
    # .pt on request: a plain state dict (torch.load(weights_only=True) -> load_state_dict), manifest beside it
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[class1]", "out_format=pt")
    assert code == 0, err
    assert {"unlearned.pt", "unlearned.manifest.json"} <= written_files(run_dir)
    fresh.load_state_dict(torch.load(run_dir / "unlearned.pt", weights_only=True))
    assert json.loads((run_dir / "metrics.json").read_text())["forget_classes"] == [1]  # named class1


def test_prefixed_checkpoint_keys_come_back_with_their_prefix(run_cli, user_package, trained, tmp_path):
    """A checkpoint saved from a DataParallel/DDP wrapper (``module.`` keys) is written back with them."""
    path, model = trained
    wrapped = tmp_path / "ddp.pt"
    torch.save({f"module.{k}": v for k, v in model.state_dict().items()}, wrapped)
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={wrapped}", "scenario.forget_classes=[2]", "method.max_epochs=1")
    assert code == 0, err
    from safetensors.torch import load_file

    assert sorted(load_file(run_dir / "unlearned.safetensors")) == sorted(f"module.{k}" for k in model.state_dict())


@pytest.mark.parametrize("kind", ["TinyCNN", "TVResNet18"])
@pytest.mark.parametrize("name", list_unlearners())
def test_every_method_on_a_users_model_class_from_the_command_line(run_cli, user_package, tmp_path, name, kind):
    """model=custom with every registered method (fast settings), from a plain state dict of the class."""
    import importlib

    torch.manual_seed(0)
    net = getattr(importlib.import_module(user_package), kind)(num_classes=4)
    ckpt = tmp_path / "m.pt"
    torch.save(net.state_dict(), ckpt)
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.{kind}",
                                    f"ckpt={ckpt}", "scenario.forget_classes=[1]", f"method={name}",
                                    "min_acc_factor=0", "input_check=false", *_fast_args(name))
    assert code == 0, err
    from safetensors.torch import load_file

    sd = load_file(run_dir / "unlearned.safetensors")
    net.load_state_dict(sd)
    assert all(torch.isfinite(v).all() for v in sd.values() if v.is_floating_point())


@pytest.mark.parametrize("args,match", [
    (("method.lr=1e30",), "unlearning with duck diverged"),
    (("method=finetune", "method.lr=1e30"), "unlearning with finetune diverged"),
])
def test_a_diverging_unlearning_run_writes_nothing(run_cli, user_package, trained, args, match):
    path, _ = trained
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[1]", *args)
    assert code == 2 and match in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert written_files(run_dir) == set()


def test_a_diverging_original_is_never_cached_or_written(run_cli):
    code, _, err, run_dir = run_cli("run", *DATA, "model=smallcnn", "model.width=8", "recipe.optimizer.lr=1e30",
                                    "audit=false")
    assert code == 2 and "training diverged" in err and "recipe.optimizer.lr" in err, err
    assert written_files(run_dir) == set()


def test_a_near_chance_original_is_refused_before_anything_is_written(run_cli, user_package, tmp_path):
    import importlib

    torch.manual_seed(0)
    net = importlib.import_module(user_package).TinyCNN(num_classes=4)
    with torch.no_grad():
        net.out.weight.zero_()
        net.out.bias.copy_(torch.tensor([3.0, 0.0, 0.0, 0.0]))  # one class for everything: accuracy 1/4
    ckpt = tmp_path / "chance.pt"
    torch.save(net.state_dict(), ckpt)
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={ckpt}", "scenario.forget_classes=[1]", "input_check=false")
    assert code == 2 and "near chance: test accuracy 0.2500 < min_acc_factor/num_classes = 1.5/4" in err, err
    assert "data.mean / data.std" in err and written_files(run_dir) == set()


def test_an_unknown_out_format_is_refused_before_any_work(run_cli, user_package, trained):
    path, _ = trained
    code, out, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                      f"ckpt={path}", "scenario.forget_classes=[1]", "out_format=bogus")
    assert code == 2 and "out_format='bogus'; choose one of ['safetensors', 'pt']" in err, err
    assert "original:" not in out and written_files(run_dir) == set()


def test_a_collapsed_unlearned_model_is_refused_and_nothing_is_written(run_cli, user_package, trained):
    path, _ = trained
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[1]", "method=neggrad", "method.lr=1000")
    assert code == 2 and "unlearning with neggrad collapsed the model: test_retain accuracy" in err, err
    assert "(method.lr, method.epochs), or pass min_acc_factor=0" in err and written_files(run_dir) == set()


def test_expect_acc_refuses_a_model_measuring_otherwise(run_cli, user_package, trained):
    path, _ = trained
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[1]", "expect_acc=0.5")
    assert code == 2 and "expect_acc=0.5" in err and written_files(run_dir) == set(), err


@pytest.fixture(scope="module")
def image_folder_model(user_package, tmp_path_factory: pytest.TempPathFactory):
    """An ImageFolder of PNGs and the user's TinyCNN trained on it with torchvision and the user's own
    normalisation (mean 0.286, std 0.353, Fashion-MNIST's), outside the toolkit: ``(root, checkpoint)``."""
    import importlib

    import numpy as np
    import torchvision
    from PIL import Image
    from torchvision import transforms

    from duck.data.registry import build_datasets

    root = tmp_path_factory.mktemp("pngs")
    data = build_datasets("synthetic", n_train=240, n_test=120)
    for split, ds in (("train", data.train), ("test", data.test)):
        x, y = ds.tensors()
        pixels = ((x * 0.2 + 0.4).clamp(0, 1) * 255).round().to(torch.uint8).numpy()
        for i in range(len(y)):
            folder = root / split / f"c{int(y[i])}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels[i, 0]).save(folder / f"{i:04d}.png")
    tf = transforms.Compose([transforms.Grayscale(), transforms.ToTensor(), transforms.Normalize([0.286], [0.353])])
    train = torchvision.datasets.ImageFolder(str(root / "train"), transform=tf)
    xs = torch.stack([train[i][0] for i in range(len(train))])
    ys = torch.tensor(train.targets)
    torch.manual_seed(0)
    model = _train_outside(importlib.import_module(user_package).TinyCNN(num_classes=4), xs, ys)
    ckpt = root / "tiny.pt"
    torch.save(model.state_dict(), ckpt)
    assert np.isfinite(float(xs.mean()))
    return root, ckpt


def test_wrongly_normalised_images_are_refused_before_any_unlearning(run_cli, user_package, image_folder_model):
    """The user's ImageFolder model, trained with its own normalisation: read with ImageNet's defaults
    (data.mean / data.std not given) it is refused before any unlearning; with the user's values it runs."""
    root, ckpt = image_folder_model
    args = ("data=imagefolder", f"data.root={root}", "data.in_chans=1", "data.img_size=8", "progress=false",
            "trainer=cpu", "model=custom", f"model._target_={user_package}.TinyCNN", f"ckpt={ckpt}",
            "scenario.forget_classes=[c1]")
    code, _, err, run_dir = run_cli("unlearn", *args)
    assert code == 2 and "do not look like the inputs the original was trained on" in err and "data.mean" in err, err
    assert written_files(run_dir) == set()
    code, _, err, run_dir = run_cli("unlearn", *args, "data.mean=[0.286]", "data.std=[0.353]", "method.batch_size=32")
    assert code == 0, err
    assert "may not be prepared" not in err, err
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["original_acc"]["test"] > 0.75 and m["acc"]["test_forget"] <= 0.1
    # a standard deviation 20 % off is under the refusal limit but far from the right preparation: a warning
    code, _, err, run_dir = run_cli("unlearn", *args, "data.mean=[0.286]", "data.std=[0.42]", "method.batch_size=32")
    assert code == 0, err
    assert "warning: the training data may not be prepared as the data the original was trained on" in err, err
    assert "expect_acc=" in err
    m = json.loads((run_dir / "metrics.json").read_text())
    assert m["warnings"][0].startswith("the training data may not be prepared")  # recorded, not only printed


def test_forget_ids_txt_reads_back_as_a_custom_forget_set(run_cli, user_package, trained):
    """forget_ids.txt (with its '#' header) is the file format scenario=custom reads: the same forget set."""
    path, _ = trained
    code, _, err, first = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                  f"ckpt={path}", "scenario=homogeneous_removal", "scenario.fraction=0.1",
                                  "method.max_epochs=1")
    assert code == 0, err
    code, _, err, second = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                   f"ckpt={path}", "scenario=custom", f"scenario.forget_ids={first / 'forget_ids.txt'}",
                                   "method.max_epochs=1")
    assert code == 0, err
    assert (first / "forget_ids.txt").read_text().split("\n", 1)[1] == (second / "forget_ids.txt").read_text().split("\n", 1)[1]


def test_a_pt_output_keeps_its_manifest_for_later_jobs(run_cli, user_package, trained):
    """out_format=pt writes a bare state dict and the manifest beside it; duck-audit reads the manifest and
    refuses the checkpoint for another forget set (it would audit the wrong members)."""
    path, _ = trained
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[1]", "out_format=pt", "method.max_epochs=1")
    assert code == 0, err
    from duck.checkpoint import load_checkpoint

    _, manifest = load_checkpoint(run_dir / "unlearned.pt")
    assert manifest["method"] == "duck" and manifest["target"] == f"{user_package}.TinyCNN"
    code, _, err, _ = run_cli("audit", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                              f"ckpt={run_dir / 'unlearned.pt'}", "scenario.forget_classes=[2]")
    assert code == 2 and "was made for another forget set" in err, err


@pytest.mark.parametrize("command", ["unlearn", "audit"])
def test_a_deletion_request_must_name_its_forget_set(run_cli, trained, command):
    """duck-unlearn / duck-audit with class removal and no forget_classes used to forget class 3 silently
    (the demo's default): now a required setting, refused before anything is written."""
    path, _ = trained
    code, _, err, run_dir = run_cli(command, *DATA, "model=custom", "model._target_=usermodels_cli.TinyCNN",
                                    f"ckpt={path}", "scenario=class_removal")
    assert code == 2 and "required setting scenario.forget_classes not given" in err, err
    assert written_files(run_dir) == set()


def test_auditing_a_plain_state_dict_records_the_recipe_warning(run_cli, user_package, trained):
    """A plain state dict records no training recipe: duck-unlearn audit=true says the shadows' recipe is a guess
    on stderr, in audit.json and in the report (whose opening sections hold the verdict, then the warnings)."""
    path, _ = trained
    code, _, err, run_dir = run_cli("unlearn", *DATA, "model=custom", f"model._target_={user_package}.TinyCNN",
                                    f"ckpt={path}", "scenario.forget_classes=[1]", "audit=true", "attack.n_shadow=4",
                                    "attack.svm_mia.enabled=false", "report.shareable.enabled=false",
                                    "report.analysis.enabled=false", "recipe=synthetic", "recipe.epochs=2")
    assert code == 0, err
    assert "warning: the audited model's original was trained outside this toolkit" in err, err
    # the recipe was given (recipe=synthetic recipe.epochs=2): the warning records it, not asks for it again
    assert "with the recipe you set (Adam lr 0.003, 2 epochs" in err and "pass recipe=NAME" not in err, err
    audit = json.loads((run_dir / "audit.json").read_text())
    assert any("outside this toolkit" in w for w in audit["warnings"])
    report = (run_dir / "report.md").read_text()
    assert report.index("## Membership inference in one sentence") < report.index("## Warnings") \
        < report.index("## Accuracy and AUS")
