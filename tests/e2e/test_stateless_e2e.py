"""The stateless era end to end: approval as an `InputRequiredResult` with the official
SDK client, and OAuth scope step-up and policy on the stateless wire over raw HTTP.

The server runs in-process under real uvicorn (as the approval and OAuth tests do), so
the test can hold the approvals store, standing in for the person in the console.
"""

from __future__ import annotations

import json
import socket
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
from mcp.types import ElicitRequestParams, ElicitResult

from mymcp.app import create_host_app
from mymcp.auth import Authenticator
from mymcp.auth._router import RoutedAdapter
from mymcp.config import HostConfiguration, ServerSettings, parse_host_configuration
from mymcp.governance import (
    Approvals,
    ApprovalState,
    AuditLog,
    Governance,
    Policy,
    approval_required_tools,
    open_audit,
    read_records,
)
from mymcp.host import Host
from mymcp.plugin import Consent, structured_result
from mymcp.runtime import compose_runtime
from tests.config.helpers import to_toml
from tests.e2e.conftest import LogLines
from tests.e2e.inprocess import serving
from tests.e2e.server import free_port
from tests.e2e.test_approval_e2e import NameIsToken
from tests.e2e.test_governance_e2e import (  # noqa: F401 - the fixture is used by name
    READ_TOOLS,
    OAuthGoverned,
    oauth_governed,
)
from tests.synthetic import DESTRUCTIVE, contribution, external_bindings, schema, tool

pytestmark = pytest.mark.slow

ARGUMENTS = {"text": "remember the milk"}
VERSION = "2026-07-28"


@dataclass
class Stack:
    url: str
    approvals: Approvals
    audit: AuditLog
    audit_dir: Path
    runs: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    runs: list[dict[str, Any]] = []

    def write(arguments: dict[str, Any]) -> dict[str, Any]:
        runs.append(arguments)
        return structured_result({"status": "written"})

    notes = contribution(
        "notes",
        tool(
            "notes",
            "write",
            write,
            effects=DESTRUCTIVE,
            consent=Consent.PER_CALL,
            input_schema=schema(text={"type": "string"}),
        ),
    )
    runtime = compose_runtime([notes], external_bindings(notes), server_version="0.1.0")
    port = free_port()
    document = {
        "schema_version": 8,
        "server": {"address": "127.0.0.1", "port": port},
        "approval": {"tools": ["@consent_required"]},
        "audit": {"directory": str(tmp_path / "audit")},
    }
    configuration = parse_host_configuration(to_toml(document).encode())
    audit = open_audit(configuration)
    assert audit is not None
    approvals = Approvals(
        approval_required_tools(configuration.approval, runtime), 300, audit=audit
    )
    authenticator = Authenticator(
        adapter=RoutedAdapter("op", NameIsToken()),
        anonymous_enabled=False,
    )
    host = Host(
        HostConfiguration(server=ServerSettings("127.0.0.1", port)),
        runtime,
        authenticator,
        Governance(Policy(None, runtime), audit, approvals),
    )
    with serving(create_host_app(host), port):
        yield Stack(f"http://127.0.0.1:{port}/mcp", approvals, audit, tmp_path / "audit", runs)


async def _call(stack: Stack, elicit: Any = None, operator: str = "alice") -> Any:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {operator}"}) as http,
        Client(
            streamable_http_client(stack.url, http_client=http), elicitation_callback=elicit
        ) as client,
    ):
        assert client.protocol_version == VERSION
        return await client.call_tool("notes__write", ARGUMENTS)


def test_the_sdk_opens_the_approval_page_and_its_retry_runs_once(stack: Stack) -> None:
    asked: list[str] = []

    async def person_approves(context: Any, params: ElicitRequestParams) -> ElicitResult:
        assert params.mode == "url"
        asked.append(params.url)  # type: ignore[union-attr]
        (pending,) = stack.approvals.pending()
        stack.approvals.decide(pending.id, approve=True)
        return ElicitResult(action="accept")

    result = anyio.run(_call, stack, person_approves)
    assert result.is_error is False
    assert result.structured_content == {"status": "written"}
    assert stack.runs == [ARGUMENTS]
    (url,) = asked
    assert url.startswith(stack.url.replace("/mcp", "/console/approvals/"))


def test_a_client_that_cannot_open_urls_is_told_and_the_identical_call_runs(
    stack: Stack,
) -> None:
    first = anyio.run(_call, stack)
    assert first.structured_content["status"] == "approval_required"
    assert stack.runs == []
    (pending,) = stack.approvals.pending()
    stack.approvals.decide(pending.id, approve=True)
    # Another principal's identical call does not spend alice's approval.
    other = anyio.run(_call, stack, None, "bob")
    assert other.structured_content["status"] == "approval_required"
    ran = anyio.run(_call, stack)
    assert ran.structured_content == {"status": "written"}
    assert stack.runs == [ARGUMENTS]


