"""``duck-bench duck``: DUCK against the retrained oracle (seeds/003 Tables I/II protocol) on Fashion-MNIST.

Runs the comparison protocol of :mod:`benchmarks.compare` with DUCK only, training every original and oracle
in this run (a fresh cache in the run directory), so unlearning and retraining times come from the same run.
The protocol runs once per recipe length of the original (= oracle) recipe: DUCK's cost is its two phases,
so the retrain/DUCK time ratio grows with the recipe's length. Reports mean (std) of A_t, A_f, AUS and wall
time for original, retrained and DUCK, the per-run time ratio, and the issue's targets.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from omegaconf import OmegaConf

from benchmarks import compare
from benchmarks.common import THREADS, BenchSettings, fmt_mean_std, markdown_table, mean_std
from duck.schema import SEED, Either, Flag, Integer, ListOf, option, settings


def _targets(records: list[dict[str, Any]]) -> list[tuple[str, bool, str]]:
    """The issue's DUCK targets, checked on one recipe length's runs."""
    by = lambda m, s: [r for r in records if r["method"] == m and r["scenario"] == s and "error" not in r]
    out = []
    duck_cr, retr_cr = by("duck", "class_removal"), by("retrain", "class_removal")
    if duck_cr:
        worst = max(r["A_f"] for r in duck_cr)
        out.append(("CR: DUCK forget-test accuracy <= 0.01 for every class", worst <= 0.01, f"max {worst:.4f}"))
        d_aus = float(np.mean([r["AUS"] for r in duck_cr]))
        out.append(("CR: DUCK mean AUS >= 0.97", d_aus >= 0.97, f"{d_aus:.4f}"))
        if retr_cr:
            r_aus = float(np.mean([r["AUS"] for r in retr_cr]))
            out.append(("CR: DUCK AUS within 0.02 of the oracle's", abs(d_aus - r_aus) <= 0.02,
                        f"{d_aus:.4f} vs {r_aus:.4f}"))
    duck_hr = by("duck", "homogeneous_removal")
    if duck_hr:
        h_aus = float(np.mean([r["AUS"] for r in duck_hr]))
        gap = float(np.mean([abs(r["A_f"] - r["A_t"]) for r in duck_hr]))
        out.append(("HR: DUCK mean AUS >= 0.95", h_aus >= 0.95, f"{h_aus:.4f}"))
        out.append(("HR: mean abs(A_f - A_t) <= 0.03", gap <= 0.03, f"{gap:.4f}"))
    ratios = _ratios(records)
    if ratios:
        out.append(("DUCK >= 5x faster than retraining (mean retrain/DUCK time)", float(np.mean(ratios)) >= 5.0,
                    f"{np.mean(ratios):.1f}x (min {min(ratios):.1f}x)"))
    return out


def _ratios(records: list[dict[str, Any]]) -> list[float]:
    """retrain time / DUCK time, per protocol run."""
    out = []
    for r in records:
        if r["method"] != "duck" or "error" in r:
            continue
        retr = [q for q in records if q["method"] == "retrain" and q["run"] == r["run"] and q["scenario"] == r["scenario"]]
        if retr and r["time_s"]:
            out.append(float(retr[0]["time_s"]) / float(r["time_s"]))
    return out


@settings
class DuckBench(BenchSettings):
    """conf/bench/duck.yaml."""

    suite: ClassVar[str] = "duck"

    data: str = option("fashion_mnist", compare.CONFIG_NAME, "the data config (conf/data)")
    model: str = option("smallcnn28", compare.CONFIG_NAME, "the model config (conf/model)")
    trainer: str = option("auto", compare.CONFIG_NAME, "the trainer config (conf/trainer)")
    classes: tuple[int, ...] | None = option((0, 4, 8), Either((None,), ListOf(Integer(0))),
                                             "class removal runs (null: every class)")
    seeds: tuple[int, ...] = option((0, 1), ListOf(SEED), "homogeneous removal runs")
    fraction: float = option(0.1, compare.FRACTION, "homogeneous removal's forgotten fraction")
    recipe_epochs: tuple[int, ...] = option((24, 12), ListOf(Integer(1)),
                                            "the original's (= the oracle's) recipe lengths")
    second_recipe_runs: int = option(1, Integer(1), "later recipes: 1 = only the first class and seed")
    quick: bool = option(False, Flag(), "only the first class and the first seed")
    torch_threads: int | None = option(None, THREADS, "torch intra-op threads (null: torch's default)")
    progress: bool = option(True, Flag(), "progress bars")


def run(cfg: Any) -> dict[str, Any]:
    cfg = DuckBench.parse(cfg)
    from duck.pipeline.config import hydra_output_dir

    out = hydra_output_dir()
    results, sections, rows = {}, [], []
    for k, epochs in enumerate(cfg.recipe_epochs):
        sub = OmegaConf.create({
            "name": "compare", "data": cfg.data, "model": cfg.model, "trainer": cfg.trainer,
            "scenarios": ["class_removal", "homogeneous_removal"], "fraction": cfg.fraction,
            "classes": list(cfg.classes) if cfg.classes is not None else None,
            "seeds": list(cfg.seeds), "original_seed": 0, "methods": ["duck"],
            "quick": bool(cfg.quick) or (k > 0 and int(cfg.second_recipe_runs) == 1),
            "torch_threads": cfg.torch_threads, "cache_dir": str(out / f"cache_recipe{epochs}"),
            "overrides": [f"recipe.epochs={int(epochs)}"], "fail_fast": True,
            "out_dir": str(out / f"recipe{epochs}"), "progress": cfg.progress})
        res = compare.run(sub)
        records = res["runs"]
        ratios, targets = _ratios(records), _targets(records)
        results[f"recipe_{epochs}"] = {"runs": records, "summary": res["summary"], "time_ratio": mean_std(ratios),
                                       "targets": [{"target": t, "met": ok, "measured": v} for t, ok, v in targets]}
        sections.append(f"## Original/oracle recipe: {epochs} epochs\n\n" + res["table"].split("\n\nprotocol wall")[0])
        rows.append([epochs, len(ratios), fmt_mean_std(ratios, 1)])
        sections.append(markdown_table(["target", "met", "measured"],
                                       [[t, "yes" if ok else "NO", v] for t, ok, v in targets]))
    sections.append("## retrain time / DUCK time (per run, same run)\n\n"
                    + markdown_table(["recipe epochs", "runs", "ratio mean (std)"], rows))
    return {"table": "\n\n".join(sections), "results": results}
