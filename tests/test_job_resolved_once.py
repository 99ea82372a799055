"""A job is resolved once (issue 37): the method's hyperparameters are resolved from its config exactly once per
job, however many unlearning runs the job makes (the run itself, the forgetting audit's N runs), and nothing
rewrites the job afterwards (a frozen Job; a stage that needs a variant makes a copy)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
from conftest import SYNTH_ARGS

from duck.unlearn import config as method_config
from duck.unlearn.config import MethodParams, resolve_method_cfg


def test_a_run_with_the_forgetting_audit_resolves_the_method_once(run_cli, tmp_path, monkeypatch):
    resolutions = []
    real = method_config.check_hyperparameters
    monkeypatch.setattr(method_config, "check_hyperparameters", lambda hp: (resolutions.append(dict(hp)), real(hp)))
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "method=finetune", "audit=false",
                              "attack.forgetting.enabled=true", "attack.forgetting.n_unlearned=3",
                              "attack.forgetting.n_retrained=3", "attack.forgetting.controls=false",
                              f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    method_runs = [hp for hp in resolutions if "lr" in hp]  # the retrain bank resolves "retrain" ({})
    assert len(method_runs) == 1, resolutions  # 1 job, 1 + 3 unlearning runs


def test_resolved_parameters_are_read_only_and_survive_copies():
    params = resolve_method_cfg({"lr": None, "epochs": 2, "presets": {"class_removal": {"default": {"lr": 0.1}}}},
                                "digits", "class_removal")
    assert params == {"lr": 0.1, "epochs": 2} and isinstance(params, MethodParams)
    assert resolve_method_cfg(params, "other", "homogeneous_removal") is params  # not resolved again
    for copied in (copy.deepcopy(params), pickle.loads(pickle.dumps(params))):
        assert type(copied) is MethodParams and copied == params
    with pytest.raises(TypeError, match="read-only"):
        params["lr"] = 1.0
    with pytest.raises(TypeError, match="read-only"):
        params.update(lr=1.0)


def test_a_job_cannot_be_rewritten(tmp_path):
    from duck.pipeline.config import compose
    from duck.pipeline.job import Job

    job = Job.from_cfg(compose("unlearn", [*SYNTH_ARGS, "method=finetune", f"ckpt={tmp_path / 'x.pt'}",
                                           "scenario.forget_classes=[3]"]), "unlearn")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 3  # type: ignore[misc]
    variant = job.replace(seed=3)
    assert variant.seed == 3 and job.seed == 0 and variant.hparams is job.hparams
