"""Oracle matching and datamodel matching (ALGORITHMS.md §11): the matching set, the targets (one oracle per run,
the mean of K, the shadow bank's diagonal datamodel with its per-run spread) against hand computations, the MSE
fit moving the model to its targets, the one-off cost reported apart, and the oracle seed kept apart from the
forgetting audit's banks."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from conftest import SYNTH_ARGS, record_batch_ids, written_files

from baselines.datamodel_matching import diagonal_datamodel, pick_out_models
from baselines.oracle_matching import finetune_indices
from duck.data.scenarios import build_scenario
from duck.metrics import predict_logits, split_accuracies
from duck.pipeline.config import conf_dir
from duck.unlearn import ModelBank, ReferenceModels, UnlearnData, create_unlearner

CPU = {"accelerator": "cpu", "devices": 1, "deterministic": True}


class ConstantLogits(torch.nn.Module):
    """A classifier-shaped model whose logits are a fixed vector (plus a tiny input term so gradients flow)."""

    def __init__(self, template: torch.nn.Module, logits: list[float]) -> None:
        super().__init__()
        self.inner = copy.deepcopy(template)
        self.register_buffer("value", torch.tensor(logits))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value.expand(x.shape[0], -1) + 0 * self.inner(x)


def _hp(name: str, **over):
    from conftest import method_file_keys

    return {**method_file_keys(conf_dir() / "method" / f"{name}.yaml"), **over}  # with the configs it builds on


def _data(synthetic, model, references):
    sc = build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, 4, forget_classes=[1])
    return UnlearnData(train=synthetic.train, scenario=sc, num_classes=4, dataset_name="synthetic",
                       original_acc=split_accuracies(model, synthetic, sc), references=references), sc


def test_matching_set_counts_and_draws():
    forget, retain = np.arange(10), np.arange(10, 100)
    rng = np.random.default_rng(0)
    idx = finetune_indices(forget, retain, 1.5, 3.0, rng)
    # 1.5 copies: the forget set once and its first 5 again; 3 x 10 retain samples, each once, none from forget
    assert (np.bincount(idx[:15], minlength=10) == np.r_[[2] * 5, [1] * 5]).all()
    picked = idx[15:]
    assert len(picked) == 30 and len(set(picked)) == 30 and set(picked) <= set(retain)
    other = finetune_indices(forget, retain, 1.5, 3.0, np.random.default_rng(1))[15:]
    assert set(other) != set(picked)  # another run draws another retain subset
    assert len(finetune_indices(forget, np.arange(10, 20), 1.0, 3.0, rng)) == 20  # capped at the retain set


def test_diagonal_datamodel_by_hand():
    logits = torch.tensor([[[1.0, 0.0]], [[3.0, 2.0]], [[5.0, 4.0]], [[7.0, 6.0]]])  # (E=4, n=1, C=2)
    inside = np.array([[True], [True], [False], [False]])
    beta, mean_out = diagonal_datamodel(logits, inside)
    torch.testing.assert_close(beta, torch.tensor([[2.0 - 6.0, 1.0 - 5.0]]))  # mean IN minus mean OUT
    torch.testing.assert_close(mean_out, torch.tensor([[6.0, 5.0]]))
    beta, _ = diagonal_datamodel(logits, np.ones((4, 1), dtype=bool))  # no OUT model: no estimate
    assert torch.equal(beta, torch.zeros(1, 2))
    pick = pick_out_models(np.array([[True, False], [False, False], [True, True]]), np.random.default_rng(0))
    assert pick[0] == 1 and pick[1] in (0, 1)
    assert pick_out_models(np.ones((2, 1), dtype=bool), np.random.default_rng(0))[0] == -1


def _oracles(model, n=3):
    banks = [ConstantLogits(model, [float(k), 0.0, -1.0, 2.0]) for k in range(n)]
    return ReferenceModels(oracle=lambda seed, pool: ModelBank(load=lambda k: banks[k], one_off_s=12.5))


@pytest.mark.parametrize("mode,seed,want", [("per_run", 4, 1.0), ("per_run", 2, 2.0), ("mean", 4, 1.0)])
def test_oracle_targets_per_run_or_mean(synthetic, synthetic_model, mode, seed, want):
    """Run s matches oracle s mod K alone (K = 3: seed 4 -> oracle 1, seed 2 -> oracle 2); ``mean`` the mean of all
    K (first logit (0 + 1 + 2) / 3 = 1)."""
    model = copy.deepcopy(synthetic_model)
    data, _ = _data(synthetic, model, _oracles(model))
    u = create_unlearner("oracle_matching", model, data, _hp("oracle_matching", targets=mode, num_oracles=3), seed=seed,
                         trainer_cfg=CPU)
    assert u.prepare() == 12.5
    t = u.targets(np.array([0, 5, 7]))
    torch.testing.assert_close(t, torch.tensor([[want, 0.0, -1.0, 2.0]] * 3))


def test_oracle_matching_fits_the_targets_and_reports_the_one_off_cost_apart(synthetic, synthetic_model):
    model = copy.deepcopy(synthetic_model)
    refs = _oracles(model)
    data, sc = _data(synthetic, model, refs)
    target = torch.tensor([0.0, 0.0, -1.0, 2.0])  # oracle 0 (seed 0, K = 3)
    forget = np.asarray(sc.forget_idx)

    def error(m):
        logits, _, _ = predict_logits(m, synthetic.train, indices=forget)
        return float(((logits - target) ** 2).mean())

    before = error(model)
    result = create_unlearner("oracle_matching", model, data, _hp("oracle_matching", num_oracles=3, epochs=8), seed=0,
                              trainer_cfg=CPU).unlearn()
    assert error(result.model) < 0.5 * before  # the MSE fit moved the forget logits toward the oracle's
    assert result.info["one_off_s"] == 12.5 and result.info["matching_set"] == 4 * len(forget)


def test_datamodel_targets_subtract_the_forget_examples_own_effect(synthetic, synthetic_model):
    """Shadow k outputs the constant vector (k, 0, 0, 0); every forget example is IN the even shadows and OUT of
    the odd ones: β = (mean of evens − mean of odds, 0, 0, 0) = (−1, 0, 0, 0) on forget examples, nothing on retain;
    with ``spread: shadow`` one OUT shadow's deviation from the OUT mean is added (here ±2 or 0 on logit 0)."""
    model = copy.deepcopy(synthetic_model)
    e, n = 6, len(synthetic.train)
    shadows = [ConstantLogits(model, [float(k), 0.0, 0.0, 0.0]) for k in range(e)]
    keep = np.zeros((e, n), dtype=bool)
    keep[0::2] = True
    refs = ReferenceModels(shadows=lambda m, seed: ModelBank(load=lambda k: shadows[k], one_off_s=3.0, keep=keep))
    data, sc = _data(synthetic, model, refs)
    forget, retain = np.asarray(sc.forget_idx)[:4], np.asarray(sc.retain_idx)[:4]
    idx = np.sort(np.r_[forget, retain])
    orig, _, _ = predict_logits(model, synthetic.train, indices=idx)
    u = create_unlearner("datamodel_matching", model, data, _hp("datamodel_matching", spread="none"), seed=0,
                         trainer_cfg=CPU)
    u.prepare()
    t = u.targets(idx)
    shift = torch.zeros_like(orig)
    shift[torch.as_tensor(np.isin(idx, forget)), 0] = 1.0  # f_orig − β with β = −1 on logit 0
    torch.testing.assert_close(t, orig + shift)
    spread = create_unlearner("datamodel_matching", model, data, _hp("datamodel_matching"), seed=3, trainer_cfg=CPU)
    spread.prepare()
    dev = (spread.targets(idx) - t)[:, 0]
    is_forget = torch.as_tensor(np.isin(idx, forget))
    assert set(dev[is_forget].round().tolist()) <= {-2.0, 0.0, 2.0} and (dev[~is_forget] == 0).all()


