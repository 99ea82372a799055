"""No import circle anywhere (DESIGN.md §2; issue 37 item 5), checked module by module.

import-linter's ``acyclic_siblings`` contract (pyproject.toml) looks at the children of each package, each
taken with its descendants, one package at a time. This test looks at single modules across the four
packages together, the lazy (function-level) imports included, and with the imports Python makes
implicitly: importing ``a.b.c`` from outside ``a.b`` first runs ``a/b/__init__.py``. The only imports left out
are those the contract itself ignores, so pyproject.toml is the one place an exception is written.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import tomllib

grimp = pytest.importorskip("grimp")  # installed with import-linter (the dev extra)

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("duck", "attacks", "baselines", "benchmarks")


def ignored_imports() -> list[str]:
    """The ``importer -> imported`` expressions that the ``acyclic_siblings`` contract of pyproject.toml ignores."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    acyclic = [contract for contract in contracts if contract["type"] == "acyclic_siblings"]
    assert len(acyclic) == 1, "pyproject.toml should hold one acyclic_siblings contract"
    return list(acyclic[0].get("ignore_imports", []))


def parent_packages(module: str) -> list[str]:
    """``a.b.c`` -> ``["a", "a.b"]``: the packages whose ``__init__`` runs before the module."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def add_import(graph: grimp.ImportGraph, importer: str, imported: str) -> None:
    """Add ``importer -> imported`` and the imports of ``imported``'s parent packages that it implies (those
    outside ``importer``'s own packages, whose ``__init__`` has run already)."""
    graph.add_import(importer=importer, imported=imported)
    runs_already = {importer, *parent_packages(importer)}
    for package in parent_packages(imported):
        if package not in runs_already and package in graph.modules:
            graph.add_import(importer=importer, imported=package)


def import_graph(ignore: list[str]) -> grimp.ImportGraph:
    """The import graph of the four packages without the ``ignore`` expressions, with the implicit imports of
    parent packages added (an import of ``a.b.c`` from outside ``a.b`` also imports ``a.b``)."""
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    for expression in ignore:
        matches = graph.find_matching_direct_imports(import_expression=expression)
        assert matches, f"ignore_imports entry {expression!r} matches no import: remove it from pyproject.toml"
        for match in matches:
            graph.remove_import(importer=match["importer"], imported=match["imported"])
    imports = [(importer, imported) for importer in graph.modules
               for imported in graph.find_modules_directly_imported_by(importer)]
    for importer, imported in imports:
        add_import(graph, importer, imported)
    return graph


def import_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """One shortest cycle through each import that closes one, as the chain of modules that import each other
    (the first module again at the end); each set of modules once."""
    found: dict[frozenset[str], tuple[str, ...]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is not None:
                found.setdefault(frozenset(back), (importer, *back))
    return sorted(found.values(), key=len)


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return import_graph(ignored_imports())


def test_no_module_imports_itself_back(graph: grimp.ImportGraph) -> None:
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (break them; a lazy import does not count as a break):\n" + "\n".join(
        " -> ".join(cycle) for cycle in cycles)


@pytest.mark.parametrize("importer, imported", [
    ("duck.unlearn.registry", "duck.unlearn.duck"),  # a registry importing what registers into it
    ("duck.privacy.neighbours", "duck.privacy.outliers"),
    # closed only through a package: duck.training would import duck/unlearn/__init__.py, which imports
    # duck.unlearn.base, which imports duck.training
    ("duck.training", "duck.unlearn.config"),
])
def test_a_new_cycle_is_found(graph: grimp.ImportGraph, importer: str, imported: str) -> None:
    graph = copy.deepcopy(graph)
    add_import(graph, importer, imported)
    assert any(importer in cycle for cycle in import_cycles(graph))


def _run_python(code: str, *paths: Path) -> None:
    """Run ``code`` in a fresh interpreter that finds this checkout (and ``paths`` first)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_duck_unlearn_is_callable_however_it_was_first_imported() -> None:
    """The package duck.unlearn imports nothing above it: the facade makes it callable when Python binds it,
    also when a sub-module was imported first (no attribute lookup on ``duck`` then)."""
    _run_python("import sys; import duck.unlearn.registry; from duck.unlearn import create_unlearner; "
                "import duck; assert callable(sys.modules['duck.unlearn']) and duck.unlearn is sys.modules['duck.unlearn']")


def test_a_plugin_registers_through_the_entry_point_group(tmp_path: Path) -> None:
    """The unlearner registry imports no method: the package imports its built-in ones, and other packages
    come in through the ``duck_unlearn.methods`` entry points (here a distribution found on ``sys.path``)."""
    (tmp_path / "duck_test_plugin.py").write_text(textwrap.dedent("""
        from duck.unlearn import register_unlearner
        from duck.unlearn.none import NoUnlearning


        @register_unlearner("test_plugin")
        class PluginMethod(NoUnlearning):
            pass
    """))
    dist_info = tmp_path / "duck_test_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: duck-test-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[duck_unlearn.methods]\ntest_plugin = duck_test_plugin\n")
    code = ("import sys, duck.unlearn.registry as registry; from duck.unlearn import get_unlearner_class, "
            "list_unlearners; assert 'duck_test_plugin' not in sys.modules; names = list_unlearners(); "
            "assert {'duck', 'none', 'test_plugin'} <= set(names), names; "
            "assert get_unlearner_class('test_plugin').__name__ == 'PluginMethod'")
    _run_python(code, tmp_path)
