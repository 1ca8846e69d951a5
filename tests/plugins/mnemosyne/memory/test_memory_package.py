"""The memory package has one public face: its ``__all__``.

Modules inside it have plain names and may import one another freely, but code outside
the package (the plugin adapter, settings, benchmarks) imports only from the package
itself, and everything the package offers is listed in its ``__all__``.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import types
from pathlib import Path

import mymcp.plugins.mnemosyne.memory as memory

REPO = Path(__file__).resolve().parents[4]
PACKAGE = "mymcp.plugins.mnemosyne.memory"


def _modules() -> list[types.ModuleType]:
    return [
        importlib.import_module(f"{PACKAGE}.{info.name}")
        for info in pkgutil.iter_modules(memory.__path__)
    ]


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


def test_code_outside_the_package_imports_only_the_package() -> None:
    outside = [
        path
        for folder in ("mymcp", "bench")
        for path in (REPO / folder).rglob("*.py")
        if "mnemosyne/memory" not in path.as_posix()
    ]
    assert outside
    for path in outside:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                assert not node.module.startswith(PACKAGE + "."), (path, node.module)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith(PACKAGE + "."), (path, alias.name)
