"""Serving: over HTTP (`mymcp serve`, and `mymcp-dev` with reload) and over stdio, and
ending the process cleanly however it is stopped."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from mymcp import __version__
from mymcp.cli.parser import build_parser, logging_options
from mymcp.cli.terminal import (
    EXIT_FAILURE,
    EXIT_OK,
    begin_logging,
    fail,
    refused_log_environment,
    settle_logging,
)
from mymcp.errors import MyMCPError
from mymcp.logs import LogSettings, log_settings, uvicorn_log_config

if TYPE_CHECKING:
    from mymcp.transport import ConnectionLimits


# How long a stopping process waits for plugin handlers still running on worker threads.
_HANDLER_GRACE_SECONDS = 2.0


def _leave_on_sigterm(signum: int, frame: object) -> None:
    # uvicorn shuts down gracefully on SIGTERM (what systemd and launchd send), then
    # raises it again for the handler it found: the default one would end the process
    # before its exit handlers (the memory index snapshot) run. Leave as an interrupt does.
    raise SystemExit(EXIT_OK)


def serve(
    limits: ConnectionLimits | None = None,
    args: argparse.Namespace | None = None,
) -> int:
    """Build the host and serve it until interrupted or terminated (exit 0 either way);
    exit 1 before binding on failure."""
    import signal

    import uvicorn

    signal.signal(signal.SIGTERM, _leave_on_sigterm)

    from mymcp.app import create_host_app
    from mymcp.runtime.bootstrap import build_host
    from mymcp.transport import DEFAULT_CONNECTION_LIMITS

    args = args or build_parser().parse_args([])
    logs = begin_logging(args)
    try:
        host = build_host()
    except MyMCPError as exc:
        settle_logging(logs, args)
        return fail(exc)
    server = host.configuration.server
    settle_logging(logs, args, server)
    app = create_host_app(host)
    # Logging is configured above, so uvicorn must not install its own; the `mcp` logger
    # already records each request, so its access log would only repeat it.
    try:
        uvicorn.run(
            app,
            host=server.address,
            port=server.port,
            log_config=None,
            access_log=False,
            **(limits or DEFAULT_CONNECTION_LIMITS).uvicorn_options(),
        )
    except SystemExit as leaving:  # SIGTERM, once uvicorn has stopped serving
        if leaving.code != EXIT_OK:
            raise
    return _ending(EXIT_OK)


def _ending(status: int) -> int:
    """`status`, once nothing keeps the process from ending normally.

    A plugin's synchronous handler that a cancelled call left running cannot be stopped
    (it is a thread), and the interpreter would wait for it at exit for good. Such
    threads get a moment to return; then the exit handlers run (the memory index
    snapshot, the log) and the process ends without them.
    """
    current = threading.current_thread()
    others = [t for t in threading.enumerate() if t is not current and not t.daemon]
    deadline = time.monotonic() + _HANDLER_GRACE_SECONDS
    for thread in others:
        thread.join(max(0.0, deadline - time.monotonic()))
    running = sum(thread.is_alive() for thread in others)
    if not running:
        return status
    logging.getLogger("mymcp").warning("exit outcome=handlers_left_running count=%d", running)
    atexit._run_exitfuncs()
    os._exit(status)


def stdio(args: argparse.Namespace) -> int:
    """Build the host and serve it over stdin/stdout until stdin ends."""
    import anyio

    from mymcp.app import serve_stdio
    from mymcp.runtime.bootstrap import build_host

    streams = _message_streams()
    if streams is None:
        if sys.stderr is not None:  # with no stderr, a print would go to the client's stdout
            print("mymcp: error: stdio needs an open standard input and output", file=sys.stderr)
        return EXIT_FAILURE
    requests, replies = streams
    logs = begin_logging(args)
    # `requests` stays open: on a signal its reader thread may still be blocked in a read,
    # and closing a file under a read waits for that read to end.
    with replies:
        try:
            host = build_host()
        except MyMCPError as exc:
            settle_logging(logs, args)
            return fail(exc)
        settle_logging(logs, args, host.configuration.server)
        anyio.run(serve_stdio, host, requests, replies)
    return _ending(EXIT_OK)


def _message_streams() -> tuple[BinaryIO, BinaryIO] | None:
    """Private copies of stdin and stdout for the protocol's messages, or None when either
    is closed.

    The standard descriptors then point elsewhere, stdin at /dev/null and stdout at
    stderr, so nothing else in the process (a plugin printing, reading input or importing
    something that does, a library's warning) can read from or write into the message
    streams; and the interpreter's own stdin is never the file a reader thread is
    blocked in when the process ends.
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
    sys.stdout = sys.stderr
    return requests, replies


def dev_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `mymcp-dev`: validate, then serve with uvicorn's reloader."""
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