def test_a_declined_approval_page_is_not_run(stack: Stack) -> None:
    async def person_declines(context: Any, params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    result = anyio.run(_call, stack, person_declines)
    assert result.is_error is True
    assert result.structured_content["code"] == "approval_declined"
    assert stack.runs == []


def test_approval_steps_are_audited_without_a_session(stack: Stack) -> None:
    async def person_approves(context: Any, params: ElicitRequestParams) -> ElicitResult:
        stack.approvals.decide(stack.approvals.pending()[0].id, approve=True)
        return ElicitResult(action="accept")

    anyio.run(_call, stack, person_approves)
    with httpx.Client(timeout=10) as http:  # an unauthenticated request is audited too
        refused = http.post(stack.url, headers={"mcp-protocol-version": VERSION})
        assert refused.status_code == 401
    stack.audit.commit()  # what the background writer does at least once a second
    records = list(read_records(stack.audit_dir))
    steps = [r["event"] for r in records if r["event"].startswith("approval_")]
    assert steps == ["approval_requested", "approval_granted", "approval_spent"]
    assert not any("session" in r for r in records)


URL_CAPABLE = {"elicitation": {"url": {}}}


def _stateless_call(request_id: int, *, accept: bool) -> tuple[bytes, dict[str, str]]:
    params: dict[str, Any] = {
        "name": "notes__write",
        "arguments": ARGUMENTS,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": URL_CAPABLE,
        },
    }
    if accept:
        params["inputResponses"] = {"approval": {"action": "accept"}}
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    headers = {
        "authorization": "Bearer alice",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
        "mcp-protocol-version": VERSION,
        "mcp-method": "tools/call",
        "mcp-name": "notes__write",
    }
    return json.dumps(body).encode(), headers


def test_a_retry_whose_client_hung_up_neither_runs_nor_spends_the_approval(
    stack: Stack, server_log: LogLines
) -> None:
    body, headers = _stateless_call(1, accept=False)
    with httpx.Client(timeout=10) as http:
        asked = http.post(stack.url, content=body, headers=headers).json()["result"]
    assert asked["resultType"] == "input_required"
    (pending,) = stack.approvals.pending()
    # The retry says the person went to the approval page, then its client gives up.
    body, headers = _stateless_call(2, accept=True)
    port = int(stack.url.rsplit(":", 1)[1].split("/")[0])
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    request = (
        f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}content-length: {len(body)}\r\n\r\n"
    ).encode() + body
    with socket.create_connection(("127.0.0.1", port), timeout=15) as hanging_up:
        hanging_up.sendall(request)
        assert server_log.wait_for("request id=2 method=tools/call")  # now it waits
    # Closing the connection withdraws the waiting retry at once.
    withdrawn = "response id=2 method=tools/call outcome=cancelled reason=connection_closed"
    assert server_log.wait_for(withdrawn)
    # Only now does the person approve: nobody is left to receive the result.
    stack.approvals.decide(pending.id, approve=True)
    assert stack.runs == []
    assert pending.state is ApprovalState.GRANTED
    # The client's next identical retry runs the call, once.
    body, headers = _stateless_call(3, accept=True)
    with httpx.Client(timeout=10) as http:
        ran = http.post(stack.url, content=body, headers=headers).json()["result"]
    assert ran["structuredContent"] == {"status": "written"}
    assert stack.runs == [ARGUMENTS]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_request_whose_body_never_ends_is_never_dispatched(
    stack: Stack, server_log: LogLines, framing: str
) -> None:
    body, headers = _stateless_call(1, accept=False)
    port = int(stack.url.rsplit(":", 1)[1].split("/")[0])
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    if framing == "chunked":  # the whole message in one chunk, but never the last chunk
        head += "transfer-encoding: chunked\r\n"
        payload = f"{len(body):x}\r\n".encode() + body + b"\r\n"
    else:  # the message, short of what Content-Length promised
        head += f"content-length: {len(body) + 50}\r\n"
        payload = body
    request = f"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n{head}\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), timeout=15) as leaving:
        leaving.sendall(request + payload)
    assert server_log.wait_for("request_abandoned reason=incomplete_body")
    # Nothing of it ran: no decision, no approval asked for, no call.
    assert stack.approvals.pending() == []
    assert stack.runs == []
    assert not server_log.wait_for("method=tools/call", timeout=0)


# --- OAuth scopes on the stateless wire --------------------------------------------------


def _modern(
    http: httpx.Client, stack: OAuthGoverned, token: str, method: str, **params: Any
) -> Any:
    meta = {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {
        "authorization": f"Bearer {token}",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
    }
    if "name" in params:
        headers["mcp-name"] = params["name"]
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
    return http.post(stack.url, json=body, headers=headers)


def test_scopes_filter_the_stateless_list_and_step_up_is_the_same_403(
    oauth_governed: OAuthGoverned,  # noqa: F811 - the imported fixture, by name
) -> None:
    metadata = f"{oauth_governed.base}/.well-known/oauth-protected-resource/mcp"
    with httpx.Client(timeout=10) as http:
        reader = oauth_governed.token(scope="memory.read openid")
        listed = _modern(http, oauth_governed, reader, "tools/list").json()["result"]
        assert [t["name"] for t in listed["tools"]] == READ_TOOLS
        assert listed["cacheScope"] == "private"  # it depends on who asks
        response = _modern(
            http, oauth_governed, reader, "tools/call", name="memory_remember", arguments={}
        )
        assert response.status_code == 403
        assert response.headers["www-authenticate"] == (
            'Bearer error="insufficient_scope", scope="memory.read memory.write", '
            f'resource_metadata="{metadata}"'
        )
        assert "mcp-session-id" not in response.headers
        unauthenticated = _modern(http, oauth_governed, "not-a-jwt", "tools/list")
        assert unauthenticated.status_code == 401
