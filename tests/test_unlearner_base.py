"""The Unlearner base class and the stopping rule (duck/unlearn/base.py) without training: what a DDP worker is
sent and sends back, the forget-accuracy rule's checks on a stand-in trainer (when it measures, what it records,
when it stops), the trainer settings a manual-optimisation method refuses, the setting named when a method
diverges, the device it runs on, and the result of ``unlearn`` (issue 39: these paths were reached only by the
DDP tests, which are too slow to run once per mutant)."""

from __future__ import annotations

import copy
import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from refusals import refused

from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.metrics import split_accuracies
from duck.unlearn import UnlearnData, create_unlearner, get_unlearner_class
from duck.unlearn.base import ForgetAccuracyStop, ReferenceModels, Unlearner


def _data(synthetic, model, kind="class_removal"):
    extra = {"forget_classes": [1]} if kind == "class_removal" else {"fraction": 0.1, "seed": 0}
    sc = build_scenario(kind, synthetic.train.labels, synthetic.test.labels, 4, **extra)
    return UnlearnData(synthetic.train, sc, 4, "synthetic", split_accuracies(model, synthetic, sc))


def _finetune(synthetic, synthetic_model, **hp):
    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)
    return create_unlearner("finetune", model, data, {"lr": 0.1, "batch_size": 32, "epochs": 1, **hp}, seed=0)


# --- what a DDP worker receives -----------------------------------------------------------------------------------


def test_a_worker_gets_the_data_without_the_model_factory_the_references_or_a_live_iterator(synthetic,
                                                                                              synthetic_model):
    """The model factory is a closure and the reference banks hold models: neither is sent to a DDP worker,
    nor the parent's retain iterator; the rest of the data is the parent's (kills ``__getstate__`` 4-15)."""
    u = _finetune(synthetic, synthetic_model)
    u.data.model_factory = lambda: (lambda: None)  # a closure: not picklable
    u.data.references = ReferenceModels(oracle=object())
    u._retain_iter = iter([1, 2, 3])
    state = u.__getstate__()
    assert state["_retain_iter"] is None
    assert state["data"].model_factory is None and state["data"].references is None
    assert state["data"].train is u.data.train and state["data"].scenario is u.data.scenario
    assert u.data.model_factory is not None and u.data.references is not None  # the parent keeps its own
    for factory, refs in ((lambda: None, None), (None, ReferenceModels(oracle=object()))):  # either one alone
        u.data.model_factory, u.data.references = factory, refs
        dropped = u.__getstate__()["data"]
        assert dropped.model_factory is None and dropped.references is None
    u.data.model_factory = u.data.references = None
    assert u.__getstate__()["data"] is u.data  # nothing to drop: the same object
    clone = pickle.loads(pickle.dumps(u))
    assert clone._retain_iter is None and clone.data.retain_idx.tolist() == u.data.retain_idx.tolist()


def test_the_workers_state_comes_back_into_the_phase_and_its_stopping_rules(synthetic, synthetic_model):
    """Worker 0's history, epochs and steps, and each stopping rule's outcome, in the order the rules were
    given; a count of rules that differs is an error, not a silent partial restore."""
    u = _finetune(synthetic, synthetic_model)
    u.phase = "high"
    rules = [ForgetAccuracyStop(u, 0.01), ForgetAccuracyStop(u, 0.5, every="batch")]
    state = {"history": [{"phase": "high", "epoch": 1.0, "forget_acc": 0.2}],
             "stops": [{"reached": 1, "epochs_done": 2}, {"reached": 0, "epochs_done": 3.5}],
             "log": {"epochs": 3, "steps": 12}}
    u._restore_worker_state(state, [object(), *rules])  # other callbacks are skipped
    assert u.history == state["history"] and u.history is not state["history"]
    assert u.phase_log == {"high": {"epochs": 3, "steps": 12}}
    assert [(r.reached, r.epochs_done) for r in rules] == [(True, 2.0), (False, 3.5)]
    assert all(type(r.reached) is bool and type(r.epochs_done) is float for r in rules)
    with pytest.raises(ValueError):
        u._restore_worker_state({**state, "stops": state["stops"][:1]}, rules)


def test_worker_0_sends_its_phase_state_back(synthetic, synthetic_model):
    """``on_train_end`` in worker 0 of a data-parallel run: the history, each stopping rule's outcome and the
    epochs and steps go into the trainer's metrics; other workers and one-process runs send nothing."""
    u = _finetune(synthetic, synthetic_model)
    rule = ForgetAccuracyStop(u, 0.01)
    rule.reached, rule.epochs_done = True, 1.5
    u.history = [{"phase": "p", "epoch": 1.5, "forget_acc": 0.0}]
    for world, rank, sent in ((2, 0, True), (2, 1, False), (1, 0, False)):
        trainer = SimpleNamespace(global_rank=rank, callbacks=[object(), rule], callback_metrics={},
                                  current_epoch=2, global_step=9)
        u.world = world
        u._trainer = trainer  # what Lightning's ``trainer`` property reads
        u.on_train_end()
        got = trainer.callback_metrics.get("_unlearner_worker_state")
        if sent:
            assert got == {"history": u.history, "stops": [{"reached": True, "epochs_done": 1.5}],
                           "log": {"epochs": 2, "steps": 9}}
        else:
            assert got is None


