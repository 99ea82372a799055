"""Bad ``duck-bench`` settings fail with DuckInputError naming ``bench.<key>`` before any work."""

import dataclasses
import importlib

import pytest
from omegaconf import OmegaConf

from duck.errors import DuckInputError
from duck.pipeline.config import conf_dir
from duck.schema import plain

CASES = [
    ("kmeans", "n_deletions=-5", "bench.n_deletions"), ("kmeans", "n_deletions=abc", "bench.n_deletions"),
    ("kmeans", "n_deletions=0", "bench.n_deletions"),
    ("kmeans", "max_deletion_fraction=-0.1", "bench.max_deletion_fraction"),
    ("kmeans", "baseline_sample=-1", "bench.baseline_sample"), ("kmeans", "reference_inits=0", "bench.reference_inits"),
    ("kmeans", "gaussian.n=-5", "bench.gaussian.n"), ("kmeans", "gaussian.k=abc", "bench.gaussian.k"),
    ("kmeans", "gaussian.center_std=-1", "bench.gaussian.center_std"), ("kmeans", "replicates=0", "bench.replicates"),
    ("kmeans", "device=foo", "bench.device"), ("kmeans", "qkmeans.gamma=2", "bench.qkmeans"),
    ("lsh", "n_queries=0", "bench.n_queries"), ("lsh", "n_queries=abc", "bench.n_queries"),
    ("lsh", "n_tuning_queries=0", "bench.n_tuning_queries"), ("lsh", "min_neighbours=100000", "bench.min_neighbours"),
    ("lsh", "frac_queries=1.5", "bench.frac_queries"), ("lsh", "samples_per_neighbour=0", "bench.samples_per_neighbour"),
    ("lsh", "L=abc", "bench.L='abc' must be auto or an integer >= 1"), ("lsh", "repeats=0", "bench.repeats"),
    ("lsh", "device=foo", "bench.device='foo' is not a device; use cpu, cuda, cuda:N or auto"),
    ("lsh", "k_max=-1", "bench.k_max"), ("lsh", "fn_target=2", "bench.fn_target"),
    ("lsh", "min_neighbours=-3", "bench.min_neighbours"),
    ("dp", "n_runs=0", "bench.n_runs"), ("dp", "eps_count=[abc]", "bench.eps_count[0]"),
    ("dp", "eps_count=[0.5,1.0]", "bench.eps_count[1]"), ("dp", "delta=abc", "bench.delta"),
    ("dp", "real_outlier_fraction=2", "bench.real_outlier_fraction"),
    ("dp", "dp_check_draws=1000000000000", "bench.dp_check_draws"), ("dp", "dp_check_draws=-1", "bench.dp_check_draws"),
    ("dp", "eps_subspace=[0]", "bench.eps_subspace[0]"), ("dp", "h=[0]", "bench.h[0]"),
    ("dp", "timing_eps=[0]", "bench.timing_eps[0]"), ("dp", "timing_r=[0]", "bench.timing_r[0]"),
    ("spn", "n_train=0", "bench.n_train"), ("spn", "n_removals=abc", "bench.n_removals"),
    ("spn", "train_repeats=0", "bench.train_repeats"), ("spn", "rdc_threshold=abc", "bench.rdc_threshold"),
    ("spn", "loglik_repeats=0", "bench.loglik_repeats"), ("spn", "loglik_rows=0", "bench.loglik_rows"),
    ("audit", "quick=true|quick_throughput.n_models=0", "bench.quick_throughput.n_models"),
    ("audit", "quick=true|quick_throughput.bank=foo", "bench.quick_throughput.bank"),
    ("audit", "quick=true|quick_throughput.bank=retrain", "bench.quick_throughput.forget_classes"),
    ("audit", "quick=true|quick_throughput.matmul_convs=maybe", "bench.quick_throughput.matmul_convs"),
    ("audit", "device=foo", "bench.device"), ("audit", "quick=true|quick_setup.model.width=0", "bench.quick_setup.model.width"),
    ("audit", "quick=true|quick_setup.recipe=foo", "bench.quick_setup.recipe"),
    ("audit", "quick=true|quick_setup.data.name=cifar11", "bench.quick_setup.data.name='cifar11' is not a data set"),
    ("audit", "quick=true|quick_setup.data={name: synthetic, img_size: abc}", "bench.quick_setup.data.img_size"),
    ("audit", "quick=true|quick_setup.data={name: tinyimagenet}|quick_setup.model={name: nosuchnet}",
     "unknown model 'nosuchnet'; use one of"),
    ("audit", "quick=true|correctness.attack.n_shadow=3", "attack.n_shadow=3"),  # quick replaced it with 4 unchecked
    ("audit", "forgetting.methods=[duck]", "bench.forgetting.methods"),
    ("audit", "forgetting.methods=[duck,nosuch]", "nosuch"),
    ("audit", "quick=true|quick_forgetting.n_unlearned=2", "bench.quick_forgetting.n_unlearned"),
    ("audit", "forgetting.enabled=maybe", "bench.forgetting.enabled"),
    ("audit", "correctness.attack.mode=foo", "attack.mode"), ("audit", "correctness.attack.ci.level=2", "attack.ci.level"),
    ("compare", "fraction=0", "bench.fraction"), ("compare", "fraction=abc", "bench.fraction"),
    ("compare", "classes=[abc]", "bench.classes[0]"), ("compare", "classes=[1.5]", "bench.classes[0]"),
    ("compare", "original_seed=-1", "bench.original_seed"),
    ("duck", "fraction=2", "bench.fraction"), ("duck", "recipe_epochs=[abc]", "bench.recipe_epochs[0]"),
    ("duck", "recipe_epochs=[1.5]", "bench.recipe_epochs[0]"), ("duck", "classes=[1.5]", "bench.classes[0]"),
    ("verdict", "settings=[2]", "bench.settings[0]"), ("verdict", "variants=[cauchy]", "bench.variants[0]"),
    ("verdict", "replicates=5", "bench.replicates"), ("verdict", "margin=1", "bench.margin"),
    ("verdict", "fractions=[-0.1]", "bench.fractions[0]"), ("compare", "default_rows=maybe", "bench.default_rows"),
    ("loggers", "repetitions=0", "bench.repetitions"),
    ("loggers", "loggers=[neptune]", "bench.loggers[0]='neptune'; choose one of ['csv', 'tensorboard'"),
    ("loggers", "args=oops", "bench.args"),
]


