"""Mutation testing of the algorithm files with mutmut 3 (issue 39): `make mutation [FILE=path]`, `make mutation-smoke`.

For each file of mutation/targets.toml, one after the other:

1. a work directory ``mutation/work/<file>/`` (git-ignored) gets links to the packages, ``conf/`` and ``tests/`` and a
   copy of pyproject.toml whose ``[tool.mutmut]`` table names this file alone (``only_mutate``) and its own test files
   (``pytest_add_cli_args_test_selection``); mutmut copies the tree into ``mutants/`` there and mutates the copy, so
   the checkout is never touched (``duck/conf``, a link, is recreated inside the copy so that Hydra's configs
   resolve);
2. ``nice -n 10 mutmut run`` runs every mutant of the file (or, with ``--smoke``, the fixed sample of
   targets.toml) against those test files only, ``-x -m "not slow"``, each mutant under mutmut's CPU-time and
   wall-clock limits (``timeout_*`` in ``[tool.mutmut]``);
3. the results are summarised in ``mutation/summary.md`` (one row per file, kept between runs) and the survivors'
   diffs in ``mutation/survivors/<file>.txt``; mutants listed in mutation/equivalent.toml (each with its reason) do
   not count, and an entry whose mutated line no longer matches is reported as stale, not silently applied.

``--survivors`` reruns only the mutants that survived the last run of that file (after new tests): mutmut
reruns mutants named explicitly. ``--resume`` keeps the last run's results and runs the mutants it did not reach
(a run stopped half-way).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "mutation"
WORK = HERE / "work"
LINKED = ["duck", "attacks", "baselines", "benchmarks", "conf", "docs", "tests"]  # what the tests import or read
PACKAGES = ["duck", "attacks", "baselines", "benchmarks"]  # mutmut's source_paths: copied into mutants/

# mutmut's exit codes (mutmut.stats.status_by_exit_code), grouped the way the summary counts them
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 34: "skipped", 36: "timeout",
          -24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", -11: "crashed", -9: "crashed",
          37: "killed", None: "not checked"}


def slug(file: str) -> str:
    return file.replace("/", "__").removesuffix(".py")


def module_of(file: str) -> str:
    return file.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def load_targets() -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    data = tomllib.loads((HERE / "targets.toml").read_text())
    return data["targets"], data.get("smoke", {})


def load_equivalents() -> dict[str, dict[str, dict[str, str]]]:
    """{file: {mutant name: {"line": mutated line, "reason": why}}} from mutation/equivalent.toml."""
    path = HERE / "equivalent.toml"
    out: dict[str, dict[str, dict[str, str]]] = {}
    if not path.exists():
        return out
    for entry in tomllib.loads(path.read_text()).get("equivalent", []):
        missing = {"file", "mutant", "line", "reason"} - set(entry)
        if missing:
            raise SystemExit(f"mutation/equivalent.toml: entry {entry} lacks {sorted(missing)}")
        out.setdefault(entry["file"], {})[entry["mutant"]] = {"line": entry["line"], "reason": entry["reason"]}
    return out


# An equivalent entry whose reason says it differs only on a GPU: equivalent on this CPU-only machine, not in general.
# The summary's last column counts these as survivors, so a score never rests on a claim no test here can check.
DEVICE_ONLY = re.compile(r"cuda|cpu-only", re.IGNORECASE)


def device_only(reason: str) -> bool:
    """Whether an equivalent entry's reason makes it equivalent on a CPU-only machine only (it names CUDA)."""
    return DEVICE_ONLY.search(reason) is not None


def scores(counts: dict[str, int]) -> tuple[float, float]:
    """(score, the score with the CUDA-only equivalents counted as survivors): (killed + timeout) / considered."""
    killed = counts["killed"] + counts["timeout"]
    considered = killed + counts["survived"] + counts["no tests"] + counts["other"]
    worst = considered + counts.get("cuda-only", 0)
    return (killed / considered if considered else float("nan"), killed / worst if worst else float("nan"))


def toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r} as TOML")