# --- the stopping rule ----------------------------------------------------------------------------------------


class _Strategy:
    def broadcast(self, value, src=0):
        assert src == 0  # rank 0's measurement decides for every worker
        return value


def _trainer(epoch=0, batches=4):
    return SimpleNamespace(strategy=_Strategy(), should_stop=False, current_epoch=epoch, num_training_batches=batches)


def _measured(accuracies):
    """A stand-in unlearner whose forget accuracy follows ``accuracies``, one value per measurement."""
    values = iter(accuracies)
    return SimpleNamespace(forget_accuracy=lambda: next(values), history=[], phase="high")


def test_the_rule_checks_every_epoch_and_stops_at_the_target():
    u = _measured([0.30, 0.011, 0.01])
    rule = ForgetAccuracyStop(u, target=0.01)
    for epoch in range(3):
        trainer = _trainer(epoch)
        rule.on_train_batch_end(trainer, None, None, None, 0)  # epoch rule: batches are not checked
        rule.on_train_epoch_end(trainer, None)
        if trainer.should_stop:
            break
    assert [h["forget_acc"] for h in u.history] == [0.30, 0.011, 0.01]  # 0.011 > 0.01: not yet; A_f <= target
    assert [h["epoch"] for h in u.history] == [1.0, 2.0, 3.0] and {h["phase"] for h in u.history} == {"high"}
    assert rule.reached and rule.epochs_done == 3.0 and trainer.should_stop


def test_an_epoch_that_misses_the_target_still_counts_as_done():
    rule = ForgetAccuracyStop(_measured([0.5, 0.4]), target=0.1)
    for epoch in range(2):
        trainer = _trainer(epoch)
        rule.on_train_epoch_end(trainer, None)
        assert not trainer.should_stop and rule.epochs_done == float(epoch + 1)
    assert not rule.reached


def test_the_batch_rule_measures_after_each_batch_at_its_share_of_the_epoch():
    """``every="batch"``: after batch i of n in epoch e the rule records epoch e + (i + 1) / n (rounded to 4
    places) and stops there; the epoch's end does not measure again."""
    u = _measured([0.9, 0.6, 0.0])
    rule = ForgetAccuracyStop(u, target=0.01, every="batch")
    trainer = _trainer(epoch=1, batches=3)
    for i in range(3):
        rule.on_train_batch_end(trainer, None, None, None, i)
    assert [h["epoch"] for h in u.history] == [1.3333, 1.6667, 2.0]
    assert rule.reached and rule.epochs_done == pytest.approx(2.0) and trainer.should_stop
    rule.on_train_epoch_end(trainer, None)
    rule.on_train_batch_end(trainer, None, None, None, 0)
    assert len(u.history) == 3 and rule.epochs_done == pytest.approx(2.0)  # reached: nothing more


def test_a_loader_without_a_known_length_counts_as_one_batch_per_epoch():
    u = _measured([0.5])
    rule = ForgetAccuracyStop(u, target=0.01, every="batch")
    rule.on_train_batch_end(_trainer(epoch=0, batches=0), None, None, None, 0)
    assert u.history[0]["epoch"] == 1.0


def test_the_rule_waits_for_min_epochs_then_measures():
    """``after_epochs=2`` (NegGrad+ / SalUn ``min_epochs``): no measurement before epoch 2 ends, even by a batch
    rule at 1.999..., then the usual rule."""
    u = _measured([0.0, 0.0])
    rule = ForgetAccuracyStop(u, target=0.01, after_epochs=2)
    rule.on_train_epoch_end(_trainer(0), None)
    assert u.history == [] and not rule.reached and rule.epochs_done == 1.0
    rule.on_train_epoch_end(_trainer(1), None)
    assert rule.reached and rule.epochs_done == 2.0 and len(u.history) == 1
    early = ForgetAccuracyStop(_measured([0.0, 0.0]), target=0.01, every="batch", after_epochs=2)
    trainer = _trainer(epoch=1, batches=1000)
    early.on_train_batch_end(trainer, None, None, None, 998)  # 1.999
    assert not early.reached and early.unlearner.history == []
    early.on_train_batch_end(trainer, None, None, None, 999)  # 2.0
    assert early.reached and early.epochs_done == 2.0


def test_the_rule_defaults_and_refusal():
    rule = ForgetAccuracyStop(_measured([]), target=np.float32(0.25))
    assert (rule.every, rule.after_epochs, rule.reached, rule.epochs_done) == ("epoch", 0, False, 0.0)
    assert type(rule.target) is float and type(rule.after_epochs) is int
    with refused("stop_check='epochs': use 'epoch' or 'batch'"):
        ForgetAccuracyStop(_measured([]), target=0.1, every="epochs")


# --- settings, devices, the result --------------------------------------------------------------------------------