def test_the_oracle_bank_may_not_be_the_audits_own(run_cli):
    code, _, err, run_dir = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "scenario.forget_classes=[1]",
                              "method=oracle_matching", "method.oracle_seed=1", "attack.n_shadow=4",
                              "attack.svm_mia.enabled=false", "report.shareable.enabled=false",
                              "report.analysis.enabled=false", "attack.forgetting.enabled=true",
                              "attack.forgetting.n_unlearned=3", "attack.forgetting.n_retrained=3")
    assert code == 2 and "method.oracle_seed=1 is the seed of the forgetting audit's retrain bank" in err, err
    assert written_files(run_dir) == set()  # refused before any work


def test_duck_reinit_reinitialises_then_runs_duck(synthetic, synthetic_model):
    """The DUCK variant: kgltop2's re-initialisation (the init_rate share of each conv layer's weights), then DUCK's
    phases; its config builds on duck.yaml (the known keys are the union)."""
    from conftest import method_file_keys

    keys = method_file_keys(conf_dir() / "method" / "duck_reinit.yaml")
    assert {"init_rate", "layers", "lambda_fgt", "low_epochs", "presets"} <= set(keys) and keys["name"] == "duck_reinit"
    hp = {k: v for k, v in keys.items() if k != "name"}
    model = copy.deepcopy(synthetic_model)
    data, _ = _data(synthetic, model, None)
    result = create_unlearner("duck_reinit", model, data, {**hp, "init_rate": 0.3}, seed=0, trainer_cfg=CPU).unlearn()
    assert result.info["reinitialised_fraction"] == pytest.approx(0.3, abs=0.01)
    assert result.epochs >= 1 and result.reached_target is not None  # DUCK's stopping rule ran


