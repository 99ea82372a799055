"""The end of a hyperparameter search (``duck-run -m +tune=METHOD``; :mod:`duck.pipeline.tune` gives each trial
its objective): the trials' table, a plot of the search and the best configuration written as a preset.

Each trial's directory holds ``tune.json`` (objective, what it is made of, the method's resolved
hyperparameters) and Hydra's ``.hydra/overrides.yaml`` (the values the sampler chose). :func:`summarize_search`
writes into the sweep directory ``trials.md`` / ``trials.json``, ``trials.png`` (every trial's objective and
the best so far), the page ``trials.html`` (the best trial first, the plot, the sortable table) and
``preset/tuned_<data>_<method>.yaml``: a ``# @package _global_`` config with the best trial's searched values,
reused by ``duck-run method=METHOD +preset=tuned_<data>_<method> hydra.searchpath=[file://SWEEP_DIR]`` (or
copied into ``conf/preset/``). :class:`TuneSummary` is the Hydra callback that calls it when the sweep ends
(registered by ``conf/tune/*.yaml``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_write_text
from duck.report.document import Block, Heading, Image, Markdown, Paragraph, Table, to_html
from duck.report.tables import markdown_table


def _searched(job_dir: Path) -> dict[str, Any]:
    """The ``method.*`` values of a trial's overrides (what the sampler chose), typed by YAML."""
    import yaml

    try:
        overrides = [str(o) for o in (yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or [])]
    except (OSError, ValueError):
        return {}
    out = {}
    for o in overrides:
        key, _, value = o.lstrip("+").partition("=")
        if key.startswith("method."):
            out[key.split(".", 1)[1]] = yaml.safe_load(value)
    return out


def summarize_search(sweep_dir: str | Path) -> dict[str, Any]:
    """Table, plot and preset of the search in ``sweep_dir`` (see the module docstring)."""
    sweep = Path(sweep_dir)
    trials = []
    for f in sorted(sweep.glob("*/tune.json"), key=lambda p: (len(p.parent.name), p.parent.name)):
        try:
            rec = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        rec["trial"] = f.parent.name
        rec["searched"] = _searched(f.parent)
        trials.append(rec)
    if not trials:
        raise DuckInputError(f"{sweep} holds no finished trial (no */tune.json)")
    best = max(trials, key=lambda r: r["objective"])
    keys = sorted({k for r in trials for k in r["searched"]})
    # the objective to 6 decimals: the 1e-3 x AUS tie-break of equal final scores shows in the 4th-6th
    rows = [[r["trial"], *[r["searched"].get(k, "—") for k in keys], f"{r['objective']:.6f}",
             f"{r['kind']} {r['value']:.4f}", "—" if r.get("aus") is None else f"{r['aus']:.4f}",
             "yes" if r["reached_target"] else f"no ({r['train_forget']:.3f})"] for r in trials]
    headers = ["trial", *keys, "objective", "made of", "AUS", "forget target reached"]
    if any(r.get("retained") for r in trials):  # tune.retained_margin was set: its verdict per trial
        headers.append("retained accuracy kept")
        for row, r in zip(rows, trials, strict=True):
            kept = r.get("retained")
            row.append("—" if not kept else "yes" if kept["kept"] else
                       f"no ({kept['A_t']:.3f} < {kept['original']:.3f} − {kept['margin']:g})")
    table = markdown_table(headers, rows)
    data, method = best["data"], best["method"]
    name = f"tuned_{data}_{method}"
    preset = sweep / "preset" / f"{name}.yaml"
    sc = best["scenario"]
    lines = ["# @package _global_",
             f"# duck-run -m +tune={method}: best of {len(trials)} trials on {data} (objective {best['objective']:.4f}, "
             f"{best['kind']}; trial {best['trial']})",
             "method:"] + [f"  {k}: {json.dumps(v)}" for k, v in sorted(best["searched"].items())]
    # the validation forget set the search looked at: a run that reports on it is refused (duck.pipeline.job)
    lines += ["tuned_on:", f"  data: {data}", f"  scenario: {sc['scenario']}",
              f"  forget_classes: {json.dumps(sc.get('forget_classes'))}", f"  forget_hash: {sc['forget_hash']}"]
    atomic_write_text(preset, "\n".join(lines) + "\n")
    atomic_save_json(sweep / "trials.json", {"best": best, "trials": trials})
    header = (f"# Search: {method} on {data}, {len(trials)} trials; best: trial {best['trial']}, objective "
              f"{best['objective']:.4f}\n\n")
    atomic_write_text(sweep / "trials.md", header + table + "\n")
    _plot(trials, sweep / "trials.png", f"{method} on {data}")
    reuse = (f"duck-run method={method} +preset={name} hydra.searchpath=[file://{sweep.resolve()}]")
    blocks: list[Block] = [
        Heading(f"Search: {method} on {data}, {len(trials)} trials", 1),
        Markdown(f"**Best: trial {best['trial']}**, objective {best['objective']:.4f} ({best['kind']} "
                 f"{best['value']:.4f}), with " + ", ".join(f"`{k}={v:.4g}`" if isinstance(v, float) else f"`{k}={v}`"
                                            for k, v in sorted(best["searched"].items()))
                 + f". Its preset: `{preset}`; reuse it with `{reuse}`."),
        Image("trials.png", (sweep / "trials.png").read_bytes(), "objective of every trial and the best so far"),
        Heading("Trials"), Table(headers, rows, sortable=True),
        Paragraph("The search's objective is the one Optuna maximised (docs/tuning.md); a trial that missed the forget "
                  "target or lost retained accuracy beyond tune.retained_margin is penalised. Click a column's header "
                  "to sort.")]
    page = atomic_write_text(sweep / "trials.html", to_html(blocks, f"Search: {method} on {data}"))
    return {"table": header + table, "best": best, "preset": preset, "reuse": reuse, "page": page}


def _plot(trials: list[dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = [r["objective"] for r in trials]
    best = [max(values[: i + 1]) for i in range(len(values))]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.scatter(range(len(values)), values, s=18, label="trial", color="tab:blue")
    ax.plot(range(len(values)), best, color="tab:orange", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel("objective")
    ax.set_title(f"hyperparameter search: {title}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


class TuneSummary(Callback):
    """Hydra callback of ``duck-run -m +tune=METHOD``: the search's table, plot and preset when it ends."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        try:
            out = summarize_search(str(config.hydra.sweep.dir))
        except DuckInputError as e:
            print(f"warning: no search summary: {e}", file=sys.stderr)
            return
        print("\n" + out["table"] + f"\npreset: {out['preset']}\nreuse it: {out['reuse']}\npage: {out['page']}")
