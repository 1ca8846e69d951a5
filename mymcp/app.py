"""The Starlette application: `create_app` over a built runtime, and the production factory.

Nothing here runs at import time. `create_production_app` is the supported uvicorn
factory target (`mymcp.app:create_production_app`, with `--factory`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route

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
    protected_resource_metadata: Mapping[str, Any] | None = None,
    governance: Governance | None = None,
    console_directory: Path | None = None,
    console_clock: Callable[[], float] = time.time,
) -> Starlette:
    """An ASGI app serving `runtime` at `/mcp`, plus `/health`, `/version` and the
    console at `/console/`.

    Without `governance` every caller may call every tool and nothing is audited. The
    app's lifespan runs the audit's background writer and flushes it at shutdown. The
    console accepts the sign-in tokens `mymcp console` leaves in `console_directory`
    (default `$XDG_STATE_HOME/mymcp/console`).
    """
    config = configuration or HostConfiguration()
    mcp = config.mcp
    sessions = SessionStore(
        limit=session_limit,
        inactivity_seconds=mcp.session_inactivity_timeout_seconds,
        absolute_seconds=mcp.session_absolute_lifetime_seconds,
    )
    options = TransportOptions.for_binding(
        config.server.address, config.server.port, strict=mcp.strict_protocol_version
    )
    endpoint = McpEndpoint(runtime, authenticator, sessions, options, governance)
    version_body = {
        "name": SERVER_NAME,
        "version": runtime.server_version,
        "protocolVersion": LATEST_PROTOCOL_VERSION,
    }

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def version(request: Request) -> Response:
        return JSONResponse(version_body)

    routes: list[BaseRoute] = [
        Route("/mcp", endpoint=endpoint),
        Route("/health", health, methods=["GET"]),
        Route("/version", version, methods=["GET"]),
    ]
    if protected_resource_metadata is not None:
        metadata = dict(protected_resource_metadata)

        async def protected_resource(request: Request) -> Response:
            return JSONResponse(metadata, headers={"cache-control": "no-store"})

        routes.append(Route(PROTECTED_RESOURCE_PATH, protected_resource, methods=["GET"]))
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
    # After /mcp, so that the MCP endpoint is matched first and pays nothing for this.
    # The bare `/console` goes to the console too, so that even its redirect is guarded.
    routes += [Route("/console", console), Mount("/console", app=console)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if audit is not None:
            audit.start()
        try:
            yield
        finally:
            if audit is not None:
                audit.close()

    return Starlette(routes=routes, lifespan=lifespan)


def _default_console_directory() -> Path | None:
    """Where `mymcp console` leaves sign-in tokens; None (nobody can sign in) when the
    home directory cannot be found."""
    try:
        return console_state_directory()
    except MyMCPError:
        return None


def create_host_app(host: Host) -> Starlette:
    """The app for a host built by `build_host()`."""
    return create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        protected_resource_metadata=host.authenticator.protected_resource_metadata,
        governance=host.governance,
    )


def create_production_app() -> Starlette:
    """Load the host configuration, build the runtime and authentication, and serve them."""
    from mymcp.runtime.bootstrap import build_host

    return create_host_app(build_host())