def test_a_manual_optimisation_method_refuses_clipping_and_accumulation():
    duck = get_unlearner_class("duck")
    assert duck.manual_optimization
    for key, value in (("gradient_clip_val", 1.0), ("accumulate_grad_batches", 2)):
        with refused(f"trainer.{key}={value!r} cannot be used with method 'duck': it steps its optimiser itself "
                     "(manual optimisation), which Lightning does not clip or accumulate; remove "
                     f"trainer.{key}"):
            duck.check_trainer_cfg({key: value})
    for neutral in ({"gradient_clip_val": None}, {"gradient_clip_val": 0}, {"gradient_clip_val": 0.0},
                    {"accumulate_grad_batches": 1}, {"accumulate_grad_batches": None}, {}, None):
        duck.check_trainer_cfg(neutral)
    get_unlearner_class("finetune").check_trainer_cfg({"gradient_clip_val": 1.0, "accumulate_grad_batches": 4})


def test_the_divergence_error_names_the_learning_rates_the_method_has(synthetic, synthetic_model):
    u = _finetune(synthetic, synthetic_model, lr=0.05)
    assert u.divergence_setting() == "method.lr=0.05"
    u.hp = {"lr": 0.1, "low_lr": 2e-4, "erm_lr": None}
    assert u.divergence_setting() == "method.lr=0.1 / method.low_lr=0.0002"
    u.hp = {"erm_lr": 0.5, "lr": None}
    assert u.divergence_setting() == "method.erm_lr=0.5"
    u.hp = {"other": 1}
    assert u.divergence_setting() == "the method's learning rate"


def test_the_device_follows_the_accelerator(synthetic, synthetic_model):
    u = _finetune(synthetic, synthetic_model)
    cuda = torch.cuda.is_available()
    for acc, want in (("cpu", "cpu"), ("gpu", "cuda" if cuda else "cpu"), ("cuda", "cuda" if cuda else "cpu"),
                      ("auto", "cuda" if cuda else "cpu"), ("mps", "cpu")):
        u.trainer_cfg = {"accelerator": acc}
        assert u.trainer_device().type == want
    u.trainer_cfg = {}
    assert u.trainer_device().type == ("cuda" if cuda else "cpu")  # no accelerator: auto


def test_the_batch_that_splits_over_workers_is_the_methods_batch_size(synthetic, synthetic_model):
    u = _finetune(synthetic, synthetic_model, batch_size=48)
    assert u.parallel_batch_size() == 48
    u.hp = {"lr": 0.1}
    assert u.parallel_batch_size() is None


class _Scripted(Unlearner):
    """A method whose run returns a fixed record (no training)."""

    method_name = "scripted"

    def run(self):
        self.phase_log["only"] = {"epochs": 2, "steps": 5}
        return {"epochs": 2, "reached_target": True, "note": "x"}


def test_unlearn_times_the_run_and_moves_its_record_into_the_result(synthetic, synthetic_model):
    model = copy.deepcopy(synthetic_model)
    u = _Scripted(model, _data(synthetic, model), {}, seed=3)
    result = u.unlearn()
    assert (result.epochs, result.reached_target) == (2.0, True) and type(result.epochs) is float
    assert result.info == {"note": "x", "phases": {"only": {"epochs": 2, "steps": 5}}}  # no one_off_s: needs none
    assert result.model is model and not model.training and result.time_s >= 0
    assert result.history is u.history
    assert Unlearner.prepare(u) == 0.0
    with pytest.raises(NotImplementedError):
        Unlearner.run(u)


# --- the loaders and the retain stream ------------------------------------------------------------------------------


def _order(loader):
    return [int(i) for _, _, ids in loader for i in ids]


def _batches(loader):
    return [len(ids) for _, _, ids in loader]


