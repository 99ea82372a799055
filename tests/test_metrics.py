"""Accuracies per split and AUS (seeds/003 Eq. 6) against the paper's own numbers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from duck.data.scenarios import build_scenario
from duck.metrics import aus, metrics_record, predict_logits, split_accuracies


def test_aus_reproduces_paper_numbers():
    # Table I, CIFAR-10 class removal, original model: A_t = A_or = 88.64, A_f = 88.34 -> AUS 0.531
    assert aus(0.8864, 0.8864, 0.8834, class_removal=True) == pytest.approx(0.531, abs=5e-4)
    # Table II, DUCK homogeneous removal: A_or = 88.54, A_t = 87.81, A_f = 87.28 -> 0.987
    assert aus(0.8854, 0.8781, 0.8728, class_removal=False) == pytest.approx(0.987, abs=5e-4)
    assert aus(0.9, 0.9, 0.0, class_removal=True) == 1.0


def test_split_accuracies_match_a_direct_count(synthetic, synthetic_model):
    sc = build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, 4, forget_classes=[1])
    acc = split_accuracies(synthetic_model, synthetic, sc)
    logits, y, idx = predict_logits(synthetic_model, synthetic.train)
    pred = logits.argmax(1).numpy()
    forget = np.isin(idx.numpy(), sc.forget_idx)
    assert acc["train_forget"] == pytest.approx((pred[forget] == y.numpy()[forget]).mean())
    assert acc["train_retain"] == pytest.approx((pred[~forget] == y.numpy()[~forget]).mean())
    tl, ty, _ = predict_logits(synthetic_model, synthetic.test)
    tp = tl.argmax(1)
    mask = ty == 1
    assert acc["test_forget"] == pytest.approx(float((tp[mask] == ty[mask]).float().mean()))
    assert acc["test"] == pytest.approx(float((tp == ty).float().mean()))
    rec = metrics_record(method="x", data_name="synthetic", model_name="smallcnn", seed=0, acc=acc, original_acc=acc,
                         scenario=sc, time_s=1.0, epochs=1)
    assert rec["n_forget"] == len(sc.forget_idx) and rec["forget_classes"] == [1]
    assert rec["aus"] == pytest.approx(1.0 / (1.0 + acc["test_forget"]), abs=1e-5)
    assert set(rec["acc"]) == {"test", "train_retain", "train_forget", "test_retain", "test_forget"}
    assert isinstance(torch.tensor(rec["aus"]).item(), float)


def test_split_accuracies_without_a_test_split(synthetic, synthetic_model):
    """User data without a test set (DatasetSplits.test is None): training-set splits only, no AUS."""
    import dataclasses

    from duck.errors import DuckInputError
    from duck.metrics import aus_inputs

    data = dataclasses.replace(synthetic, test=None)
    full = split_accuracies(synthetic_model, synthetic, None)
    assert split_accuracies(synthetic_model, data, None) == {"train": full["train"]}
    sc = build_scenario("class_removal", data.train.labels, None, 4, forget_classes=[1])
    acc = split_accuracies(synthetic_model, data, sc)
    assert set(acc) == {"train_retain", "train_forget"}
    assert acc == {k: v for k, v in split_accuracies(synthetic_model, synthetic, sc).items() if k in acc}
    with pytest.raises(DuckInputError, match="AUS needs test-set accuracies and this data set has no test split"):
        aus_inputs(acc, acc, sc)
    rec = metrics_record(method="x", data_name="user", model_name="m", seed=0, acc=acc, original_acc=acc, scenario=sc)
    assert rec["aus"] is None and set(rec["acc"]) == {"train_retain", "train_forget"}


# ------------------------------------------------------------------------------------------------------------------
# Properties of each function, checked against hand computations (issue 39: mutation testing of duck/metrics.py).
# None of these needs a trained model: the model below predicts what its input says.

import math  # noqa: E402

from duck.data.base import DatasetSplits, TensorImageDataset  # noqa: E402
from duck.errors import DuckInputError  # noqa: E402
from duck.metrics import (  # noqa: E402
    accuracy,
    aus_inputs,
    forget_target,
    forget_target_met,
    scenario_aus,
)


def _scenarios(labels: np.ndarray, test_labels: np.ndarray | None = None) -> dict[str, object]:
    test = labels if test_labels is None else test_labels
    return {"class_removal": build_scenario("class_removal", labels, test, 4, forget_classes=[1]),
            "homogeneous_removal": build_scenario("homogeneous_removal", labels, test, 4, fraction=0.25),
            "custom": build_scenario("custom", labels, test, 4, forget_ids=[0, 5, 9]),
            "targeted": build_scenario("targeted", labels, test, 4, forget_ids=[0, 5, 9], target_class=2)}


def test_accuracy_is_the_share_of_argmax_hits_and_nan_without_labels():
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 5.0], [4.0, 4.5, 0.0]])
    # argmax 0, 1, 2, 1 against labels 0, 1, 1, 0: two hits of four
    assert accuracy(logits, torch.tensor([0, 1, 1, 0])) == 0.5
    assert accuracy(logits, torch.tensor([0, 1, 2, 1])) == 1.0
    assert math.isnan(accuracy(torch.empty(0, 3), torch.empty(0, dtype=torch.long)))


def test_forget_target_rules_of_algorithms_md_1_4():
    """Class removal and targeted: 0 + tolerance (0.01 unless given); homogeneous and custom: the original
    model's test accuracy, whatever the tolerance."""
    sc = _scenarios(np.repeat(np.arange(4), 10))
    original = {"test": 0.87, "test_retain": 0.9}
    for kind in ("class_removal", "targeted"):
        assert forget_target(sc[kind], original) == 0.01
        assert forget_target(sc[kind], original, tolerance=0.05) == 0.05
    for kind in ("homogeneous_removal", "custom"):
        assert forget_target(sc[kind], original) == 0.87
        assert forget_target(sc[kind], original, tolerance=0.05) == 0.87


