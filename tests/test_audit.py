"""End to end: ``audit_models`` on three models with one bank, ``write_report``, and the ``duck-audit`` "
  "CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import SYNTH_ARGS, written_files

from attacks.audit import AuditSettings, audit_models
from attacks.lira import lira_scores
from attacks.roc import auc_score
from duck.data.scenarios import build_scenario
from duck.errors import DuckInputError
from duck.models import create_model
from duck.report import write_report
from duck.training import Recipe, train_classifier

CPU = {"accelerator": "cpu", "devices": 1}
FAST_ATTACK = {"n_shadow": 4, "mode": "batched", "chunk_size": 4, "ci": {"n_boot": 200},
               "svm_mia": {"runs": 2, "C": [1, 10], "gamma": [1, 0.1]}}



@pytest.fixture(scope="module")
def setup(synthetic):
    adam = {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 3e-3}
    rec = Recipe(epochs=3, batch_size=32, optimizer=adam)

    def factory():
        return create_model("smallcnn", synthetic.num_classes, 1, 8, width=8)

    scenario = build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels,
                              synthetic.num_classes, forget_classes=[1])
    torch.manual_seed(0)
    original, _ = train_classifier(factory(), synthetic.train, rec, seed=0, trainer_cfg=CPU)
    torch.manual_seed(1)
    retrained, _ = train_classifier(factory(), synthetic.train, rec, indices=scenario.retain_idx, seed=1,
                                    trainer_cfg=CPU)
    torch.manual_seed(2)
    unlearned, _ = train_classifier(factory(), synthetic.train, rec, indices=scenario.retain_idx, seed=2,
                                    trainer_cfg=CPU)
    return rec, factory, scenario, {"original": original, "unlearned": unlearned, "retrained": retrained}


def test_audit_models_and_report_end_to_end(synthetic, setup, tmp_path: Path) -> None:
    rec, factory, scenario, models = setup
    out_dirs = {name: tmp_path / name for name in models}
    kw = dict(recipe=rec, model_factory=factory, cache_dir=tmp_path / "cache", seed=0, trainer_cfg=CPU)
    audits = audit_models(FAST_ATTACK, synthetic, scenario, models, out_dirs=out_dirs, **kw)
    assert set(audits) == {"original", "unlearned", "retrained"}
    n_forget, n_test_forget = len(scenario.forget_idx), len(scenario.test_forget_idx)
    for name, a in audits.items():
        # DESIGN.md §3 audit.json format (plus confidence intervals)
        assert a["target"] == name and a["members"] == "forget" and a["nonmembers"] == "test_forget"
        lira = a["lira"]
        assert lira["variant"] == "offline" and lira["n_shadow"] == 4 and lira["n_out"] == 2
        assert 0.0 <= lira["auc_ci"][0] <= lira["auc"] <= lira["auc_ci"][1] <= 1.0 and lira["auc_se"] > 0
        assert set(lira["tpr_at_fpr"]) == {"0.001", "0.01", "0.05"}
        assert (lira["n_members"], lira["n_nonmembers"]) == (n_forget, n_test_forget)
        assert {"f1", "accuracy", "chance"} <= set(a["svm_mia"])
        assert set(a["reference"]) == set(models) - {name}
        on_disk = json.loads((out_dirs[name] / "audit.json").read_text())
        assert on_disk["lira"]["auc"] == pytest.approx(lira["auc"])
        # lira_stats.npz holds what is needed to recompute the attack
        with np.load(out_dirs[name] / "lira_stats.npz", allow_pickle=False) as st:
            assert st["keep"].shape == (4, len(synthetic.train)) and (st["keep"].sum(0) == 2).all()
            settings = json.loads(str(st["settings"]))
            assert settings["fixed_variance"] is False and settings["variant"] == "offline"
            scores, _ = lira_scores(st["target_phi"], st["shadow_phi"], st["shadow_in"], **settings)
            np.testing.assert_allclose(scores, st["scores"])
            assert auc_score(scores, st["member"]) == pytest.approx(lira["auc"])
            assert st["member"].sum() == n_forget and list(st["views"]) == ["identity"]
    assert audits["original"]["bank"]["trained_now"] == 4

    # second audit on the same setup: the bank and its φ come from the cache
    again = audit_models(FAST_ATTACK, synthetic, scenario, {"unlearned": models["unlearned"]}, **kw)
    bank = again["unlearned"]["bank"]
    assert bank["trained_now"] == 0 and bank["phi_reused"]
    assert bank["key"] == audits["original"]["bank"]["key"]
    assert again["unlearned"]["lira"]["auc"] == pytest.approx(audits["unlearned"]["lira"]["auc"])

    rows = [{"model": n, "method": n, "A_t": 0.9, "A_f": 0.0, "AUS": 1.0, "time_s": 1.5, "epochs": 3}
            for n in models]
    paths = write_report(tmp_path / "report", summary_rows=rows, audits=audits,
                         config={"attack": FAST_ATTACK},
                         scenario=scenario, run_times={"original": 1.0, "audit": 2.0})
    html = paths["html"].read_text()
    assert html.count("data:image/png;base64,") == 2 and "LiRA membership inference" in html
    md = paths["md"].read_text()
    assert "![LiRA ROC, log-log axes](plots/roc_loglog.png)" in md and "| original |" in md
    assert (tmp_path / "report" / "plots" / "roc_loglog.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_homogeneous_audit_uses_all_test_samples(synthetic, setup, tmp_path: Path) -> None:
    rec, factory, _, models = setup
    scenario = build_scenario("homogeneous_removal", synthetic.train.labels, synthetic.test.labels,
                              synthetic.num_classes, fraction=0.2, seed=0)
    audits = audit_models({**FAST_ATTACK, "svm_mia": {"enabled": False}, "views": ["identity", "flip"]},
                          synthetic,
                          scenario, {"original": models["original"]}, recipe=rec, model_factory=factory,
                          cache_dir=tmp_path, seed=0, trainer_cfg=CPU)
    a = audits["original"]
    assert a["nonmembers"] == "test" and a["n_nonmembers"] == len(synthetic.test) and "svm_mia" not in a
    assert a["lira"]["views"] == ["identity", "flip"]


def test_online_audit_trains_shadows_on_train_and_test(synthetic, setup, tmp_path: Path) -> None:
    rec, factory, scenario, models = setup
    attack = {**FAST_ATTACK, "variant": "online", "shadow_pool": "train+test", "svm_mia": {"enabled": False}}
    audits = audit_models(attack, synthetic, scenario, {"original": models["original"]}, recipe=rec,
                          model_factory=factory, cache_dir=tmp_path, seed=0, trainer_cfg=CPU,
                          out_dirs={"original": tmp_path / "o"})
    lira = audits["original"]["lira"]
    assert lira["variant"] == "online" and lira["n_in"] == 2 and lira["n_out"] == 2
    assert audits["original"]["bank"]["pool"] == "train+test"
    with np.load(tmp_path / "o" / "lira_stats.npz", allow_pickle=False) as st:
        assert st["keep"].shape == (4, len(synthetic.train) + len(synthetic.test))
        assert (st["shadow_in"].sum(0) == 2).all()  # test samples too are IN for half of the shadows
    with pytest.raises(DuckInputError, match="shadow_pool=train\\+test"):
        audit_models({**attack, "shadow_pool": "train"}, synthetic, scenario,
                     {"original": models["original"]},
                     recipe=rec, model_factory=factory, cache_dir=tmp_path, seed=0, trainer_cfg=CPU)


def test_settings_reject_bad_options() -> None:
    with pytest.raises(DuckInputError, match="unknown attack option"):
        AuditSettings.from_cfg({"n_shadows": 4})
    with pytest.raises(DuckInputError, match="variant"):
        AuditSettings.from_cfg({"variant": "global"})
    with pytest.raises(DuckInputError, match="fpr_levels"):
        AuditSettings.from_cfg({"fpr_levels": [0.0, 0.01]})
    settings = AuditSettings.from_cfg({"name": "lira", "ci": {"level": 0.9}})
    assert settings.ci == {"method": "bootstrap", "level": 0.9, "n_boot": 2000}


CLI_ATTACK = ("attack.n_shadow=4", "attack.mode=batched", "attack.ci.n_boot=200", "attack.svm_mia.runs=2",
              "recipe=synthetic", "recipe.epochs=2")
FORGET_1 = ("scenario=class_removal", "scenario.forget_classes=[1]")


@pytest.fixture(scope="module")
def forget1_ckpts(tmp_path_factory: pytest.TempPathFactory, synthetic, synthetic_model) -> dict[str, Path]:
    """``synthetic_model`` saved as if unlearned (``duck``) or retrained (``retrain``) for forget class 1, with
    the manifest duck-unlearn / duck-run write (scenario summary with the forget hash, config)."""
    from duck.checkpoint import build_manifest, save_checkpoint

    scenario = build_scenario("class_removal", synthetic.train.labels, synthetic.test.labels, synthetic.num_classes,
                              forget_classes=[1])
    config = {"scenario": {"kind": "class_removal", "forget_classes": [1]}}
    directory = tmp_path_factory.mktemp("forget1")
    return {method: save_checkpoint(directory / f"{method}.ckpt", synthetic_model.state_dict(),
                                    build_manifest(synthetic_model.spec(), "synthetic", method=method,
                                                   scenario=scenario.summary(), config=config))
            for method in ("duck", "retrain")}


def test_duck_audit_cli(run_cli, synthetic_ckpt: Path, forget1_ckpts: dict[str, Path]) -> None:
    # the unlearned and retrained checkpoints were made for this forget set: accepted (role from the manifest)
    code, out, err, run_dir = run_cli("audit", *SYNTH_ARGS, *CLI_ATTACK, *FORGET_1, f"ckpt={forget1_ckpts['duck']}",
                                      f"original_ckpt={synthetic_ckpt}", f"retrained_ckpt={forget1_ckpts['retrain']}")
    assert code == 0, err
    files = written_files(run_dir)
    assert {"audit.json", "lira_stats.npz", "report.html", "report.md", "plots/roc_loglog.png",
            "plots/auc_ci.png", "original/audit.json", "original/lira_stats.npz", "retrained/audit.json"} <= files
    audit = json.loads((run_dir / "audit.json").read_text())
    assert audit["target"] == "unlearned" and {"original", "retrained"} <= set(audit["reference"])
    # the same weights audited twice with the same bank give the same scores
    assert audit["lira"]["auc"] == pytest.approx(audit["reference"]["original"]["auc"])
    assert "report:" in out and "AUC" in out


@pytest.mark.parametrize("args,match", [
    (("attack.variant=global",), "attack.variant='global'"),
    (("scenario=none",), "duck-audit needs a scenario"),
    (("attack.n_shadow=3",), "even number"),
    (("role=original",), "original_ckpt given, but the audited checkpoint is the original itself"),
    (("trainer.devices=0",), "invalid trainer settings"),
])
def test_duck_audit_bad_input_exits_cleanly(run_cli, synthetic_ckpt: Path, args, match) -> None:
    extra = (f"original_ckpt={synthetic_ckpt}",) if "role=original" in args else ()
    scenario = () if "scenario=none" in args else FORGET_1
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, *CLI_ATTACK, *scenario, f"ckpt={synthetic_ckpt}",
                                    *extra,
                                    *args)
    assert code == 2 and match in err, err
    assert not (run_dir / "audit.json").exists()


@pytest.mark.parametrize("which,match", [
    ("ckpt", "(unlearned with duck) was made for another forget set: class_removal of classes [1]"),
    ("retrained_ckpt", "(a retrained oracle) was made for another forget set: class_removal of classes [1]"),
])
def test_duck_audit_refuses_a_checkpoint_made_for_another_forget_set(run_cli, synthetic_ckpt: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch,
                                                                     forget1_ckpts: dict[str, Path], which, match) -> None:
    """Auditing an unlearned (or retrained) checkpoint against another forget set measured the wrong members
    without a word; the checkpoint's own forget set is named, and the overrides that select it."""
    monkeypatch.setenv("DUCK_CACHE_DIR", str(tmp_path / "cache"))
    ckpts = ((f"ckpt={forget1_ckpts['duck']}",) if which == "ckpt"
             else (f"ckpt={synthetic_ckpt}", f"retrained_ckpt={forget1_ckpts['retrain']}"))
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, *CLI_ATTACK, "scenario=class_removal",
                                    "scenario.forget_classes=[2]", *ckpts)
    assert code == 2 and match in err and "Traceback" not in err, err
    assert "but the requested scenario is class_removal of classes [2]" in err
    assert "Pass the scenario it was made for (scenario=class_removal scenario.forget_classes=[1])" in err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert written_files(run_dir) == set() and not (tmp_path / "cache" / "store-v1" / "shadow_banks").exists()


