"""The ASGI application: `create_app` over a built runtime, the production factory, and
the stdio process (`serve_stdio`).

Nothing here runs at import time. `create_production_app` is the supported uvicorn
factory target (`mymcp.app:create_production_app`, with `--factory`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from mymcp import SERVER_NAME
from mymcp.config import HostConfiguration
from mymcp.console import console_state_directory, create_console
from mymcp.errors import MyMCPError
from mymcp.governance import Governance
from mymcp.runtime import HostRuntime
from mymcp.transport import (
    ADVERTISED_VERSIONS,
    DEFAULT_CONNECTION_LIMITS,
    LATEST_PROTOCOL_VERSION,
    Dispatcher,
    HostApplication,
    JsonDocument,
    McpEndpoint,
    RequestAuthenticator,
    Session,
    SessionEnd,
    SessionStore,
    StatelessEra,
    StdioServer,
    TransportOptions,
    audit_session_ends,
)

if TYPE_CHECKING:
    from mymcp.host import Host

__all__ = [
    "PROTECTED_RESOURCE_PATH",
    "create_app",
    "create_console_app",
    "create_host_app",
    "create_production_app",
    "serve_stdio",
]

PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource/mcp"
_log = logging.getLogger("mymcp.host.stdio")


def create_app(
    runtime: HostRuntime,
    *,
    authenticator: RequestAuthenticator,
    configuration: HostConfiguration | None = None,
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
    `on_startup` / before `on_shutdown` hooks of the caller's own. Sessions are bounded
    by `[mcp] max_sessions` and `max_sessions_per_principal`. The
    console accepts the sign-in tokens `mymcp console` leaves in `console_directory`
    (default `$XDG_STATE_HOME/mymcp/console`).
    """
    config = configuration or HostConfiguration()
    mcp = config.mcp
    audit = governance.audit if governance is not None else None
    sessions = SessionStore(
        limit=mcp.max_sessions,
        per_principal_limit=mcp.max_sessions_per_principal,
        inactivity_seconds=mcp.session_inactivity_timeout_seconds,
        absolute_seconds=mcp.session_absolute_lifetime_seconds,
        on_end=_session_ends(governance),
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
                "protocolVersions": list(ADVERTISED_VERSIONS),
            }
        ),
    }
    if protected_resource_metadata is not None:
        documents[PROTECTED_RESOURCE_PATH] = JsonDocument(
            protected_resource_metadata, {"cache-control": "no-store"}
        )
    console = _console_routes(runtime, config, governance, console_directory, console_clock)
    return HostApplication(
        endpoint,
        options,
        documents,
        mounts={"/console": console},
        on_startup=(*on_startup, *(() if audit is None else (audit.start,))),
        # Sessions end (recorded as shut down) before the audit's last commit.
        on_shutdown=(*on_shutdown, *(() if audit is None else (sessions.close, audit.close))),
    )


def _console_routes(
    runtime: HostRuntime,
    config: HostConfiguration,
    governance: Governance | None,
    console_directory: Path | None,
    clock: Callable[[], float],
) -> Starlette:
    console = create_console(
        runtime,
        Dispatcher(runtime, governance),
        approvals=governance.approvals if governance is not None else None,
        audit=governance.audit if governance is not None else None,
        address=config.server.address,
        port=config.server.port,
        state_directory=console_directory or _default_console_directory(),
        clock=clock,
    )
    # The console's own router sees only `/console` and below; the MCP endpoint never
    # passes through it. The bare `/console` goes there too, so even its redirect is guarded.
    return Starlette(routes=[Route("/console", console), Mount("/console", app=console)])


def create_console_app(host: Host, *, console_directory: Path | None = None) -> HostApplication:
    """Only the console (and `/health`), for a stdio process: its approvals live in its
    own memory, so only a console it serves itself can decide them. It neither starts
    nor stops the audit; the stdio process does."""
    server = host.configuration.server
    options = TransportOptions.for_binding(server.address, server.port)
    console = _console_routes(
        host.runtime, host.configuration, host.governance, console_directory, time.time
    )
    documents = {"/health": JsonDocument({"status": "ok"})}
    return HostApplication(None, options, documents, mounts={"/console": console})