def test_the_retain_loader_shuffles_with_the_job_seed_and_keeps_the_last_batch(synthetic, synthetic_model):
    """Defaults: shuffled by a generator seeded with the job's seed (+ 0), every retain sample once, the last
    partial batch kept (kills ``retain_loader`` 2, 3: another default offset, ``drop_last``); ``drop_last=True``
    drops it only when there is more than one batch (kills 18: ``or``)."""
    from duck.data.loaders import make_loader

    u = _finetune(synthetic, synthetic_model)
    n = len(u.data.retain_idx)
    assert n % 32 != 0
    want = _order(make_loader(u.data.train, 32, shuffle=True, seed=u.seed, indices=u.data.retain_idx))
    assert _order(u.retain_loader(32)) == want and sorted(want) == sorted(u.data.retain_idx.tolist())
    assert _order(u.retain_loader(32, seed_offset=5)) == _order(
        make_loader(u.data.train, 32, shuffle=True, seed=u.seed + 5, indices=u.data.retain_idx))
    assert _batches(u.retain_loader(32, drop_last=True)) == [32] * (n // 32)
    assert sum(_batches(u.retain_loader(n + 10, drop_last=True))) == n  # one batch: nothing dropped
    assert _order(u.retain_loader(32, shuffle=False)) == u.data.retain_idx.tolist()


def test_the_forget_loader_has_its_own_seed_and_splits_batches_per_worker(synthetic, synthetic_model):
    """Forget batches shuffled with seed + 7919 + offset (kills ``forget_loader`` 1, 6, 11, 12, 18); under DDP
    each of the workers takes batch / world of a batch unless ``per_worker=False`` (kills 3, 15-17)."""
    from duck.data.loaders import make_loader

    u = _finetune(synthetic, synthetic_model)
    forget = u.data.forget_idx
    for offset in (0, 5):
        want = _order(make_loader(u.data.train, 8, shuffle=True, seed=u.seed + 7919 + offset, indices=forget))
        assert _order(u.forget_loader(8, seed_offset=offset)) == want
    assert _order(u.forget_loader(8)) != _order(u.forget_loader(8, seed_offset=5))
    assert _order(u.forget_loader(8, shuffle=False)) == forget.tolist()
    u.world = 2
    assert _batches(u.forget_loader(8, shuffle=False))[0] == 4  # per worker by default
    assert _batches(u.forget_loader(8, shuffle=False, per_worker=False))[0] == 8
    assert _batches(u.retain_loader(8, shuffle=False))[0] == 4


def test_the_retain_stream_is_the_workers_own_endless_reshuffled_loader(synthetic, synthetic_model):
    """``next_retain_batch`` before ``start_retain_stream`` is a usage error, said in full (kills
    ``next_retain_batch`` 4-6); one process draws retain batches with seed offset 104729 and drops the partial
    batch, cycling on; DDP worker r with 104729 + 7727 r (kills 8-11, 21, 24)."""
    from duck.data.loaders import make_loader

    u = _finetune(synthetic, synthetic_model)
    with pytest.raises(RuntimeError) as e:
        u.next_retain_batch()
    assert str(e.value) == "call start_retain_stream() before next_retain_batch()"
    n_batches = len(u.data.retain_idx) // 16

    def stream_ids(offset, count):
        loader = make_loader(u.data.train, 16 // u.world, shuffle=True, seed=u.seed + offset,
                             indices=u.data.retain_idx, drop_last=True)
        out = []
        while len(out) < count:
            out += [ids.tolist() for _, _, ids in loader]
        return out[:count]

    u.start_retain_stream(16)
    got = [u.next_retain_batch()[2].tolist() for _ in range(n_batches + 2)]  # past one pass: a new shuffle
    assert got == stream_ids(104729, n_batches + 2) and got[n_batches] != got[0]
    assert all(len(b) == 16 for b in got)
    u.world = 2
    u._trainer = SimpleNamespace(global_rank=1)
    u.start_retain_stream(16)
    assert [u.next_retain_batch()[2].tolist() for _ in range(3)] == stream_ids(104729 + 7727, 3)


def test_a_phase_runs_with_the_jobs_trainer_settings_and_a_named_divergence_guard(synthetic, synthetic_model):
    """``fit_phase``: the job's ``trainer.*`` settings reach the phase's trainer (two batches an epoch here: kills
    ``fit_phase`` 8, 13), no progress bar unless asked (15), a non-finite guard naming the method and the
    learning rate to lower (3, 4), the phase's own trainer overrides (23), and the phase's epochs and steps logged."""
    from duck.training import NonFiniteGuard

    u = _finetune(synthetic, synthetic_model, lr=0.02)
    u.trainer_cfg = {**u.trainer_cfg, "limit_train_batches": 2}
    trainer = u.fit_phase("only", u.retain_loader(16), 2)
    assert u.phase == "only" and u.phase_log == {"only": {"epochs": 2, "steps": 4}}
    assert trainer.progress_bar_callback is None
    guards = [cb for cb in trainer.callbacks if isinstance(cb, NonFiniteGuard)]
    assert [(g.what, g.setting) for g in guards] == [("unlearning with finetune", "method.lr=0.02")]
    u.trainer_cfg = {k: v for k, v in u.trainer_cfg.items() if k != "limit_train_batches"}
    u.fit_phase("short", u.retain_loader(16), 2, limit_train_batches=1)  # the phase's own overrides (kills 23)
    assert u.phase_log["short"] == {"epochs": 2, "steps": 2}


def test_augmentation_applies_the_datas_names_and_nothing_without_them(synthetic, synthetic_model):
    """``augment``: the data's augmentations on a batch (a flip, drawn from torch's stream: the same draw as
    ``apply_augment`` with the same seed), the batch itself when there are none (kills ``augment`` 1-6)."""
    from duck.data.augment import apply_augment

    u = _finetune(synthetic, synthetic_model)
    x = torch.arange(2 * 8 * 8, dtype=torch.float32).reshape(2, 1, 8, 8).repeat(4, 1, 1, 1)
    assert u.augment(x) is x
    u.data.augment = ("flip",)
    torch.manual_seed(3)
    want = apply_augment(x, ["flip"])
    torch.manual_seed(3)
    got = u.augment(x)
    assert torch.equal(got, want) and not torch.equal(got, x)


def test_the_stopping_target_defaults_to_one_percent_for_class_removal(synthetic, synthetic_model):
    """Class removal: ``A_f <= 0 + tolerance`` with tolerance 0.01 by default (kills ``forget_target`` 1);
    homogeneous removal: the original's test accuracy, whatever the tolerance."""
    u = _finetune(synthetic, synthetic_model)
    assert u.forget_target() == 0.01 and u.forget_target(0.2) == 0.2
    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model, "homogeneous_removal")
    h = create_unlearner("finetune", model, data, {"lr": 0.1, "batch_size": 32, "epochs": 1}, seed=0)
    assert h.forget_target() == h.forget_target(0.3) == data.original_acc["test"]


