"""``duck-bench compare``: DUCK against every baseline over the paper's protocol (seeds/003 §IV-A, Tables I/II).

For each run of the protocol (class removal: one forgotten class per run; homogeneous removal: one random
forget set per seed) the original and the retrained oracle come from ``duck-run``'s cache (trained once, reused
by every later run), then every method unlearns a copy of the original. Per scenario and method the suite
reports mean (std) over runs of ``A_t``, ``A_f``, AUS (ALGORITHMS.md §2) and the unlearning wall time, how many
runs ended with the forget accuracy at its target, and how many stopped by their stopping rule; as Markdown
(``compare.md``) and CSV (``compare.csv``) in the run directory and in ``bench.json``, with every run's record
(``runs.json``, rewritten after each run so a long protocol can be watched).
"""

from __future__ import annotations

import copy
import csv
import io
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from omegaconf import DictConfig
from tqdm import tqdm

from benchmarks.common import THREADS, BenchSettings, markdown_table, mean_std
from duck.errors import DuckInputError
from duck.metrics import forget_target, forget_target_met
from duck.report.sweep_page import forgetting_fields, write_sweep_page
from duck.schema import SEED, Check, Directory, Either, Flag, Integer, ListOf, OneOf, Real, Text, option, plain, settings

if TYPE_CHECKING:
    from attacks.audit import ForgettingSettings

SCENARIO_TITLES = {"class_removal": "Class removal (Table I protocol)",
                   "homogeneous_removal": "Homogeneous removal (Table II protocol)"}
REFERENCE_ROWS = ("original", "retrain")


@contextmanager
def hydra_ready() -> Iterator[None]:
    """Hydra's compose API needs an initialised config search path: reuse duck-bench's, else open one."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from duck.pipeline.config import conf_dir

    if GlobalHydra.instance().is_initialized():
        yield
    else:
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            yield


def compose_run(overrides: list[str]) -> DictConfig:
    """The ``duck-run`` config with ``overrides`` (the same composition as the command line)."""
    from duck.pipeline.config import compose

    return compose("run", overrides)


def protocol_runs(cfg: CompareBench, num_classes: int) -> list[dict[str, Any]]:
    """The runs of the protocol: ``{"scenario", "label", "seed", "overrides"}``, in execution order."""
    runs = []
    original_seed = int(cfg.original_seed)
    for kind in cfg.scenarios:
        if kind == "class_removal":
            classes = list(range(num_classes)) if cfg.classes is None else [int(c) for c in cfg.classes]
            if not classes:
                raise DuckInputError("bench.classes is empty; give the classes to remove, or null for every class")
            _check_distinct(classes, "bench.classes")
            for c in classes[:1] if cfg.quick else classes:
                runs.append({"scenario": kind, "label": f"class_{c}", "seed": original_seed,
                             "overrides": ["scenario=class_removal", f"scenario.forget_classes=[{c}]"]})
        elif kind == "homogeneous_removal":
            seeds = [int(s) for s in cfg.seeds]
            if not seeds:
                raise DuckInputError("bench.seeds is empty; give at least one seed for homogeneous removal")
            _check_distinct(seeds, "bench.seeds")
            for s in seeds[:1] if cfg.quick else seeds:
                runs.append({"scenario": kind, "label": f"seed_{s}", "seed": s,
                             "overrides": ["scenario=homogeneous_removal", f"scenario.fraction={float(cfg.fraction)}",
                                           f"scenario.seed={s}"]})
        else:
            raise DuckInputError(f"bench.scenarios holds {kind!r}; use class_removal and/or homogeneous_removal")
    return runs


def _check_distinct(values: list[int], name: str) -> None:
    dup = sorted({v for v in values if values.count(v) > 1})
    if dup:
        raise DuckInputError(f"{name}={values} repeats {dup}: a run is identified by its class / seed, so a repeat "
                             "would replace the earlier run's records; list each once")


def run_record(label: str, run: dict[str, Any], metrics: dict[str, Any], scenario: Any,
               original_acc: dict[str, float], target: float) -> dict[str, Any]:
    """One row of ``runs.json``: the metrics record, the protocol coordinates, ``A_t``/``A_f`` as AUS uses them
    (ALGORITHMS.md §2) and whether the forget-set accuracy ended at the stopping rules' target."""
    from duck.metrics import aus_inputs

    acc = metrics["acc"]
    _, a_t, a_f = aus_inputs(acc, original_acc, scenario)
    return {"method": label, "scenario": run["scenario"], "run": run["label"], "seed": run["seed"],
            "A_t": a_t, "A_f": a_f, "AUS": metrics.get("aus"), "time_s": metrics.get("time_s"), "epochs": metrics.get("epochs"),
            "one_off_s": metrics.get("one_off_s"),
            "train_forget": acc.get("train_forget"), "forget_target": round(target, 6),
            "target_met": forget_target_met(acc["train_forget"], target),
            "reached_target": metrics.get("reached_target"), "metrics": metrics}


