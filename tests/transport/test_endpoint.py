"""Every transport rule of the /mcp endpoint against the real app, in-process."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import gzip
import json
import logging
import re
from typing import Any

import anyio
import pytest
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.config import HostConfiguration, ServerSettings
from mymcp.runtime import compose_runtime
from mymcp.transport import MAX_BODY_BYTES
from mymcp.transport._exchange import RequestHeaders, read_body
from tests.synthetic import contribution, external_bindings, tool
from tests.transport.conftest import (
    BASE,
    HEADERS,
    NamedBearer,
    initialize,
    rpc,
    session_headers,
)


def test_initialize_issues_a_visible_ascii_session_and_server_info(client) -> None:
    response = client.post(
        "/mcp",
        json=rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}),
        headers=HEADERS,
    )
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    session_id = response.headers["mcp-session-id"]
    assert re.fullmatch(r"[\x21-\x7E]{43,}", session_id)
    result = response.json()["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"] == {"name": "mymcp", "version": "0.1.0"}
    assert result["capabilities"] == {"tools": {"listChanged": False}}


@pytest.mark.parametrize(
    ("requested", "answered"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2099-01-01", "2025-11-25"),
        ("2025-03-26", "2025-11-25"),
    ],
)
def test_version_negotiation(client, requested, answered) -> None:
    response = client.post(
        "/mcp", json=rpc("initialize", {"protocolVersion": requested}), headers=HEADERS
    )
    assert response.json()["result"]["protocolVersion"] == answered


@pytest.mark.parametrize(
    ("member", "value", "wanted"),
    [
        ("protocolVersion", 7, "a string"),
        ("capabilities", 5, "an object"),
        ("capabilities", [], "an object"),
        ("clientInfo", "mymcp", "an object"),
        ("clientInfo", None, "an object"),
    ],
)
def test_initialize_params_of_the_wrong_type_open_no_session(client, member, value, wanted) -> None:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, member: value}
    response = client.post("/mcp", json=rpc("initialize", params), headers=HEADERS)
    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers
    assert response.json()["error"] == {
        "code": -32602,
        "message": f"initialize params: {member} must be {wanted}",
    }


def test_initialize_accepts_a_handshake_version_header(client) -> None:
    assert initialize(client, **{"mcp-protocol-version": "2025-11-25"})


def test_anonymous_principal_gets_sessions_and_they_work(client) -> None:
    session = initialize(client)
    assert (
        client.post(
            "/mcp",
            json=rpc("notifications/initialized", request_id=None),
            headers=session_headers(session),
        ).status_code
        == 202
    )
    listed = client.post(
        "/mcp", json=rpc("tools/list", request_id=2), headers=session_headers(session)
    )
    assert listed.status_code == 200
    names = [t["name"] for t in listed.json()["result"]["tools"]]
    assert names == ["list_tools", "alpha__echo", "alpha__explode"]


def test_notification_and_client_reply_get_202_with_no_body(client) -> None:
    session = initialize(client)
    for body in (
        rpc("notifications/cancelled", {"requestId": 1}, request_id=None),
        {"jsonrpc": "2.0", "id": 9, "result": {}},
    ):
        response = client.post("/mcp", json=body, headers=session_headers(session))
        assert response.status_code == 202
        assert response.content == b""


def test_missing_unknown_and_terminated_sessions(client) -> None:
    missing = client.post(
        "/mcp", json=rpc("ping"), headers={**HEADERS, "mcp-protocol-version": "2025-11-25"}
    )
    assert missing.status_code == 400
    unknown = client.post("/mcp", json=rpc("ping"), headers=session_headers("nope" * 10))
    assert unknown.status_code == 404
    session = initialize(client)
    assert (
        client.post("/mcp", json=rpc("ping"), headers=session_headers(session)).status_code == 200
    )
    deleted = client.delete("/mcp", headers=session_headers(session))
    assert deleted.status_code == 204
    assert (
        client.post("/mcp", json=rpc("ping"), headers=session_headers(session)).status_code == 404
    )
    assert client.delete("/mcp", headers=session_headers(session)).status_code == 404


def test_session_bound_to_principal(client) -> None:
    session = initialize(client, authorization="Bearer alice")
    ok = client.post(
        "/mcp", json=rpc("ping"), headers=session_headers(session, authorization="Bearer alice")
    )
    assert ok.status_code == 200
    for other in ("Bearer mallory", None):
        headers = session_headers(session)
        if other:
            headers["authorization"] = other
        assert client.post("/mcp", json=rpc("ping"), headers=headers).status_code == 404


def test_session_of_another_runtime_generation_is_unknown(make_client) -> None:
    first, second = make_client(), make_client()
    session = initialize(first)
    assert (
        second.post("/mcp", json=rpc("ping"), headers=session_headers(session)).status_code == 404
    )


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"mcp-protocol-version": "1999-01-01"}, 400),
        ({"mcp-protocol-version": "2025-06-18"}, 400),  # not what was negotiated
        ({"mcp-protocol-version": ""}, 400),
    ],
)
def test_protocol_header_after_initialize(client, headers, status) -> None:
    session = initialize(client)
    sent = {**HEADERS, "mcp-session-id": session, **headers}
    assert client.post("/mcp", json=rpc("ping"), headers=sent).status_code == status


def test_strict_mode_requires_the_header_and_lax_mode_tolerates_absence(make_client) -> None:
    strict, lax = make_client(strict=True), make_client(strict=False)
    for client, status in ((strict, 400), (lax, 200)):
        session = initialize(client)
        headers = {**HEADERS, "mcp-session-id": session}
        assert client.post("/mcp", json=rpc("ping"), headers=headers).status_code == status


def test_duplicate_session_header_is_malformed(client) -> None:
    session = initialize(client)
    headers = [(k, v) for k, v in session_headers(session).items()] + [("mcp-session-id", session)]
    response = client.post("/mcp", content=json.dumps(rpc("ping")), headers=headers)
    assert response.status_code == 400


def test_negotiated_older_version_is_the_one_required(client) -> None:
    session = initialize(client, version="2025-06-18")
    ok = client.post("/mcp", json=rpc("ping"), headers=session_headers(session, "2025-06-18"))
    assert ok.status_code == 200


def test_server_discover_without_a_version_header_stays_in_the_handshake_era(client) -> None:
    # Without `MCP-Protocol-Version` a request belongs to the handshake era, where
    # nothing but `initialize` is served outside a session.
    probe = client.post("/mcp", json=rpc("server/discover", {"_meta": {}}), headers=HEADERS)
    assert probe.status_code == 400
    body = probe.json()
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert "mcp-session-id" not in probe.headers


@pytest.mark.parametrize("method", ["post", "get", "delete"])
def test_foreign_origin_is_forbidden_on_every_method(client, method) -> None:
    response = client.request(
        method.upper(), "/mcp", headers={**HEADERS, "origin": "http://evil.example"}
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    "origin", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"]
)
def test_own_loopback_origins_are_allowed(client, origin) -> None:
    assert initialize(client, origin=origin)


def test_foreign_host_is_forbidden(client) -> None:
    response = client.post(
        "/mcp", json=rpc("initialize", {}), headers={**HEADERS, "host": "evil.example.com"}
    )
    assert response.status_code == 403


@pytest.mark.parametrize(
    "accept",
    [
        "application/json",
        "text/event-stream",
        "text/html",
        "application/json, text/event-stream;q=0",
    ],
)
def test_accept_must_admit_json_and_sse(client, accept) -> None:
    response = client.post(
        "/mcp", json=rpc("initialize", {}), headers={**HEADERS, "accept": accept}
    )
    assert response.status_code == 406


@pytest.mark.parametrize(
    "accept", ["text/event-stream, application/json", "*/*", "application/*, text/*"]
)
def test_accept_order_and_wildcards(client, accept) -> None:
    assert initialize(client, accept=accept)


@pytest.mark.parametrize("coding", ["gzip", "br", "deflate", "identity, gzip"])
@pytest.mark.parametrize("stateless", [False, True], ids=["session", "stateless"])
def test_a_compressed_body_is_refused_as_such(client, coding: str, stateless: bool) -> None:
    body = gzip.compress(json.dumps(rpc("initialize", {})).encode())
    headers = {**HEADERS, "content-encoding": coding}
    if stateless:
        headers.update({"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"})
    response = client.post("/mcp", content=body, headers=headers)
    assert response.status_code == 415
    assert response.headers["accept-encoding"] == "identity"
    assert response.json()["error"]["message"] == (
        "Content-Encoding is not supported: send the request body uncompressed"
    )


@pytest.mark.parametrize("coding", ["gzip, chunked", "deflate,chunked", "x-custom, chunked"])
@pytest.mark.parametrize("stateless", [False, True], ids=["session", "stateless"])
def test_a_transfer_coding_besides_chunked_is_not_implemented(
    client, coding: str, stateless: bool
) -> None:
    # Only the chunked framing is undone before the body is read; a gzip transfer
    # coding left in place would read as text the body is not.
    headers = {**HEADERS, "transfer-encoding": coding}
    if stateless:
        headers.update({"mcp-protocol-version": "2026-07-28", "mcp-method": "server/discover"})
    response = client.post("/mcp", content=json.dumps(rpc("initialize", {})), headers=headers)
    assert response.status_code == 501
    assert response.json()["error"]["message"] == (
        "Transfer-Encoding other than chunked is not supported: send the request body "
        "uncompressed, chunked or with a Content-Length"
    )


@pytest.mark.parametrize("coding", ["chunked", "Chunked", " chunked ", ", chunked"])
def test_a_chunked_body_is_read(client, coding: str) -> None:
    headers = {**HEADERS, "transfer-encoding": coding}
    response = client.post("/mcp", content=json.dumps(rpc("initialize", {})), headers=headers)
    assert response.status_code == 200


@pytest.mark.parametrize("coding", ["identity", "Identity", ""])
def test_a_body_said_to_be_uncompressed_is_read(client, coding: str) -> None:
    headers = {**HEADERS, "content-encoding": coding}
    assert client.post("/mcp", json=rpc("initialize", {}), headers=headers).status_code == 200


def test_content_type_must_be_json(client) -> None:
    response = client.post("/mcp", content=b"{}", headers={**HEADERS, "content-type": "text/plain"})
    assert response.status_code == 415
    ok = client.post(
        "/mcp",
        json=rpc("initialize", {}),
        headers={**HEADERS, "content-type": "application/json; charset=utf-8"},
    )
    assert ok.status_code == 200


def test_oversized_body_is_413_before_parsing(client) -> None:
    body = b"[" + b" " * MAX_BODY_BYTES + b"]"
    assert client.post("/mcp", content=body, headers=HEADERS).status_code == 413

    def chunks():
        yield b"{"
        yield b" " * MAX_BODY_BYTES

    assert client.post("/mcp", content=chunks(), headers=HEADERS).status_code == 413


@pytest.mark.parametrize("declared", ["\u00b2", "1" * 21, "9" * 5000, "-1", "0x10"])
def test_a_content_length_that_is_no_byte_count_is_refused_as_too_large(declared: str) -> None:
    # Servers in front normally refuse these first; the endpoint must not trust them.
    headers = RequestHeaders()
    headers.content_length = (declared,)

    async def never() -> dict[str, Any]:
        raise AssertionError("the body must not be read")

    assert anyio.run(read_body, headers, never) is None


def test_invalid_json_batch_and_non_objects(client) -> None:
    bad = client.post("/mcp", content=b"{nope", headers=HEADERS)
    assert bad.status_code == 400
    assert bad.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    batch = client.post("/mcp", json=[rpc("ping")], headers=HEADERS)
    assert batch.status_code == 400
    assert batch.json()["error"]["code"] == -32600
    assert batch.json()["id"] is None
    for body in ("3", '"x"', "null", '{"jsonrpc":"1.0","id":1,"method":"ping"}'):
        response = client.post("/mcp", content=body.encode(), headers=HEADERS)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32600


def test_other_methods_get_405_with_allow(client) -> None:
    for method in ("PUT", "PATCH"):
        response = client.request(method, "/mcp")
        assert response.status_code == 405
        assert response.headers["allow"] == "POST, DELETE"


def test_get_with_session_is_405_and_needs_event_stream(client) -> None:
    session = initialize(client)
    refused = client.get("/mcp", headers=session_headers(session))
    assert refused.status_code == 405
    assert refused.headers["allow"] == "POST, DELETE"  # never the method it refused
    json_only = session_headers(session, accept="application/json")
    assert client.get("/mcp", headers=json_only).status_code == 406
    assert client.get("/mcp", headers=HEADERS).status_code == 400


def test_ping_and_unknown_method(client) -> None:
    session = initialize(client)
    ping = client.post("/mcp", json=rpc("ping", request_id="p-1"), headers=session_headers(session))
    assert ping.json() == {"jsonrpc": "2.0", "id": "p-1", "result": {}}
    with_meta = rpc("ping", {"_meta": {"progressToken": 1}}, request_id=2)
    assert client.post("/mcp", json=with_meta, headers=session_headers(session)).json() == {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {},
    }
    for params in (["x"], "x", 3):  # params are an object in every MCP request
        refused = client.post(
            "/mcp", json=rpc("ping", params, request_id=3), headers=session_headers(session)
        )
        assert refused.json()["error"] == {"code": -32602, "message": "Invalid params"}
    unknown = client.post(
        "/mcp", json=rpc("resources/list", request_id=5), headers=session_headers(session)
    )
    assert unknown.status_code == 200
    assert unknown.json()["error"]["code"] == -32601
    assert unknown.json()["id"] == 5


def test_tools_call_returns_text_and_structured_content(client) -> None:
    session = initialize(client)
    response = client.post(
        "/mcp",
        json=rpc("tools/call", {"name": "alpha__echo", "arguments": {"text": "hé"}}),
        headers=session_headers(session),
    )
    result = response.json()["result"]
    assert result["structuredContent"]["echo"] == {"text": "hé"}
    assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
    assert "isError" not in result
    # The synchronous handler ran off the event loop.
    assert result["structuredContent"]["thread"] != "MainThread"


def test_stringified_arguments_are_decoded_one_layer_where_schema_forbids_strings(client) -> None:
    session = initialize(client)
    arguments = {"tags": '["a","b"]', "count": "3", "text": '["stay"]'}
    response = client.post(
        "/mcp",
        json=rpc("tools/call", {"name": "alpha__echo", "arguments": arguments}),
        headers=session_headers(session),
    )
    echoed = response.json()["result"]["structuredContent"]["echo"]
    assert echoed == {"tags": ["a", "b"], "count": 3, "text": '["stay"]'}


@pytest.mark.parametrize(
    "params",
    [
        [],
        "x",
        {"name": "alpha__echo", "arguments": []},
        {"name": "alpha__echo", "arguments": "{}"},
        {"name": 3},
        {"arguments": {}},
    ],
)
def test_non_object_params_or_arguments_are_invalid_params(client, params) -> None:
    session = initialize(client)
    response = client.post("/mcp", json=rpc("tools/call", params), headers=session_headers(session))
    assert response.json()["error"]["code"] == -32602


def test_unknown_tool_is_invalid_params(client) -> None:
    session = initialize(client)
    response = client.post(
        "/mcp",
        json=rpc("tools/call", {"name": "nope", "arguments": {}}),
        headers=session_headers(session),
    )
    assert response.json()["error"] == {"code": -32602, "message": "Unknown tool: nope"}


def test_failing_tool_is_an_error_result_that_leaks_nothing(client, caplog) -> None:
    session = initialize(client)
    caplog.set_level(logging.INFO)
    response = client.post(
        "/mcp", json=rpc("tools/call", {"name": "alpha__explode"}), headers=session_headers(session)
    )
    result = response.json()["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["code"] == "internal_error"
    assert "/home/someone" not in response.text
    assert "/home/someone" not in caplog.text
    # One line, naming the type and an id the client was given too; no traceback.
    (failure,) = [r for r in caplog.records if "tool_failure" in r.getMessage()]
    request_id = result["structuredContent"]["request_id"]
    assert failure.getMessage() == (
        f"tool_failure request_id={request_id} tool=alpha__explode error_type=RuntimeError"
    )
    assert failure.exc_info is None
    assert "Traceback" not in caplog.text


class _Unwelcome(BaseException):
    """What no tool should raise, and some do."""


def _raising(error: BaseException) -> Any:
    def handler(arguments: dict[str, Any]) -> dict[str, Any]:
        raise error

    return handler


async def _cancelling(arguments: dict[str, Any]) -> dict[str, Any]:
    raise asyncio.CancelledError  # nobody cancelled this request


# Each handler's misbehaviour, and the error type its failure is logged with (for a
# result no client could read, with the reason that tells its author what to fix).
MISBEHAVING = {
    "exit": (_raising(SystemExit("secret exit")), "SystemExit"),
    "interrupt": (_raising(KeyboardInterrupt("secret interrupt")), "KeyboardInterrupt"),
    "own_base": (_raising(_Unwelcome("secret base")), "_Unwelcome"),
    # Thrown into the coroutine awaiting the thread, it would break that coroutine.
    "generator_exit": (_raising(GeneratorExit("secret close")), "GeneratorExit"),
    "cancel": (_cancelling, "CancelledError"),
    "items": (
        lambda arguments: {"content": [1, None, "x"]},
        "invalid_result reason=content_block_malformed",
    ),
    "untyped_item": (
        lambda arguments: {"content": [{"text": "x"}]},
        "invalid_result reason=content_block_malformed",
    ),
    "is_error": (
        lambda arguments: {"content": [], "isError": "yes"},
        "invalid_result reason=is_error_not_a_boolean",
    ),
    "structured": (
        lambda arguments: {"content": [], "structuredContent": [1]},
        "invalid_result reason=structured_content_not_an_object",
    ),
    "text_without_text": (
        lambda arguments: {"content": [{"type": "text"}]},
        "invalid_result reason=content_block_malformed",
    ),
    "image_without_data": (
        lambda arguments: {"content": [{"type": "image", "mimeType": "image/png"}]},
        "invalid_result reason=content_block_malformed",
    ),
    "unknown_block": (
        lambda arguments: {"content": [{"type": "video", "data": "x"}]},
        "invalid_result reason=content_block_malformed",
    ),
    "priority_as_text": (
        lambda arguments: {
            "content": [{"type": "text", "text": "x", "annotations": {"priority": "high"}}]
        },
        "invalid_result reason=content_block_malformed",
    ),
    "unknown_audience": (
        lambda arguments: {
            "content": [{"type": "text", "text": "x", "annotations": {"audience": ["robot"]}}]
        },
        "invalid_result reason=content_block_malformed",
    ),
    "block_meta_not_object": (
        lambda arguments: {"content": [{"type": "text", "text": "x", "_meta": 5}]},
        "invalid_result reason=content_block_malformed",
    ),
    "link_size_as_text": (
        lambda arguments: {
            "content": [{"type": "resource_link", "uri": "x:1", "name": "x", "size": "big"}]
        },
        "invalid_result reason=content_block_malformed",
    ),
    "link_icon_without_text_src": (
        lambda arguments: {
            "content": [{"type": "resource_link", "uri": "x:1", "name": "x", "icons": [{"src": 5}]}]
        },
        "invalid_result reason=content_block_malformed",
    ),
    "link_icon_theme": (
        lambda arguments: {
            "content": [
                {
                    "type": "resource_link",
                    "uri": "x:1",
                    "name": "x",
                    "icons": [{"src": "x", "theme": "blue"}],
                }
            ]
        },
        "invalid_result reason=content_block_malformed",
    ),
    "result_meta_not_object": (
        lambda arguments: {"content": [], "_meta": "nope"},
        "invalid_result reason=meta_not_an_object",
    ),
    "resource_without_body": (
        lambda arguments: {"content": [{"type": "resource", "resource": {"uri": "x:1"}}]},
        "invalid_result reason=content_block_malformed",
    ),
    # A synchronous handler that returns a coroutine should have been `async def`.
    "coroutine_from_sync": (
        lambda arguments: _cancelling(arguments),
        "invalid_result reason=awaitable_not_awaited",
    ),
    # A class name is plugin text too: one that would forge a log line is not written.
    "forged_type_name": (
        _raising(type("Evil\nERROR fake_line secret=/home/x", (Exception,), {})()),
        "<unnamed>",
    ),
}

# Results every client reads: each kind of content block MCP defines.
WELL_FORMED_BLOCKS = [
    {"type": "text", "text": "x"},
    {
        "type": "text",
        "text": "x",
        "annotations": {"audience": ["user"], "priority": 0.5, "lastModified": "2026-01-01"},
        "_meta": {"k": 1},
        "unknown_member": True,
    },
    {
        "type": "resource_link",
        "uri": "file:///x",
        "name": "x",
        "title": "X",
        "description": "an x",
        "mimeType": "text/plain",
        "size": 3,
        "icons": [
            {"src": "https://example.com/x.png"},
            {"src": "data:,x", "mimeType": "image/png", "sizes": ["48x48"], "theme": "dark"},
        ],
    },
    {"type": "image", "data": "aGk=", "mimeType": "image/png"},
    {"type": "audio", "data": "aGk=", "mimeType": "audio/wav"},
    {"type": "resource_link", "uri": "file:///x", "name": "x"},
    {"type": "resource", "resource": {"uri": "file:///x", "text": "x"}},
    {"type": "resource", "resource": {"uri": "file:///x", "blob": "aGk="}},
]


@pytest.mark.parametrize("name", sorted(MISBEHAVING))
def test_a_handler_that_raises_anything_or_answers_no_tool_result_is_an_error_result(
    caplog: pytest.LogCaptureFixture, name: str
) -> None:
    handler, error_type = MISBEHAVING[name]
    plugin = contribution("rt", tool("rt", name, handler), tool("rt", "fine"))
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    config = HostConfiguration(server=ServerSettings("127.0.0.1", 8000))
    app = create_app(runtime, authenticator=NamedBearer(), configuration=config)
    caplog.set_level(logging.INFO)
    with TestClient(app, base_url=BASE) as client:
        headers = session_headers(initialize(client))
        call = rpc("tools/call", {"name": f"rt__{name}"})
        reply = client.post("/mcp", json=call, headers=headers)
        assert reply.status_code == 200
        result = reply.json()["result"]
        assert result["isError"] is True
        assert result["structuredContent"]["code"] == "internal_error"
        # The server goes on serving.
        fine = client.post("/mcp", json=rpc("tools/call", {"name": "rt__fine"}), headers=headers)
        assert fine.json()["result"].get("isError", False) is False
    (failure,) = [r for r in caplog.records if "tool_failure" in r.getMessage()]
    assert failure.getMessage().endswith(f"tool=rt__{name} error_type={error_type}")
    assert "secret" not in reply.text
    assert "secret" not in caplog.text


def _call_once(plugin: Any, name: str) -> dict[str, Any]:
    """The result of one call of `name`, from an app serving `plugin` in a session."""
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    config = HostConfiguration(server=ServerSettings("127.0.0.1", 8000))
    app = create_app(runtime, authenticator=NamedBearer(), configuration=config)
    with TestClient(app, base_url=BASE) as client:
        headers = session_headers(initialize(client))
        reply = client.post("/mcp", json=rpc("tools/call", {"name": name}), headers=headers)
    result: dict[str, Any] = reply.json()["result"]
    return result


def test_every_kind_of_content_block_reaches_the_client(caplog: pytest.LogCaptureFixture) -> None:
    answer = {"content": WELL_FORMED_BLOCKS}
    plugin = contribution("rt", tool("rt", "blocks", lambda arguments: answer))
    assert _call_once(plugin, "rt__blocks")["content"] == WELL_FORMED_BLOCKS
    assert "tool_failure" not in caplog.text


class _AsyncCallable:
    """A handler object whose `__call__` is `async def` (a class-based handler)."""

    async def __call__(self, arguments: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"content": [{"type": "text", "text": "awaited"}]}


@pytest.mark.parametrize(
    "handler",
    [
        _AsyncCallable(),
        functools.partial(_AsyncCallable().__call__),
        functools.partial(functools.partial(_AsyncCallable())),
    ],
    ids=["object", "partial", "partial-of-object"],
)
def test_an_awaitable_handler_of_any_form_is_awaited(
    handler: Any, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = contribution("rt", tool("rt", "awaited", handler))
    (activated,) = plugin.tools
    assert activated.is_async
    result = _call_once(plugin, "rt__awaited")
    assert result["content"] == [{"type": "text", "text": "awaited"}]
    assert "tool_failure" not in caplog.text


def _with_output_schema(handler: Any) -> Any:
    declared = tool("rt", "counted", handler)
    output = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    return dataclasses.replace(declared, tool={**declared.tool, "outputSchema": output})


@pytest.mark.parametrize(
    ("answer", "delivered"),
    [
        ({"content": [], "structuredContent": {"n": 1}}, True),
        ({"content": [], "structuredContent": {"n": "one"}}, False),
        ({"content": [{"type": "text", "text": "no structure"}]}, False),
        # An error result need not keep the schema: clients do not check it either.
        ({"content": [{"type": "text", "text": "failed"}], "isError": True}, True),
    ],
)
def test_a_result_that_breaks_its_output_schema_never_reaches_the_client(
    caplog: pytest.LogCaptureFixture, answer: dict[str, Any], delivered: bool
) -> None:
    plugin = contribution("rt", _with_output_schema(lambda arguments: answer))
    result = _call_once(plugin, "rt__counted")
    if delivered:
        assert result == answer
    else:
        assert result["structuredContent"]["code"] == "internal_error"
        assert "tool=rt__counted error_type=invalid_result" in caplog.text


def test_failing_tool_traceback_only_at_debug_level(client, caplog) -> None:
    session = initialize(client)
    caplog.set_level(logging.DEBUG, logger="mymcp.transport.tools")
    client.post(
        "/mcp", json=rpc("tools/call", {"name": "alpha__explode"}), headers=session_headers(session)
    )
    (failure,) = [r for r in caplog.records if "tool_failure" in r.getMessage()]
    assert failure.exc_info is not None


def test_tools_list_pagination_and_bad_cursor(make_client) -> None:
    client = make_client(extra_tools=150)
    session = initialize(client)
    names, cursor, pages = [], None, 0
    while True:
        params = {"cursor": cursor} if cursor else {}
        page = client.post("/mcp", json=rpc("tools/list", params), headers=session_headers(session))
        result = page.json()["result"]
        names += [t["name"] for t in result["tools"]]
        pages += 1
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert pages == 2
    assert len(names) == len(set(names)) == 153
    bad = client.post(
        "/mcp", json=rpc("tools/list", {"cursor": "garbage"}), headers=session_headers(session)
    )
    assert bad.json()["error"]["code"] == -32602


def test_only_the_cursor_the_server_issued_reads_as_that_page(make_client) -> None:
    client = make_client(extra_tools=150)
    headers = session_headers(initialize(client))

    def listed(cursor: str) -> dict[str, Any]:
        reply = client.post("/mcp", json=rpc("tools/list", {"cursor": cursor}), headers=headers)
        assert reply.status_code == 200
        return reply.json()

    issued = client.post("/mcp", json=rpc("tools/list"), headers=headers).json()["result"]
    cursor = issued["nextCursor"]
    assert "result" in listed(cursor)
    generation = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    generation = generation.rpartition(":")[0]

    def spelled(page: str) -> str:
        return base64.urlsafe_b64encode(f"{generation}:{page}".encode()).decode().rstrip("=")

    # Digits that `str.isdigit` admits but `int` refuses, or reads as 1, and other
    # spellings of page 1: each an invalid cursor, never a failure or another page.
    variants = [spelled(page) for page in ("\u00b2", "\u0661", "01", "+1", " 1", "1 ", "")]
    variants += [cursor + "==", cursor + "=", spelled("9" * 5000)[:256], cursor.upper()]
    for variant in variants:
        if variant != cursor:
            assert listed(variant)["error"]["code"] == -32602, variant


def test_full_session_store_evicts_the_idlest_session_instead_of_refusing(make_client) -> None:
    client = make_client(session_limit=2)
    first = initialize(client, authorization="Bearer alice")
    second = initialize(client, authorization="Bearer bob")
    ping = rpc("ping")
    alice = session_headers(first, authorization="Bearer alice")
    bob = session_headers(second, authorization="Bearer bob")
    assert client.post("/mcp", json=ping, headers=alice).status_code == 200  # bob is idlest
    third = initialize(client, authorization="Bearer carol")
    assert client.post("/mcp", json=ping, headers=bob).status_code == 404
    assert client.post("/mcp", json=ping, headers=alice).status_code == 200
    carol = session_headers(third, authorization="Bearer carol")
    assert client.post("/mcp", json=ping, headers=carol).status_code == 200


def test_rejected_authentication_is_an_empty_401_before_parsing(client) -> None:
    response = client.post(
        "/mcp", content=b"{not json", headers={**HEADERS, "authorization": "Basic x"}
    )
    assert response.status_code == 401
    assert response.content == b""


def test_health_and_version(client) -> None:
    assert client.get("/health").json() == {"status": "ok"}
    assert client.get("/version").json() == {
        "name": "mymcp",
        "version": "0.1.0",
        "protocolVersion": "2025-11-25",
        "protocolVersions": ["2026-07-28", "2025-11-25", "2025-06-18"],
    }
