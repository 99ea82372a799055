"""The forgetting section of report.html, built from a fixture audit record (the digits demo's ``forgetting``
block: duck, class 3, N = R = 4), compared section by section with the text a reader should get; and the verdict
sentence of every case, in plain words (issue 38)."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from duck.pipeline.audit import forgetting_markdown, verdict_sentence
from duck.report import write_report

BLOCK = json.loads((Path(__file__).parent / "data" / "forgetting_block_digits_demo.json").read_text())


def sections(markdown: str) -> list[str]:
    return [s.strip() for s in markdown.strip().split("\n\n")]


def test_the_forgetting_section_reads_verdict_then_evidence_then_details():
    verdict, table, how, terms = sections(forgetting_markdown(BLOCK))
    lo, hi = BLOCK["shift_ci"]  # [0.0105, 0.195]: at most 20 % either way
    assert verdict == ("**Forgotten.** On the forget set, 4 runs of duck behave like models retrained without it: "
                       f"they keep at most {100 * max(abs(lo), abs(hi)):.0f} % of the original model's imprint, in "
                       "either direction (95 % interval; 25 % allowed).")
    lines = table.splitlines()
    assert lines[0].startswith("| models | imprint kept [95 % CI] | decision | F [95 % CI] |")
    names = [line.split("|")[1].strip() for line in lines[2:]]
    decisions = [line.split("|")[3].strip() for line in lines[2:]]
    assert names == ["duck (N = 4)", "control: retrain", "control: none"]
    assert decisions == ["forgotten", "forgotten", "not forgotten"]
    f_cell = lines[2].split("|")[4].strip()
    assert f_cell == f"{BLOCK['quality']:.3f} [{BLOCK['quality_ci'][0]:.3f}, {BLOCK['quality_ci'][1]:.3f}]"
    assert how.startswith("**How this was decided.** The method keeps an equivalent 0.11 [0.01, 0.20]")
    assert f"retain accuracy × {BLOCK['utility']['retain_ratio']:.3f}" in how
    assert f"q = {BLOCK['quality_normalised']:.3f}" in how
    assert terms.startswith("*Imprint kept*: the equivalent share") and "R = 4 models retrained" in terms


def variant(**changes: object) -> dict:
    block = copy.deepcopy(BLOCK)
    block.update(changes)
    return block


@pytest.mark.parametrize("changes, expected", [
    ({"verdict": "not_forgotten", "shift_ci": [0.4, 0.7], "consistent": True},
     "**Not forgotten.** On the forget set, 4 runs of duck still differ from models retrained without it: they keep "
     "at least 40 % of the original model's imprint (95 % interval; 25 % allowed)."),
    ({"verdict": "not_forgotten", "shift_ci": [-0.9, -0.5], "consistent": True},
     "**Not forgotten.** On the forget set, 4 runs of duck are pushed past models retrained without it by at least "
     "50 % of the original model's imprint (over-forgetting is a trace too; 95 % interval, 25 % allowed)."),
    ({"verdict": "not_forgotten", "consistent": False},
     "**Not forgotten.** On the forget set, 4 runs of duck differ from models retrained without it in more than a "
     "shift of their outputs (no share of the original model's imprint makes them look retrained; their spread "
     "differs too)."),
    ({"verdict": "inconclusive", "shift_ci": [0.1, 0.4], "models_to_decide": 12, "power": True},
     "**Inconclusive.** On the forget set, 4 runs of duck keep between 10 % and 40 % of the original model's "
     "imprint: too uncertain to say whether they are within the 25 % allowed; to decide, raise "
     "attack.forgetting.n_unlearned and n_retrained to about 12."),
    ({"verdict": "inconclusive", "power": False, "models_to_decide": None},
     "**Inconclusive.** This audit cannot tell even the original model, before unlearning, from models retrained "
     "without the forget set, so it cannot judge duck (no power): raise attack.forgetting.n_unlearned and "
     "n_retrained, or choose a forget set the original memorises."),
])
def test_every_verdict_is_one_plain_sentence(changes, expected):
    sentence = verdict_sentence(variant(**changes))
    assert sentence == expected
    assert "φ" not in sentence and "ε" not in sentence and "F " not in sentence  # no estimator detail first


def test_the_report_opens_with_the_verdict_and_cites_papers_by_name(tmp_path):
    from test_report import fake_audit

    audits = {"original": fake_audit("original", 1.0, 2), "unlearned": fake_audit("unlearned", -1.0, 3)}
    paths = write_report(tmp_path, summary_rows=[{"model": "original", "A_t": 0.9}], audits=audits, config={},
                         scenario=None, lead_sections=[("Forgetting audit (against retrained models)",
                                                        forgetting_markdown(BLOCK))])
    md = paths["md"].read_text()
    headings = re.findall(r"^#+ (.*)$", md, re.M)
    assert headings[:3] == ["duck-unlearn audit report", "Forgetting audit (against retrained models)",
                            "Accuracy and AUS"]
    assert md.index("**Forgotten.**") < md.index("| models |") < md.index("**How this was decided.**")
    assert "SVM membership inference (DUCK, Cotogni et al. 2023, Supp. V-F)" in headings
    assert "seeds/" not in md and "ALGORITHMS.md" not in md
    page = paths["html"].read_text()
    assert "<strong>Forgotten.</strong>" in page and "**" not in page


def test_f_at_two_models_reads_as_undefined_not_zero():
    """With N = 2 the ε buckets end at ⌈ln(2 − 1)⌉ = 0: every set scores F = 0 whatever its margins (attacks/epsilon
    ``epsilon_points``), so the tables print "—" with the reason instead of a 0.000 that reads as "told apart";
    from N = 3 (buckets up to ⌈ln 2⌉ = 1) F is printed with its interval."""
    import numpy as np

    import duck
    from duck.pipeline.audit import margins_markdown, quality_text

    assert quality_text(0.0, [0.0, 0.0], 2) == "— (N = 2: no ε bucket)"
    assert quality_text(0.25, [0.125, 0.5], 3) == "0.250 [0.125, 0.500]"
    assert quality_text(0.25, None, 3) == "0.250"
    rng = np.random.default_rng(0)
    draw = lambda n, shift=0.0: shift + rng.standard_normal((n, 30))
    record = duck.forgetting_verdict(draw(2), draw(8), draw(2), draw(2, 3.0), replicates=20)
    assert record["quality"] == 0.0 and record["controls"]["none"]["quality"] == 0.0  # no bucket: 0 for every set
    rows = [line for line in margins_markdown({**record, "method": "m"}, "m.npz").splitlines()
            if line.startswith("| m ") or line.startswith("| control")]
    assert len(rows) == 3 and all(row.endswith("| — (N = 2: no ε bucket) |") for row in rows)
    block = copy.deepcopy(BLOCK)
    for s in (block, *block["controls"].values()):
        s["n_models"] = 2
    table = sections(forgetting_markdown(block))[1]
    assert table.count("— (N = 2: no ε bucket)") == 1 + len(block["controls"])