def summarise(records: list[dict[str, Any]], scenario: str, methods: list[str],
              unsupported: dict[str, str], skipped: dict[str, list[str]] | None = None) -> list[dict[str, Any]]:
    """Mean (std) per method (or tuned row) over the runs of one scenario; ``skipped``: per row, the runs it was
    not run on (a tuned preset on its own validation forget set)."""
    rows = []
    for method in [*REFERENCE_ROWS, *methods]:
        if method in unsupported:
            rows.append({"scenario": scenario, "method": method, "n": 0, "note": unsupported[method]})
            continue
        recs = [r for r in records if r["scenario"] == scenario and r["method"] == method]
        ok = [r for r in recs if "error" not in r]
        row: dict[str, Any] = {"scenario": scenario, "method": method, "n": len(ok), "errors": len(recs) - len(ok)}
        if (skipped or {}).get(method):
            row["skipped"] = list(skipped[method])
        if ok:
            for key in ("A_t", "A_f", "AUS", "time_s", "epochs", "one_off_s", *FORGETTING_COLUMNS):
                vals = [float(r[key]) for r in ok if r.get(key) is not None]
                if vals:
                    row[key] = mean_std(vals)
            if len(ok) == 1:  # one run: its intervals beside the values (imprint kept, F, q)
                for key in ("imprint_kept", "F", "F_normalised"):
                    if ok[0].get(f"{key}_ci") is not None:
                        row[f"{key}_ci"] = ok[0][f"{key}_ci"]
            verdicts = [r["verdict"] for r in ok if r.get("verdict")]
            if verdicts:
                row["verdicts"] = {v: verdicts.count(v) for v in sorted(set(verdicts))}
            row["target_met"] = sum(r["target_met"] for r in ok)
            row["time_from_cache"] = sum(bool(r.get("reused_from_cache")) for r in ok)
            rule = [r["reached_target"] for r in ok if r.get("reached_target") is not None]
            row["stop_rule_reached"] = sum(bool(v) for v in rule) if rule else None
            row["stop_rule_runs"] = len(rule)
            row["missed"] = [(float(r["train_forget"]), float(r["forget_target"])) for r in ok
                             if not r["target_met"] and r.get("train_forget") is not None]
        rows.append(row)
    reference = next((r for r in rows if r["method"] == "retrain" and r.get("n")), None)
    for row in rows:
        if row["method"] not in REFERENCE_ROWS and row.get("n"):
            row["flags"] = failure_flags(row, reference)
    return rows


#: retained accuracy more than this far below the retrained oracle's counts as collapsed (a fraction, 5 points)
COLLAPSE_MARGIN = 0.05


def failure_flags(row: dict[str, Any], retrained: dict[str, Any] | None) -> list[str]:
    """Why a method's row cannot count as a success, each with its numbers (issue 27 item 4): the forget set
    not at its target (mean train-forget accuracy of the runs that missed it against the target), retained
    accuracy collapsed (``A_t`` more than :data:`COLLAPSE_MARGIN` below the retrained oracle's), unlearning
    slower than retraining (mean times; a cached oracle's is its first training's)."""
    flags = []
    missed = row.get("missed") or []
    if missed:
        acc = sum(m[0] for m in missed) / len(missed)
        target = sum(m[1] for m in missed) / len(missed)
        flags.append(f"forget target not reached in {len(missed)}/{row['n']} runs: {acc:.3f} > {target:.3f}")
    if retrained is not None and row.get("A_t") and retrained.get("A_t"):
        mine, oracle = row["A_t"]["mean"], retrained["A_t"]["mean"]
        if mine < oracle - COLLAPSE_MARGIN:
            flags.append(f"retained accuracy collapsed: A_t {100 * mine:.1f} % vs {100 * oracle:.1f} % retrained")
    if retrained is not None and row.get("time_s") and retrained.get("time_s"):
        mine, oracle = row["time_s"]["mean"], retrained["time_s"]["mean"]
        if mine > oracle:
            flags.append(f"slower than retraining ({mine:.0f} s vs {oracle:.0f} s)")
    return flags


#: why a tuned row has no run on some forget sets (:func:`preset_skip_reason`)
SKIP_NOTE = "the preset's validation forget set"

#: the forgetting audit's columns (bench.forgetting.enabled): mean (std) over runs
FORGETTING_COLUMNS = ("imprint_kept", "F", "F_normalised", "final_score", "klom_forget", "ulira_auc")
FORGETTING_HEADERS = {"imprint_kept": "imprint kept", "F": "F", "F_normalised": "F normalised (q)",
                      "final_score": "final score", "klom_forget": "KLOM forget (median)", "ulira_auc": "U-LiRA AUC"}


def _fmt(ms: dict[str, float] | None, scale: float = 1.0, digits: int = 3) -> str:
    if not ms:
        return "—"
    return f"{ms['mean'] * scale:.{digits}f} ({ms['std'] * scale:.{digits}f})"


def _fmt_ci(ms: dict[str, float] | None, ci: list[float] | None, scale: float = 1.0) -> str:
    """One run's value with its interval (``imprint kept`` in %), else the mean (std) over runs."""
    if not ms or ci is None:
        return _fmt(ms, scale)
    digits = 0 if scale == 100 else 3
    unit = " %" if scale == 100 else ""
    return f"{ms['mean'] * scale:.{digits}f}{unit} [{ci[0] * scale:.{digits}f}, {ci[1] * scale:.{digits}f}]"


