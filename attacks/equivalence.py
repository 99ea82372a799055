"""The forgetting verdict as an equivalence test (ALGORITHMS.md §11): ``forgotten`` only with evidence that the
method is closer to retraining than a stated margin, ``not_forgotten`` with evidence that it is farther,
``inconclusive`` otherwise.

**The effect and its margin.** Per forget example x the original moved φ(x) by ``δ_x`` away from models retrained
without x (estimated from the controls: ``δ̂_x`` = mean of the ``none`` control − mean of the retrained models).
A method that keeps a fraction ``f`` of that shift looks like retrained models moved by ``f·δ_x``. The margin
``m`` (``attack.forgetting.margin``, default 0.25) is the largest fraction a ``forgotten`` method may keep.
The verdict is not put on F or q directly: their scale moves with N, R and the forget set, so a fixed cut on
them cannot carry a margin.

**The test at each f: a shift-back permutation** (:func:`calibrate`). Under "the tested set keeps exactly f",
the set moved back by ``f·δ̂`` and the retrain bank are exchangeable: K random splits of that pool into a set of
N and a bank of R (the same splits at every f of a grid from −1.5 to 1.5, finer near 0), the set moved forward
again, give the distribution of any statistic of (set, bank) under that hypothesis, with the models' own spread
and model-to-model structure and no distributional assumption on φ. Two statistics are computed on them:

- *location*: each model's score is its mean φ over the examples, each example in its pool's standard deviation;
  the statistic is the two-sample t (pooled variance) of the set's scores against the bank's (:func:`pooled_t`).
  Its test inverts to one interval ``[f_lo, f_hi]`` (the shares the location allows at ``level``: its z falls
  with f, so they are one run of shares, except sometimes at N = 2, where the interval is their hull) and a point
  estimate (the **imprint kept**; negative: moved past the retrained models, over-forgetting);
- *F* (the ε score of :mod:`attacks.epsilon`, scored exactly as the method's set): the runs' whole
  distribution, spread included. The set is ``consistent`` when F's test (at 99 %) accepts some f of the
  location's interval. Runs that agree with each other far more than retrained models do (one target for every
  run) match the location and fail F: they differ from retraining in more than a shift. (F alone is a poor
  statistic to invert: far from the truth the splits mix two groups of models, F varies widely between them and
  its test has little power there, so its confidence set ran to the grid's ends by accident.)

**Decision** (two one-sided tests at ``(1 − level) / 2`` each, Schuirmann 1987): ``not_forgotten`` when the set
is not consistent, or its interval lies wholly beyond ``±m``; ``forgotten`` iff the interval lies inside
``(−m, m)``; ``inconclusive`` otherwise, with roughly how many models a side would decide it (the interval's
half-width taken ∝ 1/√N). No power — the ``none`` control itself is not shown farther than the margin — is
``inconclusive`` whatever the method scores. The operating characteristics (P(verdict | f), the interval's
coverage and width against the Monte-Carlo spread) are simulated by :mod:`attacks.verdict_simulation`;
docs/audit.md shows them.

**Large forget sets.** The tests score at most ``max_examples`` examples (a fixed random subset; the same for
every set of an audit); F is reported over all of them, its interval with the subset's spread (wider than F
over all examples needs: conservative).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from attacks.epsilon import epsilon_points, epsilons
from duck.errors import DuckInputError

#: the shares of the original's shift the location test runs at (negative ones move the set past the retrained
#: models: over-forgetting): every 0.05 from -1 to 1, then ±1.25 and ±1.5, its z interpolated between them (with the
#: former statistic, a difference of means, the former grid, 0.05 apart only up to ±0.3, gave an interval at f = 0.5
#: of 2.5x the estimate's Monte-Carlo spread, this one 1.15x; the location test is cheap, F's test runs at a few
#: shares only)
DEFAULT_SHIFTS = (-1.5, -1.25, *(round(0.05 * k, 2) for k in range(-20, 21)), 1.25, 1.5)
DEFAULT_MARGIN = 0.25
DEFAULT_LEVEL = 0.95
DEFAULT_REPLICATES = 60
DEFAULT_MAX_EXAMPLES = 500
DEFAULT_MAX_UTILITY_LOSS = 0.05
#: splits of the location test (means of rows: cheap)
LOCATION_SPLITS = 2000
#: shares F's consistency test runs at, across the location's interval
F_POINTS = 5
#: the level of F's test in the consistency check (two-sided): a set whose F is rejected at every share its location
#: allows differs from retrained models in more than a shift (its spread, typically)
F_VETO_LEVEL = 0.99


def _phi(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2:
        raise DuckInputError(f"{name} must be a (models, examples) array of φ, got shape {arr.shape}")
    if arr.shape[0] < 2 or arr.shape[1] < 1:
        raise DuckInputError(f"{name} needs at least 2 models and 1 example, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DuckInputError(f"{name} holds NaN or infinite values: φ must be finite margins")
    return arr


def _check_sets(u: np.ndarray, bank: np.ndarray, ctrl: np.ndarray, none: np.ndarray) -> None:
    """The four sets over the same forget examples; the controls as large as the method's set."""
    if not (u.shape[1] == bank.shape[1] == ctrl.shape[1] == none.shape[1]):
        raise DuckInputError(f"all four φ arrays must hold the same forget examples, got {u.shape[1]}, "
                             f"{bank.shape[1]}, {ctrl.shape[1]} and {none.shape[1]} examples")
    if not (ctrl.shape[0] == none.shape[0] == u.shape[0]):
        raise DuckInputError(f"the controls must hold as many models as the method's set ({u.shape[0]}), got "
                             f"retrain_control {ctrl.shape[0]} and none_control {none.shape[0]}: F's buckets and "
                             "the ε a set can reach depend on its number of models, and q compares the three")


