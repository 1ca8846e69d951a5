"""Connection limits of the HTTP server: how long a client may take to send a request, how
long an idle connection is kept, and how many are served at once.

Left alone, uvicorn waits forever for a connection that never sends a request or sends
one a byte at a time: its keep-alive timer only starts after a response. A few hundred
such connections (slowloris) hold sockets and memory indefinitely. The protocol class
here adds the missing read deadlines to uvicorn's httptools protocol; the other
limits are uvicorn's own settings. Every default is described in docs/ARCHITECTURE.md.
Importing this module imports uvicorn and httptools (both runtime dependencies).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["DEFAULT_CONNECTION_LIMITS", "BoundedHttpToolsProtocol", "ConnectionLimits"]


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The bounds one server process applies to its HTTP connections."""

    # An idle keep-alive connection is closed this long after its last response.
    keep_alive_seconds: int = 5
    # A request's headers must be complete this long after the connection opened (first
    # request) or after its first byte arrived (later requests).
    header_seconds: float = 10.0
    # Its body must be complete this long after its headers were.
    body_seconds: float = 30.0
    # Beyond this many open connections (or requests in progress), a new request is
    # answered 503 at once instead of queueing.
    max_connections: int = 128

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for `uvicorn.run`/`uvicorn.Config` that apply these limits.

        Also off: proxy headers (a loopback server has no proxy, and trusting
        `X-Forwarded-For` would let any local process pose as another client), the
        `server` header, and websockets, which MCP over HTTP does not use.
        """
        return {
            "http": self._protocol(),
            "ws": "none",
            "timeout_keep_alive": self.keep_alive_seconds,
            "limit_concurrency": self.max_connections,
            "proxy_headers": False,
            "server_header": False,
        }

    def _protocol(self) -> type[BoundedHttpToolsProtocol]:
        base = BoundedHttpToolsProtocol
        if (self.header_seconds, self.body_seconds) == (base.header_seconds, base.body_seconds):
            # The module-level class: uvicorn's reloader pickles it by name.
            return base
        deadlines = {"header_seconds": self.header_seconds, "body_seconds": self.body_seconds}
        return type("BoundedHttpToolsProtocol", (base,), deadlines)


DEFAULT_CONNECTION_LIMITS = ConnectionLimits()


class _CoalescedWrites:
    """The connection's transport, with the writes of one loop iteration sent as one.

    uvicorn writes a response's status line and headers, then its body, with one
    `write` each: two send system calls and two loopback packets (each waking the
    client) for every small reply. Collected until the end of the iteration, they leave
    as one. `close` sends whatever is pending first, so nothing is lost or reordered.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending = []
        if not self._transport.is_closing():
            self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with header and body read deadlines, and coalesced
    writes.

    The deadline is one timer per connection, not one per request: each request only
    notes when its current phase (headers, then body) began, and the timer, when it
    fires, closes the connection if that phase is overdue or else waits for the rest of
    it. Arming and cancelling a timer per phase cost more than the checks themselves.
    """

    header_seconds: ClassVar[float] = DEFAULT_CONNECTION_LIMITS.header_seconds
    body_seconds: ClassVar[float] = DEFAULT_CONNECTION_LIMITS.body_seconds
    # The phase being read and when it began; None between requests.
    _phase_limit: float | None = None
    _phase_started = 0.0
    _deadline: asyncio.TimerHandle | None = None
    _deadline_at = 0.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
        self._begin(self.header_seconds)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._phase_limit is None:  # the first request is timed from the connect
            self._begin(self.header_seconds)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._begin(self.body_seconds)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._phase_limit = None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _begin(self, limit: float) -> None:
        self._phase_limit = limit
        self._phase_started = self.loop.time()
        due = self._phase_started + limit
        if self._deadline is not None and self._deadline_at <= due:
            return  # the pending check comes first and will wait for the rest
        self._arm(due)

    def _arm(self, due: float) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline_at = due
        self._deadline = self.loop.call_at(due, self._check_deadline)

    def _check_deadline(self) -> None:
        self._deadline = None
        if self._phase_limit is None or self.transport.is_closing():
            return  # between requests: the next one arms it again
        due = self._phase_started + self._phase_limit
        if due <= self.loop.time():
            self.transport.close()
        else:
            self._arm(due)
