"""``duck-bench verdict``: the forgetting verdict's operating characteristics by simulation (ALGORITHMS.md §11,
:mod:`attacks.verdict_simulation`) and the speed of scoring a large forget set.

For each ``(N = R, variant)`` of the protocol: ``reps`` simulated audits of ``n_examples`` forget examples, each
with a method set at every fraction f of ``fractions``; the table gives P(forgotten | f), P(not_forgotten | f),
P(inconclusive | f), the coverage of the interval on the equivalent shift, its mean half-width and the Monte-Carlo
spread of the estimate (half its 2.5-97.5 % range over the audits). Targets (issue 36): at N = R = 32,
P(forgotten | f >= 0.25) <= 5 %, P(forgotten | f = 0) >= 80 %, P(not_forgotten | f = 0) <= 5 %; at the defaults
P(forgotten | f >= 0.25) <= 5 %; coverage >= 90 %, half-width <= 1.5 x the Monte-Carlo spread.

Speed: one set of ``speed_models`` against a bank as large on ``speed_examples`` examples (Gaussian margins),
scored with its interval (F over every example, the calibration on ``calibration_examples``), against the same
F through the per-example path (:func:`attacks.epsilon.epsilons_per_example`) on a subset, extrapolated.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from omegaconf import DictConfig

from attacks.epsilon import epsilons, epsilons_per_example
from attacks.equivalence import calibrate, original_shift
from attacks.verdict_simulation import VARIANTS, operating_characteristics
from benchmarks.common import integer, list_of, markdown_table, number, one_of, validate

RULES = {
    "settings": list_of(integer(3)),
    "variants": list_of(one_of(*VARIANTS)),
    "fractions": list_of(number(0.0, False, 2.0)),
    "n_examples": integer(2),
    "reps": integer(2),
    "replicates": integer(20),
    "margin": number(0.0, True, 1.0, True),
    "level": number(0.5, False, 1.0, True),
    "seed": integer(0),
    "speed_examples": integer(0),
    "speed_models": integer(3),
    "speed_reference_examples": integer(1),
    "calibration_examples": integer(10),
}


def run_speed(cfg: DictConfig) -> dict[str, Any]:
    """Scoring one set of N models on ``speed_examples`` examples with its interval, and the per-example ε path
    on ``speed_reference_examples`` of them (its time extrapolated to all)."""
    n, m = int(cfg.speed_examples), int(cfg.speed_models)
    rng = np.random.default_rng(int(cfg.seed))
    mu, sd = rng.normal(0, 2, n), rng.uniform(0.5, 1.5, n)
    bank, ctrl = mu + sd * rng.standard_normal((m, n)), mu + sd * rng.standard_normal((m, n))
    none = mu + 3 * sd + 0.7 * sd * rng.standard_normal((m, n))
    method = mu + 0.75 * sd + sd * rng.standard_normal((m, n))
    t0 = time.perf_counter()
    eps = epsilons(method, bank)
    t_eps = time.perf_counter() - t0
    cal = calibrate(method, bank, original_shift(bank, ctrl, none), replicates=int(cfg.replicates),
                    max_examples=int(cfg.calibration_examples), seed=int(cfg.seed))
    cal.effect(float(cfg.level))
    t_set = time.perf_counter() - t0
    k = int(cfg.speed_reference_examples)
    t1 = time.perf_counter()
    ref = epsilons_per_example(method[:, :k], bank[:, :k])
    t_ref = (time.perf_counter() - t1) * n / k
    assert np.array_equal(ref, eps[:k])  # the two paths agree on the examples both scored
    return {"examples": n, "models": m, "epsilon_s": round(t_eps, 3), "set_with_interval_s": round(t_set, 3),
            "per_example_epsilon_s_extrapolated": round(t_ref, 1), "speedup_epsilon": round(t_ref / t_eps, 1),
            "calibration_examples": int(cfg.calibration_examples), "replicates": int(cfg.replicates)}


def run(cfg: DictConfig) -> dict[str, Any]:
    validate(cfg, RULES)
    results, rows = [], []
    for n in cfg.settings:
        for variant in cfg.variants:
            t0 = time.perf_counter()
            res = operating_characteristics(int(n), int(n), n_examples=int(cfg.n_examples), reps=int(cfg.reps),
                                            fractions=tuple(float(f) for f in cfg.fractions), variant=str(variant),
                                            margin=float(cfg.margin), level=float(cfg.level),
                                            replicates=int(cfg.replicates), seed=int(cfg.seed))
            res["seconds"] = round(time.perf_counter() - t0, 1)
            results.append(res)
            for r in res["rows"]:
                rows.append([f"N = R = {n}", variant, f"{r['f']:g}", f"{r['P_forgotten']:.3f}",
                             f"{r['P_not_forgotten']:.3f}", f"{r['P_inconclusive']:.3f}", f"{r['coverage']:.3f}",
                             f"{r['half_width']:.3f}", f"{r['mc_spread']:.3f}", f"{r['width_ratio']:.2f}",
                             f"{r['mean_estimate']:.3f}"])
    table = (f"Verdict by simulation ({cfg.reps} audits per row, {cfg.n_examples} forget examples, margin "
             f"{cfg.margin}, level {cfg.level}, {cfg.replicates} splits per shift)\n\n" + markdown_table(
                 ["setting", "variant", "f", "P(forgotten)", "P(not forgotten)", "P(inconclusive)", "coverage",
                  "half-width", "MC spread", "ratio", "mean estimate"], rows))
    out: dict[str, Any] = {"simulation": results, "table": table}
    if int(cfg.speed_examples) > 0:
        speed = run_speed(cfg)
        out["speed"] = speed
        out["table"] += ("\n\nScoring one set with its interval:\n\n" + markdown_table(
            ["examples", "models a side", "F (all examples)", "F + interval", "per-example ε (extrapolated)",
             "ε speed-up"],
            [[speed["examples"], speed["models"], f"{speed['epsilon_s']} s", f"{speed['set_with_interval_s']} s",
              f"{speed['per_example_epsilon_s_extrapolated']} s", f"{speed['speedup_epsilon']}x"]]))
    return out