def test_a_data_parallel_phase_takes_worker_0s_state_from_the_trainer(synthetic, synthetic_model, monkeypatch):
    """Under DDP (world 2) the phase trains through ``fit`` with the world size, then takes the history, epochs,
    steps and each stopping rule's outcome that worker 0 left in the trainer's metrics, removing them from there
    (kills ``fit_phase`` 33, 35-40); the trainer itself is a stand-in here (DDP runs in tests/test_ddp.py)."""
    import duck.unlearn.base as base

    u = _finetune(synthetic, synthetic_model)
    u.world = 2
    rule = ForgetAccuracyStop(u, 0.01)
    sent = {"history": [{"phase": "ddp", "epoch": 1.0, "forget_acc": 0.0}],
            "stops": [{"reached": True, "epochs_done": 1.0}], "log": {"epochs": 1, "steps": 3}}
    calls = []

    def fake_fit(trainer, module, loader, world=1):
        calls.append((module, world))
        trainer.callback_metrics[base.WORKER_STATE] = sent

    monkeypatch.setattr(base, "build_trainer", lambda cfg, **kw: SimpleNamespace(callback_metrics={}, kw=kw))
    monkeypatch.setattr(base, "fit", fake_fit)
    trainer = u.fit_phase("ddp", u.retain_loader(16), 1, callbacks=[rule])
    assert calls == [(u, 2)]
    assert base.WORKER_STATE not in trainer.callback_metrics
    assert u.history == sent["history"] and u.phase_log == {"ddp": {"epochs": 1, "steps": 3}}
    assert (rule.reached, rule.epochs_done) == (True, 1.0)


def test_a_batch_rule_does_not_measure_again_at_the_epochs_end():
    """``every="batch"`` that has not reached its target: the epoch's end only records the epochs done, it does
    not measure A_f a second time (kills ``on_train_epoch_end`` 1: ``or``)."""
    u = _measured([0.9, 0.8])
    rule = ForgetAccuracyStop(u, target=0.01, every="batch")
    trainer = _trainer(epoch=0, batches=2)
    for i in range(2):
        rule.on_train_batch_end(trainer, None, None, None, i)
    rule.on_train_epoch_end(trainer, None)
    assert [h["epoch"] for h in u.history] == [0.5, 1.0] and not rule.reached and rule.epochs_done == 1.0


class _Seeded(Unlearner):
    """Records what the run sees: the random streams, the worker-seeding flag; ``needs`` set per test."""

    method_name = "seeded"

    def prepare(self):
        torch.rand(5), np.random.rand(5)
        return 2

    def run(self):
        import os
        import time

        self.seen = (torch.rand(3).tolist(), np.random.rand(3).tolist(), os.environ.get("PL_SEED_WORKERS"))
        time.sleep(0.05)
        return {}


def _seeded_streams(seed):
    import lightning as L

    L.seed_everything(seed, verbose=False)
    return torch.rand(3).tolist(), np.random.rand(3).tolist()


@pytest.mark.parametrize("needs", [(), ("oracle",)])
def test_unlearn_seeds_the_run_after_the_reference_models(synthetic, synthetic_model, caplog, monkeypatch, needs):
    """The run draws from the streams of the job's seed, with DataLoader workers seeded too and nothing logged
    about it (kills ``unlearn`` 1, 3-8); a method with reference models prepares them first (their draws come
    first), is reseeded, so the run sees the same streams, and reports their cost as a float ``one_off_s`` (kills
    12-20, 45-48); a run that returns no epochs or target gets 0.0 and None (kills 63, 65, 68, 71); the time
    is the run's wall time, not a sum of clock readings (kills 31)."""
    import logging
    import time

    monkeypatch.delenv("PL_SEED_WORKERS", raising=False)
    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)
    if needs:
        data.references = ReferenceModels(oracle=lambda seed, pool: None)
    monkeypatch.setattr(_Seeded, "needs", needs)
    u = _Seeded(model, data, {}, seed=11)
    seed_log = logging.getLogger("lightning.fabric.utilities.seed")  # lightning's loggers do not propagate
    seed_log.addHandler(caplog.handler)
    caplog.set_level(logging.INFO, logger=seed_log.name)
    try:
        t0 = time.perf_counter()
        result = u.unlearn()
        wall = time.perf_counter() - t0
    finally:
        seed_log.removeHandler(caplog.handler)
    torch_draws, numpy_draws, workers = u.seen
    assert (torch_draws, numpy_draws) == _seeded_streams(11) and workers == "1"
    assert not [r for r in caplog.records if "Seed set to" in r.getMessage()]
    assert 0.05 <= result.time_s <= wall
    assert (result.epochs, result.reached_target) == (0.0, None)
    if needs:
        assert result.info["one_off_s"] == 2.0 and type(result.info["one_off_s"]) is float
    else:
        assert "one_off_s" not in result.info


