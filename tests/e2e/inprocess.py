"""Run the real uvicorn server in-process, in a background thread, for one test module.

Used where a subprocess cannot be given what the test needs (the OAuth tests route the
issuer's hostname to a loopback HTTPS server through an injected HTTP client).
"""

from __future__ import annotations

import threading

import uvicorn
from starlette.types import ASGIApp

from mymcp.transport import DEFAULT_CONNECTION_LIMITS

__all__ = ["serving"]

STARTUP_POLLS = 400  # x 0.05 s
SHUTDOWN_TIMEOUT = 10.0


class Serving:
    def __init__(self, server: uvicorn.Server, thread: threading.Thread) -> None:
        self.server, self.thread = server, thread

    def __enter__(self) -> None:
        self.thread.start()
        pause = threading.Event()
        for _ in range(STARTUP_POLLS):
            if self.server.started or not self.thread.is_alive():
                break
            pause.wait(0.05)
        if not self.server.started:
            self.__exit__(None, None, None)
            raise RuntimeError("in-process uvicorn did not start")

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(SHUTDOWN_TIMEOUT)
        assert not self.thread.is_alive(), "in-process uvicorn did not stop"


def serving(app: ASGIApp, port: int) -> Serving:
    """`app` under uvicorn with the production HTTP protocol and connection limits."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        **DEFAULT_CONNECTION_LIMITS.uvicorn_options(),
    )
    server = uvicorn.Server(config)
    return Serving(server, threading.Thread(target=server.run, daemon=True))