def quality(unlearned: np.ndarray, retrained: np.ndarray) -> float:
    """F of ``unlearned`` against ``retrained`` (φ ``(models, examples)``), on the unlearned set's bucket scale."""
    return float(epsilon_points(epsilons(unlearned, retrained), unlearned.shape[0]).mean())


@dataclass(frozen=True)
class Calibration:
    """The shift-back permutation tests of one tested set (module docstring): the location test's z at each share
    of ``shifts``; F of each split at the few shares ``f_shifts`` its interval holds (``samples[h, k]``), and the
    set's own F on the same examples (``observed``)."""

    shifts: np.ndarray  # (G,)
    #: (G,) the location test: the set's mean shift from the bank (per example in pool SDs, averaged) against the
    #: splits' distribution, as a z score at each f (decreasing in f)
    location_z: np.ndarray
    f_shifts: np.ndarray  # (H,) where F's test ran (inside the location's interval at the calibration's level)
    samples: np.ndarray  # (H, K)
    observed: float
    n_models: int
    n_bank: int
    n_examples: int
    n_scored: int  # examples scored (a fixed random subset when the forget set is larger)

    def mean(self) -> np.ndarray:
        return self.samples.mean(axis=1)

    def sd(self) -> np.ndarray:
        return np.maximum(self.samples.std(axis=1, ddof=1), 1e-9)

    def z(self) -> np.ndarray:
        """``(F_obs − mean_f) / sd_f`` at each of ``f_shifts``: how far the tested set's F lies from the
        permutation distribution of "it keeps exactly f"."""
        return (self.observed - self.mean()) / self.sd()

    def interval(self, level: float) -> tuple[np.ndarray, np.ndarray]:
        """``(x, accepted)``: a grid 100× finer than ``shifts`` and whether the location test accepts each f
        at ``(1 − level) / 2`` a side (z interpolated)."""
        x = np.linspace(self.shifts[0], self.shifts[-1], 100 * (len(self.shifts) - 1) + 1)
        return x, np.abs(np.interp(x, self.shifts, self.location_z)) <= _normal_quantile(0.5 + level / 2)

    def effect(self, level: float) -> dict[str, Any]:
        """The equivalent shift and whether the runs are consistent with one (module docstring):

        - the interval: from the least to the greatest f whose location test does not reject at
          ``(1 − level) / 2`` a side (module docstring); the estimate: where its z is nearest 0;
          negative f: moved past the retrained models (over-forgetting); beyond the grid: ``low = high`` = its end;
        - ``consistent``: F's test (at :data:`F_VETO_LEVEL`) accepts one of the shares it ran at — the runs'
          distribution, spread included, looks like retrained models at a shift the location allows. F above
          its whole distribution at f = 0 (closer to the bank than exchangeable retrained models, by chance)
          counts as accepted there."""
        x, accept = self.interval(level)
        zv = _normal_quantile(0.5 + F_VETO_LEVEL / 2)
        zf = self.z()
        f_ok = (np.abs(zf) <= zv) | ((zf > zv) & np.isclose(self.f_shifts, 0.0))
        consistent = bool(f_ok.any())
        if not accept.any():  # the mean shift lies beyond the grid, on the side z points to
            edge = float(self.shifts[-1] if self.location_z[np.argmin(np.abs(self.location_z))] > 0
                         else self.shifts[0])
            return {"estimate": edge, "low": edge, "high": edge, "consistent": consistent, "closest": edge}
        xs = x[accept]
        zl = np.interp(xs, self.shifts, self.location_z)
        est = float(xs[np.argmin(np.abs(zl))])
        return {"estimate": est, "low": float(xs.min()), "high": float(xs.max()), "consistent": consistent,
                "closest": est}

    def quality_sd(self, f: float) -> float:
        """F's spread at shift ``f`` (at the nearest share F's test ran at)."""
        return float(self.sd()[int(np.argmin(np.abs(self.f_shifts - f)))])