def _cfg(suite: str, overrides: str):
    base = OmegaConf.load(conf_dir() / "bench" / f"{suite}.yaml")
    return OmegaConf.merge(base, OmegaConf.from_dotlist(overrides.split("|")))


@pytest.mark.parametrize("suite, overrides, key", CASES)
def test_bad_setting_fails_before_work(suite, overrides, key):
    module = importlib.import_module(f"benchmarks.{suite}")
    with pytest.raises(DuckInputError, match=key.replace(".", r"\.").replace("[", r"\[")):
        module.run(_cfg(suite, overrides))


@pytest.mark.parametrize("suite", ["audit", "compare"])
def test_directory_that_is_a_file(suite, tmp_path):
    path = tmp_path / "afile"
    path.write_text("x")
    key = "cache_dir" if suite == "audit" else "out_dir"
    with pytest.raises(DuckInputError, match=f"bench.{key}"):
        importlib.import_module(f"benchmarks.{suite}").run(_cfg(suite, f"{key}={path}"))


def test_audit_bench_knows_the_shape_of_every_registered_data_set():
    from benchmarks.audit import _DATA_SHAPES
    from duck.data.registry import list_datasets

    assert sorted(_DATA_SHAPES) == list_datasets()


SUITES = ["api", "audit", "bias", "compare", "dp", "duck", "kmeans", "loggers", "lsh", "spn", "verdict"]


def _settings(suite: str):
    from benchmarks.common import SUITE_SETTINGS

    importlib.import_module(f"benchmarks.{suite}")
    return SUITE_SETTINGS[suite]


def test_every_suite_has_typed_settings():
    assert SUITES == sorted(p.stem for p in (conf_dir() / "bench").glob("*.yaml"))
    assert all(_settings(s).suite == s for s in SUITES)


@pytest.mark.parametrize("suite", SUITES)
def test_unknown_bench_keys_are_refused(suite):
    """``+bench.foo=1`` (or a misspelt key) was ignored and the full default run started."""
    cls = _settings(suite)
    cls.parse(_cfg(suite, "name=" + suite))
    with pytest.raises(DuckInputError, match=rf"duck-bench {suite} has no setting\(s\) bench.foo; its settings"):
        cls.parse(_cfg(suite, "foo=1"))
    with pytest.raises(DuckInputError, match=rf"bench.name='other' is not this suite \({suite}\)"):
        cls.parse(_cfg(suite, "name=other"))


@pytest.mark.parametrize("suite", SUITES)
def test_each_yaml_is_a_preset_of_its_settings(suite):
    """conf/bench/SUITE.yaml declares exactly the class's options, and its values other than nested mappings are
    the class's defaults (a Python caller of the suite gets the YAML's run; nested groups such as the audit's setups
    or the k-means classes' keywords are the YAML's own)."""
    cls = _settings(suite)
    raw = OmegaConf.to_container(OmegaConf.load(conf_dir() / "bench" / f"{suite}.yaml"), resolve=True)
    assert set(raw) == {f.name for f in dataclasses.fields(cls)}
    from_yaml, defaults = cls.parse(raw), cls.parse({})
    for key, value in raw.items():
        if not isinstance(value, dict):
            assert plain(from_yaml[key]) == plain(defaults[key]), (suite, key)


def test_audit_throughput_of_the_retrain_bank_trains_every_model_on_the_retain_set(monkeypatch):
    """bank=retrain: every model (sequential and batched) trains on the retain set with the retrain seeds."""
    import benchmarks.audit as audit
    from attacks.retrain_bank import retrain_seed

    seen = []
    real = audit.train_batched

    def spy(models, dataset, recipe, index_sets, seeds, **kw):
        seen.append(([len(ix) for ix in index_sets], list(seeds)))
        return real(models, dataset, recipe, index_sets, seeds, **kw)

    monkeypatch.setattr(audit, "train_batched", spy)
    cfg = _cfg("audit", "quick=true|quick_throughput.bank=retrain|quick_throughput.forget_classes=[3]"
                        "|quick_throughput.recipe_overrides.epochs=1|quick_throughput.model.width=4")
    cfg.throughput.setups = [cfg.quick_throughput]
    rows = audit.throughput(cfg, audit.resolve_device("cpu"))
    sizes, seeds = seen[-1]  # the timed batched call (the first is the warm-up on a few batches)
    assert rows[0]["bank"] == "retrain"
    assert seeds == [retrain_seed(0, k) for k in range(2)]
    labels = audit.build_datasets("digits").train.labels
    n_retain = int((labels != 3).sum())
    assert sizes == [n_retain, n_retain] and n_retain < len(labels) and n_retain != len(labels) // 2
