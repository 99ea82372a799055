"""``data.*`` and ``model.*`` options through ``duck-train``: augmentation reaches the training, and unknown keys
or bad numbers exit with one ``error:`` line and no output (unit checks: tests/test_data.py, tests/test_models.py)."""

from __future__ import annotations

import pytest
import torch
from conftest import SYNTH_ARGS, written_files

from duck.checkpoint import load_checkpoint

BASE = ("progress=false", "trainer=cpu")  # SYNTH_ARGS without its data / model settings


def test_augment_changes_training_on_synthetic(run_cli):
    weights = []
    for augment in ("[]", "[flip]"):
        code, _, err, run_dir = run_cli("train", *SYNTH_ARGS, "recipe.epochs=1", f"data.augment={augment}")
        assert code == 0, err
        weights.append(load_checkpoint(run_dir / "model.ckpt")[0])
    plain, flipped = weights
    assert any(not torch.equal(plain[k], flipped[k]) for k in plain)  # data.augment was ignored for synthetic


@pytest.mark.parametrize("args,match", [
    ((*SYNTH_ARGS, "data.augment=[rotate]"), "error: unknown augmentation(s) ['rotate'] in data.augment; choose from"),
    ((*SYNTH_ARGS, "+data.foo=1"), "error: unknown option(s) data.foo for data set 'synthetic'; its options are data.n_train,"),
    (("data=digits", *BASE, "+data.foo=1"), "its options are data.test_fraction, data.split_seed, data.augment"),
    (("data=digits", *BASE, "data.split_seed=1.5"), "error: data.split_seed=1.5 must be an integer >= 0"),
    (("data=digits", *BASE, "data.test_fraction=0.999"), "use a value between 0.006 and 0.994"),
    ((*SYNTH_ARGS, "data.n_train=0"), "error: data.n_train=0 must be an integer >= 1"),
    ((*SYNTH_ARGS, "data.noise=nan"), "error: data.noise must be a finite number >= 0.0, got nan"),
    ((*SYNTH_ARGS, "data.img_size=1"), "error: smallcnn needs images of at least 2x2 pixels"),
    ((*SYNTH_ARGS, "model.width=1.5"), "error: model.width=1.5 must be an integer >= 1"),
    ((*SYNTH_ARGS, "+model.drop_rate=2"), "error: model.drop_rate must be a finite number >= 0.0 and < 1.0, got 2"),
    ((*SYNTH_ARGS, "+model.foo=1"), "error: model.foo=1 is not an option of model 'smallcnn'; its options are model.width"),
    ((*SYNTH_ARGS, "+model.cifar_stem=true"), "error: model.cifar_stem=True does not apply to smallcnn"),
    (("data=synthetic", "model=resnet18", *BASE, "+model.foo=1"), "error: model.foo=1 is not an option of model 'resnet18'"),
])
def test_bad_data_and_model_options_exit_cleanly(run_cli, args, match):
    code, _, err, run_dir = run_cli("train", *args)
    assert code == 2 and match in err, err
    assert err.strip().count("\n") == 0  # one line
    assert written_files(run_dir) == set()
