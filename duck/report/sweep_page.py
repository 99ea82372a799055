"""The sweep page, ``sweep.html``: what a user comparing methods wants at a glance, from the rows of a
``duck-run -m`` sweep (:mod:`duck.report.sweep`) or of ``duck-bench compare``.

The page opens with the forgetting verdicts counted in one sentence, then the trade-off plot
(:func:`duck.report.plots.tradeoff_png`: normalised forgetting and the imprint kept against retained test
accuracy, marker area = time relative to retraining, the controls as reference points), then the table per method
(sortable; the forgetting columns — verdicts, imprint kept, q and F with intervals, KLOM — beside accuracy, AUS,
time and LiRA AUC), then one row per job when the sweep covers several forget sets or seeds, then failed jobs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attacks.epsilon import has_buckets
from duck.report.document import Block, Heading, Image, Markdown, Paragraph, Table, to_html
from duck.report.plots import tradeoff_png

#: the verdicts of the forgetting audit, from the kindest (docs/audit.md)
VERDICTS = ("forgotten", "inconclusive", "not_forgotten")
#: rows that are references, not methods: the original model and the model retrained without the forget set
REFERENCES = ("original", "retrain")


def forgetting_fields(block: Mapping[str, Any]) -> dict[str, Any]:
    """The forgetting columns of one run from its audit's ``forgetting`` block: the imprint kept (the verdict's
    equivalent shift, with its interval), F (with its interval), q (F normalised between the controls), the final
    score, KLOM on the forget examples (median), U-LiRA's AUC where it ran, the verdict, the mean time of the
    audit's N unlearning runs, and the controls' F (F is None for a set of 2 models: its ε buckets end at 0)."""
    def f_of(s: Mapping[str, Any]) -> dict[str, Any]:  # F is undefined for a set of 2 models (no ε bucket): "—"
        defined = has_buckets(s.get("n_models", 3))  # blocks written before n_models was stored: defined
        return {"F": s["quality"] if defined else None, "F_ci": s.get("quality_ci") if defined else None}

    out = {**f_of(block), "final_score": block["final_score"],
           "klom_forget": block["klom"]["forget"]["median"], "F_normalised": block.get("quality_normalised"),
           "F_normalised_ci": block.get("quality_normalised_ci"), "imprint_kept": block.get("shift"),
           "imprint_kept_ci": block.get("shift_ci"), "verdict": block["verdict"], "margin": block.get("margin"),
           "runs_time_s": (sum(block["unlearning_s"]) / len(block["unlearning_s"])) if block.get("unlearning_s") else None}
    if "ulira" in block:
        out["ulira_auc"] = block["ulira"]["auc"]
    out["controls_F"] = {name: f_of(c) for name, c in block["controls"].items()}
    return out


def verdict_counts(verdicts: Sequence[str | None]) -> str:
    """``"2 forgotten, 1 inconclusive"`` (the kindest first; empty without a verdict)."""
    counts = Counter(v for v in verdicts if v)
    order = [*VERDICTS, *sorted(set(counts) - set(VERDICTS))]
    return ", ".join(f"{counts[v]} {v.replace('_', ' ')}" for v in order if counts[v])


def _number(value: Any, digits: int = 3, percent: bool = False) -> str:
    if value is None:
        return "—"
    return f"{100 * float(value):.0f} %" if percent else f"{float(value):.{digits}f}"


def value_text(row: Mapping[str, Any], key: str, digits: int = 3, percent: bool = False) -> str:
    """A column's cell: a job's value with its interval (``0.102 [0.039, 0.166]``), or a summary row's mean (std)
    over its jobs (with the one job's interval when there is one job)."""
    value = row.get(key)
    if isinstance(value, Mapping):  # a summary row: mean_std over jobs
        if value.get("n", 1) > 1:
            return f"{_number(value['mean'], digits, percent)} ({_number(value['std'], digits, percent)})"
        value = value["mean"]
    ci = row.get(f"{key}_ci")
    text = _number(value, digits, percent)
    if value is not None and ci:
        text += f" [{_number(ci[0], digits, percent)}, {_number(ci[1], digits, percent)}]"
    return text


def headline(rows: Sequence[Mapping[str, Any]]) -> str:
    """The page's first sentence: the verdicts counted over the jobs' methods, in plain words."""
    methods = [r for r in rows if r.get("method") not in REFERENCES]
    judged = [r for r in methods if r.get("verdict")]
    n_methods = len({r["method"] for r in judged})
    if not judged:
        return (f"{len(methods)} unlearning run(s) of {len({r['method'] for r in methods})} method(s); no forgetting "
                "audit in this sweep, so no "
                "verdict, imprint kept or q (run it with attack.forgetting.enabled=true, or "
                "bench.forgetting.enabled=true).")
    forgotten = sorted({r["method"] for r in judged if r["verdict"] == "forgotten"})
    return (f"**{verdict_counts([r['verdict'] for r in judged])}** among {len(judged)} audited run(s) of {n_methods} "
            "method(s), each judged against models retrained without the forget set"
            + (f"; judged forgotten: {', '.join(forgotten)}." if forgotten else "; no method was judged forgotten."))


#: the summary table's columns: (header, row key, digits, percent)
SUMMARY_COLUMNS = (("imprint kept", "imprint_kept", 0, True), ("q", "F_normalised", 3, False), ("F", "F", 3, False),
                   ("KLOM forget", "klom_forget", 2, False), ("A_t", "A_t", 3, False), ("A_f", "A_f", 3, False),
                   ("AUS", "AUS", 3, False), ("time / retraining", "time_ratio", 3, False),
                   ("time (s)", "time_s", 2, False), ("LiRA AUC", "lira_auc", 3, False))


def _present(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, int, bool]]:
    return [c for c in SUMMARY_COLUMNS if any(r.get(c[1]) is not None for r in rows)]