def f_points(x: np.ndarray, accept: np.ndarray, estimate_z: np.ndarray) -> np.ndarray:
    """Where F's test runs: the location's interval's ends, its estimate and evenly spaced shares between (at
    most :data:`F_POINTS`), 0 where the interval holds it; the estimate alone when the interval is empty."""
    if not accept.any():
        return np.array([float(x[np.argmin(np.abs(estimate_z))])])
    xs = x[accept]
    pts = set(np.round(np.linspace(xs.min(), xs.max(), F_POINTS), 6).tolist())
    pts.add(round(float(xs[np.argmin(np.abs(estimate_z[accept]))]), 6))
    if xs.min() <= 0 <= xs.max():
        pts.add(0.0)
    return np.asarray(sorted(pts))


def pooled_t(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The two-sample t statistic with pooled variance, ``(ā − b̄) / (s_p √(1/N + 1/R))`` with
    ``s_p² = ((N − 1) s_a² + (R − 1) s_b²) / (N + R − 2)``, along the last axis (the denominator floored at
    1e-12): the location test's statistic on the models' scores. Studentised by the spread within each side, it
    keeps its scale when a split mixes two groups that differ, so the test at a share far from the truth is not
    weakened by the mixture's extra spread: with the plain difference of means the interval was 1.3–1.7x the
    estimate's Monte-Carlo spread at N = R = 4 (docs/results.md). Pooled rather than Welch's (the same at N = R):
    at N = 2 against R = 32 Welch's leans on the set's two models for its spread (coverage 0.925, intervals up to
    2x the spread)."""
    n, r = a.shape[-1], b.shape[-1]
    pooled = ((n - 1) * a.var(axis=-1, ddof=1) + (r - 1) * b.var(axis=-1, ddof=1)) / (n + r - 2)
    se = np.sqrt(pooled * (1.0 / n + 1.0 / r))
    return (a.mean(axis=-1) - b.mean(axis=-1)) / np.maximum(se, 1e-12)


def calibrate(tested: np.ndarray, bank: np.ndarray, shift: np.ndarray, *,
              shifts: tuple[float, ...] = DEFAULT_SHIFTS, replicates: int = DEFAULT_REPLICATES, seed: int = 0,
              max_examples: int = DEFAULT_MAX_EXAMPLES, level: float = DEFAULT_LEVEL) -> Calibration:
    """The shift-back permutation tests of the ``tested`` set (N, n) against the ``bank`` (R, n), for each share
    in ``shifts`` of the original's per-example ``shift`` δ̂ (n,) (module docstring): the location test at every
    share, then F's at a few shares inside the location's interval at ``level``."""
    tested, bank = _phi(tested, "the tested set"), _phi(bank, "retrained")
    n = bank.shape[1]
    rng = np.random.default_rng([int(seed), 0xCA1B])
    cols = np.arange(n) if n <= max_examples else np.sort(rng.choice(n, max_examples, replace=False))
    t, b, d = tested[:, cols], bank[:, cols], np.asarray(shift, dtype=np.float64)[cols]
    n_t, r = t.shape[0], b.shape[0]
    grid = np.asarray(sorted(set(float(s) for s in shifts)), dtype=np.float64)
    # the location test: each model's score is its mean over the examples of φ in the standard deviation of the
    # example's pool at f (the same for every split, so the permutation test is exact); the statistic is the
    # two-sample t of the set's scores against the bank's (:func:`pooled_t`); scores are cheap, so it takes many
    # more splits than F: with 40 splits shared by every audit the z of 200 simulated null audits reached 1.96 in
    # 10 % of them, with fresh splits per audit in 6 %
    loc_splits = np.stack([rng.permutation(n_t + r) for _ in range(LOCATION_SPLITS)])
    t_split, t_obs = np.empty((grid.size, LOCATION_SPLITS)), np.empty(grid.size)
    for g, f in enumerate(grid):
        pool = np.concatenate([b, t - f * d])  # exchangeable under "the tested set keeps the share f"
        sd = pool.std(axis=0, ddof=1)
        sd = np.maximum(sd, 1e-3 * float(np.median(sd)) + 1e-12)
        row = (pool / sd).mean(axis=1)  # one score per model; a split's statistic compares two groups of them
        t_split[g] = pooled_t(row[loc_splits[:, :n_t]], row[loc_splits[:, n_t:]])
        t_obs[g] = pooled_t(row[r:], row[:r])
    loc_z = (t_obs - t_split.mean(axis=1)) / np.maximum(t_split.std(axis=1, ddof=1), 1e-12)
    x = np.linspace(grid[0], grid[-1], 100 * (len(grid) - 1) + 1)
    zx = np.interp(x, grid, loc_z)
    fs = f_points(x, np.abs(zx) <= _normal_quantile(0.5 + level / 2), zx)
    # F's test at those shares, every (share, split) column scored in one batched ε call
    splits = np.stack([rng.permutation(n_t + r) for _ in range(replicates)])
    sets, refs = [], []
    for f in fs:
        pool = np.concatenate([b, t - f * d])
        sets.append(pool[splits[:, :n_t]] + f * d)  # (K, N, n')
        refs.append(pool[splits[:, n_t:]])  # (K, R, n')
    u_all = np.stack(sets).transpose(2, 0, 1, 3).reshape(n_t, -1)  # columns ordered (share, split, example)
    r_all = np.stack(refs).transpose(2, 0, 1, 3).reshape(r, -1)
    points = epsilon_points(epsilons(u_all, r_all), n_t).reshape(fs.size, replicates, cols.size)
    observed = float(epsilon_points(epsilons(t, b), n_t).mean())
    return Calibration(grid, loc_z, fs, points.mean(axis=2), observed, int(n_t), int(r), int(n), int(cols.size))


def original_shift(bank: np.ndarray, retrain_control: np.ndarray, none_control: np.ndarray) -> np.ndarray:
    """δ̂ per example: the ``none`` control's mean φ minus the retrained models' (bank and retrain control)."""
    return none_control.mean(axis=0) - np.concatenate([bank, retrain_control]).mean(axis=0)


def _models_to_decide(effect: dict[str, float], margin: float, n: int) -> int | None:
    """About how many models a side would make the interval fall wholly inside or outside ``[−margin, margin]``
    (its half-width taken ∝ 1/√N)."""
    est, lo, hi = effect["estimate"], effect["low"], effect["high"]
    gap = margin - abs(est)
    if gap == 0:
        return None
    half = max(hi - est, est - lo)
    return max(n + 1, math.ceil(n * (half / abs(gap)) ** 2))


def _decide(effect: dict[str, Any], margin: float) -> str:
    """``not_forgotten`` when the runs are consistent with no allowed shift or the interval lies wholly beyond
    one side of ``[−margin, margin]``; ``forgotten`` iff the interval lies inside ``(−margin, margin)`` (less
    than the margin kept, in either direction); else ``inconclusive``."""
    if effect.get("consistent") is False:
        return "not_forgotten"
    if -margin < effect["low"] and effect["high"] < margin:
        return "forgotten"
    if effect["low"] > margin or effect["high"] < -margin:
        return "not_forgotten"
    return "inconclusive"


def _set_record(name: str, phi: np.ndarray, bank: np.ndarray, cal: Calibration, margin: float, level: float
                ) -> dict[str, Any]:
    f_all = quality(phi, bank) if cal.n_scored < cal.n_examples else cal.observed
    effect = cal.effect(level)
    half = _normal_quantile(0.5 + level / 2) * cal.quality_sd(effect["estimate"])
    bottom, top = float(cal.shifts[0]), float(cal.shifts[-1])
    beyond = {k: bool(effect[k] >= top or effect[k] <= bottom) for k in ("estimate", "low", "high")}  # grid's ends
    return {"set": name, "n_models": int(phi.shape[0]), "quality": f_all,
            "quality_ci": [max(0.0, f_all - half), min(1.0, f_all + half)],
            "shift": effect["estimate"], "shift_ci": [effect["low"], effect["high"]],
            "shift_beyond": [k for k in ("estimate", "low", "high") if beyond[k]],
            "consistent": effect["consistent"], "closest": effect["closest"], "decision": _decide(effect, margin)}


def _normal_quantile(p: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(p))


def _fmt(x: float, beyond: bool = False) -> str:
    return (("≤ " if x < 0 else "≥ ") if beyond else "") + f"{x:.2f}"


def forgetting_verdict(unlearned: Any, retrained: Any, retrain_control: Any, none_control: Any, *,
                       margin: float = DEFAULT_MARGIN, level: float = DEFAULT_LEVEL,
                       replicates: int = DEFAULT_REPLICATES, seed: int = 0,
                       max_examples: int = DEFAULT_MAX_EXAMPLES, shifts: tuple[float, ...] = DEFAULT_SHIFTS,
                       accuracies: dict[str, Any] | None = None,
                       max_utility_loss: float = DEFAULT_MAX_UTILITY_LOSS) -> dict[str, Any]:
    """The verdict record (module docstring) from φ arrays ``(models, examples)`` on the forget examples,
    computed anywhere: the method's N runs from one original (``unlearned``), the retrain bank of R models
    (``retrained``), the retrain control (N more models retrained with other seeds) and the ``none`` control
    (N originals trained with the forget set, their own seeds); controls of another size are refused (F's
    buckets and the ε a set can reach depend on its number of models).

    ``accuracies`` (optional): ``{"retain": (RA_U, RA_R), "test": (TA_U, TA_R)}``, per-model accuracies of the
    method's and the bank's models: the record then carries the utility ratios and says which fell more than
    ``max_utility_loss`` below 1. Returns: ``verdict`` (``forgotten`` / ``not_forgotten`` / ``inconclusive``),
    ``rule`` (why, in words), ``shift`` with ``shift_ci`` (the equivalent share of the original's shift the method
    keeps), ``quality`` (F) with ``quality_ci``, ``quality_normalised`` (q) with its interval, ``controls`` (the
    same for the retrain and none controls), ``power``, ``models_to_decide`` (for an ``inconclusive``), N, R and
    the calibration's curve."""
    record, _ = verdict_and_calibrations(unlearned, retrained, retrain_control, none_control, margin=margin,
                                         level=level, replicates=replicates, seed=seed, max_examples=max_examples,
                                         shifts=shifts, accuracies=accuracies, max_utility_loss=max_utility_loss)
    return record


def verdict_and_calibrations(unlearned: Any, retrained: Any, retrain_control: Any, none_control: Any, *,
                             margin: float = DEFAULT_MARGIN, level: float = DEFAULT_LEVEL,
                             replicates: int = DEFAULT_REPLICATES, seed: int = 0,
                             max_examples: int = DEFAULT_MAX_EXAMPLES, shifts: tuple[float, ...] = DEFAULT_SHIFTS,
                             accuracies: dict[str, Any] | None = None,
                             max_utility_loss: float = DEFAULT_MAX_UTILITY_LOSS,
                             calibrations: dict[str, Calibration] | None = None
                             ) -> tuple[dict[str, Any], dict[str, Calibration]]:
    """:func:`forgetting_verdict` and the calibrations it used (``method``, ``retrain``, ``none``); the controls'
    calibrations given in ``calibrations`` are reused. They depend on the bank, the controls and the settings
    (``margin``, ``level``, ``replicates``, ``seed``, ``max_examples``, ``shifts``), not on the method: one pair serves
    every method audited against the same models with the same settings; the caller keeps those settings equal."""
    margin, level = _check_margin_level(margin, level)
    if int(replicates) < 20:
        raise DuckInputError(f"replicates must be >= 20 (splits per shift of the calibration), got {replicates}")
    u, bank = _phi(unlearned, "unlearned"), _phi(retrained, "retrained")
    ctrl, none = _phi(retrain_control, "retrain_control"), _phi(none_control, "none_control")
    _check_sets(u, bank, ctrl, none)
    grid = tuple(sorted(set(shifts) | {0.0, float(margin), -float(margin)}))
    delta = original_shift(bank, ctrl, none)
    cals = {k: v for k, v in (calibrations or {}).items() if k != "method"}
    for name, phi in (("method", u), ("retrain", ctrl), ("none", none)):
        if name not in cals:
            cals[name] = calibrate(phi, bank, delta, shifts=grid, replicates=int(replicates), seed=seed,
                                   max_examples=max_examples, level=level)
    method = _set_record("method", u, bank, cals["method"], margin, level)
    controls = {name: _set_record(name, phi, bank, cals[name], margin, level)
                for name, phi in (("retrain", ctrl), ("none", none))}
    f_ret, f_none = controls["retrain"]["quality"], controls["none"]["quality"]
    spread = f_ret - f_none
    q = (method["quality"] - f_none) / spread if spread > 0 else None
    q_ci = [(b - f_none) / spread for b in method["quality_ci"]] if spread > 0 else None
    n_u, n_r = u.shape[0], bank.shape[0]
    effect = {"estimate": method["shift"], "low": method["shift_ci"][0], "high": method["shift_ci"][1]}
    past = method["shift_beyond"]
    shift_txt = (f"the method keeps an equivalent {_fmt(effect['estimate'], 'estimate' in past)} "
                 f"[{_fmt(effect['low'], 'low' in past)}, {_fmt(effect['high'], 'high' in past)}] of the original's "
                 f"shift away from retrained models (negative: moved past them; margin ±{margin:g}, {100 * level:g} % interval)")
    needed = None
    none_c = controls["none"]
    # power is the location's: the none control's interval wholly beyond the margin (module docstring); F's veto
    # alone (an inconsistent none control) says the sets differ, not that the intervals can tell ±m from the original
    power = none_c["shift_ci"][0] > margin or none_c["shift_ci"][1] < -margin
    if not power:
        verdict = "inconclusive"
        rule = (f"no power: the none control (models trained with the forget set) is not shown farther from "
                f"retraining than the margin (its equivalent shift {_fmt(none_c['shift'])} "
                f"[{_fmt(none_c['shift_ci'][0])}, {_fmt(none_c['shift_ci'][1])}]); the original barely moved these "
                "examples, or N and R are too small: raise attack.forgetting.n_unlearned / n_retrained, or audit a "
                "forget set the model memorises")
    else:
        verdict = method["decision"]
        if not method["consistent"]:
            rule = (f"{shift_txt}, but F rejects every share in that interval at {100 * F_VETO_LEVEL:g} %: the runs "
                    "differ from retrained models in more than a shift of their outputs (their spread, typically)")
        elif verdict == "forgotten":
            rule = f"{shift_txt}: closer to retraining than the margin"
        elif verdict == "not_forgotten":
            rule = f"{shift_txt}: farther from retraining than the margin"
        else:
            needed = _models_to_decide(effect, margin, n_u)
            more = (f"about {needed} models a side (attack.forgetting.n_unlearned / n_retrained) would decide it"
                    if needed else "more models a side would narrow it")
            rule = f"{shift_txt}: the interval holds the margin; {more}"
            if controls["retrain"]["decision"] != "forgotten":
                rule += ("; at this N and R not even the retrain control (retrained models with other seeds) is "
                         "shown within the margin")
    record: dict[str, Any] = {
        "verdict": verdict, "rule": rule, "margin": float(margin), "level": float(level),
        "quality": method["quality"], "quality_ci": method["quality_ci"],
        "quality_normalised": q, "quality_normalised_ci": q_ci,
        "shift": method["shift"], "shift_ci": method["shift_ci"], "shift_beyond": method["shift_beyond"],
        "consistent": method["consistent"],
        "controls": controls, "power": bool(power),
        "n_unlearned": int(n_u), "n_retrained": int(n_r), "n_examples": int(u.shape[1]),
        "models_to_decide": needed,
        "calibration": {"replicates": int(replicates), "shifts": list(cals["method"].shifts.tolist()),
                        "location_z": cals["method"].location_z.tolist(),
                        "f_shifts": cals["method"].f_shifts.tolist(), "f_z": cals["method"].z().tolist(),
                        "examples_scored": cals["method"].n_scored, "seed": int(seed)},
        "test": "equivalence (two one-sided tests) of the location statistic against its shift-back permutation "
                "distribution at each fraction of the original's shift, the epsilon score F's test as a "
                "consistency veto (docs/audit.md, forgetting verdict)"}
    if accuracies:
        record["utility"] = utility_ratios(accuracies, max_utility_loss)
        if not record["utility"]["ok"]:
            record["rule"] += (f"; forgetting cost more than {100 * max_utility_loss:g} % of the retrained models' "
                               f"{' and '.join(record['utility']['exceeded'])} accuracy")
    return record, cals


def utility_ratios(accuracies: dict[str, Any], max_utility_loss: float) -> dict[str, Any]:
    """RA_U / RA_R and TA_U / TA_R from per-model accuracies ``{"retain": (method, bank), "test": (method,
    bank)}``, and which of them fell more than ``max_utility_loss`` below 1."""
    if not 0 <= float(max_utility_loss) < 1:
        raise DuckInputError(f"max_utility_loss must be in [0, 1), got {max_utility_loss}")
    out: dict[str, Any] = {"max_loss": float(max_utility_loss), "exceeded": []}
    for split in ("retain", "test"):
        if split not in accuracies:
            raise DuckInputError(f"accuracies needs a '{split}' entry: (method models' accuracies, retrained "
                                 "models' accuracies)")
        mine, ref = (np.asarray(a, dtype=np.float64) for a in accuracies[split])
        if mine.size == 0 or ref.size == 0 or float(ref.mean()) <= 0:
            raise DuckInputError(f"the '{split}' accuracies must be non-empty with a positive retrained mean")
        ratio = float(mine.mean() / ref.mean())
        out[f"{split}_ratio"] = ratio
        if ratio < 1 - float(max_utility_loss):
            out["exceeded"].append(split)
    out["ok"] = not out["exceeded"]
    return out


def _check_margin_level(margin: Any, level: Any) -> tuple[float, float]:
    try:
        m, lv = float(margin), float(level)
    except (TypeError, ValueError):
        raise DuckInputError(f"margin and level must be numbers, got {margin!r} and {level!r}") from None
    if not 0 < m < 1:
        raise DuckInputError(f"the margin (margin=, attack.forgetting.margin) must be in (0, 1) (the share of the "
                             f"original's shift a forgotten method may keep), got {margin}")
    if not 0.5 <= lv < 1:
        raise DuckInputError(f"the interval level must be in [0.5, 1), got {level}")
    return m, lv


#: the arrays of a margins file (``duck-audit margins=FILE.npz``): φ ``(models, examples)`` on the forget examples
MARGIN_ARRAYS = ("unlearned", "retrained", "retrain_control", "none_control")
#: optional per-model accuracies (all four or none): the utility ratios of the verdict record
ACCURACY_ARRAYS = ("retain_acc_unlearned", "retain_acc_retrained", "test_acc_unlearned", "test_acc_retrained")


def read_margins(path: Any) -> dict[str, np.ndarray]:
    """The arrays of a margins file: an ``.npz`` (no pickled objects) holding :data:`MARGIN_ARRAYS` as float
    arrays ``(models, examples)`` over the same forget examples, and optionally the four
    :data:`ACCURACY_ARRAYS` (one accuracy in [0, 1] per model of the unlearned set and of the bank)."""
    from pathlib import Path

    p = Path(str(path)).expanduser()
    if not p.is_file():
        raise DuckInputError(f"margins={path}: no such file; pass margins=PATH to an .npz of φ arrays "
                             f"({', '.join(MARGIN_ARRAYS)}; docs/formats.md)")
    import zipfile

    if not zipfile.is_zipfile(p):
        raise DuckInputError(f"margins={path} is not an .npz archive; write the arrays with numpy.savez")
    try:
        with np.load(p, allow_pickle=False) as f:
            arrays = {k: np.asarray(f[k]) for k in f.files}
    except (OSError, ValueError, EOFError, KeyError) as exc:
        raise DuckInputError(f"margins={path} is not a readable .npz of arrays ({type(exc).__name__}: {exc}); "
                             "write it with numpy.savez (no pickled objects)") from None
    missing = [k for k in MARGIN_ARRAYS if k not in arrays]
    if missing:
        raise DuckInputError(f"margins={path} lacks the array(s) {missing}; it must hold {list(MARGIN_ARRAYS)} "
                             "(φ, models × forget examples)")
    unknown = sorted(set(arrays) - set(MARGIN_ARRAYS) - set(ACCURACY_ARRAYS))
    if unknown:
        raise DuckInputError(f"margins={path} holds unknown array(s) {unknown}; known: "
                             f"{list(MARGIN_ARRAYS) + list(ACCURACY_ARRAYS)}")
    out = {}
    for k in MARGIN_ARRAYS:
        if arrays[k].dtype.kind not in "fiu":
            raise DuckInputError(f"margins={path}: array '{k}' has dtype {arrays[k].dtype}; φ must be numbers")
        out[k] = _phi(arrays[k], f"margins array '{k}'")
    _check_sets(*(out[k] for k in MARGIN_ARRAYS))  # before the run directory is made (the CLI reads the file first)
    given = [k for k in ACCURACY_ARRAYS if k in arrays]
    if given and len(given) != len(ACCURACY_ARRAYS):
        raise DuckInputError(f"margins={path} holds {given} but not {sorted(set(ACCURACY_ARRAYS) - set(given))}: "
                             "give all four accuracy arrays or none")
    for k in given:
        acc = np.asarray(arrays[k], dtype=np.float64).reshape(-1)
        side = "unlearned" if k.endswith("unlearned") else "retrained"
        bad = acc[~((acc >= 0) & (acc <= 1))]  # NaN fails both comparisons
        if acc.size != out[side].shape[0] or bad.size:
            got = f"{acc.size} values" if acc.size != out[side].shape[0] else f"{float(bad[0])!r}"
            raise DuckInputError(f"margins={path}: '{k}' must hold one accuracy in [0, 1] per model of "
                                 f"'{side}' ({out[side].shape[0]}), got {got}")
        out[k] = acc
    return out


def accuracies_of(arrays: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """The ``accuracies`` argument of :func:`forgetting_verdict` from a margins file's arrays (None without)."""
    if "retain_acc_unlearned" not in arrays:
        return None
    return {"retain": (arrays["retain_acc_unlearned"], arrays["retain_acc_retrained"]),
            "test": (arrays["test_acc_unlearned"], arrays["test_acc_retrained"])}