def test_duck_reinit_reinitialises_exactly_as_kgltop2_with_the_jobs_seed(synthetic, synthetic_model, monkeypatch):
    """The re-initialisation step alone (DUCK's phases replaced by a no-op), replayed with kgltop2's functions: the
    retain subset of |forget| ids from the job's seed, its loader seeded seed + 15485863, the forget loader,
    the accumulated gradients (train mode: BatchNorm statistics move the same way), the smallest-gradient masks
    and the fresh values from the seed; the record's fraction is the masked share (issue 39: run's wiring had no
    test of its own). Bad settings are refused with the setting's name."""
    from baselines.kgltop2 import (
        accumulated_gradients,
        masked_layers,
        reinitialise,
        retain_subset,
        small_gradient_masks,
    )
    from duck.data.loaders import make_loader
    from duck.errors import DuckInputError
    from duck.unlearn.duck import DUCK

    monkeypatch.setattr(DUCK, "run", lambda self: {"epochs": 0.0, "reached_target": None})
    import baselines.duck_reinit as duck_reinit_mod

    generators = []  # the fresh values come from a generator of the job's seed, never from the global one (which
    # unlearn() seeds with the same number, so only a model drawing from it first, e.g. with dropout, would differ)
    monkeypatch.setattr(duck_reinit_mod, "reinitialise",
                        lambda w, m, gen: generators.append(gen) or reinitialise(w, m, gen))
    hp = {k: v for k, v in _hp("duck_reinit").items() if k not in ("name", "presets")}
    hp |= {"init_rate": 0.4, "layers": "conv+linear", "batch_size": 16}
    data, sc = _data(synthetic, synthetic_model, None)
    u = create_unlearner("duck_reinit", copy.deepcopy(synthetic_model), data, hp, seed=6, trainer_cfg=CPU)
    result = u.unlearn()

    ref = copy.deepcopy(synthetic_model)
    weights = [w for _, w in masked_layers(ref, "conv+linear")]
    subset = retain_subset(sc.retain_idx, len(sc.forget_idx), 6)
    retain = make_loader(synthetic.train, 16, shuffle=True, seed=6 + 15485863, indices=subset)
    forget = make_loader(synthetic.train, 16, shuffle=True, seed=6 + 7919, indices=sc.forget_idx)
    masks = small_gradient_masks(accumulated_gradients(ref, weights, retain, forget, torch.device("cpu")), 0.4)
    reinitialise(weights, masks, torch.Generator().manual_seed(6))
    for (name, a), b in zip(result.model.state_dict().items(), ref.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, msg=name)
    assert isinstance(generators[0], torch.Generator) and generators[0].initial_seed() == 6
    share = sum(int(m.sum()) for m in masks) / sum(w.numel() for w in weights)
    assert result.info["reinitialised_fraction"] == pytest.approx(share) and 0.35 < share < 0.45

    assert create_unlearner("duck_reinit", copy.deepcopy(synthetic_model), data, {**hp, "init_rate": 0.0}, seed=6,
                            trainer_cfg=CPU).unlearn().info["reinitialised_fraction"] == 0.0  # 0 allowed
    for over, message in [({"init_rate": 1.0}, "method.init_rate must be a finite number >= 0.0 and < 1.0, got 1.0"),
                          ({"init_rate": -0.1}, "method.init_rate must be a finite number >= 0.0 and < 1.0, got -0.1"),
                          ({"layers": "linear"}, "method.layers='linear'; choose one of ['conv', 'conv+linear']")]:
        with pytest.raises(DuckInputError) as e:  # when the method is made, before any work
            create_unlearner("duck_reinit", copy.deepcopy(synthetic_model), data, {**hp, **over}, seed=0,
                             trainer_cfg=CPU)
        assert str(e.value) == message


