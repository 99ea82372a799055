"""The retrain bank of the forgetting audit (ALGORITHMS.md §10): R models on the retain set, cached under a key
that holds the forget set, resumable, seeds of their own, trained only on the retain set."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_attacks_shadow import CPU, factory, interrupt_after_first_chunk, recipe

from attacks.retrain_bank import RetrainBank, retrain_seed
from attacks.shadow import ShadowBank, shadow_seed
from duck.data.registry import build_datasets
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError


@pytest.fixture(scope="module")
def data():
    return build_datasets("synthetic", n_train=160, n_test=40)


def scenario(data, classes=(1,)):
    return build_scenario("class_removal", data.train.labels, data.test.labels, 4, forget_classes=list(classes))


def make(data, root: Path, classes=(1,), **kw) -> RetrainBank:
    args = dict(n_models=3, seed=0, mode="sequential", trainer_cfg=CPU)
    args.update(kw)
    return RetrainBank(root, data, factory(data), args.pop("recipe", recipe(epochs=1)),
                       scenario(data, classes).retain_idx, **args)


def test_every_model_trains_on_the_retain_set_only_with_its_own_seed(data, tmp_path, monkeypatch):
    bank = make(data, tmp_path)
    seen: list[tuple[list[int], int]] = []
    import attacks.shadow as shadow_mod

    real = shadow_mod.train_classifier

    def spy(model, dataset, rec, *, indices, seed, **kw):
        seen.append((sorted(int(i) for i in indices), seed))
        return real(model, dataset, rec, indices=indices, seed=seed, **kw)

    monkeypatch.setattr(shadow_mod, "train_classifier", spy)
    assert bank.train()["trained"] == [0, 1, 2]
    retain = sorted(scenario(data).retain_idx.tolist())
    assert [s[0] for s in seen] == [retain] * 3
    assert [s[1] for s in seen] == [retrain_seed(0, k) for k in range(3)]
    assert len({s[1] for s in seen} | {shadow_seed(0, k) for k in range(3)}) == 6  # not the shadows' seeds
    assert bank.dir.parent.name == "retrain_banks" and bank.load_shadow(2).num_classes == 4


def test_cached_resumed_and_keyed_by_the_forget_set(data, tmp_path, monkeypatch):
    bank = make(data, tmp_path)
    original = ShadowBank._train_chunk
    interrupt_after_first_chunk(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        bank.train()
    monkeypatch.setattr(ShadowBank, "_train_chunk", original)
    resumed = make(data, tmp_path)
    assert resumed.missing() == [1, 2] and resumed.train()["trained"] == [1, 2]
    assert make(data, tmp_path).train()["trained"] == []  # a later audit of the same forget set trains nothing
    phi_train, phi_test, reused = make(data, tmp_path).phi()
    assert phi_train.shape == (3, 160) and phi_test.shape == (3, 40) and not reused
    assert np.isfinite(phi_train).all() and make(data, tmp_path).phi()[2]  # reused the second time
    # another forget set, R, seed or recipe: another bank; the trainer's placement settings: the same one
    assert make(data, tmp_path, classes=(2,)).key != bank.key
    assert make(data, tmp_path, n_models=4).key != bank.key
    assert make(data, tmp_path, seed=1).key != bank.key
    assert make(data, tmp_path, recipe=recipe(epochs=2)).key != bank.key
    assert make(data, tmp_path, mode="batched", chunk_size=3).key == bank.key


def test_retrained_models_never_learn_the_forgotten_class(data, tmp_path):
    bank = make(data, tmp_path, recipe=recipe(epochs=3))
    bank.train()
    acc = bank.accuracies()
    forget = scenario(data).forget_idx
    assert acc.shape == (3, 200) and acc[:, forget].mean() == 0.0  # class 1 never seen: never predicted right
    retain = scenario(data).retain_idx
    assert acc[:, retain].mean() > 0.5


def test_accuracies_are_cached_and_a_damaged_file_recomputed(data, tmp_path, monkeypatch, capsys):
    bank = make(data, tmp_path)
    bank.train()
    first = bank.accuracies()
    assert (bank.dir / "correct.npz").is_file()

    def no_models(self, k):
        raise AssertionError("the cached correctness should have been read")

    with monkeypatch.context() as m:
        m.setattr(RetrainBank, "_load_or_retrain", no_models)
        again = make(data, tmp_path).accuracies()  # another audit of the same forget set
    assert again.dtype == np.bool_ and np.array_equal(again, first)
    (bank.dir / "correct.npz").write_bytes(b"not a zip")
    capsys.readouterr()
    assert np.array_equal(make(data, tmp_path).accuracies(), first)
    assert "corrupt correct.npz" in capsys.readouterr().err
    np.savez(bank.dir / "correct.npz", correct=first[:, :5])  # intact but the wrong shape: recomputed too
    assert np.array_equal(make(data, tmp_path).accuracies(), first)


def test_bad_settings_are_refused(data, tmp_path):
    with pytest.raises(DuckInputError, match="at least 2 models"):
        make(data, tmp_path, n_models=1)
    with pytest.raises(DuckInputError, match="training indices"):
        RetrainBank(tmp_path, data, factory(data), recipe(), np.array([500]), n_models=2)


def test_a_larger_bank_takes_the_models_a_smaller_one_trained(data, tmp_path, capsys):
    """Raising R (the inconclusive verdict's advice) trains only the new models: model k's training set and
    seed do not depend on R, so a bank of 4 takes models 0-2 of the bank of 3 (same weights, re-labelled as its
    own); a bank of 2 then trains nothing. LiRA shadow banks never share (their IN sets depend on E)."""
    import torch

    small = make(data, tmp_path)
    assert small.train()["trained"] == [0, 1, 2]
    big = make(data, tmp_path, n_models=4)
    assert big.key != small.key and big.train()["trained"] == [3]
    assert "3 of its 4 models taken from a bank of the same setup" in capsys.readouterr().out
    for k in range(3):
        a, b = small.load_shadow(k).state_dict(), big.load_shadow(k).state_dict()
        assert all(torch.equal(a[n], b[n]) for n in a)
    assert make(data, tmp_path, n_models=2).train()["trained"] == []
    # another forget set or seed is another setup: nothing to take
    assert make(data, tmp_path, classes=(2,), n_models=4).train()["trained"] == [0, 1, 2, 3]
    assert make(data, tmp_path, seed=1, n_models=2).train()["trained"] == [0, 1]
    # a damaged checkpoint, or one of another model, is not taken: that model is trained
    for n in (2, 3):
        make(data, tmp_path, n_models=n).shadow_path(0).write_bytes(b"junk")
    big.shadow_path(0).write_bytes(big.shadow_path(1).read_bytes())  # model 1's file under model 0's name
    assert make(data, tmp_path, n_models=6).train()["trained"] == [0, 4, 5]
    assert not ShadowBank.shares_models_across_sizes and RetrainBank.shares_models_across_sizes
