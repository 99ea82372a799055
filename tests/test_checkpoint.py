"""Checkpoint I/O: formats, manifests, mismatches, corrupt files, pickles that would run code, atomic writes."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from duck.checkpoint import (
    build_manifest,
    check_forget_set,
    check_manifest,
    checkpoint_key_rule,
    load_checkpoint,
    load_into,
    save_checkpoint,
    to_checkpoint_keys,
)
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.io import atomic_write
from duck.models import create_model, wrap_model


@pytest.fixture
def model():
    torch.manual_seed(0)
    return create_model("smallcnn", 4, 1, 8, width=8)


@pytest.mark.parametrize("suffix", [".ckpt", ".safetensors"])
def test_roundtrip_with_manifest(tmp_path, model, suffix):
    man = build_manifest(model.spec(), "synthetic", method="duck", seed=3)
    path = save_checkpoint(tmp_path / f"m{suffix}", model.state_dict(), man)
    sd, got = load_checkpoint(path)
    assert got["model"] == "smallcnn" and got["num_classes"] == 4 and got["dataset"] == "synthetic"
    fresh = create_model("smallcnn", 4, 1, 8, width=8)
    load_into(fresh, sd, path)
    for k, v in model.state_dict().items():
        assert torch.equal(v, fresh.state_dict()[k])


def test_reads_lightning_ckpt_and_plain_state_dicts(tmp_path, model):
    lightning_style = {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
                       "epoch": 3, "global_step": 10, "pytorch-lightning_version": "2.6.0"}
    torch.save(lightning_style, tmp_path / "l.ckpt")
    torch.save(model.net.state_dict(), tmp_path / "plain.pth")  # timm-style keys without the wrapper prefix
    for name in ("l.ckpt", "plain.pth"):
        sd, man = load_checkpoint(tmp_path / name)
        fresh = create_model("smallcnn", 4, 1, 8, width=8)
        load_into(fresh, sd, tmp_path / name)
        assert man is None and torch.equal(fresh.net.fc.weight, model.net.fc.weight)


def test_missing_truncated_and_malicious_files(tmp_path, model):
    with pytest.raises(DuckInputError, match="not found"):
        load_checkpoint(tmp_path / "nope.ckpt")
    path = save_checkpoint(tmp_path / "m.ckpt", model.state_dict(), {})
    data = path.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(DuckInputError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "trunc.ckpt")
    st = save_checkpoint(tmp_path / "m.safetensors", model.state_dict(), {})
    (tmp_path / "trunc.safetensors").write_bytes(st.read_bytes()[:100])
    with pytest.raises(DuckInputError, match="corrupt or truncated"):
        load_checkpoint(tmp_path / "trunc.safetensors")
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    for name, payload in (("evil.pt", {"state_dict": Evil()}), ("evil2.ckpt", Evil())):
        with open(tmp_path / name, "wb") as f:
            if name.endswith(".pt"):
                torch.save(payload, f)
            else:
                pickle.dump(payload, f)
        # torch.save'd: the disallowed callable is named; a bare pickle has no torch header: not a checkpoint
        match = "refusing to load .* pickles posix.system" if name.endswith(".pt") else "not a PyTorch checkpoint"
        with pytest.raises(DuckInputError, match=match):
            load_checkpoint(tmp_path / name)
    assert not marker.exists()
    (tmp_path / "text.ckpt").write_text("garbage\n")  # not a refusal: nothing in it could run
    with pytest.raises(DuckInputError, match="corrupt or not a PyTorch checkpoint"):
        load_checkpoint(tmp_path / "text.ckpt")


def test_architecture_and_class_count_mismatch(tmp_path, model):
    path = save_checkpoint(tmp_path / "m.ckpt", model.state_dict(), {})
    sd, _ = load_checkpoint(path)
    with pytest.raises(DuckInputError, match=r"fc.weight has shape \(4, 32\), expected \(10, 32\); the checkpoint's "
                                             r"head has 4 outputs \(classes\), the model 10"):
        load_into(create_model("smallcnn", 10, 1, 8, width=8), sd, path)
    with pytest.raises(DuckInputError, match="another architecture"):
        load_into(create_model("resnet18", 4, 1, 8), sd, path)
    # one extra key: the unexpected name is given (the message said "missing []")
    with pytest.raises(DuckInputError, match=r"do not match smallcnn \(unexpected \['net.extra.weight'\]\)"):
        load_into(create_model("smallcnn", 4, 1, 8, width=8), {**sd, "net.extra.weight": torch.zeros(1)}, path)
    with pytest.raises(DuckInputError, match=r"do not match smallcnn \(missing \['fc.bias'\]\)"):
        load_into(create_model("smallcnn", 4, 1, 8, width=8), {k: v for k, v in sd.items() if k != "net.fc.bias"}, path)
    man = build_manifest(model.spec(), "synthetic")
    with pytest.raises(DuckInputError, match=r"num_classes=4 \(requested 10\)"):
        check_manifest(man, {"model": "smallcnn", "num_classes": 10, "dataset": "synthetic"}, path)
    with pytest.raises(DuckInputError, match=r"dataset='synthetic' \(requested 'digits'\)"):
        check_manifest(man, {"dataset": "digits"}, path)


class FlatNet(torch.nn.Module):
    """A user's plain model whose head takes the flattened feature map: its width depends on the image size."""

    def __init__(self, img_size: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 2, 3, padding=1)
        self.out = torch.nn.Linear(2 * img_size * img_size, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.conv(x).flatten(1))


