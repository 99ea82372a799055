"""``duck-audit ckpt=PATH scenario=...``: LiRA (+ SVM MIA) audit of any checkpoint with the cached shadow
bank.

Optional references (``original_ckpt=``, ``retrained_ckpt=``) are audited with the same bank. Writes, in the
run directory: ``audit.json`` and ``lira_stats.npz`` of the checkpoint (references under ``<role>/``),
``report.html``, ``report.md`` and ``plots/*.png``. The report also carries the DP "shareable statistics"
(``report.shareable``) and the feature-space analysis (``report.analysis``: cluster density and t-SNE,
seeds/003 §IV-I).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from attacks.audit import REFERENCE_NAMES, AuditSettings, audit_models, check_audit_data
from attacks.shadow import check_cache_dir
from duck.analysis.options import check_analysis_cfg, check_analysis_data
from duck.cli._app import hydra_entry
from duck.cli.setup import (
    build_data,
    build_model,
    build_scenario_cfg,
    check_trainer,
    container,
    device_of,
    load_model,
    output_dir,
    recipe,
)
from duck.errors import DuckInputError
from duck.io import atomic_save_json
from duck.metrics import aus_inputs, scenario_aus, split_accuracies
from duck.privacy.shareable import check_shareable_cfg
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


def check_recorded_recipes(manifests: dict[str, dict[str, Any] | None], requested: Any) -> None:
    """Warn when a checkpoint that records its own training (an original or a retrained oracle: duck-train,
    duck-run) was trained with another recipe than ``recipe=...``, which trains the shadows. An unlearned
    checkpoint's manifest holds the unlearning job's recipe setting, not the one its original was trained
    with, so it says nothing here (it warned for the right recipe before)."""
    for name, manifest in manifests.items():
        if (manifest or {}).get("method") not in ("original", "retrain"):
            continue
        recorded = (manifest.get("config") or {}).get("recipe")
        if isinstance(recorded, dict) and recorded != requested:
            warn_line(f"the {name} checkpoint was trained with another recipe than recipe=... (epochs "
                      f"{recorded.get('epochs')} vs {requested.get('epochs')}); the shadows are trained with the "
                      "configured recipe, which should be the one the target models were trained with")


def accuracy_rows(models: dict[str, Any], methods: dict[str, str], data: Any, scenario: Any, device: Any,
                  batch_size: int) -> list[dict[str, Any]]:
    """Accuracy/AUS records of the audited models (AUS needs the original: given, or the target itself)."""
    accs = {n: split_accuracies(m, data, scenario, device=device, batch_size=batch_size) for n,
            m in models.items()}
    original_acc = accs.get("original")
    rows = []
    for name, acc in accs.items():
        _, a_t, a_f = aus_inputs(acc, acc, scenario)
        rows.append({"model": name, "method": methods.get(name), "A_t": a_t, "A_f": a_f,
                     "AUS": scenario_aus(acc, original_acc, scenario) if original_acc else None,
                     "train_forget": acc.get("train_forget")})
    return rows


def check_audit_options(cfg: DictConfig, data: Any = None, scenario: Any = None
                        ) -> tuple[AuditSettings, dict[str, Any], dict[str, Any]]:
    """Every audit option (``attack.*``, ``report.shareable.*``, ``report.analysis.*``, the cache directory)
    checked before any work: ``(attack settings, shareable settings, analysis settings)``. Given the data and the scenario, the
    bounds that depend on them (``n_components`` against the embedding dimension and the samples, ``k``
    against the retain samples, the feature-space groups' sizes and t-SNE's perplexity) are checked too, on
    a freshly built model."""
    settings = AuditSettings.from_cfg(container(cfg.attack))
    report_cfg = container(cfg.report) if cfg.get("report") is not None else {}
    share = check_shareable_cfg(report_cfg.get("shareable"))
    analysis = check_analysis_cfg(report_cfg.get("analysis"))
    check_cache_dir(cfg.cache_dir)
    if data is not None and scenario is not None:  # the SVM MIA's sample counts, the class-removal test samples
        check_audit_data(settings, len(data.test), scenario)
    if (share["enabled"] or analysis["enabled"]) and data is not None and scenario is not None:
        import numpy as np
        import torch

        from duck.unlearn.duck import embed_samples

        with torch.no_grad():
            dim = int(embed_samples(build_model(cfg, data), data.train, np.array([0]), device=torch.device("cpu"))[0]
                      .shape[1])
        check_analysis_data(analysis, feature_group_sizes(data, scenario), dim)
        if share["enabled"]:
            n_retain = min(len(scenario.retain_idx), share["max_retain"])
            if share["n_components"] > min(dim, n_retain - 1):
                raise DuckInputError(f"report.shareable.n_components={share['n_components']} exceeds min(embedding "
                                     f"dim {dim}, n_retain - 1 = {n_retain - 1}); lower it")
            if share["k"] > n_retain:
                raise DuckInputError(f"report.shareable.k={share['k']} exceeds the number of retain samples "
                                     f"({n_retain}); lower it")
    return settings, share, analysis


def feature_samples(scenario: Any) -> tuple[Any, Any]:
    """The training samples the feature-space analysis embeds (forget + retain, ascending) and which are
    forget samples: ``(idx (N,), is_forget (N,))``."""
    import numpy as np

    idx = np.sort(np.concatenate([scenario.forget_idx, scenario.retain_idx]))
    return idx, np.isin(idx, scenario.forget_idx)


def feature_group_sizes(data: Any, scenario: Any) -> dict[str, int]:
    """Training samples per feature-space group: each retain class (its retain samples) and ``forget``."""
    import numpy as np

    from duck.analysis.density import group_labels

    idx, is_forget = feature_samples(scenario)
    groups, counts = np.unique(group_labels(data.train.labels[idx], is_forget).astype(str), return_counts=True)
    return dict(zip(groups.tolist(), counts.tolist(), strict=True))


def feature_space_section(options: dict[str, Any], models: dict[str, Any], data: Any, scenario: Any,
                          device: Any) -> tuple[dict[str, Any], bytes | None]:
    """The feature-space analysis of seeds/003 §IV-I on the training split (forget + retain samples):
    ``(feature_space dict for audit.json and the report, t-SNE panels PNG or None)``. Cluster density (Eq. 9)
    of every retain class and of the forget set in each model, with the PCA dimension chosen on the original
    model (:func:`duck.analysis.density.model_densities`); a t-SNE map per model on a stratified subsample."""

    from duck.analysis.density import group_labels, model_densities
    from duck.analysis.tsne import tsne_panels
    from duck.report.plots import tsne_panels_png
    from duck.unlearn.duck import embed_samples

    idx, is_forget = feature_samples(scenario)
    embeddings, labels = {}, None
    for name, model in models.items():
        z, y, _ = embed_samples(model, data.train, idx, device=device)
        embeddings[name], labels = z.cpu().double(), y.cpu().numpy()
    dens = options["density"]
    feature_space = model_densities(embeddings, group_labels(labels, is_forget), n_components=dens["n_components"],
                                    variance=dens["variance"], coverage=dens["coverage"])
    tsne = options["tsne"]
    if not tsne["enabled"]:
        return feature_space, None
    panels = tsne_panels(embeddings, labels, is_forget, max_points=tsne["max_points"],
                         perplexity=tsne["perplexity"], seed=tsne["seed"])
    feature_space["tsne"] = {"n_points": int(len(panels.index)), "perplexity": tsne["perplexity"],
                             "seed": tsne["seed"], "skipped": panels.skipped}
    if not panels.coords:
        return feature_space, None
    return feature_space, tsne_panels_png(panels.coords, panels.labels, panels.is_forget)


def shareable_section(cfg_share: dict[str, Any], models: dict[str, Any], data: Any, scenario: Any,
                      device: Any) -> tuple[str, dict[str, Any]]:
    """DP outlier statistics of the forget samples in each model's embedding space (issue 8 item 5):
    ``(markdown section, {model: released dict})``. The budget ``(eps, delta)`` is split over the models."""
    import numpy as np

    from duck.privacy.mechanisms import make_generator
    from duck.privacy.shareable import shareable_outlier_statistics
    from duck.unlearn.duck import embed_samples

    cfg_share = check_shareable_cfg(cfg_share)
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
    for name, rel in released.items():
        c = rel["count"]
        rows.append(f"| {name} | {c['value']:.1f} | {c['sigma']:.2f} | {', '.join(rel['top_subspaces']['names'])} "
                    f"| {c['eps'] + rel['top_subspaces'].get('eps', 0.0):.3g} |")
    first = next(iter(released.values()))
    md = ("Differentially private statistics about the forget samples, safe to share with a third party "
          f"(total budget ε = {float(cfg_share['eps']):g}, δ = {float(cfg_share['delta']):g}, split over {n} models). "
          f"A forget sample counts as an outlier when fewer than k = {cfg_share['k']} of {len(retain)} retain samples "
          f"lie within r = {cfg_share['r']} retain standard deviations of it in the top {cfg_share['n_components']} "
          "principal components of the retain embeddings. Protected: the forget samples; not protected: "
          f"{first['privacy']['not_protected']}.\n\n"
          "| model | DP outlier count | noise σ | top-h subspaces (DP) | ε spent |\n|---|---|---|---|---|\n"
          + "\n".join(rows) + f"\n\n{len(scenario.forget_idx)} forget samples in all.")
    return md, released


def audit_and_report(cfg: DictConfig, data: Any, scenario: Any, models: dict[str, Any], out: Path, *,
                     summary_rows: list[dict[str, Any]], run_times: dict[str, float], title: str,
                     out_dirs: dict[str, Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """LiRA + SVM MIA of ``models`` with one shadow bank, the DP "shareable statistics", and the report.
    Shared by duck-run, duck-unlearn (``audit=true``) and duck-audit."""
    device = device_of(cfg)
    _, share_cfg, analysis = check_audit_options(cfg)
    extra = []
    released: dict[str, Any] = {}
    if share_cfg["enabled"]:  # before the bank and before any file: data-dependent bounds fail here
        md, released = shareable_section(share_cfg, models, data, scenario, device)
        extra.append(("Shareable statistics (differential privacy)", md))
    feature_space, tsne_png, feature_s = None, None, 0.0
    if analysis["enabled"]:  # before the bank too
        t0 = time.perf_counter()
        feature_space, tsne_png = feature_space_section(analysis, models, data, scenario, device)
        feature_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    audits = audit_models(container(cfg.attack), data, scenario, models, recipe=recipe(cfg),
                          model_factory=lambda: build_model(cfg, data), augment=data.augment,
                          cache_dir=cfg.cache_dir, device=device, seed=int(cfg.seed),
                          trainer_cfg=container(cfg.trainer), out_dirs=out_dirs, progress=bool(cfg.progress))
    bank = next(iter(audits.values()))["bank"]
    times = {**run_times, "shadow bank training": bank["train_s"], "shadow inference": bank["phi_s"],
             "audit (all models)": time.perf_counter() - t0}
    if feature_space is not None:
        times["feature space (density, t-SNE)"] = feature_s
    for name in audits:
        if name in released:
            audits[name]["shareable"] = released[name]
        if feature_space is not None:
            audits[name]["feature_space"] = feature_space  # every model's file holds the comparison
        if name in released or feature_space is not None:
            atomic_save_json(Path(out_dirs[name]) / "audit.json", audits[name])
    paths = write_report(out, summary_rows=summary_rows, audits=audits, config=container(cfg), scenario=scenario,
                         run_times=times, title=title, extra_sections=extra, feature_space=feature_space,
                         tsne_png=tsne_png)
    return audits, paths


def audit(cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    check_audit_options(cfg)  # fail on a bad attack/report option before loading anything
    data = build_data(cfg)
    scenario = build_scenario_cfg(cfg, data)
    if scenario is None:
        raise DuckInputError("duck-audit needs a scenario (it defines the members): "
                             "scenario=class_removal|homogeneous_removal|custom|targeted")
    check_audit_options(cfg, data, scenario)
    device = check_trainer(cfg)
    # a checkpoint unlearned or retrained for another forget set is refused: its audit would test the
    # wrong members
    target, manifest = load_model(cfg.ckpt, cfg, data, scenario)
    role = resolve_role(str(cfg.role), manifest)
    models, methods = {role: target}, {role: (manifest or {}).get("method") or "?"}
    manifests = {role: manifest}
    for ref in REFERENCE_NAMES:
        path = cfg.get(f"{ref}_ckpt")
        if path:
            if ref == role:
                raise DuckInputError(f"{ref}_ckpt given, but the audited checkpoint is the {ref} itself; "
                                     "drop one")
            if not Path(str(path)).expanduser().is_file():  # load_checkpoint's message would say "ckpt="
                raise DuckInputError(f"{ref}_ckpt={path} not found; pass {ref}_ckpt=PATH to an existing checkpoint")
            models[ref], ref_manifest = load_model(path, cfg, data, scenario)
            methods[ref] = (ref_manifest or {}).get("method") or ref
            manifests[ref] = ref_manifest
    check_recorded_recipes(manifests, container(cfg.recipe))
    out = output_dir()
    out_dirs = {name: out if name == role else out / name for name in models}
    rows = accuracy_rows(models, methods, data, scenario, device, int(cfg.eval_batch_size))
    audits, paths = audit_and_report(cfg, data, scenario, models, out, summary_rows=rows, run_times={},
                                     title=f"duck-audit: {Path(str(cfg.ckpt)).name} ({role})", out_dirs=out_dirs)
    lira = audits[role]["lira"]
    lo, hi = lira["auc_ci"]
    print(f"LiRA {lira['variant']} on {role}: AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}], "
          + ", ".join(f"TPR@{float(k):.1%} FPR {v:.3f}" for k, v in lira["tpr_at_fpr"].items()))
    print(f"wrote {out / 'audit.json'}\nreport: {paths['html']}")
    return audits[role], {"audits": audits, "paths": paths, "out": out}


main = hydra_entry("audit", audit)

if __name__ == "__main__":
    main()
