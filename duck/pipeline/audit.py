"""The audit stage: LiRA + SVM MIA of a job's models with one shadow bank (ALGORITHMS.md §4), the DP
"shareable statistics" (``report.shareable``), the feature-space analysis (``report.analysis``: cluster
density and t-SNE, seeds/003 §IV-I) and the report (``report.html``, ``report.md``, ``plots/*.png``).
Shared by duck-run, duck-unlearn (``audit=true``) and duck-audit."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from attacks.audit import REFERENCE_NAMES, audit_models, lira_summary
from attacks.epsilon import has_buckets
from duck.errors import DuckInputError
from duck.io import atomic_save_json
from duck.metrics import aus_inputs, scenario_aus
from duck.pipeline.job import Job, feature_samples

__all__ = ["REFERENCE_NAMES", "audit_and_report", "audit_lines", "verdict_lines"]
from duck.privacy.shareable import ShareableSettings
from duck.report import write_report
from duck.utils import warn_line

MANIFEST_ROLES = {"original": "original", "retrain": "retrained", "retrained": "retrained"}


def resolve_role(role: str, manifest: dict[str, Any] | None) -> str:
    """The audited checkpoint's name: ``role`` as given, or from its manifest's ``method``."""
    if role != "auto":
        if not isinstance(role, str) or not role.strip() or role == "shadow":
            raise DuckInputError(f"role={role!r} must name the audited model (original, unlearned, retrained, or "
                                 "any other non-empty name; not shadow), or be auto")
        return role
    method = (manifest or {}).get("method")
    if method == "shadow":
        raise DuckInputError("this checkpoint is a shadow model of a LiRA bank; audit a target model instead")
    if method is None:
        return "target"
    return MANIFEST_ROLES.get(str(method), "unlearned")


def check_recorded_recipes(manifests: dict[str, dict[str, Any] | None], requested: Any) -> list[str]:
    """Warn when a checkpoint that records its own training (an original or a retrained oracle: duck-train,
    duck-run) was trained with another recipe than ``recipe=...``, which trains the shadows. An unlearned
    checkpoint's manifest holds the unlearning job's recipe setting, not the one its original was trained
    with, so it says nothing here (it warned for the right recipe before). Returns the warnings (also printed),
    for audit.json and the report."""
    out = []
    for name, manifest in manifests.items():
        recorded = recorded_recipe(manifest)
        if recorded is not None and recorded != requested:
            out.append(f"the {name} checkpoint was trained with another recipe than recipe=... (epochs "
                       f"{recorded.get('epochs')} vs {requested.get('epochs')}); the shadows are trained with the "
                       "configured recipe, which should be the one the target models were trained with")
    if recipe_unknown(manifests):
        opt = requested.get("optimizer") or {}
        name = str(opt.get("_target_", "?")).rsplit(".", 1)[-1] if isinstance(opt, dict) else "?"
        lr = opt.get("lr") if isinstance(opt, dict) else None
        used = f"({name} lr {lr}, {requested.get('epochs')} epochs, batch {requested.get('batch_size')})"
        out.append("the audited model's original was trained outside this toolkit (a plain state dict records no "
                   "training recipe): the shadow and retrained models are trained with "
                   + (f"the recipe you set {used}, which the audit takes to be how it was trained" if recipe_given()
                      else f"the configured one {used}; pass recipe=NAME or recipe.* settings "
                           "(recipe.optimizer._target_, recipe.optimizer.lr, recipe.epochs) matching how it was "
                           "trained, else the audit compares it with differently trained models"))
    for text in out:
        warn_line(text)
    return out


def recipe_given() -> bool:
    """Did the command line set the recipe (``recipe=NAME`` or any ``recipe.*`` override)? Then the user has said
    how the original was trained, and the warning that asks them to is not repeated. False outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    keys = (str(o).split("=", 1)[0].lstrip("+~") for o in HydraConfig.get().overrides.task)
    return any(k == "recipe" or k.startswith("recipe.") for k in keys)


