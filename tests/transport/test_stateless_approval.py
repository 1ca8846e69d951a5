"""Exact-call approval in the stateless era: an `InputRequiredResult` instead of -32042.

The era is driven directly (no HTTP) so the test can hold the approvals store, standing
in for the person in the console, and decide while a retry is waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from mymcp.auth import Principal
from mymcp.auth._principal import registered_principal
from mymcp.governance import Approvals, ApprovalState, AuditLog, Governance, Policy, read_records
from mymcp.plugin import Consent, structured_result
from mymcp.runtime import compose_runtime
from mymcp.transport import Caller, Dispatcher
from mymcp.transport._dispatch import AwaitingApproval
from mymcp.transport._jsonrpc import Request
from mymcp.transport._stateless import MAX_WAITS, MAX_WAITS_PER_PRINCIPAL, StatelessEra
from tests.synthetic import DESTRUCTIVE, contribution, external_bindings, schema, tool

ALICE = registered_principal("op", "alice")
BOB = registered_principal("op", "bob")
ARGUMENTS = {"text": "remember the milk"}
URL_CAPABLE = {"elicitation": {"form": {}, "url": {}}}


@dataclass
class Stage:
    era: StatelessEra
    dispatcher: Dispatcher
    approvals: Approvals
    runs: list[dict[str, Any]] = field(default_factory=list)


def _stage(tmp_path: Path | None = None, *, wait: float = 5.0) -> Stage:
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
    audit = None
    if tmp_path is not None:
        audit = AuditLog(tmp_path / "audit", max_segment_bytes=1 << 20, max_segments=4)
    approvals = Approvals(frozenset({"notes__write"}), 300, audit=audit)
    dispatcher = Dispatcher(runtime, Governance(Policy(None, runtime), audit, approvals))
    return Stage(StatelessEra(dispatcher, approval_wait_seconds=wait), dispatcher, approvals, runs)


def _call(
    capabilities: dict[str, Any] | None = None,
    *,
    action: str | None = None,
    arguments: dict[str, Any] | None = None,
    request_id: int = 1,
) -> Request:
    params: dict[str, Any] = {
        "name": "notes__write",
        "arguments": ARGUMENTS if arguments is None else arguments,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        },
    }
    if action is not None:
        params["inputResponses"] = {"approval": {"action": action}}
    return Request(request_id, "tools/call", params)


def _result(stage: Stage, request: Request, principal: Principal = ALICE) -> dict[str, Any]:
    answer = anyio.run(stage.era.answer, request, principal, None)
    assert isinstance(answer, dict)  # not a scope step-up
    return stage.era.reply_of(request, answer)["result"]


def test_a_url_capable_client_is_asked_with_an_input_required_result() -> None:
    stage = _stage()
    result = _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    assert result["resultType"] == "input_required"
    assert result["_meta"] == {
        "io.modelcontextprotocol/serverInfo": {"name": "mymcp", "version": "0.1.0"}
    }
    assert "ttlMs" not in result
    assert result["inputRequests"] == {
        "approval": {
            "method": "elicitation/create",
            "params": {
                "mode": "url",
                "url": f"http://127.0.0.1:8000/console/approvals/{pending.id}",
                "message": (
                    "MyMCP needs your approval before it runs notes__write with these exact "
                    "arguments. Open the link, review the call and approve or deny it; then "
                    "the agent repeats the same call."
                ),
            },
        }
    }
    assert pending.session_id == ""  # bound to principal, tool and arguments only
    assert stage.runs == []


@pytest.mark.parametrize("capabilities", [{}, {"elicitation": {}}, {"elicitation": {"form": {}}}])
def test_other_clients_get_the_approval_required_result(capabilities: dict[str, Any]) -> None:
    stage = _stage()
    result = _result(stage, _call(capabilities))
    assert result["resultType"] == "complete"
    assert result["isError"] is True
    assert result["structuredContent"]["status"] == "approval_required"
    assert result["structuredContent"]["approval_url"].endswith(stage.approvals.pending()[0].id)
    # No session binds it here, so the message does not ask for one.
    assert "session" not in result["structuredContent"]["message"]


def test_in_a_session_the_approval_required_result_says_the_session_must_repeat_it() -> None:
    stage = _stage()
    asked = anyio.run(
        stage.dispatcher.call_tool,
        Caller(ALICE, "session-1"),
        {"name": "notes__write", "arguments": ARGUMENTS},
    )
    assert isinstance(asked, AwaitingApproval)
    message = stage.dispatcher.approval_required_result(asked)["structuredContent"]["message"]
    assert message.endswith(
        "Repeat it in this same MCP session: a call from another session asks for a new approval."
    )


def test_the_retry_after_approval_runs_once() -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    stage.approvals.decide(pending.id, approve=True)
    ran = _result(stage, _call(URL_CAPABLE, action="accept", request_id=2))
    assert (ran["resultType"], ran["structuredContent"]) == ("complete", {"status": "written"})
    assert stage.runs == [ARGUMENTS]
    again = _result(stage, _call(URL_CAPABLE, action="accept", request_id=3))
    assert again["resultType"] == "input_required"  # spent: a new approval is asked for
    assert stage.runs == [ARGUMENTS]


def test_the_identical_call_after_approval_runs_once_without_any_input_response() -> None:
    stage = _stage()
    _result(stage, _call())
    stage.approvals.decide(stage.approvals.pending()[0].id, approve=True)
    ran = _result(stage, _call(request_id=2))
    assert ran["structuredContent"] == {"status": "written"}
    assert stage.runs == [ARGUMENTS]


@asynccontextmanager
async def _retrying(
    stage: Stage, requests: list[Request], client_gone: Any = None
) -> AsyncIterator[tuple[list[dict[str, Any]], anyio.CancelScope]]:
    """Start the retries and let every task run until it blocks: the block sees the
    results of those that already answered (the others are still waiting) and can
    cancel the rest; leaving it waits for every retry."""
    answered: list[dict[str, Any]] = []

    async def retry(request: Request) -> None:
        answer = await stage.era.answer(request, ALICE, None, client_gone)
        answered.append(stage.era.reply_of(request, answer)["result"])

    async with anyio.create_task_group() as group:
        for request in requests:
            group.start_soon(retry, request)
        await wait_all_tasks_blocked()
        yield answered, group.cancel_scope


async def _answered_at_once(stage: Stage, request: Request) -> list[dict[str, Any]]:
    """The retry's result if it answered without waiting (a waiting one is cancelled)."""
    async with _retrying(stage, [request]) as (answered, waiting):
        waiting.cancel()
    return answered


