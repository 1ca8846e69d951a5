"""Which MCP protocol revisions this server speaks, and how a requested one is answered."""

from __future__ import annotations

from typing import Final

__all__ = [
    "HANDSHAKE_ERA_VERSIONS",
    "LATEST_PROTOCOL_VERSION",
    "NEGOTIABLE_VERSIONS",
    "negotiate_version",
]

LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
# Revisions we echo when a client asks for them (D1); same wire as the latest.
NEGOTIABLE_VERSIONS: Final = frozenset({"2025-11-25", "2025-06-18"})
# Every revision that opens with `initialize`. A header naming anything else, without a
# session, is a probe from a newer (stateless) era and gets a fast 400 (D3).
HANDSHAKE_ERA_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})


def negotiate_version(requested: object) -> str:
    """Echo a version we speak; answer anything else with the latest (not an error)."""
    if isinstance(requested, str) and requested in NEGOTIABLE_VERSIONS:
        return requested
    return LATEST_PROTOCOL_VERSION
