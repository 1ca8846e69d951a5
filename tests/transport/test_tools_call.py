"""tools/call on the host side: schema validation before the handler, the bounded
stringified-argument decode, separate worker limits, and one-line failure logs."""

from __future__ import annotations

import itertools
import json
import logging
import threading
from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import pytest
from anyio import to_thread
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import AuthFailure, Principal
from mymcp.runtime import compose_runtime
from mymcp.transport import OTHER_TOOL_THREADS
from tests.synthetic import DESTRUCTIVE, READ_ONLY, contribution, external_bindings, schema, tool
from tests.transport.conftest import BASE, HEADERS, NamedBearer, initialize, rpc, session_headers


def _call(client: TestClient, session: str, name: str, arguments: Any) -> dict[str, Any]:
    response = client.post(
        "/mcp",
        json=rpc("tools/call", {"name": name, "arguments": arguments}),
        headers=session_headers(session),
    )
    assert response.status_code == 200
    result: dict[str, Any] = response.json()["result"]
    return result


class Recorder:
    """A handler that remembers every arguments object it was given."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def __call__(self, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(arguments)
        return {"content": [{"type": "text", "text": "ok"}]}


@pytest.fixture
def recorded() -> tuple[TestClient, Recorder, str]:
    recorder = Recorder()
    strict = schema(
        tz={"type": "string", "maxLength": 32},
        tags={"type": "array", "items": {"type": "string", "maxLength": 8}},
        origin={"enum": ["explicit_user_statement", "user_approved_proposal"]},
    )
    strict["required"] = ["origin"]
    alpha = contribution("alpha", tool("alpha", "strict", recorder, input_schema=strict))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="0.1.0")
    client = TestClient(create_app(runtime, authenticator=NamedBearer()), base_url=BASE)
    return client, recorder, initialize(client)


@pytest.mark.parametrize(
    ("arguments", "field", "rule"),
    [
        ({"origin": "explicit_user_statement", "extra": 5}, "extra", "additionalProperties"),
        ({"tz": "UTC"}, "origin", "required"),
        ({"origin": "x"}, "origin", "enum"),
        ({"origin": "explicit_user_statement", "tz": 5}, "tz", "type"),
        (
            {"origin": "explicit_user_statement", "tags": ["ok", "fine", "much-too-long"]},
            "tags[2]",
            "maxLength",
        ),
    ],
)
def test_a_violation_is_a_tool_error_and_the_handler_never_runs(
    recorded: tuple[TestClient, Recorder, str], arguments: dict[str, Any], field: str, rule: str
) -> None:
    client, recorder, session = recorded
    result = _call(client, session, "alpha__strict", arguments)
    assert result["isError"] is True
    structured = result["structuredContent"]
    assert {k: structured[k] for k in ("status", "code", "field", "rule")} == {
        "status": "invalid_request",
        "code": "invalid_arguments",
        "field": field,
        "rule": rule,
    }
    assert json.loads(result["content"][0]["text"]) == structured
    assert "much-too-long" not in json.dumps(result)
    assert recorder.calls == []


def test_valid_arguments_reach_the_handler_unchanged(
    recorded: tuple[TestClient, Recorder, str],
) -> None:
    client, recorder, session = recorded
    arguments = {"origin": "user_approved_proposal", "tags": ["a"], "tz": "UTC"}
    result = _call(client, session, "alpha__strict", arguments)
    assert "isError" not in result
    assert recorder.calls == [arguments]


def test_a_stringified_argument_is_decoded_then_validated(
    recorded: tuple[TestClient, Recorder, str],
) -> None:
    client, recorder, session = recorded
    ok = _call(
        client, session, "alpha__strict", {"origin": "user_approved_proposal", "tags": '["a"]'}
    )
    assert "isError" not in ok
    assert recorder.calls == [{"origin": "user_approved_proposal", "tags": ["a"]}]
    bad = _call(
        client, session, "alpha__strict", {"origin": "user_approved_proposal", "tags": "[1]"}
    )
    assert (bad["structuredContent"]["field"], bad["structuredContent"]["rule"]) == (
        "tags[0]",
        "type",
    )


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,  # unbalanced: not JSON at all
        "[" * 5000 + "]" * 5000,  # valid JSON, far deeper than any decoder should follow
        '[{"a": 1, "a": 2}]',  # duplicate keys: not strict JSON
        '["\\ud800"]',  # an escaped lone surrogate: no Unicode text
        "[" + "1" * 5000 + "]",  # an integer past the digit limit
    ],
)
def test_an_undecodable_stringified_argument_is_the_normal_validation_error(
    client, text: str
) -> None:
    session = initialize(client)
    result = _call(client, session, "alpha__echo", {"tags": text})
    assert result["isError"] is True
    assert (result["structuredContent"]["field"], result["structuredContent"]["rule"]) == (
        "tags",
        "type",
    )


# --- worker limits ---------------------------------------------------------------------


def test_writers_blocked_on_a_lock_never_starve_read_only_tools() -> None:
    lock_released = threading.Event()
    entered = threading.Semaphore(0)
    running = 0
    most_running = 0
    counter = threading.Lock()

    def blocked_writer(arguments: dict[str, Any]) -> dict[str, Any]:
        nonlocal running, most_running
        with counter:
            running += 1
            most_running = max(most_running, running)
        entered.release()
        lock_released.wait(30)
        with counter:
            running -= 1
        return {"content": [{"type": "text", "text": "written"}]}

    def reader(arguments: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "read"}]}

    # Two plugins' writers: one plugin holds at most half the writers' places, so it
    # takes two to fill them all.
    alpha = contribution(
        "alpha",
        tool("alpha", "write", blocked_writer, effects=DESTRUCTIVE),
        tool("alpha", "read", reader, effects=READ_ONLY),
    )
    beta = contribution("beta", tool("beta", "write", blocked_writer, effects=DESTRUCTIVE))
    runtime = compose_runtime([alpha, beta], external_bindings(alpha, beta), server_version="0.1.0")
    app = create_app(runtime, authenticator=NamedBearer())
    # More writers than anyio's whole default thread pool (40 threads).
    writers = 24

    async def scenario() -> str:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE) as http:
            opened = await http.post(
                "/mcp", json=rpc("initialize", {"protocolVersion": "2025-11-25"}), headers=HEADERS
            )
            headers = session_headers(opened.headers["mcp-session-id"])

            ids = itertools.count(2)  # the requests run at once, so each has its own id

            async def call(name: str) -> dict[str, Any]:
                message = rpc("tools/call", {"name": name, "arguments": {}}, next(ids))
                response = await http.post("/mcp", json=message, headers=headers)
                result: dict[str, Any] = response.json()["result"]
                return result

            async with anyio.create_task_group() as group:
                for _ in range(writers):
                    group.start_soon(call, "alpha__write")
                    group.start_soon(call, "beta__write")
                waiter = anyio.CapacityLimiter(1)  # waiting must not need a pool thread itself
                for _ in range(OTHER_TOOL_THREADS):  # wait until the writer limit is full
                    assert await to_thread.run_sync(entered.acquire, True, 30, limiter=waiter)
                try:
                    with anyio.fail_after(20):
                        read = await call("alpha__read")
                finally:
                    lock_released.set()
            return str(read["content"][0]["text"])

    try:
        assert anyio.run(scenario) == "read"
    finally:
        lock_released.set()
    assert most_running <= OTHER_TOOL_THREADS


# --- failures on the request path ------------------------------------------------------


class ExplodingAuthenticator:
    async def authenticate(self, authorization_values: Sequence[str]) -> Principal | AuthFailure:
        raise RuntimeError("secret token in /home/someone/.config")

    def challenge_headers(self, failure: Any, *, token_presented: bool) -> dict[str, str]:
        return {}


def test_an_exception_on_the_request_path_is_one_content_free_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alpha = contribution("alpha", tool("alpha", "one"))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="0.1.0")
    app = create_app(runtime, authenticator=ExplodingAuthenticator())
    caplog.set_level(logging.INFO)
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as client:
        response = client.post("/mcp", json=rpc("ping"), headers=HEADERS)
        assert response.status_code == 500
        error = response.json()["error"]
        assert error["code"] == -32603
        assert "secret" not in response.text
        assert client.get("/health").status_code == 200  # still serving
    (line,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    request_id = error["data"]["request_id"]
    assert error["message"] == f"Internal error (request {request_id})"
    assert line.getMessage() == f"request_failed request_id={request_id} error_type=RuntimeError"
    assert line.exc_info is None
    assert "secret" not in caplog.text
    assert "/home/someone" not in caplog.text
