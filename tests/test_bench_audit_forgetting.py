"""``duck-bench audit``'s forgetting part: the second method's audit reuses the first's retrain bank and
controls (trains nothing) and the table reports the ratio."""

from __future__ import annotations

from benchmarks.audit_forgetting import forgetting_reuse, forgetting_table


def test_second_method_reuses_the_banks(tmp_path):
    spec = {"data": "synthetic", "model": "smallcnn", "scenario": {"kind": "class_removal", "forget_classes": [1]},
            "methods": ["finetune", "neggrad"], "n_unlearned": 3, "n_retrained": 3,
            "overrides": ["data.n_train=240", "data.n_test=120", "model.width=8", "recipe.epochs=3"]}
    result = forgetting_reuse(spec, tmp_path / "cache", tmp_path / "out")
    first, second = result["rows"]
    assert first["banks_trained"] == ["none", "retrain", "retrained"] and second["banks_trained"] == []
    assert result["ratios"] == [second["time_s"] / first["time_s"]] and result["ratios"][0] < 1.0
    table = forgetting_table(result)
    assert "| neggrad |" in table and "ratio to first" in table and "N = 3, R = 3" in table
