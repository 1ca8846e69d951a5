"""The ASGI application: `create_app` over a built runtime, and the production factory.

Nothing here runs at import time. `create_production_app` is the supported uvicorn
factory target (`mymcp.app:create_production_app`, with `--factory`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mymcp import SERVER_NAME
from mymcp.config import HostConfiguration
from mymcp.runtime import HostRuntime
from mymcp.transport import (
    DEFAULT_PER_PRINCIPAL_SESSION_LIMIT,
    DEFAULT_SESSION_LIMIT,
    LATEST_PROTOCOL_VERSION,
    HostApplication,
    JsonDocument,
    McpEndpoint,
    RequestAuthenticator,
    SessionStore,
    TransportOptions,
)

if TYPE_CHECKING:
    from mymcp.runtime.bootstrap import Host

__all__ = ["PROTECTED_RESOURCE_PATH", "create_app", "create_host_app", "create_production_app"]

PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource/mcp"


def create_app(
    runtime: HostRuntime,
    *,
    authenticator: RequestAuthenticator,
    configuration: HostConfiguration | None = None,
    session_limit: int = DEFAULT_SESSION_LIMIT,
    per_principal_session_limit: int = DEFAULT_PER_PRINCIPAL_SESSION_LIMIT,
    protected_resource_metadata: Mapping[str, Any] | None = None,
) -> HostApplication:
    """An ASGI app serving `runtime` at `/mcp`, plus `/health` and `/version` (and the
    RFC 9728 metadata when OAuth is on), all behind the same Host/Origin rule."""
    config = configuration or HostConfiguration()
    mcp = config.mcp
    sessions = SessionStore(
        limit=session_limit,
        per_principal_limit=per_principal_session_limit,
        inactivity_seconds=mcp.session_inactivity_timeout_seconds,
        absolute_seconds=mcp.session_absolute_lifetime_seconds,
    )
    options = TransportOptions.for_binding(
        config.server.address, config.server.port, strict=mcp.strict_protocol_version
    )
    endpoint = McpEndpoint(runtime, authenticator, sessions, options)
    documents = {
        "/health": JsonDocument({"status": "ok"}),
        "/version": JsonDocument(
            {
                "name": SERVER_NAME,
                "version": runtime.server_version,
                "protocolVersion": LATEST_PROTOCOL_VERSION,
            }
        ),
    }
    if protected_resource_metadata is not None:
        documents[PROTECTED_RESOURCE_PATH] = JsonDocument(
            protected_resource_metadata, {"cache-control": "no-store"}
        )
    return HostApplication(endpoint, options, documents)


def create_host_app(host: Host) -> HostApplication:
    """The app for a host built by `build_host()`."""
    return create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        protected_resource_metadata=host.authenticator.protected_resource_metadata,
    )


def create_production_app() -> HostApplication:
    """Load the host configuration, build the runtime and authentication, and serve them."""
    from mymcp.runtime.bootstrap import build_host

    return create_host_app(build_host())
