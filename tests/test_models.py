"""Model factory: the embedding/head split is consistent for the small CNNs and timm models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from duck.errors import DuckInputError
from duck.models import create_model


@pytest.mark.parametrize("name,chans,size,dim", [
    ("smallcnn", 1, 8, 128), ("smallcnn28", 1, 28, 64), ("resnet18", 3, 32, 512),
    ("vit_tiny_patch16_224", 3, 32, 192),
])
def test_embed_head_split_matches_forward(name, chans, size, dim):
    kw = {"patch_size": 4} if name.startswith("vit") else {}
    m = create_model(name, 7, chans, size, **kw).eval()
    x = torch.randn(3, chans, size, size)
    z = m.embed(x)
    assert z.shape == (3, dim) and m.embed_dim == dim
    torch.testing.assert_close(m.head(z), m(x))
    torch.testing.assert_close(m(x), m.net(x))  # the wrapper adds nothing to the network's own forward
    assert m.head(z).shape == (3, 7)


def test_resnet_cifar_stem_and_set_classifier():
    m = create_model("resnet18", 10, 3, 32)
    assert m.net.conv1.stride == (1, 1) and isinstance(m.net.maxpool, nn.Identity)
    m.set_classifier(nn.Linear(m.embed_dim, 11))
    assert m.num_classes == 11 and m(torch.randn(2, 3, 32, 32)).shape == (2, 11)


def test_unknown_model_and_bad_class_count():
    with pytest.raises(DuckInputError, match="unknown model 'resnet1800'"):
        create_model("resnet1800", 10)
    with pytest.raises(DuckInputError, match="num_classes=1"):
        create_model("smallcnn", 1, 1, 8)


@pytest.mark.parametrize("name,kw,match", [
    ("smallcnn", {"width": 0}, "model.width=0 must be an integer >= 1"),
    ("smallcnn", {"width": -4}, "model.width=-4 must be an integer >= 1"),
    ("smallcnn", {"width": 1.5}, "model.width=1.5 must be an integer >= 1"),  # was truncated to 1
    ("smallcnn28", {"drop_rate": 2}, "model.drop_rate must be a finite number >= 0.0 and < 1.0, got 2"),
    ("smallcnn", {"foo": 1}, r"model.foo=1 is not an option of model 'smallcnn'; its options are model.width, "
                             r"model.drop_rate \(check the spelling"),
    ("smallcnn", {"cifar_stem": True}, "model.cifar_stem=True does not apply to smallcnn"),
    ("smallcnn", {"pretrained": True}, "smallcnn has no pretrained weights"),
    ("smallcnn", {"num_classes": 5}, "model.num_classes=5 cannot be set: it comes from the data set's class count"),
    ("resnet18", {"foo": 1}, r"model.foo=1 is not an option of model 'resnet18'; its options are model.pretrained, "
                             r"model.cifar_stem, .*model.drop_rate"),
    ("resnet18", {"img_size": 64}, "model.img_size=64 cannot be set: it comes from the data's image size"),
    ("resnet18", {"cifar_stem": "yes"}, "model.cifar_stem='yes' must be true, false or auto"),
    ("resnet18", {"pretrained": "no"}, "model.pretrained='no' must be true or false"),
    ("resnet18", {"drop_rate": "x"}, "model.drop_rate must be a finite number >= 0.0 and < 1.0, got 'x'"),
    ("vit_tiny_patch16_224", {"patch_size": 0}, r"cannot build model 'vit_tiny_patch16_224' for 3x32x32 inputs with "
                                                r"model.patch_size=0: .*; fix those model.\* settings"),
])
def test_model_options_are_checked_by_name(name, kw, match):
    chans = 1 if name.startswith("smallcnn") else 3
    with pytest.raises(DuckInputError, match=match):
        create_model(name, 4, chans, 32, **kw)


def test_small_cnn_options_are_used_and_image_size_checked():
    m = create_model("smallcnn", 4, 1, 8, width=3, drop_rate=0.25)
    assert m.embed_dim == 12 and m.net.head_drop.p == 0.25
    # the dropout acts where the framework calls the model (Classifier.forward = head(embed(x))), as timm's
    x = torch.randn(16, 1, 8, 8)
    m.train()
    assert not torch.equal(m(x), m(x))
    m.eval()
    assert torch.equal(m(x), m(x)) and torch.equal(m(x), m.net(x))
    assert create_model("smallcnn28", 4, 1, 4).embed_dim == 64
    with pytest.raises(DuckInputError, match="smallcnn28 needs images of at least 4x4 pixels .* data.img_size=2"):
        create_model("smallcnn28", 4, 1, 2)


def test_auto_cifar_stem_skips_deep_stems_and_embed_dim_is_the_embedding_width():
    """cifar_stem=auto on resnet18d / resnetv2 (deep stems) failed with a message about an option the user never
    set; it now keeps their stem. embed_dim is what embed() returns (mobilenetv3: 1024, not num_features)."""
    x = torch.randn(2, 3, 32, 32)
    for name in ("resnet18d", "resnetv2_50"):
        m = create_model(name, 10, 3, 32)
        assert m.embed(x).shape == (2, m.embed_dim)
    assert isinstance(create_model("resnet18d", 10, 3, 32).net.conv1, torch.nn.Sequential)  # its own stem
    assert create_model("resnet18", 10, 3, 32).net.conv1.stride == (1, 1)  # plain stem: the CIFAR stem
    with pytest.raises(DuckInputError, match="cifar_stem=true only applies to ResNet-style models with a plain"):
        create_model("resnet18d", 10, 3, 32, cifar_stem=True)
    m = create_model("mobilenetv3_small_100", 10, 3, 32)
    with torch.no_grad():
        assert m.embed(x).shape == (2, m.embed_dim) == (2, 1024)


@pytest.mark.parametrize("name", ["smallcnn", "smallcnn28"])
def test_local_model_config_files_are_presets_of_their_options(name):
    """conf/model/NAME.yaml sets only options its class declares, at the class's defaults; the classes' rules are
    the ones the factory applies (a value refused by the rule never reaches the model's constructor)."""
    import dataclasses

    from omegaconf import OmegaConf

    from duck.models.factory import _LOCAL_MODELS

    raw = OmegaConf.to_container(OmegaConf.load(Path(__file__).parents[1] / "conf" / "model" / f"{name}.yaml"))
    assert raw.pop("name") == name
    cls = _LOCAL_MODELS[name][1]
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    assert raw and all(defaults[k] == v for k, v in raw.items())
    assert dict(cls.parse(None)) == defaults == {"width": 32 if name == "smallcnn" else 16, "drop_rate": 0.0}
