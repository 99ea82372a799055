"""``duck-bench audit``: the LiRA audit's targets (issue 4), measured as ratios in one run.

1. **Correctness** — per setup (digits; Fashion-MNIST on a stated training subset) and scenario: train the
   original, unlearn with DUCK, retrain the oracle, audit all three with one shadow bank. Target: the
   original is separated (lower end of its AUC's CI above 0.5 and TPR at 1 % FPR above 1 %), the oracle is
   at chance (AUC within two standard errors of 0.5); DUCK's numbers are reported beside them.
2. **Throughput** — ``n_models`` bank models (LiRA shadows, or with ``bank: retrain`` the forgetting audit's retrain
   bank on the retain set of ``forget_classes``) trained one after another with the recipe
   (``train_classifier``) versus batched (``attacks.batched.train_batched``), same epochs and data:
   models per second and the ratio; also what ``attack.mode=auto`` would pick (calibration) and the
   largest parameter difference between the two sets of models (they should be equal).
3. **Reuse** — the first audit of a setup (trains the bank) versus a second identical audit (cache hit).
4. **Forgetting audit** — a first method's forgetting audit (trains the retrain bank and the controls) versus
   a second method's on the same forget set (reuses them): :mod:`benchmarks.audit_forgetting`.

Timings are wall-clock on the machine in ``bench.json``'s ``machine`` field (shared with other jobs when
this suite was run for the README: see docs/audit.md).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar

import numpy as np
import torch
from omegaconf import OmegaConf

from attacks.audit import audit_models
from attacks.batched import calibrate, train_batched
from attacks.retrain_bank import retrain_seed
from attacks.shadow import keep_matrix, shadow_seed
from benchmarks.audit_forgetting import ForgettingReuse, forgetting_reuse, forgetting_table
from benchmarks.common import THREADS, BenchSettings, markdown_table, timed
from duck.data.base import DatasetSplits, subset_splits
from duck.data.registry import build_datasets
from duck.data.scenarios import Scenario, build_scenario
from duck.errors import DuckInputError
from duck.metrics import scenario_aus, split_accuracies
from duck.models import create_model
from duck.schema import SEED, Check, Device, Directory, Either, Flag, Group, Integer, ListOf, Real, Settings, option, settings
from duck.store import STORE_FOLDER
from duck.training import Recipe, train_classifier
from duck.utils import resolve_device


def _conf_dir() -> Path:
    from duck.pipeline.config import conf_dir

    return conf_dir()


def load_recipe(name: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """``conf/recipe/NAME.yaml`` (interpolations such as ``T_max: ${recipe.epochs}`` resolved)."""
    node = OmegaConf.create({"recipe": OmegaConf.load(_conf_dir() / "recipe" / f"{name}.yaml")})
    for k, v in (overrides or {}).items():
        OmegaConf.update(node, f"recipe.{k}", v)
    return Recipe.from_cfg(OmegaConf.to_container(node, resolve=True)["recipe"])


def _trainer_cfg(device: torch.device) -> dict[str, Any]:
    return {"accelerator": "gpu" if device.type == "cuda" else "cpu", "devices": 1}


def _factory(model_cfg: dict[str, Any], data: DatasetSplits):
    kw = dict(model_cfg)
    name = kw.pop("name")
    return lambda: create_model(name, data.num_classes, data.in_chans, data.img_size, **kw)


def _duck_unlearn(original: torch.nn.Module, data: DatasetSplits, scenario: Scenario, recipe: Recipe,
                  factory: Any, original_acc: dict[str, float], seed: int,
                  trainer_cfg: dict[str, Any]) -> tuple[Any, float]:
    """DUCK with conf/method/duck.yaml (its presets for this data set) on a copy of ``original``."""
    from duck.unlearn import UnlearnData, create_unlearner

    hp = OmegaConf.to_container(OmegaConf.load(_conf_dir() / "method" / "duck.yaml"), resolve=True)
    hp.pop("name")
    udata = UnlearnData(train=data.train, scenario=scenario, num_classes=data.num_classes,
                        dataset_name=data.name, original_acc=original_acc, augment=data.augment,
                        recipe=recipe, model_factory=factory)
    unlearner = create_unlearner("duck", copy.deepcopy(original), udata, hp, seed=seed,
                                 trainer_cfg=trainer_cfg)
    result = unlearner.unlearn()
    return result.model, result.time_s


def _scenario(kind: str, data: DatasetSplits, spec: dict[str, Any], seed: int) -> Scenario:
    kw = {k: v for k, v in spec.items() if k != "kind"}
    return build_scenario(kind, data.train.labels, data.test.labels, data.num_classes, seed=seed, **kw)


def _check(name: str, lira: dict[str, Any]) -> str:
    from attacks.audit import lira_verdict as verdict

    if name == "original":
        ok = lira["auc_ci"][0] > 0.5 and lira["tpr_at_fpr"]["0.01"] > 0.01
        return f"{'met' if ok else 'NOT met'}: CI low > 0.5 and TPR@1% > 1%"
    if name == "retrained":
        ok = abs(lira["auc"] - 0.5) <= 2 * lira["auc_se"]
        return f"{'met' if ok else 'NOT met'}: AUC within 2 SE of 0.5"
    return f"reported: {verdict(lira)}"


def correctness(cfg: AuditBench, cache: Path, out: Path,
                device: torch.device) -> tuple[list[dict], list[dict]]:
    """Audit original / DUCK / oracle per setup and scenario; returns (rows, reuse rows)."""
    from duck.report import write_report

    rows, reuse = [], []
    attack = dict(cfg.correctness.attack)
    trainer_cfg = _trainer_cfg(device)
    seed = int(cfg.seed)
    for setup in cfg.correctness.setups:
        data_kw = dict(setup["data"])
        data = build_datasets(data_kw.pop("name"), **data_kw)
        data = subset_splits(data, setup.get("n_train"), setup.get("n_test"), seed)
        recipe = load_recipe(setup["recipe"], setup.get("recipe_overrides"))
        factory = _factory(setup["model"], data)
        print(f"[audit bench] {setup['name']}: {data.describe()}, E={attack['n_shadow']}", flush=True)
        torch.manual_seed(seed)
        original, orig_s = train_classifier(factory(), data.train, recipe, augment=data.augment, seed=seed,
                                            trainer_cfg=trainer_cfg)
        original.to(device)
        for s_i, spec in enumerate(setup["scenarios"]):
            scenario = _scenario(spec["kind"], data, spec, seed)
            original_acc = split_accuracies(original, data, scenario, device=device)
            torch.manual_seed(seed)
            retrained, retr_s = train_classifier(factory(), data.train, recipe, indices=scenario.retain_idx,
                                                 augment=data.augment, seed=seed, trainer_cfg=trainer_cfg)
            unlearned, duck_s = _duck_unlearn(original, data, scenario, recipe, factory, original_acc, seed,
                                              trainer_cfg)
            models = {"original": original, "unlearned": unlearned, "retrained": retrained.to(device)}
            run = out / f"{setup['name']}_{spec['kind']}"

            def audit(models: dict = models, scenario: Scenario = scenario, run: Path = run) -> dict:
                return audit_models(attack, data, scenario, models, recipe=recipe, model_factory=factory,
                                    augment=data.augment, cache_dir=cache, device=device, seed=seed,
                                    trainer_cfg=trainer_cfg, out_dirs={n: run / n for n in models},
                                    progress=bool(cfg.progress))

            audits, first_s = timed(audit, device)
            if s_i == 0:  # the bank was trained by this first audit of the setup: measure a cache hit
                _, second_s = timed(audit, device)
                bank = audits["original"]["bank"]
                reuse.append({"setup": setup["name"], "first_s": first_s, "second_s": second_s,
                              "ratio": second_s / first_s, "bank_train_s": bank["train_s"],
                              "bank_mode": bank["mode"]})
            summary = []
            for name, model in models.items():
                acc = split_accuracies(model, data, scenario, device=device)
                lira, svm = audits[name]["lira"], audits[name].get("svm_mia") or {}
                rows.append({"setup": setup["name"], "n_train": len(data.train), "scenario": spec["kind"],
                             "model": name, "auc": lira["auc"], "auc_ci": lira["auc_ci"],
                             "auc_se": lira["auc_se"],
                             "tpr_at_fpr": lira["tpr_at_fpr"], "n_members": lira["n_members"],
                             "n_nonmembers": lira["n_nonmembers"], "svm_f1": svm.get("f1"),
                             "svm_chance": svm.get("chance"), "check": _check(name, lira),
                             "aus": scenario_aus(acc, original_acc, scenario)})
                summary.append({"model": name, "AUS": rows[-1]["aus"],
                                "train_forget": acc.get("train_forget"), "test": acc["test"]})
            times = {"original": orig_s, "retrained": retr_s, "duck": duck_s, "audit (first)": first_s}
            write_report(run, summary_rows=summary, audits=audits, config={"bench": setup, "attack": attack},
                         scenario=scenario, run_times=times,
                         title=f"duck-bench audit: {setup['name']} {spec['kind']}")
            for r in rows[-3:]:
                print(f"  {r['scenario']:>20} {r['model']:>9}: AUC {r['auc']:.3f} "
                      f"[{r['auc_ci'][0]:.3f}, {r['auc_ci'][1]:.3f}] TPR@1% {r['tpr_at_fpr']['0.01']:.3f} "
                      f"-> {r['check']}", flush=True)
    return rows, reuse


def throughput(cfg: AuditBench, device: torch.device) -> list[dict]:
    """Sequential (the recipe, ``train_classifier``) vs batched training of the same shadows."""
    rows = []
    trainer_cfg = _trainer_cfg(device)
    for setup in cfg.throughput.setups:
        data_kw = dict(setup["data"])
        data = build_datasets(data_kw.pop("name"), **data_kw)
        data = subset_splits(data, setup.get("n_train"), None, int(cfg.seed))
        recipe = load_recipe(setup["recipe"], setup.get("recipe_overrides"))
        factory = _factory(setup["model"], data)
        n_models, chunk = int(setup["n_models"]), int(setup.get("chunk_size") or setup["n_models"])
        bank = setup.get("bank") or "shadow"
        matmul_convs = bool(setup.get("matmul_convs", False))
        if bank == "retrain":  # the forgetting audit's retrain bank: every model on the retain set, own seed
            retain = _scenario("class_removal", data, {"forget_classes": list(setup["forget_classes"])},
                               int(cfg.seed)).retain_idx
            index_sets = [retain] * n_models
            seeds = [retrain_seed(int(cfg.seed), k) for k in range(n_models)]
        else:  # LiRA's shadow bank: a random half of the training set each
            keep = keep_matrix(max(2, n_models + n_models % 2), len(data.train), int(cfg.seed))
            index_sets = [np.flatnonzero(keep[k]) for k in range(n_models)]
            seeds = [shadow_seed(int(cfg.seed), k) for k in range(n_models)]

        def fresh(k: int) -> Any:
            torch.manual_seed(seeds[k])
            return factory()

        print(f"[audit bench] throughput {setup['name']} ({bank} bank): {n_models} x {setup['model']['name']} "
              f"({recipe.epochs} epochs, ~{len(index_sets[0])} samples each)", flush=True)

        def sequential() -> list[Any]:
            return [train_classifier(fresh(k), data.train, recipe, indices=index_sets[k],
                                     augment=data.augment, seed=seeds[k], trainer_cfg=trainer_cfg)[0]
                    for k in range(n_models)]

        def batched() -> list[Any]:
            out = []
            for start in range(0, n_models, chunk):
                ks = list(range(start, min(n_models, start + chunk)))
                out += train_batched([fresh(k) for k in ks], data.train, recipe, [index_sets[k] for k in ks],
                                     [seeds[k] for k in ks], augment=data.augment, device=device,
                                     matmul_convs=matmul_convs)
            return out

        # untimed warm-up of both paths (one epoch on a few batches): CUDA context, kernels and library set-up
        # would otherwise land in whichever side is timed first
        warm = dataclasses.replace(recipe, epochs=1)
        few = [ix[: 4 * recipe.batch_size] for ix in index_sets[:2]]
        train_classifier(fresh(0), data.train, warm, indices=few[0], augment=data.augment, seed=seeds[0],
                         trainer_cfg=trainer_cfg)
        train_batched([fresh(k) for k in range(len(few))], data.train, warm, few, seeds[: len(few)],
                      augment=data.augment, device=device, matmul_convs=matmul_convs)
        seq_models, seq_s = timed(sequential, device)
        bat_models, bat_s = timed(batched, device)
        diff = max(_max_diff(a, b) for a, b in zip(seq_models, bat_models, strict=True))
        # control: how far training carries a rounding-sized change (one bias + 1e-7), same seed and data
        perturbed = fresh(0)
        with torch.no_grad():
            perturbed.classifier().bias[0] += 1e-7
        perturbed, _ = train_classifier(perturbed, data.train, recipe, indices=index_sets[0],
                                        augment=data.augment, seed=seeds[0], trainer_cfg=trainer_cfg)
        control = _max_diff(seq_models[0], perturbed)
        cal = calibrate(factory, data.train, recipe, min(chunk, n_models), device=device)
        rows.append({"setup": setup["name"], "bank": bank, "matmul_convs": matmul_convs,
                     "model": setup["model"]["name"], "n_models": n_models,
                     "chunk_size": chunk, "epochs": recipe.epochs, "sequential_s": seq_s, "batched_s": bat_s,
                     "sequential_models_per_s": n_models / seq_s, "batched_models_per_s": n_models / bat_s,
                     "ratio": seq_s / bat_s, "auto_mode": "batched" if cal["speedup"] > 1 else "sequential",
                     "calibrated_speedup": cal["speedup"], "max_param_diff": diff,
                     "control_param_diff": control})
        print(f"  sequential {seq_s:.1f} s, batched {bat_s:.1f} s: {seq_s / bat_s:.2f}x; auto picks "
              f"{rows[-1]['auto_mode']} (calibration {cal['speedup']:.2f}x); max abs dtheta {diff:.2e} "
              f"(control {control:.2e})", flush=True)
    return rows


def _max_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    sa, sb = a.state_dict(), b.state_dict()
    return max(float((sa[n].detach().cpu().double() - sb[n].detach().cpu().double()).abs().max()) for n in sa)


def _pct(v: float) -> str:
    return f"{100 * v:.1f} %"


def _quick(cfg: AuditBench) -> AuditBench:
    """``bench.quick=true``: one small digits setup, 4 shadows, 2 models for throughput (a smoke run); the quick
    parts were checked with the others, so they are swapped in as they are."""
    replace = dataclasses.replace
    return replace(cfg, correctness=replace(cfg.correctness, setups=(cfg.quick_setup,),
                                            attack=MappingProxyType({**cfg.correctness.attack, "n_shadow": 4})),
                   throughput=replace(cfg.throughput, setups=(cfg.quick_throughput,)),
                   forgetting=replace(cfg.quick_forgetting, enabled=cfg.forgetting.enabled))


#: (in_chans, img_size, num_classes) of every registered data set, to build each setup's model once before
#: any work; a setup's data.in_chans / data.img_size / data.num_classes override them (synthetic, imagefolder)
_DATA_SHAPES = {
    "digits": (1, 8, 10), "fashion_mnist": (1, 28, 10), "cifar10": (3, 32, 10), "cifar100": (3, 32, 100),
    "tinyimagenet": (3, 64, 200), "imagefolder": (3, 32, 10), "synthetic": (1, 8, 4),
}


def _check_setup(setup: Any, name: str, throughput_setup: bool) -> None:
    """One ``correctness`` / ``throughput`` setup: sizes, recipe (loaded), model (built), scenario kinds."""
    from duck.data.scenarios import SCENARIOS

    s = setup
    if not isinstance(s, dict) or not isinstance(s.get("data"), dict) or not isinstance(s.get("model"), dict):
        raise DuckInputError(f"{name} must be a mapping with data: {{name: ...}} and model: {{name: ...}}")
    for key in ("n_train", "n_test"):
        Either((None,), Integer(1))(s.get(key), f"{name}.{key}")
    if throughput_setup:
        Integer(1)(s.get("n_models"), f"{name}.n_models")
        Either((None,), Integer(1))(s.get("chunk_size"), f"{name}.chunk_size")
        Either((None,), Flag())(s.get("matmul_convs"), f"{name}.matmul_convs")
        bank = s.get("bank") or "shadow"
        if bank not in ("shadow", "retrain"):
            raise DuckInputError(f"{name}.bank={bank!r}: choose shadow (LiRA's bank) or retrain (the forgetting "
                                 "audit's)")
        forget = s.get("forget_classes")
        if bank == "retrain" and (not isinstance(forget, list) or not forget
                                  or not all(isinstance(c, int) and not isinstance(c, bool) for c in forget)):
            raise DuckInputError(f"{name}.forget_classes={forget!r}: bank=retrain needs a list of class ids "
                                 "(the retain set is every other class)")
    try:
        load_recipe(s.get("recipe"), s.get("recipe_overrides"))
    except FileNotFoundError:
        raise DuckInputError(f"{name}.recipe={s.get('recipe')!r}: no conf/recipe/{s.get('recipe')}.yaml") from None
    except (DuckInputError, ValueError, TypeError, KeyError) as e:
        raise DuckInputError(f"{name}.recipe={s.get('recipe')!r}: {e}") from None
    data_kw = s["data"]
    if data_kw.get("name") not in _DATA_SHAPES:
        raise DuckInputError(f"{name}.data.name={data_kw.get('name')!r} is not a data set; choose one of "
                             f"{', '.join(sorted(_DATA_SHAPES))}")
    in_chans, img_size, num_classes = (
        Integer(1)(data_kw.get(key, default), f"{name}.data.{key}")
        for key, default in zip(("in_chans", "img_size", "num_classes"), _DATA_SHAPES[data_kw["name"]], strict=True)
    )
    for key, value in s["model"].items():  # sizes such as width: a zero builds an empty, silent model
        if key != "name" and isinstance(value, (int, float)) and not isinstance(value, bool):
            Real(0.0, True)(value, f"{name}.model.{key}")
    kw = dict(s["model"])
    try:
        create_model(kw.pop("name", None), num_classes, in_chans, img_size, **kw)
    except Exception as e:  # any failure to build the model is a bad setting
        detail = str(e.args[0] if isinstance(e, KeyError) and e.args else e)  # a KeyError's str() adds quotes
        raise DuckInputError(f"{name}.model={s['model']!r}: {detail.splitlines()[0] if detail else repr(e)}") from None
    for i, spec in enumerate(s.get("scenarios") or []):
        if not isinstance(spec, dict) or spec.get("kind") not in SCENARIOS:
            raise DuckInputError(f"{name}.scenarios[{i}]={spec!r}: kind must be one of {', '.join(SCENARIOS)}")


def _attack(value: Any, key: str) -> Mapping[str, Any]:
    """``bench.correctness.attack``: conf/attack/lira.yaml's options (the rest take their defaults), checked as the
    audit checks them."""
    from attacks.audit import AuditSettings

    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise DuckInputError(f"{key}={value!r} must be a mapping of attack options, e.g. {key}.n_shadow=16")
    try:
        AuditSettings.from_cfg(dict(value))
    except DuckInputError as e:
        raise DuckInputError(f"{key}: {e}") from None
    return MappingProxyType(dict(value))


def _setup(value: Any, key: str) -> dict[str, Any]:
    _check_setup(value, key, False)
    return value


def _throughput_setup(value: Any, key: str) -> dict[str, Any]:
    _check_setup(value, key, True)
    return value


SETUP = Check(_setup, "a mapping with data: {name: ...}, model: {name: ...}, recipe, n_train, n_test, scenarios")
THROUGHPUT_SETUP = Check(_throughput_setup, "a mapping with data, model, recipe, n_models, chunk_size, bank, "
                                            "forget_classes, matmul_convs")


@settings
class CorrectnessPart(Settings):
    """``bench.correctness``: LiRA's separation of the original from the oracle, per setup and scenario."""

    prefix: ClassVar[str] = "bench.correctness"

    enabled: bool = option(True, Flag(), "run this part")
    attack: Mapping[str, Any] = option(None, Check(_attack, "conf/attack/lira.yaml's options"),
                                       "the attack's options (null: its defaults)")
    setups: tuple[dict[str, Any], ...] = option((), ListOf(SETUP, nonempty=False), "the setups (the YAML's)")


