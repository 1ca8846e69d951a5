"""MyMCP's packages depend on one another in one direction only, and each package's public
face (`__all__`) names what it really exports.

A cycle between packages means neither can be read, tested or replaced without the
other; the composition root (`mymcp.host`) sits above everything it composes for that
reason. Imports inside functions count too: they defer a dependency, they do not remove it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import mymcp

ROOT = Path(mymcp.__file__).parent


def _unit(module: str) -> str | None:
    """The part of MyMCP a module belongs to: a subpackage (each bundled plugin its own),
    a top-level module, or the root package itself."""
    parts = module.split(".")
    if parts[0] != "mymcp":
        return None
    if len(parts) == 1:
        return "mymcp"
    if parts[1] == "plugins" and len(parts) > 2:
        return f"plugins.{parts[2]}"
    return parts[1]


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(path: Path, root: Path) -> Iterator[str]:
    """Every module `path` imports, relative imports resolved."""
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                assert node.module is not None
                module = node.module
            else:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            yield module
            # `from mymcp import host` imports the module `mymcp.host`, not only `mymcp`.
            for alias in node.names:
                name = f"{module}.{alias.name}"
                where = root.parent.joinpath(*name.split("."))
                if where.with_suffix(".py").is_file() or (where / "__init__.py").is_file():
                    yield name


def dependencies(root: Path = ROOT) -> dict[str, dict[str, set[str]]]:
    """unit -> the units it imports -> the files that import them."""
    graph: dict[str, dict[str, set[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        source = _unit(_module_name(path, root))
        assert source is not None
        for target in map(_unit, _imported(path, root)):
            if target is not None and target != source:
                graph.setdefault(source, {}).setdefault(target, set()).add(
                    str(path.relative_to(root.parent))
                )
    return graph


def find_cycle(graph: Mapping[str, Mapping[str, object]]) -> list[str] | None:
    """One cycle of `graph` as the units along it (first repeated last), or None."""
    finished: set[str] = set()
    path: list[str] = []

    def visit(unit: str) -> list[str] | None:
        if unit in path:
            return [*path[path.index(unit) :], unit]
        if unit in finished:
            return None
        path.append(unit)
        for target in sorted(graph.get(unit, {})):
            if (cycle := visit(target)) is not None:
                return cycle
        path.pop()
        finished.add(unit)
        return None

    for unit in sorted(graph):
        if (cycle := visit(unit)) is not None:
            return cycle
    return None


def test_the_packages_depend_on_one_another_without_a_cycle() -> None:
    graph = dependencies()
    cycle = find_cycle(graph)
    if cycle is not None:
        steps = [
            f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})" for a, b in itertools.pairwise(cycle)
        ]
        pytest.fail("import cycle between MyMCP's packages:\n" + "\n".join(steps))
    # The composition root is above what it composes, and nothing composes it.
    assert {"runtime", "governance", "auth", "config"} <= set(graph["host"])
    assert all("host" not in graph.get(unit, {}) for unit in ("runtime", "governance", "auth"))


def test_a_cycle_is_found_and_named() -> None:
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}) is None


def test_dependencies_see_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    package = tmp_path / "mymcp"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from .part import x\n")
    (package / "low" / "part.py").write_text("def f():\n    from mymcp.high import y\n")
    (package / "high.py").write_text("from mymcp.low import x\n")
    (package / "other.py").write_text("def g():\n    from mymcp import high\n")
    graph = dependencies(package)
    assert set(graph["low"]) == {"high"}
    assert graph["low"]["high"] == {"mymcp/low/part.py"}
    assert find_cycle(graph) == ["high", "low", "high"]
    assert "high" in graph["other"]  # named as a member of the package, a module still


PACKAGES = [
    "mymcp.auth",
    "mymcp.config",
    "mymcp.console",
    "mymcp.governance",
    "mymcp.plugin",
    "mymcp.runtime",
    "mymcp.transport",
    "mymcp.plugins.mnemosyne",
    "mymcp.plugins.mnemosyne.memory",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_each_package_exports_what_its_public_face_names(name: str) -> None:
    package = importlib.import_module(name)
    exported = package.__all__
    assert len(exported) == len(set(exported)), "a name is listed twice"
    missing = [item for item in exported if not hasattr(package, item)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"


REPO = ROOT.parent


def test_the_modules_the_scripts_name_exist() -> None:
    # Shell scripts import MyMCP's modules by name, where no import checker looks: a
    # module moved without them breaks CI only once it runs them.
    named: set[str] = set()
    for script in (REPO / "scripts" / "conformance", REPO / ".ci" / "run"):
        named.update(re.findall(r"\bmymcp(?:\.[a-z_]+)+\b", script.read_text(encoding="utf-8")))
    assert named  # the pattern still finds what the scripts name
    missing = sorted(name for name in named if importlib.util.find_spec(name) is None)
    assert not missing, f"scripts name modules that do not exist: {missing}"
