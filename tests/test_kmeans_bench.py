"""The ``duck-bench kmeans`` suite on tiny settings: protocol bookkeeping, table, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from benchmarks import kmeans as bench
from duck.errors import DuckInputError


def tiny_cfg(**overrides):
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "bench" / "kmeans.yaml")
    cfg.merge_with(
        {
            "datasets": ["gaussian", "wine"],
            "replicates": 2,
            "n_deletions": 30,
            "baseline_sample": 20,
            "silhouette_sample": 300,
            "gaussian": {"n": 1500, "d": 5, "k": 3},
            **overrides,
        }
    )
    return cfg


def test_gaussian_mixture_shapes_and_labels():
    X, y = bench.gaussian_mixture(1000, 25, 5, 1.0, seed=0)
    assert X.shape == (1000, 25) and X.dtype == np.float32 and set(np.unique(y)) <= set(range(5))
    again, _ = bench.gaussian_mixture(1000, 25, 5, 1.0, seed=0)
    np.testing.assert_array_equal(X, again)


def test_suite_runs_and_reports_every_method():
    out = bench.run(tiny_cfg())
    table = out["table"]
    for name in (
        "gaussian",
        "wine",
        "k-means++",
        "Q-k-means",
        "DC-k-means",
        "speed-up (of mean totals)",
        "per-replicate speed-ups",
        "NMI",
        "scikit-learn",
    ):
        assert name in table
    gauss = out["results"]["gaussian"]
    assert gauss["setup"]["m"] == 30 and gauss["setup"]["replicates"] == 2
    assert gauss["k-means++"]["loss_ratio"]["mean"] == 1.0  # the reference itself
    assert gauss["k-means++"]["speedup"]["mean"] == 1.0
    for meth in ("Q-k-means", "DC-k-means"):
        assert gauss[meth]["speedup"]["mean"] > 0 and 0.5 < gauss[meth]["loss_ratio"]["mean"] < 2.0
        # the headline: ratio of the mean totals (not the mean of per-replicate ratios)
        assert gauss[meth]["speedup_of_mean_totals"] == pytest.approx(
            gauss["k-means++"]["total_s"]["mean"] / gauss[meth]["total_s"]["mean"])
        assert 0.0 <= gauss[meth]["nmi"]["mean"] <= 1.0
    assert out["results"]["wine"]["setup"]["m"] == 17  # at most 10 % of the 178 rows
    sk = gauss["sklearn_compare"]
    assert abs(sk["loss_ratio"]["mean"] - 1.0) < 0.01 and sk["paired_time_ratio"]["mean"] > 0
    # paired: scikit-learn's Lloyd starts from our seeds, so both run (nearly) the same iterations
    assert abs(sk["iters_ours"]["mean"] - sk["iters_sklearn_paired"]["mean"]) <= 0.2 * sk["iters_ours"]["mean"] + 1
    assert "time ratio paired" in table
    assert "extrapolated" in table and "gaussian: k-means++ retrain cost timed on 20 of the 30" in table
    assert "wine: k-means++" not in table  # wine: all 17 retrains are timed, nothing extrapolated
    json.dumps(out["results"])  # JSON-able


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(DuckInputError, match=r"bench\.datasets\[0\]='mnist'; choose one of \['gaussian'"):
        bench.run(tiny_cfg(datasets=["mnist"]))


def test_cli_writes_bench_json(run_cli):
    code, out, err, run_dir = run_cli(
        "bench",
        "kmeans",
        "bench.datasets=[wine]",
        "bench.replicates=1",
        "bench.sklearn_compare=false",
        "bench.silhouette_sample=100",
    )
    assert code == 0, err
    result = json.loads((run_dir / "bench.json").read_text())
    assert result["suite"] == "kmeans" and "Q-k-means" in result["table"] and "machine" in result
