"""The table at the end of a ``duck-run -m`` sweep (DESIGN.md §1: methods × forget classes × seeds, mean ± std).

Every job of a ``duck-run`` sweep writes ``summary.json`` (the original, unlearned and retrained rows of its
scenario) and, with the audit, ``<model>/audit.json``. :func:`summarize_sweep` reads them from the sweep
directory and writes ``sweep_summary.md`` / ``.csv`` / ``.json`` and the page ``sweep.html``
(:mod:`duck.report.sweep_page`) there: per scenario kind and method, mean (std) over the jobs of ``A_t``, ``A_f``,
AUS (ALGORITHMS.md §2), the wall time and, where audited, the LiRA AUC and the forgetting audit's verdicts, imprint
kept, q, F and KLOM (with each job's interval in the page). The
original and retrained rows are counted once per distinct forget set and seed (a methods sweep shares them).
Jobs of different *setups* are never averaged together: a job's setup is its overrides
(``.hydra/overrides.yaml``) other than the run coordinates (method choice, seed, scenario, and settings that
do not change results such as ``progress`` or ``cache_dir``), so a sweep over ``model.width=4,32`` gets one
table per width, each with its own original and oracle; ``method.*`` overrides separate the method rows only.
Hydra calls it when a multirun ends (:class:`SweepSummary`, registered in ``conf/run.yaml``); for a sweep
whose jobs ran elsewhere (a detached SLURM array) run ``python -m duck.report.sweep SWEEP_DIR``.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

from duck.errors import DuckInputError
from duck.report.sweep_page import VERDICTS, forgetting_fields, verdict_counts, write_sweep_page
from duck.report.tables import fmt_mean_std, markdown_table, mean_std
from duck.training import PLACEMENT_TRAINER_KEYS

METRICS = ("A_t", "A_f", "AUS", "time_s", "lira_auc", "time_ratio", "imprint_kept", "F_normalised", "F", "klom_forget")
HEADERS = {"A_t": "A_t", "A_f": "A_f", "AUS": "AUS", "time_s": "time (s)", "lira_auc": "LiRA AUC",
           "time_ratio": "time / retraining", "imprint_kept": "imprint kept", "F_normalised": "q", "F": "F",
           "klom_forget": "KLOM forget"}
#: per-job fields a one-job summary row carries over (the job's intervals)
INTERVALS = ("imprint_kept_ci", "F_normalised_ci", "F_ci", "margin")
_AUDIT_DIR = {"original": "original", "retrain": "retrained"}  # the unlearned row's audit is in unlearned/
#: a summary row's ``model`` label -> the reference it is (any other label is the unlearned model)
_REFERENCE_LABELS = {"original": "original", "retrained": "retrain"}
#: the name a sweep gives the unlearned row of a method named like a reference (``method=retrain``, the control)
AS_METHOD = "{} (as the method)"


def reference_of(row: dict[str, Any]) -> str | None:
    """``"original"`` or ``"retrain"`` for a job's reference rows, None for its unlearned model, by the row's
    ``model`` label: the unlearned row of ``method=retrain`` says ``method: retrain`` too (its label is
    ``unlearned (retrain)``). Rows without a label (older summaries) go by their method."""
    if "model" in row:
        return _REFERENCE_LABELS.get(str(row["model"]))
    return str(row["method"]) if row.get("method") in _AUDIT_DIR else None


#: override keys that place a job in the protocol or change nothing it reports (not part of its setup)
COORDINATES = ("method", "seed", "scenario", "progress", "audit", "cache_dir", "reuse_cached", "threads",
               "eval_batch_size", "trainer", "sweep", "min_acc_factor", "expect_acc", "expect_acc_tol", "out_format",
               "input_check")


def job_setup(job_dir: Path) -> tuple[str, str]:
    """``(setup, reference setup)`` of a job from its ``.hydra/overrides.yaml``: the overrides that are not run
    coordinates (the keys of :data:`COORDINATES` themselves, ``scenario.*``, ``hydra.*``, placement
    ``trainer.*`` keys), sorted and joined; the reference setup (of
    the original and the oracle) leaves out ``method.*`` too. Empty for the defaults (or without the file)."""
    f = job_dir / ".hydra" / "overrides.yaml"
    try:
        import yaml

        overrides = [str(o) for o in (yaml.safe_load(f.read_text()) or [])]
    except (OSError, ValueError, ImportError):
        overrides = []
    setup, reference = [], []
    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        head, _, sub = key.partition(".")
        if head in ("hydra", "scenario", "sweep") or (not sub and head in COORDINATES):
            continue  # the method / trainer choice itself, seed, ...; method.* and trainer.* are settings
        if head == "trainer" and sub in PLACEMENT_TRAINER_KEYS:
            continue
        setup.append(o)
        if head != "method":
            reference.append(o)
    return " ".join(sorted(setup)), " ".join(sorted(reference))


def _job_rows(summary_path: Path) -> list[dict[str, Any]]:
    """The rows of one job's ``summary.json`` with its scenario, setup and, where audited, each model's LiRA
    AUC."""
    job = json.loads(summary_path.read_text())
    sc = job["scenario"]
    setup, reference = job_setup(summary_path.parent)
    retrain_s = next((r.get("time_s") for r in job["rows"] if reference_of(r) == "retrain"), None)
    names = sc.get("forget_class_names") or sc.get("forget_classes")
    forget = ",".join(map(str, names)) if names else f"{sc.get('n_forget')} samples"
    rows = []
    for r in job["rows"]:
        ref = reference_of(r)
        audit_path = summary_path.parent / (_AUDIT_DIR[ref] if ref else "unlearned") / "audit.json"
        audit = json.loads(audit_path.read_text()) if audit_path.is_file() else {}
        row = {**r, "scenario": sc.get("scenario"), "forget_hash": sc.get("forget_hash"), "forget": forget,
               "seed": sc.get("seed"), "job": summary_path.parent.name, "lira_auc": (audit.get("lira") or {}).get("auc"),
               "setup": reference if ref else setup, "method": ref or _method_name(str(r["method"]))}
        if not ref:
            if audit.get("forgetting"):  # the forgetting audit of the unlearned model: verdict, F, q, intervals
                row.update(forgetting_fields(audit["forgetting"]))
            if retrain_s and r.get("time_s") is not None:
                row["time_ratio"] = float(r["time_s"]) / float(retrain_s)
        rows.append(row)
    return rows


def _method_name(method: str) -> str:
    """The sweep's name for an unlearning method: its own, unless a reference row has it (``retrain``)."""
    return AS_METHOD.format(method) if method in _AUDIT_DIR else method


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every row of every finished job under ``sweep_dir`` (the original and retrained rows of one forget set
    and seed once)."""
    rows, seen = [], set()
    for path in sorted(sweep_dir.glob("*/summary.json")):
        for r in _job_rows(path):
            if r["method"] in _AUDIT_DIR:
                key = (r["setup"], r["scenario"], r["forget_hash"], r["seed"], r["method"])
                if key in seen:
                    continue
                seen.add(key)
            rows.append(r)
    return rows


def aggregate(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean (std) per (setup, scenario, method), the original and the oracle first. A method row's setup may
    add ``method.*`` overrides to its reference setup: it is listed under the reference setup's table."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((str(r["setup"]), str(r["scenario"]), str(r["method"])), []).append(r)
    order = {"original": 0, "retrain": 1}

    def table_of(setup: str) -> str:
        return " ".join(o for o in setup.split() if o.split("=", 1)[0].lstrip("+~").split(".", 1)[0] != "method")

    out = []
    for (setup, scenario, method), rs in sorted(
        groups.items(), key=lambda kv: (table_of(kv[0][0]), kv[0][1], order.get(kv[0][2], 2), kv[0][2], kv[0][0])
    ):
        row: dict[str, Any] = {"setup": table_of(setup), "method_overrides": " ".join(
            o for o in setup.split() if o not in table_of(setup).split()), "scenario": scenario, "method": method,
            "n": len(rs)}
        for m in METRICS:
            vals = [float(r[m]) for r in rs if r.get(m) is not None]
            if vals:
                row[m] = mean_std(vals)
        row["verdicts"] = [r["verdict"] for r in rs if r.get("verdict")]
        if len(rs) == 1:
            row.update({k: rs[0][k] for k in INTERVALS if rs[0].get(k) is not None})
        out.append(row)
    return out


#: the file a sweep job that failed with an input error leaves in its directory (the other jobs go on)
JOB_ERROR = "job_error.json"


def failed_jobs(sweep_dir: str | Path) -> list[dict[str, Any]]:
    """The jobs of a sweep that failed with an input error: ``{"job", "error", "overrides"}`` from each job
    directory's :data:`JOB_ERROR`, in job order."""
    out = []
    for path in sorted(Path(sweep_dir).glob(f"*/{JOB_ERROR}"), key=lambda p: (len(p.parent.name), p.parent.name)):
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError):
            rec = {"error": f"unreadable {path.name}"}
        out.append({"job": path.parent.name, "error": str(rec.get("error")), "overrides": rec.get("overrides", [])})
    return out