@settings
class ThroughputPart(Settings):
    """``bench.throughput``: batched against sequential bank training."""

    prefix: ClassVar[str] = "bench.throughput"

    enabled: bool = option(True, Flag(), "run this part")
    setups: tuple[dict[str, Any], ...] = option((), ListOf(THROUGHPUT_SETUP, nonempty=False),
                                                "the setups (the YAML's)")


@settings
class AuditBench(BenchSettings):
    """conf/bench/audit.yaml (its setups are the defaults of the run; the classes' own are empty)."""

    suite: ClassVar[str] = "audit"

    quick: bool = option(False, Flag(), "only quick_setup / quick_throughput / quick_forgetting, 4 shadows")
    seed: int = option(0, SEED, "the seed")
    device: str = option("auto", Device(), "where the models train")
    threads: int | None = option(1, THREADS, "torch intra-op threads (null: torch's default)")
    cache_dir: str | None = option(None, Either((None,), Directory()),
                                   "null: a fresh cache in the run directory (the first audit trains the bank)")
    progress: bool = option(False, Flag(), "progress bars")
    correctness: CorrectnessPart = option(CorrectnessPart(), Group(CorrectnessPart), "LiRA's correctness")
    throughput: ThroughputPart = option(ThroughputPart(), Group(ThroughputPart), "bank training throughput")
    forgetting: ForgettingReuse = option(ForgettingReuse(), Group(ForgettingReuse), "the forgetting audit's reuse")
    quick_setup: dict[str, Any] | None = option(None, Either((None,), SETUP), "quick=true's correctness setup")
    quick_throughput: dict[str, Any] | None = option(None, Either((None,), THROUGHPUT_SETUP),
                                                     "quick=true's throughput setup")
    quick_forgetting: ForgettingReuse = option(ForgettingReuse(n_unlearned=3, n_retrained=3),
                                               Group(ForgettingReuse), "quick=true's forgetting part")

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.quick and (self.quick_setup is None or self.quick_throughput is None):
            raise DuckInputError("bench.quick=true needs bench.quick_setup and bench.quick_throughput "
                                 "(conf/bench/audit.yaml's)")