def markdown(summary: list[dict[str, Any]], scenario: str) -> str:
    """Paper-style table (accuracies in %, as Tables I/II)."""
    cr = scenario == "class_removal"
    headers = ["method", "A_t (%)" + (" test, retained classes" if cr else " test"),
               "A_f (%)" + (" test, forgotten class" if cr else " forget set"), "AUS", "time (s)",
               "forget set at target", "stopping rule reached", "flags", "runs"]
    extra = [k for k in FORGETTING_COLUMNS if any(k in r for r in summary)]
    if extra:
        headers = [*headers[:-1], *(FORGETTING_HEADERS[k] for k in extra), "verdicts", headers[-1]]
    retrain = next((r for r in summary if r["method"] == "retrain" and r.get("time_s")), None)
    one_off = any(r.get("one_off_s") for r in summary)
    headers = [*headers[:5], "time ÷ retraining", *(["one-off (s)"] if one_off else []), *headers[5:]]
    rows = []
    for r in summary:
        if r["method"] != "original" and r["n"] == 0 and r.get("note"):
            rows.append([r["method"], "n/a", "n/a", "n/a", "n/a", "n/a", *(["n/a"] if one_off else []), "n/a", "n/a",
                         "—", *(["n/a"] * (len(extra) + bool(extra))), r["note"]])
            continue
        n = r["n"]
        time_s = "—" if r["method"] == "original" else _fmt(r.get("time_s"), digits=2)
        if r.get("time_from_cache") and time_s != "—":  # a cached oracle's time is its first training's
            time_s += f" † ({r['time_from_cache']}/{n} cached)"
        rule = "—" if r.get("stop_rule_reached") is None else f"{r['stop_rule_reached']}/{r['stop_rule_runs']}"
        runs = f"{n}" + (f" ({r['errors']} failed)" if r.get("errors") else "")
        if r.get("skipped"):
            runs += f" ({', '.join(r['skipped'])} skipped: {SKIP_NOTE})"
        forgetting = [_fmt_ci(r.get(k), r.get(f"{k}_ci"), 100 if k == "imprint_kept" else 1) for k in extra]
        if extra:
            forgetting.append(", ".join(f"{c} {v}" for v, c in (r.get("verdicts") or {}).items()) or "—")
        flags = "; ".join(r.get("flags") or []) or "—"
        ratio = ("—" if retrain is None or r["method"] in REFERENCE_ROWS or not r.get("time_s")
                 else f"{r['time_s']['mean'] / retrain['time_s']['mean']:.1%}")
        once = [_fmt(r.get("one_off_s"), digits=1)] if one_off else []
        rows.append([r["method"], _fmt(r.get("A_t"), 100, 2), _fmt(r.get("A_f"), 100, 2), _fmt(r.get("AUS")), time_s,
                     ratio, *once, f"{r.get('target_met', 0)}/{n}" if n else "—", rule, flags, *forgetting, runs])
    return markdown_table(headers, rows)