def failed_section(failed: list[dict[str, Any]]) -> str:
    """The failed jobs as a Markdown list (empty without failures)."""
    if not failed:
        return ""
    lines = [f"- job {f['job']} ({' '.join(f['overrides'])}): error: {f['error']}" for f in failed]
    return f"\n**{len(failed)} job(s) failed** (not in the tables above):\n\n" + "\n".join(lines) + "\n"


def summarize_sweep(sweep_dir: str | Path) -> dict[str, Any]:
    """Write ``sweep_summary.{md,csv,json}`` into ``sweep_dir``; returns ``{"table", "rows", "summary",
    "failed"}``. Jobs that failed with an input error are listed with their error line."""
    from duck.io import atomic_save_json, atomic_write_text

    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise DuckInputError(f"sweep directory {sweep_dir} not found; give a duck-run -m output directory")
    rows = collect(sweep_dir)
    failed = failed_jobs(sweep_dir)
    if not rows and not failed:
        raise DuckInputError(f"{sweep_dir} holds no finished duck-run job (no */summary.json)")
    summary = aggregate(rows)
    present = [m for m in METRICS if any(m in s for s in summary)]
    judged = any(s["verdicts"] for s in summary)
    tables = []
    for setup, scenario in dict.fromkeys((s["setup"], s["scenario"]) for s in summary):
        body = [[s["method"] + (f" ({s['method_overrides']})" if s["method_overrides"] else ""), s["n"],
                 *([verdict_counts(s["verdicts"]) or "—"] if judged else []),
                 *(fmt_mean_std(s[m], 2 if m == "time_s" else 3) if m in s else "—" for m in present)]
                for s in summary if (s["setup"], s["scenario"]) == (setup, scenario)]
        title = f"### {scenario}" + (f" — {setup}" if setup else "")
        headers = ["method", "jobs", *(["verdicts"] if judged else []), *(HEADERS[m] for m in present)]
        tables.append(f"{title}\n\n" + markdown_table(headers, body))
    table = (f"## Sweep {sweep_dir.name}: mean (std) over jobs\n\n" + "\n\n".join(tables)
             + "\n\nThe original and retrained rows count each distinct forget set and seed once; jobs with other "
               "settings (the overrides in a table's title) are never averaged together.\n" + failed_section(failed))
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["setup", "scenario", "method", "method_overrides", "jobs",
                     *([f"n_{v}" for v in VERDICTS] if judged else []),
                     *(f"{m}_{s}" for m in present for s in ("mean", "std"))])
    for s in summary:
        writer.writerow([s["setup"], s["scenario"], s["method"], s["method_overrides"], s["n"],
                         *([s["verdicts"].count(v) for v in VERDICTS] if judged else []),
                         *(v for m in present for v in ((round(s[m]["mean"], 6), round(s[m]["std"], 6))
                                                        if m in s else ("", "")))])
    atomic_write_text(sweep_dir / "sweep_summary.md", table)
    atomic_write_text(sweep_dir / "sweep_summary.csv", buf.getvalue())
    atomic_save_json(sweep_dir / "sweep_summary.json", {"summary": summary, "rows": rows, "failed": failed})
    page = write_sweep_page(sweep_dir / "sweep.html", f"Sweep {sweep_dir.name}", summary, rows, failed,
                            "The original and retrained rows count each distinct forget set and seed once; jobs with "
                            "other settings are never averaged together.")
    return {"table": table, "rows": rows, "summary": summary, "failed": failed, "page": page}


