"""The ASGI application: `create_app` over a built runtime, and the production factory.

Nothing here runs at import time. `create_production_app` is the supported uvicorn
factory target (`mymcp.app:create_production_app`, with `--factory`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mymcp import SERVER_NAME
from mymcp.config import HostConfiguration
from mymcp.governance import Governance
from mymcp.runtime import HostRuntime
from mymcp.transport import (
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
    per_principal_session_limit: int | None = None,
    protected_resource_metadata: Mapping[str, Any] | None = None,
    governance: Governance | None = None,
) -> HostApplication:
    """An ASGI app serving `runtime` at `/mcp`, plus `/health` and `/version` (and the
    RFC 9728 metadata when OAuth is on), all behind the same Host/Origin rule.

    Without `governance` every caller may call every tool and nothing is audited. The
    app's lifespan runs the audit's background writer and flushes it at shutdown. The
    per-principal session quota defaults to `[mcp] max_sessions_per_principal`.
    """
    config = configuration or HostConfiguration()
    mcp = config.mcp
    sessions = SessionStore(
        limit=session_limit,
        per_principal_limit=per_principal_session_limit or mcp.max_sessions_per_principal,
        inactivity_seconds=mcp.session_inactivity_timeout_seconds,
        absolute_seconds=mcp.session_absolute_lifetime_seconds,
    )
    options = TransportOptions.for_binding(
        config.server.address, config.server.port, strict=mcp.strict_protocol_version
    )
    endpoint = McpEndpoint(runtime, authenticator, sessions, options, governance)
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
    audit = governance.audit if governance is not None else None
    return HostApplication(
        endpoint,
        options,
        documents,
        on_startup=() if audit is None else (audit.start,),
        on_shutdown=() if audit is None else (audit.close,),
    )


def create_host_app(host: Host) -> HostApplication:
    """The app for a host built by `build_host()`."""
    return create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        protected_resource_metadata=host.authenticator.protected_resource_metadata,
        governance=host.governance,
    )


def create_production_app() -> HostApplication:
    """Load the host configuration, build the runtime and authentication, and serve them."""
    from mymcp.runtime.bootstrap import build_host

    return create_host_app(build_host())
