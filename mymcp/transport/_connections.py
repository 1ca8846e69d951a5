"""Connection limits of the HTTP server: how long a client may take to send a request, how
large its request head may be, how long an idle connection is kept, how many connections
are open and how many requests are answered at once.

Left alone, uvicorn waits forever for a connection that never sends a request or sends
one a byte at a time: its keep-alive timer only starts after a response. It also takes
request heads of any size, and its concurrency limit counts idle connections, so a few
hundred stalled sockets answer every real client 503. The protocol class here adds the
missing read deadlines and head bounds to uvicorn's httptools protocol, counts only the
requests being answered for its 503, and bounds open connections by closing the oldest
one that is not being answered; keep-alive is uvicorn's own setting. It also tells each
request when its connection closes (`ConnectionWatch`), which is how a stateless-era
client cancels a request. Every default is
described in docs/ARCHITECTURE.md. Importing this module imports uvicorn and httptools
(both runtime dependencies).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import unquote

import httptools
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
from uvicorn.server import ServerState

from mymcp.transport._exchange import CONNECTION_WATCH, ConnectionWatch, encode_json
from mymcp.transport._jsonrpc import ErrorCode, error_response

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
    # A request head (request line and header fields) larger than this, or with more
    # header fields, is answered 431 and its connection closed.
    max_header_bytes: int = 64 * 1024
    max_header_fields: int = 100
    # What a request may send after its head (its body with any chunk framing, and the
    # trailer fields after a chunked body): beyond this, or beyond the head's bounds in
    # trailer fields, the connection is closed. The endpoint reads at most 1 MiB of body,
    # so nothing a client means to be read comes near it; without it, trailer fields
    # would be kept however many arrived.
    max_bytes_after_head: int = 3 * 1024 * 1024
    # Beyond this many requests being answered, a new request is answered 503 at once
    # instead of queueing. Idle connections and requests still being sent do not count,
    # nor do requests a client sent ahead on a connection (pipelined): a connection's
    # requests are answered one after another, so it counts once however many it sent.
    max_requests: int = 128
    # A response the client reads none of for this long (the connection's send buffer
    # stays full) closes the connection: otherwise a client that sends requests and
    # never reads would keep its place among the requests being answered for good.
    write_stall_seconds: float = 30.0
    # At this many open connections, a new one closes the oldest connection that has no
    # request being answered (idle, or still sending its request), so stalled clients
    # never lock out a new one; if every connection is being answered, the new one is
    # answered 503 and closed.
    max_connections: int = 256
    # On SIGTERM or Ctrl-C, requests being answered get this long to finish; the rest are
    # then cancelled, so one hung tool cannot keep the server from stopping.
    shutdown_seconds: float = 10.0

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for `uvicorn.run`/`uvicorn.Config` that apply these limits.

        Also off: proxy headers (a loopback server has no proxy, and trusting
        `X-Forwarded-For` would let any local process pose as another client), the
        `server` header, and websockets, which MCP over HTTP does not use (an upgrade
        request is answered as plain HTTP).
        """
        return {
            "http": self._protocol(),
            "ws": "none",
            "timeout_keep_alive": self.keep_alive_seconds,
            "timeout_graceful_shutdown": self.shutdown_seconds,
            "proxy_headers": False,
            "server_header": False,
        }

    def _protocol(self) -> type[BoundedHttpToolsProtocol]:
        base = BoundedHttpToolsProtocol
        bounds = {
            "header_seconds": self.header_seconds,
            "body_seconds": self.body_seconds,
            "max_header_bytes": self.max_header_bytes,
            "max_header_fields": self.max_header_fields,
            "max_bytes_after_head": self.max_bytes_after_head,
            "max_requests": self.max_requests,
            "write_stall_seconds": self.write_stall_seconds,
            "max_connections": self.max_connections,
        }
        if all(getattr(base, name) == value for name, value in bounds.items()):
            # The module-level class: uvicorn's reloader pickles it by name.
            return base
        return type("BoundedHttpToolsProtocol", (base,), bounds)


