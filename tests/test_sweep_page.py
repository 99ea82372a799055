"""The sweep summary's forgetting columns and the sweep page (issue 38): verdicts counted, each job's interval
carried where one job makes a row, mean (std) over several, the controls as reference points, time relative to
retraining; the same page for duck-bench compare's records."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from duck.report.sweep import summarize_sweep
from duck.report.sweep_page import forgetting_fields, headline, references, value_text, verdict_counts

BLOCK = json.loads((Path(__file__).parent / "data" / "forgetting_block_digits_demo.json").read_text())


def forgetting(verdict: str, shift: float, q: float) -> dict:
    block = copy.deepcopy(BLOCK)
    block.update(verdict=verdict, shift=shift, shift_ci=[shift - 0.1, shift + 0.1], quality_normalised=q,
                 quality_normalised_ci=[q - 0.2, q + 0.2], quality=0.1 * q, quality_ci=[0.1 * q - 0.01, 0.1 * q + 0.01])
    return block


def write_job(sweep: Path, name: str, method: str, forget_class: int, seed: int, block: dict | None,
              times: tuple[float, float, float] = (10.0, 2.0, 8.0)) -> None:
    job = sweep / name
    (job / "unlearned").mkdir(parents=True)
    (job / ".hydra").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text(f"- method={method}\n- seed={seed}\n")
    scenario = {"scenario": "class_removal", "forget_classes": [forget_class], "n_forget": 100, "seed": seed,
                "forget_hash": f"h{forget_class}", "forget_class_names": [str(forget_class)]}
    rows = [{"model": "original", "method": "original", "A_t": 0.95, "A_f": 1.0, "AUS": 0.5, "time_s": times[0]},
            {"model": f"unlearned ({method})", "method": method, "A_t": 0.93, "A_f": 0.0, "AUS": 0.98,
             "time_s": times[1]},
            {"model": "retrained", "method": "retrain", "A_t": 0.94, "A_f": 0.0, "AUS": 0.99, "time_s": times[2]}]
    (job / "summary.json").write_text(json.dumps({"scenario": scenario, "rows": rows}))
    if block is not None:
        (job / "unlearned" / "audit.json").write_text(json.dumps({"lira": {"auc": 0.5}, "forgetting": block}))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """duck on classes 3 and 5 (forgotten, inconclusive), finetune on class 3 (not forgotten), scrub unaudited."""
    s = tmp_path / "sweep"
    write_job(s, "0", "duck", 3, 0, forgetting("forgotten", 0.05, 0.9))
    write_job(s, "1", "duck", 5, 0, forgetting("inconclusive", 0.2, 0.7), times=(10.0, 4.0, 8.0))
    write_job(s, "2", "finetune", 3, 0, forgetting("not_forgotten", 0.6, 0.3))
    write_job(s, "3", "scrub", 3, 0, None)
    return s


def test_forgetting_columns_are_aggregated_per_method(sweep: Path):
    out = summarize_sweep(sweep)
    by = {s["method"]: s for s in out["summary"]}
    assert by["duck"]["verdicts"] == ["forgotten", "inconclusive"] and by["scrub"]["verdicts"] == []
    assert by["duck"]["imprint_kept"]["mean"] == pytest.approx(0.125)
    assert by["duck"]["imprint_kept"]["std"] == pytest.approx(0.106066, rel=1e-5)  # sd of (0.05, 0.2), ddof 1
    assert by["duck"]["time_ratio"]["mean"] == pytest.approx((2 / 8 + 4 / 8) / 2)
    assert "imprint_kept_ci" not in by["duck"]  # two jobs: no single interval
    assert by["finetune"]["imprint_kept_ci"] == pytest.approx([0.5, 0.7])  # one job: its interval
    assert by["original"]["n"] == 2 and by["retrain"]["n"] == 2  # once per forget set
    assert "| duck | 2 | 1 forgotten, 1 inconclusive |" in out["table"]
    assert "| scrub | 1 | — |" in out["table"]
    import csv

    rows = {r["method"]: r for r in csv.DictReader((sweep / "sweep_summary.csv").open())}
    assert (rows["duck"]["n_forgotten"], rows["duck"]["n_inconclusive"], rows["duck"]["n_not_forgotten"]) == ("1", "1", "0")
    assert rows["finetune"]["n_not_forgotten"] == "1" and rows["scrub"]["n_forgotten"] == "0"


def test_the_sweep_page_shows_the_verdicts_plot_and_per_class_rows(sweep: Path):
    page = summarize_sweep(sweep)["page"].read_text()
    assert "<strong>1 forgotten, 1 inconclusive, 1 not forgotten</strong> among 3 audited run(s) of 2 method(s)" in page
    assert "judged forgotten: duck." in page
    assert page.count("data:image/png;base64,") == 1 and 'class="sortable"' in page
    assert "Per forget set and seed" in page  # two forget sets
    assert "<td>50 % [40 %, 60 %]</td>" in page or "<td>60 % [50 %, 70 %]</td>" in page  # finetune: its interval


def test_a_retrain_jobs_unlearned_row_is_a_method_with_its_verdict_not_the_reference(tmp_path: Path):
    """``method=retrain`` (the retrain control run as a method): its unlearned row also says ``method: retrain``;
    its ``model`` label tells it from the job's retrained reference, so the sweep shows its verdict."""
    s = tmp_path / "sweep"
    write_job(s, "0", "retrain", 3, 0, forgetting("forgotten", -0.01, 1.0))
    write_job(s, "1", "none", 3, 0, forgetting("not_forgotten", 1.0, 0.0))
    out = summarize_sweep(s)
    by = {r["method"]: r for r in out["summary"]}
    assert set(by) == {"original", "retrain", "retrain (as the method)", "none"}
    assert by["retrain (as the method)"]["verdicts"] == ["forgotten"] and by["retrain"]["verdicts"] == []
    assert by["retrain"]["n"] == 1 and by["retrain"]["time_s"]["mean"] == 8.0  # the reference, once per forget set
    assert by["retrain (as the method)"]["time_ratio"]["mean"] == pytest.approx(2 / 8)
    assert by["retrain (as the method)"]["imprint_kept_ci"] == pytest.approx([-0.11, 0.09])
    assert "<strong>1 forgotten, 1 not forgotten</strong> among 2 audited run(s) of 2 method(s)" in out["page"].read_text()


