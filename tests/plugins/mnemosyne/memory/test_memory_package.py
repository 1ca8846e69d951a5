"""The memory package has one public face, its ``__all__``, and a small, layered shape.

Modules inside it have plain names and import one another, each only those listed before
it in the package docstring. Code outside the package (the plugin adapter, settings,
commands, benchmarks) imports only names the package exports; every exported name is
used by some code outside it; and the package stays within twelve modules and
thirty-nine import edges, counted by ``scripts/import_graph.py``.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import types
from collections.abc import Iterator
from pathlib import Path

import mymcp.plugins.mnemosyne.memory as memory

REPO = Path(__file__).resolve().parents[4]
PACKAGE = "mymcp.plugins.mnemosyne.memory"
DIRECTORY = REPO / "mymcp" / "plugins" / "mnemosyne" / "memory"
# The dependency order the package docstring states: each module imports only earlier ones.
LAYERS = (
    "model",
    "policy",
    "records",
    "store",
    "watch",
    "analysis",
    "search",
    "snapshot",
    "index",
    "tools",
    "reads",
    "writes",
)


def _modules() -> list[types.ModuleType]:
    return [
        importlib.import_module(f"{PACKAGE}.{info.name}")
        for info in pkgutil.iter_modules(memory.__path__)
    ]


def _outside(*folders: str) -> Iterator[Path]:
    for folder in folders:
        for path in (REPO / folder).rglob("*.py"):
            if DIRECTORY not in path.parents:
                yield path


def _imported_from_package(path: Path) -> Iterator[tuple[str, str]]:
    """(imported name, module) for every ``from PACKAGE... import name`` in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            for alias in node.names:
                yield alias.name, node.module
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    yield "", alias.name


def test_every_exported_name_exists_and_is_unique() -> None:
    assert len(memory.__all__) == len(set(memory.__all__))
    for name in memory.__all__:
        assert hasattr(memory, name), name


def test_everything_public_in_the_package_is_exported() -> None:
    public = {
        name
        for name, value in vars(memory).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(memory.__all__)


def test_a_module_offers_nothing_the_package_does_not_export() -> None:
    for module in _modules():
        declared = getattr(module, "__all__", None)
        if declared is not None:
            assert set(declared) <= set(memory.__all__), module.__name__


def test_code_outside_the_package_imports_only_exported_names() -> None:
    files = list(_outside("mymcp", "bench", "scripts"))
    assert files
    for path in files:
        for name, module in _imported_from_package(path):
            assert module == PACKAGE, (path, module)  # never a module inside it
            assert name in memory.__all__, (path, name)


def test_every_exported_name_is_used_outside_the_package() -> None:
    used = {
        name
        for path in _outside("mymcp", "bench", "scripts", "tests")
        for name, module in _imported_from_package(path)
        if module == PACKAGE
    }
    assert set(memory.__all__) - used == set()


def _import_graph() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(
        "import_graph", REPO / "scripts" / "import_graph.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_package_has_at_most_twelve_modules_and_thirty_nine_import_edges() -> None:
    edges: dict[str, set[str]] = _import_graph().graph(DIRECTORY)
    modules = set(edges) - {"__init__"}
    assert len(modules) <= 12, sorted(modules)
    between = sum(len(targets - {"__init__"}) for name, targets in edges.items() if name in modules)
    assert between + len(edges["__init__"]) <= 39


def test_each_module_imports_only_modules_listed_before_it() -> None:
    edges: dict[str, set[str]] = _import_graph().graph(DIRECTORY)
    assert set(edges) - {"__init__"} == set(LAYERS)
    for name in LAYERS:
        earlier = set(LAYERS[: LAYERS.index(name)])
        assert edges[name] <= earlier, (name, edges[name] - earlier)
    assert all(module in memory.__doc__ for module in LAYERS)  # type: ignore[operator]
