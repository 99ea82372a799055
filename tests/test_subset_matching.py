"""Subset matching and its random-subset bank (issue 36; baselines/subset_matching.py, attacks/subset_bank.py):
the keep matrix (each model's own seeded subset, independent of the bank's size), the packed OUT logits against
each model's own predictions, the per-run choice of OUT models (distinct for the first k runs, then cycling),
the targets on forget and retain examples against hand computations, and the refusals."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from test_attacks_shadow import factory, recipe
from test_matching import CPU, ConstantLogits, _data, _hp

from attacks.shadow import shadow_seed
from attacks.subset_bank import SubsetBank, out_offsets, subset_keep
from baselines.subset_matching import out_choice
from duck.data.registry import build_datasets
from duck.errors import DuckInputError
from duck.metrics import predict_logits
from duck.unlearn import ModelBank, ReferenceModels, create_unlearner


def test_keep_rows_are_seeded_subsets_independent_of_the_bank_size():
    keep = subset_keep(5, 40, 0.75, seed=3)
    assert keep.shape == (5, 40) and (keep.sum(1) == 30).all()
    rng = np.random.default_rng([3, 0x5B5E7])
    for k in range(5):  # row k: the first 30 of the k-th permutation of the stream
        assert np.array_equal(np.flatnonzero(keep[k]), np.sort(rng.permutation(40)[:30]))
    assert np.array_equal(subset_keep(8, 40, 0.75, seed=3)[:5], keep)  # more models: the same first rows
    assert not np.array_equal(subset_keep(5, 40, 0.75, seed=4), keep)
    assert subset_keep(2, 10, 0.26, seed=0).sum(1).tolist() == [3, 3]  # round(2.6)


def test_out_offsets_by_hand():
    keep = np.array([[True, False, True], [False, False, True], [True, True, True]])
    # example 0 left out by model 1, example 1 by models 0 and 1, example 2 by none
    assert out_offsets(keep).tolist() == [0, 1, 3, 3]


@pytest.fixture(scope="module")
def tiny():
    return build_datasets("synthetic", n_train=40, n_test=8)


def _bank(tiny, root, n_models=4, **kw):
    return SubsetBank(root, tiny, factory(tiny), recipe(epochs=1), n_models=n_models, keep_fraction=0.75, seed=2,
                      mode="sequential", trainer_cfg=CPU, **kw)


def test_out_logits_are_each_out_models_predictions(tiny, tmp_path, monkeypatch):
    bank = _bank(tiny, tmp_path, pool="train+test")  # the pool is always the training set
    assert bank.pool == "train" and bank.mode == "sequential" and bank.trainer_cfg["accelerator"] == "cpu"
    assert np.array_equal(bank.keep, subset_keep(4, 40, 0.75, 2)) and bank.model_seed(3) == shadow_seed(2, 3)
    assert bank.spec["kind"] == "subset" and bank.spec["fraction"] == 0.75  # in the bank's key
    assert (~bank.keep[:, -1]).any()  # the last example has OUT rows too (the packed array's end)
    logits, offsets = bank.out_logits()
    assert (bank.dir / "out_logits.npz").is_file()
    assert np.array_equal(offsets, out_offsets(bank.keep)) and logits.shape == (offsets[-1], 4)
    assert logits.dtype == np.float32 and offsets[-1] == 4 * 10  # each model left out 10 of the 40
    checked = 0
    for i in range(40):
        models = np.flatnonzero(~bank.keep[:, i])  # ascending: the packed rows' order
        for row, k in zip(range(offsets[i], offsets[i + 1]), models, strict=True):
            want, _, _ = predict_logits(bank.load_shadow(int(k)), tiny.train, indices=np.array([i]))
            np.testing.assert_allclose(logits[row], want[0].numpy(), rtol=1e-5, atol=1e-6)
            checked += 1
    assert checked == 40
    again = _bank(tiny, tmp_path)

    def no_model(*args):
        raise AssertionError("the stored OUT logits are read back, no model is run")

    monkeypatch.setattr(SubsetBank, "_load_or_retrain", no_model)
    cached, again_offsets = again.out_logits()
    assert np.array_equal(cached, logits) and np.array_equal(again_offsets, offsets) and again.job["trained"] == []
    monkeypatch.undo()
    bigger = _bank(tiny, tmp_path, n_models=6)
    bigger.train()
    assert bigger.job["trained"] == [4, 5]  # models 0..3 taken from the bank of 4: only the new ones train


def test_bank_defaults_and_smallest_settings(tiny, tmp_path):
    """Seed 0 by default; two models and a subset of one example are allowed (the refusals' edges)."""
    bank = SubsetBank(tmp_path, tiny, factory(tiny), recipe(epochs=1), n_models=2, keep_fraction=1 / 40,
                      mode="sequential", trainer_cfg=CPU)
    assert bank.seed == 0 and bank.n_shadow == 2 and bank.keep.sum(1).tolist() == [1, 1]


@pytest.mark.parametrize("args,message", [
    ({"n_models": 1}, "method.n_models=1 must be an integer >= 2"),
    ({"n_models": 2.5}, "method.n_models=2.5 must be an integer >= 2"),
    ({"n_models": True}, "method.n_models=True must be an integer >= 2"),
    ({"keep_fraction": 1.0}, "method.keep_fraction=1.0 must leave each model between 1 and 39 of the 40 training "
                             "samples (0.9 for a 10 % forget set)"),
    ({"keep_fraction": 0.01}, "method.keep_fraction=0.01 must leave each model between 1 and 39 of the 40 training "
                              "samples (0.9 for a 10 % forget set)"),
    ({"keep_fraction": "0.9"}, "method.keep_fraction='0.9' must leave each model between 1 and 39 of the 40 "
                               "training samples (0.9 for a 10 % forget set)"),
])
def test_bank_refusals(tiny, tmp_path, args, message):
    kw = {"n_models": 4, "keep_fraction": 0.75, **args}
    with pytest.raises(DuckInputError) as e:
        SubsetBank(tmp_path, tiny, factory(tiny), recipe(epochs=1), seed=0, mode="sequential", trainer_cfg=CPU, **kw)
    assert str(e.value) == message


def test_runs_take_distinct_out_models_then_cycle():
    counts = np.array([3, 1, 4])
    picks = np.stack([out_choice(counts, run, seed=2) for run in range(8)])  # (runs, examples)
    for i, c in enumerate(counts):
        assert sorted(picks[:c, i]) == list(range(c))  # the first c runs: each OUT model once
        assert np.array_equal(picks[c:2 * c, i], picks[:c, i])  # then the same order again
    rng = np.random.default_rng([2, 0x5B5E7A])
    perms = [rng.permutation(int(c)) for c in counts]
    assert picks[5].tolist() == [perms[0][5 % 3], 0, perms[2][5 % 4]]
    assert not np.array_equal(np.stack([out_choice(counts, r, seed=3) for r in range(4)]), picks[:4])


def _refs(bank_models, keep, logits, offsets, asked=None):
    def subsets(n, keep_fraction, seed):
        if asked is not None:
            asked.append((n, keep_fraction, seed))
        return ModelBank(load=lambda k: bank_models[k], one_off_s=7.0, keep=keep, out_logits=logits,
                         out_offsets=offsets)

    return ReferenceModels(subsets=subsets)


@pytest.fixture
def setup(synthetic, synthetic_model):
    """Three bank models with constant logits (k, 0, 0, 0); model 1 trained on every even example; the OUT rows
    of example i are (100 i + j, ...) for its j-th OUT model."""
    model = copy.deepcopy(synthetic_model)
    n = len(synthetic.train)
    models = [ConstantLogits(model, [float(k), 0.0, 0.0, 0.0]) for k in range(3)]
    keep = np.zeros((3, n), dtype=bool)
    keep[1, ::2] = True
    keep[2, : n // 2] = True
    offsets = out_offsets(keep)
    logits = np.zeros((offsets[-1], 4), np.float32)
    for i in range(n):
        for j in range(offsets[i + 1] - offsets[i]):
            logits[offsets[i] + j] = [100.0 * i + j, 1.0, 2.0, 3.0]
    return model, models, keep, logits, offsets


def test_targets_by_hand(synthetic, setup):
    model, models, keep, logits, offsets = setup
    asked: list = []
    data, sc = _data(synthetic, model, _refs(models, keep, logits, offsets, asked))
    forget, retain = np.asarray(sc.forget_idx)[:5], np.asarray(sc.retain_idx)[:6]
    idx = np.sort(np.r_[forget, retain])
    orig, _, _ = predict_logits(model, synthetic.train, indices=idx)
    is_forget = np.isin(idx, forget)
    f_idx = idx[is_forget]
    counts = offsets[f_idx + 1] - offsets[f_idx]
    hp = _hp("subset_matching", n_models=3, keep_fraction=0.5, bank_seed=11)
    for seed in (0, 4):
        u = create_unlearner("subset_matching", model, data, hp, seed=seed, trainer_cfg=CPU)
        assert u.prepare() == 7.0
        t = u.targets(idx)
        want_f = torch.as_tensor(logits[offsets[f_idx] + out_choice(counts, seed, 11)])
        torch.testing.assert_close(t[torch.as_tensor(is_forget)], want_f)
        k = seed % 3  # retain examples: bank model k where it trained on them, else the original
        inside = keep[k, idx] & ~is_forget
        want_r = orig.clone()
        want_r[torch.as_tensor(inside), 0] = float(k)
        want_r[torch.as_tensor(inside), 1:] = 0.0
        torch.testing.assert_close(t[torch.as_tensor(~is_forget)], want_r[torch.as_tensor(~is_forget)])
    assert set(asked) == {(3, 0.5, 11)}
    u = create_unlearner("subset_matching", model, data, {**hp, "spread": "none", "retain_targets": "original"},
                         seed=1, trainer_cfg=CPU)
    u.prepare()
    t = u.targets(idx)
    mean = torch.stack([torch.as_tensor(logits[a:b]).mean(0) for a, b in zip(offsets[f_idx], offsets[f_idx + 1], strict=True)])
    torch.testing.assert_close(t[torch.as_tensor(is_forget)], mean)
    torch.testing.assert_close(t[torch.as_tensor(~is_forget)], orig[torch.as_tensor(~is_forget)])


def test_start_bank_moves_only_the_forget_examples_bank_model_k_trained_on(synthetic, setup):
    """``start: bank``: run s fine-tunes bank model k = s mod E (its weights, the original untouched); its targets
    are its own outputs on the retain examples it trained on and on the forget examples it left out, the
    original's on the retain examples it never saw, and on the forget examples it trained on the OUT model that
    ``start: original`` would give them (π_x drawn over every forget example, whatever model k left out)."""
    model, _, keep, logits, offsets = setup
    gen = torch.Generator().manual_seed(5)
    models = [copy.deepcopy(model) for _ in range(3)]
    for m in models:
        with torch.no_grad():
            for p in m.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen))
    data, sc = _data(synthetic, model, _refs(models, keep, logits, offsets))
    n = len(synthetic.train)  # examples of each parity from both halves: every case below for models 1 and 2

    def spread(ids):
        return np.concatenate([[i for i in ids if i % 2 == p and (i < n // 2) == h][:2] for p in (0, 1)
                               for h in (True, False)])

    forget, retain = spread(np.asarray(sc.forget_idx)), spread(np.asarray(sc.retain_idx))
    idx = np.sort(np.r_[forget, retain])
    orig, _, _ = predict_logits(model, synthetic.train, indices=idx)
    is_forget = np.isin(idx, forget)
    f_idx = idx[is_forget]
    counts = offsets[f_idx + 1] - offsets[f_idx]
    before = copy.deepcopy(model.state_dict())
    hp = _hp("subset_matching", n_models=3, keep_fraction=0.5, bank_seed=11)
    for seed in (1, 5):  # bank models 1 and 2
        k = seed % 3
        u = create_unlearner("subset_matching", copy.deepcopy(model), data, {**hp, "start": "bank"}, seed=seed,
                             trainer_cfg=CPU)
        u.prepare()
        for name, value in models[k].state_dict().items():
            assert torch.equal(u.model.state_dict()[name], value), name
        t = u.targets(idx)
        own_k, _, _ = predict_logits(models[k], synthetic.train, indices=idx)
        trained = keep[k, idx]
        cases = {"own retain": trained & ~is_forget, "original": ~trained & ~is_forget,
                 "own forget": ~trained & is_forget, "moved": trained & is_forget}
        assert all(c.any() for c in cases.values()), {n: int(c.sum()) for n, c in cases.items()}
        want = orig.clone()
        own = torch.as_tensor(cases["own retain"] | cases["own forget"])
        want[own] = own_k[own]
        drawn = torch.as_tensor(logits[offsets[f_idx] + out_choice(counts, seed, 11)])
        want[torch.as_tensor(cases["moved"])] = drawn[torch.as_tensor(cases["moved"][is_forget])]
        torch.testing.assert_close(t, want)
        u_orig = create_unlearner("subset_matching", copy.deepcopy(model), data, hp, seed=seed, trainer_cfg=CPU)
        u_orig.prepare()  # the same OUT model on the moved examples as when the original is fine-tuned
        torch.testing.assert_close(t[torch.as_tensor(cases["moved"])],
                                   u_orig.targets(idx)[torch.as_tensor(cases["moved"])])
    for name, value in before.items():
        assert torch.equal(model.state_dict()[name], value), name
    u = create_unlearner("subset_matching", copy.deepcopy(model), data,
                         {**hp, "start": "bank", "retain_targets": "original"}, seed=4, trainer_cfg=CPU)
    u.prepare()  # bank model 1; the retain examples all keep the original's outputs
    t = u.targets(idx)
    torch.testing.assert_close(t[torch.as_tensor(~is_forget)], orig[torch.as_tensor(~is_forget)])
    own_1, _, _ = predict_logits(models[1], synthetic.train, indices=idx)
    left_out = torch.as_tensor(~keep[1, idx] & is_forget)
    torch.testing.assert_close(t[left_out], own_1[left_out])


def test_refusals(synthetic, setup):
    model, models, keep, logits, offsets = setup
    data, sc = _data(synthetic, model, _refs(models, keep, logits, offsets))
    with pytest.raises(DuckInputError) as e:
        create_unlearner("subset_matching", model, data, _hp("subset_matching", spread="wide"), seed=0,
                         trainer_cfg=CPU)
    assert str(e.value) == "method.spread='wide'; choose one of ['model', 'none']"
    with pytest.raises(DuckInputError) as e:
        create_unlearner("subset_matching", model, data, _hp("subset_matching", start="oracle"), seed=0,
                         trainer_cfg=CPU)
    assert str(e.value) == "method.start='oracle'; choose one of ['original', 'bank']"
    every = np.ones_like(keep)  # no model left any example out
    data, sc = _data(synthetic, model, _refs(models, every, logits[:0], out_offsets(every)))
    u = create_unlearner("subset_matching", model, data, _hp("subset_matching"), seed=0, trainer_cfg=CPU)
    u.prepare()
    with pytest.raises(DuckInputError) as e:
        u.targets(np.asarray(sc.forget_idx)[:3])
    assert str(e.value) == ("3 forget example(s) are in every model of the subset bank (none left them out): raise "
                            "method.n_models or lower method.keep_fraction")
    data, _ = _data(synthetic, model, ReferenceModels())
    with pytest.raises(DuckInputError, match=r"method 'subset_matching' learns from reference models \(subsets"):
        create_unlearner("subset_matching", model, data, _hp("subset_matching"), seed=0, trainer_cfg=CPU)


def test_fit_moves_forget_outputs_to_the_runs_targets(synthetic, setup):
    """The MSE fit (oracle matching's) moves the model's logits on the forget set towards this run's targets."""
    model, models, keep, _, offsets = setup
    logits = np.zeros((offsets[-1], 4), np.float32)
    logits[:, 2] = 6.0  # every OUT model says class 2
    data, sc = _data(synthetic, model, _refs(models, keep, logits, offsets))
    forget = np.asarray(sc.forget_idx)
    before, _, _ = predict_logits(model, synthetic.train, indices=forget)
    hp = _hp("subset_matching", epochs=30, lr=0.01, retain_targets="original")
    result = create_unlearner("subset_matching", model, data, hp, seed=0, trainer_cfg=CPU).unlearn()
    after, _, _ = predict_logits(result.model, synthetic.train, indices=forget)
    target = torch.tensor([0.0, 0.0, 6.0, 0.0])
    assert ((after - target) ** 2).mean() < 0.25 * ((before - target) ** 2).mean()
    assert result.info["one_off_s"] == 7.0


@pytest.mark.slow  # a promise (sharded banks, 30 s): run by make test's second pass
def test_array_tasks_build_the_methods_subset_bank_and_the_run_trains_none_of_it(run_cli, tmp_path):
    """attack.num_shards=2 with method=subset_matching: each task also trains its slice (k mod 2) of the
    subset bank the method's runs will ask for (the same key); the run afterwards trains none of its models."""
    import json

    from conftest import SYNTH_ARGS

    args = [*SYNTH_ARGS, "recipe.epochs=1", "scenario=homogeneous_removal", "scenario.fraction=0.25",
            "method=subset_matching", "method.n_models=8", "method.keep_fraction=0.25", "method.epochs=1",
            "attack.n_shadow=4", "attack.svm_mia.enabled=false", "attack.forgetting.enabled=false",
            "report.shareable.enabled=false", "report.analysis.enabled=false", f"cache_dir={tmp_path / 'cache'}"]
    got = {}
    for i in range(2):
        code, _, err, out = run_cli("run", *args, "attack.num_shards=2", f"attack.shard={i}")
        assert code == 0, err
        got[i] = json.loads((out / "shard.json").read_text())["banks"]["subset_matching: subset bank"]
        assert got[i]["n_models"] == 8 and got[i]["trained"] == list(range(i, 8, 2))
    assert got[1]["missing_after"] == 0
    shadows = sorted((tmp_path / "cache").rglob("subset_banks/*/shadows/*"))
    assert len(shadows) == 8
    stamps = [p.stat().st_mtime_ns for p in shadows]
    code, _, err, out = run_cli("run", *args)
    assert code == 0, err
    assert [p.stat().st_mtime_ns for p in shadows] == stamps  # no subset-bank model trained again
    assert json.loads((out / "unlearned" / "metrics.json").read_text())["method"] == "subset_matching"
