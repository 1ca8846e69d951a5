"""A client's cancellation stops a running call over HTTP, in both protocol eras.

In the handshake era the client posts `notifications/cancelled` in its session; in the
stateless era it closes the call's connection. Either way the tool's coroutine is
cancelled, the audit records the call as `cancelled`, and the server stays healthy. The
official SDK clients (Python and TypeScript) cancel a call that outlives its timeout, so
they drive the tests; raw HTTP covers what they never do (another session's cancel,
unknown ids, pipelining).

The server runs in-process under real uvicorn with the production HTTP protocol, so the
test can see inside the tool it serves.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from mymcp.app import create_host_app
from mymcp.auth import Authenticator
from mymcp.auth._router import RoutedAdapter
from mymcp.config import HostConfiguration, ServerSettings, parse_host_configuration
from mymcp.governance import AuditLog, Governance, Policy, open_audit, read_records
from mymcp.host import Host
from mymcp.plugin import structured_result
from mymcp.runtime import compose_runtime
from mymcp.transport._jsonrpc import REQUEST_ID_IN_USE
from tests.config.helpers import to_toml
from tests.e2e.conftest import LogLines
from tests.e2e.inprocess import serving
from tests.e2e.node_clients import node_clients
from tests.e2e.server import free_port
from tests.e2e.test_approval_e2e import NameIsToken
from tests.log_capture import attached
from tests.synthetic import contribution, external_bindings, tool

pytestmark = pytest.mark.slow

HANDSHAKE = "2025-11-25"
STATELESS = "2026-07-28"
WAIT_SECONDS = 15.0
CANCEL_PROBE = Path(__file__).with_name("ts_cancel_probe.mjs")


@dataclass
class Slow:
    """The server and what its two tools did: `slow__wait` waits until cancelled,
    `slow__block` (a synchronous handler, on a worker thread) until released."""

    url: str
    audit: AuditLog
    audit_dir: Path
    started: threading.Event = field(default_factory=threading.Event)
    cancelled: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def call_records(self) -> list[dict[str, Any]]:
        self.audit.commit()
        return [r for r in read_records(self.audit_dir) if r["event"] == "tool_call"]


@pytest.fixture
def slow(tmp_path: Path) -> Iterator[Slow]:
    port = free_port()
    document = {
        "schema_version": 8,
        "server": {"address": "127.0.0.1", "port": port},
        "audit": {"directory": str(tmp_path / "audit")},
    }
    configuration = parse_host_configuration(to_toml(document).encode())
    audit = open_audit(configuration)
    assert audit is not None
    state = Slow(f"http://127.0.0.1:{port}/mcp", audit, tmp_path / "audit")

    async def wait(arguments: dict[str, Any]) -> dict[str, Any]:
        state.started.set()
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            state.cancelled.set()
            raise
        raise AssertionError("never reached")

    def block(arguments: dict[str, Any]) -> dict[str, Any]:
        state.started.set()
        state.release.wait(WAIT_SECONDS)
        return structured_result({"released": True})

    plugin = contribution("slow", tool("slow", "wait", wait), tool("slow", "block", block))
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    host = Host(
        HostConfiguration(server=ServerSettings("127.0.0.1", port)),
        runtime,
        Authenticator(adapter=RoutedAdapter("op", NameIsToken()), anonymous_enabled=False),
        Governance(Policy(None, runtime), audit),
    )
    try:
        with serving(create_host_app(host), port):
            yield state
    finally:
        state.release.set()  # a blocked worker thread must not outlive the test


async def _sdk_call_times_out(url: str, mode: str) -> str:
    """Call `slow__wait` with the official client in `mode`, which gives up after a
    short timeout and cancels the call; returns the era it negotiated."""
    async with (
        httpx2.AsyncClient(headers={"Authorization": "Bearer alice"}) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        with pytest.raises(MCPError):
            await client.call_tool("slow__wait", {}, read_timeout_seconds=0.5)
        # The same client goes on working once its call was withdrawn.
        tools = await client.list_tools()
        assert "slow__wait" in [t.name for t in tools.tools]
        return str(client.protocol_version)


@pytest.mark.parametrize(
    ("mode", "era", "reason"),
    [("legacy", HANDSHAKE, "client_cancelled"), ("auto", STATELESS, "connection_closed")],
)
def test_the_sdk_clients_cancellation_stops_the_running_tool(
    slow: Slow, server_log: LogLines, mode: str, era: str, reason: str
) -> None:
    assert anyio.run(_sdk_call_times_out, slow.url, mode) == era
    assert slow.cancelled.wait(WAIT_SECONDS)
    assert server_log.wait_for(f"method=tools/call outcome=cancelled reason={reason}")
    (record,) = [r for r in slow.call_records() if r["tool"] == "slow__wait"]
    assert record["outcome"] == "cancelled"
    assert record["principal"] == "operator:alice"
    assert ("session" in record) == (era == HANDSHAKE)


@pytest.mark.parametrize(
    ("mode", "era", "reason"),
    [("legacy", "legacy", "client_cancelled"), ("auto", "modern", "connection_closed")],
)
def test_the_typescript_clients_cancellation_stops_the_running_tool(
    slow: Slow, server_log: LogLines, mode: str, era: str, reason: str
) -> None:
    finished = node_clients().probe([slow.url, mode, "alice"], script=CANCEL_PROBE)
    assert finished.returncode == 0, finished.stderr
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert (outcome["era"], outcome["outcome"]) == (era, "timed_out")
    assert "slow__wait" in outcome["tools"]  # the same client goes on working
    assert slow.cancelled.wait(WAIT_SECONDS)
    assert server_log.wait_for(f"method=tools/call outcome=cancelled reason={reason}")


def _post(http: httpx.Client, url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    base = {
        "authorization": "Bearer alice",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    return http.post(url, content=json.dumps(body), headers={**base, **headers})


def _open_session(http: httpx.Client, url: str, operator: str = "alice") -> dict[str, str]:
    """A handshake session's headers, after `initialize` and `initialized`."""
    initialize = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": HANDSHAKE,
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
    opened = _post(http, url, initialize, authorization=f"Bearer {operator}")
    assert opened.status_code == 200
    session = {
        "authorization": f"Bearer {operator}",
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": HANDSHAKE,
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert _post(http, url, initialized, **session).status_code == 202
    return session


def _wait_call(request_id: int) -> dict[str, Any]:
    """A handshake-era call of `slow__wait`, which runs until it is cancelled."""
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "slow__wait", "arguments": {}},
    }


