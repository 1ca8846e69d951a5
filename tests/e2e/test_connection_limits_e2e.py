"""Slow, idle and oversized clients against the real server: dropped on time or
refused, others still served.

Deadline tests run the production serve path with one-second read deadlines
(`tests.e2e.limits_server`); the crowd and head tests run plain `mymcp` with its
defaults. Every wait is a socket timeout used as a deadline: a dropped connection ends
the wait early with EOF; a kept one runs into the timeout.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.server import READY_MARKER, STARTUP_TIMEOUT, RunningServer, Sandbox

STATELESS_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}

REPO = Path(__file__).resolve().parents[2]
DEADLINE = 15.0  # far beyond the one-second limits, far below "forever"

pytestmark = pytest.mark.slow


@contextmanager
def serve_module(
    sandbox: Sandbox, module: str, extra_env: dict[str, str] | None = None
) -> Iterator[RunningServer]:
    """Run `python -m <module>` like tests.e2e.server.serve runs `mymcp`."""
    process = subprocess.Popen(
        [sys.executable, "-m", module],
        env=sandbox.environ(extra_env),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    output: list[str] = []
    ready = threading.Event()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            output.append(line)
            if READY_MARKER in line:
                ready.set()
        ready.set()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        ready.wait(STARTUP_TIMEOUT)
        if process.poll() is not None or not any(READY_MARKER in line for line in output):
            raise RuntimeError(f"{module} did not start:\n" + "".join(output))
        yield RunningServer(f"http://127.0.0.1:{sandbox.port}/mcp", sandbox.port, process, output)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)
        reader.join(timeout=15)


@pytest.fixture
def short_limits_server(sandbox: Sandbox) -> Iterator[RunningServer]:
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve_module(sandbox, "tests.e2e.limits_server") as server:
        yield server


def _connect(port: int) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
    connection.settimeout(DEADLINE)
    return connection


def _closed_by_server(connection: socket.socket) -> bool:
    """Read until EOF; True if the server closed the connection within the deadline."""
    try:
        while connection.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
    return True


def _health(port: int) -> bytes:
    with _connect(port) as connection:
        connection.sendall(
            f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
        )
        reply = b""
        while chunk := connection.recv(4096):
            reply += chunk
    return reply


def _initialize_request(port: int) -> tuple[bytes, bytes]:
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}}
    ).encode()
    head = (
        "POST /mcp HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        "Accept: application/json, text/event-stream\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head, body


def test_stalled_clients_are_dropped_and_a_normal_client_is_still_served(
    short_limits_server: RunningServer,
) -> None:
    port = short_limits_server.port
    head, body = _initialize_request(port)
    silent = _connect(port)  # connects and never sends a byte
    half_headers = _connect(port)
    half_headers.sendall(head[:30])  # a slowloris: part of the request line, then nothing
    half_body = _connect(port)
    half_body.sendall(head + body[:5])  # complete headers, then a stalled body
    try:
        # While all three hold their sockets, a normal client is answered.
        assert _health(port).startswith(b"HTTP/1.1 200")
        for stalled in (silent, half_headers, half_body):
            assert _closed_by_server(stalled)
        assert _health(port).startswith(b"HTTP/1.1 200")
    finally:
        for stalled in (silent, half_headers, half_body):
            stalled.close()
    assert short_limits_server.process.poll() is None


def test_an_idle_keep_alive_connection_is_closed_after_its_response(
    short_limits_server: RunningServer,
) -> None:
    port = short_limits_server.port
    head, body = _initialize_request(port)
    with _connect(port) as connection:
        connection.sendall(head + body)
        reply = connection.recv(65536)
        assert reply.startswith(b"HTTP/1.1 200")
        assert _closed_by_server(connection)


def test_a_client_that_keeps_sending_requests_is_never_cut_off(
    short_limits_server: RunningServer,
) -> None:
    # Requests back to back on one connection for several times the one-second limits:
    # the deadlines bound each request's phases, not the connection's life.
    port = short_limits_server.port
    request = f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    busy_until = time.monotonic() + 3.5
    with _connect(port) as connection:
        while time.monotonic() < busy_until:
            connection.sendall(request)
            reply = b""
            while not reply.endswith(b'{"status":"ok"}'):
                chunk = connection.recv(4096)
                assert chunk, "the server closed a busy connection"
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 200")


def _stall(port: int, kind: int) -> socket.socket:
    """A connection that stalls: silent, inside its request line, or inside its body."""
    connection = _connect(port)
    head, body = _initialize_request(port)
    if kind == 1:
        connection.sendall(head[:30])
    elif kind == 2:
        connection.sendall(head + body[:5])
    return connection


def test_hundreds_of_stalled_clients_never_lock_out_a_normal_one(
    anonymous_server: RunningServer,
) -> None:
    # More stalled connections than requests answered at once (128) and than open
    # connections kept (256), all within their ten-second read deadlines.
    port = anonymous_server.port
    stalled = [_stall(port, number % 3) for number in range(300)]
    try:
        for _ in range(3):
            assert _health(port).startswith(b"HTTP/1.1 200")
        head, body = _initialize_request(port)
        with _connect(port) as client:
            client.sendall(head + body)
            assert client.recv(65536).startswith(b"HTTP/1.1 200")
    finally:
        for connection in stalled:
            connection.close()
    assert anonymous_server.process.poll() is None


@pytest.mark.parametrize(
    "head",
    [f"X-Big: {'a' * 200_000}\r\n", "".join(f"X-Many-{i}: v\r\n" for i in range(5000))],
    ids=["one-200-KB-field", "5000-fields"],
)
def test_an_oversized_request_head_is_refused_431(
    anonymous_server: RunningServer, head: str
) -> None:
    port = anonymous_server.port
    with _connect(port) as connection:
        connection.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{head}\r\n".encode())
        reply = b""
        try:
            while chunk := connection.recv(4096):
                reply += chunk
        except ConnectionResetError:
            pass  # closed while the rest of the head was still arriving
    assert reply.startswith(b"HTTP/1.1 431 ")
    assert _health(port).startswith(b"HTTP/1.1 200")


def _exchange(port: int, request: bytes) -> bytes:
    with _connect(port) as connection:
        connection.sendall(request)
        reply = b""
        while chunk := connection.recv(4096):
            reply += chunk
    return reply


@pytest.mark.parametrize("path", ["/mcp", "/health"])
def test_an_http_1_1_request_without_host_is_refused_400(
    anonymous_server: RunningServer, path: str
) -> None:
    port = anonymous_server.port
    hostless = f"GET {path} HTTP/1.1\r\nConnection: close\r\n\r\n".encode()
    reply = _exchange(port, hostless)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), reply
    assert json.loads(body)["error"] == {
        "code": -32600,
        "message": "An HTTP/1.1 request needs a Host header",
    }
    # HTTP/1.0 had no Host: such a request is still answered.
    old = _exchange(port, b"GET /health HTTP/1.0\r\n\r\n")
    assert old.split(b"\r\n", 1)[0].endswith(b" 200 OK"), old


def test_a_console_request_without_host_is_refused_400_over_http_1_1_only(
    anonymous_server: RunningServer,
) -> None:
    port = anonymous_server.port
    hostless = b"GET /console/approvals HTTP/1.1\r\nConnection: close\r\n\r\n"
    head, _, body = _exchange(port, hostless).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 "), head
    assert b"content-security-policy: default-src 'none'" in head.lower()
    assert b"needs a Host header" in body
    # An HTTP/1.0 request may lack a Host, but the console answers only requests naming it.
    old = _exchange(port, b"GET /console/approvals HTTP/1.0\r\n\r\n")
    assert old.split(b"\r\n", 1)[0].endswith(b" 403 Forbidden"), old


# A handler that reports it is running by connecting to the test, then never returns.
STUCK_PLUGIN = """
import os
import socket
import time


