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