def _cancel(request_id: object) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": request_id, "reason": "the user changed their mind"},
    }


def test_only_the_calls_own_session_can_cancel_it_and_it_is_answered_as_cancelled(
    slow: Slow, server_log: LogLines
) -> None:
    replies: list[httpx.Response] = []
    with httpx.Client(timeout=WAIT_SECONDS) as http:
        alice = _open_session(http, slow.url)
        other = _open_session(http, slow.url)
        bob = _open_session(http, slow.url, "bob")
        call = _wait_call(7)
        running = threading.Thread(
            target=lambda: replies.append(_post(http, slow.url, call, **alice))
        )
        running.start()
        try:
            assert slow.started.wait(WAIT_SECONDS)
            # Another session of the same person, another person, an id of another
            # type, an unknown id, and no id at all: none of them touches the call.
            for session, request_id in [(other, 7), (bob, 7), (alice, "7"), (alice, 8)]:
                assert _post(http, slow.url, _cancel(request_id), **session).status_code == 202
            no_id = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
            assert _post(http, slow.url, no_id, **alice).status_code == 202
            assert not slow.cancelled.is_set()
            assert replies == []
            # Its own session's cancel stops it.
            assert _post(http, slow.url, _cancel(7), **alice).status_code == 202
            assert slow.cancelled.wait(WAIT_SECONDS)
        finally:
            running.join(WAIT_SECONDS)
        (reply,) = replies
        assert reply.status_code == 200
        assert reply.json() == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {"code": -32800, "message": "Request cancelled"},
        }
        # The id is free again, and cancelling it now (finished) changes nothing.
        assert _post(http, slow.url, _cancel(7), **alice).status_code == 202
        listed = _post(http, slow.url, {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}, **alice)
        assert listed.status_code == 200
        assert "result" in listed.json()
    assert server_log.wait_for("response id=7 method=tools/call outcome=cancelled")
    assert [r["outcome"] for r in slow.call_records()] == ["cancelled"]


