"""deepunlearn's kgltop2 (Masked Small Gradients) and kgltop1 (FCS), NeurIPS 2023 unlearning challenge entries:
kgltop2's smallest-gradient mask against a brute-force sort, its re-initialisation, its gradient damping and
learning-rate schedule against the reference's formula; kgltop1's two losses against hand-written formulas, its
three optimisers' order and cosine schedule; both end to end on the synthetic data."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

from baselines.kgltop1 import forget_contrast_loss, uniform_kl_loss
from baselines.kgltop2 import (
    accumulated_gradients,
    gradient_scales,
    linear_annealing_factor,
    linear_annealing_schedule,
    masked_layers,
    reinitialise,
    retain_subset,
    scale_gradients,
    small_gradient_masks,
)
from duck.data.loaders import make_loader
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.metrics import split_accuracies
from duck.models import wrap_model
from duck.pipeline.config import conf_dir
from duck.unlearn import UnlearnData, create_unlearner
from duck.unlearn.registry import resolve_method_cfg

CPU = {"accelerator": "cpu", "devices": 1, "deterministic": True}


def _hp(name: str, **over):
    return {**yaml.safe_load((conf_dir() / "method" / f"{name}.yaml").read_text()), **over}


def _data(synthetic, model, kind: str = "class_removal"):
    labels, test = synthetic.train.labels, synthetic.test.labels
    if kind == "class_removal":
        sc = build_scenario(kind, labels, test, 4, forget_classes=[1])
    elif kind == "homogeneous_removal":
        sc = build_scenario(kind, labels, test, 4, fraction=0.1, seed=0)
    else:
        sc = build_scenario(kind, labels, test, 4, forget_ids=list(range(0, 240, 9)))
    return UnlearnData(train=synthetic.train, scenario=sc, num_classes=4, dataset_name="synthetic",
                       original_acc=split_accuracies(model, synthetic, sc)), sc


# --------------------------------------------------------------------------------------------- kgltop2
def test_gradients_are_summed_over_the_retain_subset_and_the_negated_forget_loss(synthetic, synthetic_model):
    """``get_grads_for_snip``: one zero_grad, backward of CE on retain-subset batches and of −CE on forget batches."""
    _, sc = _data(synthetic, synthetic_model)
    subset = retain_subset(sc.retain_idx, len(sc.forget_idx), seed=0)
    assert len(subset) == len(sc.forget_idx) and np.isin(subset, sc.retain_idx).all() and len(set(subset)) == len(subset)
    assert np.array_equal(subset, retain_subset(sc.retain_idx, len(sc.forget_idx), seed=0))  # the run's seed
    model, ref = copy.deepcopy(synthetic_model), copy.deepcopy(synthetic_model)
    weights = [w for _, w in masked_layers(model, "conv")]
    assert len(weights) == 3  # smallcnn: three convolutions

    def loaders():
        return (make_loader(synthetic.train, 16, shuffle=True, seed=1, indices=subset),
                make_loader(synthetic.train, 16, shuffle=True, seed=2, indices=sc.forget_idx))

    grads = accumulated_gradients(model, weights, *loaders(), torch.device("cpu"))
    ref.train()
    ref.zero_grad()
    retain, forget = loaders()
    for x, y, _ in retain:
        F.cross_entropy(ref(x), y).backward()
    for x, y, _ in forget:
        (-F.cross_entropy(ref(x), y)).backward()
    ref_weights = [w for _, w in masked_layers(ref, "conv")]
    for g, w in zip(grads, ref_weights, strict=True):
        assert torch.allclose(g, w.grad, rtol=1e-5, atol=1e-8)
    assert all(w.grad is None for w in weights)  # the model's own .grad is left alone


def test_mask_picks_the_smallest_gradients_of_each_layer_like_a_brute_force_sort():
    torch.manual_seed(0)
    grads = [torch.randn(4, 3, 3, 3), torch.randn(8, 4, 1, 1), torch.randn(7)]
    masks = small_gradient_masks(grads, 0.3)
    for g, m in zip(grads, masks, strict=True):
        flat = g.flatten().tolist()
        k = round(0.3 * len(flat))
        smallest = sorted(range(len(flat)), key=lambda i: abs(flat[i]))[:k]  # per layer, not over all layers
        expected = torch.zeros(len(flat), dtype=torch.bool)
        expected[smallest] = True
        assert m.shape == g.shape and torch.equal(m.flatten(), expected) and int(m.sum()) == k
    assert [int(m.sum()) for m in small_gradient_masks(grads, 0.0)] == [0, 0, 0]
    assert [int(m.sum()) for m in small_gradient_masks(grads, 1.0)] == [g.numel() for g in grads]


def test_reinitialisation_draws_kaiming_fan_out_values_on_the_mask_and_keeps_the_rest(synthetic_model):
    model = copy.deepcopy(synthetic_model)
    weights = [w for _, w in masked_layers(model, "conv")]
    before = [w.detach().clone() for w in weights]
    torch.manual_seed(1)
    masks = [torch.rand(w.shape) < 0.3 for w in weights]
    reinitialise(weights, masks, torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)  # by hand: one fresh tensor per layer, in module order
    for w, old, m in zip(weights, before, masks, strict=True):
        fresh = torch.empty(w.shape)
        nn.init.kaiming_normal_(fresh, mode="fan_out", nonlinearity="relu", generator=gen)
        assert torch.equal(w[~m], old[~m])  # kept: unchanged
        assert torch.equal(w[m], fresh[m]) and bool((w[m] != old[m]).all())  # re-initialised: the fresh values
        fan_out = w.shape[0] * w[0, 0].numel()
        assert float(fresh.std()) == pytest.approx(math.sqrt(2.0 / fan_out), rel=0.25)


def test_kept_conv_gradients_are_scaled_by_exactly_a_tenth(synthetic, synthetic_model):
    """Against an unmasked backward on the same batch: re-initialised entries x 1, kept ones x 0.1, BatchNorm,
    linear layers and biases untouched; removing the hooks restores plain gradients."""
    plain, masked = copy.deepcopy(synthetic_model).train(), copy.deepcopy(synthetic_model).train()
    weights = [w for _, w in masked_layers(masked, "conv")]
    masks = small_gradient_masks([torch.randn_like(w) for w in weights], 0.3)
    handles = scale_gradients(weights, gradient_scales(masks, 0.1))
    x, y, _ = next(iter(make_loader(synthetic.train, 32)))
    F.cross_entropy(plain(x), y).backward()
    F.cross_entropy(masked(x), y).backward()
    scaled = {id(w): m for w, m in zip(weights, masks, strict=True)}
    for (name, p), q in zip(plain.named_parameters(), masked.parameters(), strict=True):
        if id(q) not in scaled:
            assert torch.equal(q.grad, p.grad), name
            continue
        m = scaled[id(q)]
        assert torch.equal(q.grad[m], p.grad[m]), name
        assert torch.equal(q.grad[~m], p.grad[~m] * torch.tensor(0.1)), name
        nonzero = p.grad[~m] != 0
        assert torch.allclose(q.grad[~m][nonzero] / p.grad[~m][nonzero], torch.tensor(0.1)), name
    for h in handles:
        h.remove()
    masked.zero_grad()
    F.cross_entropy(masked(x), y).backward()
    assert all(torch.equal(q.grad, p.grad) for p, q in zip(plain.parameters(), masked.parameters(), strict=True))


class ReferenceLinearAnnealingLR(torch.optim.lr_scheduler.LRScheduler):
    """deepunlearn's ``LinearAnnealingLR`` (munl/unlearning/kgltop2.py @ 6830ff6), copied for comparison."""

    def __init__(self, optimizer, num_annealing_steps, num_total_steps):
        self.num_annealing_steps, self.num_total_steps = num_annealing_steps, num_total_steps
        super().__init__(optimizer)

    def get_lr(self):
        if self._step_count <= self.num_annealing_steps:
            return [base_lr * self._step_count / self.num_annealing_steps for base_lr in self.base_lrs]
        return [base_lr * (self.num_total_steps - self._step_count) / (self.num_total_steps - self.num_annealing_steps)
                for base_lr in self.base_lrs]


