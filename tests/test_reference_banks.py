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
    (name, (bank, used)), = reference_banks(job).items()
    assert name == "subset_matching: subset bank" and used is None  # every run reads the whole bank
    assert isinstance(bank, SubsetBank) and (bank.n_shadow, bank.seed, bank.keep_fraction) == (10, 3, 0.8)
    # the key the runs' bank has: built here from the job's data, architecture and recipe directly
    direct = SubsetBank(tmp_path, job.data, job.model_factory, job.recipe, n_models=10, keep_fraction=0.8, seed=3,
                        trainer_cfg=job.trainer_cfg)
    assert bank.key == direct.key
    other = reference_banks(job_of(tmp_path, "method=subset_matching", "method.n_models=10",
                                   "method.keep_fraction=0.8", "method.bank_seed=4"))
    assert next(iter(other.values()))[0].key != bank.key


def test_oracle_matching_asks_for_its_pool_and_refuses_the_audits_seeds(tmp_path):
    (name, (bank, used)), = reference_banks(job_of(tmp_path, "method=oracle_matching", "method.num_oracles=5",
                                                   "attack.forgetting.enabled=false", "seed=7")).items()
    assert name == "oracle_matching: oracles" and (bank.n_shadow, bank.seed) == (5, 1000)
    assert used == [2]  # one run, seed 7: oracle 7 mod 5
    # the forgetting audit's N = 4 runs, seeds 3..6: oracles 3, 4, 0, 1 of the pool of 5; targets=mean: all
    job = job_of(tmp_path, "method=oracle_matching", "method.num_oracles=5", "attack.forgetting.enabled=true",
                 "attack.forgetting.n_unlearned=4", "seed=3")
    assert next(iter(reference_banks(job).values()))[1] == [0, 1, 3, 4]
    job = job_of(tmp_path, "method=oracle_matching", "method.num_oracles=5", "method.targets=mean")
    assert next(iter(reference_banks(job).values()))[1] == [0, 1, 2, 3, 4]
    with pytest.raises(DuckInputError, match="method.oracle_seed=1 is the seed of the forgetting audit"):
        reference_banks(job_of(tmp_path, "method=oracle_matching", "method.oracle_seed=1",
                               "attack.forgetting.enabled=true"))


def test_methods_without_references_ask_for_none(tmp_path):
    assert reference_banks(job_of(tmp_path, "method=duck")) == {}
    assert reference_banks(job_of(tmp_path, "method=finetune")) == {}


def test_a_slice_trains_a_bank_the_method_shares_with_the_audit_once(tmp_path, monkeypatch, capsys):
    """datamodel matching's default shadow bank is the LiRA audit's own: the slice trains it once; with other
    settings the method's bank is a second one, sliced too. The heading names whose banks the slice trains."""
    calls: list = []

    def train_slice(self, shard, num_shards, models=None):
        calls.append((self.dir, shard, num_shards))
        return {"trained": [], "seconds": 0.0}

    monkeypatch.setattr(ShadowBank, "train_slice", train_slice)
    job = job_of(tmp_path, "method=datamodel_matching", "attack.forgetting.enabled=false", "attack.num_shards=2",
                 "attack.shard=1")
    ctx = audit_context(job)
    method_banks = reference_banks(job)
    assert [b.dir for b, _ in method_banks.values()] == [lira_bank(ctx).dir]
    result, _ = bank_shards.train_bank_slices(ctx, tmp_path / "out", method_banks)
    assert calls == [(lira_bank(ctx).dir, 1, 2)] and list(result["banks"]) == ["shadow bank"]
    assert "slice 1 of 2 of the audit's and the method's banks" in capsys.readouterr().out
    bank_shards.train_bank_slices(ctx, tmp_path / "out1", {})
    assert "slice 1 of 2 of the audit's banks" in capsys.readouterr().out

    calls.clear()
    job = job_of(tmp_path, "method=datamodel_matching", "method.shadow_seed=7", "attack.forgetting.enabled=false",
                 "attack.num_shards=2",
                 "attack.shard=0")
    result, _ = bank_shards.train_bank_slices(audit_context(job), tmp_path / "out2", reference_banks(job))
    assert list(result["banks"]) == ["shadow bank", "datamodel_matching: shadow bank"]
    assert len({d for d, _, _ in calls}) == 2 and {(s, n) for _, s, n in calls} == {(0, 2)}


def test_a_slice_trains_only_the_models_the_runs_use(tmp_path):
    """Slice 1 of 2 of a 6-model oracle bank whose runs use oracles 1, 2 and 3: model 1 and 3 only (k mod 2 = 1),
    and shard.json says none of those used is missing after slice 0 has run too."""
    job = job_of(tmp_path, "method=oracle_matching", "method.num_oracles=6", "attack.forgetting.enabled=true",
                 "attack.forgetting.n_unlearned=3", "seed=1", "recipe.epochs=1", "attack.num_shards=2")
    (bank, used), = reference_banks(job).values()
    assert used == [1, 2, 3]
    assert bank.train_slice(1, 2, used)["trained"] == [1, 3]
    assert bank.train_slice(0, 2, used)["trained"] == [2]
    assert sorted(bank.missing()) == [0, 4, 5]
