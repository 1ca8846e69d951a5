"""Policy and audit at the endpoint: filtered discovery, denial as absence, audit records."""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import ANONYMOUS
from mymcp.config import HostConfiguration, ServerSettings, parse_host_configuration
from mymcp.errors import AuditError
from mymcp.governance import AuditLog, Governance, Policy, read_records, verify_audit
from mymcp.plugin import Consent, ToolEffects, structured_result
from mymcp.runtime import BoundTool, compose_runtime
from mymcp.transport._dispatch import Caller, Dispatcher
from tests.config.helpers import to_toml
from tests.synthetic import (
    DESTRUCTIVE,
    READ_ONLY,
    contribution,
    external_bindings,
    schema,
    tool,
)
from tests.transport.conftest import BASE, NamedBearer, initialize, rpc, session_headers

AUDIT_SEEN: list[list[dict[str, Any]]] = []


def _make_writer(directory: Path) -> Any:
    def write(arguments: dict[str, Any]) -> dict[str, Any]:
        # What is durably in the audit at the moment the mutating tool runs.
        AUDIT_SEEN.append(list(read_records(directory)))
        return structured_result({"written": True})

    return write


def _not_a_number(arguments: dict[str, Any]) -> dict[str, Any]:
    return structured_result({"ratio": math.nan})


def _failing(arguments: dict[str, Any]) -> dict[str, Any]:
    return structured_result({"status": "conflict", "code": "revision_conflict"}, is_error=True)


POLICY = {
    "default": "deny",
    "rules": [
        {"principals": ["anonymous"], "allow": ["@read_only"]},
        {"principals": ["operator:alice"], "allow": ["*"], "deny": ["notes__wipe"]},
    ],
}