class _Diverging(Unlearner):
    method_name = "diverging"

    def run(self):
        with torch.no_grad():
            next(self.model.parameters()).fill_(float("nan"))
        return {}


def test_a_run_that_leaves_nan_weights_is_refused_naming_the_method(synthetic, synthetic_model):
    """``unlearn`` checks the weights after the run: NaN weights are a DuckInputError naming the method and the
    setting to lower (kills ``unlearn`` 33, 34)."""
    model = copy.deepcopy(synthetic_model)
    u = _Diverging(model, _data(synthetic, model), {}, seed=0)
    name, p = next(model.named_parameters())
    with refused(f"unlearning with diverging diverged: {name} holds {p.numel()} NaN/inf values; nothing was "
                 "written. Lower the method's learning rate (or check the data for NaN/inf values)"):
        u.unlearn()


def test_the_device_follows_the_accelerator_when_cuda_is_there(synthetic, synthetic_model, monkeypatch):
    """With CUDA reported available (patched: this machine has none): gpu, cuda, auto and no setting run on
    CUDA, cpu and any other accelerator on the CPU; without CUDA everything runs on the CPU (kills
    ``trainer_device`` 1-26, which the CPU alone cannot tell apart)."""
    u = _finetune(synthetic, synthetic_model)
    for available, cuda_for in ((True, {"gpu", "cuda", "auto", None}), (False, set())):
        monkeypatch.setattr(torch.cuda, "is_available", lambda available=available: available)
        for acc in ("cpu", "gpu", "cuda", "auto", "mps", None):
            u.trainer_cfg = {} if acc is None else {"accelerator": acc}
            assert u.trainer_device() == torch.device("cuda" if acc in cuda_for else "cpu"), (available, acc)


# --- check_unlearn_inputs: each refusal in full ----------------------------------------------------------------


def test_each_input_refusal_names_the_value_in_full(synthetic, synthetic_model):
    """The refusals of ``check_unlearn_inputs`` word for word, each naming what was given (kills
    ``check_unlearn_inputs`` 2, 3, 6, 9, 10, 15, 21, 27, 28, 34, 37-39, 52, 53); the largest job seed is
    accepted (kills 23: ``>=``)."""
    from duck.unlearn.base import check_unlearn_inputs
    from duck.utils import JOB_SEED_MAX

    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)
    ok = dict(model=model, data=data, cfg=None, trainer_cfg=None, seed=0)
    check_unlearn_inputs(**{**ok, "seed": JOB_SEED_MAX})
    with refused("model must be a duck.models.Classifier (build it with duck.models.create_model), got Linear"):
        check_unlearn_inputs(**{**ok, "model": torch.nn.Linear(2, 2)})
    with refused("data must be a duck.unlearn.UnlearnData, got dict"):
        check_unlearn_inputs(**{**ok, "data": {}})
    with refused("trainer_cfg must be a mapping of settings (or None), got list"):
        check_unlearn_inputs(**{**ok, "trainer_cfg": []})
    with refused("cfg must be a mapping of settings (or None), got str"):
        check_unlearn_inputs(**{**ok, "cfg": "lr=0.1"})
    with pytest.raises(DuckInputError, match=r"^seed=-1 "):
        check_unlearn_inputs(**{**ok, "seed": -1})
    with refused("the model has 4 classes but data.num_classes=5; pass the data set's class count and a model built "
                 "for it"):
        check_unlearn_inputs(**{**ok, "data": _with(data, num_classes=5)})
    frozen = copy.deepcopy(model).requires_grad_(False)
    with refused("every model parameter has requires_grad=False: nothing can be unlearned; unfreeze them "
                 "(model.requires_grad_(True))"):
        check_unlearn_inputs(**{**ok, "model": frozen})
    mixed = copy.deepcopy(model)
    params = list(mixed.parameters())
    params[0].data = params[0].data.double()
    params[1].data = params[1].data.half()
    with refused("the model's parameters are float16, float64; the data and the methods use float32 (mixed "
                 "precision comes from trainer.precision): convert it with model.float()"):
        check_unlearn_inputs(**{**ok, "model": mixed})


def _with(data, **changes):
    import dataclasses

    return dataclasses.replace(data, **changes)


