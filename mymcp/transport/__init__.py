"""MCP over Streamable HTTP (both protocol eras, chosen per request) and over stdio:
envelope, sessions, hygiene and the governed dispatch they share."""

from mymcp.transport._application import MCP_PATH, HostApplication, JsonDocument
from mymcp.transport._connections import DEFAULT_CONNECTION_LIMITS, ConnectionLimits
from mymcp.transport._dispatch import (
    OTHER_TOOL_THREADS,
    READ_ONLY_TOOL_THREADS,
    Caller,
    Dispatcher,
)
from mymcp.transport._endpoint import (
    MAX_BODY_BYTES,
    McpEndpoint,
    RequestAuthenticator,
    TransportOptions,
)
from mymcp.transport._instructions import SERVER_INSTRUCTIONS
from mymcp.transport._sessions import (
    Session,
    SessionEnd,
    SessionStore,
    audit_session_ends,
)
from mymcp.transport._stateless import StatelessEra
from mymcp.transport._stdio import MAX_LINE_BYTES, StdioServer
from mymcp.transport._versions import (
    ADVERTISED_VERSIONS,
    LATEST_PROTOCOL_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)

__all__ = [
    "ADVERTISED_VERSIONS",
    "DEFAULT_CONNECTION_LIMITS",
    "LATEST_PROTOCOL_VERSION",
    "MAX_BODY_BYTES",
    "MAX_LINE_BYTES",
    "MCP_PATH",
    "MODERN_PROTOCOL_VERSIONS",
    "OTHER_TOOL_THREADS",
    "READ_ONLY_TOOL_THREADS",
    "SERVER_INSTRUCTIONS",
    "ConnectionLimits",
    "HostApplication",
    "JsonDocument",
    "Caller",
    "Dispatcher",
    "McpEndpoint",
    "RequestAuthenticator",
    "Session",
    "SessionEnd",
    "SessionStore",
    "StatelessEra",
    "StdioServer",
    "TransportOptions",
    "audit_session_ends",
]