DEFAULT_CONNECTION_LIMITS = ConnectionLimits()
_DEFAULTS = DEFAULT_CONNECTION_LIMITS

_HEAD_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-length: 0\r\nconnection: close\r\n\r\n"
)
_NO_CONNECTION_FREE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
)
# What a request beyond the requests being answered gets: on the MCP endpoint an error
# its client can read, elsewhere (the console, health) plain text.
_BUSY_MESSAGE = "Too many requests are being answered; retry shortly"
_BUSY_MCP_BODY = encode_json(error_response(None, ErrorCode.INTERNAL_ERROR, _BUSY_MESSAGE))
_BUSY_TEXT_BODY = _BUSY_MESSAGE.encode() + b"\n"
# A burst of refusals is logged as one warning, then at most one line this often.
_BUSY_LOG_SECONDS = 10.0


def _answered_when_busy(target: bytes) -> bool:
    """Whether a request goes to the console or the health check, which are never
    refused for being busy: cheap, quickly answered, and needed most then (a person
    deciding the approvals that hold requests open, a liveness probe). Judged by the
    path the application routes on, whatever the form of the request target."""
    try:
        path = unquote((httptools.parse_url(target).path or b"").decode("ascii"))
    except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
        return False
    return path in ("/health", "/console") or path.startswith("/console/")


def _busy_answer(path: object) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """The headers and body of the 503 for a request beyond those being answered."""
    if path == "/mcp":
        body, media = _BUSY_MCP_BODY, b"application/json"
    else:
        body, media = _BUSY_TEXT_BODY, b"text/plain; charset=utf-8"
    headers = [
        (b"content-type", media),
        (b"content-length", str(len(body)).encode()),
        (b"retry-after", b"1"),
        (b"connection", b"close"),
    ]
    return headers, body


async def _answer_busy(scope: Scope, receive: Receive, send: Send) -> None:
    headers, body = _busy_answer(scope.get("path"))
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop parsing a head beyond the bounds."""


class _UpgradeBody:
    """The body of a request that offered an upgrade, which the request's own parser
    leaves unread (it stops at the end of such a head): read by Content-Length, or
    through a parser of its own when chunked, into the request's cycle."""

    __slots__ = ("_chunks", "_left", "complete", "cycle", "framed", "received")

    def __init__(self, cycle: RequestResponseCycle, headers: Iterable[tuple[bytes, bytes]]):
        self.cycle = cycle
        self.complete = False
        self.received = 0  # bytes on the wire, framing included
        fields = list(headers)
        lengths = [value for name, value in fields if name == b"content-length"]
        self._left = int(lengths[0]) if lengths else 0  # the parser checked the digits
        self._chunks: httptools.HttpRequestParser | None = None
        codings = [
            coding.strip().lower()
            for name, value in fields
            if name == b"transfer-encoding"
            for coding in value.split(b",")
        ]
        # The parser checks a Transfer-Encoding only after it looked for an upgrade, so
        # it is checked here: a body is framed only if chunked is the last coding.
        self.framed = not codings or codings[-1] == b"chunked"
        if codings:
            self._chunks = httptools.HttpRequestParser(self)
            self._chunks.feed_data(_CHUNKED_HEAD)
        elif not self._left:
            self.complete = True

    def take(self, data: bytes) -> None:
        """Read what arrived of the body; raises `httptools.HttpParserError` for
        chunk framing that is no HTTP."""
        if self._chunks is not None:
            self.received += len(data)
            try:
                self._chunks.feed_data(data)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                # Raised by the callback ending a complete body (its parser would read on
                # into whatever follows, which is never read), or by broken framing.
                if not self.complete:
                    raise
            return
        part = data[: self._left]
        self._left -= len(part)
        self.received += len(part)
        self.cycle.body += part
        if not self._left:
            self.complete = True

    def on_body(self, body: bytes) -> None:  # the chunk parser's callbacks
        self.cycle.body += body

    def on_message_complete(self) -> None:
        self.complete = True
        raise _BodyComplete  # stops the chunk parser at the end of the body