def test_a_request_reusing_a_running_requests_id_in_its_session_is_refused(
    slow: Slow, server_log: LogLines
) -> None:
    replies: list[httpx.Response] = []
    call = _wait_call(5)
    listing = {"jsonrpc": "2.0", "id": 5, "method": "tools/list"}
    with httpx.Client(timeout=WAIT_SECONDS) as http:
        alice = _open_session(http, slow.url)
        other = _open_session(http, slow.url)
        running = threading.Thread(
            target=lambda: replies.append(_post(http, slow.url, call, **alice))
        )
        running.start()
        try:
            assert slow.started.wait(WAIT_SECONDS)
            reused = _post(http, slow.url, listing, **alice)
            assert reused.status_code == 400
            assert reused.json() == {
                "jsonrpc": "2.0",
                "id": 5,
                "error": {"code": -32600, "message": REQUEST_ID_IN_USE},
            }
            # Another session's ids are its own.
            assert "result" in _post(http, slow.url, listing, **other).json()
            # The cancel still names the call that holds the id.
            assert _post(http, slow.url, _cancel(5), **alice).status_code == 202
            assert slow.cancelled.wait(WAIT_SECONDS)
        finally:
            running.join(WAIT_SECONDS)
        (reply,) = replies
        assert reply.json()["error"]["code"] == -32800
        # Free again once answered.
        assert "result" in _post(http, slow.url, listing, **alice).json()
    assert [r["outcome"] for r in slow.call_records()] == ["cancelled"]


def test_deleting_a_session_withdraws_its_running_calls_only(
    slow: Slow, server_log: LogLines
) -> None:
    replies: list[httpx.Response] = []
    call = _wait_call(3)
    with httpx.Client(timeout=WAIT_SECONDS) as http:
        alice = _open_session(http, slow.url)
        other = _open_session(http, slow.url)
        running = threading.Thread(
            target=lambda: replies.append(_post(http, slow.url, call, **alice))
        )
        running.start()
        try:
            assert slow.started.wait(WAIT_SECONDS)
            # Ending another session of the same person leaves the call running.
            assert http.delete(slow.url, headers=other).status_code == 204
            assert not slow.cancelled.is_set()
            assert http.delete(slow.url, headers=alice).status_code == 204
            assert slow.cancelled.wait(WAIT_SECONDS)
        finally:
            running.join(WAIT_SECONDS)
    (reply,) = replies
    assert reply.json() == {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32800, "message": "Request cancelled"},
    }
    assert server_log.wait_for(
        "response id=3 method=tools/call outcome=cancelled reason=session_deleted"
    )
    assert [r["outcome"] for r in slow.call_records()] == ["cancelled"]