def test_a_retry_waits_for_the_decision_and_then_runs() -> None:
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()

    async def scenario() -> list[dict[str, Any]]:
        async with _retrying(stage, [_call(URL_CAPABLE, action="accept")]) as (answered, _):
            assert answered == []  # the retry now waits for a decision
            assert stage.runs == []
            stage.approvals.decide(pending.id, approve=True)
        return answered

    (outcome,) = anyio.run(scenario)
    assert outcome["structuredContent"] == {"status": "written"}
    assert stage.runs == [ARGUMENTS]


@pytest.mark.parametrize(
    "responses",
    [{"wrong": {"action": "accept"}}, "garbage", {"approval": "accept"}, [], None],
)
def test_a_retry_without_an_approval_response_asks_again_at_once(responses: Any) -> None:
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    retry = _call(URL_CAPABLE, request_id=2)
    retry.params["inputResponses"] = responses
    (again,) = anyio.run(_answered_at_once, stage, retry)
    assert again["resultType"] == "input_required"
    assert len(stage.approvals.pending()) == 1  # the same approval, still open
    assert stage.runs == []


def test_an_accepted_retry_of_an_approval_already_spent_asks_anew_at_once() -> None:
    """The approval the person saw was spent; the one this retry opens was never shown
    to anybody, so no decision on it can be on its way."""
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    (first,) = stage.approvals.pending()
    stage.approvals.decide(first.id, approve=True)
    _result(stage, _call(URL_CAPABLE, action="accept", request_id=2))  # runs, spends it
    (again,) = anyio.run(_answered_at_once, stage, _call(URL_CAPABLE, action="accept"))
    assert again["resultType"] == "input_required"
    (second,) = stage.approvals.pending()
    assert second.id != first.id
    url = again["inputRequests"]["approval"]["params"]["url"]
    assert url.endswith(f"/console/approvals/{second.id}")
    assert stage.runs == [ARGUMENTS]
    # Shown now, the new approval is waited for like any other.
    waits = anyio.run(_answered_at_once, stage, _call(URL_CAPABLE, action="accept"))
    assert waits == []


def test_a_client_without_url_elicitation_never_waits() -> None:
    stage = _stage(wait=30.0)
    _result(stage, _call())
    (told,) = anyio.run(_answered_at_once, stage, _call(action="accept", request_id=2))
    assert told["structuredContent"]["status"] == "approval_required"
    assert stage.runs == []


