"""Streamable HTTP for MCP 2025-11-25: envelope, sessions, hygiene and dispatch."""

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
    DEFAULT_PER_PRINCIPAL_SESSION_LIMIT,
    DEFAULT_SESSION_LIMIT,
    SessionStore,
)
from mymcp.transport._versions import LATEST_PROTOCOL_VERSION

__all__ = [
    "DEFAULT_CONNECTION_LIMITS",
    "DEFAULT_PER_PRINCIPAL_SESSION_LIMIT",
    "DEFAULT_SESSION_LIMIT",
    "LATEST_PROTOCOL_VERSION",
    "MAX_BODY_BYTES",
    "MCP_PATH",
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
    "SessionStore",
    "TransportOptions",
]
