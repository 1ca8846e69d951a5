"""Count the modules of a Python package and the import edges among them.

An edge is one (importing module, imported module) pair inside the package, however many
names or lines the import uses. Relative imports (``from . import x``, ``from .x import
y``) and absolute ones naming the package are both followed; subpackages count as one
module each (their ``__init__``). The package ``__init__`` is reported separately,
because it imports every module it re-exports and so adds one edge per public module.

    python scripts/import_graph.py [PACKAGE_DIR]      # default: the memory domain
    python scripts/import_graph.py --edges            # also list every edge
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent.parent / "mymcp" / "plugins" / "mnemosyne" / "memory"


def _package_name(directory: Path) -> str:
    parts = [directory.name]
    parent = directory.parent
    while (parent / "__init__.py").is_file():
        parts.append(parent.name)
        parent = parent.parent
    return ".".join(reversed(parts))


def _modules(directory: Path) -> dict[str, Path]:
    found = {path.stem: path for path in sorted(directory.glob("*.py"))}
    for child in sorted(directory.iterdir()):
        if (child / "__init__.py").is_file():
            found[child.name] = child / "__init__.py"
    return found


def _imported(tree: ast.Module, package: str, modules: set[str]) -> set[str]:
    """Sibling modules one module imports."""
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:
                base = node.module.split(".")[0] if node.module else None
            elif node.level == 0 and node.module and node.module.startswith(package):
                rest = node.module[len(package) :].lstrip(".")
                base = rest.split(".")[0] if rest else None
            else:
                continue
            if base is not None:
                targets.add(base)
            else:  # ``from . import x`` names modules directly
                targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package + "."):
                    targets.add(alias.name[len(package) + 1 :].split(".")[0])
    return targets & modules


def graph(directory: Path) -> dict[str, set[str]]:
    package = _package_name(directory)
    modules = _modules(directory)
    names = set(modules)
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges[name] = _imported(tree, package, names) - {name}
    return edges


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", nargs="?", type=Path, default=DEFAULT)
    parser.add_argument("--edges", action="store_true", help="list every edge")
    args = parser.parse_args()
    edges = graph(args.directory.resolve())
    inner = {name: targets for name, targets in edges.items() if name != "__init__"}
    init_edges = len(edges.get("__init__", ()))
    inner_edges = sum(len(targets - {"__init__"}) for targets in inner.values())
    print(f"package   {args.directory}")
    print(f"modules   {len(inner)} (+ __init__)")
    print(f"edges     {inner_edges} between modules, {inner_edges + init_edges} with __init__")
    if args.edges:
        for name in sorted(edges):
            if edges[name]:
                print(f"  {name} -> {', '.join(sorted(edges[name]))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