def _flat(img_size: int):
    return wrap_model(FlatNet(img_size), example=torch.zeros(2, 3, img_size, img_size))


@pytest.mark.parametrize("saved,requested,match", [
    (lambda: create_model("smallcnn", 4, 1, 8, width=8), lambda: create_model("smallcnn", 4, 3, 8, width=8),
     r"features.0.0.weight has shape \(8, 1, 3, 3\), expected \(8, 3, 3, 3\); the checkpoint's first convolution "
     r"takes 1-channel images, the model's 3: set data.in_chans=1"),
    (lambda: create_model("resnet18", 4, 3, 32), lambda: create_model("resnet18", 4, 3, 32, cifar_stem=False),
     r"conv1.weight has shape \(64, 3, 3, 3\), expected \(64, 3, 7, 7\); its first convolution has a 3x3 kernel, "
     r"the model's 7x7: set model.cifar_stem=true"),
    (lambda: create_model("resnet18", 4, 3, 224), lambda: create_model("resnet18", 4, 3, 32),
     r"its first convolution has a 7x7 kernel, the model's 3x3: set model.cifar_stem=false"),
    (lambda: _flat(8), lambda: _flat(16),
     r"out.weight has shape \(4, 128\), expected \(4, 512\); net.out.weight takes 128 input features, the model's "
     r"512: a flattened feature size depends on the image size \(data.img_size\)"),
    (lambda: create_model("smallcnn", 4, 1, 8, width=8), lambda: create_model("smallcnn", 4, 1, 8, width=16),
     r"expected \(16, 1, 3, 3\); another model width or model.\* option\?"),
])
def test_shape_mismatch_names_the_setting_that_fixes_it(tmp_path, saved, requested, match):
    """"wrong class count or architecture width?" named no setting; now the one that fits the checkpoint."""
    with pytest.raises(DuckInputError, match=r"does not fit the requested model: .*" + match):
        load_into(requested(), saved().state_dict(), tmp_path / "m.pt")


def test_key_rule_writes_back_the_input_checkpoints_own_names(tmp_path, model):
    """load_into says how the file's names map onto the model's; to_checkpoint_keys inverts it, so the unlearned
    weights go out under the names the user's file had (plain, Lightning, DDP, ours)."""
    plain = model.plain_state_dict()
    assert list(plain) == list(model.net.state_dict())
    files = {("", "net."): plain, ("model.", ""): {f"model.{k}": v for k, v in model.state_dict().items()},
             ("module.", "net."): {f"module.{k}": v for k, v in plain.items()}, ("", ""): model.state_dict()}
    for rule, sd in files.items():
        fresh = create_model("smallcnn", 4, 1, 8, width=8)
        assert checkpoint_key_rule(sd, fresh) == rule
        assert load_into(fresh, sd, tmp_path / "m.pt") == rule
        back = to_checkpoint_keys(fresh.state_dict(), rule)
        assert list(back) == list(sd) and all(torch.equal(back[k], sd[k]) for k in sd)
    assert checkpoint_key_rule({"fc.weight": torch.zeros(1)}, model) is None
    # a user's torchvision model: its own state dict in, the same names out
    import torchvision

    user = torchvision.models.resnet18(num_classes=4)
    wrapped = wrap_model(torchvision.models.resnet18(num_classes=4), example=torch.zeros(2, 3, 32, 32))
    rule = load_into(wrapped, user.state_dict(), tmp_path / "user.pth")
    assert rule == ("", "net.") and list(to_checkpoint_keys(wrapped.state_dict(), rule)) == list(user.state_dict())
    with pytest.raises(DuckInputError, match="does not start with 'net.'"):
        to_checkpoint_keys({"fc.weight": torch.zeros(1)}, rule)


