"""Which MCP protocol revisions this server speaks, and which era a request belongs to.

Two eras share the one endpoint. The handshake era (2025-11-25 and earlier) opens with
`initialize` and keeps a session; the stateless era (2026-07-28) carries its protocol
version, client capabilities and client identity in every request's `_meta`, and on
HTTP mirrors the version in the `MCP-Protocol-Version` header. The header therefore
picks the era per request, the way the official SDK's server does it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = [
    "ADVERTISED_VERSIONS",
    "HANDSHAKE_ERA_VERSIONS",
    "LATEST_PROTOCOL_VERSION",
    "MODERN_PROTOCOL_VERSIONS",
    "NEGOTIABLE_VERSIONS",
    "URL_ELICITATION_VERSIONS",
    "is_modern_request",
    "negotiate_version",
]

LATEST_PROTOCOL_VERSION: Final = "2025-11-25"
"""The newest handshake-era revision: what `initialize` answers by default."""
# Revisions we echo when a client asks for them at `initialize`; same wire as the latest.
NEGOTIABLE_VERSIONS: Final = frozenset({"2025-11-25", "2025-06-18"})
# Every revision that opens with `initialize`: a request naming one of these (or none)
# belongs to the handshake era.
HANDSHAKE_ERA_VERSIONS: Final = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
# Handshake revisions with URL-mode elicitation (and its error -32042). A client of an
# older one cannot mean it, whatever its capabilities say, so it is answered as a client
# without it: with the tool result that carries the approval link.
URL_ELICITATION_VERSIONS: Final = frozenset({"2025-11-25"})
MODERN_PROTOCOL_VERSIONS: Final = ("2026-07-28",)
"""Stateless revisions served per request, oldest first."""
ADVERTISED_VERSIONS: Final = ("2026-07-28", "2025-11-25", "2025-06-18")
"""What `server/discover` and an unsupported-version error list. The handshake versions
are included because this server really serves them (through `initialize`): a dual-era
client that shares no stateless revision with us then falls back to the handshake
instead of giving up. SDK clients adopt a listed stateless revision when they have one."""


def negotiate_version(requested: object) -> str:
    """Echo a version we speak; answer anything else with the latest (not an error)."""
    if isinstance(requested, str) and requested in NEGOTIABLE_VERSIONS:
        return requested
    return LATEST_PROTOCOL_VERSION


def is_modern_request(version_headers: Sequence[str], *, has_session: bool) -> bool:
    """Whether an HTTP request with these `MCP-Protocol-Version` values is stateless-era.

    No header, or exactly one naming a handshake revision, is the handshake era. Any
    other value is the stateless era, which answers an unknown revision with the list of
    those it serves — except inside a handshake session (the request carries a session
    id and names no stateless revision): that is a handshake client sending a bad
    header, and its session's rules answer it.
    """
    if not version_headers:
        return False
    if len(version_headers) == 1 and version_headers[0] in HANDSHAKE_ERA_VERSIONS:
        return False
    return not has_session or any(v in MODERN_PROTOCOL_VERSIONS for v in version_headers)
