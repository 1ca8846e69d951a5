"""Serving: over HTTP (`mymcp serve`, and `mymcp-dev` with reload) and over stdio, and
ending the process cleanly however it is stopped."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import signal
import socket
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Final

from mymcp import __version__
from mymcp.cli.parser import build_parser, logging_options
from mymcp.cli.terminal import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    begin_logging,
    end_process,
    fail,
    load_configuration,
    refused_log_environment,
    settle_logging,
)
from mymcp.errors import ListenError, Location, MyMCPError, StopRequested
from mymcp.logs import (
    LogSettings,
    StderrLines,
    divert_standard_streams,
    log_settings,
    occupy_if_closed,
    uvicorn_log_config,
)

if TYPE_CHECKING:
    from mymcp.config import ServerSettings
    from mymcp.transport import ConnectionLimits, HostApplication

_log = logging.getLogger("mymcp.host.listen")


# How long a stopping process waits for plugin handlers still running on worker threads.
_HANDLER_GRACE_SECONDS = 2.0


def _leave_on_sigterm(signum: int, frame: object) -> None:
    # uvicorn shuts down gracefully on SIGTERM (what systemd and launchd send), then
    # raises it again for the handler it found: the default one would end the process
    # before its exit handlers (the memory index snapshot) run. Leave as an interrupt does.
    raise StopRequested(EXIT_OK)


def _stop_on_sighup(signum: int, frame: object) -> None:
    # A closing terminal sends SIGHUP, whose default ends the process at once: the
    # audit's queued records and the memory index snapshot would be lost. Stop as on
    # SIGTERM instead, which uvicorn answers with its graceful shutdown.
    os.kill(os.getpid(), signal.SIGTERM)


def serve(
    limits: ConnectionLimits | None = None,
    args: argparse.Namespace | None = None,
) -> int:
    """Build the host and serve it until interrupted or terminated (exit 0 either way);
    exit 1 with one diagnostic line when it cannot start, having written nothing when
    it cannot listen."""
    signal.signal(signal.SIGTERM, _leave_on_sigterm)
    signal.signal(signal.SIGHUP, _stop_on_sighup)

    from mymcp.app import create_host_app
    from mymcp.host import build_host
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    args = args or build_parser().parse_args([])
    logs = begin_logging(args)
    configuration = load_configuration(logs, args)
    if configuration is None:
        return EXIT_FAILURE
    server = configuration.server
    # A service manager may start it with stdout closed: the listening socket must not
    # take that number, which the diversion of the standard streams points elsewhere.
    occupy_if_closed(1)
    # Listen before the host is built: building it creates the audit log and other state,
    # which a start that cannot even listen must not leave behind.
    try:
        listener = _listen(server, configuration.source)
    except ListenError as exc:
        return fail(exc)
    try:
        # What a plugin prints while it is imported is a log line, as its output later is.
        with divert_standard_streams(logs):
            host = build_host(configuration=configuration)
    except MyMCPError as exc:
        listener.close()
        return fail(exc)
    app = create_host_app(host)
    return _serve_on(listener, app, server, limits or DEFAULT_CONNECTION_LIMITS, logs)


def _serve_on(
    listener: socket.socket,
    app: HostApplication,
    server: ServerSettings,
    limits: ConnectionLimits,
    logs: StderrLines,
) -> int:
    """Serve `app` on the bound `listener` with uvicorn until a signal stops it. What a
    plugin prints meanwhile is a line of the `output` logger, in the log's format: a JSON
    log stays JSON, and a stderr nobody reads never holds a request up."""
    import uvicorn

    class ListeningServer(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and sockets:
                # uvicorn announces only the addresses it binds itself, and its
                # "Uvicorn running on" line is what operators and supervisors wait for.
                self._log_started_message(sockets)

    # Logging is configured already, so uvicorn must not install its own; the `mcp` logger
    # already records each request, so its access log would only repeat it.
    config = uvicorn.Config(
        app,
        host=server.address,
        port=server.port,
        log_config=None,
        access_log=False,
        **limits.uvicorn_options(),
    )
    try:
        with divert_standard_streams(logs):
            ListeningServer(config).run(sockets=[listener])
    except KeyboardInterrupt:  # Ctrl-C, once uvicorn has stopped serving
        pass
    except SystemExit as leaving:  # SIGTERM, likewise
        if leaving.code != EXIT_OK:
            raise
    finally:
        listener.close()
    return end_process(EXIT_OK, _HANDLER_GRACE_SECONDS)


def _listen(server: ServerSettings, source: Path | None) -> socket.socket:
    """A socket listening on the configured address and port; or a `ListenError` naming
    the address, the cause and the setting that chose the value (`source` is the
    configuration file, None when there is none)."""
    family = socket.AF_INET6 if ":" in server.address else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        if os.name == "posix":
            # As asyncio does for the sockets it binds: a restart need not wait until
            # the connections of the previous run have timed out.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        listener.bind((server.address, server.port))
        # Listening at once claims the port even from a server that bound it and has
        # not listened yet; uvicorn applies its own backlog when it starts serving.
        listener.listen()
    except OSError as exc:
        listener.close()
        error = _listen_error(exc, server, source)
        _log.error(
            "listen outcome=error code=%s address=%s port=%d",
            error.code,
            server.address,
            server.port,
        )
        raise error from None
    return listener


# What each failure to listen means, and the key that chose the value to change.
_LISTEN_FAULTS: Final[Mapping[int, tuple[str, str]]] = {
    errno.EADDRINUSE: ("address_in_use", "port"),
    errno.EADDRNOTAVAIL: ("address_unavailable", "address"),
    errno.EACCES: ("address_not_permitted", "port"),
    errno.EPERM: ("address_not_permitted", "port"),
}


def _listen_error(exc: OSError, server: ServerSettings, source: Path | None) -> ListenError:
    """The operator's diagnostic for a socket that could not listen on `server`'s address
    and port: the endpoint, the cause, and where the value to change is set (`source` is
    the configuration file, None when there is none)."""
    code, field = _LISTEN_FAULTS.get(exc.errno or 0, ("listen_failed", "port"))
    address, port = server.address, server.port
    endpoint = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    reason = exc.strerror or type(exc).__name__
    if code == "address_in_use":
        taken = f"{endpoint} is taken by another process (another MyMCP?)"
        remedy = f"{taken}; stop it, or set another port"
    elif code == "address_unavailable":
        remedy = f"{address} is not an address of this machine ({reason}); set another address"
    elif code == "address_not_permitted" and port < 1024:
        refused = f"{endpoint} was refused ({reason}): ports below 1024 need privileges"
        remedy = f"{refused}; set a port from 1024 up"
    else:
        remedy = f"{endpoint} was refused ({reason}); set another {field}"
    key = f"server.{field}"
    written = None if source is None else _written_at(source, key)
    if written is not None:
        return ListenError(code, location=written, detail=remedy)
    # The value is a default: say so, and where the key that changes it goes.
    setting = f"[server] {field}"
    default = f"the default {address if field == 'address' else port} applies"
    if source is not None:
        detail = f"{remedy} with {setting} in this file (it is not set there, so {default})"
        return ListenError(code, location=Location(source=str(source)), detail=detail)
    path = _configuration_file()
    detail = f"{remedy} with {setting} in {path} (there is no such file, so {default})"
    return ListenError(code, detail=detail)


def _written_at(source: Path, key: str) -> Location | None:
    """Where `key` (`server.port`) is written in the configuration file `source`; None
    when the file leaves it out and the default applies."""
    from mymcp._safefile import read_safe_file
    from mymcp.config import MAX_CONFIGURATION_BYTES, key_position

    table, field = key.split(".")
    try:
        text = read_safe_file(source, max_bytes=MAX_CONFIGURATION_BYTES).decode("utf-8")
        document = tomllib.loads(text)
    except (MyMCPError, ValueError, RecursionError):
        # It changed since the start read it: the file and the key path must do.
        return Location(source=str(source), key=key)
    settings = document.get(table)
    if not isinstance(settings, dict) or field not in settings:
        return None
    position = key_position(text, key)
    line, column = position if position is not None else (None, None)
    return Location(source=str(source), key=key, line=line, column=column)


def _configuration_file() -> str:
    from mymcp.config import config_path

    try:
        return str(config_path())
    except MyMCPError:
        return "the configuration file"


def stdio(args: argparse.Namespace) -> int:
    """Build the host and serve it over stdin/stdout until stdin ends."""
    # Until serving watches the signals itself, a stop ends the start as `serve` does:
    # with status 0 and the exit handlers run, not by the default handler's kill.
    signal.signal(signal.SIGTERM, _leave_on_sigterm)
    signal.signal(signal.SIGHUP, _stop_on_sighup)
    import anyio

    from mymcp.app import serve_stdio
    from mymcp.host import build_host

    streams = _message_streams()
    if streams is None:
        if sys.stderr is not None:  # with no stderr, a print could go to the client's stdout
            return fail(ListenError("stdio_unavailable"))
        return EXIT_FAILURE
    requests, replies = streams
    logs = begin_logging(args)
    # `requests` stays open: on a signal its reader thread may still be blocked in a read,
    # and closing a file under a read waits for that read to end.
    with replies:
        configuration = load_configuration(logs, args)
        if configuration is None:
            return EXIT_FAILURE
        try:
            # Every caller on stdio is `local`: nothing to authenticate. What a plugin
            # prints while it is imported is a log line like its output later.
            with divert_standard_streams(logs):
                host = build_host(authenticates=False, configuration=configuration)
        except MyMCPError as exc:
            return fail(exc)
        # From here a stop is only noted, until serving watches the signals itself and
        # acts on one noted before: raised inside the event loop as it starts, it would
        # end the process with a traceback (and status 1) instead of stopping it.
        stop = _StopNoted()
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, stop)
        # A plugin writing to stderr while the client reads none must not wait for it.
        with divert_standard_streams(logs):
            anyio.run(serve_stdio, host, requests, replies, stop.was_noted)
    return end_process(EXIT_OK, _HANDLER_GRACE_SECONDS)


class _StopNoted:
    """A signal handler that only remembers that a stop was asked for."""

    def __init__(self) -> None:
        self._noted = False

    def __call__(self, signum: int, frame: object) -> None:
        self._noted = True

    def was_noted(self) -> bool:
        return self._noted


def _message_streams() -> tuple[BinaryIO, BinaryIO] | None:
    """Private copies of stdin and stdout for the protocol's messages, or None when either
    is closed.

    The standard descriptors then point elsewhere, stdin at /dev/null and stdout at
    stderr, so nothing else in the process (a plugin printing, reading input or importing
    something that does, a library's warning) can read from or write into the message
    streams; and the interpreter's own stdin is never the file a reader thread is
    blocked in when the process ends. (A stderr the client closed is /dev/null by now:
    see `take_closed_stderr`.)
    """
    try:
        for descriptor in (0, 1, 2):
            os.fstat(descriptor)
    except OSError:
        return None
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb", buffering=0)
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, 0)
    os.close(nothing)
    os.dup2(2, 1)
    # A text stream of its own on descriptor 1 (not `sys.stderr` itself): a line one
    # of them leaves unfinished is then never completed by what the other writes.
    sys.stdout = open(  # noqa: SIM115 (the process's standard output from now on)
        1, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False
    )
    return requests, replies


def dev_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-dev`: validate, then serve with uvicorn's reloader. The
    validation imports the plugins in this process too, so a thread one of them started
    must not keep it from ending after the reloader stops, nor after a Ctrl-C during
    the validation (a plugin still importing, say)."""
    try:
        status = _serve_with_reload(argv)
    except KeyboardInterrupt:
        status = EXIT_INTERRUPTED
    except SystemExit as leaving:  # --help, a usage error, or uvicorn unable to bind
        code = leaving.code
        status = code if isinstance(code, int) else EXIT_OK if code is None else EXIT_FAILURE
    return end_process(status, _HANDLER_GRACE_SECONDS)


def _serve_with_reload(argv: Sequence[str] | None) -> int:
    parser = argparse.ArgumentParser(
        prog="mymcp-dev",
        description="Serve MyMCP with auto-reload (development only).",
        parents=[logging_options(top_level=True)],
    )
    parser.add_argument("--version", action="version", version=f"mymcp {__version__}")
    args = parser.parse_args(argv)
    refusal = refused_log_environment(args)
    if refusal is not None:
        return refusal
    import uvicorn

    from mymcp.config import load_host_configuration, validate_semantics
    from mymcp.governance import audit_directory, check_audit_directory
    from mymcp.host import build_host
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    logs = begin_logging(args)
    try:
        configuration = load_host_configuration()
        validate_semantics(configuration)
    except MyMCPError as exc:
        settle_logging(logs, args)
        return fail(exc)
    server = configuration.server
    settle_logging(logs, args, server)
    # uvicorn's reloader binds the port itself and reports a taken one only as a raw
    # errno: try it first, so that the operator reads the same coded line as from
    # `mymcp`. (The listener closes at once, so the reloader finds the port free.)
    try:
        _listen(server, configuration.source).close()
    except ListenError as exc:
        return fail(exc)
    try:
        # Then everything the reload worker will build, checked as `mymcp check` does:
        # a broken plugin or audit directory found only in the worker would end it in a
        # traceback, with the reloader left waiting for a change.
        build_host(with_audit=False, configuration=configuration)
        if configuration.audit.enabled:
            check_audit_directory(audit_directory(configuration))
    except MyMCPError as exc:
        return fail(exc)
    configured = LogSettings(server.log_level, server.log_format)
    # Watch the package itself, not whatever directory the command was started from.
    package = str(Path(__file__).resolve().parents[1])  # the mymcp package
    uvicorn.run(
        "mymcp.app:create_production_app",
        factory=True,
        reload=True,
        reload_dirs=[package],
        host=server.address,
        port=server.port,
        # The reload worker is a fresh process that never runs this launcher's setup, so
        # uvicorn applies the same handler there from this document.
        log_config=uvicorn_log_config(
            log_settings(args.log_level, args.log_format, configured=configured)
        ),
        access_log=False,
        **DEFAULT_CONNECTION_LIMITS.uvicorn_options(),
    )
    return EXIT_OK
