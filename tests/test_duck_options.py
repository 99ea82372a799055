"""DUCK's options observed to take effect (issue 27 item 7): every setting of ``duck/unlearn/duck.py`` below
could be ignored, and each refusal removed, without a test failing. Each test here watches the option's
effect (phase epochs and steps, the learning rate the optimiser used, the calls that recompute targets, the
refusal and its message), and likewise ``predict_logits`` restoring the model's mode and offline LiRA with
OUT shadows whose φ have zero variance."""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from duck.data.scenarios import Scenario, build_scenario
from duck.embeddings import embed_samples
from duck.errors import DuckInputError
from duck.metrics import predict_logits, split_accuracies
from duck.unlearn import UnlearnData, create_unlearner
from duck.unlearn.duck import nearest_incorrect_centroid

# conf/method/duck.yaml with the synthetic preset (batch_size 32, batch_ratio 2) written out
BASE = {"lambda_fgt": 1.5, "lambda_ret": 1.5, "batch_ratio": 2, "temperature": 2.0, "lr": 1e-3, "batch_size": 32,
        "weight_decay": 5e-4, "tolerance": 0.01, "max_epochs": 10, "stop_check": "epoch", "recompute_targets": False,
        "max_per_class": None, "joint_forward": True, "low_epochs": 2, "low_lambda_scale_cr": 0.1,
        "low_lambda_scale_hr": 0.3, "low_pairing": "ratio", "low_batch_ratio": None, "low_lr": None,
        "low_cosine": False}
TRAINER = {"accelerator": "cpu", "devices": 1}


def make_duck(synthetic, model, scenario, **overrides):
    orig = split_accuracies(model, synthetic, scenario)
    data = UnlearnData(synthetic.train, scenario, synthetic.num_classes, "synthetic", orig)
    return create_unlearner("duck", copy.deepcopy(model), data, {**BASE, **overrides}, seed=0, trainer_cfg=TRAINER)


def class_removal(synthetic, classes=(1,)):
    return build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, 4, forget_classes=list(classes))


def forget_batches(scenario) -> int:
    return -(-len(scenario.forget_idx) // BASE["batch_size"])


# ------------------------------------------------------------------------------------- low-forget phase
def test_one_low_epoch_runs_the_low_phase_once(synthetic, synthetic_model):
    """``low_epochs=1``: the low phase runs exactly one epoch (a ``> 1`` test would skip it); 0 skips it."""
    sc = class_removal(synthetic)
    res = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=1).unlearn()
    n = forget_batches(sc)
    assert res.info["phases"]["high"] == {"epochs": 1, "steps": n * 2}
    assert res.info["phases"]["low"] == {"epochs": 1, "steps": n * 2}
    assert res.epochs == 1 + 1
    none = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=0).unlearn()
    assert "low" not in none.info["phases"] and none.epochs == 1


def test_low_batch_ratio_sets_the_low_phase_retain_steps(synthetic, synthetic_model):
    """``low_batch_ratio``: retain batches (= optimiser steps) per forget batch in the low phase only; ``null``
    falls back to ``batch_ratio``."""
    sc = class_removal(synthetic)
    n = forget_batches(sc)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=2, batch_ratio=2, low_batch_ratio=3)
    res = u.unlearn()
    assert res.info["phases"]["high"] == {"epochs": 1, "steps": n * 2}  # the high phase keeps batch_ratio
    assert res.info["phases"]["low"] == {"epochs": 2, "steps": 2 * n * 3}
    assert u.retain_steps == 3
    default = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=2, batch_ratio=2,
                        low_batch_ratio=None).unlearn()
    assert default.info["phases"]["low"] == {"epochs": 2, "steps": 2 * n * 2}


def _lrs_per_step(u) -> list[tuple[str, float]]:
    """Wrap ``training_step``: the learning rate of the optimiser after every training step, with the phase."""
    seen: list[tuple[str, float]] = []
    step = u.training_step

    def spy(*args, **kwargs):
        out = step(*args, **kwargs)
        seen.append((u.phase, float(u.trainer.optimizers[0].param_groups[0]["lr"])))
        return out

    u.training_step = spy
    return seen


