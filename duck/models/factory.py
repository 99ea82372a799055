"""Model factory: local small CNNs by name, otherwise any timm model (``timm.create_model``).

Every model is wrapped in :class:`Classifier`, which exposes the split DUCK needs (ALGORITHMS.md §1):
``embed(x) = forward_head(forward_features(x), pre_logits=True)`` and ``head(z) = get_classifier()(z)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from duck.errors import DuckInputError
from duck.models.small_cnn import SmallCNN

_LOCAL_MODELS: dict[str, Callable[..., nn.Module]] = {}


def register_model(name: str) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        _LOCAL_MODELS[name] = fn
        return fn

    return deco


@register_model("smallcnn")
def smallcnn(num_classes: int, in_chans: int, width: int = 32, **kw: Any) -> nn.Module:
    """For 8x8 inputs (digits): one 2x2 pool, 128-d embedding at width 32."""
    return SmallCNN(num_classes, in_chans, width=width, n_pool=1, drop_rate=kw.get("drop_rate", 0.0))


@register_model("smallcnn28")
def smallcnn28(num_classes: int, in_chans: int, width: int = 16, **kw: Any) -> nn.Module:
    """For 28x28 inputs (Fashion-MNIST): two 2x2 pools, ``4·width``-d embedding."""
    return SmallCNN(num_classes, in_chans, width=width, n_pool=2, drop_rate=kw.get("drop_rate", 0.0))


class Classifier(nn.Module):
    """A classifier with an explicit embedding/head split; ``forward(x) == head(embed(x))``."""

    def __init__(self, net: nn.Module, arch: str, num_classes: int, in_chans: int, img_size: int) -> None:
        super().__init__()
        self.net = net
        self.arch, self.num_classes, self.in_chans, self.img_size = arch, num_classes, in_chans, img_size

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled pre-logit embedding ``f(x)`` ``(B, D)``."""
        return self.net.forward_head(self.net.forward_features(x), pre_logits=True)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        """Linear head ``g(z)`` ``(B, num_classes)``."""
        return self.net.get_classifier()(z)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))

    @property
    def embed_dim(self) -> int:
        return int(self.net.num_features)

    def classifier_path(self) -> str:
        """Attribute path of the linear head inside ``net`` (``"fc"``, ``"head"``, ``"head.fc"``...)."""
        cfg = getattr(self.net, "pretrained_cfg", None) or {}
        return cfg.get("classifier", "fc")

    def set_classifier(self, module: nn.Module) -> None:
        """Replace the linear head (used by methods that change the number of outputs, e.g. boundary expanding)."""
        *parents, last = self.classifier_path().split(".")
        owner = self.net
        for p in parents:
            owner = getattr(owner, p)
        setattr(owner, last, module)
        self.num_classes = int(module.out_features)
        if hasattr(self.net, "num_classes"):
            self.net.num_classes = self.num_classes

    def spec(self) -> dict[str, Any]:
        return {"model": self.arch, "num_classes": self.num_classes, "in_chans": self.in_chans,
                "img_size": self.img_size}


def list_local_models() -> list[str]:
    return sorted(_LOCAL_MODELS)


def _cifar_stem(net: nn.Module, in_chans: int) -> None:
    """CIFAR-style ResNet stem: 3x3 stride-1 first conv, no max-pool (for inputs of 64 px or less)."""
    if not (hasattr(net, "conv1") and isinstance(net.conv1, nn.Conv2d) and hasattr(net, "maxpool")):
        raise DuckInputError("model.cifar_stem=true only applies to ResNet-style models (conv1 + maxpool)")
    net.conv1 = nn.Conv2d(in_chans, net.conv1.out_channels, 3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()


def create_model(name: str, num_classes: int, in_chans: int = 3, img_size: int = 32, *, pretrained: bool = False,
                 cifar_stem: bool | str = "auto", **kwargs: Any) -> Classifier:
    """Build ``name`` (a local small CNN or any timm model) for ``num_classes`` outputs and the input shape."""
    if num_classes < 2:
        raise DuckInputError(f"num_classes={num_classes} must be at least 2")
    if name in _LOCAL_MODELS:
        if pretrained:
            raise DuckInputError(f"{name} has no pretrained weights; set model.pretrained=false")
        net = _LOCAL_MODELS[name](num_classes=num_classes, in_chans=in_chans, **kwargs)
        return Classifier(net, name, num_classes, in_chans, img_size)
    import timm

    if not timm.is_model(name):
        raise DuckInputError(
            f"unknown model {name!r}; use one of {list_local_models()} or a timm model name "
            "(python -c 'import timm; print(timm.list_models())')"
        )
    args = dict(pretrained=pretrained, num_classes=num_classes, in_chans=in_chans, **kwargs)
    try:
        try:
            net = timm.create_model(name, img_size=img_size, **args)
        except TypeError:  # architectures without an img_size argument (CNNs) adapt to any input size
            net = timm.create_model(name, **args)
    except (RuntimeError, OSError) as e:
        if pretrained:
            raise DuckInputError(f"cannot load pretrained weights for {name} ({e}); set model.pretrained=false "
                                 "or put the weights in the Hugging Face cache") from None
        raise
    if cifar_stem is True or (cifar_stem == "auto" and img_size <= 64 and name.startswith(("resnet", "resnext"))):
        _cifar_stem(net, in_chans)
    return Classifier(net, name, num_classes, in_chans, img_size)
