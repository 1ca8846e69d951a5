"""The bounded HTTP protocol driven byte by byte: head bounds, the 503 that counts only
requests being answered, the cap on open connections, and upgrades served as plain HTTP.

Each test runs uvicorn's protocol (our subclass) on a real event loop over in-memory
transports, with an application that answers at once or holds its answer until the
test releases it, so every state (idle, half-sent, being answered) is reached exactly.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import ServerState

from mymcp.transport import ConnectionLimits
from mymcp.transport._connections import BoundedHttpToolsProtocol


class MemoryTransport(asyncio.Transport):
    """A connection whose bytes the test reads; closing it tells the protocol, as the
    event loop does, on the next iteration."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.eof = False  # the server shut its sending side
        self.reading = True
        self.aborted = asyncio.Event()  # closed dropping what was still to be sent
        self.closing = asyncio.Event()
        self.protocol: asyncio.Protocol | None = None

    def send(self, data: bytes) -> None:
        """The client sends `data`."""
        assert self.protocol is not None
        self.protocol.data_received(data)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.closing.set()
            assert self.protocol is not None
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def abort(self) -> None:
        self.aborted.set()
        self.close()

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        addresses = {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}
        return addresses.get(name, default)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


class Held:
    """An ASGI app that answers 200 with the body's length, each answer held until the
    test releases it (or at once when not holding)."""

    def __init__(self, *, holding: bool) -> None:
        self.holding = holding
        self.release = asyncio.Event()
        self.started = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        self.started += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.holding:
            await self.release.wait()
        text = str(len(body)).encode()
        headers = [(b"content-length", str(len(text)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": text})


class Server:
    """One uvicorn server's shared state, and connections made to it."""

    def __init__(self, app: Held, limits: ConnectionLimits) -> None:
        options = limits.uvicorn_options()
        self.config = Config(app, log_config=None, lifespan="off", **options)
        self.config.load()
        self.protocol_class: type[BoundedHttpToolsProtocol] = options["http"]
        self.state = ServerState()

    def connect(self) -> MemoryTransport:
        loop = asyncio.get_running_loop()
        protocol = self.protocol_class(self.config, self.state, {}, _loop=loop)
        transport = MemoryTransport()
        transport.protocol = protocol
        protocol.connection_made(transport)
        return transport


async def settle() -> None:
    """Let every ready callback and task run until nothing is left to do."""
    for _ in range(20):
        await asyncio.sleep(0)


def request(path: str = "/", *, headers: str = "", body: bytes = b"") -> bytes:
    head = f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n{headers}"
    return f"{head}content-length: {len(body)}\r\n\r\n".encode() + body


def status(transport: MemoryTransport) -> bytes:
    return bytes(transport.written).split(b"\r\n", 1)[0]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


LIMITS = ConnectionLimits(max_requests=2, max_connections=4)


# --- request heads ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "head",
    [
        "".join(f"x-field-{i}: v\r\n" for i in range(101)),  # 101 fields
        f"x-big: {'a' * (64 * 1024)}\r\n",  # one field beyond 64 KiB
    ],
    ids=["too-many-fields", "too-large"],
)
def test_a_head_beyond_its_bounds_is_answered_431_and_never_reaches_the_app(head: str) -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        connection.send(request(headers=head))
        await settle()
        assert status(connection) == b"HTTP/1.1 431 Request Header Fields Too Large"
        assert connection.eof  # answered and done; the client closes (or the deadline)
        assert not connection.reading  # a client that keeps sending costs nothing
        # Whatever still arrives is dropped unread, not parsed as another request.
        connection.send(request())
        await settle()
        assert bytes(connection.written).count(b"HTTP/1.1") == 1
        assert app.started == 0

    run(scenario)


def test_a_head_within_its_bounds_is_served() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        head = "".join(f"x-field-{i}: {'v' * 500}\r\n" for i in range(95))
        connection.send(request(headers=head))
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"

    run(scenario)


def test_a_header_value_sent_a_piece_at_a_time_is_cut_off_at_the_bound() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        connection.send(b"POST / HTTP/1.1\r\nhost: 127.0.0.1:8000\r\nx-slow: ")
        pieces = 0
        while not connection.eof and pieces < 1000:
            connection.send(b"a" * 1024)
            pieces += 1
        # Refused as soon as the head passed 64 KiB, not when the value ends.
        assert pieces == 64
        assert status(connection) == b"HTTP/1.1 431 Request Header Fields Too Large"
        assert not connection.reading
        await settle()
        assert app.started == 0

    run(scenario)


def test_a_large_body_in_the_same_packet_as_a_small_head_is_no_large_head() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        body = b"b" * (200 * 1024)
        connection.send(request(body=body))
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).endswith(str(len(body)).encode())

    run(scenario)


def _chunked_head() -> bytes:
    return b"POST / HTTP/1.1\r\nhost: 127.0.0.1:8000\r\ntransfer-encoding: chunked\r\n\r\n"


@pytest.mark.parametrize(
    "trailers",
    [
        # A field is read once the next one begins: the 102nd shows that there are 101.
        [b"x-t%d: v\r\n" % i for i in range(110)],
        [b"x-t%d: %s\r\n" % (i, b"v" * 1000) for i in range(70)],  # beyond 64 KiB
    ],
    ids=["too-many-fields", "too-large"],
)
def test_trailer_fields_beyond_the_head_s_bounds_close_the_connection(
    trailers: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        connection.send(_chunked_head() + b"2\r\n{}\r\n0\r\n")
        sent = 0
        for trailer in trailers:
            if connection.closed:
                break
            connection.send(trailer)
            sent += 1
        assert connection.closed
        assert sent < len(trailers)  # stopped at the bound, not when the client stopped
        assert "Request trailer fields too large." in caplog.text

    run(scenario)


def test_trailer_fields_within_the_bounds_are_served() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        trailers = b"".join(b"x-t%d: v\r\n" % i for i in range(100))
        connection.send(_chunked_head() + b"2\r\n{}\r\n0\r\n" + trailers + b"\r\n")
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).endswith(b"2")

    run(scenario)


def test_trailer_fields_never_reach_the_request_s_headers() -> None:
    # A credential or session id sent after the body must not act as a header, even
    # when it arrives in the same read as the head (the parser has then added it before
    # the application looks at the headers).
    seen: list[list[tuple[bytes, bytes]]] = []
    app = Held(holding=False)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        seen.append(list(scope["headers"]))
        await app(scope, receive, send)

    async def scenario() -> None:
        connection = Server(recording, ConnectionLimits()).connect()  # type: ignore[arg-type]
        trailers = b"authorization: Bearer t\r\nmcp-session-id: s\r\n\r\n"
        chunked = _chunked_head() + b"2\r\n{}\r\n0\r\n" + trailers
        connection.send(chunked + request(headers="x-next: 1\r\n"))  # and one more after
        await settle()
        assert bytes(connection.written).count(b"HTTP/1.1 200 OK") == 2
        names = [[name for name, _ in headers] for headers in seen]
        assert names == [[b"host", b"transfer-encoding"], [b"host", b"x-next", b"content-length"]]

    run(scenario)


def test_a_request_sending_too_much_after_its_head_is_cut_off() -> None:
    # One trailer value that never ends is kept by the parser until it does: the bytes
    # after the head bound it while it is still arriving.
    async def scenario() -> None:
        limits = ConnectionLimits(max_bytes_after_head=256 * 1024)
        connection = Server(Held(holding=False), limits).connect()
        connection.send(_chunked_head() + b"2\r\n{}\r\n0\r\nx-endless: ")
        pieces = 0
        while not connection.closed and pieces < 1000:
            connection.send(b"v" * 1024)
            pieces += 1
        assert connection.closed
        assert pieces == 257  # closed as soon as the request passed the bound

    run(scenario)


async def _answer_unread(scope: Any, receive: Any, send: Any) -> None:
    """Answers without reading the body, as a 415 or a 401 does."""
    headers = [(b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 415, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("pieces", [1, 3])
def test_a_connection_answered_before_its_body_arrived_is_closed_once_idle(pieces: int) -> None:
    async def scenario() -> None:
        server = Server(_answer_unread, LIMITS)  # type: ignore[arg-type]
        server.config.timeout_keep_alive = 0.01  # read by each connection as it is made
        client = server.connect()
        data = request(body=b"x" * 30)
        head, body = data[: data.index(b"\r\n\r\n") + 4], data[data.index(b"\r\n\r\n") + 4 :]
        client.send(head)
        await settle()
        assert status(client) == b"HTTP/1.1 415 Unsupported Media Type"
        step = len(body) // pieces
        for start in range(0, len(body), step):
            client.send(body[start : start + step])
            await settle()
        await asyncio.wait_for(client.closing.wait(), timeout=10)

    run(scenario)


def test_a_request_following_an_early_answer_in_the_same_read_is_not_timed_as_idle() -> None:
    async def scenario() -> None:
        release = asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            if scope["path"] == "/early":
                await _answer_unread(scope, receive, send)
                return
            while (await receive()).get("more_body"):
                pass
            await release.wait()
            headers = [(b"content-length", b"0")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": b""})

        server = Server(app, LIMITS)  # type: ignore[arg-type]
        client = server.connect()
        first = request("/early", body=b"x" * 30)
        cut = first.index(b"\r\n\r\n") + 4
        client.send(first[:cut])
        await settle()
        assert status(client) == b"HTTP/1.1 415 Unsupported Media Type"
        # The rest of that body and the next request arrive in one read.
        client.send(first[cut:] + request("/slow", body=b"{}"))
        await settle()
        protocol = client.protocol
        assert isinstance(protocol, BoundedHttpToolsProtocol)
        assert protocol.timeout_keep_alive_task is None  # being answered, not idle
        release.set()
        await settle()
        assert bytes(client.written).count(b"HTTP/1.1 200 OK") == 1
        assert protocol.timeout_keep_alive_task is not None  # idle now
        assert not client.closed

    run(scenario)


# --- requests being answered, open connections ---------------------------------------------


def test_idle_and_half_sent_connections_do_not_count_toward_the_503() -> None:
    async def scenario() -> None:
        server = Server(Held(holding=False), ConnectionLimits(max_requests=2))
        idle = [server.connect() for _ in range(10)]
        for half in idle[:5]:
            half.send(b"POST / HTTP/1.1\r\nhost: 12")
        for body_pending in idle[5:]:
            body_pending.send(request(body=b"{}")[:-1])
        client = server.connect()
        client.send(request(body=b"{}"))
        await settle()
        assert status(client) == b"HTTP/1.1 200 OK"

    run(scenario)


def _busy_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines that say requests were refused for being busy."""
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Busy")]


async def _busy_server(limits: ConnectionLimits) -> tuple[Held, Server, list[MemoryTransport]]:
    """A server whose every place for a request being answered is held."""
    app = Held(holding=True)
    server = Server(app, limits)
    held = [server.connect() for _ in range(limits.max_requests)]
    for connection in held:
        connection.send(request(body=b"{}"))
    await settle()
    return app, server, held


@pytest.mark.parametrize("path", ["/mcp", "/console/approvals"])
def test_requests_whose_bodies_complete_beyond_the_bound_are_answered_503(
    path: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Heads first, bodies after (as some clients send them): a request counts once its
    # body is here, and the one that completes beyond the bound is refused then.
    async def scenario() -> None:
        app = Held(holding=True)
        server = Server(app, LIMITS)
        connections = [server.connect() for _ in range(LIMITS.max_requests + 1)]
        data = request(path, body=b"{}")
        for connection in connections:
            connection.send(data[:-2])
        await settle()
        assert app.started == len(connections)  # admitted at their heads
        for connection in connections:
            connection.send(data[-2:])
        await settle()
        *admitted, late = connections
        if path == "/mcp":
            assert status(late) == b"HTTP/1.1 503 Service Unavailable"
            assert late.closed
            body = bytes(late.written).split(b"\r\n\r\n", 1)[1]
            assert json.loads(body)["error"]["code"] == -32603
            assert len(_busy_lines(caplog)) == 1
        else:  # the console is never refused for being busy
            assert late.written == bytearray()
        app.release.set()
        await settle()
        answered = admitted if path == "/mcp" else connections
        assert [status(c) for c in answered] == [b"HTTP/1.1 200 OK"] * len(answered)
        if path == "/mcp":
            assert bytes(late.written).count(b"HTTP/1.1") == 1  # the 503 alone

    with caplog.at_level(logging.WARNING):
        run(scenario)


def test_requests_being_answered_beyond_the_bound_are_answered_503() -> None:
    async def scenario() -> None:
        app, server, busy = await _busy_server(LIMITS)
        late = server.connect()
        late.send(request(body=b"{}"))
        await settle()
        assert status(late) == b"HTTP/1.1 503 Service Unavailable"
        app.release.set()
        await settle()
        assert [status(c) for c in busy] == [b"HTTP/1.1 200 OK"] * 2
        # Answered (and a connection lost mid-answer) no longer count.
        app.release.clear()
        lost = server.connect()
        lost.send(request(body=b"{}"))
        await settle()
        lost.close()
        await settle()
        again = server.connect()
        again.send(request(body=b"{}"))
        await settle()
        assert again.written == b""  # being answered, not refused
        app.release.set()
        await settle()
        assert status(again) == b"HTTP/1.1 200 OK"

    run(scenario)


def test_the_503_for_being_busy_is_json_rpc_on_mcp_and_a_burst_is_logged_in_few_lines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        app, server, _ = await _busy_server(ConnectionLimits(max_requests=2, max_connections=64))
        clock = [1000.0]
        # The protocol reads the loop's clock to space its log lines (and the loop its
        # timers: the line due at the end of a quiet period comes when the clock is past).
        asyncio.get_running_loop().time = lambda: clock[0]  # type: ignore[method-assign]
        refused: list[MemoryTransport] = []
        for path, at in [("/mcp", 1000.0), ("/mcp", 1001.0), ("/other", 1009.0)]:
            clock[0] = at
            late = server.connect()
            late.send(request(path, body=b"{}"))
            await settle()
            refused.append(late)
        head, body = bytes(refused[0].written).split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"content-type: application/json" in head
        assert b"retry-after: 1" in head
        assert json.loads(body) == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32603,
                "message": "Too many requests are being answered; retry shortly",
            },
        }
        head, body = bytes(refused[2].written).split(b"\r\n\r\n", 1)
        assert b"content-type: text/plain" in head
        assert body == b"Too many requests are being answered; retry shortly\n"
        assert all(c.closed for c in refused)
        # The first refusal is logged at once; the next two fall within the quiet period,
        # and are said when it ends.
        assert _busy_lines(caplog) == [
            "Busy: 1 request(s) answered 503, at the bound of 2 being answered."
        ]
        clock[0] = 1010.1
        await settle()
        assert _busy_lines(caplog)[1:] == [
            "Busy: 2 request(s) answered 503, at the bound of 2 being answered."
        ]
        clock[0] = 1030.0  # a later burst begins with a line of its own
        server.connect().send(request("/mcp", body=b"{}"))
        await settle()
        assert _busy_lines(caplog)[2:] == [
            "Busy: 1 request(s) answered 503, at the bound of 2 being answered."
        ]
        assert not any("concurrency" in r.getMessage() for r in caplog.records)
        # The console and the health check are answered all the same, however the
        # request names them; what only looks like them is not.
        for path in ("/health", "/console/approvals", "http://127.0.0.1:8000/health", "/%63onsole"):
            probe = server.connect()
            probe.send(request(path, body=b"{}"))
            await settle()
            assert probe.written == b"", path  # being answered (held like the rest)
        for path in ("/healthz", "/consoles", "/console/../mcp/x", "http://h/mcp"):
            probe = server.connect()
            probe.send(request(path, body=b"{}"))
            await settle()
            if path == "/console/../mcp/x":  # routed to the console, which refuses it itself
                assert probe.written == b"", path
            else:
                assert status(probe) == b"HTTP/1.1 503 Service Unavailable", path
        app.release.set()
        await settle()

    with caplog.at_level(logging.WARNING):
        run(scenario)


def test_refusals_counted_when_the_last_connection_closes_are_logged_then(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A stop closes every connection: refusals still waiting for the end of their quiet
    # period are said then, not lost with the loop.
    async def scenario() -> None:
        app, server, busy = await _busy_server(LIMITS)
        for _ in range(3):
            server.connect().send(request("/mcp", body=b"{}"))
            await settle()
        assert _busy_lines(caplog) == [
            "Busy: 1 request(s) answered 503, at the bound of 2 being answered."
        ]
        for connection in busy:
            connection.close()
        await settle()
        assert _busy_lines(caplog)[1:] == [
            "Busy: 2 request(s) answered 503, at the bound of 2 being answered."
        ]
        app.release.set()
        await settle()

    with caplog.at_level(logging.WARNING):
        run(scenario)


def test_requests_sent_ahead_on_one_connection_count_once() -> None:
    # A connection's requests are answered one after another: a client that sends many
    # at once (pipelining) holds one place among the requests being answered, not many.
    async def scenario() -> None:
        app = Held(holding=True)
        server = Server(app, LIMITS)
        ahead = server.connect()
        ahead.send(b"".join(request(body=b"{}") for _ in range(5)))
        await settle()
        other = server.connect()
        other.send(request(body=b"{}"))
        await settle()
        assert other.written == b""  # being answered, not refused
        third = server.connect()
        third.send(request(body=b"{}"))
        await settle()
        assert status(third) == b"HTTP/1.1 503 Service Unavailable"  # two places taken
        app.release.set()
        await settle()
        assert bytes(ahead.written).count(b"HTTP/1.1 200 OK") == 5
        assert status(other) == b"HTTP/1.1 200 OK"

    run(scenario)


def test_a_response_nobody_reads_closes_its_connection_and_frees_its_place() -> None:
    async def scenario() -> None:
        app = Held(holding=True)
        server = Server(app, ConnectionLimits(max_requests=1, write_stall_seconds=0.01))
        stuck = server.connect()
        stuck.send(request(body=b"{}"))
        await settle()
        assert stuck.protocol is not None
        stuck.protocol.pause_writing()  # what the transport does once its buffer is full
        # The client read nothing in time (the bound only guards against a hang).
        await asyncio.wait_for(stuck.aborted.wait(), 30)
        await settle()
        app.release.set()
        fresh = server.connect()
        fresh.send(request(body=b"{}"))
        await settle()
        assert status(fresh) == b"HTTP/1.1 200 OK"  # the place was given back

    run(scenario)


def test_a_response_the_client_reads_again_is_not_cut_off() -> None:
    async def scenario() -> None:
        server = Server(Held(holding=False), ConnectionLimits(write_stall_seconds=0.01))
        slow = server.connect()
        protocol = slow.protocol
        assert isinstance(protocol, BoundedHttpToolsProtocol)
        protocol.pause_writing()
        protocol.resume_writing()  # the client read: the buffer drained below its mark
        assert protocol._stall is None
        slow.send(request(body=b"{}"))
        await settle()
        assert status(slow) == b"HTTP/1.1 200 OK"
        assert not slow.aborted.is_set()

    run(scenario)


def test_at_the_cap_a_new_connection_closes_the_oldest_one_not_being_answered() -> None:
    async def scenario() -> None:
        app = Held(holding=True)
        server = Server(app, LIMITS)  # at most 4 open
        answering = server.connect()
        answering.send(request(body=b"{}"))
        silent = server.connect()
        half = server.connect()
        half.send(b"POST / HTTP/1.1\r\nhost: 127")
        served = server.connect()
        await settle()
        assert not any(c.closed for c in (answering, silent, half, served))
        newest = server.connect()
        await settle()
        assert silent.closed  # the oldest without a request being answered
        assert not any(c.closed for c in (answering, half, served, newest))
        server.connect()
        await settle()
        assert half.closed
        assert not answering.closed
        app.release.set()
        await settle()
        assert status(answering) == b"HTTP/1.1 200 OK"

    run(scenario)


def test_when_every_connection_is_being_answered_a_new_one_is_refused() -> None:
    async def scenario() -> None:
        app = Held(holding=True)
        server = Server(app, ConnectionLimits(max_requests=8, max_connections=2))
        busy = [server.connect() for _ in range(2)]
        for connection in busy:
            connection.send(request(body=b"{}"))
        await settle()
        refused = server.connect()
        await settle()
        assert status(refused) == b"HTTP/1.1 503 Service Unavailable"
        assert refused.closed
        assert not any(c.closed for c in busy)
        app.release.set()
        await settle()

    run(scenario)


# --- upgrades -----------------------------------------------------------------------------


def test_a_websocket_upgrade_is_answered_as_plain_http_without_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        upgrade = (
            b"GET / HTTP/1.1\r\nhost: 127.0.0.1:8000\r\nconnection: Upgrade\r\n"
            b"upgrade: websocket\r\nsec-websocket-version: 13\r\n"
            b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        )
        # What follows the head is the other protocol's data, never a request.
        connection.send(upgrade + request())
        connection.send(b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58")  # a frame
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).count(b"HTTP/1.1") == 1
        assert connection.closed
        assert app.started == 1

    with caplog.at_level(logging.DEBUG):
        run(scenario)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


_H2C = (
    "connection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\n"
    "http2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
)
_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "piece-by-piece"])
def test_an_upgrade_offered_with_a_body_is_declined_and_the_body_read(split: bool) -> None:
    # Java's HTTP client offers h2c this way on the first request to a plain-HTTP server.
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        body = b'{"jsonrpc":"2.0","id":1,"method":"initialize"}'
        sent = request(headers=_H2C, body=body)
        if split:
            head_end = sent.index(b"\r\n\r\n") + 4
            connection.send(sent[:head_end])
            await settle()
            for index in range(head_end, len(sent), 7):
                connection.send(sent[index : index + 7])
            connection.send(_PREFACE)  # what a client might send next is never read
        else:
            connection.send(sent + _PREFACE)
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).endswith(str(len(body)).encode())
        assert bytes(connection.written).count(b"HTTP/1.1") == 1
        assert connection.closed
        assert app.started == 1

    run(scenario)


def test_an_upgrade_request_whose_body_never_comes_is_cut_off_at_the_body_deadline() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits(body_seconds=0.01)).connect()
        sent = request(headers=_H2C, body=b"0123456789")
        connection.send(sent[:-4])  # six of the ten bytes
        await asyncio.wait_for(connection.closing.wait(), 30)
        await settle()
        assert b"200 OK" not in bytes(connection.written)  # nobody answered half a body

    run(scenario)


_CHUNKED_UPGRADE = (
    "POST / HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n" + _H2C + "transfer-encoding: chunked\r\n\r\n"
).encode()


@pytest.mark.parametrize("split", [False, True], ids=["one-packet", "byte-by-byte"])
def test_a_chunked_upgrade_request_has_its_body_read(split: bool) -> None:
    # Java's client sends a body of unknown length this way.
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        body = b"3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\ntrailer: x\r\n\r\n"
        if split:
            connection.send(_CHUNKED_UPGRADE)
            for index in range(len(body)):
                connection.send(body[index : index + 1])
        else:  # followed by what is never read: a preface, or a pipelined request
            connection.send(_CHUNKED_UPGRADE + body + request(body=b"hello") + _PREFACE)
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).endswith(b"\r\n\r\n7")  # "abcdefg"
        assert bytes(connection.written).count(b"HTTP/1.1") == 1
        assert connection.closed

    run(scenario)


def test_a_chunked_upgrade_body_that_is_no_http_closes_the_connection() -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        connection.send(_CHUNKED_UPGRADE + b"zz\r\nnot a chunk\r\n")
        await settle()
        assert connection.closed
        assert b"200 OK" not in bytes(connection.written)

    run(scenario)


def test_upgrade_requests_still_sending_their_bodies_are_not_being_answered() -> None:
    # Otherwise a few slow senders would make the server answer everyone else 503.
    async def scenario() -> None:
        app = Held(holding=False)
        server = Server(app, LIMITS)  # two requests being answered at most
        slow = [server.connect() for _ in range(3)]
        for connection in slow:
            connection.send(request(headers=_H2C, body=b"0123456789")[:-5])
        await settle()
        fresh = server.connect()
        fresh.send(request(body=b"{}"))
        await settle()
        assert status(fresh) == b"HTTP/1.1 200 OK"
        for connection in slow:  # and each is answered once its body is complete
            connection.send(b"56789")
        await settle()
        assert [status(connection) for connection in slow] == [b"HTTP/1.1 200 OK"] * 3

    run(scenario)


@pytest.mark.parametrize(
    "after",
    [
        b"GET / HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n",
        b"CONNECT a:1 HTTP/1.1\r\nhost: a:1\r\n\r\n",
    ],
    ids=["another-upgrade", "connect"],
)
def test_what_follows_a_chunked_upgrade_body_is_never_read(after: bytes) -> None:
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        connection.send(_CHUNKED_UPGRADE + b"3\r\nabc\r\n0\r\n\r\n" + after)
        await settle()
        assert status(connection) == b"HTTP/1.1 200 OK"
        assert bytes(connection.written).endswith(b"\r\n\r\n3")
        assert connection.closed

    run(scenario)


@pytest.mark.parametrize("coding", ["gzip", "identity", "xchunked", "chunked, gzip"])
def test_an_upgrade_request_whose_body_cannot_be_framed_is_refused(coding: str) -> None:
    # Without chunked last, HTTP cannot tell where such a body ends.
    async def scenario() -> None:
        app = Held(holding=False)
        connection = Server(app, ConnectionLimits()).connect()
        head = (
            "POST / HTTP/1.1\r\nhost: 127.0.0.1:8000\r\n"
            + _H2C
            + f"transfer-encoding: {coding}\r\n\r\n"
        )
        connection.send(head.encode() + b"3\r\nabc\r\n0\r\n\r\n")
        await settle()
        assert status(connection) == b"HTTP/1.1 400 Bad Request"
        assert bytes(connection.written).count(b"HTTP/1.1") == 1
        assert connection.closed

    run(scenario)


class _Unread:
    """An app that answers without reading the body."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await asyncio.Event().wait()  # held until the connection goes


def test_an_upgrade_body_nobody_reads_stops_the_reading_at_the_high_water_mark() -> None:
    async def scenario() -> None:
        connection = Server(_Unread(), ConnectionLimits()).connect()  # type: ignore[arg-type]
        head = request(headers=_H2C, body=b"x" * 200_000)[:-200_000]
        connection.send(head + b"x" * 70_000)
        await settle()
        assert connection.reading is False
        connection.close()
        await settle()

    run(scenario)
