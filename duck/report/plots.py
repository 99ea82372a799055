"""Report figures as PNG bytes (matplotlib's object API with the Agg canvas: no pyplot state, no display).

- :func:`roc_loglog_png`: the LiRA ROC of every audited model on log-log axes from 1e-5 to 1
  (ALGORITHMS.md §4; Carlini et al. 2022 argue for the low-FPR regime), with the chance diagonal.
- :func:`auc_ci_png`: each model's AUC with its confidence interval against the chance level 0.5.
- :func:`density_bars_png`: log10 cluster density (seeds/003 Eq. 9) of each group and model, grouped bars
  as in the paper's Fig. 5C.
- :func:`tsne_panels_png`: one t-SNE map per model (Fig. 5A/B), coloured by class, forget samples marked.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

AXIS_MIN = 1e-5
COLORS = {"original": "#d62728", "unlearned": "#1f77b4", "retrained": "#2ca02c"}


def _figure(width: float = 5.2, height: float = 4.4) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _label(name: str, lira: Mapping[str, Any]) -> str:
    lo, hi = lira["auc_ci"]
    return f"{name}: AUC {lira['auc']:.3f} [{lo:.3f}, {hi:.3f}]"


def resolvable_min(audits: Mapping[str, Mapping[str, Any]]) -> tuple[float, float]:
    """The smallest FPR and TPR the audits can resolve: one non-member / one member out of all of them (the
    ROC has no information below; a 1e-5 axis over 46 non-members spent 80 % of the plot on nothing). At most
    0.5: with one member (a one-sample deletion request) the axis would otherwise be the single point 1."""
    n_neg = min(int(a.get("n_nonmembers") or a["lira"].get("n_nonmembers") or 1e5) for a in audits.values())
    n_pos = min(int(a.get("n_members") or a["lira"].get("n_members") or 1e5) for a in audits.values())
    return (min(0.5, max(AXIS_MIN, 1.0 / max(n_neg, 1))), min(0.5, max(AXIS_MIN, 1.0 / max(n_pos, 1))))


def roc_loglog_png(audits: Mapping[str, Mapping[str, Any]], title: str = "LiRA ROC") -> bytes:
    """Log-log ROC of each audit's ``lira.roc`` (FPR grid and the TPR at each level); the axes start at the
    resolvable rates (:func:`resolvable_min`: one non-member, one member)."""
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    x_min, y_min = resolvable_min(audits)
    grid = np.logspace(np.log10(min(x_min, y_min)), 0, 200)
    ax.plot(grid, grid, ls="--", color="grey", lw=1, label="chance")
    for name, audit in audits.items():
        lira = audit["lira"]
        fpr = np.clip(np.asarray(lira["roc"]["fpr"], dtype=float), x_min, 1.0)
        tpr = np.clip(np.asarray(lira["roc"]["tpr"], dtype=float), y_min, 1.0)
        ax.plot(fpr, tpr, drawstyle="steps-post", lw=1.8, color=COLORS.get(name), label=_label(name, lira))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(x_min, 1.0)
    ax.set_ylim(y_min, 1.0)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    return _png(fig)


def auc_ci_png(audits: Mapping[str, Mapping[str, Any]]) -> bytes:
    """Each model's LiRA AUC with its confidence interval; the dashed line is chance (0.5)."""
    fig = _figure(5.2, 0.9 + 0.55 * max(1, len(audits)))
    ax = fig.add_subplot(1, 1, 1)
    names = list(audits)
    for i, name in enumerate(names):
        lira = audits[name]["lira"]
        lo, hi = lira["auc_ci"]
        # a percentile interval need not contain the estimate (tiny samples, ties): bars never negative
        ax.errorbar([lira["auc"]], [i], xerr=_interval_bars(float(lira["auc"]), (lo, hi)), fmt="o", capsize=4,
                    color=COLORS.get(name, "black"))
    ax.axvline(0.5, ls="--", color="grey", lw=1)
    ax.set_yticks(range(len(names)), names)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.invert_yaxis()
    level = next(iter(audits.values()))["lira"].get("ci_level", 0.95) if audits else 0.95
    ax.set_xlabel(f"LiRA AUC ({100 * level:g} % confidence interval)")
    ax.grid(True, axis="x", alpha=0.3)
    return _png(fig)


def _model_color(name: str, i: int) -> Any:
    return COLORS.get(name, f"C{3 + i}")


