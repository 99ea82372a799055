"""Seeded draws are made on the CPU whatever torch's default device is.

Every seeded component draws from a CPU ``torch.Generator`` so that a seed gives the same result on any device.
``torch.rand``/``randn``/``randint``/``randperm`` allocate on torch's *default* device unless told otherwise: under
``torch.set_default_device("cuda")`` a CPU generator then raises, and a user who sets it (common in notebooks)
could not build an LSH index, fit DC-k-means, or run DUCK's centroid subsampling. Each test runs the component
under ``torch.device("meta")`` (standing in for a CUDA default on this CPU-only machine: without ``device="cpu"``
the draw lands on ``meta`` and the result is lost or the next step raises) and asserts the result of a normal
run, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import duck.models.factory as factory
from attacks.batched import _BatchSource
from baselines.erm_ktp import learn_erm_mask
from baselines.kgltop2 import retain_subset
from duck.deletion._kmeans_ops import uniforms
from duck.deletion.dckmeans import DCKMeans
from duck.deletion.lsh import LSHIndex
from duck.deletion.rdc import draw_projections
from duck.privacy.mechanisms import top_h_without_replacement
from duck.unlearn.duck import class_centroids

X = np.random.default_rng(0).normal(size=(240, 4))


def under_meta(fn):
    """``fn()`` with ``meta`` as torch's default device."""
    with torch.device("meta"):
        return fn()


def same(a, b) -> None:
    if isinstance(a, torch.Tensor):
        assert b.device == a.device == torch.device("cpu")
        assert a.dtype == b.dtype and torch.equal(a, b)
    else:
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_lsh_hash_functions():
    def build():
        idx = LSHIndex(4, 3, 5, 1.0, seed=2, device="cpu")
        return idx.projections, idx.offsets, idx.multipliers

    for a, b in zip(build(), under_meta(build), strict=True):
        same(a, b)


def test_kmeans_uniforms():
    same(uniforms(torch.Generator().manual_seed(5), 7), under_meta(lambda: uniforms(torch.Generator().manual_seed(5), 7)))


def test_dckmeans_leaf_assignment():
    def fit():
        m = DCKMeans(3, seed=1, device="cpu", min_leaf_per_cluster=5).fit(X)
        return m.cluster_centers_, m.predict(X)

    for a, b in zip(fit(), under_meta(fit), strict=True):
        same(a, b)


def test_rdc_projections():
    def draw():
        return draw_projections(torch.Generator().manual_seed(3), [1, 3, 2], 4)

    same(draw(), under_meta(draw))


def test_exponential_mechanism_top_h():
    def top():
        return top_h_without_replacement(np.arange(20.0), 5, 2.0, seed=9)

    assert under_meta(top) == top()


def test_kgltop2_retain_subset():
    same(retain_subset(np.arange(50), 10, 4), under_meta(lambda: retain_subset(np.arange(50), 10, 4)))


def test_erm_ktp_mask_order():
    torch.manual_seed(0)
    z, y, head = torch.randn(30, 6), torch.arange(30) % 3, nn.Linear(6, 3)

    def learn():
        return learn_erm_mask(z, y, head, 3, epochs=2, lr=0.1, lambda_reg=0.01, density=0.5, batch_size=8,
                              generator=torch.Generator().manual_seed(1)).detach()

    same(learn(), under_meta(learn))


@pytest.mark.parametrize("n", [5, 23])  # fewer rows than a batch (the sampler's extra draw) and several batches
def test_shadow_bank_batch_plan(n):
    src = _BatchSource.__new__(_BatchSource)
    src.subsets, src.batch_size = [torch.arange(100, 100 + n)], 8
    same(src._draw(0, torch.Generator().manual_seed(6)), under_meta(lambda: src._draw(0, torch.Generator().manual_seed(6))))


def test_duck_centroid_subsample():
    z, y = torch.randn(40, 3, generator=torch.Generator().manual_seed(0)), torch.arange(40) % 2

    def centroids():
        return class_centroids(z, y, max_per_class=5, generator=torch.Generator().manual_seed(8))[0]

    same(centroids(), under_meta(centroids))


def test_custom_model_probe_batch(monkeypatch):
    """``model=custom`` finds the head on a fixed random batch; that batch is the CPU seed-0 draw."""
    seen = []

    def capture(net, *, example, **_):
        seen.append(example)
        raise RuntimeError("captured")

    monkeypatch.setattr(factory, "wrap_model", capture)
    for run in (lambda f: f(), under_meta):
        with pytest.raises(RuntimeError, match="captured"):
            run(lambda: factory._custom_model(3, 1, 8, "torch.nn.Identity", None, {}))
    expected = torch.randn(2, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    same(expected, seen[0])
    same(expected, seen[1])


def test_spn_with_a_categorical_column():
    """The categorical codes' domain check builds its tensor beside the data, not on the default device: an SPN
    with a categorical column learns and scores under a non-CPU default (it raised "Tensor on device meta is not
    on the expected device cpu")."""
    from duck.deletion import learn_spn

    rng = np.random.default_rng(0)
    data = np.column_stack([rng.normal(size=40), rng.integers(0, 3, 40)])

    def build_and_score():
        spn = learn_spn(data, ["gaussian", "categorical"], min_instances=10, device="cpu")
        return spn.log_likelihood(data)

    same(build_and_score(), under_meta(build_and_score))