def test_controls_are_reference_points_by_definition_of_the_scales():
    rows = [{"method": "original", "A_t": 0.9}, {"method": "original", "A_t": 0.8}, {"method": "retrain", "A_t": 0.85},
            {"method": "duck", "A_t": 0.5}]
    assert references(rows) == [{"label": "none control (original)", "A_t": pytest.approx(0.85), "q": 0.0, "imprint": 1.0},
                                {"label": "retrain control", "A_t": 0.85, "q": 1.0, "imprint": 0.0}]


def test_texts_of_cells_and_headline():
    assert verdict_counts(["not_forgotten", "forgotten", None, "forgotten"]) == "2 forgotten, 1 not forgotten"
    assert value_text({"F": 0.1234, "F_ci": [0.1, 0.15]}, "F") == "0.123 [0.100, 0.150]"
    assert value_text({"F": {"mean": 0.2, "std": 0.05, "n": 3}}, "F") == "0.200 (0.050)"
    assert value_text({"imprint_kept": -0.384, "imprint_kept_ci": [-0.54, -0.2355]}, "imprint_kept", 0, True) \
        == "-38 % [-54 %, -24 %]"
    assert value_text({}, "F") == "—"
    assert "no forgetting audit in this sweep" in headline([{"method": "duck"}, {"method": "original"}])


def test_forgetting_fields_read_the_audit_block():
    fields = forgetting_fields(BLOCK)
    assert fields["imprint_kept"] == BLOCK["shift"] and fields["imprint_kept_ci"] == BLOCK["shift_ci"]
    assert fields["F_normalised"] == BLOCK["quality_normalised"] and fields["verdict"] == "forgotten"
    assert fields["runs_time_s"] == pytest.approx(sum(BLOCK["unlearning_s"]) / 4)
    assert set(fields["controls_F"]) == {"retrain", "none"}
    assert (fields["F"], fields["F_ci"]) == (BLOCK["quality"], BLOCK["quality_ci"])
    assert fields["controls_F"]["none"] == {"F": BLOCK["controls"]["none"]["quality"],
                                            "F_ci": BLOCK["controls"]["none"]["quality_ci"]}