def test_forget_target_met_compares_at_the_recorded_six_decimals():
    assert forget_target_met(0.0, 0.01) and forget_target_met(0.01, 0.01)  # at the target counts
    assert not forget_target_met(0.02, 0.01) and not forget_target_met(0.010001, 0.01)
    # float noise of a sum is no miss: 0.1 + 0.2 is 0.30000000000000004
    assert forget_target_met(0.1 + 0.2, 0.3)
    # an accuracy recorded to 6 decimals (0.012346) meets the unrounded target it was recorded from
    assert forget_target_met(round(0.0123456789, 6), 0.0123456789)
    assert not forget_target_met(0.012347, 0.0123456789)
    assert not forget_target_met(0.4, 0.3)  # rounding is to 6 decimals, not to whole numbers


@pytest.mark.parametrize("bad", [88.64, 1.5, -0.1, float("nan"), float("inf")])
@pytest.mark.parametrize("which", ["A_or", "A_t", "A_f"])
def test_aus_refuses_what_is_not_a_fraction_and_names_it(which, bad):
    args = {"A_or": 0.9, "A_t": 0.9, "A_f": 0.1}
    args[which] = bad
    with pytest.raises(DuckInputError, match=rf"^{which} must be a finite number >= 0.0 and <= 1.0, got {bad!r}$"):
        aus(args["A_or"], args["A_t"], args["A_f"], class_removal=True)


def test_aus_inputs_pick_the_splits_of_algorithms_md_2():
    sc = _scenarios(np.repeat(np.arange(4), 10))
    acc = {"test": 0.8, "test_retain": 0.85, "test_forget": 0.05, "train_retain": 0.95, "train_forget": 0.3}
    orig = {"test": 0.9, "test_retain": 0.91, "test_forget": 0.88, "train_retain": 0.99, "train_forget": 0.98}
    assert aus_inputs(acc, orig, sc["class_removal"]) == (0.91, 0.85, 0.05)
    for kind in ("homogeneous_removal", "custom", "targeted"):
        assert aus_inputs(acc, orig, sc[kind]) == (0.9, 0.8, 0.3)
    # targeted uses the class-removal form (its forget accuracy should go to zero), the others |A_f - A_t|
    assert scenario_aus(acc, orig, sc["targeted"]) == pytest.approx((1 - (0.9 - 0.8)) / (1 + 0.3), abs=1e-12)
    assert scenario_aus(acc, orig, sc["custom"]) == pytest.approx((1 - (0.9 - 0.8)) / (1 + 0.5), abs=1e-12)
    assert scenario_aus(acc, orig, sc["class_removal"]) == pytest.approx((1 - (0.91 - 0.85)) / 1.05, abs=1e-12)