try:  # Hydra is a dependency; the guard keeps this module importable on its own for the table function
    from hydra.experimental.callback import Callback as _HydraCallback
except ImportError:  # pragma: no cover
    _HydraCallback = object  # type: ignore[assignment,misc]


#: the jobs of the last multirun of this process that failed (set when it ends, read by the entry point to
#: exit non-zero after the other jobs finished)
LAST_FAILED: list[dict[str, Any]] = []


class SweepStatus(_HydraCallback):  # type: ignore[misc,valid-type]
    """Hydra callback of every command: when a multirun ends, the jobs that failed with an input error (each
    left :data:`JOB_ERROR`; the others ran to the end) are recorded in :data:`LAST_FAILED`."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        LAST_FAILED[:] = failed_jobs(Path(str(config.hydra.sweep.dir)))


class SweepSummary(SweepStatus):
    """Hydra callback of ``duck-run``: the failed jobs, then the sweep's table when the multirun ends (the
    failed jobs are listed below it with their error line)."""

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        super().on_multirun_end(config, **kwargs)
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            out = summarize_sweep(sweep_dir)
        except DuckInputError as e:
            shards = sorted(sweep_dir.glob("*/shard.json"))
            if shards:  # a sweep of array tasks (attack.num_shards) builds banks and writes no summary
                print(f"\n{len(shards)} array task(s) built their slice of the banks ({sweep_dir}/*/shard.json); "
                      "run the same command without attack.num_shards / attack.shard to unlearn and audit: it "
                      "trains no bank model")
            else:
                print(f"warning: no sweep summary: {e}", file=sys.stderr)
            return
        print("\n" + out["table"] + f"sweep summary: {sweep_dir / 'sweep_summary.md'}; page: {out['page']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m duck.report.sweep SWEEP_DIR``: (re)write the table of a sweep whose jobs ran elsewhere."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m duck.report.sweep SWEEP_DIR", file=sys.stderr)
        return 2
    try:
        print(summarize_sweep(args[0])["table"])
    except DuckInputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