def test_f_of_a_two_model_set_is_left_blank():
    """At N = 2 the ε buckets end at ⌈ln 1⌉ = 0 and every set scores F = 0: the sweep page shows "—", not 0.000."""
    pair = {**BLOCK, "n_models": 2, "controls": {k: {**c, "n_models": 2} for k, c in BLOCK["controls"].items()}}
    fields = forgetting_fields(pair)
    assert (fields["F"], fields["F_ci"]) == (None, None) and value_text(fields, "F") == "—"
    assert fields["controls_F"] == {"retrain": {"F": None, "F_ci": None}, "none": {"F": None, "F_ci": None}}
    assert fields["imprint_kept"] == BLOCK["shift"]  # the verdict's evidence is still there


def test_compare_records_make_the_same_page(tmp_path: Path):
    from benchmarks.compare import write_page

    base = {"scenario": "class_removal", "run": "class_3", "seed": 0, "A_f": 0.0, "AUS": 0.9}
    records = [{**base, "method": "original", "A_t": 0.95, "time_s": 10.0},
               {**base, "method": "retrain", "A_t": 0.94, "time_s": 8.0},
               {**base, "method": "duck", "A_t": 0.93, "time_s": 2.0, **forgetting_fields(BLOCK)},
               {**base, "method": "scrub", "error": "RuntimeError: boom"}]
    page = write_page(tmp_path / "sweep.html", records, "duck-bench compare: digits / smallcnn").read_text()
    assert "<strong>1 forgotten</strong>" in page and "RuntimeError: boom" in page
    assert "<td>0.250 [" not in page and "0.250" in page  # duck's time / retraining = 2 / 8


def test_the_page_explains_the_forgetting_scales_only_when_a_job_was_audited(tmp_path: Path, sweep: Path):
    audited = summarize_sweep(sweep)["page"].read_text()
    assert "Imprint kept: the share of the original model" in audited and "no forgetting audit" not in audited
    plain = tmp_path / "plain"
    write_job(plain, "0", "scrub", 3, 0, None)
    page = summarize_sweep(plain)["page"].read_text()
    # said once, in the headline: no verdict, no scales, and the setting that adds them
    assert page.count("no forgetting audit in this sweep, so no verdict, imprint kept or q (run it with "
                      "attack.forgetting.enabled=true") == 1 and "forgetting audit" not in page.split("no forgetting audit", 1)[1]
    assert "Imprint kept" not in page and "data:image/png" not in page  # no scales, no trade-off plot


@pytest.mark.parametrize("spread", [0.004, 0.3])
def test_tradeoff_plot_tick_labels_never_overlap(spread: float):
    """Accuracies a few thousandths apart (methods that barely change utility) once got ticks every 0.0005 whose
    labels ran together ("0.93000.9305..."); on either panel, close or far apart, the x tick labels drawn do not
    touch each other."""
    from duck.report.plots import tradeoff_figure

    methods = ["duck", "finetune", "kgltop1", "neggrad"]
    points = [dict(method=m, A_t=0.93 + spread * k / 4, F_normalised=0.2 * k, imprint_kept=0.1 * k, time_ratio=0.1)
              for k, m in enumerate(methods)]
    refs = [dict(label="retrain", A_t=0.93 + spread / 2, q=1.0, imprint=0.0),
            dict(label="none", A_t=0.93 + spread, q=0.0, imprint=1.0)]
    fig = tradeoff_figure(points, refs, 0.25)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        boxes = sorted((label.get_window_extent(renderer) for label in ax.get_xticklabels()
                        if label.get_visible() and label.get_text()), key=lambda b: b.x0)
        assert len(boxes) >= 2
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False)), [(b.x0, b.x1) for b in boxes]


def test_a_method_at_a_controls_point_is_drawn_over_the_control():
    """A method that did nothing sits at q = 0 with the none control: its marker is drawn above the control's
    black cross (a lower zorder for the controls), so it stays visible."""
    from duck.report.plots import tradeoff_figure

    fig = tradeoff_figure([dict(method="finetune", A_t=0.99, F_normalised=0.0, imprint_kept=1.0, time_ratio=0.1)],
                          [dict(label="none control (original)", A_t=0.99, q=0.0, imprint=1.0)], 0.25)
    for ax in fig.axes:
        z = {c.get_label(): c.get_zorder() for c in ax.collections if c.get_label() in ("finetune",
                                                                                          "none control (original)")}
        assert z["finetune"] > z["none control (original)"], z