def test_of_two_concurrent_accepted_retries_exactly_one_runs() -> None:
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    retries = [_call(URL_CAPABLE, action="accept", request_id=n) for n in (2, 3)]

    async def scenario() -> list[dict[str, Any]]:
        async with _retrying(stage, retries) as (answered, _):
            assert answered == []  # both wait for the person
            stage.approvals.decide(pending.id, approve=True)
        return answered

    answered = anyio.run(scenario)
    assert sorted(result["resultType"] for result in answered) == ["complete", "input_required"]
    (ran,) = [result for result in answered if result["resultType"] == "complete"]
    assert ran["structuredContent"] == {"status": "written"}
    assert stage.runs == [ARGUMENTS]


def _sent_to_the_page(result: dict[str, Any], approval_id: str) -> bool:
    """Whether `result` is the final tool result that asks the agent to have its user
    decide at the approval page and repeat the call (not a question to ask the user)."""
    content = result.get("structuredContent") or {}
    return (
        result["resultType"] == "complete"
        and result.get("isError") is True
        and content.get("code") == "approval_required"
        and str(content.get("approval_url", "")).endswith("/" + approval_id)
    )


def test_retries_beyond_the_waiting_bound_are_told_to_repeat_the_call_later() -> None:
    # Each waiting retry holds one of the server's places for requests being answered:
    # one principal retrying many times over may hold only a few of them. Asking the
    # others the same question again would have their client ask its user again at
    # once, round after round; they are told to repeat the call once decided instead.
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    extra = 3
    retries = [
        _call(URL_CAPABLE, action="accept", request_id=n)
        for n in range(2, 2 + MAX_WAITS_PER_PRINCIPAL + extra)
    ]

    async def scenario() -> list[dict[str, Any]]:
        async with _retrying(stage, retries) as (answered, _):
            # Only the bound waits; the others were answered at once.
            assert len(answered) == extra
            assert all(_sent_to_the_page(result, pending.id) for result in answered)
            # Another principal still gets to wait.
            assert stage.era._may_wait(BOB.principal_id)
            stage.approvals.decide(pending.id, approve=True)
        return answered

    answered = anyio.run(scenario)
    ran = [
        result for result in answered if result.get("structuredContent") == {"status": "written"}
    ]
    assert len(ran) == 1
    assert stage.runs == [ARGUMENTS]
    assert stage.era._waiting == {}  # every wait gave its place back