@pytest.mark.slow
def test_digits_audit_separates_original_from_oracle(digits, tmp_path: Path) -> None:
    """The correctness target on real data (minutes on 2 CPU cores): with the digits recipe and 16 shadows,
    the original is attackable (AUC CI above 0.5) and the retrained oracle is within 2 SE of chance."""
    from benchmarks.audit import load_recipe

    rec = load_recipe("digits")

    def factory():
        return create_model("smallcnn", 10, 1, 8)

    scenario = build_scenario("homogeneous_removal", digits.train.labels, digits.test.labels, 10,
                              fraction=0.1, seed=0)
    torch.manual_seed(0)
    original, _ = train_classifier(factory(), digits.train, rec, seed=0, trainer_cfg=CPU)
    torch.manual_seed(0)
    retrained, _ = train_classifier(factory(), digits.train, rec, indices=scenario.retain_idx, seed=0,
                                    trainer_cfg=CPU)
    audits = audit_models({"n_shadow": 16, "svm_mia": {"enabled": False}}, digits, scenario,
                          {"original": original, "retrained": retrained}, recipe=rec, model_factory=factory,
                          cache_dir=tmp_path, seed=0, trainer_cfg=CPU)
    assert audits["original"]["lira"]["separated_from_chance"]
    assert audits["original"]["lira"]["tpr_at_fpr"]["0.01"] > 0.01
    assert audits["retrained"]["lira"]["within_2se_of_chance"]