def test_construction_defaults_and_refusals(synthetic, synthetic_model):
    """Seed 0 and no progress bar by default (kills ``__init__`` 1, 2); the trainer settings are checked as a
    mapping and for what manual optimisation refuses (6, 13); a scenario a method does not support is refused
    with the reason for that scenario (15-19)."""
    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)
    u = _Scripted(model, data)
    assert (u.seed, u.progress) == (0, False)
    with refused("trainer_cfg must be a mapping of settings (or None), got list"):
        _Scripted(model, data, {}, trainer_cfg=[])
    with refused("trainer.gradient_clip_val=1.0 cannot be used with method 'duck': it steps its optimiser itself "
                 "(manual optimisation), which Lightning does not clip or accumulate; remove trainer.gradient_clip_val"):
        create_unlearner("duck", model, data, {}, seed=0, trainer_cfg={"gradient_clip_val": 1.0})
    ids = np.flatnonzero(np.asarray(synthetic.train.labels) == 1)[:5]
    sc = build_scenario("targeted", synthetic.train.labels, synthetic.test.labels, 4, forget_ids=ids.tolist(),
                        target_class=0)
    targeted = UnlearnData(synthetic.train, sc, 4, "synthetic", data.original_acc)
    with refused("method 'scripted' does not support scenario 'targeted' (it supports class_removal, "
                 "homogeneous_removal, custom); scenario.target_class is used only by DUCK's target centroids; run "
                 "the same forget ids with scenario=custom"):
        _Scripted(model, targeted)

    class ClassOnly(_Scripted):
        supported_scenarios = ("class_removal",)

    homog = _data(synthetic, model, "homogeneous_removal")
    with refused("method 'scripted' does not support scenario 'homogeneous_removal' (it supports class_removal); "
                 "the DUCK paper excludes it there too"):
        ClassOnly(model, homog)


def _split(data, forget, retain):
    """``data`` with its scenario's forget / retain ids replaced (no other check on the way)."""
    sc = _with(data.scenario, forget_idx=np.asarray(forget), retain_idx=np.asarray(retain))
    return _with(data, scenario=sc)


class _NoLabels(torch.utils.data.Dataset):
    """A training set that does not expose ``labels`` (a user's own dataset)."""

    def __init__(self, base):
        self.base = base

    def __len__(self):
        return len(self.base)

    def __getitem__(self, i):
        return self.base[i]


def test_each_split_augmentation_and_accuracy_refusal_in_full(synthetic, synthetic_model):
    """The forget/retain split must be non-empty on both sides (one sample on a side is enough), be every
    training index exactly once (an id of -1, one of n, a repeat: each alone is refused; n - 1 is the last
    index), and, for class removal, be the forget classes' samples (a foreign sample in the forget set, or a
    forget-class sample left in the retain set: each alone is refused); a training set without ``labels`` skips
    that last check; ``original_acc`` needs ``test`` for homogeneous removal; the augmentation names are checked
    as ``UnlearnData.augment``. Each message in full. (kills ``check_unlearn_inputs`` 56-61, 66, 68, 70-73, 76,
    77, 82, 86-89, 95, 102, 108, 109, 113, 114, 127, 128)"""
    from duck.unlearn.base import check_unlearn_inputs

    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)
    ok = dict(model=model, cfg=None, trainer_cfg=None, seed=0)
    forget, retain = data.scenario.forget_idx, data.scenario.retain_idx
    n = len(synthetic.train)
    with pytest.raises(DuckInputError, match=r"^UnlearnData\.augment='flip' must be a list of augmentation names"):
        check_unlearn_inputs(data=_with(data, augment="flip"), **ok)
    for f, r in (([], np.arange(n)), (np.arange(n), [])):
        with refused(f"the scenario has {len(f)} forget and {len(r)} retain samples; both must be non-empty (build it "
                     "with duck.data.scenarios.build_scenario)"):
            check_unlearn_inputs(data=_split(data, f, r), **ok)
    homog = _data(synthetic, model, "homogeneous_removal")
    check_unlearn_inputs(data=_split(homog, [0], np.arange(1, n)), **ok)  # one forget sample
    check_unlearn_inputs(data=_split(homog, np.arange(1, n), [0]), **ok)  # one retain sample
    check_unlearn_inputs(data=_split(homog, np.arange(n - 1), [n - 1]), **ok)  # the last index
    message = (f"the scenario's forget ({forget.size}) and retain ({retain.size}) ids must split the {n} training "
               f"samples (disjoint, together 0..{n - 1}); build the scenario from these training labels")
    for bad in (n, -1, retain[1]):  # one id out of range above, below, or a repeat; the count stays n
        with refused(message):
            check_unlearn_inputs(data=_split(data, forget, [bad, *retain[1:]]), **ok)
    # class removal: the forget ids must be exactly class 1's samples
    labels = np.asarray(synthetic.train.labels)
    other = retain[labels[retain] != 1][0]
    classes = ("the scenario's forget ids are not the samples of classes [1] in data.train; build the scenario "
               "from these training labels")
    with refused(classes):  # a foreign sample among the forget ids, the retain set still free of class 1
        check_unlearn_inputs(data=_split(data, np.sort([*forget, other]), retain[retain != other]), **ok)
    with refused(classes):  # a class-1 sample left in the retain set, the forget ids all of class 1
        check_unlearn_inputs(data=_split(data, forget[1:], np.sort([forget[0], *retain])), **ok)
    unlabelled = _split(_with(data, train=_NoLabels(synthetic.train)), forget[1:], np.sort([forget[0], *retain]))
    check_unlearn_inputs(data=unlabelled, **ok)  # nothing to check the classes against
    no_test = {"test_retain": 0.9}
    with refused(f"original_acc must map split names to the original model's accuracies and hold 'test' (the "
                 f"stopping target of homogeneous_removal), got {no_test!r}; compute it with "
                 "duck.metrics.split_accuracies on data with a test split"):
        check_unlearn_inputs(data=_with(homog, original_acc=no_test), **ok)


