"""Model factory: the embedding/head split is consistent for the small CNNs and timm models."""

from __future__ import annotations

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
