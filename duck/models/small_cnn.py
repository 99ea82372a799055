"""Small CNNs for 8x8 (digits) and 28x28 (Fashion-MNIST) inputs that train in seconds on a CPU.

They follow timm's interface (``forward_features``, ``forward_head(x, pre_logits)``, ``get_classifier``) so
the embedding/head split of :class:`duck.models.Classifier` treats them exactly like timm models.
"""

from __future__ import annotations

import torch
from torch import nn


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU blocks (widths w, 2w, 4w), ``n_pool`` 2x2 max-pools, global average pooling,
    a linear head. The embedding is the pooled ``4w``-d feature vector (``embed_dim``). Inputs need at least
    ``min_img_size = 2**n_pool`` pixels a side. ``width`` (an integer >= 1) and ``drop_rate`` (in [0, 1),
    dropout before the head) are the ``model.width`` / ``model.drop_rate`` options
    (:class:`duck.models.factory.SmallCnnOptions`)."""

    def __init__(self, num_classes: int = 10, in_chans: int = 1, width: int = 32, n_pool: int = 1,
                 drop_rate: float = 0.0) -> None:
        super().__init__()
        w = int(width)  # checked by the factory's options (duck.models.factory.SmallCnnOptions)
        self.min_img_size = 2**n_pool
        layers: list[nn.Module] = [_conv_bn(in_chans, w)]
        if n_pool >= 2:
            layers.append(nn.MaxPool2d(2))
        layers.append(_conv_bn(w, 2 * w))
        if n_pool >= 1:
            layers.append(nn.MaxPool2d(2))
        layers.append(_conv_bn(2 * w, 4 * w))
        self.features = nn.Sequential(*layers)
        self.num_features = self.embed_dim = 4 * w
        self.num_classes = num_classes
        self.head_drop = nn.Dropout(drop_rate)
        self.fc = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.features(x)  # (B, 4w, h, w)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        # dropout before the pre-logits return, as timm's heads: Classifier.forward is head(embed(x)), which
        # never took the pre_logits=False path (model.drop_rate did nothing)
        x = self.head_drop(x.mean(dim=(2, 3)))  # (B, 4w) global average pooling
        return x if pre_logits else self.fc(x)

    def get_classifier(self) -> nn.Module:
        return self.fc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))