def test_matching_set_without_retain_samples_is_the_forget_set_alone():
    """retain_multiplier 0, or an empty retain set: the matching set is the forget copies only, as int64 indices
    (issue 39: the empty branch's shape and dtype survived)."""
    forget = np.arange(4, dtype=np.int64)
    for retain, mult in ((np.arange(10, 20), 0.0), (np.empty(0, dtype=np.int64), 3.0)):
        idx = finetune_indices(forget, retain, 2.0, mult, np.random.default_rng(0))
        assert idx.dtype == np.int64 and idx.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_oracle_ids_per_run_mean_and_refusals(synthetic, synthetic_model):
    """``per_run``: [seed mod K]; ``mean``: all K; K = 1 is allowed; K < 1 and an unknown mode are refused with the
    key and the allowed values."""
    from duck.errors import DuckInputError

    model = copy.deepcopy(synthetic_model)
    data, _ = _data(synthetic, model, _oracles(model))

    def ids(seed, **over):
        return create_unlearner("oracle_matching", model, data, _hp("oracle_matching", **over), seed=seed,
                                trainer_cfg=CPU).oracle_ids()

    assert ids(4, targets="per_run", num_oracles=3) == [1] and ids(0, targets="mean", num_oracles=3) == [0, 1, 2]
    assert ids(7, targets="per_run", num_oracles=1) == [0]
    for over, message in (({"targets": "median", "num_oracles": 3},
                           "method.targets='median'; choose one of ['per_run', 'mean']"),
                          ({"num_oracles": 0}, "method.num_oracles=0 must be an integer >= 1")):
        with pytest.raises(DuckInputError) as e:
            ids(0, **over)
        assert str(e.value) == message


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_oracle_matching_run_asks_its_bank_draws_its_set_and_shuffles_with_the_seed(synthetic, synthetic_model):
    """prepare() asks the references for the bank (oracle_seed, num_oracles); run() draws the matching set with
    the generator [seed, 0x0A7C], fills the target table with the targets of its distinct samples, trains one
    phase named after the method on a loader shuffled with the job's seed, and records {epochs, reached_target:
    None, matching_set} (issue 39: run's and prepare's wiring survived)."""
    from duck.data.loaders import make_loader

    model = copy.deepcopy(synthetic_model)
    banks = [ConstantLogits(model, [float(k), 0.0, -1.0, 2.0]) for k in range(3)]
    asked = []

    def oracle(seed, pool):
        asked.append((seed, pool))
        return ModelBank(load=lambda k: banks[k], one_off_s=4.0)

    data, sc = _data(synthetic, model, ReferenceModels(oracle=oracle))
    hp = _hp("oracle_matching", num_oracles=3, oracle_seed=77, epochs=2, batch_size=16, retain_multiplier=1.5)
    u = create_unlearner("oracle_matching", model, data, hp, seed=2, trainer_cfg=CPU)
    seen = record_batch_ids(u)
    result = u.unlearn()
    assert asked and set(asked) == {(77, 3)}
    indices = finetune_indices(np.asarray(sc.forget_idx), np.asarray(sc.retain_idx), 1.0, 1.5,
                               np.random.default_rng([2, 0x0A7C]))
    expected = torch.cat([b[2] for b in make_loader(synthetic.train, 16, shuffle=True, seed=2, indices=indices)])
    order = torch.cat(seen)
    assert len(order) == 2 * len(indices) and torch.equal(order[: len(indices)], expected)
    filled = torch.zeros(len(synthetic.train), dtype=torch.bool)
    filled[torch.as_tensor(indices)] = True
    torch.testing.assert_close(u.target_table[filled], torch.tensor([[2.0, 0.0, -1.0, 2.0]]).expand(int(filled.sum()), 4))
    assert bool((u.target_table[~filled] == 0).all())  # oracle 2 (seed 2 mod 3) on the matching set only
    assert u.phase_log["oracle_matching"]["epochs"] == 2
    assert result.epochs == 2.0 and result.reached_target is None
    assert result.info["matching_set"] == len(indices) and result.info["one_off_s"] == 4.0
    assert set(result.info) == {"matching_set", "one_off_s", "phases"}  # nothing else in the record


