"""The host's own `list_tools` tool, which names the complete final tool surface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mymcp import SERVER_NAME
from mymcp.plugin import Consent, ToolEffects, ToolHandler, structured_result

__all__ = [
    "LIST_TOOLS_CONSENT",
    "LIST_TOOLS_DEFINITION",
    "LIST_TOOLS_EFFECTS",
    "LIST_TOOLS_NAME",
    "list_tools_handler",
    "list_tools_payload",
]

LIST_TOOLS_NAME = "list_tools"
LIST_TOOLS_EFFECTS = ToolEffects(
    read_only=True, destructive=False, idempotent=True, open_world=False
)
LIST_TOOLS_CONSENT = Consent.NONE
LIST_TOOLS_DEFINITION: dict[str, Any] = {
    "title": "List tools",
    "description": (
        "Name this server, its version and every tool it serves right now. "
        "Takes no arguments and changes nothing."
    ),
    "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
}


def list_tools_payload(version: str, names: Sequence[str]) -> dict[str, Any]:
    """What `list_tools` answers for a caller who may call exactly `names`."""
    summary = f"Server: {SERVER_NAME} {version}. Available tools: {', '.join(names)}"
    return {"summary": summary, "server": SERVER_NAME, "version": version, "tools": list(names)}


def list_tools_handler(version: str, names: Sequence[str]) -> ToolHandler:
    """A handler over the whole surface. The transport answers `list_tools` from the
    caller's policy view instead; this one serves callers that have no view (tests)."""
    frozen = tuple(names)

    async def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        return structured_result(list_tools_payload(version, frozen))

    return handle
