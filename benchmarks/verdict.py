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
from typing import Any, ClassVar

import numpy as np

from attacks.epsilon import epsilons, epsilons_per_example
from attacks.equivalence import calibrate, original_shift
from attacks.verdict_simulation import VARIANTS, operating_characteristics
from benchmarks.common import BenchSettings, markdown_table
from duck.schema import SEED, Integer, ListOf, OneOf, Real, option, settings


@settings
class VerdictBench(BenchSettings):
    """conf/bench/verdict.yaml."""

    suite: ClassVar[str] = "verdict"

    settings: tuple[int, ...] = option((4, 32), ListOf(Integer(3)), "N = R of each simulated audit")
    variants: tuple[str, ...] = option(("gaussian", "t3", "overforget"), ListOf(OneOf(tuple(VARIANTS))),
                                       "the margins' models (attacks.verdict_simulation)")
    fractions: tuple[float, ...] = option((0.0, 0.1, 0.25, 0.5, 0.75, 1.0), ListOf(Real(0.0, False, 2.0)),
                                          "the method's kept shares f of the shift")
    n_examples: int = option(40, Integer(2), "forget examples per audit")
    reps: int = option(100, Integer(2), "audits per setting and variant")
    replicates: int = option(60, Integer(20), "attack.forgetting.replicates")
    margin: float = option(0.25, Real(0.0, True, 1.0, True), "attack.forgetting.margin")
    level: float = option(0.95, Real(0.5, False, 1.0, True), "attack.forgetting.ci_level")
    seed: int = option(0, SEED, "the simulation's seed")
    speed_examples: int = option(6000, Integer(0), "examples of the set scored for speed (0: skip)")
    speed_models: int = option(32, Integer(3), "models a side in the speed test")
    speed_reference_examples: int = option(300, Integer(1), "examples of the per-example path, extrapolated")
    calibration_examples: int = option(300, Integer(10), "attack.forgetting.calibration_examples")


def run_speed(cfg: VerdictBench) -> dict[str, Any]:
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


def run(cfg: Any) -> dict[str, Any]:
    cfg = VerdictBench.parse(cfg)
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
