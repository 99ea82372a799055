"""The ``duck-bench lsh`` fairness suite on tiny settings: tuning rule, TVD, interleaved sampler rows, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from benchmarks import lsh as bench
from duck.errors import DuckInputError


def tiny_cfg(**overrides):
    cfg = OmegaConf.load(Path(__file__).resolve().parents[1] / "conf" / "bench" / "lsh.yaml")
    cfg.merge_with({"datasets": ["digits"], "n_queries": 8, "n_tuning_queries": 8, "samples_per_neighbour": 5,
                    "repeats": 2, "device": "cpu", **overrides})
    return cfg


def test_total_variation_against_hand_count():
    members = torch.tensor([2, 5, 9])
    samples = torch.tensor([2, 2, 5, 9, 9, 9])  # frequencies 1/3, 1/6, 1/2 against 1/3 each
    assert bench.total_variation(samples, members) == pytest.approx(0.5 * (0 + 1 / 6 + 1 / 6))


def test_tune_k_picks_the_largest_k_under_the_predicted_fn_rate():
    dists = np.array([0.5, 1.0, 1.5])
    k, fn = bench.tune_k(dists, w=4.0, L=10, k_max=12, fn_target=0.1)
    p = bench.collision_probability(dists, 4.0)
    predicted = [float(np.mean((1 - p**j) ** 10)) for j in range(1, 13)]
    assert fn == pytest.approx(predicted[k - 1]) and fn < 0.1
    assert k == 12 or predicted[k] >= 0.1  # the next k breaks the target (the rate grows with k)


def test_suite_reports_every_sampler_with_closed_form_and_table_probes():
    out = bench.run(tiny_cfg())
    res = out["datasets"]["digits"]
    samplers = res["samplers"]
    assert set(samplers) == {"uniform", "weighted", "approx_degree", "approx_degree (Delta=2)",
                             "approx_degree (table probes)", "exact_degree"}
    for label, s in samplers.items():
        assert 0.0 <= s["tvd"]["mean"] <= 1.0 and s["us_per_sample"] > 0, label
        assert s["proposals_per_sample"] >= 1.0, label
    assert samplers["approx_degree (table probes)"]["probes_per_sample"] > 0
    assert samplers["approx_degree"]["probes_per_sample"] == 0  # acceptance in closed form: no lookups
    assert res["L"] == int(np.ceil(np.sqrt(res["n_points"])))
    for name in ("approx_degree (table probes)", "time / weighted", "TVD / exact", "degree range"):
        assert name in out["table"]
    json.dumps(out["datasets"])  # JSON-able


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(DuckInputError, match=r"bench\.datasets\[0\]='mnist'; choose one of \['digits'"):
        bench.run(tiny_cfg(datasets=["mnist"]))


def test_cli_writes_bench_json(run_cli):
    code, out, err, run_dir = run_cli("bench", "lsh", "bench.datasets=[digits]", "bench.n_queries=5",
                                      "bench.n_tuning_queries=5", "bench.samples_per_neighbour=3",
                                      "bench.repeats=1", "bench.approx_deltas=[1]")
    assert code == 0, err
    result = json.loads((run_dir / "bench.json").read_text())
    assert result["suite"] == "lsh" and "exact_degree" in result["table"]
