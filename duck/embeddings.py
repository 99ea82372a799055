"""A model's embeddings of a data set: the ``embed(x)`` half of the :class:`~duck.models.classifier.Classifier`
split (the pooled pre-logit features) over chosen samples. Used by DUCK (class centroids, ALGORITHMS.md §1),
ERM-KTP (its channel mask) and the audit's feature-space analysis; it sits above the models and the data loaders,
which it joins."""

from __future__ import annotations

from typing import Any

import torch

from duck.data.loaders import make_loader


@torch.no_grad()
def embed_samples(model: Any, dataset: Any, indices: Any, *, device: torch.device, batch_size: int = 1024
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Eval-mode embeddings ``(N, D)``, labels ``(N,)`` and stable indices ``(N,)`` of ``dataset[indices]``
    (the model's training mode restored afterwards)."""
    was_training = model.training
    model.eval()
    zs, ys, ids = [], [], []
    for x, y, i in make_loader(dataset, batch_size, indices=indices):
        zs.append(model.embed(x.to(device)).float())
        ys.append(y.to(device)), ids.append(torch.as_tensor(i, device=device))
    model.train(was_training)
    return torch.cat(zs), torch.cat(ys), torch.cat(ids)
