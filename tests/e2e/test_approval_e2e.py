"""Exact-call approval end to end, with the official SDK client against real uvicorn.

The server runs in-process (as the OAuth tests do) so the test can hold the approvals
store — standing in for the person in the console — and its clock, which is how expiry
is tested without waiting.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
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
from mymcp.auth._principal import Identity
from mymcp.auth._router import RoutedAdapter
from mymcp.config import HostConfiguration, ServerSettings, parse_host_configuration
from mymcp.errors import ApprovalError
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
from tests.e2e.auth_http import MCP_HEADERS, open_session, request_json, send
from tests.e2e.inprocess import serving
from tests.e2e.server import free_port
from tests.synthetic import DESTRUCTIVE, contribution, external_bindings, schema, tool

RUNS: list[dict[str, Any]] = []


def _record_run(arguments: dict[str, Any]) -> dict[str, Any]:
    RUNS.append(arguments)
    return structured_result({"status": "written", "count": len(RUNS)})


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


class NameIsToken:
    """`Bearer <name>` authenticates operator `<name>` (stands in for real credentials)."""

    async def authenticate(self, payload: str) -> Identity:
        return Identity(payload, f"operator:{payload}")


@dataclass
class Stack:
    url: str
    approvals: Approvals
    clock: Clock
    audit: AuditLog
    audit_dir: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("approval")
    notes = contribution(
        "notes",
        tool(
            "notes",
            "write",
            _record_run,
            effects=DESTRUCTIVE,
            consent=Consent.PER_CALL,
            input_schema=schema(
                text={"type": "string"}, tags={"type": "array", "items": {"type": "string"}}
            ),
        ),
        tool("notes", "read", input_schema=schema(text={"type": "string"})),
    )
    runtime = compose_runtime([notes], external_bindings(notes), server_version="0.1.0")
    port = free_port()
    document = {
        "schema_version": 8,
        "server": {"address": "127.0.0.1", "port": port},
        "approval": {"tools": ["@consent_required"], "ttl_seconds": 60},
        "audit": {"directory": str(root / "audit")},
    }
    configuration = parse_host_configuration(to_toml(document).encode())
    clock = Clock()
    audit = open_audit(configuration)
    assert audit is not None
    approvals = Approvals(
        approval_required_tools(configuration.approval, runtime),
        configuration.approval.ttl_seconds,
        audit=audit,
        clock=clock,
    )
    authenticator = Authenticator(
        adapter=RoutedAdapter("op", NameIsToken()),
        anonymous_enabled=True,
    )
    host = Host(
        HostConfiguration(server=ServerSettings("127.0.0.1", port)),
        runtime,
        authenticator,
        Governance(Policy(None, runtime), audit, approvals),
    )
    with serving(create_host_app(host), port):
        yield Stack(f"http://127.0.0.1:{port}/mcp", approvals, clock, audit, root / "audit")


def _approve_next(stack: Stack, *, approve: bool = True) -> str:
    (pending,) = stack.approvals.pending()
    stack.approvals.decide(pending.id, approve=approve)
    return pending.id


async def _session(
    stack: Stack,
    steps: Any,
    *,
    operator: str = "alice",
    elicitation: bool = False,
) -> Any:
    """Open one SDK session and run `steps(client)` in it."""

    async def on_elicit(context: Any, params: Any) -> Any:
        raise AssertionError("MyMCP never sends elicitation requests; it answers -32042")

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {operator}"}) as http,
        Client(
            streamable_http_client(stack.url, http_client=http),
            mode="legacy",
            elicitation_callback=on_elicit if elicitation else None,
        ) as client,
    ):
        return await steps(client)


def test_approval_required_then_one_identical_call_runs(stack: Stack) -> None:
    RUNS.clear()
    arguments = {"text": "remember the milk", "tags": ["home"]}

    async def steps(client: Client) -> None:
        first = await client.call_tool("notes__write", arguments)
        assert first.is_error is True
        payload = first.structured_content
        assert payload["status"] == payload["code"] == "approval_required"
        (pending,) = stack.approvals.pending()
        assert payload["approval_url"] == stack.url.replace(
            "/mcp", f"/console/approvals/{pending.id}"
        )
        assert payload["expires_at"].endswith("Z")
        assert "repeat the identical call" in payload["message"]
        assert first.content[0].text.startswith('{"status":"approval_required"')
        # The identical call before a decision waits for the same approval.
        again = await client.call_tool("notes__write", dict(reversed(arguments.items())))
        assert again.structured_content["approval_url"] == payload["approval_url"]
        assert RUNS == []
        stack.approvals.decide(pending.id, approve=True)
        # A call that differs in anything is not covered by the grant.
        changed = await client.call_tool("notes__write", {**arguments, "tags": ["work"]})
        assert changed.structured_content["status"] == "approval_required"
        ran = await client.call_tool(
            "notes__write", {"tags": ["home"], "text": "remember the milk"}
        )
        assert ran.is_error is False
        assert ran.structured_content["status"] == "written"
        assert [arguments] == RUNS
        # Spent: the same call again needs a new approval.
        fourth = await client.call_tool("notes__write", arguments)
        assert fourth.structured_content["status"] == "approval_required"
        assert [arguments] == RUNS

    anyio.run(_session, stack, steps)
    assert stack.approvals.pending() == sorted(
        stack.approvals.pending(), key=lambda a: -a.created_at
    )
    for approval in stack.approvals.pending():
        stack.approvals.decide(approval.id, approve=False)


def test_url_elicitation_clients_get_the_32042_error(stack: Stack) -> None:
    RUNS.clear()

    async def steps(client: Client) -> None:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("notes__write", {"text": "x"})
        error = caught.value.error
        assert error.code == -32042
        (elicitation,) = error.data["elicitations"]
        (pending,) = stack.approvals.pending()
        assert elicitation["mode"] == "url"
        assert elicitation["elicitationId"] == pending.id
        assert elicitation["url"].endswith(f"/console/approvals/{pending.id}")
        assert "notes__write" in elicitation["message"]
        stack.approvals.decide(pending.id, approve=True)
        ran = await client.call_tool("notes__write", {"text": "x"})
        assert ran.structured_content["status"] == "written"

    anyio.run(functools.partial(_session, stack, steps, elicitation=True))
    assert RUNS == [{"text": "x"}]


@pytest.mark.parametrize(("version", "url_error"), [("2025-11-25", True), ("2025-06-18", False)])
def test_url_elicitation_is_asked_for_only_in_a_revision_that_has_it(
    stack: Stack, version: str, url_error: bool
) -> None:
    """-32042 and URL-mode elicitation came with 2025-11-25: a 2025-06-18 session gets
    the tool result with the approval link, whatever its capabilities claim."""
    capabilities = {"elicitation": {"url": {}, "form": {}}}
    opening = request_json("initialize", 1, protocolVersion=version, capabilities=capabilities)
    opening["params"]["clientInfo"] = {"name": "raw", "version": "1"}
    with httpx.Client(timeout=10) as http:
        opened = http.post(
            stack.url,
            headers={**MCP_HEADERS, "authorization": "Bearer carol"},
            json=opening,
        )
        assert opened.json()["result"]["protocolVersion"] == version
        headers = {
            **MCP_HEADERS,
            "authorization": "Bearer carol",
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": version,
        }
        call = request_json("tools/call", name="notes__write", arguments={"text": version})
        answer = http.post(stack.url, headers=headers, json=call).json()
    if url_error:
        assert answer["error"]["code"] == -32042
    else:
        assert "error" not in answer
        assert answer["result"]["structuredContent"]["code"] == "approval_required"
    for approval in stack.approvals.pending():
        stack.approvals.decide(approval.id, approve=False)


@pytest.mark.parametrize("decided", [False, True])
def test_the_approvals_of_a_session_that_ended_expire_with_it(stack: Stack, decided: bool) -> None:
    """An approval is bound to its session: once the session is gone no call can use it,
    so the console must not go on asking for (or holding) a decision."""
    call = request_json("tools/call", name="notes__write", arguments={"text": "orphan"})
    with httpx.Client(timeout=10) as http:
        session = open_session(http, stack.url, "dave")
        asked = send(
            http, "POST", stack.url, authorization=["Bearer dave"], session=session, body=call
        )
        assert asked.json()["result"]["structuredContent"]["code"] == "approval_required"
        (pending,) = [a for a in stack.approvals.pending() if a.principal == "operator:dave"]
        if decided:
            stack.approvals.decide(pending.id, approve=True)
        ended = send(http, "DELETE", stack.url, authorization=["Bearer dave"], session=session)
        assert ended.status_code == 204
    assert not [a for a in stack.approvals.pending() if a.principal == "operator:dave"]
    assert stack.approvals.get(pending.id).state is ApprovalState.EXPIRED  # type: ignore[union-attr]
    with pytest.raises(ApprovalError):
        stack.approvals.decide(pending.id, approve=True)
    stack.audit.commit()
    expired = [
        r
        for r in read_records(stack.audit_dir)
        if r["event"] == "approval_expired" and r.get("principal") == "operator:dave"
    ]
    assert [r["reason"] for r in expired][-1:] == ["session_ended"]


def test_a_denied_call_answers_approval_denied_once(stack: Stack) -> None:
    RUNS.clear()

    async def steps(client: Client) -> None:
        await client.call_tool("notes__write", {"text": "forbidden"})
        _approve_next(stack, approve=False)
        denied = await client.call_tool("notes__write", {"text": "forbidden"})
        assert denied.structured_content["code"] == "approval_denied"
        asked_again = await client.call_tool("notes__write", {"text": "forbidden"})
        assert asked_again.structured_content["code"] == "approval_required"

    anyio.run(_session, stack, steps)
    assert RUNS == []
    for approval in stack.approvals.pending():
        stack.approvals.decide(approval.id, approve=False)


def test_pending_and_granted_approvals_expire(stack: Stack) -> None:
    RUNS.clear()

    async def steps(client: Client) -> None:
        await client.call_tool("notes__write", {"text": "late"})
        stack.clock.now += 61  # the pending approval outlives its ttl
        expired = await client.call_tool("notes__write", {"text": "late"})
        assert expired.structured_content["code"] == "approval_expired"
        await client.call_tool("notes__write", {"text": "late"})
        _approve_next(stack)
        stack.clock.now += 61  # so does an unused grant
        unused = await client.call_tool("notes__write", {"text": "late"})
        assert unused.structured_content["code"] == "approval_expired"

    anyio.run(_session, stack, steps)
    assert RUNS == []


def test_another_session_or_principal_cannot_spend_an_approval(stack: Stack) -> None:
    RUNS.clear()
    holder: dict[str, str] = {}

    async def ask(client: Client) -> None:
        await client.call_tool("notes__write", {"text": "mine"})
        holder["id"] = _approve_next(stack)

    async def spend(client: Client) -> Any:
        return await client.call_tool("notes__write", {"text": "mine"})

    async def both(client: Client) -> None:
        await ask(client)
        other_session = await _session(stack, spend)
        assert other_session.structured_content["code"] == "approval_required"
        other_principal = await _session(stack, spend, operator="mallory")
        assert other_principal.structured_content["code"] == "approval_required"
        assert RUNS == []
        mine = await spend(client)
        assert mine.structured_content["status"] == "written"

    anyio.run(_session, stack, both)
    assert RUNS == [{"text": "mine"}]
    for approval in stack.approvals.pending():
        stack.approvals.decide(approval.id, approve=False)


def test_read_only_tools_need_no_approval_and_every_step_is_audited(stack: Stack) -> None:
    with httpx.Client(timeout=10) as http:
        session = open_session(http, stack.url, "bob")
        read = send(
            http,
            "POST",
            stack.url,
            authorization=["Bearer bob"],
            session=session,
            body=request_json("tools/call", name="notes__read", arguments={}),
        )
        assert "isError" not in read.json()["result"]
        call = request_json("tools/call", name="notes__write", arguments={"text": "b"})
        send(http, "POST", stack.url, authorization=["Bearer bob"], session=session, body=call)
        _approve_next(stack)
        ran = send(
            http, "POST", stack.url, authorization=["Bearer bob"], session=session, body=call
        )
        assert ran.json()["result"]["structuredContent"]["status"] == "written"
    # The spend ran a mutating tool, whose audit commit flushed every queued record.
    events = [
        (r["event"], r.get("decision"))
        for r in read_records(stack.audit_dir)
        if r.get("principal") == "operator:bob"
    ]
    assert ("approval_requested", None) in events
    assert ("approval_granted", None) in events
    assert ("approval_spent", None) in events
    assert ("tool_call", "approval_required") in events
    assert ("tool_call", "allowed") in events
    states = {a.state for a in stack.approvals.recent()}
    assert ApprovalState.SPENT in states


def test_denials_and_expiries_are_audited_with_the_arguments_digest(stack: Stack) -> None:
    RUNS.clear()
    denied_arguments = {"text": "audited denial", "tags": ["d"]}
    expired_arguments = {"text": "audited expiry"}

    async def steps(client: Client) -> None:
        await client.call_tool("notes__write", denied_arguments)
        _approve_next(stack, approve=False)
        denied = await client.call_tool("notes__write", denied_arguments)
        assert denied.structured_content["code"] == "approval_denied"
        await client.call_tool("notes__write", expired_arguments)
        stack.clock.now += 61
        expired = await client.call_tool("notes__write", expired_arguments)
        assert expired.structured_content["code"] == "approval_expired"

    anyio.run(functools.partial(_session, stack, steps, operator="carol"))
    assert RUNS == []
    stack.audit.commit()
    records = [r for r in read_records(stack.audit_dir) if r.get("principal") == "operator:carol"]
    denied_digest = stack.audit.digest(denied_arguments)
    expired_digest = stack.audit.digest(expired_arguments)
    assert denied_digest != expired_digest

    def approval_events(digest: str) -> list[tuple[str, str | None]]:
        return [
            (r["event"], r.get("reason"))
            for r in records
            if r["event"].startswith("approval_") and r.get("args_digest") == digest
        ]

    assert approval_events(denied_digest) == [
        ("approval_requested", None),
        ("approval_denied", None),
    ]
    assert approval_events(expired_digest) == [
        ("approval_requested", None),
        ("approval_expired", "ttl"),
    ]
    decisions = [
        (r.get("decision"), r.get("args_digest")) for r in records if r["event"] == "tool_call"
    ]
    assert ("approval_denied", denied_digest) in decisions
    assert ("approval_expired", expired_digest) in decisions
    # Each approval's records name the same approval; the two approvals differ.
    tags = {r["args_digest"]: r["approval"] for r in records if r["event"] == "approval_requested"}
    for digest in (denied_digest, expired_digest):
        assert {
            r["approval"] for r in records if r.get("args_digest") == digest and "approval" in r
        } == {tags[digest]}