def test_aus_inputs_need_only_the_splits_their_scenario_reads():
    """Class removal reads the per-class test splits, not the overall test accuracy; homogeneous removal reads the
    overall one, and split_accuracies gives it no per-class test splits."""
    sc = _scenarios(np.repeat(np.arange(4), 10))
    by_class = {"test_retain": 0.85, "test_forget": 0.05, "train_forget": 0.3}
    assert aus_inputs(by_class, {"test_retain": 0.9}, sc["class_removal"]) == (0.9, 0.85, 0.05)
    overall = {"test": 0.8, "train_retain": 0.9, "train_forget": 0.3}
    assert aus_inputs(overall, {"test": 0.9}, sc["homogeneous_removal"]) == (0.9, 0.8, 0.3)
    with pytest.raises(DuckInputError, match="AUS needs test-set accuracies"):
        aus_inputs(overall, {"test": 0.9, "test_retain": 0.9}, sc["class_removal"])


@pytest.mark.parametrize("kind", ["class_removal", "homogeneous_removal"])
@pytest.mark.parametrize("missing_in", ["acc", "original"])
def test_aus_inputs_refuse_a_missing_test_split_on_either_side(kind, missing_in):
    sc = _scenarios(np.repeat(np.arange(4), 10))[kind]
    full = {"test": 0.8, "test_retain": 0.85, "test_forget": 0.05, "train_forget": 0.3}
    part = {"train_retain": 0.9, "train_forget": 0.3}
    acc, orig = (part, full) if missing_in == "acc" else (full, part)
    with pytest.raises(DuckInputError, match=r"^AUS needs test-set accuracies and this data set has no test split; "
                                             r"give a test set \(duck\.data\.user\.as_splits\(train, test\)\)$"):
        aus_inputs(acc, orig, sc)