def _epoch_lrs(make_scheduler, epochs: int) -> list[float]:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make_scheduler(opt)
    lrs = []
    for _ in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def test_linear_annealing_multipliers_follow_the_reference():
    assert _epoch_lrs(lambda o: linear_annealing_schedule(o, 5), 5) == pytest.approx([1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    assert [linear_annealing_factor(s, 3, 6) for s in range(1, 6)] == pytest.approx([1 / 3, 2 / 3, 1, 2 / 3, 1 / 3])
    for epochs in range(1, 11):
        ours = _epoch_lrs(lambda o, e=epochs: linear_annealing_schedule(o, e), epochs)
        ref = _epoch_lrs(lambda o, e=epochs: ReferenceLinearAnnealingLR(o, (e + 1) // 2, e + 1), epochs)
        assert ours == pytest.approx(ref) and min(ours) > 0, epochs


def test_kgltop2_with_frozen_kept_weights_moves_only_the_reinitialised_ones(synthetic, synthetic_model):
    """kept_grad_scale=0 and no weight decay: the hooks must act inside Lightning's fine-tuning, so the kept conv
    entries end exactly at the original's values while the re-initialised ones train; every mask holds
    round(0.3 n) entries; no hook is left on the returned model."""
    data, _ = _data(synthetic, synthetic_model)
    u = create_unlearner("kgltop2", copy.deepcopy(synthetic_model), data,
                         _hp("kgltop2", kept_grad_scale=0.0, weight_decay=0.0, lr=0.05), seed=0, trainer_cfg=CPU)
    before = dict(synthetic_model.named_parameters())
    result = u.unlearn()
    assert result.epochs == 2.0 and result.info["phases"]["kgltop2"]["epochs"] == 2
    for (name, w), m in zip(u.layers, u.masks, strict=True):
        original = before[name].detach()
        assert int(m.sum()) == round(0.3 * m.numel()), name
        assert torch.equal(w.detach()[~m], original[~m]), name
        assert bool((w.detach()[m] != original[m]).all()), name
        assert not w._backward_hooks, name
    assert result.info["reinitialised_weights"] == sum(int(m.sum()) for m in u.masks)


def test_kgltop2_refuses_a_model_without_convolutions_and_runs_it_with_conv_linear(synthetic):
    torch.manual_seed(0)
    mlp = wrap_model(nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 4)),
                     example=torch.zeros(2, 1, 8, 8))
    data, _ = _data(synthetic, mlp)
    with pytest.raises(DuckInputError, match=r"method.layers='conv'.*no trainable nn.Conv2d.*method.layers=conv\+linear"):
        create_unlearner("kgltop2", copy.deepcopy(mlp), data, _hp("kgltop2"), seed=0, trainer_cfg=CPU)
    model = copy.deepcopy(mlp)
    u = create_unlearner("kgltop2", model, data, _hp("kgltop2", layers="conv+linear"), seed=0, trainer_cfg=CPU)
    assert [n for n, _ in u.layers] == ["net.1.weight", "net.3.weight"]
    result = u.unlearn()
    assert list(result.model.state_dict()) == list(mlp.state_dict())
    assert result.info["masked_layers"] == 2 and result.info["reinitialised_fraction"] == pytest.approx(0.3, abs=0.01)


# --------------------------------------------------------------------------------------------- kgltop1
def test_forget_contrast_loss_matches_a_hand_written_formula():
    torch.manual_seed(0)
    zf, zr, t = torch.randn(3, 4, requires_grad=True), torch.randn(5, 4, requires_grad=True), 1.15
    loss = forget_contrast_loss(zf, zr, t)
    a, b = zf.tolist(), zr.tolist()
    total = 0.0
    for i in range(3):
        s = [sum(a[i][c] * b[j][c] for c in range(4)) / t for j in range(5)]
        log_z = math.log(sum(math.exp(v) for v in s))
        total += sum(-(v - log_z) for v in s)
    assert float(loss.detach()) == pytest.approx(total / 15, rel=1e-5)
    loss.backward()
    assert zf.grad is not None and zr.grad is None  # the retain logits are detached


def test_uniform_kl_loss_is_kl_from_uniform_averaged_over_the_batch():
    torch.manual_seed(0)
    z = torch.randn(6, 5)
    p, u = F.softmax(z, dim=1), 1.0 / 5
    expected = float((u * torch.log(u / p)).sum()) / 6
    assert float(uniform_kl_loss(z)) == pytest.approx(expected, rel=1e-5)
    assert float(uniform_kl_loss(torch.zeros(2, 5))) == pytest.approx(0.0, abs=1e-7)  # already uniform


def test_kgltop1_steps_three_optimisers_in_the_reference_order_and_anneals_to_eta_min(synthetic, synthetic_model):
    """Stage 1 (one forget pass), then per epoch a forget round (len(forget loader) steps, cosine lr down to eta_min
    at the last one) and a retain round; three SGD optimisers, each with its own momentum buffer; the retain lr is
    retain_lr x batch / 64."""
    data, sc = _data(synthetic, synthetic_model)
    bs, epochs = 16, 3
    u = create_unlearner("kgltop1", copy.deepcopy(synthetic_model), data,
                         _hp("kgltop1", batch_size=bs, epochs=epochs, eta_min=1e-5), seed=0, trainer_cfg=CPU)
    order, real = [], u.manual_step

    def spy(opt, loss):
        order.append(getattr(opt, "optimizer", opt))
        real(opt, loss)

    u.manual_step = spy
    result = u.unlearn()
    stage1, forget, retain = u.trainer.optimizers
    n_forget, n_retain = math.ceil(len(sc.forget_idx) / bs), len(sc.retain_idx) // bs
    assert order == [stage1] * n_forget + ([forget] * n_forget + [retain] * n_retain) * epochs
    log = result.info["phases"]["kgltop1"]
    assert (log["stage1_steps"], log["forget_steps"], log["retain_steps"]) == (n_forget, epochs * n_forget,
                                                                             epochs * n_retain)
    assert u.forget_scheduler.T_max == n_forget * epochs
    assert forget.param_groups[0]["lr"] == pytest.approx(1e-5, abs=1e-12)
    assert result.info["final_forget_lr"] == pytest.approx(1e-5, abs=1e-12)
    assert retain.param_groups[0]["lr"] == pytest.approx(0.001 * bs / 64)
    assert stage1.param_groups[0]["lr"] == 0.005 and retain.param_groups[0]["weight_decay"] == 0.01
    first = next(u.model.parameters())
    buffers = [o.state[first]["momentum_buffer"] for o in (stage1, forget, retain)]
    assert all(b is not None for b in buffers) and len({id(b) for b in buffers}) == 3
    assert not torch.equal(buffers[0], buffers[2])


# --------------------------------------------------------------------------------------------- both
@pytest.mark.parametrize("kind", ["class_removal", "homogeneous_removal", "custom"])
@pytest.mark.parametrize("name", ["kgltop1", "kgltop2"])
def test_method_runs_end_to_end_and_keeps_the_state_dict_keys(name, kind, synthetic, synthetic_model):
    data, _ = _data(synthetic, synthetic_model, kind)
    model = copy.deepcopy(synthetic_model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    result = create_unlearner(name, model, data, _hp(name), seed=0, trainer_cfg=CPU).unlearn()
    after = result.model.state_dict()
    assert list(after) == list(before)
    assert all(type(m) is type(o) for m, o in zip(result.model.modules(), synthetic_model.modules(), strict=True))
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())
    assert result.epochs == 2.0 and result.reached_target is None and not result.model.training


@pytest.mark.parametrize("name,over,match", [
    ("kgltop2", {"init_rate": 1.5}, r"method.init_rate must be a finite number >= 0.0 and <= 1.0"),
    ("kgltop2", {"layers": "all"}, r"method.layers='all'; choose one of \['conv', 'conv\+linear'\]"),
    ("kgltop2", {"kept_grad_scale": -0.1}, r"method.kept_grad_scale"),
    ("kgltop2", {"augment": "no"}, r"method.augment='no' must be true or false"),
    ("kgltop1", {"retain_weight_decay": -1.0}, r"method.retain_weight_decay"),
    ("kgltop1", {"forget_lr": 0.0}, r"method.forget_lr"),
    ("kgltop1", {"temperature": 0.0}, r"method.temperature"),
])
def test_bad_hyperparameters_are_refused_naming_them(name, over, match, synthetic, synthetic_model):
    data, _ = _data(synthetic, synthetic_model)
    with pytest.raises(DuckInputError, match=match):
        create_unlearner(name, copy.deepcopy(synthetic_model), data, _hp(name, **over), seed=0, trainer_cfg=CPU)


REFERENCE = {"kgltop1": {"lr": 0.005, "forget_lr": 3e-4, "retain_lr": 0.001, "momentum": 0.9, "weight_decay": 0.0,
                         "forget_weight_decay": 0.0, "retain_weight_decay": 0.01, "eta_min": 1e-6,
                         "temperature": 1.15, "batch_size": 256, "epochs": 8},
             "kgltop2": {"lr": 0.001, "momentum": 0.9, "weight_decay": 5e-4, "init_rate": 0.3, "kept_grad_scale": 0.1,
                         "batch_size": 64, "epochs": 5, "layers": "conv"}}
FORGET_SIZES = {"digits": 130, "synthetic": 24}  # about the smallest forget sets of these data sets' scenarios


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_presets_resolve_with_the_reference_values_as_default(name):
    raw = yaml.safe_load((conf_dir() / "method" / f"{name}.yaml").read_text())
    raw.pop("name")
    for kind in ("class_removal", "homogeneous_removal"):
        assert {k: resolve_method_cfg(raw, "cifar10", kind, name)[k] for k in REFERENCE[name]} == REFERENCE[name]
        for dataset in ("cifar100", "tinyimagenet", "digits", "fashion_mnist", "synthetic"):
            hp = resolve_method_cfg(raw, dataset, kind, name)
            assert all(v is not None for v in hp.values()), (dataset, kind, hp)
            assert hp["batch_size"] <= FORGET_SIZES.get(dataset, 256), (dataset, kind)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_kgltop1_wiring_optimisers_augmentation_and_record(synthetic, synthetic_model):
    """kgltop1's settings reach their places (issue 39: survivors of the first mutation run): the job's seed and
    trainer settings; each SGD's lr and weight decay from its own key; augmentation only with ``augment: true``
    and applied to the batch itself; the forget round's retain batches a seeded stream apart from the retain
    round's (``seed_offset`` 104729); the phase's step count is the three kinds together; the record names the
    final forget lr and nothing else; the divergence message names the three learning rates."""
    from baselines.kgltop1 import KGLTop1

    data, sc = _data(synthetic, synthetic_model)
    bs = 16
    hp = _hp("kgltop1", batch_size=bs, epochs=2, lr=0.007, weight_decay=0.3, forget_lr=0.002,
             forget_weight_decay=0.2, retain_lr=0.004, retain_weight_decay=0.1)
    u = KGLTop1(copy.deepcopy(synthetic_model), data, hp, seed=5, trainer_cfg=CPU)
    assert u.seed == 5 and u.trainer_cfg["deterministic"] is True
    assert u.divergence_setting() == "method.lr=0.007 / method.forget_lr=0.002 / method.retain_lr=0.004"
    x = torch.randn(3, *synthetic.train[0][0].shape)
    u.augment = lambda t: t + 1.0
    torch.testing.assert_close(u.inputs(x), x)  # augment: false (the reference's loaders): the batch as given
    on = KGLTop1(copy.deepcopy(synthetic_model), data, {**hp, "augment": True}, seed=5, trainer_cfg=CPU)
    on.augment = lambda t: t + 1.0
    torch.testing.assert_close(on.inputs(x), x + 1.0)
    with pytest.raises(DuckInputError) as e:
        KGLTop1(copy.deepcopy(synthetic_model), data, {**hp, "augment": "yes"}, seed=5, trainer_cfg=CPU)
    assert str(e.value) == "method.augment='yes' must be true or false"

    asked, real_loader = [], u.retain_loader

    def spy(*args, **kwargs):
        asked.append((args, kwargs))
        return real_loader(*args, **kwargs)

    u.retain_loader = spy
    result = u.unlearn()
    stage1, forget, retain = u.trainer.optimizers
    assert (stage1.defaults["lr"], stage1.defaults["weight_decay"]) == (0.007, 0.3)
    assert (forget.defaults["lr"], forget.defaults["weight_decay"]) == (0.002, 0.2)
    assert (retain.defaults["lr"], retain.defaults["weight_decay"]) == (pytest.approx(0.004 * bs / 64), 0.1)
    assert asked == [((bs,), {"seed_offset": 104729}), ((bs,), {"drop_last": True})]
    own = torch.cat([b[2] for b in real_loader(bs, seed_offset=104729)])
    rounds = torch.cat([b[2] for b in real_loader(bs, drop_last=True)])
    assert not torch.equal(own[: len(rounds)], rounds)  # a stream apart from the retain round's
    log = result.info["phases"]["kgltop1"]
    assert log["steps"] == log["retain_steps"] + log["forget_steps"] + log["stage1_steps"]
    assert log["stage1_steps"] > 0 and log["forget_steps"] > log["stage1_steps"]
    assert set(result.info) == {"final_forget_lr", "phases"} and result.reached_target is None


def test_small_gradient_ties_go_to_the_earlier_position_and_unused_layers_get_zero_gradients(synthetic,
                                                                                           synthetic_model):
    """Ties in |g| (a layer the batch never reaches: all zeros) are broken by position, as the docstring says (an
    unstable sort reorders equal keys from about 100 entries on); a weight the forward does not use gets a zero
    gradient instead of an error (issue 39: stable=False and allow_unused=False survived)."""
    g = torch.zeros(500)
    g[::7] = 1.0  # 72 non-zero entries; 428 tied zeros
    mask = small_gradient_masks([g], 0.5)[0]  # 250 of the zeros: the first 250 zero positions
    zeros = torch.nonzero(g == 0).flatten()
    expected = torch.zeros(500, dtype=torch.bool)
    expected[zeros[:250]] = True
    assert torch.equal(mask, expected)
    model = copy.deepcopy(synthetic_model)
    unused = nn.Parameter(torch.randn(3, 3))  # in the list of weights, not in the forward
    _, sc = _data(synthetic, synthetic_model)
    loader = make_loader(synthetic.train, 16, indices=sc.forget_idx[:16])
    weights = [w for _, w in masked_layers(model, "conv")] + [unused]
    grads = accumulated_gradients(model, weights, loader, loader, torch.device("cpu"))
    assert torch.equal(grads[-1], torch.zeros(3, 3)) and len(grads) == len(weights)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_kgltop2_wiring_subset_loaders_generator_augmentation_and_record(synthetic, synthetic_model, monkeypatch):
    """kgltop2's run (issue 39: survivors of the first mutation run): the job's seed and trainer settings reach the
    module; the gradients come from |D_f| retain samples drawn with the seed and shuffled with seed + 15485863,
    and the forget set; the re-initialisation draws from a generator seeded by the job (two runs agree whatever
    the global generator); fine-tuning sees full retain batches only, augmented only with ``augment: true``; the
    record names the re-initialised weights and nothing else; a model without the chosen layers is refused with
    the whole message."""
    import baselines.kgltop2 as kgltop2_module
    from baselines.kgltop2 import KGLTop2

    data, sc = _data(synthetic, synthetic_model)
    bs = 16
    hp = _hp("kgltop2", batch_size=bs, epochs=2)
    seen_grad_loaders = []
    real_grads = kgltop2_module.accumulated_gradients

    def spy_grads(model, weights, retain_loader, forget_loader, device):
        seen_grad_loaders.append((torch.cat([b[2] for b in retain_loader]), torch.cat([b[2] for b in forget_loader])))
        return real_grads(model, weights, retain_loader, forget_loader, device)

    monkeypatch.setattr(kgltop2_module, "accumulated_gradients", spy_grads)
    generators = []
    real_reinit = kgltop2_module.reinitialise

    def spy_reinit(weights, masks, generator):
        generators.append(generator)
        return real_reinit(weights, masks, generator)

    monkeypatch.setattr(kgltop2_module, "reinitialise", spy_reinit)

    def run(global_seed, **over):
        torch.manual_seed(global_seed)
        u = KGLTop2(copy.deepcopy(synthetic_model), data, {**hp, **over}, seed=4, trainer_cfg=CPU)
        u.augment = lambda t: t + 1.0
        inputs, real_forward, real_step = [], u.model.forward, u.training_step

        def spy_step(batch, batch_idx):
            inputs.append((batch[0].clone(), len(batch[1])))
            return real_step(batch, batch_idx)

        u.training_step = spy_step
        seen_model_inputs = []
        u.model.forward = lambda x: (seen_model_inputs.append(x.detach().clone()), real_forward(x))[1]
        return u, u.unlearn(), inputs, seen_model_inputs

    u, result, inputs, model_inputs = run(11)
    assert u.seed == 4 and u.trainer_cfg["deterministic"] is True
    # its own generator, seeded by the job: the values do not depend on what used the global one before (dropout)
    assert isinstance(generators[0], torch.Generator) and generators[0].initial_seed() == 4
    retain_order, forget_order = seen_grad_loaders[0]
    subset = retain_subset(sc.retain_idx, len(sc.forget_idx), 4)
    expected = torch.cat([b[2] for b in make_loader(synthetic.train, bs, shuffle=True, seed=4 + 15485863,
                                                    indices=subset)])
    assert torch.equal(retain_order, expected)
    assert torch.equal(forget_order.sort().values, torch.as_tensor(np.sort(sc.forget_idx)))
    assert all(n == bs for _, n in inputs)  # drop_last: no ragged batch while fine-tuning
    steps = len(inputs)
    train_inputs = model_inputs[-steps:] if steps else []
    assert all(torch.equal(m, x) for m, (x, _) in zip(train_inputs, inputs, strict=True))  # augment: false
    assert set(result.info) == {"reinitialised_weights", "masked_layers", "reinitialised_fraction", "phases"}
    assert result.reached_target is None
    other, _, _, _ = run(12)
    for pa, pb in zip(u.model.parameters(), other.model.parameters(), strict=True):
        assert torch.equal(pa, pb)  # the global generator plays no part
    _, _, aug_inputs, aug_model_inputs = run(11, augment=True)
    assert all(torch.equal(m, x + 1.0) for m, (x, _) in zip(aug_model_inputs[-len(aug_inputs):], aug_inputs,
                                                             strict=True))
    with pytest.raises(DuckInputError) as e:
        KGLTop2(copy.deepcopy(synthetic_model), data, {**hp, "kept_grad_scale": -1.0}, seed=4, trainer_cfg=CPU)
    assert str(e.value) == "method.kept_grad_scale must be a finite number >= 0.0, got -1.0"


def test_kgltop2_refusal_messages_name_the_missing_layers_and_the_way_out(synthetic):
    """The whole message for both layer choices: an MLP has no convolution (the hint names conv+linear); with its
    linear weights frozen it has no layer of either kind left (no hint)."""
    from baselines.kgltop2 import KGLTop2

    torch.manual_seed(0)
    mlp = wrap_model(nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 4)),
                     example=torch.zeros(2, 1, 8, 8))
    data, _ = _data(synthetic, mlp)
    frozen = copy.deepcopy(mlp)
    for m in frozen.modules():
        if isinstance(m, nn.Linear):
            m.weight.requires_grad_(False)
    for model, layers, message in (
        (mlp, "conv", "method.layers='conv': the model has no trainable nn.Conv2d layer for kgltop2 to "
                      "re-initialise; use method.layers=conv+linear to re-initialise its nn.Linear weights instead"),
        (frozen, "conv+linear", "method.layers='conv+linear': the model has no trainable nn.Conv2d or nn.Linear "
                                "layer for kgltop2 to re-initialise"),
    ):
        with pytest.raises(DuckInputError) as e:
            KGLTop2(copy.deepcopy(model), data, _hp("kgltop2", layers=layers), seed=0, trainer_cfg=CPU)
        assert str(e.value) == message