@pytest.fixture
def governed(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    directory = tmp_path / "audit"
    notes = contribution(
        "notes",
        tool("notes", "read", input_schema=schema(text={"type": "string"})),
        tool("notes", "conflict", _failing, effects=DESTRUCTIVE),
        tool(
            "notes",
            "write",
            _make_writer(directory),
            effects=DESTRUCTIVE,
            consent=Consent.PER_CALL,
            input_schema=schema(text={"type": "string"}),
        ),
        tool("notes", "wipe", effects=DESTRUCTIVE),
        tool("notes", "ratio", _not_a_number),
    )
    runtime = compose_runtime([notes], external_bindings(notes), server_version="0.1.0")
    document = {"schema_version": 8, "policy": POLICY}
    configuration = parse_host_configuration(to_toml(document).encode())
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    governance = Governance(Policy(configuration.policy, runtime), audit)
    app = create_app(
        runtime,
        authenticator=NamedBearer(),
        configuration=HostConfiguration(server=ServerSettings("127.0.0.1", 8000)),
        governance=governance,
    )
    AUDIT_SEEN.clear()
    with TestClient(app, base_url=BASE) as client:  # runs the lifespan: audit writer
        yield client, directory


def _names(client: TestClient, headers: dict[str, str]) -> list[str]:
    response = client.post("/mcp", json=rpc("tools/list"), headers=headers)
    return [t["name"] for t in response.json()["result"]["tools"]]


def _call(client: TestClient, headers: dict[str, str], name: str, **arguments: Any) -> Any:
    response = client.post(
        "/mcp", json=rpc("tools/call", {"name": name, "arguments": arguments}), headers=headers
    )
    assert response.status_code == 200
    return response.json()


def test_discovery_is_filtered_per_principal(governed: tuple[TestClient, Path]) -> None:
    client, _ = governed
    anonymous = session_headers(initialize(client))
    assert _names(client, anonymous) == ["list_tools", "notes__read", "notes__ratio"]
    alice_headers = {"authorization": "Bearer alice"}
    alice = session_headers(initialize(client, **alice_headers), **alice_headers)
    assert _names(client, alice) == [
        "list_tools",
        "notes__read",
        "notes__conflict",
        "notes__write",
        "notes__ratio",
    ]
    listed = _call(client, anonymous, "list_tools")["result"]["structuredContent"]
    assert listed["tools"] == ["list_tools", "notes__read", "notes__ratio"]
    assert "notes__write" not in listed["summary"]


def test_a_denied_tool_is_answered_exactly_like_an_absent_one(
    governed: tuple[TestClient, Path],
) -> None:
    client, _ = governed
    headers = session_headers(initialize(client))
    denied = _call(client, headers, "notes__write", text="x")
    absent = _call(client, headers, "notes__nothing", text="x")
    assert denied["error"] == {"code": -32602, "message": "Unknown tool: notes__write"}
    assert absent["error"] == {"code": -32602, "message": "Unknown tool: notes__nothing"}
    assert denied.keys() == absent.keys()


def test_a_mutating_call_is_durably_audited_before_it_runs(
    governed: tuple[TestClient, Path],
) -> None:
    client, _ = governed
    alice_headers = {"authorization": "Bearer alice"}
    headers = session_headers(initialize(client, **alice_headers), **alice_headers)
    result = _call(client, headers, "notes__write", text="a private sentence")
    assert result["result"]["structuredContent"] == {"written": True}
    (seen,) = AUDIT_SEEN
    decision = seen[-1]
    assert decision["event"] == "tool_call"
    assert decision["tool"] == "notes__write"
    assert decision["decision"] == "allowed"
    assert "outcome" not in decision


def test_a_call_refused_for_an_unwritable_audit_is_recorded_as_not_run(
    governed: tuple[TestClient, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, directory = governed
    alice_headers = {"authorization": "Bearer alice"}
    headers = session_headers(initialize(client, **alice_headers), **alice_headers)
    commit = AuditLog.commit

    def full_disk(self: AuditLog, *, final: bool = False) -> None:
        raise AuditError("audit_unavailable", "simulated")

    monkeypatch.setattr(AuditLog, "commit", full_disk)
    refused = _call(client, headers, "notes__write", text="x")
    assert refused["result"]["structuredContent"]["code"] == "audit_unavailable"
    assert AUDIT_SEEN == []  # it never ran
    monkeypatch.setattr(AuditLog, "commit", commit)  # space again: the queue is written
    records = [r for r in _records_after_close(client, directory) if r["event"] == "tool_call"]
    decided, finished = records[-2:]
    assert (decided["decision"], finished["call"]) == ("allowed", decided["call"])
    assert finished["outcome"] == "audit_unavailable"
    assert verify_audit(directory).ok


def _records_after_close(client: TestClient, directory: Path) -> list[dict[str, Any]]:
    client.__exit__(None, None, None)  # lifespan shutdown commits everything queued
    return list(read_records(directory))


def test_every_decision_and_outcome_is_recorded_without_content(
    governed: tuple[TestClient, Path],
) -> None:
    client, directory = governed
    alice_headers = {"authorization": "Bearer alice"}
    session = initialize(client, **alice_headers)
    headers = session_headers(session, **alice_headers)
    _call(client, headers, "notes__read", text="needle-in-arguments")
    _call(client, headers, "notes__write", text="needle-in-arguments")
    _call(client, headers, "notes__conflict")
    _call(client, headers, "notes__wipe")
    _call(client, headers, "no_such_tool")
    # Params that are no call are refused before policy, and recorded all the same.
    for malformed in ({"name": 5}, {"name": "notes__read", "arguments": [1]}, ["x"]):
        answer = client.post("/mcp", json=rpc("tools/call", malformed), headers=headers).json()
        assert answer["error"]["code"] == -32602
    client.delete("/mcp", headers=headers)
    initialize(client)  # an anonymous session left open until the server stops
    client.post("/mcp", json=rpc("ping"), headers={"authorization": "Basic nope"})
    records = _records_after_close(client, directory)
    calls = [r for r in records if r["event"] == "tool_call"]
    summary = [(r["tool"], r["decision"], r.get("outcome")) for r in calls]
    assert summary == [
        ("notes__read", "allowed", "ok"),
        ("notes__write", "allowed", None),
        ("notes__write", "allowed", "ok"),
        ("notes__conflict", "allowed", None),
        ("notes__conflict", "allowed", "revision_conflict"),
        ("notes__wipe", "denied", None),
        (None, "unknown_tool", None),
        (None, "invalid_params", None),
        ("notes__read", "invalid_params", None),
        (None, "invalid_params", None),
    ]
    assert calls[1]["call"] == calls[2]["call"]
    assert "call" not in calls[0]  # a read-only call is one record
    # Refusals carry the digest too, unless no arguments could be read at all.
    assert all(len(r["args_digest"]) == 64 for r in calls[:-1])
    assert "args_digest" not in calls[-1]
    assert calls[0]["args_digest"] == calls[1]["args_digest"]  # same arguments, same digest
    assert {r["principal"] for r in calls} == {"operator:alice"}
    assert len({r["session"] for r in calls}) == 1
    assert calls[0]["session"] != session
    events = [r["event"] for r in records]
    assert events[0] == "session_open"
    opened = [(r["principal"], r["session"]) for r in records if r["event"] == "session_open"]
    closed = [
        (r["principal"], r["session"], r["reason"])
        for r in records
        if r["event"] == "session_close"
    ]
    assert closed == [(*opened[0], "deleted"), (*opened[1], "shutdown")]
    assert [principal for principal, _ in opened] == ["operator:alice", "anonymous"]
    assert any(r["event"] == "auth_failure" and r["reason"] == "rejected" for r in records)
    raw = b"".join(path.read_bytes() for path in directory.glob("segment-*.jsonl"))
    assert b"needle" not in raw
    assert session.encode() not in raw
    assert b"no_such_tool" not in raw
    assert verify_audit(directory).ok


def test_a_result_no_client_could_read_is_audited_as_the_failure_the_client_saw(
    governed: tuple[TestClient, Path],
) -> None:
    client, directory = governed
    headers = session_headers(initialize(client))
    answer = _call(client, headers, "notes__ratio")["result"]
    assert answer["isError"] is True
    assert answer["structuredContent"]["code"] == "internal_error"
    records = [r for r in _records_after_close(client, directory) if r["event"] == "tool_call"]
    assert [(r["tool"], r["outcome"]) for r in records] == [("notes__ratio", "internal_error")]


def _audited_dispatcher(
    directory: Path, handler: Any, effects: ToolEffects
) -> tuple[Dispatcher, BoundTool, AuditLog]:
    """A dispatcher serving one tool, `tests__tool`, that policy allows, audited into
    `directory`."""
    plugin = contribution("tests", tool("tests", "tool", handler, effects=effects))
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    document = {"schema_version": 8, "policy": {"default": "allow"}}
    configuration = parse_host_configuration(to_toml(document).encode())
    audit = AuditLog(directory, max_segment_bytes=1 << 20, max_segments=4)
    dispatcher = Dispatcher(runtime, Governance(Policy(configuration.policy, runtime), audit))
    bound = runtime.registry.get("tests__tool")
    assert bound is not None
    return dispatcher, bound, audit


@pytest.mark.parametrize(
    ("code", "audited"),
    [
        ("quota_exceeded", "quota_exceeded"),  # the plugin's own code, as it said
        ("cancelled", "tool_error"),  # what the host records when a client cancels
        ("internal_error", "tool_error"),
        ("audit_unavailable", "tool_error"),
        ("approval_denied", "tool_error"),
        ("ok", "tool_error"),
        ("Not An Identifier", "tool_error"),
    ],
)
@pytest.mark.parametrize("effects", ["read_only", "destructive"])
def test_a_plugin_cannot_pass_its_error_off_as_the_host_s_outcome(
    tmp_path: Path, effects: str, code: str, audited: str
) -> None:
    def failing(arguments: dict[str, Any]) -> dict[str, Any]:
        return structured_result({"code": code, "message": "x"}, is_error=True)

    kind = READ_ONLY if effects == "read_only" else DESTRUCTIVE
    directory = tmp_path / "audit"
    dispatcher, bound, audit = _audited_dispatcher(directory, failing, kind)
    result = anyio.run(dispatcher.execute, Caller(ANONYMOUS), bound, {})
    assert result["structuredContent"]["code"] == code  # the client is told what it said
    audit.close()
    (record,) = [r for r in read_records(directory) if "outcome" in r]
    assert record["outcome"] == audited
    assert verify_audit(directory).ok


@pytest.mark.parametrize("effects", ["read_only", "destructive"])
def test_a_call_cancelled_before_its_tool_answers_is_audited_as_cancelled(
    tmp_path: Path, effects: str
) -> None:
    entered = anyio.Event()

    async def never(arguments: dict[str, Any]) -> dict[str, Any]:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    kind = READ_ONLY if effects == "read_only" else DESTRUCTIVE
    directory = tmp_path / "audit"
    dispatcher, bound, audit = _audited_dispatcher(directory, never, kind)

    async def cancelled_call() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(dispatcher.execute, Caller(ANONYMOUS), bound, {})
            await entered.wait()
            group.cancel_scope.cancel()

    anyio.run(cancelled_call)
    audit.close()
    records = [r for r in read_records(directory) if r["event"] == "tool_call"]
    assert records[-1]["outcome"] == "cancelled"
    if effects == "destructive":  # the decision record, then its outcome, paired
        decided, finished = records
        assert (decided["decision"], finished["call"]) == ("allowed", decided["call"])
    assert verify_audit(directory).ok


def test_a_call_withdrawn_while_its_decision_is_made_durable_never_runs_and_is_paired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client's cancellation cancels the request's task itself, which also ends the
    wait for the decision record's commit: the call must not run, and the decision
    must still be followed by its `cancelled` outcome."""
    ran: list[dict[str, Any]] = []
    directory = tmp_path / "audit"
    dispatcher, bound, audit = _audited_dispatcher(directory, ran.append, DESTRUCTIVE)
    committing, proceed = threading.Event(), threading.Event()
    commit = audit.commit

    def held_commit(*, final: bool = False) -> None:
        committing.set()
        proceed.wait(10)
        commit(final=final)

    monkeypatch.setattr(audit, "commit", held_commit)

    async def withdrawn_call() -> None:
        call = asyncio.create_task(dispatcher.execute(Caller(ANONYMOUS), bound, {}))
        await anyio.to_thread.run_sync(committing.wait, 10)
        call.cancel()  # as a client's withdrawal does: the task, not a scope
        with pytest.raises(asyncio.CancelledError):
            await call
        proceed.set()

    anyio.run(withdrawn_call)
    monkeypatch.undo()
    audit.close()
    assert ran == []
    records = [r for r in read_records(directory) if r["event"] == "tool_call"]
    decided, finished = records
    assert (decided["decision"], finished["call"]) == ("allowed", decided["call"])
    assert finished["outcome"] == "cancelled"
    assert verify_audit(directory).ok