def _handler(arguments):
    socket.create_connection(("127.0.0.1", int(os.environ["STUCK_REPORT_PORT"]))).close()
    time.sleep(3600)
"""


def test_sigterm_stops_the_server_while_a_handler_never_returns(sandbox: Sandbox) -> None:
    plugin_path = sandbox.serve_plugin("stuck", STUCK_PLUGIN)
    with socket.create_server(("127.0.0.1", 0)) as reports:
        reports.settimeout(DEADLINE)
        env = {**plugin_path, "STUCK_REPORT_PORT": str(reports.getsockname()[1])}
        with serve_module(sandbox, "tests.e2e.limits_server", env) as server:
            body = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "stuck__tool_0", "arguments": {}, "_meta": STATELESS_META},
                }
            ).encode()
            head = (
                "POST /mcp HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{server.port}\r\n"
                "Accept: application/json, text/event-stream\r\n"
                "Content-Type: application/json\r\n"
                "MCP-Protocol-Version: 2026-07-28\r\n"
                "Mcp-Method: tools/call\r\nMcp-Name: stuck__tool_0\r\n"
                f"Content-Length: {len(body)}\r\n\r\n"
            ).encode()
            with _connect(server.port) as client:
                client.sendall(head + body)
                reports.accept()[0].close()  # the handler runs, and will not return
                server.process.terminate()
                status = server.process.wait(timeout=60)
                reply = b""
                while chunk := client.recv(4096):
                    reply += chunk
    # Given up on once the grace is over, and told so in the protocol's words.
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503 "), reply
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32603, "message": "The server is stopping"},
    }
    log = "".join(server.output)
    assert status == 0, log
    assert "Traceback" not in log
    assert "Exception in ASGI application" not in log
    assert "request_cancelled reason=server_stopping" in log
    assert "outcome=threads_left_running count=1" in log
