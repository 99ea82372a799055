"""The audit report renders: HTML parses, is self-contained (PNG data URIs), Markdown links the plots."""

from __future__ import annotations

import base64
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from attacks.roc import roc_summary
from duck.report import write_report
from duck.report.document import markdown_to_html


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[dict[str, str]] = []
        self.open: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append({k: v or "" for k, v in attrs})
        elif tag not in ("meta", "br"):
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"mismatched </{tag}> (open: {self.open[-3:]})"
        self.open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def fake_audit(name: str, shift: float, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    scores = np.r_[rng.normal(shift, 1, 120), rng.normal(0, 1, 400)]
    member = np.r_[np.ones(120, bool), np.zeros(400, bool)]
    lira = {"variant": "offline", "offline_test": "one_sided", "n_shadow": 16, "views": ["identity"],
            **roc_summary(scores, member, n_boot=200)}
    lo, hi = lira["auc_ci"]
    lira["separated_from_chance"] = bool(lo > 0.5)
    lira["below_chance"] = bool(hi < 0.5)
    lira["within_2se_of_chance"] = bool(abs(lira["auc"] - 0.5) <= 2 * lira["auc_se"])
    return {"target": name, "members": "forget", "nonmembers": "test", "n_members": 120, "n_nonmembers": 400,
            "lira": lira, "svm_mia": {"f1": 0.55, "f1_std": 0.02, "accuracy": 0.56, "chance": 0.5,
                                      "chance_accuracy": 0.5, "n_members": 120, "n_nonmembers": 120,
                                      "runs": 5},
            "bank": {"key": "abc", "n_shadow": 16, "pool": "train", "trained_now": 16, "mode": "sequential",
                     "train_s": 80.0, "dir": "/cache/shadow_banks/abc"}}


@pytest.fixture
def audits() -> dict:
    return {"retrained": fake_audit("retrained", 0.0, 1), "original": fake_audit("original", 1.0, 2),
            "unlearned": fake_audit("unlearned", -1.0, 3)}


def test_report_renders_self_contained_html_and_markdown(tmp_path: Path, audits: dict) -> None:
    rows = [{"model": "original", "method": "original", "A_t": 0.99, "A_f": 0.98, "AUS": 0.505},
            {"model": "unlearned (duck)", "method": "duck", "A_t": 0.99, "A_f": 0.0, "AUS": 1.0}]
    extra = [("DP release", "Counts released under ε = 1.\n\n| stat | value |\n|---|---|\n| n | 12 |")]
    config = {"seed": 0, "attack": {"n_shadow": 16}}
    paths = write_report(tmp_path, summary_rows=rows, audits=audits, config=config,
                         scenario={"scenario": "homogeneous_removal", "n_forget": 120, "seed": 0},
                         run_times={"original": 9.7, "audit": 30.0}, extra_sections=extra)
    html = paths["html"].read_text()
    parser = Collector()
    parser.feed(html)
    parser.close()
    assert parser.open == [] or parser.open == ["html"]  # every element closed (html closes last)
    assert parser.tags.count("table") >= 5  # accuracy, LiRA, SVM, bank, run time (+ the extra section's)
    assert len(parser.images) == 2
    for img in parser.images:
        assert img["src"].startswith("data:image/png;base64,")  # embedded: no external files needed
        assert base64.b64decode(img["src"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "src=\"plots/" not in html and "http" not in html.split("<body>", 1)[1]
    text = " ".join(parser.text)
    for needle in ("original", "retrained", "unlearned", "attackable (CI above 0.5)",
                   "at chance (within 2 SE",
                   "distinguishable: CI below 0.5", "n_shadow: 16", "DP release"):
        assert needle in text
    # models in the order original, unlearned, retrained
    assert text.index("original") < text.index("unlearned") < text.rindex("retrained")
    md = paths["md"].read_text()
    assert "![LiRA ROC, log-log axes](plots/roc_loglog.png)" in md and "| stat | value |" in md
    for key in ("roc_png", "auc_png"):
        assert paths[key].read_bytes()[:4] == b"\x89PNG"


def test_report_without_audits_still_renders(tmp_path: Path) -> None:
    paths = write_report(tmp_path, summary_rows=[{"model": "original", "A_t": 0.9}], audits={}, config={},
                         scenario=None)
    assert "Accuracy and AUS" in paths["md"].read_text() and "roc_png" not in paths


def test_markdown_to_html_handles_tables_code_and_escaping() -> None:
    out = markdown_to_html("a <b> & c\n\n**Forgotten.** x *y*\n\n| x | y |\n|---|---|\n| 1 | <2> |\n\n```\ncode <x>\n```")
    assert "<p>a &lt;b&gt; &amp; c</p>" in out  # raw HTML is shown, not interpreted
    assert "<strong>Forgotten.</strong> x <em>y</em>" in out and "**" not in out  # the verdict line renders
    assert "<th>x</th>" in out and "<td>&lt;2&gt;</td>" in out and "---" not in out
    assert "<pre><code>code &lt;x&gt;\n</code></pre>" in out


def test_roc_axes_start_at_the_resolvable_rates():
    """One non-member of 46 is the smallest FPR an audit can resolve: the axis starts there, not at 1e-5."""
    from duck.report.plots import resolvable_min

    audits = {"unlearned": {"n_members": 137, "n_nonmembers": 46, "lira": {}},
              "original": {"n_members": 137, "n_nonmembers": 46, "lira": {}}}
    x_min, y_min = resolvable_min(audits)
    assert x_min == pytest.approx(1 / 46) and y_min == pytest.approx(1 / 137)


def test_roc_of_a_one_sample_request_has_a_real_axis():
    """One member (a one-sample deletion request): the TPR axis would be the single point 1 (matplotlib warned
    'identical low and high ylims'); it starts at 0.5 instead and the plot draws without a warning."""
    import warnings

    from duck.report.plots import resolvable_min, roc_loglog_png

    roc = {"fpr": [0.0, 0.5, 1.0], "tpr": [0.0, 1.0, 1.0]}
    audits = {"unlearned": {"n_members": 1, "n_nonmembers": 46, "lira": {"roc": roc, "auc": 0.5, "auc_ci": [0.2, 0.8]}}}
    assert resolvable_min(audits) == (pytest.approx(1 / 46), 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert roc_loglog_png(audits)[:4] == b"\x89PNG"


def test_dp_counts_are_shown_rounded_and_clamped():
    from duck.pipeline.audit import display_count

    assert [display_count(v, 137) for v in (-8.7, 3.4, 3.6, 151.2)] == [0, 3, 4, 137]


def test_lira_summary_says_when_lira_had_no_power(audits: dict) -> None:
    """An original at chance makes every chance-level AUC meaningless: the sentence says so; an attackable
    original gives the unlearned model's result; without the original the sentence says the power is unknown."""
    from attacks.audit import lira_summary

    powered = lira_summary(audits)
    assert powered.startswith("LiRA: the original is attackable") and "the unlearned model: AUC" in powered
    assert "the retrained oracle: AUC" in powered
    at_chance = {**audits, "original": fake_audit("original", 0.0, 4)}
    assert not at_chance["original"]["lira"]["separated_from_chance"]
    text = lira_summary(at_chance)
    assert text.startswith("LiRA had no power on this forget set: the original itself is not attackable")
    assert "attack.forgetting.enabled=true" in text
    assert "Read the forgetting audit's verdict instead" in lira_summary(at_chance, forgetting_ran=True)
    alone = lira_summary({"unlearned": audits["unlearned"]})
    assert "Without the original (original_ckpt=PATH)" in alone
    assert lira_summary({"original": audits["original"]}).startswith("LiRA on the original: AUC")


def test_lead_sections_open_the_report(tmp_path: Path, audits: dict) -> None:
    paths = write_report(tmp_path, summary_rows=[{"model": "original", "A_t": 0.9}], audits=audits, config={},
                         scenario=None, lead_sections=[("Verdict", "**Verdict: forgotten.** because")],
                         extra_sections=[("Later", "text")])
    md = paths["md"].read_text()
    assert md.index("**Verdict: forgotten.**") < md.index("Membership inference: members") \
        < md.index("## Accuracy and AUS") < md.index("## Later")


def test_page_template_escapes_every_user_text_and_inlines_its_style() -> None:
    """report.html comes from the Jinja2 template (autoescaped): headings, paragraphs, table cells, image alt
    texts and code from users are shown, never interpreted; Markdown's raw HTML is escaped by markdown-it-py."""
    from html.parser import HTMLParser

    from duck.report.document import Code, Heading, Image, Markdown, Paragraph, Table, to_html

    evil = '<script>alert("x")</script>'
    page = to_html([Heading(evil, 1), Paragraph(evil), Table([evil], [[evil, 1.5]]), Image("p.png", b"\x89PNG", evil),
                    Code(evil), Markdown(f"**bold** {evil}")], title=evil)

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.tags: list[str] = []

        def handle_starttag(self, tag: str, attrs: list) -> None:
            self.tags.append(tag)

    parser = Tags()
    parser.feed(page)
    assert "script" not in parser.tags and page.count("&lt;script&gt;") == 8  # title, h1, p, th, td, alt, pre, md
    assert page.count('alt="&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;"') == 1
    assert "<strong>bold</strong>" in page and "<td>1.5</td>" in page
    assert "border-collapse:collapse" in page and 'src="data:image/png;base64,iVBORw=="' in page