def _safetensors_with_manifest(path, sd, manifest_text):
    from safetensors.torch import save

    path.write_bytes(save(sd, metadata={"duck_manifest": manifest_text}))
    return path


def test_unreadable_files_are_corrupt_not_a_traceback(tmp_path, model):
    """Every file that is not a readable checkpoint is one DuckInputError naming it (an empty file raised
    IndexError, text KeyError, a non-JSON manifest JSONDecodeError, integer keys AttributeError)."""
    sd = model.state_dict()
    cases = {
        "empty.ckpt": (lambda p: p.write_bytes(b""), r"empty\.ckpt is corrupt or truncated \(empty file, 0 bytes\)"),
        "hello.ckpt": (lambda p: p.write_text("hello world"), r"hello\.ckpt is corrupt or not a PyTorch checkpoint"),
        "badman.safetensors": (lambda p: _safetensors_with_manifest(p, sd, "not json{"),
                               r"badman\.safetensors is corrupt: its duck_manifest metadata is not JSON"),
        "listman.safetensors": (lambda p: _safetensors_with_manifest(p, sd, "[1, 2]"),
                                r"listman\.safetensors is corrupt: its manifest is a list, not a JSON object"),
        "strman.ckpt": (lambda p: torch.save({"state_dict": sd, "manifest": "smallcnn"}, p),
                        r"strman\.ckpt is corrupt: its manifest is a str, not a JSON object"),
        "intkeys.pt": (lambda p: torch.save({0: torch.zeros(1)}, p),
                       r"intkeys\.pt is not a state dict: key 0 \(int\) is not a parameter name"),
        "nontensor.ckpt": (lambda p: torch.save({"state_dict": {"w": torch.zeros(1), "epoch": 3}}, p),
                           r"nontensor\.ckpt is not a state dict: epoch holds a value of type int, not a tensor"),
        "emptydict.pt": (lambda p: torch.save({}, p), r"emptydict\.pt holds no state dict \(an empty dict\)"),
        "adir.ckpt": (lambda p: p.mkdir(), r"adir\.ckpt is a directory"),
    }
    for name, (make, match) in cases.items():
        make(tmp_path / name)
        with pytest.raises(DuckInputError, match=match):
            load_checkpoint(tmp_path / name)


@pytest.mark.parametrize("suffix", [".ckpt", ".safetensors"])
def test_non_finite_weights_are_refused(tmp_path, model, suffix):
    """A NaN model got AUS 1.0; now the first non-finite floating tensor is named (integer buffers such as
    num_batches_tracked are not checked)."""
    sd = model.state_dict()
    first, *_ = [k for k, v in sd.items() if v.is_floating_point()]
    path = save_checkpoint(tmp_path / f"nan{suffix}", {**sd, first: torch.full_like(sd[first], float("nan"))}, {})
    n = sd[first].numel()
    with pytest.raises(DuckInputError, match=rf"holds non-finite weights: {first} has {n} NaN/inf values out of {n}"):
        load_checkpoint(path)
    bias = sd["net.fc.bias"].clone()
    bias[0] = -float("inf")
    path = save_checkpoint(tmp_path / f"inf{suffix}", {**sd, "net.fc.bias": bias}, {})
    with pytest.raises(DuckInputError, match=r"net\.fc\.bias has 1 NaN/inf values out of 4"):
        load_checkpoint(path)
    half = save_checkpoint(tmp_path / f"half{suffix}", {k: v.half() if v.is_floating_point() else v for k, v in sd.items()}, {})
    assert load_checkpoint(half)[0][first].dtype == torch.float16  # finite low-precision weights load


DIGITS_DATA = {"name": "digits", "test_fraction": 0.25, "split_seed": 0, "augment": []}
SYNTH_DATA = {"name": "synthetic", "n_train": 240, "n_test": 120, "num_classes": 4, "img_size": 8, "in_chans": 1,
              "noise": 0.6, "seed": 0, "augment": []}


