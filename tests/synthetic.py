"""Synthetic plugin contributions for host tests (no Mnemosyne, no files)."""

from __future__ import annotations

import threading
from typing import Any

from mymcp.plugin import (
    ActivatedTool,
    Consent,
    PluginContribution,
    QualifiedCapabilityId,
    ToolEffects,
    structured_result,
)

READ_ONLY = ToolEffects(read_only=True, destructive=False, idempotent=True, open_world=False)
DESTRUCTIVE = ToolEffects(read_only=False, destructive=True, idempotent=False, open_world=True)


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False}


def echo(arguments: dict[str, Any]) -> dict[str, Any]:
    return structured_result({"echo": arguments, "thread": threading.current_thread().name})


def tool(
    plugin_id: str,
    local_id: str,
    handler: Any = echo,
    *,
    effects: ToolEffects = READ_ONLY,
    consent: Consent = Consent.NONE,
    input_schema: dict[str, Any] | None = None,
    title: str | None = None,
) -> ActivatedTool:
    definition: dict[str, Any] = {
        "description": f"{local_id} from {plugin_id}",
        "inputSchema": input_schema or schema(),
    }
    if title is not None:
        definition["title"] = title
    return ActivatedTool(
        capability=QualifiedCapabilityId(plugin_id, "tool", local_id),
        tool=definition,
        handler=handler,
        effects=effects,
        consent=consent,
    )


def contribution(
    plugin_id: str, *tools: ActivatedTool, version: str = "1.0.0"
) -> PluginContribution:
    return PluginContribution(plugin_id=plugin_id, version=version, tools=tools)


def external_bindings(
    *contributions: PluginContribution,
) -> list[tuple[QualifiedCapabilityId, str]]:
    return [
        (t.capability, f"{t.capability.plugin_id}__{t.capability.local_id}")
        for c in contributions
        for t in c.tools
    ]