def test_low_cosine_anneals_the_low_phase_learning_rate_to_zero(synthetic, synthetic_model):
    """``low_cosine``: the low-phase learning rate (``low_lr``) follows a cosine over the phase's optimiser
    steps and ends at 0; the high phase keeps ``lr``. Without it the low phase runs at ``low_lr`` throughout."""
    sc = class_removal(synthetic)
    n, ratio, low_epochs, low_lr = forget_batches(sc), 2, 2, 5e-4
    u = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=low_epochs, batch_ratio=ratio,
                  lr=1e-3, low_lr=low_lr, low_cosine=True)
    seen = _lrs_per_step(u)
    u.unlearn()
    high = [lr for phase, lr in seen if phase == "high"]
    low = [lr for phase, lr in seen if phase == "low"]
    assert high == [1e-3] * n  # one training step per forget batch, one high epoch
    total = low_epochs * n * ratio  # optimiser steps of the low phase = the schedule's length
    expected = [low_lr * (1 + math.cos(math.pi * k / total)) / 2 for k in range(ratio, total + 1, ratio)]
    assert low == pytest.approx(expected, abs=1e-10)
    assert low[-1] == pytest.approx(0.0, abs=1e-12) and low[0] < low_lr

    flat = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_epochs=low_epochs, batch_ratio=ratio,
                     lr=1e-3, low_lr=low_lr, low_cosine=False)
    seen = _lrs_per_step(flat)
    flat.unlearn()
    assert [lr for phase, lr in seen if phase == "low"] == [low_lr] * (low_epochs * n)


# ------------------------------------------------------------------------------------- targets
def _watch_assign_targets(u, synthetic) -> tuple[list[tuple[str, int]], list[torch.Tensor]]:
    """Wrap ``assign_targets``: record (phase, epoch) of every call and the targets it stored, checking that
    they are the nearest incorrect centroids under the model of that moment."""
    calls: list[tuple[str, int]] = []
    rows: list[torch.Tensor] = []
    assign = u.assign_targets

    def spy():
        assign()
        calls.append((u.phase, int(u.current_epoch)))
        rows.append(u.target_row.clone())
        z, y, idx = embed_samples(u.model, synthetic.train, u.data.forget_idx, device=u.centroids.device)
        expected = nearest_incorrect_centroid(z, y, u.centroids, u.centroid_classes)
        assert torch.equal(u.target_row[idx], expected)

    u.assign_targets = spy
    return calls, rows


def test_recompute_targets_recomputes_them_every_high_epoch(synthetic, synthetic_model):
    """``recompute_targets=true``: c*(x) recomputed with the current model at the start of every high-phase epoch
    after the first (never in the low phase); ``false``: once, before unlearning, and unchanged afterwards."""
    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=3, low_epochs=2, recompute_targets=True)
    calls, _ = _watch_assign_targets(u, synthetic)
    res = u.unlearn()
    assert res.info["phases"]["high"]["epochs"] == 3
    assert calls == [("init", 0), ("high", 1), ("high", 2)]

    once = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=3, low_epochs=2,
                     recompute_targets=False)
    calls, rows = _watch_assign_targets(once, synthetic)
    once.unlearn()
    assert calls == [("init", 0)]
    assert torch.equal(once.target_row, rows[0])  # the targets of the start, unchanged by the epochs


# ------------------------------------------------------------------------------------- refusals
def test_refuses_forget_samples_without_a_centroid_of_another_class(synthetic, synthetic_model):
    """A forget sample whose class is the only one retained has no incorrect centroid to go to: refused with a
    DuckInputError before any training (the argmin over all-inf distances picked its own class)."""
    y = synthetic.train.labels
    ids = np.concatenate([np.flatnonzero(y != 0), np.flatnonzero(y == 0)[:5]])  # class 0 alone is retained
    sc = build_scenario("custom", y, synthetic.test.labels, 4, forget_ids=sorted(ids.tolist()))
    assert set(y[sc.retain_idx].tolist()) == {0}
    u = make_duck(synthetic, synthetic_model, sc)
    with pytest.raises(DuckInputError) as e:
        u.unlearn()
    assert str(e.value) == ("no centroid of a class other than the forget samples' own; retain at least one other "
                            "class")
    assert u.phase_log == {} and u.history == []