def run(cfg: Any) -> dict[str, Any]:
    cfg = AuditBench.parse(cfg)
    if cfg.quick:
        cfg = _quick(cfg)
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    device = resolve_device(cfg.get("device", "auto"))
    try:
        from hydra.core.hydra_config import HydraConfig

        out = Path(HydraConfig.get().runtime.output_dir)
    except ValueError:  # called outside Hydra (tests)
        import tempfile

        out = Path(tempfile.mkdtemp(prefix="duck-bench-audit-"))
    cache = Path(cfg.cache_dir).expanduser() if cfg.get("cache_dir") else out / "cache"
    if cfg.get("cache_dir") is None and any((cache / STORE_FOLDER).glob("shadow_banks/*")):
        raise DuckInputError(f"{cache} already holds shadow banks; the reuse figure needs a cold cache")
    result: dict[str, Any] = {"device": str(device), "torch_threads": torch.get_num_threads()}
    tables = []
    t0 = time.perf_counter()
    if cfg.correctness.enabled:
        rows, reuse = correctness(cfg, cache, out, device)
        result["correctness"], result["reuse"] = rows, reuse
        tables += [correctness_table(rows), reuse_table(reuse)]
    if cfg.throughput.enabled:
        rows = throughput(cfg, device)
        result["throughput"] = rows
        tables.append(throughput_table(rows, device))
    if cfg.forgetting.enabled:
        result["forgetting"] = forgetting_reuse(cfg.forgetting, cache, out)
        tables.append(forgetting_table(result["forgetting"]))
    result["suite_s"] = time.perf_counter() - t0
    result["table"] = "\n\n".join(tables)
    return result