def csv_text(summary: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    fields = ["scenario", "method", "n", "errors", "A_t_mean", "A_t_std", "A_f_mean", "A_f_std", "AUS_mean", "AUS_std",
              "time_s_mean", "time_s_std", "time_from_cache", "epochs_mean", "target_met", "stop_rule_reached",
              "stop_rule_runs", "flags", "note"]
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in summary:
        out = {k: r.get(k) for k in ("scenario", "method", "n", "errors", "time_from_cache", "target_met",
                                     "stop_rule_reached", "stop_rule_runs", "note")}
        out["flags"] = "; ".join(r.get("flags") or [])
        if r.get("skipped"):
            out["note"] = f"{' '.join(r['skipped'])} skipped: {SKIP_NOTE}"
        for key in ("A_t", "A_f", "AUS", "time_s", "epochs"):
            if r.get(key):
                out[f"{key}_mean"] = round(r[key]["mean"], 6)
                if f"{key}_std" in fields:
                    out[f"{key}_std"] = round(r[key]["std"], 6)
        writer.writerow(out)
    return buf.getvalue()


#: the options that decide what a run of the protocol computes: a resumed protocol must have the same ones
#: (scenarios, classes, seeds and methods may differ: records outside the protocol are dropped)
PROTOCOL_KEYS = ("data", "model", "trainer", "fraction", "original_seed", "overrides", "forgetting")


def protocol_identity(cfg: CompareBench) -> dict[str, Any]:
    """What ``protocol.json`` records (:data:`PROTOCOL_KEYS`), compared by ``bench.resume``."""
    ident = {k: plain(cfg[k]) for k in PROTOCOL_KEYS}
    # the forgetting audit changes the table only when it runs: off (or absent, as in a protocol.json written
    # before it existed) is recorded as None
    if not cfg.forgetting.enabled:
        ident["forgetting"] = None
    return ident


def resumed_records(path: str | None, cfg: CompareBench | None = None) -> list[dict[str, Any]]:
    """Records of an earlier (interrupted) protocol's ``runs.json``: runs recorded there without an error are not
    repeated (``bench.resume=PATH``). The earlier protocol must match ``cfg`` in :data:`PROTOCOL_KEYS` (its
    ``protocol.json``; for a run directory written before that file existed, the data set and model named in
    the records): a resumed table must not show another data set's or recipe's numbers."""
    if not path:
        return []
    import json

    p = Path(str(path))
    if p.is_dir():
        p = p / "runs.json"
    if cfg is not None:
        _check_same_protocol(p, cfg, path)
    try:
        records = json.loads(p.read_text())
    except (OSError, ValueError) as e:
        raise DuckInputError(f"bench.resume={path}: cannot read an earlier runs.json ({e}); give the run directory "
                             "or runs.json of an interrupted compare, or drop bench.resume") from None
    if not isinstance(records, list) or not all(isinstance(r, dict) and {"scenario", "run", "method"} <= r.keys()
                                                 for r in records):
        raise DuckInputError(f"bench.resume={path} is not a compare runs.json (a list of run records)")
    if cfg is not None and not (p.parent / "protocol.json").is_file():
        for r in records:
            got = {k: (r.get("metrics") or {}).get(k) for k in ("dataset", "model")}
            if got["model"] not in (None, str(cfg.model)) or got["dataset"] not in (None, str(cfg.data)):
                raise DuckInputError(f"bench.resume={path} holds runs of {got['dataset']} / {got['model']}, not "
                                     f"bench.data={cfg.data} / bench.model={cfg.model}; resume with the same options "
                                     "or start a new protocol")
    return records


def _check_same_protocol(runs_json: Path, cfg: CompareBench, path: str) -> None:
    """Refuse to resume a protocol run with other :data:`PROTOCOL_KEYS` (named with both values)."""
    import json

    f = runs_json.parent / "protocol.json"
    if not f.is_file():
        return
    try:
        earlier = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise DuckInputError(f"bench.resume={path}: cannot read {f} ({e}); start a new protocol") from None
    now = protocol_identity(cfg)
    diff = [k for k in PROTOCOL_KEYS if not isinstance(earlier, dict) or earlier.get(k) != now[k]]
    if diff:
        k = diff[0]
        was = earlier.get(k) if isinstance(earlier, dict) else earlier
        raise DuckInputError(f"bench.resume={path} was run with bench.{k}={was!r}, this run has bench.{k}={now[k]!r}: "
                             "its results would be reported as this protocol's; resume with the same options or "
                             "start a new protocol")


def _forgetting_bench(value: Any, name: str) -> ForgettingSettings:
    """``bench.forgetting``: the forgetting audit per method and run (attack.forgetting's options; enabled,
    n_unlearned, n_retrained, ulira), checked as the audit checks them; null: off."""
    from attacks.audit import ForgettingSettings

    if value is None:
        value = {"enabled": False}
    if not isinstance(value, Mapping):
        raise DuckInputError(f"{name}={value!r} must be a mapping, e.g. {name}.enabled=true")
    return ForgettingSettings.parse(value)


def _presets(value: Any, name: str) -> str | dict[str, str]:
    """``bench.presets``: ``tuned`` (every method that has a ``conf/preset/tuned_<data>_<method>.yaml``), ``none``,
    or a mapping ``{METHOD: PRESET}`` of preset names (``conf/preset/PRESET.yaml``, as ``+preset=PRESET``)."""
    if value is None or value == {}:
        return "none"
    if value in ("tuned", "none"):
        return str(value)
    if isinstance(value, Mapping) and all(isinstance(k, str) and k and isinstance(v, str) and v
                                          for k, v in value.items()):
        return {str(k): str(v) for k, v in value.items()}
    raise DuckInputError(f"{name}={value!r}: give tuned (each method's conf/preset/tuned_<data>_<method>.yaml), none, "
                         f"or a mapping, e.g. '{name}={{salun: tuned_digits_salun}}'")


#: every method of the comparison (conf/bench/compare.yaml's list)
DEFAULT_METHODS = ("duck", "finetune", "neggrad", "random_label", "boundary_shrink", "boundary_expand", "scrub",
                   "l1_sparse", "ssd", "bad_teacher", "erm_ktp", "neggrad_plus", "salun", "oracle_matching",
                   "datamodel_matching", "kgltop1", "kgltop2", "duck_reinit")

#: the names of a data, model or trainer config (conf/data, conf/model, conf/trainer)
CONFIG_NAME = Text()
def _run_overrides(value: Any, name: str) -> tuple[str, ...]:
    """``bench.overrides``: a list of ``KEY=VALUE`` duck-run overrides, none setting what the protocol sets."""
    items = ListOf(Text(), nonempty=False)(value, name)
    check_protocol_overrides(list(items))
    return items


#: extra duck-run overrides of a protocol
RUN_OVERRIDES = Check(_run_overrides, "a list of KEY=VALUE duck-run overrides (not the keys the protocol sets)")
#: homogeneous removal's forgotten fraction of the training set
FRACTION = Real(0.0, True, 1.0, True)


@settings
class CompareBench(BenchSettings):
    """conf/bench/compare.yaml."""

    suite: ClassVar[str] = "compare"

    data: str = option("digits", CONFIG_NAME, "the data config (conf/data)")
    model: str = option("smallcnn", CONFIG_NAME, "the model config (conf/model)")
    trainer: str = option("cpu", CONFIG_NAME, "the trainer config (conf/trainer)")
    scenarios: tuple[str, ...] = option(("class_removal", "homogeneous_removal"),
                                        ListOf(OneOf(("class_removal", "homogeneous_removal"))), "the protocols")
    classes: tuple[int, ...] | None = option(None, Either((None,), ListOf(Integer(0))),
                                             "class removal: the forgotten class of each run (null: every class)")
    fraction: float = option(0.1, FRACTION, "homogeneous removal: the forgotten fraction of the training set")
    seeds: tuple[int, ...] = option((0, 1, 2), ListOf(SEED), "homogeneous removal: one run per seed")
    original_seed: int = option(0, SEED, "the original's seed (and the class-removal runs')")
    methods: tuple[str, ...] = option(DEFAULT_METHODS, ListOf(Text(), nonempty=False),
                                      "the methods ([]: only the original and the oracle)")
    quick: bool = option(False, Flag(), "only the first class and the first seed")
    torch_threads: int | None = option(1, THREADS, "torch intra-op threads (null: torch's default)")
    cache_dir: str | None = option(None, Either((None,), Directory()), "the originals' cache (null: duck-run's)")
    overrides: tuple[str, ...] = option((), RUN_OVERRIDES, "extra duck-run overrides")
    fail_fast: bool = option(False, Flag(), "false: a method that raises is an error row and the protocol goes on")
    resume: str | None = option(None, Either((None,), Text()), "run dir or runs.json of an interrupted compare")
    out_dir: str | None = option(None, Either((None,), Directory()), "null: the Hydra run directory")
    progress: bool = option(True, Flag(), "a progress bar over the runs")
    default_rows: bool = option(True, Flag(), "false: a method with a tuned row shows only that row")
    presets: str | dict[str, str] = option("none", Check(_presets, "tuned, none or {METHOD: PRESET}"),
                                           "tuned rows beside the defaults")
    forgetting: ForgettingSettings = option(None, Check(_forgetting_bench, "attack.forgetting's options with "
                                                        "enabled, n_unlearned, n_retrained, ulira (null: off)"),
                                            "the forgetting audit per method and run")


def forgetting_overrides(cfg: CompareBench) -> list[str]:
    """The run-config overrides that switch the forgetting audit on for the methods' jobs (the LiRA and report
    parts of the audit stay off: only the forgetting block is computed)."""
    f = cfg.forgetting
    if not f.enabled:
        return []
    return ["audit=true", "attack.svm_mia.enabled=false", "report.shareable.enabled=false",
            "report.analysis.enabled=false", *[f"attack.forgetting.{k}={str(v).lower() if isinstance(v, bool) else v}"
                                                for k, v in f.items()]]


def write_page(path: Path, records: list[dict[str, Any]], title: str) -> Path:
    """The comparison as the sweep page (:mod:`duck.report.sweep_page`): each run's records with its time relative
    to the same run's retraining; failed runs listed with their error."""
    from duck.report.sweep import aggregate

    retrain_s = {r["run"]: r.get("time_s") for r in records if r.get("method") == "retrain" and "error" not in r}
    rows = [{**r, "setup": "", "forget": r["run"],
             "time_ratio": (float(r["time_s"]) / float(retrain_s[r["run"]])
                            if r.get("time_s") is not None and retrain_s.get(r["run"]) else None)}
            for r in records if "error" not in r]
    failed = [{"job": r["run"], "overrides": [f"method={r['method']}"], "error": r["error"]} for r in records
              if "error" in r]
    return write_sweep_page(path, title, aggregate(rows), rows, failed)


def controls_text(records: list[dict[str, Any]], scenario: str) -> str:
    """One line per forget set of ``scenario``: the controls' F (the same for every method of that forget set)
    that F normalised is read against; empty without the forgetting audit."""
    seen: dict[str, dict[str, Any]] = {}
    for r in records:
        if r.get("scenario") == scenario and r.get("controls_F") and r["run"] not in seen:
            seen[r["run"]] = r["controls_F"]

    def fmt(c: dict[str, Any]) -> str:
        ci = c.get("F_ci")
        return f"{c['F']:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

    return "\n".join(f"Controls of {run} (F against the retrain bank): "
                     + ", ".join(f"{name} {fmt(c)}" for name, c in sorted(ctrl.items())) for run, ctrl in seen.items())


#: run-config keys the protocol sets itself (a ``bench.overrides`` entry for them would be replaced silently)
PROTOCOL_SET_KEYS = {"seed": "the protocol's seeds (bench.original_seed, bench.seeds)",
                     "scenario": "bench.scenarios, bench.classes, bench.fraction, bench.seeds",
                     "method": "bench.methods (method.KEY=... overrides are fine)", "data": "bench.data",
                     "model": "bench.model", "trainer": "bench.trainer", "audit": "the protocol (no audits)",
                     "progress": "bench.progress", "cache_dir": "bench.cache_dir"}


def check_protocol_overrides(overrides: list[str]) -> None:
    """Refuse ``bench.overrides`` entries that set what the protocol sets (``seed=-1`` was ignored)."""
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if "=" not in o or not key:
            raise DuckInputError(f"bench.overrides entry {o!r} is not KEY=VALUE; e.g. "
                                 "'bench.overrides=[\"recipe.epochs=3\"]'")
        head = key.split(".", 1)[0]
        if key in PROTOCOL_SET_KEYS or head == "scenario":  # scenario.* too; method.* / data.* options are fine
            raise DuckInputError(f"bench.overrides entry {o!r} sets what the protocol sets; use "
                                 f"{PROTOCOL_SET_KEYS[head]}")


def check_method_overrides(cfg: CompareBench, base: list[str], methods: list[str], dataset: str,
                           tuned: dict[str, tuple[str, str]] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
    """Each method's config (and each tuned row's, with its preset) composed with ``bench.overrides``: its
    effective hyperparameters checked for every scenario of the protocol (before any training) and returned,
    ``{(scenario, row label): hyperparameters}`` (a resumed run with other values is rerun)."""
    from duck.pipeline.job import method_settings
    from duck.unlearn.registry import resolve_method_cfg

    rows = [(m, [f"method={m}"]) for m in methods]
    rows += [(lab, [f"method={m}", f"+preset={p}"]) for lab, (m, p) in (tuned or {}).items()]
    effective: dict[tuple[str, str], dict[str, Any]] = {}
    for m, extra in rows:
        run_cfg = compose_run([*base, *extra])
        for kind in cfg.scenarios:
            try:
                name, hp = method_settings(run_cfg)
                effective[(str(kind), m)] = resolve_method_cfg(hp, dataset, str(kind), name)  # checks them
            except DuckInputError as e:
                raise DuckInputError(f"bench.overrides={list(cfg.overrides)} (method {m}, {kind}): {e}") from None
    return effective


def preset_rows(cfg: CompareBench, methods: list[str], dataset: str) -> dict[str, tuple[str, str]]:
    """The tuned rows beside the default ones (issue 27 item 3): ``{row label: (method, preset)}``, label
    ``METHOD+PRESET``. ``bench.presets=tuned`` takes every listed method's ``tuned_<data>_<method>`` preset
    that exists in the config tree (methods without one keep only their default row)."""
    from duck.pipeline.config import conf_dir

    spec = cfg.presets
    if spec == "none":
        return {}
    if spec == "tuned":
        found = {m: f"tuned_{dataset}_{m}" for m in methods}
        chosen = {m: p for m, p in found.items() if (conf_dir() / "preset" / f"{p}.yaml").is_file()}
    else:
        unknown = [m for m in spec if m not in methods]
        if unknown:
            raise DuckInputError(f"bench.presets names {unknown}, not in bench.methods={methods}: a tuned row is "
                                 "shown beside the method's default row; add the method or drop its preset")
        missing = [p for p in spec.values() if not (conf_dir() / "preset" / f"{p}.yaml").is_file()]
        if missing:
            raise DuckInputError(f"bench.presets: no preset {missing} in {conf_dir() / 'preset'}; presets are "
                                 "written by duck-run -m +tune=METHOD (docs/tuning.md): copy its preset file there")
        chosen = spec
    return {f"{m}+{p}": (m, p) for m, p in chosen.items()}


def preset_skip_reason(run_cfg: DictConfig, dataset: str, scenario: Any) -> str | None:
    """Why a tuned row is not run on this forget set: the preset's search saw it (its validation forget set,
    ``tuned_on``; a Job would refuse it), else None."""
    from duck.pipeline.job import check_validation_separation

    try:
        check_validation_separation(run_cfg.get("tuned_on"), dataset, scenario)
    except DuckInputError:
        tuned_on = run_cfg.get("tuned_on")
        return (f"not run on its validation forget set ({tuned_on.get('scenario')} "
                f"{list(tuned_on.get('forget_classes') or [])}: the search saw it)")
    return None


def same_hyperparameters(record: dict[str, Any], effective: dict[tuple[str, str], dict[str, Any]]) -> bool:
    """Whether a resumed method record ran with the hyperparameters this protocol would use (a method's config or
    a tuned preset changed since: the record is rerun, not reported as this protocol's). Reference rows and
    records without hyperparameters count as the same, and so does a setting the record lacks whose value is
    null now (added to the method's config since, left off: NegGrad+'s and SalUn's ``min_epochs``)."""
    import json

    now = effective.get((record.get("scenario"), record.get("method")))
    then = (record.get("metrics") or {}).get("hparams")
    if now is None or then is None:
        return True
    now = {k: v for k, v in json.loads(json.dumps(plain(now))).items() if k in then or v is not None}
    return json.dumps(then, sort_keys=True) == json.dumps(now, sort_keys=True)


def run(cfg: Any) -> dict[str, Any]:
    cfg = CompareBench.parse(cfg)
    from duck.io import atomic_save_json, atomic_write_text
    from duck.metrics import metrics_record, split_accuracies
    from duck.pipeline.cache import train_or_reuse
    from duck.pipeline.config import hydra_output_dir
    from duck.pipeline.job import Job
    from duck.pipeline.stages import audit_context, unlearn_model
    from duck.unlearn import get_unlearner_class

    out = Path(cfg.out_dir) if cfg.get("out_dir") else hydra_output_dir()
    methods = [str(m) for m in cfg.methods]
    bad = [m for m in methods if m in REFERENCE_ROWS]
    if bad:
        raise DuckInputError(f"bench.methods holds {bad}: the original and the retrained oracle are always reported; "
                             "list only unlearning methods")
    classes_of = {m: get_unlearner_class(m) for m in methods}  # unknown names fail before any work
    old_threads = torch.get_num_threads()
    if cfg.torch_threads is not None:
        torch.set_num_threads(int(cfg.torch_threads))
    base = [f"data={cfg.data}", f"model={cfg.model}", f"trainer={cfg.trainer}", "progress=false", "audit=false",
            *[str(o) for o in cfg.overrides]]
    if cfg.cache_dir is not None:
        base.append(f"cache_dir={cfg.cache_dir}")
    f_overrides = forgetting_overrides(cfg)
    records = resumed_records(cfg.get("resume"), cfg)
    n_resumed = len(records)
    t_start = time.perf_counter()
    try:
        with hydra_ready():
            job0 = Job.from_cfg(compose_run([*base, f"seed={int(cfg.original_seed)}"]), "run")
            data, device = job0.data, job0.device
            tuned = preset_rows(cfg, methods, data.name)
            with_tuned = {m for m, _ in tuned.values()}
            labels = [*(m for m in methods if cfg.get("default_rows", True) or m not in with_tuned), *tuned]
            method_of = {**{m: m for m in methods}, **{lab: m for lab, (m, _) in tuned.items()}}
            extra_of = {**{m: [] for m in methods}, **{lab: [f"+preset={p}"] for lab, (_, p) in tuned.items()}}
            effective = check_method_overrides(cfg, base, methods, data.name, tuned)  # every config, checked
            fresh, stale = [], []  # finished runs kept / rerun (their hyperparameters changed since)
            for r in records:
                if "error" not in r:
                    (fresh if same_hyperparameters(r, effective) else stale).append(r)
            for r in stale:
                tqdm.write(f"[compare] resumed {r['method']} on {r['run']} is rerun: its hyperparameters changed")
            done = {(r["scenario"], r["run"], r["method"]) for r in fresh}
            bad_classes = [c for c in (cfg.classes or []) if int(c) >= data.num_classes]
            if bad_classes:
                raise DuckInputError(f"bench.classes={list(cfg.classes)}: {bad_classes} not below the "
                                     f"{data.num_classes} classes of {data.name}")
            runs = protocol_runs(cfg, data.num_classes)
            atomic_save_json(out / "protocol.json", protocol_identity(cfg))
            in_protocol = {(r["scenario"], r["label"]) for r in runs}
            records = [r for r in records if (r["scenario"], r["run"]) in in_protocol]
            unsupported = {kind: {lab: f"not applicable to {kind} (as in seeds/003)" for lab in labels
                                  if kind not in classes_of[method_of[lab]].supported_scenarios}
                           for kind in cfg.scenarios}
            skipped: dict[str, dict[str, list[str]]] = {kind: {} for kind in cfg.scenarios}
            n_jobs = sum(1 + sum(m not in unsupported[r["scenario"]] for m in labels) for r in runs)
            bar = tqdm(total=n_jobs, desc=f"compare {cfg.data}", disable=not cfg.progress, unit="run")
            for run_spec in runs:
                todo = [m for m in labels if m not in unsupported[run_spec["scenario"]]
                        and (run_spec["scenario"], run_spec["label"], m) not in done]
                key = (run_spec["scenario"], run_spec["label"])
                if not todo and all((*key, m) in done for m in REFERENCE_ROWS):
                    bar.update(1 + sum(m not in unsupported[run_spec["scenario"]] for m in labels))
                    continue
                records = [r for r in records if (r["scenario"], r["run"]) != key or r["method"] not in REFERENCE_ROWS]
                bar.update(sum(m not in unsupported[run_spec["scenario"]] for m in labels) - len(todo))
                run_dir = out / "runs" / run_spec["scenario"] / run_spec["label"]
                run_job = Job.from_cfg(compose_run([*base, *run_spec["overrides"], f"seed={run_spec['seed']}"]), "run",
                                       data=data)
                scenario = run_job.scenario
                orig_job = Job.from_cfg(compose_run([*base, *run_spec["overrides"], f"seed={int(cfg.original_seed)}"]),
                                        "run", data=data, scenario=scenario)
                bar.set_postfix_str(f"{run_spec['label']}: original + oracle")
                original, orig_metrics, _ = train_or_reuse(orig_job, "original", run_dir)
                # a cached original's metrics.json holds the scenario it was first trained with: recompute
                original_acc = split_accuracies(original, data, scenario, device=device,
                                                batch_size=run_job.eval_batch_size)
                orig_rec = metrics_record(method="original", data_name=data.name, model_name=str(cfg.model),
                                          seed=int(cfg.original_seed), acc=original_acc, original_acc=original_acc,
                                          scenario=scenario, time_s=orig_metrics.get("time_s"),
                                          epochs=orig_metrics.get("epochs"))
                target = forget_target(scenario, original_acc)
                records.append(run_record("original", run_spec, orig_rec, scenario, original_acc, target))
                retrained, retr_metrics, reused = train_or_reuse(run_job, "retrained", run_dir,
                                                                 original_acc=original_acc)
                records.append({**run_record("retrain", run_spec, retr_metrics, scenario, original_acc, target),
                                "reused_from_cache": reused})
                bar.update(1)
                for m in todo:
                    records = [r for r in records if (r["scenario"], r["run"], r["method"]) != (*key, m)]
                    bar.set_postfix_str(f"{run_spec['label']}: {m}")
                    m_cfg = compose_run([*base, *run_spec["overrides"], f"seed={run_spec['seed']}",
                                         f"method={method_of[m]}", *extra_of[m], *f_overrides])
                    reason = preset_skip_reason(m_cfg, data.name, scenario) if m in tuned else None
                    if reason:  # the preset's search saw this forget set: its row is not reported on it
                        skipped[run_spec["scenario"]].setdefault(m, []).append(run_spec["label"])
                        tqdm.write(f"[compare] {m} not run on {run_spec['label']}: {reason}")
                        bar.update(1)
                        continue
                    try:
                        m_job = Job.from_cfg(m_cfg, "run", data=data, scenario=scenario)
                        metrics, result = unlearn_model(m_job, copy.deepcopy(original), original_acc)
                        rec = run_record(m, run_spec, metrics, scenario, original_acc, target)
                        if f_overrides:  # the forgetting audit of this method and forget set
                            from attacks.forgetting_audit import forgetting_audit

                            block = forgetting_audit(audit_context(m_job), original, original_acc,
                                                     target=result.model, oracle=retrained)
                            rec.update(forgetting_fields(block))
                        records.append(rec)
                    except Exception as e:  # reported as a failed run in the table (and raised with fail_fast)
                        if cfg.fail_fast:
                            raise
                        records.append({"method": m, "scenario": run_spec["scenario"], "run": run_spec["label"],
                                        "seed": run_spec["seed"], "error": f"{type(e).__name__}: {e}",
                                        "traceback": traceback.format_exc(limit=5)})
                        tqdm.write(f"[compare] {m} failed on {run_spec['label']}: {type(e).__name__}: {e}")
                    bar.update(1)
                    atomic_save_json(out / "runs.json", records)
            bar.close()
    finally:
        torch.set_num_threads(old_threads)
    atomic_save_json(out / "runs.json", records)
    summary, tables = [], []
    for kind in cfg.scenarios:
        rows = summarise(records, kind, labels, unsupported[kind], skipped[kind])
        summary += rows
        n_runs = sum(r["scenario"] == kind for r in runs)
        controls = controls_text(records, kind)
        tables.append(f"### {SCENARIO_TITLES.get(kind, kind)}: {data.name} / {cfg.model}, {n_runs} runs\n\n"
                      + markdown(rows, kind) + (f"\n\n{controls}" if controls else ""))
    wall = time.perf_counter() - t_start
    resumed = f"; {n_resumed} records resumed from {cfg.resume}" if n_resumed else ""
    if n_resumed and stale:
        resumed += f", {len(stale)} of them rerun (hyperparameters changed)"
    cached = any(r.get("time_from_cache") for r in summary)
    quick = "quick run (first class and first seed only); " if cfg.quick else ""
    table = "\n\n".join(tables) + (
        f"\n\n{quick}protocol wall time {wall:.0f} s (originals/oracles from cache when present{resumed}); torch "
        f"threads {cfg.torch_threads}"
        + ("\n\n† an oracle from the cache: its time is that of its first training (another run, possibly another "
           "machine state), not comparable with this run's times; use a fresh bench.cache_dir for timings" if cached
           else ""))
    csv_out = csv_text(summary)
    atomic_write_text(out / "compare.md", table + "\n")
    atomic_write_text(out / "compare.csv", csv_out)
    write_page(out / "sweep.html", records, f"duck-bench compare: {data.name} / {cfg.model}")
    return {"table": table, "csv": csv_out, "summary": summary,
            "runs": [{k: v for k, v in r.items() if k != "metrics"} for r in records],
            "protocol": {"runs": runs, "methods": methods, "data": str(cfg.data), "model": str(cfg.model),
                         "presets": {lab: p for lab, (_, p) in tuned.items()}},
            "protocol_wall_time_s": wall, "out_dir": str(out),
            "config_used": plain(cfg)}
