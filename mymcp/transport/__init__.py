"""Streamable HTTP for MCP 2025-11-25: envelope, sessions, hygiene and dispatch."""

from mymcp.transport._dispatch import Caller, Dispatcher
from mymcp.transport._endpoint import (
    MAX_BODY_BYTES,
    McpEndpoint,
    RequestAuthenticator,
    TransportOptions,
)
from mymcp.transport._sessions import DEFAULT_SESSION_LIMIT, SessionStore
from mymcp.transport._versions import LATEST_PROTOCOL_VERSION

__all__ = [
    "DEFAULT_SESSION_LIMIT",
    "LATEST_PROTOCOL_VERSION",
    "MAX_BODY_BYTES",
    "Caller",
    "Dispatcher",
    "McpEndpoint",
    "RequestAuthenticator",
    "SessionStore",
    "TransportOptions",
]
