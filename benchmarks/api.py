"""``duck-bench api``: :func:`duck.unlearn` against ``duck-unlearn`` on the same job (issue 24 target: the
Python API takes at most 1.2x the command line's unlearning time).

One original is trained (digits small CNN, ``bench.recipe_epochs``) and saved as a plain state dict; then,
alternating, ``duck-unlearn ckpt=... method=...`` runs as a subprocess (its ``metrics.json`` gives the
unlearning time) and ``duck.unlearn`` runs in this process on the user's view of the same data (the original
as a plain ``nn.Module``, the splits as ``(x, y)`` data sets) with the method's hyperparameters of the data set
spelled out (the API has no data set name to pick presets by). Both use ``threads=auto``. Reported: mean (std)
of the unlearning time (``time_s``) and of the whole call, their ratio, and whether both reached the same
accuracies.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from typing import Any, ClassVar

import numpy as np
import torch

from benchmarks.common import BenchSettings, markdown_table, mean_std
from duck.schema import Flag, Integer, Text, option, settings


@settings
class ApiBench(BenchSettings):
    """conf/bench/api.yaml."""

    suite: ClassVar[str] = "api"

    data: str = option("digits", Text(), "the data config (conf/data)")
    model: str = option("smallcnn", Text(), "the model config (conf/model)")
    method: str = option("duck", Text(), "the method (conf/method)")
    forget_class: int = option(3, Integer(0), "the forgotten class")
    repetitions: int = option(3, Integer(1), "calls of each entry point, alternating")
    recipe_epochs: int = option(10, Integer(1), "the original's training epochs")
    progress: bool = option(False, Flag(), "progress bars")


class _XY(torch.utils.data.Dataset):
    """The user's view of a split: ``(x, y)`` pairs, nothing else."""

    def __init__(self, base: Any) -> None:
        self.base = base

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y, _ = self.base[i]
        return x, int(y)


def run(cfg: Any) -> dict[str, Any]:
    import duck
    from duck.pipeline.config import compose, configure_threads, hydra_output_dir
    from duck.pipeline.job import Job
    from duck.pipeline.stages import fit_model

    cfg = ApiBench.parse(cfg)
    out = hydra_output_dir()
    configure_threads("auto")
    common = [f"data={cfg.data}", f"model={cfg.model}", f"method={cfg.method}", "trainer=cpu",
              f"scenario.forget_classes=[{int(cfg.forget_class)}]", "progress=false"]
    job = Job.from_cfg(compose("train", [*common[:2], "trainer=cpu", f"recipe.epochs={int(cfg.recipe_epochs)}"]),
                       "train")
    model, metrics = fit_model(job, retrain=False)
    ckpt = out / "original.pt"
    torch.save(model.plain_state_dict(), ckpt)  # what a user holds: a plain state dict
    unlearn_cfg = Job.from_cfg(compose("unlearn", [*common, f"ckpt={ckpt}"]), "unlearn")
    hparams = unlearn_cfg.hparams
    train, test = _XY(job.data.train), _XY(job.data.test)
    env = {**os.environ, "DUCK_CACHE_DIR": str(out / "cache")}
    rows: dict[str, list[dict[str, float]]] = {"cli": [], "api": []}
    for r in range(int(cfg.repetitions)):
        run_dir = out / f"cli_{r}"
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "duck.cli.unlearn", *common, f"ckpt={ckpt}",
                               f"hydra.run.dir={run_dir}"], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"duck-unlearn failed: {proc.stderr[-2000:]}")
        m = json.loads((run_dir / "metrics.json").read_text())
        rows["cli"].append({"time_s": m["time_s"], "wall_s": wall, "test_forget": m["acc"]["test_forget"],
                            "test_retain": m["acc"]["test_retain"]})
        net = copy.deepcopy(model.net)  # the user's nn.Module with the original weights
        t0 = time.perf_counter()
        res = duck.unlearn(net, train, test=test, forget_classes=[int(cfg.forget_class)], method=str(cfg.method),
                           device="cpu", seed=0, **{k: v for k, v in hparams.items() if v is not None})
        wall = time.perf_counter() - t0
        rows["api"].append({"time_s": res.metrics["time_s"], "wall_s": wall,
                            "test_forget": res.metrics["acc"]["test_forget"],
                            "test_retain": res.metrics["acc"]["test_retain"]})
        print(f"repetition {r + 1}: duck-unlearn {rows['cli'][-1]['time_s']:.2f} s, duck.unlearn "
              f"{rows['api'][-1]['time_s']:.2f} s (unlearning)", flush=True)
    stats = {side: {k: mean_std([row[k] for row in rows[side]]) for k in ("time_s", "wall_s", "test_forget",
                                                                         "test_retain")} for side in rows}
    ratio = stats["api"]["time_s"]["mean"] / stats["cli"]["time_s"]["mean"]
    table = markdown_table(
        ["path", "unlearning time (s)", "whole call (s)", "A_f (test, forgotten)", "A_t (test, retained)"],
        [[side, *(f"{stats[side][k]['mean']:.3f} ({stats[side][k]['std']:.3f})" for k in
                  ("time_s", "wall_s", "test_forget", "test_retain"))] for side in ("cli", "api")])
    table += (f"\n\nduck.unlearn / duck-unlearn unlearning time: {ratio:.2f}x (target <= 1.2x: "
              f"{'met' if ratio <= 1.2 else 'NOT met'}); {int(cfg.repetitions)} repetitions each, alternating; "
              f"the whole call of duck-unlearn includes starting Python and Hydra; original test accuracy "
              f"{metrics['acc']['test']:.4f}")
    same = bool(np.allclose([row["test_forget"] for row in rows["cli"]], [row["test_forget"] for row in rows["api"]])
                and np.allclose([row["test_retain"] for row in rows["cli"]], [row["test_retain"] for row in rows["api"]]))
    return {"table": table, "runs": rows, "summary": stats, "ratio_time_s": ratio, "same_accuracies": same,
            "targets": [{"target": "duck.unlearn <= 1.2x duck-unlearn unlearning time", "met": ratio <= 1.2,
                         "measured": round(ratio, 3)}]}