def project_pyproject_for(file: str, tests: list[str]) -> str:
    """The project's pyproject.toml with its [tool.mutmut] table narrowed to `file` and `tests`."""
    text = (ROOT / "pyproject.toml").read_text()
    conf = dict(tomllib.loads(text).get("tool", {}).get("mutmut", {}))
    conf.update(source_paths=PACKAGES, only_mutate=[file], also_copy=["conf", "docs"],
                pytest_add_cli_args_test_selection=list(tests))
    # drop the project's own [tool.mutmut] table (up to the next table header) and write the narrowed one
    lines, out, skipping = text.splitlines(), [], False
    for line in lines:
        if line.strip().startswith("["):
            skipping = line.strip() == "[tool.mutmut]"
        if not skipping:
            out.append(line)
    out += ["", "[tool.mutmut]"] + [f"{k} = {toml_value(v)}" for k, v in conf.items()]
    return "\n".join(out) + "\n"


def prepare(file: str, tests: list[str], fresh: bool, smoke: bool = False) -> Path:
    wd = WORK / (slug(file) + (".smoke" if smoke else ""))  # a smoke run keeps the full run's results
    if fresh and wd.exists():
        shutil.rmtree(wd)
    wd.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        link = wd / name
        if not link.is_symlink():
            link.symlink_to(ROOT / name)
    (wd / "pyproject.toml").write_text(project_pyproject_for(file, tests))
    # duck/conf is a link to ../conf in the checkout; os.walk does not follow it, so mutmut's copy lacks it
    conf_link = wd / "mutants" / "duck" / "conf"
    conf_link.parent.mkdir(parents=True, exist_ok=True)
    if not conf_link.is_symlink():
        conf_link.symlink_to(Path("..") / "conf")
    return wd


def meta(wd: Path, file: str) -> dict[str, int | None]:
    path = wd / "mutants" / (file + ".meta")
    if not path.exists():
        return {}
    return json.loads(path.read_text())["exit_code_by_key"]


