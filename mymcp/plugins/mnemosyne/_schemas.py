"""The published MCP definitions (title, description, inputSchema) of the eight memory tools.

Keyed by capability local id, which is also each tool's pinned public name. The order is
the registry order of the manifest. Callers get fresh deep copies, so nobody can alter
what later calls publish. Any change to a definition must come with a new capability
version and a new entry in the test-owned contract ledger (decision D8).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

from mymcp.plugins.mnemosyne.tools._change import (
    archive_definition,
    forget_definition,
    restore_definition,
    revise_definition,
)
from mymcp.plugins.mnemosyne.tools._read import (
    inspect_definition,
    list_definition,
    recall_definition,
)
from mymcp.plugins.mnemosyne.tools._remember import remember_definition

__all__ = ["TOOL_NAMES", "tool_definition", "tool_definitions"]

_BUILDERS: Final[Mapping[str, Callable[[], dict[str, Any]]]] = MappingProxyType(
    {
        "memory_recall": recall_definition,
        "memory_list": list_definition,
        "memory_inspect": inspect_definition,
        "memory_archive": archive_definition,
        "memory_restore": restore_definition,
        "memory_remember": remember_definition,
        "memory_revise": revise_definition,
        "memory_forget": forget_definition,
    }
)
_DEFINITIONS: Final[Mapping[str, dict[str, Any]]] = MappingProxyType(
    {name: build() for name, build in _BUILDERS.items()}
)

TOOL_NAMES: Final[tuple[str, ...]] = tuple(_DEFINITIONS)
"""Every memory tool, in registry order."""


def tool_definition(name: str) -> dict[str, Any]:
    """A fresh copy of one tool's definition; KeyError for an unknown name."""
    return copy.deepcopy(_DEFINITIONS[name])


def tool_definitions() -> dict[str, dict[str, Any]]:
    """Fresh copies of every definition, in registry order."""
    return {name: tool_definition(name) for name in TOOL_NAMES}
