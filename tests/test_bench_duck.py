"""``duck-bench duck`` bookkeeping: the per-run retrain/DUCK time ratio and the issue-3 target checks."""

from __future__ import annotations

from benchmarks import duck as bench


def _rec(method: str, scenario: str, run: str, **kw: float) -> dict:
    return {"method": method, "scenario": scenario, "run": run, **kw}


def test_ratios_pair_duck_with_the_oracle_of_the_same_run():
    records = [
        _rec("retrain", "class_removal", "class_0", time_s=100.0),
        _rec("duck", "class_removal", "class_0", time_s=20.0),
        _rec("retrain", "class_removal", "class_4", time_s=90.0),
        _rec("duck", "class_removal", "class_4", time_s=30.0),
        _rec("duck", "homogeneous_removal", "seed_0", time_s=10.0),  # no oracle recorded: skipped
        _rec("duck", "class_removal", "class_8", error="boom"),
    ]
    assert bench._ratios(records) == [5.0, 3.0]


def test_targets_report_met_and_missed():
    records = [
        _rec("retrain", "class_removal", "class_0", time_s=100.0, A_f=0.0, AUS=1.01, A_t=0.92),
        _rec("duck", "class_removal", "class_0", time_s=25.0, A_f=0.0, AUS=0.995, A_t=0.91),
        _rec("retrain", "homogeneous_removal", "seed_0", time_s=100.0, A_f=0.92, AUS=0.99, A_t=0.91),
        _rec("duck", "homogeneous_removal", "seed_0", time_s=40.0, A_f=0.95, AUS=0.94, A_t=0.90),
    ]
    got = {t: ok for t, ok, _ in bench._targets(records)}
    assert got["CR: DUCK forget-test accuracy <= 0.01 for every class"]
    assert got["CR: DUCK mean AUS >= 0.97"] and got["CR: DUCK AUS within 0.02 of the oracle's"]
    assert not got["HR: DUCK mean AUS >= 0.95"]
    assert not got["HR: mean abs(A_f - A_t) <= 0.03"]  # 0.05
    assert not got["DUCK >= 5x faster than retraining (mean retrain/DUCK time)"]  # ratios 4 and 2.5
    records[1]["time_s"], records[3]["time_s"] = 10.0, 20.0  # ratios 10 and 5: mean 7.5
    assert {t: ok for t, ok, _ in bench._targets(records)}["DUCK >= 5x faster than retraining (mean retrain/DUCK time)"]