def test_a_cancelled_synchronous_call_is_answered_at_once_and_its_thread_finishes(
    slow: Slow,
) -> None:
    replies: list[httpx.Response] = []
    with httpx.Client(timeout=WAIT_SECONDS) as http:
        alice = _open_session(http, slow.url)
        call = {
            "jsonrpc": "2.0",
            "id": "block-1",
            "method": "tools/call",
            "params": {"name": "slow__block", "arguments": {}},
        }
        running = threading.Thread(
            target=lambda: replies.append(_post(http, slow.url, call, **alice))
        )
        running.start()
        assert slow.started.wait(WAIT_SECONDS)
        assert _post(http, slow.url, _cancel("block-1"), **alice).status_code == 202
        # Answered while the handler still blocks: a thread cannot be stopped, but
        # nobody waits for it.
        running.join(WAIT_SECONDS)
        (reply,) = replies
        assert reply.json()["error"]["code"] == -32800
        assert not slow.release.is_set()
        slow.release.set()
    assert [r["outcome"] for r in slow.call_records()] == ["cancelled"]


def test_a_stateless_call_whose_client_stays_is_not_cancelled(slow: Slow) -> None:
    """Only a closed connection withdraws a stateless call: one whose client waits gets
    its result, even with other connections coming and going meanwhile."""
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "slow__block",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": STATELESS,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "mcp-protocol-version": STATELESS,
        "mcp-method": "tools/call",
        "mcp-name": "slow__block",
    }
    replies: list[httpx.Response] = []
    with httpx.Client(timeout=WAIT_SECONDS) as http:
        running = threading.Thread(
            target=lambda: replies.append(_post(http, slow.url, call, **headers))
        )
        running.start()
        assert slow.started.wait(WAIT_SECONDS)
        with httpx.Client(timeout=WAIT_SECONDS) as passing:  # opens and closes its own
            discover = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "server/discover",
                "params": {"_meta": call["params"]["_meta"]},
            }
            mirrored = {"mcp-protocol-version": STATELESS, "mcp-method": "server/discover"}
            found = _post(passing, slow.url, discover, **mirrored)
            assert found.status_code == 200
        slow.release.set()
        running.join(WAIT_SECONDS)
    (reply,) = replies
    assert reply.json()["result"]["structuredContent"] == {"released": True}
    assert [r["outcome"] for r in slow.call_records()] == ["ok"]


class _Errors(logging.Handler):
    """What uvicorn logs as errors while the test runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.mark.parametrize("behind_it", [1, 3])
def test_closing_a_connection_with_requests_pipelined_behind_the_call_withdraws_it_quietly(
    slow: Slow, server_log: LogLines, behind_it: int
) -> None:
    call = _stateless_body(1, "slow__wait")
    port = int(slow.url.rsplit(":", 1)[1].split("/")[0])
    errors = _Errors()
    with attached(errors, "uvicorn.error", logging.WARNING):
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_SECONDS) as pipelining:
            queued = b"".join(
                _raw_post(port, _stateless_body(2 + n, "slow__block"), "slow__block")
                for n in range(behind_it)
            )
            pipelining.sendall(_raw_post(port, call, "slow__wait") + queued)
            assert slow.started.wait(WAIT_SECONDS)
        assert slow.cancelled.wait(WAIT_SECONDS)
        assert server_log.wait_for(
            "response id=1 method=tools/call outcome=cancelled reason=connection_closed"
        )
        # The server's loop has moved on once it answers another connection: whatever
        # the withdrawal made uvicorn log is logged by then.
        with httpx.Client(timeout=WAIT_SECONDS) as http:
            assert http.get(slow.url.removesuffix("/mcp") + "/health").status_code == 200
    assert errors.lines == []
    # The requests behind it never began: their client is gone.
    assert [r["tool"] for r in slow.call_records()] == ["slow__wait"]


def _stateless_body(request_id: int, name: str) -> bytes:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": name,
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": STATELESS,
                    "io.modelcontextprotocol/clientCapabilities": {},
                },
            },
        }
    ).encode()


def _raw_post(port: int, body: bytes, name: str) -> bytes:
    head = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nauthorization: Bearer alice\r\n"
        "accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
        f"mcp-protocol-version: {STATELESS}\r\nmcp-method: tools/call\r\nmcp-name: {name}\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body