@pytest.mark.parametrize("option,match", [
    ({"n_shadow": "abc"}, "attack.n_shadow='abc'"), ({"n_shadow": float("nan")}, "attack.n_shadow=nan"),
    ({"n_shadow": 4.5}, "attack.n_shadow=4.5"), ({"ci": {"level": 1.5}}, "attack.ci.level"),
    ({"ci": {"level": "abc"}}, "attack.ci.level"), ({"ci": {"n_boot": 5}}, "attack.ci.n_boot=5"),
    ({"ci": {"n_boot": "abc"}}, "attack.ci.n_boot='abc'"), ({"ci": {"n_boot": 100.5}}, "attack.ci.n_boot=100.5"),
    ({"ci": {"n_boot": 10**12}}, "n_boot=1000000000000 must be at most 100000 resamples"),
    ({"svm_mia": {"runs": "abc"}}, "attack.svm_mia.runs"),
    ({"svm_mia": {"runs": 0}}, "attack.svm_mia.runs=0"), ({"svm_mia": {"runs": -1}}, "attack.svm_mia.runs=-1"),
    ({"svm_mia": {"cv": 0}}, "attack.svm_mia.cv=0"), ({"svm_mia": {"cv": 1}}, "attack.svm_mia.cv=1"),
    ({"svm_mia": {"cv": "abc"}}, "attack.svm_mia.cv"), ({"svm_mia": {"C": []}}, "attack.svm_mia.C"),
    ({"svm_mia": {"C": [-1]}}, "attack.svm_mia.C"), ({"svm_mia": {"C": [float("nan")]}}, "attack.svm_mia.C"),
    ({"svm_mia": {"member_ratio_hr": float("nan")}}, "attack.svm_mia.member_ratio_hr"),
    ({"svm_mia": {"member_ratio_hr": "abc"}}, "attack.svm_mia.member_ratio_hr"),
    ({"svm_mia": {"enabled": "abc"}}, "attack.svm_mia.enabled"), ({"fpr_levels": ["abc"]}, "attack.fpr_levels"),
    ({"fpr_levels": []}, "attack.fpr_levels"), ({"chunk_size": "abc"}, "attack.chunk_size"),
    ({"seed": -1}, "attack.seed=-1"), ({"seed": "abc"}, "attack.seed"),
    ({"eval_batch_size": 0}, "attack.eval_batch_size=0"), ({"eval_batch_size": "abc"}, "attack.eval_batch_size"),
    ({"truncate": "abc"}, "attack.truncate"), ({"save_stats": "abc"}, "attack.save_stats"),
    ({"mode": "fast"}, "attack.mode"), ({"shadow_pool": "all"}, "attack.shadow_pool"),
    ({"threads": "many"}, "attack.threads"), ({"views": "all"}, "attack.views"),
])
def test_settings_check_every_option(option, match) -> None:
    with pytest.raises(DuckInputError, match=match.replace(".", r"\.").replace("(", r"\(")):
        AuditSettings.from_cfg(option)