def test_all_principals_together_wait_no_more_than_the_global_bound() -> None:
    stage = _stage(wait=30.0)
    principals = [
        registered_principal("op", f"user{n}")
        for n in range(MAX_WAITS // MAX_WAITS_PER_PRINCIPAL + 1)
    ]
    for principal in principals:
        _result(stage, _call(URL_CAPABLE), principal)
    answered: list[str] = []

    async def retry(principal: Principal, request_id: int) -> None:
        request = _call(URL_CAPABLE, action="accept", request_id=request_id)
        answer = await stage.era.answer(request, principal, None)
        result = stage.era.reply_of(request, answer)["result"]
        answered.append(result["structuredContent"]["code"])

    async def scenario() -> None:
        async with anyio.create_task_group() as group:
            for n, principal in enumerate(principals):
                for k in range(MAX_WAITS_PER_PRINCIPAL):
                    group.start_soon(retry, principal, 100 * n + k)
            await wait_all_tasks_blocked()
            waiting = len(principals) * MAX_WAITS_PER_PRINCIPAL - len(answered)
            assert waiting == MAX_WAITS
            group.cancel_scope.cancel()

    anyio.run(scenario)
    assert answered == ["approval_required"] * MAX_WAITS_PER_PRINCIPAL
    assert stage.era._waiting == {}


def test_a_retry_whose_client_left_does_not_run_or_spend_the_approval() -> None:
    stage = _stage(wait=30.0)
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    retry = _call(URL_CAPABLE, action="accept", request_id=2)

    async def scenario() -> list[dict[str, Any]]:
        gone = anyio.Event()
        async with _retrying(stage, [retry], gone.wait) as (answered, _):
            assert answered == []  # waiting for the person
            gone.set()  # the client closes its connection
        # The retry ended without a decision; the person approves only now.
        stage.approvals.decide(pending.id, approve=True)
        return answered

    (abandoned,) = anyio.run(scenario)
    assert abandoned["resultType"] == "input_required"  # sent to nobody
    assert stage.runs == []
    assert pending.state is ApprovalState.GRANTED  # not spent
    ran = _result(stage, _call(URL_CAPABLE, action="accept", request_id=3))
    assert ran["structuredContent"] == {"status": "written"}
    assert stage.runs == [ARGUMENTS]


def test_a_retry_that_waited_in_vain_asks_again() -> None:
    stage = _stage(wait=0.0)
    _result(stage, _call(URL_CAPABLE))
    again = _result(stage, _call(URL_CAPABLE, action="accept", request_id=2))
    assert again["resultType"] == "input_required"
    assert len(stage.approvals.pending()) == 1  # the same approval, still open
    assert stage.runs == []


def test_a_denied_approval_is_reported_after_the_wait() -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    stage.approvals.decide(stage.approvals.pending()[0].id, approve=False)
    denied = _result(stage, _call(URL_CAPABLE, action="accept", request_id=2))
    assert denied["structuredContent"]["code"] == "approval_denied"
    assert stage.runs == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_elicitation_is_not_run_and_says_so(action: str) -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    declined = _result(stage, _call(URL_CAPABLE, action=action, request_id=2))
    assert declined["resultType"] == "complete"
    assert declined["isError"] is True
    payload = declined["structuredContent"]
    assert payload["code"] == "approval_declined"
    assert payload["approval_url"].endswith(stage.approvals.pending()[0].id)
    assert stage.runs == []


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_a_declined_elicitation_never_spends_an_approval_granted_meanwhile(action: str) -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    stage.approvals.decide(pending.id, approve=True)
    declined = _result(stage, _call(URL_CAPABLE, action=action, request_id=2))
    assert declined["structuredContent"]["code"] == "approval_declined"
    assert stage.runs == []
    # The grant is still there for the call the person does want.
    ran = _result(stage, _call(URL_CAPABLE, action="accept", request_id=3))
    assert ran["structuredContent"] == {"status": "written"}
    assert stage.runs == [ARGUMENTS]


def test_a_declined_elicitation_is_noted_on_the_approval_it_leaves_open() -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    assert pending.client_declined_at is None
    version = stage.approvals.version
    _result(stage, _call(URL_CAPABLE, action="decline", request_id=2))
    # The person in the console sees that the user declined, on a decision still open.
    assert pending.client_declined_at is not None
    assert stage.approvals.version != version  # so the live list shows it
    stage.approvals.decide(pending.id, approve=False)
    _result(stage, _call(URL_CAPABLE, action="accept", request_id=3))  # reported once
    fresh = _result(stage, _call(URL_CAPABLE, request_id=4))
    assert fresh["resultType"] == "input_required"
    (asked_again,) = stage.approvals.pending()
    assert asked_again.client_declined_at is None  # a new request starts clean


def test_an_approval_binds_principal_tool_and_arguments() -> None:
    stage = _stage()
    _result(stage, _call(URL_CAPABLE))
    stage.approvals.decide(stage.approvals.pending()[0].id, approve=True)
    # Another principal, or other arguments, cannot spend alice's approval.
    assert _result(stage, _call(URL_CAPABLE), BOB)["resultType"] == "input_required"
    changed = _call(URL_CAPABLE, arguments={"text": "remember the eggs"})
    assert _result(stage, changed)["resultType"] == "input_required"
    assert stage.runs == []
    # Neither can a call from a handshake-era session of the same principal.
    legacy = anyio.run(
        stage.dispatcher.call_tool,
        Caller(ALICE, "session-1"),
        {"name": "notes__write", "arguments": ARGUMENTS},
    )
    assert not isinstance(legacy, dict)
    assert stage.runs == []
    assert _result(stage, _call())["structuredContent"] == {"status": "written"}


def test_approval_records_carry_no_session(tmp_path: Path) -> None:
    stage = _stage(tmp_path)
    _result(stage, _call(URL_CAPABLE))
    (pending,) = stage.approvals.pending()
    stage.approvals.decide(pending.id, approve=True)
    _result(stage, _call(URL_CAPABLE, action="accept"))
    assert pending.state is ApprovalState.SPENT
    audit = stage.dispatcher._audit
    assert audit is not None
    audit.commit()
    records = list(read_records(tmp_path / "audit"))
    events = [(r["event"], r.get("decision")) for r in records]
    assert events == [
        ("approval_requested", None),
        ("tool_call", "approval_required"),
        ("approval_granted", None),
        ("approval_spent", None),
        ("tool_call", "allowed"),
        ("tool_call", "allowed"),
    ]
    assert not any("session" in record for record in records)