def summary_table(summary: Sequence[Mapping[str, Any]]) -> Table:
    """One row per (setup, scenario, method): jobs, verdicts counted, then :data:`SUMMARY_COLUMNS` present."""
    columns = _present(summary)
    setups = any(s.get("setup") for s in summary)
    scenarios = len({s.get("scenario") for s in summary}) > 1
    headers = [*(["scenario"] if scenarios else []), *(["setup"] if setups else []), "method", "jobs", "verdicts",
               *(c[0] for c in columns)]
    rows = [[*([s.get("scenario") or ""] if scenarios else []), *([s.get("setup") or ""] if setups else []),
             str(s["method"]) + (f" ({s['method_overrides']})" if s.get("method_overrides") else ""), s.get("n", 1),
             verdict_counts(s.get("verdicts") or []) or "—", *(value_text(s, key, d, pct) for _, key, d, pct in columns)]
            for s in summary]
    return Table(headers, rows, sortable=True)


def job_table(rows: Sequence[Mapping[str, Any]]) -> Table:
    """One row per job and method (per forget set, seed): the verdict and the columns with their intervals."""
    columns = _present(rows)
    headers = ["scenario", "forget set", "seed", "method", "verdict", *(c[0] for c in columns)]
    body = [[r.get("scenario") or "", r.get("forget") or "", r.get("seed", ""), r["method"],
             (r.get("verdict") or "—").replace("_", " "), *(value_text(r, key, d, pct) for _, key, d, pct in columns)]
            for r in rows if r.get("method") not in REFERENCES]
    return Table(headers, body, sortable=True)


def references(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The controls as the plot's reference points, by definition of the scales: ``none`` (the original) at
    q = 0 and imprint 1, ``retrain`` at q = 1 and imprint 0, each at its mean test accuracy."""
    out = []
    for method, label, q in (("original", "none control (original)", 0.0), ("retrain", "retrain control", 1.0)):
        accs = [float(r["A_t"]) for r in rows if r.get("method") == method and r.get("A_t") is not None]
        if accs:
            out.append({"label": label, "A_t": sum(accs) / len(accs), "q": q, "imprint": 1.0 - q})
    return out


def sweep_blocks(title: str, summary: Sequence[Mapping[str, Any]], rows: Sequence[Mapping[str, Any]],
                 failed: Sequence[Mapping[str, Any]] = (), note: str = "") -> list[Block]:
    """The page's blocks (also its Markdown): headline, plot, tables, failed jobs, ``note``."""
    scenarios = ", ".join(dict.fromkeys(str(r["scenario"]) for r in rows if r.get("scenario")))
    blocks: list[Block] = [Heading(title + (f" ({scenarios})" if scenarios else ""), 1), Markdown(headline(rows))]
    points = [r for r in rows if r.get("method") not in REFERENCES]
    audited = any(r.get("F_normalised") is not None or r.get("imprint_kept") is not None for r in points)
    if audited:
        margin = next((r["margin"] for r in points if r.get("margin") is not None), None)
        png = tradeoff_png(points, references(rows), margin)
        blocks.append(Image("sweep_tradeoff.png", png, "forgetting against retained test accuracy, per job"))
    methods = [s for s in summary if s.get("method") not in REFERENCES]
    refs = [s for s in summary if s.get("method") in REFERENCES]
    blocks += [Heading("Methods"), summary_table([*refs, *methods]),
               Paragraph("Mean (std) over the jobs; with one job, its value and its interval. "
                         + ("Imprint kept: the share of the original model's shift away from retrained models that "
                            "the unlearned models keep (0 % = like retraining; the verdict's scale); q: the ε-score "
                            "F normalised between the none (0) and retrain (1) controls. " if audited else "")
                         + "Click a column's header to sort.")]
    keys = {(r.get("forget"), r.get("seed")) for r in points}
    if len(keys) > 1:
        blocks += [Heading("Per forget set and seed"), job_table(rows)]
    if failed:
        blocks += [Heading("Failed jobs"), Table(["job", "overrides", "error"],
                                                 [[f["job"], " ".join(f.get("overrides", [])), f["error"]] for f in failed])]
    if note:
        blocks.append(Paragraph(note))
    return blocks


def write_sweep_page(path: str | Path, title: str, summary: Sequence[Mapping[str, Any]],
                     rows: Sequence[Mapping[str, Any]], failed: Sequence[Mapping[str, Any]] = (),
                     note: str = "") -> Path:
    """Write the self-contained ``sweep.html`` (the plot embedded) at ``path``."""
    from duck.io import atomic_write_text

    return atomic_write_text(Path(path), to_html(sweep_blocks(title, summary, rows, failed, note), title))
