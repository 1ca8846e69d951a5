"""The ASGI application: `create_app` over a built runtime, and the production factory.

Nothing here runs at import time. `create_production_app` is the supported uvicorn
factory target (`mymcp.app:create_production_app`, with `--factory`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.routing import Mount, Route

from mymcp import SERVER_NAME
from mymcp.config import HostConfiguration
from mymcp.console import console_state_directory, create_console
from mymcp.errors import MyMCPError
from mymcp.governance import Governance
from mymcp.runtime import HostRuntime
from mymcp.transport import (
    DEFAULT_SESSION_LIMIT,
    LATEST_PROTOCOL_VERSION,
    Dispatcher,
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
    console_directory: Path | None = None,
    console_clock: Callable[[], float] = time.time,
    on_startup: Sequence[Callable[[], None]] = (),
    on_shutdown: Sequence[Callable[[], None]] = (),
) -> HostApplication:
    """An ASGI app serving `runtime` at `/mcp`, plus `/health`, `/version` (and the
    RFC 9728 metadata when OAuth is on) and the console at `/console/`, all behind the
    same Host/Origin rule.

    Without `governance` every caller may call every tool and nothing is audited. The
    app's lifespan runs the audit's background writer and flushes it at shutdown, after
    `on_startup` / before `on_shutdown` hooks of the caller's own. The
    per-principal session quota defaults to `[mcp] max_sessions_per_principal`. The
    console accepts the sign-in tokens `mymcp console` leaves in `console_directory`
    (default `$XDG_STATE_HOME/mymcp/console`).
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
    console = create_console(
        runtime,
        Dispatcher(runtime, governance),
        approvals=governance.approvals if governance is not None else None,
        audit=audit,
        address=config.server.address,
        port=config.server.port,
        state_directory=console_directory or _default_console_directory(),
        clock=console_clock,
    )
    # The console's own router sees only `/console` and below; the MCP endpoint never
    # passes through it. The bare `/console` goes there too, so even its redirect is guarded.
    console_routes = Starlette(routes=[Route("/console", console), Mount("/console", app=console)])
    return HostApplication(
        endpoint,
        options,
        documents,
        mounts={"/console": console_routes},
        on_startup=(*on_startup, *(() if audit is None else (audit.start,))),
        on_shutdown=(*on_shutdown, *(() if audit is None else (audit.close,))),
    )


def _default_console_directory() -> Path | None:
    """Where `mymcp console` leaves sign-in tokens; None (nobody can sign in) when the
    home directory cannot be found."""
    try:
        return console_state_directory()
    except MyMCPError:
        return None


def create_host_app(host: Host) -> HostApplication:
    """The app for a host built by `build_host()`; it starts building the memory index
    in the background when the server starts, and stops that at shutdown."""
    return create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        protected_resource_metadata=host.authenticator.protected_resource_metadata,
        governance=host.governance,
        on_startup=() if host.mnemosyne is None else (host.mnemosyne.start_index_build,),
        on_shutdown=() if host.mnemosyne is None else (host.mnemosyne.stop_index_build,),
    )


def create_production_app() -> HostApplication:
    """Load the host configuration, build the runtime and authentication, and serve them."""
    from mymcp.runtime.bootstrap import build_host

    return create_host_app(build_host())
