"""The audit report a user hands to an auditor: ``report.html`` (self-contained), ``report.md`` and
``plots/*.png`` (DESIGN.md §3).

Contents: the accuracy/AUS table of the original, unlearned and retrained models; the LiRA table (AUC
with its confidence interval, TPR at low FPR); the log-log ROC of the models; the SVM MIA result; the
shadow bank used; the feature-space analysis (cluster density table and bars, t-SNE maps; seeds/003
§IV-I, :mod:`duck.analysis`); run times; and the exact configuration.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attacks.audit import lira_verdict
from duck.io import atomic_write_bytes, atomic_write_text
from duck.report.document import Block, Code, Heading, Image, Markdown, Paragraph, Table, to_html, to_markdown
from duck.report.plots import auc_ci_png, density_bars_png, roc_loglog_png

MODEL_ORDER = ("original", "unlearned", "retrained")
#: how the report cites the DUCK paper (Cotogni et al., arXiv:2312.02052): by name, with section or equation
DUCK_PAPER = "DUCK, Cotogni et al. 2023"
SUMMARY_COLUMNS = {  # record key -> column header (duck-run's summary records)
    "model": "model", "method": "method", "A_t": "A_t", "A_f": "A_f", "AUS": "AUS",
    "train_forget": "train-forget acc", "forget_target": "forget target", "time_s": "time (s)", "epochs": "epochs",
}
#: columns shown with 2 decimals (times); accuracies and scores get 4
TWO_DECIMALS = ("time_s",)


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _ordered(audits: Mapping[str, Any]) -> dict[str, Any]:
    names = [n for n in MODEL_ORDER if n in audits] + [n for n in audits if n not in MODEL_ORDER]
    return {n: audits[n] for n in names}


def summary_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    keys = [k for k in SUMMARY_COLUMNS if any(k in r for r in rows)]
    keys += [k for r in rows for k in r if k not in keys and not isinstance(r[k], (dict, list))]
    keys = list(dict.fromkeys(keys))
    return Table([SUMMARY_COLUMNS.get(k, k) for k in keys],
                 [[_fmt(r.get(k), 2 if k in TWO_DECIMALS else 4) for k in keys] for r in rows])


def lira_table(audits: Mapping[str, Mapping[str, Any]]) -> Table:
    first = next(iter(audits.values()))["lira"]
    levels = list(first["tpr_at_fpr"])
    pct = f"{100 * first.get('ci_level', 0.95):g}"  # 99.9, not a rounded 100
    headers = ["model", "AUC", f"{pct} % CI", "SE", *[f"TPR @ {float(lv):.1%} FPR" for lv in levels],
               "members / non-members", "verdict"]
    rows = []
    for name, a in audits.items():
        lira = a["lira"]
        lo, hi = lira["auc_ci"]
        rows.append([name, f"{lira['auc']:.3f}", f"[{lo:.3f}, {hi:.3f}]", f"{lira['auc_se']:.3f}",
                     *[f"{100 * lira['tpr_at_fpr'][lv]:.2f} %" for lv in levels],
                     f"{lira['n_members']} / {lira['n_nonmembers']}", lira.get("verdict") or lira_verdict(lira)])
    return Table(headers, rows)


def svm_table(audits: Mapping[str, Mapping[str, Any]]) -> Table | None:
    rows = []
    for name, a in audits.items():
        s = a.get("svm_mia")
        if s:
            all_member = s.get("all_member_f1")
            rows.append([name, f"{s['f1']:.3f} ({s['f1_std']:.3f})", f"{s['accuracy']:.3f}",
                         f"{s['chance']:.3f}", "" if all_member is None else f"{all_member:.3f}",
                         f"{s['chance_accuracy']:.3f}", f"{s['n_members']} / {s['n_nonmembers']}", s["runs"]])
    if not rows:
        return None
    return Table(["model", "F1 mean (std)", "accuracy", "chance F1", "all-member F1", "chance accuracy",
                  "members / non-members", "runs"], rows)


def density_table(feature_space: Mapping[str, Any]) -> Table:
    """Group x model: log10 density, radius and sample count of each cluster (seeds/003 Eq. 9)."""
    models = feature_space["models"]
    groups = list(dict.fromkeys(g for m in models.values() for g in m))
    headers = ["group", *[f"{name}: {col}" for name in models for col in ("log10 density", "radius", "n")]]
    names = feature_space.get("class_names") or {}
    rows = []
    for g in groups:
        cells: list[Any] = [f"{g} ({names[g]})" if g in names else g]
        for m in models.values():
            d = m.get(g)
            if d is None:
                cells += ["", "", ""]
            elif d["log10_density"] is None:  # fewer than 2 samples, or all at one point: no density
                cells += ["n/a", "n/a", d["n"]]
            else:
                cells += [f"{d['log10_density']:.2f}", f"{d['radius']:.3g}", d["n"]]
        rows.append(cells)
    return Table(headers, rows)


def feature_space_blocks(feature_space: Mapping[str, Any], tsne_png: bytes | None, out: Path
                         ) -> tuple[list[Block], dict[str, Path]]:
    """The "Feature space" section: what was computed, the density table, the density bars and the t-SNE maps
    (their PNGs written under ``out/plots/``): ``(blocks, {"density_png": .., "tsne_png": ..})``."""
    n, ref = feature_space["n_components"], feature_space["reference"]
    if n is None:  # every model collapsed (model_densities): nothing to measure or draw
        return [Heading(f"Feature space ({DUCK_PAPER}, §IV-I)"), Paragraph(feature_space["note"])], {}
    how = (f"the {n} principal components explaining {100 * feature_space['variance']:g} % of the variance of the "
           f"{ref} model's embeddings (the same n for every model, so densities share their units)"
           if feature_space.get("variance") is not None else f"n = {n} principal components (configured)")
    blocks: list[Block] = [Heading(f"Feature space ({DUCK_PAPER}, §IV-I)"), Paragraph(
        "Training-split embeddings of each retain class and of the forget set, reduced by PCA to " + how + ". "
        f"Cluster density (Eq. 9) = samples within r / V_n(r), with r the radius around the centroid holding "
        f"{100 * feature_space['coverage']:g} % of the cluster; shown as log10. The paper reports a lower forget "
        "density after unlearning and retraining than in the original (n/a: a group of fewer than 2 samples, "
        "or whose samples coincide, has no density). These statistics and the t-SNE maps are "
        "not differentially private (the maps plot individual forget samples): set report.analysis.enabled=false "
        "before sharing the report with a third party." + (f" Note: {feature_space['note']}."
                                                           if feature_space.get("note") else "")
        + "".join(f" No t-SNE map for {m}: {why}." for m, why in feature_space.get("tsne", {}).get("skipped", {}).items())),
        density_table(feature_space)]
    bars = density_bars_png(feature_space)
    paths = {"density_png": atomic_write_bytes(out / "plots" / "feature_density.png", bars)}
    blocks.append(Image("plots/feature_density.png", bars, "log10 cluster density per group and model"))
    if tsne_png is not None:
        paths["tsne_png"] = atomic_write_bytes(out / "plots" / "tsne.png", tsne_png)
        blocks.append(Image("plots/tsne.png", tsne_png, "t-SNE of the embeddings, one fit per model"))
    return blocks, paths


def _scenario_dict(scenario: Any) -> dict[str, Any]:
    if scenario is None:
        return {}
    if hasattr(scenario, "summary"):
        return dict(scenario.summary())
    return dict(scenario)


def _config_yaml(config: Any) -> str:
    try:
        from omegaconf import OmegaConf

        return OmegaConf.to_yaml(OmegaConf.create(config), resolve=True)
    except Exception:  # any config that OmegaConf cannot hold is shown as JSON
        return json.dumps(config, indent=2, default=str)


def write_report(out_dir: str | Path, *, summary_rows: Sequence[Mapping[str, Any]] | None,
                 audits: Mapping[str, Mapping[str, Any]], config: Any, scenario: Any,
                 run_times: Mapping[str, float] | None = None,
                 extra_sections: Sequence[tuple[str, str]] | None = None,
                 lead_sections: Sequence[tuple[str, str]] | None = None,
                 title: str | None = None, feature_space: Mapping[str, Any] | None = None,
                 tsne_png: bytes | None = None) -> dict[str, Path]:
    """Write ``report.html``, ``report.md`` and ``plots/{roc_loglog,auc_ci}.png`` into ``out_dir``.

    ``summary_rows``: accuracy/AUS records (duck-run's summary records: model, method, A_t, A_f, AUS, ...);
    ``audits``: name -> ``audit.json`` dict as returned by ``attacks.audit.audit_models``; ``config``: the
    resolved job configuration (shown verbatim); ``scenario``: a ``Scenario`` or its summary dict;
    ``run_times``: stage -> seconds; ``extra_sections``: ``(title, markdown)`` pairs appended at the end,
    ``lead_sections`` such pairs that open the report (the verdict and its evidence), before everything else;
    ``feature_space``: :func:`duck.analysis.density.model_densities`'s dict and ``tsne_png`` the t-SNE panels
    (a "Feature space" section with ``plots/feature_density.png`` and ``plots/tsne.png``).
    Returns ``{"html": ..., "md": ..., "roc_png": ..., "auc_png": ...}`` paths (plus ``density_png`` and
    ``tsne_png`` when given)."""
    out = Path(out_dir)
    audits = _ordered(audits)
    sc = _scenario_dict(scenario)
    title = title or "duck-unlearn audit report"
    blocks: list[Block] = [Heading(title, 1)]
    shown = ("scenario", "forget_classes", "n_forget", "seed")
    if sc.get("forget_class_names"):  # the data set's names, as the user gave them
        sc = {**sc, "forget_classes": sc["forget_class_names"]}
    what = ", ".join(f"{k}={v}" for k, v in sc.items() if k in shown and v is not None)
    blocks.append(Paragraph(f"Generated {time.strftime('%Y-%m-%d %H:%M:%S %Z')}. Scenario: {what or 'n/a'}."))
    for sec_title, text in lead_sections or ():
        blocks += [Heading(sec_title), Markdown(text)]
    if audits:
        a0 = next(iter(audits.values()))
        lira0 = a0["lira"]
        nonmembers = ("test samples of the forgotten classes" if a0["nonmembers"] == "test_forget"
                      else "test samples")
        variant = lira0["variant"] + (f", {lira0['offline_test']}" if lira0["variant"] == "offline" else "")
        blocks.append(Paragraph(
            f"Membership inference: members are the {a0['n_members']} forget samples (the original trained "
            f"on "
            f"them); non-members are the {a0['n_nonmembers']} {nonmembers}. "
            f"LiRA ({variant}) with "
            f"{lira0['n_shadow']} shadow models and views {', '.join(lira0['views'])}. The original should "
            f"be "
            "attackable and the retrained oracle at chance; an unlearned model passes when its numbers match "
            "the oracle's. Every AUC carries its confidence interval, because forget sets can be small."))
    if summary_rows:
        blocks += [Heading("Accuracy and AUS"), summary_table(summary_rows)]
    paths: dict[str, Path] = {}
    if audits:
        blocks += [Heading("LiRA membership inference"), lira_table(audits)]
        first = next(iter(audits.values()))["lira"]
        blocks.append(Paragraph(
            f"TPR at a given FPR is the largest TPR whose FPR does not exceed it; with "
            f"{first['n_nonmembers']} "
            f"non-members the smallest non-zero FPR is {first['fpr_resolution']:.2%}, so lower levels are "
            f"met "
            f"only at FPR 0. CI: {first['ci_method'].replace('_', '–')}."))
        roc_png, auc_png = roc_loglog_png(audits), auc_ci_png(audits)
        paths["roc_png"] = atomic_write_bytes(out / "plots" / "roc_loglog.png", roc_png)
        paths["auc_png"] = atomic_write_bytes(out / "plots" / "auc_ci.png", auc_png)
        blocks += [Image("plots/roc_loglog.png", roc_png, "LiRA ROC, log-log axes"),
                   Image("plots/auc_ci.png", auc_png, "LiRA AUC with confidence intervals")]
        svm = svm_table(audits)
        if svm is not None:
            blocks += [Heading(f"SVM membership inference ({DUCK_PAPER}, Supp. V-F)"), svm,
                       Paragraph("RBF SVM on the softmax vector, C and γ by 3-fold grid search, 80/20 split, "
                                 "mean F1 over the runs. Chance F1 = the member fraction (a random guess at the "
                                 "prior); all-member F1 = the F1 of calling every sample a member, the best a "
                                 "guess that ignores the sample reaches: an F1 at or below it shows no "
                                 "membership signal.")]
        bank = next(iter(audits.values())).get("bank") or {}
        if bank:
            blocks += [Heading("Shadow bank"), Table(
                ["key", "shadows", "pool", "trained in this job", "mode", "training (s)", "directory"],
                [[bank["key"], bank["n_shadow"], bank["pool"], bank["trained_now"],
                  bank.get("mode") or "cached", _fmt(bank.get("train_s"), 1), bank["dir"]]])]
    if feature_space is not None:
        section, section_paths = feature_space_blocks(feature_space, tsne_png, out)
        blocks += section
        paths.update(section_paths)
    if run_times:
        times = [[stage, _fmt(float(seconds), 2)] for stage, seconds in run_times.items()]
        blocks += [Heading("Run time"), Table(["stage", "seconds"], times)]
    for sec_title, text in extra_sections or ():
        blocks += [Heading(sec_title), Markdown(text)]
    blocks += [Heading("Configuration"), Code(_config_yaml(config), "yaml")]
    paths["md"] = atomic_write_text(out / "report.md", to_markdown(blocks))
    paths["html"] = atomic_write_text(out / "report.html", to_html(blocks, title))
    return paths