def test_construction_references_presets_devices_and_phase(synthetic, synthetic_model, capsys):
    """A method that learns from reference models is refused without them, naming them (kills ``__init__`` 32,
    37, 39-45); the presets are chosen by the data set's name and the scenario's family (50, 51); a batch size
    that does not split over a data-parallel method's DDP processes is refused (64, 66); a single-device
    method says which multi-device settings it drops, ``strategy=auto`` / ``num_nodes=1`` are not dropped
    (79-84, 91, 92), and keeps the others (98); a new module is in phase ``init`` (100-102); its forward is
    its model's (``forward`` 1)."""
    from duck.unlearn.base import ReferenceModels

    model = copy.deepcopy(synthetic_model)
    data = _data(synthetic, model)

    class Needy(_Scripted):
        method_name = "needy"
        needs = ("oracle", "shadows")

    message = ("method 'needy' learns from reference models (oracle, shadows: models retrained without the forget "
               "set / the shadow bank) that only the pipeline supplies: run it with duck-unlearn / duck-run / "
               "duck.unlearn")
    with refused(message):
        Needy(model, data)
    with refused(message.replace("oracle, shadows", "shadows")):
        Needy(model, _with(data, references=ReferenceModels(oracle=lambda seed, pool: None)))
    presets = {"class_removal": {"default": {"lr": 0.5}, "synthetic": {"lr": 0.25}},
               "homogeneous_removal": {"default": {"lr": 0.125}}}
    u = create_unlearner("finetune", model, data, {"lr": None, "batch_size": 32, "epochs": 1, "presets": presets})
    assert u.hp["lr"] == 0.25
    assert u.phase == "init" and u.trainer_cfg == {"devices": 1}
    x = torch.stack([synthetic.train[i][0] for i in range(3)])
    torch.testing.assert_close(u(x), model(x), rtol=0, atol=0)
    with refused("recipe.batch_size=33 does not split over 2 DDP processes: each takes batch_size / 2 samples per "
                 "step (the recipe's batch, as on one device); use a multiple of 2"):
        create_unlearner("duck", model, data, {"batch_size": 33}, trainer_cfg={"devices": 2, "strategy": "ddp"})
    capsys.readouterr()
    kept = create_unlearner("finetune", model, data, {"lr": 0.1, "batch_size": 32, "epochs": 1},
                            trainer_cfg={"strategy": "auto", "num_nodes": 1, "max_epochs": 3})
    assert capsys.readouterr().err == "" and kept.trainer_cfg == {"max_epochs": 3, "devices": 1}
    create_unlearner("finetune", model, data, {"lr": 0.1, "batch_size": 32, "epochs": 1},
                     trainer_cfg={"num_nodes": 2, "devices": 3})
    assert capsys.readouterr().err == (
        "warning: trainer.num_nodes=2, trainer.devices=3 not used: method 'finetune' runs on one device (DUCK runs "
        "data-parallel; duck-train and the oracle use the multi-device settings)\n")


def test_the_result_state_dict_has_the_callers_key_names(synthetic_model):
    """``UnlearnResult.state_dict``: a wrapped model alone gives its network's own keys (no ``net.`` prefix);
    the caller's plain module, or a Classifier the caller passed itself (``classifier`` set), gives its own
    ``state_dict`` (kills ``state_dict`` 1, 2)."""
    from duck.unlearn.base import UnlearnResult

    clf = synthetic_model
    plain = clf.net
    result = lambda model, classifier=None: UnlearnResult(model, 1.0, 1.0, True, classifier=classifier)
    assert list(result(clf).state_dict()) == list(plain.state_dict())
    assert list(result(clf, clf).state_dict()) == list(clf.state_dict()) != list(plain.state_dict())
    assert list(result(plain).state_dict()) == list(plain.state_dict())
    assert list(result(plain, clf).state_dict()) == list(plain.state_dict())


def test_unlearn_seeds_with_the_job_seed_not_lightnings_last_one(synthetic, synthetic_model, monkeypatch):
    """``seed_everything`` without a seed takes ``PL_GLOBAL_SEED`` (the last seed any Lightning call set); the
    run must draw from the job's own seed whatever that variable holds (kills ``unlearn`` 1, 4)."""
    model = copy.deepcopy(synthetic_model)

    class Draw(_Scripted):
        def run(self):
            self.drawn = torch.rand(4)
            return {}

    monkeypatch.setenv("PL_GLOBAL_SEED", "5")
    u = Draw(model, _data(synthetic, model), {}, seed=3)
    u.unlearn()
    torch.testing.assert_close(u.drawn, torch.rand(4, generator=torch.Generator().manual_seed(3)), rtol=0, atol=0)
