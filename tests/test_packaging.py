"""The wheel's package list (pyproject.toml [tool.setuptools] packages) names every folder that holds code or configs.

A folder setuptools can import but does not find in the list is still installed, with a `BuildBackendWarning` of
some 40 lines per folder on every `pip install` (issue 37: ~600 lines of `make demo` before the job's first line).
"""

from __future__ import annotations

from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]


def _listed() -> tuple[set[str], dict[str, str]]:
    tool = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(tool["packages"]), tool.get("package-dir", {})


def _folders(root: Path, package: str) -> set[str]:
    found = set()
    for d in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        if "__pycache__" in d.parts or not any(f.suffix in {".py", ".yaml"} for f in d.iterdir() if f.is_file()):
            continue
        found.add(".".join([package, *d.relative_to(root).parts]))
    return found


def test_every_code_and_config_folder_is_a_listed_package():
    listed, package_dir = _listed()
    expected = set()
    for top in ("duck", "attacks", "baselines", "benchmarks"):
        expected |= _folders(REPO / top, top)
    for package, folder in package_dir.items():
        expected |= _folders(REPO / folder, package)
    expected.discard("duck.conf.__pycache__")
    assert expected == listed, f"missing: {sorted(expected - listed)}; listed but not found: {sorted(listed - expected)}"
