"""What a plugin hands the host at startup: activated tools bundled with its definition."""

from __future__ import annotations

import copy
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from mymcp.plugin._definition import Consent, PluginDefinition, ToolEffects
from mymcp.plugin._identity import QualifiedCapabilityId, is_plugin_id

__all__ = [
    "ActivatedTool",
    "PluginAdapter",
    "PluginContribution",
    "ToolHandler",
    "ToolResult",
    "structured_result",
]

ToolResult: TypeAlias = Mapping[str, Any]
"""An MCP `CallToolResult` object: `content`, optional `structuredContent` and `isError`."""

ToolHandler: TypeAlias = Callable[[dict[str, Any]], ToolResult | Awaitable[ToolResult]]
"""Takes the call's arguments object and returns an MCP result.

Synchronous handlers run on a worker thread so they never block the event loop;
coroutine functions are awaited on the loop.
"""


def structured_result(payload: Mapping[str, Any], *, is_error: bool = False) -> dict[str, Any]:
    """The usual result: the JSON object once as compact text and once as structuredContent."""
    data = dict(payload)
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": text}],
        "structuredContent": data,
    }
    if is_error:
        result["isError"] = True
    return result


@dataclass(frozen=True, slots=True)
class ActivatedTool:
    """One tool a plugin activates: its MCP definition, handler, effects and consent.

    The tool definition is deep-copied in and out, so nobody can mutate a composed
    runtime through a reference they kept. Its `name` is replaced by the host binding.
    """

    capability: QualifiedCapabilityId
    tool: Mapping[str, Any]
    handler: ToolHandler
    effects: ToolEffects
    consent: Consent
    is_async: bool = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.capability, QualifiedCapabilityId):
            raise TypeError("capability must be a QualifiedCapabilityId")
        if not isinstance(self.tool, Mapping):
            raise TypeError("tool must be a mapping")
        if not callable(self.handler):
            raise TypeError("handler must be callable")
        if not isinstance(self.effects, ToolEffects):
            raise TypeError("effects must be ToolEffects")
        if not isinstance(self.consent, Consent):
            raise TypeError("consent must be a Consent")
        try:
            tool = copy.deepcopy(dict(self.tool))
        except RecursionError:
            # Say what is wrong with the definition, not where Python ran out of stack.
            raise ValueError("the tool definition nests too deeply to be copied") from None
        object.__setattr__(self, "tool", tool)
        object.__setattr__(self, "is_async", _is_async(self.handler))

    def definition(self) -> dict[str, Any]:
        """A fresh deep copy of the MCP tool definition."""
        return copy.deepcopy(dict(self.tool))


@dataclass(frozen=True, slots=True)
class PluginContribution:
    """The gate-selected tools of one plugin, in declaration order."""

    plugin_id: str
    version: str
    tools: tuple[ActivatedTool, ...]

    def __post_init__(self) -> None:
        if not is_plugin_id(self.plugin_id):
            raise ValueError("invalid plugin id")
        if not isinstance(self.version, str):
            raise TypeError("version must be a string")
        object.__setattr__(self, "tools", tuple(self.tools))
        for tool in self.tools:
            if not isinstance(tool, ActivatedTool):
                raise TypeError("tools must be ActivatedTool values")


@dataclass(frozen=True, slots=True)
class PluginAdapter:
    """What `mymcp_plugin_v1()` returns: the definition paired with its contribution."""

    definition: PluginDefinition
    contribution: PluginContribution

    def __post_init__(self) -> None:
        if not isinstance(self.definition, PluginDefinition):
            raise TypeError("definition must be a PluginDefinition")
        if not isinstance(self.contribution, PluginContribution):
            raise TypeError("contribution must be a PluginContribution")


def _is_async(handler: object) -> bool:
    """Whether calling `handler` gives a coroutine to await: an `async def` function (or a
    `functools.partial` of one), or an object whose `__call__` is one."""
    while isinstance(handler, functools.partial):
        handler = handler.func
    if inspect.iscoroutinefunction(handler):
        return True
    call = getattr(handler, "__call__", None)  # noqa: B004 - the method itself is wanted
    return not inspect.isroutine(handler) and inspect.iscoroutinefunction(call)