def test_refuses_a_target_class_without_retained_samples(synthetic, synthetic_model):
    """Targeted: the named class must keep retained samples to form its centroid (build_scenario ensures it; a
    Scenario built by hand may not): refused with a DuckInputError that names the class, not an IndexError."""
    y = synthetic.train.labels
    forget = np.sort(np.concatenate([np.flatnonzero(y == 0), np.flatnonzero(y == 1)[:5]]))
    sc = Scenario("targeted", forget, np.setdiff1d(np.arange(len(y)), forget), target_class=0)
    u = make_duck(synthetic, synthetic_model, sc)
    with pytest.raises(DuckInputError) as e:
        u.unlearn()
    assert str(e.value) == "target class 0 has no retained samples to form a centroid"
    assert u.phase_log == {} and u.history == []


def test_targeted_removal_keeps_the_named_class_as_target_even_with_recompute_targets(synthetic, synthetic_model):
    """Targeted: every forget sample's target is the named class's centroid; ``recompute_targets`` re-assigns the
    nearest incorrect centroid in the other scenarios only, so over three high epochs the targets stay the named
    class's row (issue 39: the scenario test of on_train_epoch_start survived)."""
    y = synthetic.train.labels
    forget = np.flatnonzero(y == 1)[:20]
    sc = Scenario("targeted", forget, np.setdiff1d(np.arange(len(y)), forget), target_class=3)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=3, low_epochs=0, recompute_targets=True)
    calls, _ = _watch_assign_targets(u, synthetic)
    res = u.unlearn()
    assert res.info["phases"]["high"]["epochs"] == 3 and calls == []
    row = int((u.centroid_classes == 3).nonzero().flatten()[0])
    assert bool((u.target_row[torch.as_tensor(forget)] == row).all())
    assert int((u.target_row >= 0).sum()) == len(forget)


# ------------------------------------------------------------------------------------- metrics and LiRA
@pytest.mark.parametrize("training", [True, False])
def test_predict_logits_runs_in_eval_mode_and_restores_the_mode(synthetic, training):
    """Eval-mode logits (independent of the batch composition: BatchNorm running statistics) and the model
    left in the mode it was in, every submodule included."""
    from duck.models import create_model

    torch.manual_seed(0)
    model = create_model("smallcnn", synthetic.num_classes, 1, 8, width=4)
    assert any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    model.train(training)
    a, y, idx = predict_logits(model, synthetic.train, indices=np.arange(40), batch_size=7)
    assert all(m.training == training for m in model.modules())
    b, _, _ = predict_logits(model, synthetic.train, indices=np.arange(40), batch_size=40)
    assert all(m.training == training for m in model.modules())
    torch.testing.assert_close(a, b)
    assert a.shape == (40, synthetic.num_classes) and idx.tolist() == list(range(40))
    # a BatchNorm the caller froze in eval mode inside a model in train mode stays frozen
    model.train()
    frozen = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d))
    frozen.eval()
    predict_logits(model, synthetic.train, indices=np.arange(8), batch_size=8)
    assert model.training and not frozen.training


@pytest.mark.parametrize("fixed_variance", [False, True])
def test_offline_lira_with_zero_out_variance(fixed_variance):
    """OUT shadows with identical φ (σ_out = 0): offline LiRA stays finite, and orders the target's φ above,
    at and below μ_out (a one-sided score of +large, log 2, 0; two-sided: +large, 0, +large) instead of
    giving inf and NaN (0/0)."""
    from attacks.lira import lira_scores

    n_shadow = 4
    target = np.array([[2.0], [1.0], [0.0]])  # above, at and below the OUT φ
    shadow = np.ones((n_shadow, 3, 1))  # every OUT shadow has φ = 1 for every example: zero variance
    shadow_in = np.zeros((n_shadow, 3), dtype=bool)
    with np.errstate(divide="raise", invalid="raise"):  # no division by zero, no invalid operation
        one, info = lira_scores(target, shadow, shadow_in, variant="offline", fixed_variance=fixed_variance)
        two, _ = lira_scores(target, shadow, shadow_in, variant="offline", offline_test="two_sided",
                             fixed_variance=fixed_variance)
    assert info == {"n_out": n_shadow}
    assert np.isfinite(one).all() and np.isfinite(two).all()
    assert one[0] > 1e6 and one[1] == pytest.approx(np.log(2.0)) and one[2] == pytest.approx(0.0, abs=1e-12)
    assert two[0] > 1e6 and two[1] == pytest.approx(0.0, abs=1e-12) and two[2] > 1e6


