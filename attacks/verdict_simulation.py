"""Operating characteristics of the forgetting verdict by simulation (ALGORITHMS.md §11's model).

Per forget example x: retrained φ ~ N(μ_x, σ_x) with μ_x ~ N(0, 2²) and σ_x ~ U(0.5, 1.5); the ``none`` control
(the original, retrained with its own seeds on the full data) ~ N(μ_x + 3σ_x, 0.7σ_x); a method that kept a
fraction f of the shift ~ N(μ_x + 3fσ_x, σ_x). Variants: ``t3`` (every noise term Student t with 3 degrees of
freedom, times σ_x: heavier tails) and ``overforget`` (the method pushed past the retrained models:
μ_x − 1.5σ_x, i.e. half the original's shift the other way; the truth is then f = −0.5).

:func:`operating_characteristics` draws ``reps`` audits (a bank of R, a retrain control and a ``none`` control of
N, and a method set of N at each f), runs :func:`attacks.equivalence.forgetting_verdict` on each and reports
P(verdict | f), the coverage of the interval on the equivalent shift and its mean half-width against the
Monte-Carlo spread of the point estimate (half the 2.5–97.5 % range over the audits). One calibration per audit
serves every f (it depends on the controls and the bank only).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attacks.equivalence import DEFAULT_LEVEL, DEFAULT_MARGIN, DEFAULT_REPLICATES, verdict_and_calibrations

VARIANTS = ("gaussian", "t3", "overforget")
DEFAULT_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0)


def _noise(rng: np.random.Generator, variant: str, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_t(3, shape) if variant == "t3" else rng.standard_normal(shape)


def draw_audit(rng: np.random.Generator, n_examples: int, n_models: int, n_bank: int, fractions: tuple[float, ...],
               variant: str = "gaussian") -> dict[str, Any]:
    """One simulated audit: φ ``(models, examples)`` of the bank, the two controls and a method set per
    fraction (the ``overforget`` variant: one set, pushed the other way)."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    mu = rng.normal(0.0, 2.0, n_examples)
    sd = rng.uniform(0.5, 1.5, n_examples)

    def draw(n: int, centre: np.ndarray, scale: np.ndarray) -> np.ndarray:
        return centre + scale * _noise(rng, variant, (n, n_examples))

    out: dict[str, Any] = {"bank": draw(n_bank, mu, sd), "retrain_control": draw(n_models, mu, sd),
                           "none_control": draw(n_models, mu + 3 * sd, 0.7 * sd)}
    if variant == "overforget":
        out["methods"] = {-0.5: draw(n_models, mu - 1.5 * sd, sd)}
    else:
        out["methods"] = {float(f): draw(n_models, mu + 3 * f * sd, sd) for f in fractions}
    return out


def operating_characteristics(n_models: int, n_bank: int, *, n_examples: int = 40, reps: int = 100,
                              fractions: tuple[float, ...] = DEFAULT_FRACTIONS, variant: str = "gaussian",
                              margin: float = DEFAULT_MARGIN, level: float = DEFAULT_LEVEL,
                              replicates: int = DEFAULT_REPLICATES, seed: int = 0) -> dict[str, Any]:
    """P(verdict | f), coverage and interval width over ``reps`` simulated audits (module docstring)."""
    rng = np.random.default_rng([int(seed), 0x51A1])
    rows: dict[float, dict[str, list]] = {}
    for rep in range(reps):
        audit = draw_audit(rng, n_examples, n_models, n_bank, fractions, variant)
        cals = None
        for f, phi in audit["methods"].items():
            rec, cals = verdict_and_calibrations(phi, audit["bank"], audit["retrain_control"], audit["none_control"],
                                                 margin=margin, level=level, replicates=replicates, seed=rep,
                                                 calibrations=cals)
            row = rows.setdefault(f, {"verdict": [], "estimate": [], "low": [], "high": []})
            row["verdict"].append(rec["verdict"])
            row["estimate"].append(rec["shift"])
            row["low"].append(rec["shift_ci"][0])
            row["high"].append(rec["shift_ci"][1])
    table = []
    for f, row in sorted(rows.items()):
        v = np.array(row["verdict"])
        est, lo, hi = (np.array(row[k], dtype=np.float64) for k in ("estimate", "low", "high"))
        truth = f
        finite = np.isfinite(hi) & np.isfinite(est)
        spread = (float(np.diff(np.percentile(est[finite], [2.5, 97.5]))[0] / 2) if finite.sum() > 2
                  else math.nan)
        half = float(np.mean((hi[finite] - lo[finite]) / 2)) if finite.any() else math.nan
        table.append({"f": f, "P_forgotten": float((v == "forgotten").mean()),
                      "P_not_forgotten": float((v == "not_forgotten").mean()),
                      "P_inconclusive": float((v == "inconclusive").mean()),
                      "coverage": float(((lo <= truth) & (truth <= hi)).mean()),
                      "half_width": half, "mc_spread": spread,
                      "width_ratio": half / spread if spread and spread > 0 else math.nan,
                      "mean_estimate": float(np.mean(est[finite])) if finite.any() else math.nan})
    return {"n_models": n_models, "n_bank": n_bank, "n_examples": n_examples, "reps": reps, "variant": variant,
            "margin": margin, "level": level, "replicates": replicates, "rows": table}