@pytest.mark.parametrize("recorded,requested,match", [
    (DIGITS_DATA, {**DIGITS_DATA, "split_seed": 1},
     r"another train/test split of digits: data\.split_seed=0 in the checkpoint \(requested 1\).*"
     r"Pass the checkpoint's values \(data\.split_seed=0\)"),
    (DIGITS_DATA, {**DIGITS_DATA, "test_fraction": 0.5, "split_seed": 3},
     r"data\.test_fraction=0\.25 in the checkpoint \(requested 0\.5\), data\.split_seed=0 in the checkpoint "
     r"\(requested 3\).*\(data\.test_fraction=0\.25 data\.split_seed=0\)"),
    (SYNTH_DATA, {**SYNTH_DATA, "seed": 1}, r"data\.seed=0 in the checkpoint \(requested 1\)"),
    (SYNTH_DATA, {**SYNTH_DATA, "noise": 0.3}, r"data\.noise=0\.6 in the checkpoint \(requested 0\.3\)"),
    (SYNTH_DATA, {**SYNTH_DATA, "n_test": 100}, r"data\.n_test=120 in the checkpoint \(requested 100\)"),
    ({"name": "imagefolder", "root": "/a", "train_split": "train", "test_split": "test"},
     {"name": "imagefolder", "root": "/a", "train_split": "train", "test_split": "val"},
     r"data\.test_split=test in the checkpoint \(requested val\)"),
], ids=["digits-split_seed", "digits-two-keys", "synthetic-seed", "synthetic-noise", "synthetic-n_test",
        "imagefolder-test_split"])
def test_another_train_test_split_is_refused(tmp_path, model, recorded, requested, match):
    man = build_manifest(model.spec(), recorded["name"], config={"data": recorded})
    with pytest.raises(DuckInputError, match=match):
        check_manifest(man, {"dataset": recorded["name"], "data": requested}, tmp_path / "m.ckpt")


def test_split_check_ignores_runtime_settings_and_missing_configs(tmp_path, model):
    path = tmp_path / "m.ckpt"
    man = build_manifest(model.spec(), "digits", config={"data": DIGITS_DATA})
    check_manifest(man, {"dataset": "digits", "data": {**DIGITS_DATA, "augment": ["rotate"]}}, path)  # not the split
    fm = {"name": "fashion_mnist", "root": "/usr/share/datasets/fashion-mnist", "augment": []}
    check_manifest(build_manifest(model.spec(), "fashion_mnist", config={"data": fm}),
                   {"dataset": "fashion_mnist", "data": {**fm, "root": "/elsewhere"}}, path)  # files moved: same split
    check_manifest(build_manifest(model.spec(), "digits"), {"dataset": "digits", "data": {**DIGITS_DATA, "split_seed": 1}},
                   path)  # no config recorded (plain state dicts, shadows): accepted as before
    check_manifest(build_manifest(model.spec(), "digits", config={"recipe": {}}),
                   {"dataset": "digits", "data": {**DIGITS_DATA, "split_seed": 1}}, path)
    with pytest.raises(DuckInputError, match=r"its manifest's config\.data is a str, not an object"):
        check_manifest(build_manifest(model.spec(), "digits", config={"data": "digits"}),
                       {"dataset": "digits", "data": DIGITS_DATA}, path)


def test_forget_set_is_compared_for_unlearned_and_retrained_checkpoints(tmp_path, model, synthetic):
    def scenario(classes):
        return build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, synthetic.num_classes,
                              forget_classes=classes).summary()

    def manifest(method):
        return build_manifest(model.spec(), "synthetic", method=method, scenario=scenario([1]),
                              config={"scenario": {"kind": "class_removal", "forget_classes": [1]}})

    path = tmp_path / "u.ckpt"
    check_forget_set(manifest("duck"), scenario([1]), path)  # the same forget set
    check_forget_set(manifest("original"), scenario([2]), path)  # an original saw every sample
    check_forget_set(None, scenario([2]), path)  # a plain state dict
    check_forget_set(build_manifest(model.spec(), "synthetic", method="duck"), scenario([2]), path)  # no forget set
    with pytest.raises(DuckInputError, match=r"u\.ckpt \(unlearned with duck\) was made for another forget set: "
                       r"class_removal of classes \[1\] \(60 forget samples\), but the requested scenario is "
                       r"class_removal of classes \[2\] \(60 forget samples\).*"
                       r"Pass the scenario it was made for \(scenario=class_removal scenario\.forget_classes=\[1\]\)"):
        check_forget_set(manifest("duck"), scenario([2]), path)
    with pytest.raises(DuckInputError, match=r"\(a retrained oracle\) was made for another forget set"):
        check_forget_set(manifest("retrain"), scenario([1, 2]), path)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")

    def boom(f):
        f.write(b"partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]  # no temporary file left behind
