"""The banks a method learns from, built ahead of its runs (duck.pipeline.references.reference_banks) and
sliced by array tasks with the audit's own banks (attacks.bank_shards.train_bank_slices, ``attack.num_shards``)."""

from __future__ import annotations

import pytest

from attacks import bank_shards
from attacks.shadow import ShadowBank
from attacks.subset_bank import SubsetBank
from attacks.ulira_audit import lira_bank
from duck.errors import DuckInputError
from duck.pipeline.config import compose
from duck.pipeline.job import Job
from duck.pipeline.references import reference_banks
from duck.pipeline.stages import audit_context


def job_of(tmp_path, *overrides: str) -> Job:
    return Job.from_cfg(compose("run", ["data=synthetic", "data.n_train=120", "data.n_test=40", "trainer=cpu",
                                        f"cache_dir={tmp_path}", *overrides]), "run")


def test_subset_matching_asks_for_its_subset_bank_with_its_own_settings(tmp_path):
    job = job_of(tmp_path, "method=subset_matching", "method.n_models=10", "method.keep_fraction=0.8",
                 "method.bank_seed=3")
    (name, bank), = reference_banks(job).items()
    assert name == "subset_matching: subset bank"
    assert isinstance(bank, SubsetBank) and (bank.n_shadow, bank.seed, bank.keep_fraction) == (10, 3, 0.8)
    # the key the runs' bank has: built here from the job's data, architecture and recipe directly
    direct = SubsetBank(tmp_path, job.data, job.model_factory, job.recipe, n_models=10, keep_fraction=0.8, seed=3,
                        trainer_cfg=job.trainer_cfg)
    assert bank.key == direct.key
    other = reference_banks(job_of(tmp_path, "method=subset_matching", "method.n_models=10",
                                   "method.keep_fraction=0.8", "method.bank_seed=4"))
    assert next(iter(other.values())).key != bank.key


def test_oracle_matching_asks_for_its_pool_and_refuses_the_audits_seeds(tmp_path):
    (name, bank), = reference_banks(job_of(tmp_path, "method=oracle_matching", "method.num_oracles=5")).items()
    assert name == "oracle_matching: oracles" and (bank.n_shadow, bank.seed) == (5, 1000)
    with pytest.raises(DuckInputError, match="method.oracle_seed=1 is the seed of the forgetting audit"):
        reference_banks(job_of(tmp_path, "method=oracle_matching", "method.oracle_seed=1",
                               "attack.forgetting.enabled=true"))


def test_methods_without_references_ask_for_none(tmp_path):
    assert reference_banks(job_of(tmp_path, "method=duck")) == {}
    assert reference_banks(job_of(tmp_path, "method=finetune")) == {}


def test_a_slice_trains_a_bank_the_method_shares_with_the_audit_once(tmp_path, monkeypatch):
    """datamodel matching's default shadow bank is the LiRA audit's own: the slice trains it once; with other
    settings the method's bank is a second one, sliced too."""
    calls: list = []

    def train_slice(self, shard, num_shards):
        calls.append((self.dir, shard, num_shards))
        return {"trained": [], "seconds": 0.0}

    monkeypatch.setattr(ShadowBank, "train_slice", train_slice)
    job = job_of(tmp_path, "method=datamodel_matching", "attack.forgetting.enabled=false", "attack.num_shards=2",
                 "attack.shard=1")
    ctx = audit_context(job)
    method_banks = reference_banks(job)
    assert [b.dir for b in method_banks.values()] == [lira_bank(ctx).dir]
    result, _ = bank_shards.train_bank_slices(ctx, tmp_path / "out", method_banks)
    assert calls == [(lira_bank(ctx).dir, 1, 2)] and list(result["banks"]) == ["shadow bank"]

    calls.clear()
    job = job_of(tmp_path, "method=datamodel_matching", "method.shadow_seed=7", "attack.forgetting.enabled=false",
                 "attack.num_shards=2",
                 "attack.shard=0")
    result, _ = bank_shards.train_bank_slices(audit_context(job), tmp_path / "out2", reference_banks(job))
    assert list(result["banks"]) == ["shadow bank", "datamodel_matching: shadow bank"]
    assert len({d for d, _, _ in calls}) == 2 and {(s, n) for _, s, n in calls} == {(0, 2)}