def recorded_recipe(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The recipe a checkpoint that records its own training (a duck-train / duck-run original or oracle) was
    trained with; None for any other checkpoint (an unlearned one records the unlearning job's setting)."""
    m = manifest or {}
    recipe = (m.get("config") or {}).get("recipe")
    return recipe if m.get("method") in ("original", "retrain") and isinstance(recipe, dict) else None


def source_recipe_recorded(manifest: dict[str, Any] | None) -> bool:
    """Does a checkpoint given to duck-unlearn record the recipe its original was trained with (a duck-train /
    duck-run original or oracle, or an unlearned checkpoint whose source did)? Stored in the unlearned
    checkpoint's manifest, so that its audit can warn when the shadows' recipe is a guess."""
    m = manifest or {}
    if m.get("method") in ("original", "retrain"):
        return recorded_recipe(m) is not None
    return bool(m.get("source_recipe_recorded", bool(m)))


def recipe_unknown(manifests: dict[str, dict[str, Any] | None]) -> bool:
    """Was the original of the audited checkpoints trained with a recipe nobody recorded? True when no
    checkpoint records a recipe (plain state dicts), when the given original records no training of its own,
    or when an unlearned checkpoint says its source checkpoint recorded none (``source_recipe_recorded``,
    written by duck-unlearn)."""
    def records(m: dict[str, Any] | None) -> bool:
        return bool(m) and isinstance((m.get("config") or {}).get("recipe"), dict)

    if not any(records(m) for m in manifests.values()):
        return True
    if "original" in manifests and recorded_recipe(manifests["original"]) is None:
        return True
    return any((m or {}).get("source_recipe_recorded") is False for m in manifests.values())


def accuracy_rows(job: Job, models: dict[str, Any], methods: dict[str, str]
                  ) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Accuracy/AUS records of the audited models (AUS needs the original: given, or the target itself), and
    their accuracies."""
    from duck.pipeline.stages import evaluate

    accs = {n: evaluate(job, m) for n, m in models.items()}
    original_acc = accs.get("original")
    rows = []
    for name, acc in accs.items():
        _, a_t, a_f = aus_inputs(acc, acc, job.scenario)
        rows.append({"model": name, "method": methods.get(name), "A_t": a_t, "A_f": a_f,
                     "AUS": scenario_aus(acc, original_acc, job.scenario) if original_acc else None,
                     "train_forget": acc.get("train_forget")})
    return rows, accs


def feature_space_section(options: dict[str, Any], models: dict[str, Any], data: Any, scenario: Any,
                          device: Any) -> tuple[dict[str, Any], bytes | None]:
    """The feature-space analysis of seeds/003 §IV-I on the training split (forget + retain samples):
    ``(feature_space dict for audit.json and the report, t-SNE panels PNG or None)``. Cluster density (Eq. 9)
    of every retain class and of the forget set in each model, with the PCA dimension chosen on the original
    model (:func:`duck.analysis.density.model_densities`); a t-SNE map per model on a stratified subsample."""

    from duck.analysis.density import group_labels, model_densities
    from duck.analysis.tsne import tsne_panels
    from duck.embeddings import embed_samples
    from duck.report.plots import tsne_panels_png

    idx, is_forget = feature_samples(scenario)
    embeddings, labels = {}, None
    for name, model in models.items():
        z, y, _ = embed_samples(model, data.train, idx, device=device)
        embeddings[name], labels = z.cpu().double(), y.cpu().numpy()
    dens = options["density"]
    feature_space = model_densities(embeddings, group_labels(labels, is_forget), n_components=dens["n_components"],
                                    variance=dens["variance"], coverage=dens["coverage"])
    if data.class_names and any(name != str(c) for c, name in enumerate(data.class_names)):  # names worth showing
        feature_space["class_names"] = {f"class_{c}": name for c, name in enumerate(data.class_names)}
    tsne = options["tsne"]
    if not tsne["enabled"]:
        return feature_space, None
    panels = tsne_panels(embeddings, labels, is_forget, max_points=tsne["max_points"],
                         perplexity=tsne["perplexity"], seed=tsne["seed"])
    feature_space["tsne"] = {"n_points": int(len(panels.index)), "perplexity": tsne["perplexity"],
                             "seed": tsne["seed"], "skipped": panels.skipped}
    if not panels.coords:
        return feature_space, None
    return feature_space, tsne_panels_png(panels.coords, panels.labels, panels.is_forget, data.class_names or None)


def shareable_section(cfg_share: ShareableSettings, models: dict[str, Any], data: Any, scenario: Any,
                      device: Any) -> tuple[str, dict[str, Any]]:
    """DP outlier statistics of the forget samples in each model's embedding space (issue 8 item 5):
    ``(markdown section, {model: released dict})``. The budget ``(eps, delta)`` is split over the models."""
    import numpy as np

    from duck.embeddings import embed_samples
    from duck.privacy.mechanisms import make_generator
    from duck.privacy.shareable import shareable_outlier_statistics

    # one generator for all the models' releases: sequential composition needs independent noise per release
    # (re-seeding per model gave every model the same draw, so differences between their counts were exact)
    gen = make_generator(cfg_share.get("seed"))
    n = len(models)
    retain = np.asarray(scenario.retain_idx)
    cap = int(cfg_share["max_retain"])
    if len(retain) > cap:
        retain = np.sort(np.random.default_rng(0).choice(retain, cap, replace=False))
    released = {}
    for name, model in models.items():
        z_f = embed_samples(model, data.train, scenario.forget_idx, device=device)[0].cpu()
        z_r = embed_samples(model, data.train, retain, device=device)[0].cpu()
        released[name] = shareable_outlier_statistics(
            z_f, z_r, eps=float(cfg_share["eps"]) / n, delta=float(cfg_share["delta"]) / n, k=int(cfg_share["k"]),
            r=float(cfg_share["r"]), n_components=int(cfg_share["n_components"]), h=int(cfg_share["h"]),
            seed=gen, device="cpu", prefix="report.shareable.")
    rows = []
    n_forget = len(scenario.forget_idx)
    for name, rel in released.items():
        c = rel["count"]
        shown = display_count(c["value"], n_forget)
        rows.append(f"| {name} | {shown} | {c['value']:.1f} | {c['sigma']:.2f} | "
                    f"{', '.join(rel['top_subspaces']['names'])} | {c['eps'] + rel['top_subspaces'].get('eps', 0.0):.3g} |")
    first = next(iter(released.values()))
    md = ("Differentially private statistics about the forget samples, safe to share with a third party "
          f"(total budget ε = {float(cfg_share['eps']):g}, δ = {float(cfg_share['delta']):g}, split over {n} models). "
          f"A forget sample counts as an outlier when fewer than k = {cfg_share['k']} of {len(retain)} retain samples "
          f"lie within r = {cfg_share['r']} retain standard deviations of it in the top {cfg_share['n_components']} "
          "principal components of the retain embeddings. Protected: the forget samples; not protected: "
          f"{first['privacy']['not_protected']}.\n\n"
          "| model | DP outlier count (shown) | released value | noise σ | top-h subspaces (DP) | ε spent |\n"
          "|---|---|---|---|---|---|\n"
          + "\n".join(rows) + f"\n\n{n_forget} forget samples in all. The released value is the true count plus "
          "Gaussian noise of standard deviation σ (about two thirds of releases fall within σ of the truth), so it "
          f"can be negative or above {n_forget}; the count shown is it rounded and clamped to [0, {n_forget}], "
          "post-processing that keeps the privacy guarantee.")
    return md, released


def display_count(value: float, n: int) -> int:
    """A released DP count as shown: rounded and clamped to ``[0, n]`` (post-processing: the guarantee holds)."""
    return int(min(max(round(float(value)), 0), int(n)))


def audit_and_report(job: Job, models: dict[str, Any], out: Path, *, summary_rows: list[dict[str, Any]],
                     run_times: dict[str, float], title: str, out_dirs: dict[str, Path],
                     warnings: list[str] | None = None) -> tuple[dict[str, Any], dict[str, Path]]:
    """LiRA + SVM MIA of ``models`` with one shadow bank, the DP "shareable statistics", the feature-space
    analysis, and the report in ``out``; each model's ``audit.json`` goes to ``out_dirs[name]``. ``warnings``
    (the job's ``warning:`` lines about the audit's inputs) go into every ``audit.json`` and open the report."""
    if job.audit is None:
        raise DuckInputError("this job has no audit settings (attack=..., report=...)")
    data, scenario, device, opts = job.data, job.scenario, job.device, job.audit
    extra: list[tuple[str, str]] = []
    lead: list[tuple[str, str]] = []  # the verdict and its evidence open the report
    released: dict[str, Any] = {}
    if opts.shareable["enabled"]:  # before the bank and before any file: data-dependent bounds fail here
        md, released = shareable_section(opts.shareable, models, data, scenario, device)
        extra.append(("Shareable statistics (differential privacy)", md))
    feature_space, tsne_png, feature_s = None, None, 0.0
    if opts.analysis["enabled"]:  # before the bank too
        t0 = time.perf_counter()
        feature_space, tsne_png = feature_space_section(opts.analysis, models, data, scenario, device)
        feature_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    audits = audit_models(opts.attack, data, scenario, models, recipe=job.recipe, model_factory=job.model_factory,
                          augment=data.augment, cache_dir=job.cache_dir, device=device, seed=job.seed,
                          trainer_cfg=job.trainer_cfg, out_dirs=out_dirs, progress=job.progress)
    bank = next(iter(audits.values()))["bank"]
    times = {**run_times, "shadow bank training": bank["train_s"], "shadow inference": bank["phi_s"],
             "audit (all models)": time.perf_counter() - t0}
    forgetting = None
    if opts.attack.forgetting["enabled"] and "unlearned" in audits and "original" in models:
        from attacks.forgetting_audit import forgetting_audit
        from duck.pipeline.stages import audit_context, evaluate

        forgetting = forgetting_audit(audit_context(job), models["original"], evaluate(job, models["original"]),
                                      target=models["unlearned"], oracle=models.get("retrained"))
        times["forgetting audit"] = forgetting["time_s"]
        audits["unlearned"]["forgetting"] = forgetting
        audits["unlearned"]["verdict"] = forgetting["verdict"]
        audits["unlearned"]["verdict_rule"] = forgetting["rule"]
        atomic_save_json(Path(out_dirs["unlearned"]) / "audit.json", audits["unlearned"])
        lead.append(("Forgetting audit (against retrained models)", forgetting_markdown(forgetting)))
    lead.append(("Membership inference in one sentence", lira_summary(audits, forgetting_ran=forgetting is not None)))
    if warnings:
        lead.append(("Warnings", "\n".join(f"- {w}" for w in warnings)))
    if feature_space is not None:
        times["feature space (density, t-SNE)"] = feature_s
    rows_by_model = {str(r.get("model", "")).split(" ")[0]: r for r in summary_rows}
    for name in audits:
        row = rows_by_model.get(name)
        if row is not None:  # the accuracies and AUS beside the verdict (summary.json's row of this model)
            audits[name]["accuracies"] = {k: row[k] for k in ("A_t", "A_f", "train_forget") if k in row}
            audits[name]["AUS"] = row.get("AUS")
        if warnings:
            audits[name]["warnings"] = list(warnings)
        if name in released:
            audits[name]["shareable"] = released[name]
        if feature_space is not None:
            audits[name]["feature_space"] = feature_space  # every model's file holds the comparison
        atomic_save_json(Path(out_dirs[name]) / "audit.json", audits[name])
    paths = write_report(out, summary_rows=summary_rows, audits=audits, config=job.config, scenario=scenario,
                         run_times=times, title=title, extra_sections=extra, lead_sections=lead,
                         feature_space=feature_space,
                         tsne_png=tsne_png)
    return audits, paths


def _shift_text(s: dict[str, Any]) -> str:
    """An equivalent shift with its interval, in per cent of the original's shift."""
    past = s.get("shift_beyond") or []  # at the grid's ends (±150 %): the value lies there or beyond

    def pct(x: float, key: str) -> str:
        return (("≤ " if x < 0 else "≥ ") if key in past else "") + f"{100 * x:.0f} %"

    ci = s.get("shift_ci")
    if s.get("shift") is None or not ci:
        return "—"
    return f"{pct(s['shift'], 'estimate')} [{pct(ci[0], 'low')}, {pct(ci[1], 'high')}]"


def verdict_sentence(block: dict[str, Any]) -> str:
    """The verdict in one sentence a non-specialist can read."""
    verdict = block["verdict"]
    margin = 100 * float(block.get("margin", 0.25))
    n = block["n_unlearned"]
    if block.get("shift_ci") is None:
        return f"**Inconclusive.** {block['rule'][:1].upper() + block['rule'][1:]}."
    lo, hi = (100 * x for x in block["shift_ci"])
    most = max(abs(lo), abs(hi))
    if verdict == "forgotten":
        return (f"**Forgotten.** On the forget set, {n} runs of {block['method']} behave like models retrained "
                f"without it: they keep at most {most:.0f} % of the original model's imprint, in either direction "
                f"(95 % interval; {margin:g} % allowed).")
    if verdict == "not_forgotten" and block.get("consistent") is False:
        return (f"**Not forgotten.** On the forget set, {n} runs of {block['method']} differ from models retrained "
                "without it in more than a shift of their outputs (no share of the original model's imprint makes "
                "them look retrained; their spread differs too).")
    if verdict == "not_forgotten" and hi < 0:
        return (f"**Not forgotten.** On the forget set, {n} runs of {block['method']} are pushed past models "
                f"retrained without it by at least {-hi:.0f} % of the original model's imprint (over-forgetting "
                f"is a trace too; 95 % interval, {margin:g} % allowed).")
    if verdict == "not_forgotten":
        return (f"**Not forgotten.** On the forget set, {n} runs of {block['method']} still differ from models "
                f"retrained without it: they keep at least {lo:.0f} % of the original model's imprint (95 % "
                f"interval; {margin:g} % allowed).")
    more = ("raise attack.forgetting.n_unlearned and n_retrained"
            + (f" to about {block['models_to_decide']}" if block.get("models_to_decide") else ""))
    if block.get("power") is False:
        return ("**Inconclusive.** This audit cannot tell even the original model, before unlearning, from models "
                f"retrained without the forget set, so it cannot judge {block['method']} (no power): {more}, or "
                "choose a forget set the original memorises.")
    return (f"**Inconclusive.** On the forget set, {n} runs of {block['method']} keep between {lo:.0f} % and "
            f"{hi:.0f} % of the original model's imprint: too uncertain to say whether they are within the "
            f"{margin:g} % allowed; to decide, {more}.")


def quality_text(quality: float, ci: list[float] | None, n_models: int) -> str:
    """F with its interval where there is one; "—" for a set of two models, whose buckets end at ⌈ln(2 − 1)⌉ = 0:
    every ε earns 0 points there, so F = 0 says nothing (attacks/epsilon.py ``epsilon_points``)."""
    if not has_buckets(n_models):
        return "— (N = 2: no ε bucket)"
    return f"{quality:.3f}" + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")


def forgetting_markdown(block: dict[str, Any]) -> str:
    """The forgetting audit as a report section: the verdict in one sentence, the evidence table (each set's
    equivalent shift with its interval, its decision, F, the final score, KLOM, accuracies), then the details."""
    def num(v: float | None) -> str:  # KLOM is undefined (None) where the reference's binning empties a side
        return "—" if v is None else f"{v:.3f}"

    def row(name: str, s: dict[str, Any]) -> str:
        f = quality_text(s["quality"], s.get("quality_ci"), s["n_models"])
        k = s["klom"]

        def median(split: dict[str, Any]) -> str:  # with its jackknife interval where there is one
            ci = split.get("median_ci")
            return num(split["median"]) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")

        decision = (s.get("decision") or "—").replace("_", " ")
        return (f"| {name} | {_shift_text(s)} | {decision} | {f} | {s['final_score']:.3f} | "
                f"{median(k['forget'])} / {num(k['forget']['p95'])} | {median(k['retain'])} | {median(k['test'])} | "
                f"{s['retain_acc']:.4f} | {s['test_acc']:.4f} |")

    method_row = {**block, "decision": block["verdict"] if block.get("shift") is not None else None}
    rows = [row(f"{block['method']} (N = {block['n_unlearned']})", method_row)]
    rows += [row(f"control: {name}", s) for name, s in block["controls"].items()]
    norm, norm_ci = block.get("quality_normalised"), block.get("quality_normalised_ci")
    u = block.get("ulira")
    ulira_text = ""
    if u:
        def auc(a: dict[str, Any]) -> str:
            return f"{a['auc']:.3f} [{a['auc_ci'][0]:.3f}, {a['auc_ci'][1]:.3f}]"

        parts = [f"method {auc(u)} (balanced accuracy {u['accuracy']:.3f}; per-example accuracy on held-out "
                 f"models {u['per_example_accuracy']['mean']:.3f} on average)"]
        parts += [f"{name} control {auc(c)}" for name, c in u["controls"].items()]
        if "auc_minus_retrain" in u:
            d = u["auc_minus_retrain"]
            parts.append(f"method minus retrain control {d['value']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}]")
        if "target" in u:
            parts.append(f"the audited checkpoint against the retrained oracle {auc(u['target'])}")
        ulira_text = (f"\n\nU-LiRA ({u['n_pairs']} shadow pairs, leave one pair out; AUC 0.5 = an attacker cannot "
                      "tell the unlearned models from retrained ones): " + "; ".join(parts) + ".")
    table = ("| models | imprint kept [95 % CI] | decision | F [95 % CI] | final score | KLOM forget (median / p95) "
             "| KLOM retain | KLOM test | retain acc | test acc |\n|---|---|---|---|---|---|---|---|---|---|\n"
             + "\n".join(rows))
    utility = block.get("utility")
    util_text = ""
    if utility:
        util_text = (f" Utility against the retrained models: retain accuracy × {utility['retain_ratio']:.3f}, test "
                     f"accuracy × {utility['test_ratio']:.3f}"
                     + ("." if utility["ok"] else f" — more than {100 * utility['max_loss']:g} % lost "
                                                  f"({', '.join(utility['exceeded'])})."))
    norm_text = ""
    if norm is not None:
        norm_text = (f" F normalised between the none (0) and retrain (1) controls: q = {norm:.3f}"
                     + (f" [{norm_ci[0]:.3f}, {norm_ci[1]:.3f}]" if norm_ci else "") + ".")
    rule = block["rule"][:1].upper() + block["rule"][1:]
    return (verdict_sentence(block) + "\n\n" + table + "\n\n"
            + f"**How this was decided.** {rule}.{util_text}{norm_text}{ulira_text}\n\n"
            "*Imprint kept*: the equivalent share of the original model's per-example shift away from retrained "
            "models that the set keeps (0 % = like retraining, 100 % = like the original, negative = pushed past "
            "the retrained models: over-forgetting), estimated by a permutation test of the runs' mean shift from "
            "the retrained models, the set moved back by each share; the ε score F checks that their spread fits "
            "too (Schuirmann's two one-sided tests; docs/audit.md). "
            f"Each row's models against R = {block['n_retrained']} models retrained on the retain set. F: the "
            "ε-based forgetting quality of the NeurIPS 2023 Machine Unlearning Challenge (Triantafillou et al. "
            "2024); KLOM: KL divergence of the margins' histograms (Georgiev et al. 2024), median [jackknife "
            "interval] / 95th percentile, 0 = identical" + klom_floor_note(block) + ". " + resolution_sentence(block))


def margins_markdown(record: dict[str, Any], source: str) -> str:
    """The report of ``duck-audit margins=FILE``: the verdict sentence, each set's imprint kept and F, and how
    it was decided."""
    rows = [f"| {record['method']} (N = {record['n_unlearned']}) | {_shift_text(record)} | "
            f"{record['verdict'].replace('_', ' ')} | "
            f"{quality_text(record['quality'], record['quality_ci'], record['n_unlearned'])} |"]
    for name, c in record["controls"].items():
        rows.append(f"| control: {name} (N = {c['n_models']}) | {_shift_text(c)} | {c['decision'].replace('_', ' ')} "
                    f"| {quality_text(c['quality'], c['quality_ci'], c['n_models'])} |")
    rule = record["rule"][:1].upper() + record["rule"][1:]
    utility = record.get("utility")
    util = ""
    if utility:
        util = (f" Utility against the retrained models: retain accuracy × {utility['retain_ratio']:.3f}, test "
                f"accuracy × {utility['test_ratio']:.3f}.")
    return (f"# Forgetting verdict\n\n{verdict_sentence(record)}\n\n"
            "| models | imprint kept [95 % CI] | decision | F [95 % CI] |\n|---|---|---|---|\n" + "\n".join(rows)
            + f"\n\n**How this was decided.** {rule}.{util}\n\nMargins from `{source}`: "
            f"{record['n_examples']} forget examples, R = {record['n_retrained']} retrained models in the bank. "
            "*Imprint kept*: the equivalent share of the original model's per-example shift away from retrained "
            "models that the set keeps (docs/audit.md).\n")


def klom_floor_note(block: dict[str, Any]) -> str:
    """At small N, KLOM's 20-bin histograms of N margins leave empty bins floored at 1e-5 (the reference's
    constant): even two sets of retrained models then score 6-12 (digits and Fashion-MNIST at N = 4-8), so the
    report says to read it against the retrain control's row rather than against 0."""
    n = min(int(block["n_unlearned"]), int(block["n_retrained"]))
    if n >= 100:
        return ""
    return (f"; at N = {block['n_unlearned']}, R = {block['n_retrained']} most of its 20 bins are empty and floored "
            "at 1e-5, so even retrained models score about 6-12 against each other: compare it with the retrain "
            "control's row, not with 0 (N >= 100 for absolute values)")


def resolution_sentence(block: dict[str, Any]) -> str:
    """What an audit of this size can resolve: the ε scale N allows and the width of the method's interval."""
    import math

    n, r = block["n_unlearned"], block["n_retrained"]
    top = math.ceil(math.log(n - 1))
    text = (f"Resolution at N = {n}, R = {r}: ε is scored in buckets of 0.5 up to ⌈ln(N − 1)⌉ = {top} "
            "(an example whose ε lies beyond earns nothing)")
    ci = block.get("shift_ci")
    if ci and all(math.isfinite(x) for x in ci):
        text += f"; the method's interval on the imprint kept is {100 * (ci[1] - ci[0]):.0f} points wide"
    return text + ". Raise attack.forgetting.n_unlearned / n_retrained (8, 32) for a finer audit."


def audit_lines(audits: dict[str, Any]) -> str:
    """One line per audited model: LiRA AUC with its confidence interval and TPR at 1 % FPR."""
    lines = []
    for name, a in audits.items():
        lira = a["lira"]
        lo, hi = lira["auc_ci"]
        lines.append(f"  LiRA {name:>10}: AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}], "
                     f"TPR@1% FPR {lira['tpr_at_fpr'].get('0.01', float('nan')):.3f}")
    return "\n".join([*lines, verdict_lines(audits)])


def verdict_lines(audits: dict[str, Any]) -> str:
    """The forgetting audit's verdict with its rule (where it ran) and LiRA's one sentence with its power, for
    the console."""
    lines = []
    for a in audits.values():
        if "forgetting" in a:
            f = a["forgetting"]
            shift = f" (imprint kept {_shift_text(f)}, margin {100 * f['margin']:g} %)" if "margin" in f else ""
            lines.append(f"  forgetting audit (N = {f['n_unlearned']}, R = {f['n_retrained']}): {f['verdict']}"
                         f"{shift}, F = {f['quality']:.3f}: {f['rule']}")
    return "\n".join([*lines, f"  {lira_summary(audits, forgetting_ran=bool(lines))}"])