class _SaysWhatItSees(torch.nn.Module):
    """Logits = the input's pixels: an image holding a one-hot row predicts that class."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def _predicted(labels: np.ndarray, pred: np.ndarray, k: int = 4) -> TensorImageDataset:
    images = torch.nn.functional.one_hot(torch.as_tensor(pred), k).float().view(len(pred), 1, 1, k)
    return TensorImageDataset(images, labels, mean=(0.0,), std=(1.0,))


def test_split_accuracies_count_each_split_by_hand():
    # accuracies are float32 means: equal to the exact fractions to 1e-6
    rng = np.random.default_rng(0)
    tr_y, te_y = np.repeat(np.arange(4), 10), np.repeat(np.arange(4), 6)
    tr_p = np.where(rng.random(40) < 0.7, tr_y, (tr_y + 1) % 4)  # about 70 % right, differently per class
    te_p = np.where(rng.random(24) < 0.5, te_y, (te_y + 2) % 4)
    data = DatasetSplits("lookup", _predicted(tr_y, tr_p), _predicted(te_y, te_p), 4, 1, 1)
    model = _SaysWhatItSees().train()
    sc = _scenarios(tr_y, te_y)
    hit_tr, hit_te = tr_p == tr_y, te_p == te_y
    fg = np.zeros(40, bool)
    fg[sc["class_removal"].forget_idx] = True
    want = {"test": hit_te.mean(), "train_retain": hit_tr[~fg].mean(), "train_forget": hit_tr[fg].mean(),
            "test_retain": hit_te[te_y != 1].mean(), "test_forget": hit_te[te_y == 1].mean()}
    for bs in (1024, 7):  # batches must not matter
        got = split_accuracies(model, data, sc["class_removal"], batch_size=bs)
        assert got.keys() == want.keys() and all(got[k] == pytest.approx(want[k], abs=1e-6) for k in want)
    assert model.training  # the model's mode is given back
    # homogeneous removal: the forget set is a sample of the training set, no per-class test splits
    hr = sc["homogeneous_removal"]
    fg = np.zeros(40, bool)
    fg[hr.forget_idx] = True
    got = split_accuracies(model, data, hr)
    assert got == pytest.approx({"test": hit_te.mean(), "train_retain": hit_tr[~fg].mean(),
                                 "train_forget": hit_tr[fg].mean()}, abs=1e-6)
    assert split_accuracies(model, data, None) == pytest.approx({"test": hit_te.mean(), "train": hit_tr.mean()},
                                                                     abs=1e-6)


def test_metrics_record_is_the_design_md_record():
    """The metrics.json record of DESIGN.md §3, written out by hand: accuracies to 6 decimals, time to 3, the
    seed as a plain int, the scenario's own fields only where it has them, extra fields last."""
    y = np.repeat(np.arange(4), 10)
    plain = metrics_record(method="duck", data_name="digits", model_name="smallcnn", seed=np.int64(3),
                           acc={"train": 0.12345678})
    assert plain == {"method": "duck", "scenario": None, "dataset": "digits", "model": "smallcnn", "seed": 3,
                     "acc": {"train": 0.123457}, "time_s": None, "epochs": None}
    assert type(plain["seed"]) is int

    cr = build_scenario("class_removal", y, y, 4, forget_classes=["b"], class_names=["a", "b", "c", "d"])
    acc = {"test": 0.81234567, "test_retain": 0.85, "test_forget": 0.0512345, "train_retain": 0.9, "train_forget": 0.3}
    orig = {"test": 0.9, "test_retain": 0.9123456789, "test_forget": 0.88}
    rec = metrics_record(method="duck", data_name="digits", model_name="smallcnn", seed=0, acc=acc, original_acc=orig,
                         scenario=cr, time_s=1.23456, epochs=2.5, note="x")
    assert rec == {"method": "duck", "scenario": "class_removal", "dataset": "digits", "model": "smallcnn", "seed": 0,
                   "forget_classes": [1], "forget_class_names": ["b"], "n_forget": 10,
                   "acc": {"test": 0.812346, "test_retain": 0.85, "test_forget": 0.051235, "train_retain": 0.9,
                           "train_forget": 0.3},
                   "original_acc": {"test": 0.9, "test_retain": 0.912346, "test_forget": 0.88},
                   "aus": round((1 - (0.9123456789 - 0.85)) / (1 + 0.0512345), 6), "time_s": 1.235, "epochs": 2.5,
                   "note": "x"}
    assert list(rec)[-1] == "note"

    tg = build_scenario("targeted", y, y, 4, forget_ids=[0, 5, 9], target_class=2)
    rec = metrics_record(method="m", data_name="d", model_name="n", seed=1, acc=acc, original_acc=orig, scenario=tg)
    assert rec["target_class"] == 2 and rec["forget_classes"] is None and "forget_class_names" not in rec
    assert rec["n_forget"] == 3 and rec["aus"] == round((1 - (0.9 - 0.81234567)) / (1 + 0.3), 6)
    # a scenario but no original accuracies: no AUS and no original_acc; no test split: AUS None
    rec = metrics_record(method="m", data_name="d", model_name="n", seed=1, acc=acc, scenario=cr)
    assert "aus" not in rec and "original_acc" not in rec and "target_class" not in rec
    part = {"train_retain": 0.9, "train_forget": 0.3}
    rec = metrics_record(method="m", data_name="d", model_name="n", seed=1, acc=part, original_acc=part, scenario=cr)
    assert rec["aus"] is None and rec["original_acc"] == part


class _Recorder(torch.nn.Module):
    """Records the device and size of every batch it is given; predicts class 0 (on the CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, int]] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((x.device.type, len(x)))
        return torch.zeros(len(x), 4)


def test_split_accuracies_send_batches_of_the_given_size_to_the_given_device():
    """``device`` and ``batch_size`` reach both splits' predictions (the meta device stands in for a GPU: tensors
    without data)."""
    tr_y, te_y = np.repeat(np.arange(4), 10), np.repeat(np.arange(4), 6)
    data = DatasetSplits("lookup", _predicted(tr_y, tr_y), _predicted(te_y, te_y), 4, 1, 1)
    model = _Recorder()
    acc = split_accuracies(model, data, _scenarios(tr_y, te_y)["class_removal"], device="meta", batch_size=7)
    assert model.seen == [("meta", n) for n in (7, 7, 7, 3)] + [("meta", n) for n in (7, 7, 7, 7, 7, 5)]
    assert acc["test_forget"] == 0.0 and acc["train_retain"] == pytest.approx(1 / 3, abs=1e-6)  # all say class 0