# ------------------------------------------------------------------ per-phase settings (the authors' variant)
class _PhaseSpy:
    """Records, per phase, the batch sizes ``embed`` sees in training steps and the λ2 / label smoothing of each
    retain CE."""

    def __init__(self, unlearner, monkeypatch):
        import duck.unlearn.duck as duck_module

        self.embeds: dict[str, list[int]] = {}
        self.ce: dict[str, list[tuple[float, float]]] = {}
        model, real_embed, real_ce = unlearner.model, unlearner.model.embed, duck_module.F.cross_entropy

        def embed(x):
            if model.training:  # training steps only (not the stopping rule's evaluation of the forget set)
                self.embeds.setdefault(unlearner.phase, []).append(len(x))
            return real_embed(x)

        def cross_entropy(logits, y, **kw):
            self.ce.setdefault(unlearner.phase, []).append((unlearner.lambda_ret, kw.get("label_smoothing", 0.0)))
            return real_ce(logits, y, **kw)

        monkeypatch.setattr(model, "embed", embed)
        monkeypatch.setattr(duck_module.F, "cross_entropy", cross_entropy)


def test_forward_pass_lambda_ret_and_label_smoothing_are_set_per_phase(synthetic, synthetic_model, monkeypatch):
    """The authors' variant: two forward passes in the high phase, one joint pass in the low phase, λ2 there
    replaced (their retain CE has weight 1), label smoothing in every retain CE."""
    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, joint_forward=False, low_joint_forward=True,
                  low_lambda_ret=1.0, label_smoothing=0.2)
    spy = _PhaseSpy(u, monkeypatch)
    u.unlearn()
    bs = BASE["batch_size"]
    high = [n for n in spy.embeds["high"] if n <= bs]  # separate passes: no batch above one side's size
    assert high == spy.embeds["high"] and len(high) % 2 == 0
    assert all(n > bs for n in spy.embeds["low"][1:])  # joint passes: forget + retain images together
    assert {c for c in spy.ce["high"]} == {(BASE["lambda_ret"], 0.2)}
    assert {c for c in spy.ce["low"]} == {(1.0, 0.2)}


def test_per_phase_settings_default_to_the_high_phase_ones(synthetic, synthetic_model, monkeypatch):
    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=1.0)
    spy = _PhaseSpy(u, monkeypatch)
    u.unlearn()
    assert all(n > BASE["batch_size"] for n in spy.embeds["low"][1:] + spy.embeds["high"][1:])  # joint everywhere
    assert {c for c in spy.ce["low"]} == {(BASE["lambda_ret"], 0.0)}


def test_low_retain_batch_size_sets_the_low_phase_retain_batches(synthetic, synthetic_model):
    """``low_retain_batch_size`` with the authors' first-forget pairing: one step per retain batch of that size."""
    sc = class_removal(synthetic)
    res = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_pairing="first_forget", low_epochs=1,
                    low_retain_batch_size=48).unlearn()
    assert res.info["phases"]["low"]["steps"] == len(sc.retain_idx) // 48
    same = make_duck(synthetic, synthetic_model, sc, tolerance=1.0, low_pairing="first_forget", low_epochs=1).unlearn()
    assert same.info["phases"]["low"]["steps"] == len(sc.retain_idx) // BASE["batch_size"]


def test_the_authors_variant_config_sets_every_per_phase_switch():
    from duck.pipeline.config import compose
    from duck.pipeline.job import Job

    job = Job.from_cfg(compose("run", ["method=duck_authors", "data=digits"]), "run")
    assert job.method == "duck"
    assert {k: job.hparams[k] for k in ("weight_decay", "joint_forward", "low_joint_forward", "low_lambda_ret",
                                        "low_retain_batch_size", "low_lr", "low_cosine", "low_pairing")} == {
        "weight_decay": 0.0, "joint_forward": False, "low_joint_forward": True, "low_lambda_ret": 1.0,
        "low_retain_batch_size": 512, "low_lr": 1e-4, "low_cosine": True, "low_pairing": "first_forget"}
    tiny = Job.from_cfg(compose("run", ["method=duck", "data=digits"]), "run")
    assert tiny.hparams["label_smoothing"] == 0.0


