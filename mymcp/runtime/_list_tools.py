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


def list_tools_handler(version: str, names: Sequence[str]) -> ToolHandler:
    """A handler that reports the surface it was built over; the runtime never changes."""
    frozen = tuple(names)
    summary = f"Server: {SERVER_NAME} {version}. Available tools: {', '.join(frozen)}"
    payload = {"summary": summary, "server": SERVER_NAME, "version": version, "tools": frozen}

    async def handle(arguments: dict[str, Any]) -> dict[str, Any]:
        return structured_result({**payload, "tools": list(frozen)})

    return handle