class _BodyComplete(Exception):
    """Raised from the chunk parser's callback to stop it at the end of the body."""


# What the chunk parser of an upgrade request's body is told first: that a chunked body
# follows (the request's own head went to the request's parser).
_CHUNKED_HEAD = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n"


def _head_size(url: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    return len(url) + sum(len(name) + len(value) for name, value in headers)


class _ServerLoad:
    """What the connections of one server share: which are open (oldest first) and how
    many requests are being answered."""

    __slots__ = ("answering", "bound", "open", "refusal_line", "refusals_logged_at", "refused")

    def __init__(self) -> None:
        self.open: dict[BoundedHttpToolsProtocol, None] = {}
        self.answering = 0
        # Requests answered 503 since the last line saying so, when that was, and the
        # line due at the end of the quiet period for those counted meanwhile.
        self.refused = 0
        self.refusals_logged_at: float | None = None
        self.refusal_line: asyncio.TimerHandle | None = None
        self.bound = 0

    def note_refusal(
        self, loop: asyncio.AbstractEventLoop, logger: logging.Logger, bound: int
    ) -> None:
        """Count a request answered 503 for being busy (`bound` requests were being
        answered). The first of a burst is logged at once; the rest are counted into one
        line at the end of each quiet period of `_BUSY_LOG_SECONDS`, or when the last
        connection closes (a stop): a flood must not flood the log, nor go unsaid."""
        self.refused += 1
        self.bound = bound
        logged = self.refusals_logged_at
        if logged is None or loop.time() - logged >= _BUSY_LOG_SECONDS:
            self.log_refusals(loop, logger)
        elif self.refusal_line is None:
            due = logged + _BUSY_LOG_SECONDS
            self.refusal_line = loop.call_at(due, self.log_refusals, loop, logger)

    def log_refusals(self, loop: asyncio.AbstractEventLoop, logger: logging.Logger) -> None:
        """The line for the refusals counted since the last one, if any."""
        if self.refusal_line is not None:
            self.refusal_line.cancel()
            self.refusal_line = None
        if not self.refused:
            return
        logger.warning(
            "Busy: %d request(s) answered 503, at the bound of %d being answered.",
            self.refused,
            self.bound,
        )
        self.refused = 0
        self.refusals_logged_at = loop.time()


_LOADS: weakref.WeakKeyDictionary[ServerState, _ServerLoad] = weakref.WeakKeyDictionary()


def _load_of(server_state: ServerState) -> _ServerLoad:
    load = _LOADS.get(server_state)
    if load is None:
        load = _LOADS[server_state] = _ServerLoad()
    return load


class _CoalescedWrites:
    """The connection's transport, with the writes of one loop iteration sent as one.

    uvicorn writes a response's status line and headers, then its body, with one
    `write` each: two send system calls and two loopback packets (each waking the
    client) for every small reply. Collected until the end of the iteration, they leave
    as one. `write_eof` and `close` send whatever is pending first, so nothing is lost
    or reordered.
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

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with read deadlines, head bounds, a 503 that counts
    only requests being answered, a bound on open connections, and coalesced writes.

    The deadline is one timer per connection, not one per request: each request only
    notes when its current phase (headers, then body) began, and the timer, when it
    fires, closes the connection if that phase is overdue or else waits for the rest of
    it. Arming and cancelling a timer per phase cost more than the checks themselves.

    The head is bounded while it is still arriving by the bytes received since it
    began (the parser buffers a field it has not finished, so a value sent a byte at a
    time is only seen that way), and once complete by its number of fields and size.
    """

    header_seconds: ClassVar[float] = _DEFAULTS.header_seconds
    body_seconds: ClassVar[float] = _DEFAULTS.body_seconds
    max_header_bytes: ClassVar[int] = _DEFAULTS.max_header_bytes
    max_header_fields: ClassVar[int] = _DEFAULTS.max_header_fields
    max_bytes_after_head: ClassVar[int] = _DEFAULTS.max_bytes_after_head
    max_requests: ClassVar[int] = _DEFAULTS.max_requests
    write_stall_seconds: ClassVar[float] = _DEFAULTS.write_stall_seconds
    max_connections: ClassVar[int] = _DEFAULTS.max_connections
    # The phase being read and when it began; None between requests.
    _phase_limit: float | None = None
    _phase_started = 0.0
    _deadline: asyncio.TimerHandle | None = None
    _deadline_at = 0.0
    # Bytes received since the head being read began (None once it is complete).
    _head_received: int | None = 0
    _head_too_large = False
    # Bytes received since the head ended.
    _after_head = 0
    # Set once nothing more this connection sends will be read (after an upgrade
    # request or a refused head).
    _ignoring_input = False
    # The body of an upgrade request while it arrives: read here, not by the parser.
    _upgrade_body: _UpgradeBody | None = None
    # Requests on this connection received in full and not yet answered (the first is
    # being answered, the rest wait their turn); the connection counts once in the load.
    _unanswered = 0
    # Closes the connection when its send buffer stays full (see `write_stall_seconds`).
    _stall: asyncio.TimerHandle | None = None
    _load: _ServerLoad | None = None
    # Handed to each request (in its scope), ended when the connection is lost.
    _watch: ConnectionWatch | None = None
    # The unanswered requests ahead of the newest one, when requests were pipelined.
    _cycles_ahead: tuple[RequestResponseCycle, ...] = ()
    # Whether the request being read was already answered 503 for being busy.
    _refused_busy = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(_CoalescedWrites(transport, self.loop))  # type: ignore[arg-type]
        self._watch = ConnectionWatch()
        self._begin(self.header_seconds)
        load = self._load = _load_of(self.server_state)
        load.open[self] = None
        if len(load.open) > self.max_connections and not self._make_room(load):
            self.transport.write(_NO_CONNECTION_FREE)
            self.transport.close()

    def _make_room(self, load: _ServerLoad) -> bool:
        """Close the oldest other connection that has no request being answered."""
        for other in load.open:
            if other is not self and not other._unanswered and not other.transport.is_closing():
                other.transport.close()
                return True
        return False

    def data_received(self, data: bytes) -> None:
        # uvicorn's own, with 431 for an oversized head and upgrades served as plain
        # HTTP without a warning (this server speaks no websockets).
        self._unset_keepalive_if_required()
        if self._ignoring_input:
            if self._upgrade_body is not None:
                self._take_upgrade_body(data)
            return
        if self._head_received is not None:
            self._head_received += len(data)
        else:
            self._after_head += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            # An upgrade offered (to h2c, say, as Java's HTTP client offers on every
            # first request) is declined by answering in HTTP/1.1, as HTTP allows. The
            # parser stops at the end of its head, having dispatched the request as
            # complete: its body is read here, and what follows it is never read (a
            # client may send the other protocol once it sees a switch, never another
            # request); the connection closes after the answer.
            self._ignoring_input = True
            cycle = self.cycle
            if cycle is not None:
                cycle.keep_alive = False
                body = _UpgradeBody(cycle, cycle.scope["headers"])
                if not body.framed:
                    # No body can be told apart: refused as HTTP requires, and the
                    # request, already dispatched, learns its client is gone.
                    cycle.disconnected = True
                    cycle.message_event.set()
                    self.send_400_response("Invalid HTTP request received.")
                    return
                if not body.complete:
                    self._upgrade_body = body
                    cycle.more_body = True
                    # Still being sent, so not yet a request being answered.
                    self._count_answered()
                    self._begin(self.body_seconds)
                    self._take_upgrade_body(data[upgrade.args[0] :])
            return
        except httptools.HttpParserError:
            if self.transport.is_closing():  # dropped by a callback (trailer fields)
                return
            if self._head_too_large:
                self._refuse_head()
                return
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)
            return
        if self._head_received is not None:
            if self._head_received > self.max_header_bytes:
                self._refuse_head()
        elif self._after_head > self.max_bytes_after_head:
            self._drop_mid_request("Request body too large.")
        elif self.headers and self._trailers_too_large():
            self._drop_mid_request("Request trailer fields too large.")

    def _take_upgrade_body(self, data: bytes) -> None:
        """Hand the request what arrived of its body (an upgrade request's, which the
        parser left unread), and mark it complete once all of it did."""
        body = self._upgrade_body
        assert body is not None  # only called while one arrives
        cycle = body.cycle
        try:
            body.take(data)
        except httptools.HttpParserError:
            self._upgrade_body = None
            self._drop_mid_request("Invalid chunked body received.")
            return
        if body.received > self.max_bytes_after_head:
            self._upgrade_body = None
            self._drop_mid_request("Request body too large.")
            return
        if body.complete:
            self._upgrade_body = None
            cycle.more_body = False
            self._phase_limit = None
            if not cycle.response_complete:  # now a request received in full
                self._count_unanswered()
        elif len(cycle.body) > HIGH_WATER_LIMIT:
            # As uvicorn does for any body: reading resumes when the request reads it.
            self.flow.pause_reading()
        cycle.message_event.set()

    def _count_unanswered(self) -> None:
        if self._load is not None:
            self._unanswered += 1
            if self._unanswered == 1:
                self._load.answering += 1

    def _count_answered(self) -> None:
        if self._unanswered and self._load is not None:
            self._unanswered -= 1
            if not self._unanswered:
                self._load.answering -= 1

    def _refuse_head(self) -> None:
        self.logger.warning("Request head too large.")
        if self.cycle is not None and not self.cycle.response_complete:
            # A response is being written on this connection: closing is all that is left.
            self.transport.close()
            return
        # Closing at once, with the rest of the head still arriving, would reset the
        # connection and could destroy the answer before the client reads it. So the
        # answer is sent and the sending side shut, and reading stops (nothing more is
        # read, so a client that keeps sending costs nothing) until the head's deadline
        # closes the connection.
        self.transport.write(_HEAD_TOO_LARGE)
        self.transport.write_eof()
        self.flow.pause_reading()
        self._ignoring_input = True

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[CONNECTION_WATCH] = self._watch  # type: ignore[typeddict-unknown-key]
        self._refused_busy = False
        # A request that follows an early answer in the same read finds the idle timer
        # that answer's body re-armed: the connection is busy again, not idle.
        if self.timeout_keep_alive_task is not None:
            self._unset_keepalive_if_required()
        if self._phase_limit is None:  # the first request is timed from the connect
            self._begin(self.header_seconds)

    def _trailers_too_large(self) -> bool:
        """Whether the trailer fields after a chunked body (collected in `headers`, which
        the head no longer uses once complete) are beyond the head's bounds. Counted here
        rather than field by field: a parser callback per header would cost every
        request far more."""
        return (
            len(self.headers) > self.max_header_fields
            or _head_size(b"", self.headers) > self.max_header_bytes
        )

    def _drop_mid_request(self, reason: str) -> None:
        """Close a connection whose request broke a bound after its head: an answer can
        no longer be framed, and nothing more it sends is read."""
        self.logger.warning(reason)
        self._ignoring_input = True
        self.transport.close()

    def on_headers_complete(self) -> None:
        received = self._head_received or 0
        self._head_received = None
        self._after_head = 0
        # The bytes received since the head began bound its size, so the head itself is
        # measured only when more arrived (a body in the same packet), or when it began
        # inside a packet that completed the previous request (nothing counted).
        bounded = 0 < received <= self.max_header_bytes
        if len(self.headers) > self.max_header_fields or (
            not bounded and _head_size(self.url, self.headers) > self.max_header_bytes
        ):
            self._head_too_large = True
            raise _HeadTooLarge  # stops the parser; `data_received` answers 431
        # uvicorn's own concurrency check is off: it counts idle connections too, and
        # logs every refusal. A request beyond those being answered is handed to an
        # application of its own instead, which only answers 503.
        load = self._load
        earlier = self.cycle
        if (
            load is not None
            and load.answering >= self.max_requests
            and not _answered_when_busy(self.url)
        ):
            app = self.app
            self.app = _answer_busy
            try:
                super().on_headers_complete()
            finally:
                self.app = app
            self._refused_busy = True
            load.note_refusal(self.loop, self.logger, self.max_requests)
        else:
            super().on_headers_complete()
        # The parser adds trailer fields (after a chunked body) to this list, which is
        # the request's own header list in its scope. A trailer must not act as a
        # header: an `Authorization` or `Mcp-Session-Id` arriving after the body would
        # otherwise count whenever it came in the same read as the head. Trailers go to
        # a list of their own, bounded and then dropped (ASGI carries no request
        # trailers).
        self.headers = []
        if earlier is not None and not earlier.response_complete:
            # This request waits behind others (pipelined): those not yet answered are
            # remembered, since uvicorn keeps only the newest.
            ahead = (*self._cycles_ahead, earlier)
            self._cycles_ahead = tuple(c for c in ahead if not c.response_complete)
        self._begin(self.body_seconds)

    def on_message_complete(self) -> None:
        if self.headers and self._trailers_too_large():
            self._drop_mid_request("Request trailer fields too large.")
            raise _HeadTooLarge  # stops the parser: nothing more is read
        answering = self.cycle is not None and not self.cycle.response_complete
        super().on_message_complete()
        self._phase_limit = None
        self._head_received = 0  # whatever arrives next is the next request's head
        # `_count_unanswered` and `_count_answered`, written out: every request passes
        # here, and a call each way costs it more than the counting does.
        load = self._load
        if answering and load is not None:
            self._unanswered += 1
            if self._unanswered == 1:
                load.answering += 1
                if load.answering > self.max_requests and not self._refused_busy:
                    self._refuse_late(load)
        elif (
            not answering
            and self.timeout_keep_alive_task is None
            and not self.transport.is_closing()
        ):
            # Answered before its body was all here (a 413, 415 or 401 needs no body):
            # the answer started the idle timer, and the body arriving since stopped
            # it, as any input does. The connection is idle from now on.
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def _refuse_late(self, load: _ServerLoad) -> None:
        """Answer 503 a request admitted at its head whose body completed only once the
        requests being answered were at the bound (heads sent first, bodies after, as
        some clients send them): counted only now, it is refused now. Its application,
        still waiting for the body, hears that its client left and answers nobody; the
        503 goes out in its place, and the connection closes after it."""
        cycle = self.cycle
        if cycle is None or cycle.response_started or _answered_when_busy(self.url):
            return
        cycle.disconnected = True
        cycle.message_event.set()
        headers, body = _busy_answer(self.scope.get("path"))
        head = b"".join(name + b": " + value + b"\r\n" for name, value in headers)
        self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\n" + head + b"\r\n" + body)
        self.transport.close()
        load.note_refusal(self.loop, self.logger, self.max_requests)

    def on_response_complete(self) -> None:
        load = self._load
        if self._unanswered and load is not None:
            self._unanswered -= 1
            if not self._unanswered:
                load.answering -= 1
        super().on_response_complete()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stall is None:
            self._stall = self.loop.call_later(self.write_stall_seconds, self._write_stalled)

    def resume_writing(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        super().resume_writing()

    def _write_stalled(self) -> None:
        self._stall = None
        self.logger.warning("Response not read in time.")
        self.transport.abort()  # what waits to be sent is dropped: nobody reads it

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._deadline, self._stall):
            if timer is not None:
                timer.cancel()
        self._deadline = self._stall = None
        if self._watch is not None:
            self._watch.close()
        for cycle in self._cycles_ahead:
            # uvicorn marks only the newest request's cycle as gone; the one being
            # answered ahead of it must know too, or its withdrawal, which answers
            # nobody, would read to uvicorn as an application that forgot to answer.
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        self._cycles_ahead = ()
        load = self._load
        if load is not None:
            load.open.pop(self, None)
            if self._unanswered:
                load.answering -= 1
            self._unanswered = 0
            if not load.open and load.refused:  # the last connection: perhaps a stop
                load.log_refusals(self.loop, self.logger)
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