def _session_ends(governance: Governance | None) -> Callable[[Session, SessionEnd], None] | None:
    """What a session's end sets off: its `session_close` record, and the end of the
    approvals bound to it (no call can come back to use them)."""
    audit = governance.audit if governance is not None else None
    approvals = governance.approvals if governance is not None else None
    record = None if audit is None else audit_session_ends(audit)
    if approvals is None:
        return record

    def ended(session: Session, reason: SessionEnd) -> None:
        if record is not None:
            record(session, reason)
        approvals.end_session(session.id)

    return ended


def _default_console_directory() -> Path | None:
    """Where `mymcp console` leaves sign-in tokens; None (nobody can sign in) when the
    home directory cannot be found."""
    try:
        return console_state_directory()
    except MyMCPError:
        return None


def create_host_app(host: Host) -> HostApplication:
    """The app for a host built by `build_host()`; it starts building the memory index
    when the server starts and stops the build when it stops."""
    return create_app(
        host.runtime,
        authenticator=host.authenticator,
        configuration=host.configuration,
        protected_resource_metadata=host.authenticator.protected_resource_metadata,
        governance=host.governance,
        on_startup=() if host.mnemosyne is None else (host.mnemosyne.start_index_build,),
        on_shutdown=()
        if host.mnemosyne is None
        else (host.mnemosyne.stop_index_build, host.mnemosyne.close),
    )


def create_production_app() -> HostApplication:
    """Load the host configuration, build the runtime and authentication, and serve them."""
    from mymcp.host import build_host

    return create_host_app(build_host())


async def serve_stdio(
    host: Host,
    source: BinaryIO,
    sink: BinaryIO,
    stop_noted: Callable[[], bool] = lambda: False,
) -> None:
    """Serve `host` over stdio (`mymcp stdio`) until the input ends or a signal arrives
    (or had arrived before, as `stop_noted` tells).

    Approvals live in this process's memory, so when `[approval]` selects any tool the
    process also serves the console (and only the console) on the configured address,
    where a person can decide them. When that address is taken — another MyMCP serves
    there — calls that need approval are refused with `approval_unavailable` instead of
    pointing at a console that has never heard of them.
    """
    governance = host.governance
    server = host.configuration.server
    options = TransportOptions.for_binding(server.address, server.port)
    listener = None
    if governance.approvals is not None:
        listener = _console_listener(server.address, server.port)
        if listener is None:
            _log.warning(
                "console outcome=unavailable address=%s port=%d reason=address_in_use",
                server.address,
                server.port,
            )
    dispatcher = Dispatcher(
        host.runtime,
        governance,
        console_origin=options.origin,
        approval_console=listener is not None,
    )
    stdio = StdioServer(dispatcher, StatelessEra(dispatcher), audit=governance.audit)
    console = None
    if listener is not None:
        config = uvicorn.Config(
            create_console_app(host),
            lifespan="off",
            log_config=None,
            access_log=False,
            **DEFAULT_CONNECTION_LIMITS.uvicorn_options(),
        )
        console = _ConsoleServer(config)
    audit = governance.audit
    if audit is not None:
        audit.start()
    if host.mnemosyne is not None:
        host.mnemosyne.start_index_build()
    try:
        async with anyio.create_task_group() as group:
            if console is not None and listener is not None:
                group.start_soon(console.serve, [listener])
            async with anyio.create_task_group() as serving:
                serving.start_soon(_stop_on_signal, serving.cancel_scope, stop_noted)
                await stdio.serve(source, sink)
                serving.cancel_scope.cancel()
            if console is not None:
                console.should_exit = True
    finally:
        if host.mnemosyne is not None:
            host.mnemosyne.stop_index_build()
            host.mnemosyne.close()
        if audit is not None:
            audit.close()


class _ConsoleServer(uvicorn.Server):
    """uvicorn's server without its signal handling: the stdio process owns SIGTERM and
    SIGINT, and stops the console itself once stdio is done."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def _stop_on_signal(scope: anyio.CancelScope, stop_noted: Callable[[], bool]) -> None:
    # SIGHUP too: a closing terminal sends it, and it would otherwise end the process
    # before the audit's queued records and the memory index snapshot are written.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        if stop_noted():  # a signal that came before the receiver listened
            scope.cancel()
            return
        async for _ in signals:
            scope.cancel()
            return


def _console_listener(address: str, port: int) -> socket.socket | None:
    """A listening socket on the configured address, or None when it is taken."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(128)
    except OSError:
        listener.close()
        return None
    return listener