def diff_of(wd: Path, file: str, name: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    cwd = os.getcwd()
    os.chdir(wd)
    try:
        return get_diff_for_mutant(name, path=file)
    except Exception as e:  # a mutant mutmut cannot show: say so, keep summarising
        return f"(no diff: {type(e).__name__}: {e})"
    finally:
        os.chdir(cwd)


def mutated_lines(diff: str) -> list[str]:
    """The lines a mutant adds; for a mutant that only deletes (an argument line dropped), ``deleted: LINE``."""
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    return added or [f"deleted: {line[1:].strip()}" for line in diff.splitlines()
                     if line.startswith("-") and not line.startswith("---")]


def not_mutated(file: str) -> list[str]:
    """What mutmut 3 does not mutate, listed in the summary so that the score is read with it in mind: decorated
    functions other than @staticmethod / @classmethod (mutmut skips them, see its file_mutation.py) and numbers
    outside functions (module constants, class attributes: mutmut mutates function bodies only)."""
    tree = ast.parse((ROOT / file).read_text())
    out = []
    for node in [*tree.body, *(n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body)]:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None and any(
                isinstance(n, ast.Constant) and type(n.value) in (int, float) for n in ast.walk(node.value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out.append(f"{', '.join(ast.unparse(t) for t in targets)} = {ast.unparse(node.value)} (constant)")

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                decos = [ast.unparse(d) for d in child.decorator_list]
                if decos and not (len(decos) == 1 and decos[0] in ("staticmethod", "classmethod")):
                    out.append(f"{prefix}{child.name} (@{', @'.join(decos)})")

    visit(tree, "")
    return out


def summarise(file: str, wd: Path, equivalents: dict[str, dict[str, str]], seconds: float, smoke: bool) -> dict:
    codes = meta(wd, file)
    if smoke:
        patterns = [f"{module_of(file)}.x_{fn}__mutmut_*" for fn in load_targets()[1].get(file, [])]
        import fnmatch

        codes = {k: v for k, v in codes.items() if any(fnmatch.fnmatch(k, p) for p in patterns)}
    counts = {s: 0 for s in ("killed", "timeout", "survived", "no tests", "equivalent", "cuda-only", "stale",
                             "not checked", "other")}
    survivors, stale = [], []
    for name, code in sorted(codes.items(), key=lambda kv: (kv[0].rsplit("__mutmut_", 1)[0],
                                                            int(kv[0].rsplit("_", 1)[1]))):
        status = STATUS.get(code, "other")
        eq = equivalents.get(name)
        if status in ("survived", "no tests") and eq is not None:
            diff = diff_of(wd, file, name)
            if eq["line"].strip() in mutated_lines(diff):
                counts["equivalent"] += 1
                counts["cuda-only"] += device_only(eq["reason"])
                continue
            stale.append(name)  # listed, but the mutant is another one now: examine it again
        if status in ("survived", "no tests"):
            survivors.append((name, status, diff_of(wd, file, name)))
        counts[status if status in counts else "other"] += 1
    counts["stale"] = len(stale)
    score = scores(counts)[0]
    text = [f"# {file}: {len(survivors)} mutants not killed by {', '.join(load_targets()[0][file])}", ""]
    for name, status, diff in survivors:
        text += [f"## {name} ({status}{', STALE equivalent entry' if name in stale else ''})", diff, ""]
    # a smoke run (CI) writes nothing into the checkout but its work directory
    out = wd / "survivors.txt" if smoke else HERE / "survivors" / f"{slug(file)}.txt"
    out.parent.mkdir(exist_ok=True)
    out.write_text("\n".join(text))
    return {"file": file, "total": len(codes), **counts, "score": score, "seconds": round(seconds),
            "date": _dt.date.today().isoformat(), "smoke": smoke, "not_mutated": not_mutated(file)}


def write_summary(rows: list[dict]) -> None:
    """mutation/summary.json keeps every file's latest row; summary.md is written from it."""
    js = HERE / "summary.json"
    table = json.loads(js.read_text()) if js.exists() else {}
    for r in rows:
        table[r["file"] + (" (smoke)" if r["smoke"] else "")] = r
    js.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    md = ["# Mutation testing: latest result per file", "",
          "Written by `make mutation` (mutation/mutate.py, mutmut 3). score = (killed + timeout) / (every mutant "
          "but the listed equivalents); `no tests`: the file's own tests never reach the mutated function. "
          "CUDA-only: equivalents whose reason says they differ only on a GPU (equivalent on this CPU-only machine, "
          "not in general); the last column counts them as survivors. Survivors' diffs: mutation/survivors/.", "",
          "| file | mutants | killed | timeout | survived | no tests | equivalent | CUDA-only | score | run | date "
          "| score, CUDA-only as survived |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    listed = load_equivalents()
    for key in sorted(table):
        r = table[key]
        partial = f" (stopped: {r['not checked']} not run)" if r.get("not checked") else ""
        run = f"{r['seconds']} s" if r["seconds"] else "–"
        if "cuda-only" not in r:  # a row written before the column: bound it by the entries listed for the file
            cuda = sum(device_only(e["reason"]) for e in listed.get(r["file"], {}).values())
            r = {**r, "cuda-only": min(cuda, r["equivalent"])}
        worst = scores(r)[1]
        md.append(f"| `{key}` | {r['total']} | {r['killed']} | {r['timeout']} | {r['survived']} | {r['no tests']} | "
                  f"{r['equivalent']} | {r['cuda-only']} | {100 * r['score']:.1f} %{partial} | {run} | {r['date']} | "
                  f"{100 * worst:.1f} % |")
    notes = [(k, r["not_mutated"]) for k, r in sorted(table.items()) if r.get("not_mutated") and not r["smoke"]]
    if notes:
        md += ["", "Not mutated (mutmut 3 mutates function bodies only, and skips functions decorated other than "
                   "@staticmethod / @classmethod):", ""]
        md += [f"- `{k}`: {', '.join(v)}" for k, v in notes]
    stale = [(k, r["stale"]) for k, r in sorted(table.items()) if r.get("stale")]
    if stale:
        md += ["", "Stale entries in mutation/equivalent.toml (the mutant's line changed; examine them again):", ""]
        md += [f"- `{k}`: {n}" for k, n in stale]
    (HERE / "summary.md").write_text("\n".join(md) + "\n")


def mutmut_bin() -> str:
    exe = Path(sys.executable).parent / "mutmut"
    if not exe.exists():
        raise SystemExit(f"mutmut is not installed in {sys.prefix}: `make install` (the dev extra) installs it")
    return str(exe)


def refuse(message: str) -> NoReturn:
    """One ``error:`` line on stderr and exit status 2 (bad input: the project's convention)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def run_file(file: str, tests: list[str], *, smoke_functions: list[str] | None, survivors_only: bool, jobs: int,
             fresh: bool, equivalents: dict) -> dict:
    if survivors_only and not (WORK / slug(file)).exists():  # refuse before creating anything
        refuse(f"{file}: no earlier run in {(WORK / slug(file)).relative_to(ROOT)} on this machine: run "
               "`make mutation FILE=...` without SURVIVORS=1")
    wd = prepare(file, tests, fresh=fresh, smoke=smoke_functions is not None)
    names: list[str] = []
    if smoke_functions is not None:
        names = [f"{module_of(file)}.x_{fn}__mutmut_*" for fn in smoke_functions]
    elif survivors_only:
        names = [k for k, v in meta(wd, file).items() if STATUS.get(v) in ("survived", "no tests")]
        if not names:
            # never an empty list: mutmut would run every mutant, and a fresh machine has no results to rerun
            refuse(f"{file}: no survivors to rerun in {wd.relative_to(ROOT)} (none survived, or the file was never "
                   "run on this machine): run `make mutation FILE=...` without SURVIVORS=1")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the mutated copy, never the checkout
    env.setdefault("MPLBACKEND", "Agg")
    # tests/conftest.py: models trained by session fixtures, built once by the unmutated code, loaded by each mutant
    env["DUCK_MUTATION_FIXTURE_CACHE"] = str(wd / "fixture-cache")
    cmd = ["nice", "-n", "10", mutmut_bin(), "run", "--max-children", str(jobs), *names]
    print(f"== {file}: {' '.join(tests)} ({wd.relative_to(ROOT)})", flush=True)
    t0 = time.time()
    with open(wd / "run.log", "w") as log:
        rc = subprocess.call(cmd, cwd=wd, env=env, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.time() - t0
    if rc != 0:
        tail = (wd / "run.log").read_text(errors="replace")[-3000:]
        raise SystemExit(f"mutmut failed on {file} (exit {rc}); the end of {wd / 'run.log'}:\n{tail}")
    row = summarise(file, wd, equivalents.get(file, {}), seconds, smoke=smoke_functions is not None)
    print(f"   {row['total']} mutants: {row['killed']} killed, {row['timeout']} timeout, {row['survived']} survived, "
          f"{row['no tests']} no tests, {row['equivalent']} equivalent -> {100 * row['score']:.1f} % "
          f"in {row['seconds']} s", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="algorithm files (paths as in mutation/targets.toml); default: all")
    p.add_argument("--smoke", action="store_true", help="the fixed sample of targets.toml's [smoke] table")
    p.add_argument("--survivors", action="store_true", help="rerun only the last run's survivors")
    p.add_argument("--resume", action="store_true",
                   help="keep the last run's results and run only the mutants it did not reach (a stopped run)")
    p.add_argument("--summary-only", action="store_true", help="summarise the last run of the files, run nothing")
    p.add_argument("--jobs", type=int, default=int(os.environ.get("MUTATION_JOBS", "1")))
    a = p.parse_args(argv)
    targets, smoke = load_targets()
    files = list(smoke) if a.smoke and not a.files else (a.files or list(targets))
    unknown = [f for f in files if f not in targets]
    if unknown:
        raise SystemExit(f"not in mutation/targets.toml: {unknown}; known: {sorted(targets)}")
    equivalents = load_equivalents()
    rows = []
    if a.summary_only:  # re-count the last run (equivalents changed); its run time is the row's it replaces
        js = HERE / "summary.json"
        before = json.loads(js.read_text()) if js.exists() else {}
        for f in files:
            wd = WORK / slug(f)
            if meta(wd, f):
                rows.append(summarise(f, wd, equivalents.get(f, {}), before.get(f, {}).get("seconds", 0.0),
                                      smoke=False))
        write_summary(rows)
        return 0
    for f in files:
        rows.append(run_file(f, targets[f], smoke_functions=smoke.get(f, []) if a.smoke else None,
                             survivors_only=a.survivors, jobs=a.jobs, fresh=not (a.survivors or a.resume),
                             equivalents=equivalents))
        if not a.smoke:
            write_summary(rows[-1:])
    if a.smoke:  # the sample is fixed and fully killed: any survivor is a test that stopped stating a property
        bad = [r for r in rows if r["survived"] + r["no tests"] + r["other"] + r["stale"]]
        for r in bad:
            print(f"mutation-smoke: {r['file']}: mutants not killed, see {WORK / (slug(r['file']) + '.smoke')}/"
                  "survivors.txt", file=sys.stderr)
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
