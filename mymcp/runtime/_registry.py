"""Bound tools and the name-indexed registry the transport dispatches through."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from mymcp.config import BUNDLED_PLUGIN_ID
from mymcp.errors import HostRuntimeCompositionError
from mymcp.plugin import Consent, QualifiedCapabilityId, ToolEffects, ToolHandler
from mymcp.runtime._schema import ArgumentsValidator, OutputValidator

__all__ = ["HOST_ORIGIN", "BoundTool", "ToolRegistry"]

HOST_ORIGIN = "host"
"""Origin of tools the host itself provides (only `list_tools`)."""


@dataclass(frozen=True, slots=True)
class BoundTool:
    """A tool under its public name, with the MCP definition the host publishes and the
    validators its input schema (and output schema, when it declares one) were compiled
    into at composition."""

    name: str
    origin: QualifiedCapabilityId | str
    definition: Mapping[str, Any]
    handler: ToolHandler
    is_async: bool
    effects: ToolEffects
    consent: Consent
    validator: ArgumentsValidator
    output: OutputValidator | None = None

    @property
    def bundled(self) -> bool:
        """Whether the bundled memory plugin publishes this tool: the host's own code,
        whose results and error codes the host vouches for."""
        origin = self.origin
        return isinstance(origin, QualifiedCapabilityId) and origin.plugin_id == BUNDLED_PLUGIN_ID

    @property
    def input_schema(self) -> Mapping[str, Any]:
        schema = self.definition.get("inputSchema")
        return schema if isinstance(schema, Mapping) else {}

    def published(self) -> dict[str, Any]:
        """A fresh copy of the definition for a `tools/list` page."""
        return copy.deepcopy(dict(self.definition))


class ToolRegistry:
    """Tools in registry order, looked up by public name; immutable once built."""

    __slots__ = ("_by_name", "_tools")

    def __init__(self, tools: tuple[BoundTool, ...]) -> None:
        by_name: dict[str, BoundTool] = {}
        for tool in tools:
            if tool.name in by_name:
                raise HostRuntimeCompositionError(
                    "duplicate_public_name", "MyMCP tool registry rejected a duplicate name"
                )
            by_name[tool.name] = tool
        self._tools = tools
        self._by_name: Mapping[str, BoundTool] = MappingProxyType(by_name)

    @property
    def tools(self) -> tuple[BoundTool, ...]:
        return self._tools

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self._tools)

    def get(self, name: str) -> BoundTool | None:
        return self._by_name.get(name)

    def __iter__(self) -> Iterator[BoundTool]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)