def test_first_forget_pairing_pairs_the_one_forget_batch_with_every_retain_batch(synthetic, synthetic_model):
    """``low_pairing: first_forget`` (the authors' class-removal code): the low phase iterates over full retain
    batches, each paired with the first forget batch of the unshuffled-per-worker forget loader, one step each
    (issue 39: the phase test of training_step survived)."""
    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=1, low_epochs=1,
                  low_pairing="first_forget")
    seen = []
    real = u.duck_loss

    def spy(x_f, idx_f, x_r, y_r):
        seen.append((u.phase, x_f.clone(), idx_f.clone(), len(y_r)))
        return real(x_f, idx_f, x_r, y_r)

    u.duck_loss = spy
    u.unlearn()
    low = [(x, i, n) for phase, x, i, n in seen if phase == "low"]
    fixed_x, _, fixed_idx = u.fixed_forget_batch
    assert len(low) == len(sc.retain_idx) // BASE["batch_size"] and all(n == BASE["batch_size"] for *_, n in low)
    assert all(torch.equal(x, fixed_x) and torch.equal(i, fixed_idx) for x, i, _ in low)
    assert len({tuple(i.tolist()) for _, i, _ in low}) == 1 and u.retain_steps == 1


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_duck_logs_its_three_losses_per_step_and_per_epoch_on_the_progress_bar(synthetic, synthetic_model):
    """The experiment logger's curves: loss, L_fgt and L_ret of the step's last optimiser step, each per step and
    as the epoch's mean weighted by the forget batch's size, all three on the progress bar (issue 39: the keys,
    switches and batch size of log_dict survived)."""
    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=1, low_epochs=1)
    steps: list[tuple[int, tuple[float, float, float]]] = []
    last: list[tuple[float, float, float]] = []
    real_loss, real_step = u.duck_loss, u.training_step

    def spy_loss(x_f, idx_f, x_r, y_r):
        out = real_loss(x_f, idx_f, x_r, y_r)
        last[:] = [tuple(float(t.detach()) for t in out)]
        return out

    def spy_step(batch, batch_idx):
        real_step(batch, batch_idx)
        steps.append((len(batch[0]), last[0]))

    u.duck_loss, u.training_step = spy_loss, spy_step
    u.unlearn()
    logged = {k: float(v) for k, v in u.trainer.logged_metrics.items()}
    names = ("loss", "l_fgt", "l_ret")
    assert set(logged) == {f"{n}_{when}" for n in names for when in ("step", "epoch")}
    assert set(u.trainer.progress_bar_metrics) == set(logged)
    low = steps[-len(u.forget_loader(BASE["batch_size"], seed_offset=1)):]  # the low phase's one epoch
    sizes = np.array([n for n, _ in low], dtype=float)
    assert sizes.min() < sizes.max()  # a ragged last forget batch: the weighting matters
    for k, name in enumerate(names):
        values = np.array([v[k] for _, v in low])
        assert logged[f"{name}_step"] == pytest.approx(values[-1], rel=1e-5)
        assert logged[f"{name}_epoch"] == pytest.approx(float((values * sizes).sum() / sizes.sum()), rel=1e-5)


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_first_forget_pairing_gives_each_ddp_worker_its_share_of_the_forget_batch(synthetic, synthetic_model,
                                                                                   monkeypatch):
    """Under DDP (world > 1) worker ``rank`` uses rows rank, rank + world, ... of the one forget batch (with two
    workers and more); one process uses the whole batch. Replayed on one process with the world size and rank
    patched (issue 39: the DDP branch of training_step survived; tests/test_ddp.py runs it for real)."""
    from duck.unlearn.duck import DUCK

    sc = class_removal(synthetic)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=1, low_epochs=1,
                  low_pairing="first_forget")
    u.unlearn()
    fixed_x, _, fixed_idx = u.fixed_forget_batch
    batch = next(iter(u.retain_loader(BASE["batch_size"], drop_last=True)))
    monkeypatch.setattr(u, "log_dict", lambda *args, **kwargs: None)  # no loop to log into after the fit
    for world, rank in ((1, 0), (2, 1), (3, 2)):
        seen = []
        u.duck_loss = lambda x_f, idx_f, x_r, y_r: (seen.append((x_f, idx_f)),
                                                    (torch.zeros((), requires_grad=True),) * 3)[1]
        monkeypatch.setattr(u, "world", world)
        monkeypatch.setattr(DUCK, "global_rank", property(lambda self, r=rank: r))
        u.phase = "low"
        u.training_step(batch, 0)
        x_f, idx_f = seen[0]
        assert torch.equal(x_f, fixed_x[rank::world]) and torch.equal(idx_f, fixed_idx[rank::world]), (world, rank)


