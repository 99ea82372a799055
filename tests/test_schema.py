"""Typed settings (duck/schema.py, issue 37 item 1): each option declared once with its rule; every shipped config
parses into its type; a job parses each group once; the rules accept exactly their domain; the docs' table is
the declarations'."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import SYNTH_ARGS
from omegaconf import OmegaConf

from attacks.audit import AuditSettings, CISettings, ForgettingSettings, SVMSettings
from duck import schema
from duck.analysis.options import AnalysisSettings, DensitySettings, TSNESettings
from duck.data.scenarios import ScenarioSettings
from duck.errors import DuckInputError
from duck.pipeline.config import JobSettings, Trust, compose, conf_dir
from duck.pipeline.job import SubsetSettings
from duck.pipeline.tracking import LoggerSettings, logger_settings
from duck.pipeline.tune import TuneSettings
from duck.privacy.shareable import ShareableSettings
from duck.schema import REQUIRED, Either, Flag, Integer, OneOf, Real
from duck.training import Recipe, RecipeSettings

GROUPS = (JobSettings, Trust, SubsetSettings, ScenarioSettings, RecipeSettings, AuditSettings, CISettings, SVMSettings,
          ForgettingSettings, ShareableSettings, AnalysisSettings, DensitySettings, TSNESettings, LoggerSettings, TuneSettings)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


# ----------------------------------------------------------------------------------- shipped configs round-trip
@pytest.mark.parametrize("name", ["train", "unlearn", "audit", "run"])
def test_every_job_config_parses_into_its_types(name):
    cfg = compose(name, [])
    job, trust = JobSettings.parse(cfg), Trust.parse(cfg)
    for parsed in (job, trust):  # every declared key is the config's own value
        for key in parsed:
            if key in cfg:
                assert parsed[key] == cfg[key], (name, key)
    assert SubsetSettings.parse(cfg.data.subset) == OmegaConf.to_container(cfg.data.subset)
    if "attack" in cfg:
        attack = AuditSettings.from_cfg(OmegaConf.to_container(cfg.attack, resolve=True))
        assert dict(attack.forgetting) == {**dict(ForgettingSettings()), **OmegaConf.to_container(cfg.attack.forgetting)}
        assert dict(attack.ci) == OmegaConf.to_container(cfg.attack.ci)
        assert {k: list(attack.svm_mia[k]) if isinstance(attack.svm_mia[k], tuple) else attack.svm_mia[k]
                for k in cfg.attack.svm_mia} == OmegaConf.to_container(cfg.attack.svm_mia)
    if "report" in cfg:
        report = OmegaConf.to_container(cfg.report, resolve=True)
        assert ShareableSettings.parse(report["shareable"]) == report["shareable"]
        assert AnalysisSettings.parse(report["analysis"]) == report["analysis"]


@pytest.mark.parametrize("path", sorted((conf_dir() / "data").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_data_config_subset_parses(path):
    node = OmegaConf.load(path)
    if "subset" in node:
        assert dict(SubsetSettings.parse(OmegaConf.to_container(node.subset))) == {"n_train": None, "n_test": None,
                                                                                   "seed": 0}


@pytest.mark.parametrize("name", sorted(p.stem for p in (conf_dir() / "logger").glob("*.yaml")))
def test_every_logger_config_parses_into_its_type(name, monkeypatch):
    from duck.pipeline import tracking

    monkeypatch.setattr(tracking, "module_available", lambda module: True)  # the extras need not be installed here
    monkeypatch.setattr(tracking, "_PARSED_LOGGERS", {})
    raw = OmegaConf.to_container(compose("run", [f"logger={name}"]).logger, resolve=True)
    parsed = logger_settings(raw)
    assert {k: parsed[k] for k in raw} == raw and logger_settings(raw) is parsed  # parsed once, then reused


@pytest.mark.parametrize("name", sorted(p.stem for p in (conf_dir() / "recipe").glob("*.yaml")))
def test_every_recipe_parses_into_its_type(name):
    raw = OmegaConf.to_container(compose("run", [f"recipe={name}"]).recipe, resolve=True)
    parsed = RecipeSettings.parse(raw)
    assert dict(parsed) == {"scheduler": None, "label_smoothing": 0.0, **raw}
    assert dataclasses.asdict(Recipe.from_cfg(raw)) == dict(parsed)


def test_a_recipe_without_a_required_option_is_refused_by_name():
    with pytest.raises(DuckInputError, match=r"^recipe\.optimizer is required \(a torch\.optim class .*set recipe\.optimizer="):
        RecipeSettings.parse({"epochs": 1, "batch_size": 8})
    with pytest.raises(DuckInputError, match=r"^unknown recipe option\(s\) \['lr'\]"):
        RecipeSettings.parse({"epochs": 1, "batch_size": 8, "lr": 0.1, "optimizer": {"_target_": "torch.optim.SGD"}})
    with pytest.raises(DuckInputError, match=r"^recipe\.optimizer\.lr must be a finite number > 0"):
        RecipeSettings.parse({"epochs": 1, "batch_size": 8, "optimizer": {"_target_": "torch.optim.SGD", "lr": 0}})
    with pytest.raises(DuckInputError, match=r"^recipe\.scheduler=3 must be a mapping with _target_"):
        RecipeSettings.parse({"epochs": 1, "batch_size": 8, "optimizer": {"_target_": "torch.optim.SGD"},
                              "scheduler": 3})


@pytest.mark.parametrize("name", sorted(p.stem for p in (conf_dir() / "attack").glob("*.yaml")))
def test_every_attack_config_parses(name):
    raw = OmegaConf.to_container(compose("run", [f"attack={name}"]).attack, resolve=True)
    settings = AuditSettings.from_cfg(raw)
    assert isinstance(settings.ci, CISettings) and isinstance(settings.forgetting, ForgettingSettings)
    assert {k: settings.forgetting[k] for k in raw.get("forgetting", {})} == raw.get("forgetting", {})


@pytest.mark.parametrize("suite", ["compare", "audit"])
def test_bench_forgetting_blocks_parse(suite):
    node = OmegaConf.load(conf_dir() / "bench" / f"{suite}.yaml")
    raw = OmegaConf.to_container(node.forgetting)
    keys = set(raw) & {f.name for f in dataclasses.fields(ForgettingSettings)}
    if keys == set(raw):  # compare's block is attack.forgetting's own options
        parsed = ForgettingSettings.parse(raw, "bench.forgetting")
        assert {k: parsed[k] for k in raw} == raw


def test_defaults_are_their_own_rules_fixed_points():
    """A default passes its rule unchanged (a declaration whose default its own rule refuses fails here)."""
    for group in GROUPS:
        for f in dataclasses.fields(group):
            if f.default is not REQUIRED:
                assert f.metadata["rule"](f.default, f.name) == f.default, (group.__name__, f.name)
        if all(f.default is not REQUIRED for f in dataclasses.fields(group)):
            assert group.parse(None) == group()


# ---------------------------------------------------------------------------------------- one parse per job
def test_a_job_parses_each_settings_group_once(run_cli, tmp_path, monkeypatch):
    from duck.pipeline import tracking

    counts = schema.PARSES.__class__()
    monkeypatch.setattr(schema, "PARSES", counts)
    monkeypatch.setattr(tracking, "_PARSED_LOGGERS", {})  # as in a fresh process
    code, _, err, _ = run_cli("run", *SYNTH_ARGS, "recipe.epochs=1", "method=finetune", "audit=true",
                              "attack.n_shadow=4", "attack.svm_mia.enabled=false", "report.shareable.enabled=false",
                              "report.analysis.enabled=false", "+data.subset.n_train=200",
                              f"cache_dir={tmp_path / 'cache'}")
    assert code == 0, err
    groups = [g.__name__ for g in GROUPS if g is not TuneSettings]  # not a search trial: no tune block
    assert {k: counts[k] for k in groups} == dict.fromkeys(groups, 1) and counts["TuneSettings"] == 0, counts


# ----------------------------------------------------------------------------------------------- the rules
@pytest.mark.parametrize("rule, good, bad", [
    (Integer(3), [3, 4, np.int64(7), 10**12], [2, 0, -1, True, 3.0, "3", None]),
    (Integer(0, 5, " (why)"), [0, 5, np.int32(2)], [-1, 6, False, 2.5]),
    (Real(0.0, True, 1.0, hi_open=True), [1e-9, 0.5, 1 - 1e-9, np.float32(0.25)], [0, 0.0, 1, 1.0, math.nan, True, "0.5"]),
    (Real(0.0, False, 1.0), [0, 0.0, 1, 1.0], [-1e-12, 1.0000001, math.inf, None]),
    (Real(0.5, False), [0.5, 1e300], [0.4999, -math.inf, math.inf]),
    (Flag(), [True, False, np.bool_(True)], ["no", "true", 1, 0, None]),
    (OneOf(("a", "b")), ["a", "b"], ["c", None, True]),
    (Either(("auto", None), Integer(1)), ["auto", None, 1, 8], [0, "many", True, 1.5]),
    (Either(("auto",), Flag()), ["auto", True, False], ["Auto", None, 1]),
])
def test_rules_accept_exactly_their_domain(rule, good, bad):
    for value in good:
        out = rule(value, "k")
        assert out == value and type(out) in (int, float, bool, str, type(None)), value
    for value in bad:
        with pytest.raises(DuckInputError, match=r"^k\b"):  # one message naming the key first
            rule(value, "k")


def test_messages_name_the_key_the_value_and_what_is_allowed():
    with pytest.raises(DuckInputError, match=r"^k=6 must be at most 5 \(why\)$"):
        Integer(0, 5, " (why)")(6, "k")
    with pytest.raises(DuckInputError, match=r"^k=2 must be an integer >= 3$"):
        Integer(3)(2, "k")
    with pytest.raises(DuckInputError, match=r"^threads=0 must be auto, null or an integer >= 1$"):
        Either(("auto", None), Integer(1))(0, "threads")
    with pytest.raises(DuckInputError, match=r"^progress='x' must be auto, true or false$"):
        Either(("auto",), Flag())("x", "progress")
    with pytest.raises(DuckInputError, match=r"^k='c'; choose one of \['a', 'b'\]$"):
        OneOf(("a", "b"))("c", "k")
    with pytest.raises(DuckInputError, match=r"^data\.subset\.n_train=1 must be an integer >= 2, or null"):
        SubsetSettings.parse({"n_train": 1})


def test_parse_refuses_unknown_keys_and_non_mappings_but_open_groups_skip_other_keys():
    with pytest.raises(DuckInputError, match=r"^unknown attack\.forgetting option\(s\) \['n_boot'\]; known: \["):
        ForgettingSettings.parse({"n_boot": 5})
    with pytest.raises(DuckInputError, match=r"^bench\.forgetting\.margin must be"):
        ForgettingSettings.parse({"margin": 1.0}, "bench.forgetting")
    with pytest.raises(DuckInputError, match=r"^attack\.ci=\[1\] must be a mapping of options$"):
        CISettings.parse([1])
    assert JobSettings.parse({"seed": 3, "data": {"name": "digits"}}).seed == 3  # the root's other keys: groups
    with pytest.raises(DuckInputError, match=r"^seed=4294967296 must be at most 4294967295"):
        JobSettings.parse({"seed": 2**32})
    with pytest.raises(DuckInputError, match=r"^expect_acc=1\.5"):
        Trust.parse({"expect_acc": 1.5})


def test_settings_are_frozen_read_only_mappings():
    f = ForgettingSettings.parse({"margin": 0.1, "n_unlearned": np.int64(5)})
    assert f.margin == f["margin"] == 0.1 and type(f.n_unlearned) is int
    assert dict(f) == {**{x.name: x.default for x in dataclasses.fields(ForgettingSettings)}, "margin": 0.1,
                       "n_unlearned": 5}
    assert f == dict(f) and f != {**dict(f), "margin": 0.2} and hash(f) == hash(ForgettingSettings.parse(dict(f)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        f.margin = 0.5  # type: ignore[misc]
    with pytest.raises(KeyError):
        f["nope"]
    assert f.replace(margin=0.3).margin == 0.3 and f.margin == 0.1
    with pytest.raises(DuckInputError, match=r"^attack\.forgetting\.margin must be a finite number > 0"):
        f.replace(margin=0)
    with pytest.raises(DuckInputError, match="unknown attack.forgetting option 'nope'"):
        f.replace(nope=1)
    audit = AuditSettings.from_cfg({"forgetting": {"margin": 0.1}})
    assert dataclasses.asdict(audit)["forgetting"] == dict(f) | {"n_unlearned": 8}
    import copy
    import pickle

    for again in (pickle.loads(pickle.dumps(audit)), copy.deepcopy(audit)):  # joblib / submitit sweeps pickle jobs
        assert again == audit and type(again.forgetting) is ForgettingSettings and again.forgetting.margin == 0.1


# ------------------------------------------------------------------------------------------------- the docs
def test_docs_table_is_the_declarations():
    text = DOCS.read_text()
    block = re.search(r"<!-- settings table: begin -->\n(.*?)\n<!-- settings table: end -->", text, re.S)
    assert block, "docs/configuration.md lost its generated table"
    assert block.group(1) == table(), \
        "docs/configuration.md: regenerate with python -c 'from tests.test_schema import table; print(table())'"


def table() -> str:
    """The generated table, for docs/configuration.md."""
    from duck.report.tables import markdown_table

    return markdown_table(["key", "default", "allowed", "meaning"],
                          [(f"`{k}`", f"`{d}`", a, m) for group in GROUPS for k, d, a, m in group.describe()])


def test_settings_are_written_to_json_as_their_options(tmp_path):
    import json

    from duck.io import atomic_save_json

    f = ForgettingSettings.parse({"margin": 0.1})
    atomic_save_json(tmp_path / "f.json", {"forgetting": f, "ci": CISettings()})
    assert json.loads((tmp_path / "f.json").read_text()) == {"forgetting": dict(f), "ci": dict(CISettings())}


# ----------------------------------------------------------------------------------- the structural rules
def test_list_of_checks_each_item_by_its_index():
    rule = schema.ListOf(Integer(0))
    assert rule([1, 2], "bench.seeds") == (1, 2) and rule((3,), "k") == (3,)
    for bad, match in (("1,2", r"^bench\.seeds='1,2' must be a list, e.g\. bench\.seeds=\[\.\.\.\]$"),
                       ({"a": 1}, r"must be a list"), ([], r"^bench\.seeds=\[\] must list at least one value$"),
                       ([1, -1], r"^bench\.seeds\[1\]=-1 must be an integer >= 0$")):
        with pytest.raises(DuckInputError, match=match):
            rule(bad, "bench.seeds")
    assert schema.ListOf(Integer(0), nonempty=False)([], "k") == ()
    assert schema.ListOf(Integer(0), nonempty=False).describe() == "a list, each an integer >= 0"
    assert rule.describe() == "a non-empty list, each an integer >= 0"


def test_text_directory_and_device_rules(tmp_path):
    assert schema.Text()("x", "k") == "x"
    for bad in ("", "  ", 3, None):
        with pytest.raises(DuckInputError, match=r"^k=.* must be a non-empty string$"):
            schema.Text()(bad, "k")
    assert schema.Directory()(str(tmp_path), "k") == str(tmp_path)
    assert schema.Directory()(str(tmp_path / "new"), "k") == str(tmp_path / "new")  # made later
    (tmp_path / "f").write_text("x")
    with pytest.raises(DuckInputError, match=r"is an existing file, not a directory"):
        schema.Directory()(str(tmp_path / "f"), "k")
    with pytest.raises(DuckInputError, match=r"^k='' must be a directory path$"):
        schema.Directory()("", "k")
    assert schema.Device()("cpu", "k") == "cpu" and schema.Device()("auto", "k") == "auto"
    with pytest.raises(DuckInputError, match=r"^bench\.device='tpu' is not a device"):
        schema.Device()("tpu", "bench.device")


def test_either_keeps_a_structures_own_message_and_words_a_scalars():
    with pytest.raises(DuckInputError, match=r"^k\[1\]=-2 must be an integer >= 0$"):
        Either((None,), schema.ListOf(Integer(0)))([0, -2], "k")
    with pytest.raises(DuckInputError, match=r"^k=-2 must be null or an integer >= 0$"):
        Either((None,), Integer(0))(-2, "k")


def test_parse_takes_config_nodes_and_passes_parsed_settings_through():
    node = OmegaConf.create({"margin": 0.1, "x": "${margin}"})
    schema.PARSES.clear()
    parsed = ForgettingSettings.parse(OmegaConf.create({"base": 0.1, "f": {"margin": "${base}"}}).f)
    assert parsed.margin == 0.1 and schema.PARSES["ForgettingSettings"] == 1  # the interpolation resolved
    assert ForgettingSettings.parse(parsed) is parsed and schema.PARSES["ForgettingSettings"] == 1
    with pytest.raises(DuckInputError, match=r"unknown attack\.forgetting option\(s\) \['x'\]"):
        ForgettingSettings.parse(node)


def test_plain_turns_settings_and_tuples_into_json_values():
    nested = {"a": (1, (2, 3)), "b": CISettings.parse({})}
    assert schema.plain(nested) == {"a": [1, [2, 3]], "b": dict(CISettings.parse({}))}
    assert type(schema.plain(nested)["b"]) is dict and schema.plain(3.5) == 3.5
