"""``duck-audit margins=FILE.npz``: the forgetting verdict (:mod:`attacks.equivalence`) from φ arrays computed
anywhere — on another machine, by another tool — without training or loading any model.

The file (docs/formats.md): ``unlearned`` (N runs of the method from one original), ``retrained`` (the bank of
R models retrained without the forget set), ``retrain_control`` (N more retrained models) and
``none_control`` (N models trained with the forget set), each ``(models, forget examples)``; optionally the
per-model retain and test accuracies of the unlearned and the retrained models (the utility ratios). The options
are ``attack.forgetting``'s (margin, ci_level, replicates, calibration_examples, max_utility_loss, seed).
Writes ``audit.json`` (the verdict record under ``forgetting``), ``report.md`` and ``report.html``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attacks.audit import ForgettingSettings
from attacks.equivalence import accuracies_of, forgetting_verdict, read_margins
from duck.errors import DuckInputError
from duck.io import atomic_save_json, atomic_write_text
from duck.pipeline.audit import margins_markdown


def audit_margins(cfg: Any, out: Path) -> dict[str, Any]:
    """The verdict of the margins file ``cfg.margins`` into ``out`` (module docstring)."""
    from omegaconf import OmegaConf

    from duck.report.document import Markdown, to_html

    if not OmegaConf.is_missing(cfg, "ckpt") and cfg.get("ckpt") is not None:
        raise DuckInputError(f"ckpt={cfg.ckpt} and margins={cfg.margins} given: margins= audits margin arrays without "
                             "any model; drop one")
    attack = cfg.get("attack") or {}
    opts = ForgettingSettings.parse(OmegaConf.to_container(attack.get("forgetting"), resolve=True)
                                    if attack.get("forgetting") is not None else None)
    arrays = read_margins(cfg.margins)
    record = forgetting_verdict(arrays["unlearned"], arrays["retrained"], arrays["retrain_control"],
                                arrays["none_control"], margin=opts["margin"], level=opts["ci_level"],
                                replicates=opts["replicates"], seed=opts["seed"],
                                max_examples=opts["calibration_examples"], accuracies=accuracies_of(arrays),
                                max_utility_loss=opts["max_utility_loss"])
    record["method"] = str(cfg.get("method_name") or "method")
    audit = {"target": "margins", "margins": str(Path(str(cfg.margins)).expanduser().resolve()),
             "verdict": record["verdict"], "verdict_rule": record["rule"], "forgetting": record}
    text = margins_markdown(record, audit["margins"])
    out.mkdir(parents=True, exist_ok=True)
    atomic_save_json(out / "audit.json", audit)
    atomic_write_text(out / "report.md", text)
    atomic_write_text(out / "report.html", to_html([Markdown(text)], "duck-audit: forgetting verdict from margins"))
    print(f"forgetting verdict from {audit['margins']} (N = {record['n_unlearned']}, R = {record['n_retrained']}, "
          f"{record['n_examples']} forget examples): {record['verdict']}: {record['rule']}")
    print(f"wrote {out / 'audit.json'}\nreport: {out / 'report.html'}")
    return audit