def test_settings_take_a_scalar_as_a_one_element_list() -> None:
    s = AuditSettings.from_cfg({"fpr_levels": 0.01, "svm_mia": {"C": 5, "gamma": 0.1}})
    assert s.fpr_levels == (0.01,) and s.svm_mia["C"] == (5.0,) and s.svm_mia["gamma"] == (0.1,)


@pytest.mark.parametrize("arg,match", [
    ("attack.ci.level=1.5", "attack.ci.level"), ("attack.ci.n_boot=5", "attack.ci.n_boot=5"),
    ("attack.svm_mia.cv=0", "attack.svm_mia.cv=0"),
    ("report.shareable.eps=-1", "report.shareable.eps"), ("report.shareable.enabled=abc", "report.shareable.enabled"),
    ("report.shareable.n_components=1000", "report.shareable.n_components=1000"),
    ("report.shareable.k=2.7", "report.shareable.k=2.7"),
])
def test_duck_audit_checks_options_before_any_work(run_cli, synthetic_ckpt: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, arg, match) -> None:
    monkeypatch.setenv("DUCK_CACHE_DIR", str(tmp_path / "cache"))
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, *CLI_ATTACK, *FORGET_1, f"ckpt={synthetic_ckpt}", arg)
    assert code == 2 and match in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: ")
    assert written_files(run_dir) == set() and not (tmp_path / "cache" / "store-v1" / "shadow_banks").exists()


def test_duck_audit_cache_dir_that_is_a_file(run_cli, synthetic_ckpt: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "cachefile"
    f.write_text("x")
    monkeypatch.setenv("DUCK_CACHE_DIR", str(f))
    code, _, err, run_dir = run_cli("audit", *SYNTH_ARGS, *CLI_ATTACK, *FORGET_1, f"ckpt={synthetic_ckpt}")
    assert code == 2 and "DUCK_CACHE_DIR" in err and "Traceback" not in err, err
    assert written_files(run_dir) == set()