def density_bars_png(feature_space: Mapping[str, Any]) -> bytes:
    """Grouped bars: for each group (retain classes, then ``forget``) the log10 cluster density of every model
    (``feature_space["models"][model][group]["log10_density"]``, see :func:`duck.analysis.density.model_densities`)."""
    models = feature_space["models"]
    names = list(models)
    groups = list(dict.fromkeys(g for m in models.values() for g in m))
    fig = _figure(max(5.2, 0.55 * len(groups) * max(1, len(names)) / 2 + 2), 3.6)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(names))
    x = np.arange(len(groups))
    for i, name in enumerate(names):
        values = [np.nan if (v := models[name].get(g, {}).get("log10_density")) is None else v for g in groups]
        ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=name, color=_model_color(name, i))
    ax.set_xticks(x, groups, rotation=45, ha="right")
    ax.set_ylabel(f"log10 density (n = {feature_space['n_components']} PCA dims)")
    ax.set_title("Cluster density (DUCK, Cotogni et al. 2023, Eq. 9)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    return _png(fig)


def tsne_panels_png(coords: Mapping[str, np.ndarray], labels: Sequence[int] | np.ndarray,
                    is_forget: Sequence[bool] | np.ndarray, class_names: Sequence[str] | None = None) -> bytes:
    """One t-SNE panel per model (``coords``: model -> ``(m, 2)``): retain samples as dots coloured by class,
    forget samples as black-edged crosses in their class colour; one legend (classes, forget) below."""
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    y, forget = np.asarray(labels), np.asarray(is_forget, dtype=bool)
    classes = np.unique(y)
    cmap = colormaps["tab10" if len(classes) <= 10 else "tab20"]
    colors = np.asarray([cmap(i % cmap.N) for i in range(len(classes))])[np.searchsorted(classes, y)]  # (m, 4)
    fig = _figure(3.6 * max(1, len(coords)), 4.2)
    for i, (name, xy) in enumerate(coords.items()):
        ax = fig.add_subplot(1, max(1, len(coords)), i + 1)
        ax.scatter(xy[~forget, 0], xy[~forget, 1], s=5, alpha=0.7, c=colors[~forget])
        ax.scatter(xy[forget, 0], xy[forget, 1], s=22, marker="X", c=colors[forget], edgecolors="black",
                   linewidths=0.4)
        ax.set_title(name)
        ax.set_xticks([])
        ax.set_yticks([])
    names = [class_names[c] if class_names and c < len(class_names) else f"class {c}" for c in classes.tolist()]
    handles = [Line2D([], [], ls="", marker="o", ms=4, color=cmap(i % cmap.N), label=names[i])
               for i in range(len(classes))]
    handles.append(Line2D([], [], ls="", marker="X", ms=6, color="grey", markeredgecolor="black", label="forget"))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 11), fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, -0.02))
    fig.suptitle(f"t-SNE of the embeddings ({len(y)} training samples, one fit per model)", fontsize=9)
    return _png(fig)


def _interval_bars(value: float, ci: Sequence[float] | None) -> list[list[float]]:
    """``yerr`` of one point from its interval (never negative: an interval need not contain its estimate)."""
    if not ci:
        return [[0.0], [0.0]]
    return [[max(0.0, value - float(ci[0]))], [max(0.0, float(ci[1]) - value)]]


def tradeoff_png(points: Sequence[Mapping[str, Any]], references: Sequence[Mapping[str, Any]],
                 margin: float | None) -> bytes:
    """:func:`tradeoff_figure` as PNG bytes."""
    return _png(tradeoff_figure(points, references, margin))


def tradeoff_figure(points: Sequence[Mapping[str, Any]], references: Sequence[Mapping[str, Any]],
                    margin: float | None) -> Any:
    """The sweep's trade-off at a glance, one point per job and method (colour: method; area: time relative to
    retraining): left, normalised forgetting q (0 = the ``none`` control, 1 = the ``retrain`` control) against
    retained test accuracy; right, the verdict's scale, the share of the original's imprint kept, with the
    ``forgotten`` band ±``margin`` shaded. Error bars: each job's interval. ``references``: ``{"label", "A_t",
    "q", "imprint"}`` points of the controls, drawn in black."""
    from matplotlib import colormaps
    from matplotlib.ticker import MaxNLocator

    fig = _figure(10.4, 4.4)
    axes = [fig.add_subplot(1, 2, i + 1) for i in range(2)]
    methods = list(dict.fromkeys(str(p["method"]) for p in points))
    cmap = colormaps["tab10" if len(methods) <= 10 else "tab20"]
    color = {m: cmap(i % cmap.N) for i, m in enumerate(methods)}
    markers = {m: "osD^vP<>"[(i // cmap.N) % 8] if len(methods) > cmap.N else "o" for i, m in enumerate(methods)}
    for ax, key, label in ((axes[0], "F_normalised", "normalised forgetting q (1 = like retraining)"),
                           (axes[1], "imprint_kept", "imprint kept (0 = like retraining, 1 = like the original)")):
        if key == "imprint_kept" and margin is not None:
            ax.axhspan(-margin, margin, color="#2ca02c", alpha=0.12, lw=0, label=f"forgotten zone (±{margin:g})")
        for method in methods:
            first = True
            for p in points:
                if str(p["method"]) != method or p.get(key) is None or p.get("A_t") is None:
                    continue
                size = 30 * min(4.0, max(0.25, float(p.get("time_ratio") or 1.0)) * 4)
                ax.errorbar([p["A_t"]], [p[key]], yerr=_interval_bars(float(p[key]), p.get(f"{key}_ci")), fmt="none",
                            ecolor=color[method], alpha=0.7, capsize=3)
                ax.scatter([p["A_t"]], [p[key]], s=size, color=color[method], marker=markers[method], alpha=0.85,
                           edgecolors="white", label=method if first else None, zorder=3)
                first = False
        ref_key = "q" if key == "F_normalised" else "imprint"
        for r, marker in zip(references, ("X", "*", "P", "D"), strict=False):
            if r.get(ref_key) is not None and r.get("A_t") is not None:
                # beneath the methods' markers: a method at a control's point (q = 0, or A_t alike) stays visible
                ax.scatter([r["A_t"]], [r[ref_key]], s=110, marker=marker, color="black", label=r["label"], zorder=2)
        ax.set_xlabel("retained test accuracy A_t")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4, min_n_ticks=2))  # close accuracies: a few readable ticks
        ax.set_ylabel(label, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0].set_title("Forgetting against utility (marker area: time / retraining)", fontsize=9)
    axes[1].set_title("The verdict's scale", fontsize=9)
    handles, labels = axes[1].get_legend_handles_labels()
    fig.tight_layout()
    legend = fig.legend(handles, labels, loc="upper center", ncol=min(6, max(1, len(labels))), fontsize=7,
                        frameon=False, bbox_to_anchor=(0.5, 0.0), markerscale=0.7)
    for handle in legend.legend_handles:  # legend markers of one size (the plot's size is the time)
        if hasattr(handle, "set_sizes"):
            handle.set_sizes([36])
    return fig