def test_diagonal_datamodel_with_one_model_a_side_or_none():
    """One IN and one OUT model are enough for an estimate (no floor of two); an example without an IN model gets
    β = 0 (issue 39: the clamp floors and the `both` test survived)."""
    logits = torch.tensor([[[4.0], [7.0], [1.0]], [[2.0], [5.0], [3.0]], [[0.0], [9.0], [8.0]]])  # (E=3, n=3, C=1)
    inside = np.array([[True, False, True], [False, False, True], [False, False, False]])
    beta, mean_out = diagonal_datamodel(logits, inside)
    # example 0: IN {0} -> 4, OUT {1, 2} -> 1; example 1: no IN model -> 0; example 2: IN {0, 1} -> 2, OUT {2} -> 8
    torch.testing.assert_close(beta, torch.tensor([[3.0], [0.0], [-6.0]]))
    torch.testing.assert_close(mean_out, torch.tensor([[1.0], [7.0], [8.0]]))


@pytest.mark.parametrize("seed", [0, 3, 8])
def test_datamodel_spread_adds_the_seeded_out_shadows_deviation_by_hand(synthetic, synthetic_model, seed):
    """spread: shadow, by hand: shadow k outputs (k, 0, 0, 0); every forget example is IN the odd shadows and OUT of
    the even ones (0, 2, 4: mean 2), so β = 3 − 2 = 1 and run s's target on logit 0 is f_orig − 1 + (k_s − 2) with
    k_s the OUT shadow drawn by pick_out_models with the generator [s, 0xD77] — shadow 0 included; retain
    examples keep f_orig; the same seed gives the same targets (issue 39: the spread's sign, the seeded pick and
    shadow 0 survived); an unknown spread and the bank's arguments are checked too."""
    from duck.errors import DuckInputError

    model = copy.deepcopy(synthetic_model)
    e, n = 6, len(synthetic.train)
    shadows = [ConstantLogits(model, [float(k), 0.0, 0.0, 0.0]) for k in range(e)]
    keep = np.zeros((e, n), dtype=bool)
    keep[1::2] = True
    asked = []

    def bank(n_shadow, shadow_seed):
        asked.append((n_shadow, shadow_seed))
        return ModelBank(load=lambda k: shadows[k], one_off_s=3.0, keep=keep)

    data, sc = _data(synthetic, model, ReferenceModels(shadows=bank))
    forget, retain = np.asarray(sc.forget_idx)[:6], np.asarray(sc.retain_idx)[:3]
    idx = np.sort(np.r_[forget, retain])
    orig, _, _ = predict_logits(model, synthetic.train, indices=idx)
    hp = _hp("datamodel_matching", spread="shadow", n_shadow=6, shadow_seed=41)
    u = create_unlearner("datamodel_matching", model, data, hp, seed=seed, trainer_cfg=CPU)
    assert u.prepare() == 3.0 and asked == [(6, 41)]
    t = u.targets(idx)
    pick = pick_out_models(keep[:, idx], np.random.default_rng([seed, 0xD77]))
    is_forget = np.isin(idx, forget)
    expected = orig.clone()
    expected[torch.as_tensor(is_forget), 0] += -1.0 + torch.as_tensor(pick[is_forget], dtype=orig.dtype) - 2.0
    torch.testing.assert_close(t, expected)
    again = create_unlearner("datamodel_matching", model, data, hp, seed=seed, trainer_cfg=CPU)
    again.prepare()
    torch.testing.assert_close(again.targets(idx), t)
    with pytest.raises(DuckInputError) as err:
        create_unlearner("datamodel_matching", model, data, {**hp, "spread": "wide"}, seed=seed, trainer_cfg=CPU)
    assert str(err.value) == "method.spread='wide'; choose one of ['shadow', 'none']"