def correctness_table(rows: list[dict]) -> str:
    headers = ["data (train size)", "scenario", "model", "AUC [95 % CI]", "SE", "TPR@0.1%", "TPR@1%",
               "TPR@5%", "members / non-members", "SVM F1 (chance)", "AUS", "target"]
    body = []
    for r in rows:
        lo, hi = r["auc_ci"]
        svm = "" if r["svm_f1"] is None else f"{r['svm_f1']:.3f} ({r['svm_chance']:.2f})"
        tprs = [_pct(r["tpr_at_fpr"][k]) for k in ("0.001", "0.01", "0.05")]
        body.append([f"{r['setup']} ({r['n_train']})", r["scenario"], r["model"],
                     f"{r['auc']:.3f} [{lo:.3f}, {hi:.3f}]", f"{r['auc_se']:.3f}", *tprs,
                     f"{r['n_members']} / {r['n_nonmembers']}", svm, f"{r['aus']:.3f}", r["check"]])
    return "### LiRA audit: original vs DUCK vs retrained oracle\n\n" + markdown_table(headers, body)


def reuse_table(reuse: list[dict]) -> str:
    headers = ["setup", "first audit (s)", "of which bank training (s)", "bank mode", "second audit (s)",
               "ratio", "target <= 10 %"]
    body = [[r["setup"], f"{r['first_s']:.1f}", f"{r['bank_train_s']:.1f}", r["bank_mode"],
             f"{r['second_s']:.2f}", _pct(r["ratio"]), "met" if r["ratio"] <= 0.10 else "NOT met"]
            for r in reuse]
    title = "### Reuse: second audit of the same setup (cached bank) vs the first\n\n"
    return title + markdown_table(headers, body)


def throughput_table(rows: list[dict], device: torch.device) -> str:
    headers = ["setup", "models", "chunk", "epochs", "sequential (s)", "batched (s)", "seq models/s",
               "batched models/s", "ratio", "auto picks (calibration)", "max abs Δθ batched vs seq",
               "max abs Δθ from a 1e-7 change (control)"]
    body = [[r["setup"] + (" (retrain bank)" if r.get("bank") == "retrain" else "")
             + (", im2col convs" if r.get("matmul_convs") else ""), r["n_models"], r["chunk_size"], r["epochs"],
             f"{r['sequential_s']:.1f}",
             f"{r['batched_s']:.1f}", f"{r['sequential_models_per_s']:.3f}",
             f"{r['batched_models_per_s']:.3f}",
             f"{r['ratio']:.2f}x", f"{r['auto_mode']} ({r['calibrated_speedup']:.2f}x)",
             f"{r['max_param_diff']:.1e}", f"{r['control_param_diff']:.1e}"] for r in rows]
    title = f"### Bank training throughput on {device.type} (batched vs one after another)\n\n"
    return title + markdown_table(headers, body)
