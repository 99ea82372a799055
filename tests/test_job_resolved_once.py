"""A job is resolved once (issue 37): the method's hyperparameters are resolved from its config exactly once per
job, however many unlearning runs the job makes (the run itself, the forgetting audit's N runs), and nothing
rewrites the job afterwards (a frozen Job; a stage that needs a variant makes a copy)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import SYNTH_ARGS

from duck.schema import PARSES


def test_a_run_with_the_forgetting_audit_resolves_the_method_once(run_cli, tmp_path, monkeypatch):
    PARSES.clear()
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "method=finetune", "audit=false",
                              "attack.forgetting.enabled=true", "attack.forgetting.n_unlearned=3",
                              "attack.forgetting.n_retrained=3", "attack.forgetting.controls=false",
                              f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    assert PARSES["FineTuneParams"] == 1, PARSES  # 1 job, 1 + 3 unlearning runs


def test_a_job_cannot_be_rewritten(tmp_path):
    from duck.pipeline.config import compose
    from duck.pipeline.job import Job

    job = Job.from_cfg(compose("unlearn", [*SYNTH_ARGS, "method=finetune", f"ckpt={tmp_path / 'x.pt'}",
                                           "scenario.forget_classes=[3]"]), "unlearn")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.seed = 3  # type: ignore[misc]
    variant = job.replace(seed=3)
    assert variant.seed == 3 and job.seed == 0 and variant.hparams is job.hparams