def test_centroids_cap_members_by_a_seeded_draw_and_cosine_distance_holds_at_small_norms():
    """class_centroids with ``max_per_class``: each centroid is the mean of the first ``max_per_class`` of a
    seeded permutation of its class's members (replayed by hand); cosine distance is 1 − cos also for vectors far
    shorter than 1 (issue 39: the capped draw and the eps survived)."""
    from duck.unlearn.duck import class_centroids, cosine_distance

    g = torch.Generator().manual_seed(0)
    z = torch.randn(30, 4, generator=g)
    y = torch.tensor([0] * 12 + [1] * 10 + [2] * 8)
    cents, ids = class_centroids(z, y, 3, torch.Generator().manual_seed(5))
    replay = torch.Generator().manual_seed(5)
    for row, c in enumerate(ids.tolist()):
        members = (y == c).nonzero().flatten()
        pick = members[torch.randperm(len(members), generator=replay)[:3]]
        torch.testing.assert_close(cents[row], z[pick].mean(0))
    full, _ = class_centroids(z, y)
    assert not torch.allclose(cents, full)
    a, b = torch.tensor([[0.03, 0.04]]), torch.tensor([[0.004, 0.003]])
    # cos = (0.03 · 0.004 + 0.04 · 0.003) / (0.05 · 0.005) = 0.96
    torch.testing.assert_close(cosine_distance(a, b), torch.tensor([0.04]))


@pytest.mark.filterwarnings("ignore:You are trying to `self.log")
def test_run_wiring_centroid_cap_low_scale_pairing_record_and_weight_decay(synthetic, synthetic_model, monkeypatch):
    """DUCK's run (issue 39: survivors of duck.py's run): the centroid cap and a generator seeded by the job reach
    class_centroids; homogeneous removal scales λ1 by low_lambda_scale_hr in the low phase; the ratio pairing's low
    phase reads the forget set with seed offset 1; Adam carries the configured weight decay; the record names the
    forget accuracy after the high phase; an unknown pairing is refused naming it."""
    import duck.unlearn.duck as duck_module

    asked = []
    real = duck_module.class_centroids

    def spy(z, y, cap=None, generator=None):
        asked.append((cap, generator))
        return real(z, y, cap, generator)

    monkeypatch.setattr(duck_module, "class_centroids", spy)
    sc = build_scenario("homogeneous_removal", synthetic.train.labels, synthetic.test.labels, 4, fraction=0.1, seed=0)
    u = make_duck(synthetic, synthetic_model, sc, tolerance=-1.0, max_epochs=1, low_epochs=1, max_per_class=7)
    low_orders, real_step = [], u.training_step

    def step(batch, batch_idx):
        if u.phase == "low":
            low_orders.append(batch[2].clone())
        return real_step(batch, batch_idx)

    u.training_step = step
    result = u.unlearn()
    cap, gen = asked[0]
    assert cap == 7 and isinstance(gen, torch.Generator) and gen.initial_seed() == 0
    assert u.lambda_fgt == pytest.approx(BASE["lambda_fgt"] * BASE["low_lambda_scale_hr"])
    expected = torch.cat([b[2] for b in u.forget_loader(BASE["batch_size"], seed_offset=1)])
    assert torch.equal(torch.cat(low_orders), expected)
    assert u.trainer.optimizers[0].defaults["weight_decay"] == BASE["weight_decay"]
    assert result.info["forget_acc_after_high"] == u.history[-1]["forget_acc"]
    with pytest.raises(DuckInputError) as e:  # its settings refuse it when the method is made
        make_duck(synthetic, synthetic_model, sc, low_pairing="zigzag")
    assert str(e.value) == "method.low_pairing='zigzag'; choose one of ['ratio', 'first_forget']"
    with pytest.raises(dataclasses.FrozenInstanceError):  # and nothing changes them afterwards
        u.hp.low_pairing = "zigzag"  # type: ignore[misc]
