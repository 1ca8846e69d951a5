"""The stateless era (2026-07-28) on `/mcp`, in-process, beside the handshake era.

Every request carries its own envelope; nothing is kept between requests. These tests
drive the endpoint with raw HTTP so that every status, header and error body is seen
as a client sees it.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from mcp.shared.inbound import encode_header_value
from starlette.testclient import TestClient

from mymcp.app import create_app
from mymcp.auth import ANONYMOUS, AuthFailure, Principal
from mymcp.auth._principal import Identity, registered_principal
from mymcp.config import HostConfiguration, ServerSettings, parse_host_configuration
from mymcp.governance import AuditLog, Governance, Policy, read_records
from mymcp.plugin import structured_result
from mymcp.runtime import compose_runtime
from mymcp.transport._stateless import _canonical_integer, decode_mirrored_value
from mymcp.transport._versions import HANDSHAKE_ERA_VERSIONS, is_modern_request
from tests.config.helpers import to_toml
from tests.synthetic import contribution, external_bindings, schema, tool
from tests.transport.conftest import BASE, HEADERS, initialize, rpc, session_headers

VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
SERVER_INFO = {"name": "mymcp", "version": "0.1.0"}


class ScopedBearer:
    """`Bearer oauth:<sub>:<scope,scope>` is an OAuth principal with those scopes;
    `Bearer <name>` an operator; no header is anonymous."""

    async def authenticate(self, authorization_values: Any) -> Principal | AuthFailure:
        if not authorization_values:
            return ANONYMOUS
        scheme, _, token = authorization_values[0].partition(" ")
        if scheme.lower() != "bearer" or not token:
            return AuthFailure.REJECTED
        if token.startswith("oauth:"):
            _, subject, scopes = token.split(":", 2)
            identity = Identity(
                subject, f"oauth:{subject}", frozenset(filter(None, scopes.split(",")))
            )
            return registered_principal("oauth", identity)
        return registered_principal("operator", token)

    def challenge_headers(self, failure: Any, *, token_presented: bool) -> dict[str, str]:
        return {"www-authenticate": "Bearer"}

    def step_up_headers(self, scopes: frozenset[str]) -> dict[str, str]:
        needed = " ".join(sorted(scopes))
        return {"www-authenticate": f'Bearer error="insufficient_scope", scope="{needed}"'}


def _meta_result(arguments: dict[str, Any]) -> dict[str, Any]:
    result = structured_result({"ok": True})
    result["_meta"] = {"com.example/trace": "t-1"}
    return result


SHAPED: list[dict[str, Any]] = [{"content": []}]


def _shaped(arguments: dict[str, Any]) -> dict[str, Any]:
    return dict(SHAPED[0])


def _tools() -> list[Any]:
    return [
        tool("alpha", "echo", input_schema=schema(text={"type": "string"})),
        tool("alpha", "traced", _meta_result),
        tool("alpha", "shaped", _shaped),
        tool(
            "alpha",
            "routed",
            input_schema=schema(
                region={"type": "string", "x-mcp-header": "Region"},
                shard={"type": "integer", "x-mcp-header": "Shard"},
                flag={"type": "boolean", "x-mcp-header": "Flag"},
                note={"type": "string"},
                place={
                    "type": "object",
                    "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}},
                },
            ),
        ),
        tool(
            "alpha",
            "misannotated",
            input_schema=schema(
                rows={"type": "array", "items": {"type": "string", "x-mcp-header": "Row"}}
            ),
        ),
        tool(
            "alpha",
            "secret",
            input_schema=schema(region={"type": "string", "x-mcp-header": "Region"}),
        ),
    ]


def _app(
    policy: dict[str, Any] | None = None, audit: AuditLog | None = None, extra: int = 0
) -> Any:
    alpha = contribution("alpha", *_tools(), *(tool("alpha", f"extra_{i}") for i in range(extra)))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="0.1.0")
    settings = None
    if policy is not None:
        document = {"schema_version": 8, "policy": policy}
        settings = parse_host_configuration(to_toml(document).encode()).policy
    governance = Governance(Policy(settings, runtime), audit)
    return create_app(
        runtime,
        authenticator=ScopedBearer(),
        configuration=HostConfiguration(server=ServerSettings("127.0.0.1", 8000)),
        governance=governance,
    )


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(_app(), base_url=BASE) as test_client:
        yield test_client


def _name_header(params: dict[str, Any], method: str) -> dict[str, str]:
    name = params.get("name") if method == "tools/call" else None
    return {"mcp-name": encode_header_value(name)} if isinstance(name, str) else {}


def modern(
    client: TestClient,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    request_id: int | str | None = 7,
    headers: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Any:
    """POST one stateless-era message with conformant mirrored headers (overridable)."""
    body_params = {**(params or {}), "_meta": META if meta is None else meta}
    sent = {
        **HEADERS,
        "mcp-protocol-version": VERSION,
        "mcp-method": method,
        **_name_header(body_params, method),
        **(headers or {}),
    }
    sent = {key: value for key, value in sent.items() if value is not None}
    return client.post("/mcp", json=rpc(method, body_params, request_id), headers=sent)


# --- discovery, envelope, versions -------------------------------------------------------


def test_discover_describes_the_server_and_both_eras(client: TestClient) -> None:
    response = modern(client, "server/discover")
    assert response.status_code == 200
    assert "mcp-session-id" not in response.headers
    body = response.json()
    assert body["id"] == 7
    result = body["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [VERSION, "2025-11-25", "2025-06-18"]
    assert result["capabilities"] == {"tools": {"listChanged": False}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == SERVER_INFO
    assert result["instructions"].startswith("MyMCP serves Mnemosyne")
    assert (result["ttlMs"], result["cacheScope"]) == (300_000, "public")


@pytest.mark.parametrize(
    "meta",
    [
        {},
        {"io.modelcontextprotocol/clientCapabilities": {}},
        {"io.modelcontextprotocol/protocolVersion": VERSION},
    ],
)
def test_a_missing_envelope_field_is_invalid_params_400(client: TestClient, meta: Any) -> None:
    response = modern(client, "tools/list", meta=meta)
    assert response.status_code == 400
    assert response.json()["id"] == 7
    assert response.json()["error"]["code"] == -32602


def test_no_params_at_all_is_invalid_params_400(client: TestClient) -> None:
    headers = {**HEADERS, "mcp-protocol-version": VERSION, "mcp-method": "tools/list"}
    response = client.post("/mcp", json=rpc("tools/list"), headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (400, -32602)


def test_client_info_is_optional(client: TestClient) -> None:
    meta = {key: value for key, value in META.items() if not key.endswith("clientInfo")}
    assert modern(client, "server/discover", meta=meta).status_code == 200


def test_an_unsupported_version_names_the_supported_ones(client: TestClient) -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    response = modern(
        client, "server/discover", meta=meta, headers={"mcp-protocol-version": "2099-01-01"}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {
        "supported": [VERSION, "2025-11-25", "2025-06-18"],
        "requested": "2099-01-01",
    }


@pytest.mark.parametrize(
    "stated",
    [
        "2099-01-01",
        # The version header is never base64-wrapped: this names no revision served.
        "=?base64?" + base64.b64encode(VERSION.encode()).decode() + "?=",
    ],
)
def test_a_revision_not_served_is_named_before_the_missing_envelope(
    client: TestClient, stated: str
) -> None:
    # A request in a revision the server cannot read need not carry this one's envelope:
    # the client is told which revisions to use, not that its `_meta` is incomplete.
    headers = {**HEADERS, "mcp-protocol-version": stated, "mcp-method": "tools/list"}
    for params in (None, {}, {"_meta": {"io.modelcontextprotocol/protocolVersion": "x"}}):
        response = client.post("/mcp", json=rpc("tools/list", params), headers=headers)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == -32022
        assert error["data"]["requested"] == stated
        assert VERSION in error["data"]["supported"]


@pytest.mark.parametrize(
    ("overrides", "meta_version"),
    [
        ({"mcp-protocol-version": VERSION}, "2099-01-01"),  # header and body disagree
        ({"mcp-method": "tools/list"}, VERSION),
        ({"mcp-method": None}, VERSION),
        ({"mcp-method": "SERVER/DISCOVER"}, VERSION),  # values are case-sensitive
    ],
)
def test_headers_that_do_not_mirror_the_body_are_a_header_mismatch(
    client: TestClient, overrides: dict[str, Any], meta_version: str
) -> None:
    meta = {**META, "io.modelcontextprotocol/protocolVersion": meta_version}
    response = modern(client, "server/discover", meta=meta, headers=overrides)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020
    assert response.json()["id"] == 7


@pytest.mark.parametrize(
    ("method", "status", "code"),
    [
        # Raw Latin-1 is no valid header text, however equal to the body's method.
        ("tools/cal\xe9", 400, -32020),
        # The method header is never base64-wrapped: this one is the body's method as
        # sent, which this era does not serve.
        ("=?base64?" + base64.b64encode(b"tools/list").decode() + "?=", 404, -32601),
    ],
    ids=["latin-1", "wrapped-looking"],
)
def test_a_method_header_is_compared_with_the_body_exactly_as_sent(
    client: TestClient, method: str, status: int, code: int
) -> None:
    body = json.dumps(rpc(method, {"_meta": META})).encode()
    headers = [*HEADERS.items(), ("mcp-protocol-version", VERSION)]
    headers += [("mcp-method", method.encode("latin-1"))]
    response = client.post("/mcp", content=body, headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code)


def test_a_duplicated_routing_header_is_a_header_mismatch(client: TestClient) -> None:
    body = rpc("server/discover", {"_meta": META})
    headers = [*HEADERS.items(), ("mcp-protocol-version", VERSION)]
    headers += [("mcp-method", "server/discover"), ("mcp-method", "server/discover")]
    response = client.post("/mcp", content=json.dumps(body), headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (400, -32020)


@pytest.mark.parametrize(
    "versions",
    [[VERSION, VERSION], [VERSION, "2025-11-25"], ["2026-07-28\xe9"], ["2026-07-28\x00"]],
    ids=["repeated", "two-eras", "latin-1", "control"],
)
@pytest.mark.parametrize("params", [{"_meta": META}, {}], ids=["envelope", "no-envelope"])
def test_a_malformed_version_header_is_answered_as_one(
    client: TestClient, versions: list[str], params: dict[str, Any]
) -> None:
    body = rpc("server/discover", params)
    headers = [*HEADERS.items(), ("mcp-method", "server/discover")]
    headers += [("mcp-protocol-version", v.encode("latin-1")) for v in versions]
    response = client.post("/mcp", content=json.dumps(body), headers=headers)
    assert response.status_code == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 1,  # the body was read, so the error names its request
        "error": {"code": -32020, "message": "Malformed MCP-Protocol-Version header"},
    }
    assert "mcp-session-id" not in response.headers


@pytest.mark.parametrize("method", ["tools/list", "tools/call", "notifications/initialized"])
def test_an_envelope_without_its_version_header_is_told_so(client: TestClient, method: str) -> None:
    """The request reads as the handshake era without the header; its error says what is
    missing rather than asking for a session the client never meant to open."""
    params = {"name": "alpha__echo", "arguments": {}} if method == "tools/call" else {}
    request_id = None if method.startswith("notifications/") else 7
    response = modern(
        client, method, params, request_id=request_id, headers={"mcp-protocol-version": None}
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600
    assert error["message"].startswith("Missing MCP-Protocol-Version header")
    assert VERSION in error["message"]
    assert "mcp-session-id" not in response.headers
    # Without the envelope, the same request is a handshake request missing its session;
    # so is one whose header names a handshake revision: the header is not missing.
    bare = client.post("/mcp", json=rpc("tools/list", {}), headers=HEADERS)
    handshake = modern(client, method, params, headers={"mcp-protocol-version": "2025-06-18"})
    for answered in (bare, handshake):
        assert (answered.status_code, answered.json()["error"]["message"]) == (
            400,
            "Missing MCP-Session-Id header",
        )


@pytest.mark.parametrize(
    ("header", "status"),
    [
        ("alpha__echo", 200),
        (None, 400),  # required for tools/call
        ("alpha__traced", 400),
        ("=?base64?YWxwaGFfX2VjaG8=?=", 200),  # the same name, base64-encoded
        ("=?base64?YWxwaGFfX2VjaG8?=", 400),  # missing padding: not canonical
        ("  alpha__echo  ", 200),  # surrounding whitespace is not part of a value
    ],
)
def test_mcp_name_must_mirror_the_tool_name(
    client: TestClient, header: str | None, status: int
) -> None:
    params = {"name": "alpha__echo", "arguments": {"text": "hi"}}
    response = modern(client, "tools/call", params, headers={"mcp-name": header})
    assert response.status_code == status
    if status == 400:
        assert response.json()["error"]["code"] == -32020


@pytest.mark.parametrize(
    "mirrored",
    [
        {"mcp-method": "=?base64?dG9vbHMvbGlzdA==?="},  # "tools/list", wrapped
        {"mcp-method": "=?base64?dG9vbHMvY2FsbA==?="},  # "tools/call", wrapped
        {"mcp-protocol-version": "=?base64?MjAyNi0wNy0yOA==?="},  # "2026-07-28", wrapped
    ],
)
def test_a_wrapped_method_or_version_is_a_header_mismatch(
    client: TestClient, mirrored: dict[str, str]
) -> None:
    # Only a name or an argument may travel base64-wrapped. A proxy routing on the
    # method header as sent must see the method this server runs, so a wrapped one,
    # even of the right method, does not mirror it.
    response = modern(client, "tools/list", headers=mirrored)
    assert response.status_code == 400
    reply = response.json()
    assert reply["error"]["code"] == -32020
    assert reply["id"] == 7


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/subscribe", "nothing/here"]
)
def test_removed_and_unknown_methods_are_404_method_not_found(
    client: TestClient, method: str
) -> None:
    response = modern(client, method)
    assert response.status_code == 404
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32601, "message": "Method not found"},
    }


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_get_and_delete_are_405_in_the_stateless_era(client: TestClient, method: str) -> None:
    response = client.request(method, "/mcp", headers={**HEADERS, "mcp-protocol-version": VERSION})
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    # Every method is authenticated first, in this era too: bad credentials are a 401.
    rejected = {**HEADERS, "mcp-protocol-version": VERSION, "authorization": "Basic eA=="}
    refused = client.request(method, "/mcp", headers=rejected)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"


def test_a_session_header_is_ignored_and_none_is_minted(client: TestClient) -> None:
    session = initialize(client)
    for sent in (session, "no-such-session"):
        response = modern(client, "tools/list", headers={"mcp-session-id": sent})
        assert response.status_code == 200
        assert "mcp-session-id" not in response.headers


def test_notifications_are_accepted_and_dropped(client: TestClient) -> None:
    response = modern(client, "notifications/cancelled", {"requestId": 1}, request_id=None)
    assert (response.status_code, response.content) == (202, b"")
    stale = modern(
        client,
        "notifications/cancelled",
        request_id=None,
        headers={"mcp-protocol-version": "2099-01-01"},
    )
    assert (stale.status_code, stale.json()["error"]["code"]) == (400, -32022)


def test_a_posted_response_is_refused(client: TestClient) -> None:
    headers = {**HEADERS, "mcp-protocol-version": VERSION}
    response = client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "result": {}}, headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (400, -32600)


def test_the_handshake_era_is_unchanged_beside_it(client: TestClient) -> None:
    session = initialize(client)
    listed = client.post("/mcp", json=rpc("tools/list"), headers=session_headers(session))
    result = listed.json()["result"]
    assert "resultType" not in result
    assert "ttlMs" not in result
    assert (
        client.post("/mcp", json=rpc("ping"), headers=session_headers(session)).json()["result"]
        == {}
    )


# --- tools -------------------------------------------------------------------------------


def test_tools_list_is_deterministic_and_public_without_policy(client: TestClient) -> None:
    first, second = modern(client, "tools/list").json(), modern(client, "tools/list").json()
    assert first == second
    result = first["result"]
    assert [t["name"] for t in result["tools"]][:3] == [
        "list_tools",
        "alpha__echo",
        "alpha__traced",
    ]
    assert (result["ttlMs"], result["cacheScope"], result["resultType"]) == (
        300_000,
        "public",
        "complete",
    )


def test_tools_list_pages_carry_the_same_hints() -> None:
    with TestClient(_app(extra=150), base_url=BASE) as client:
        first = modern(client, "tools/list").json()["result"]
        cursor = first["nextCursor"]
        second = modern(client, "tools/list", {"cursor": cursor}).json()["result"]
        assert "nextCursor" not in second
        assert len(first["tools"]) + len(second["tools"]) == 1 + len(_tools()) + 150
        assert second["cacheScope"] == first["cacheScope"] == "public"
        bad = modern(client, "tools/list", {"cursor": "nope"})
        assert (bad.status_code, bad.json()["error"]["code"]) == (400, -32602)


POLICY = {
    "default": "deny",
    "rules": [
        {"principals": ["anonymous"], "allow": ["alpha__echo"]},
        {"principals": ["operator:alice"], "allow": ["alpha__*"]},
        {"principals": ["scope:notes.write"], "allow": ["alpha__traced"]},
    ],
}


def test_a_policy_makes_the_list_private_and_filters_it_like_the_handshake_era() -> None:
    with TestClient(_app(POLICY), base_url=BASE) as client:
        anonymous = modern(client, "tools/list").json()["result"]
        assert anonymous["cacheScope"] == "private"
        assert [t["name"] for t in anonymous["tools"]] == ["list_tools", "alpha__echo"]
        alice = modern(client, "tools/list", headers={"authorization": "Bearer alice"}).json()[
            "result"
        ]
        assert len(alice["tools"]) == 1 + len(_tools())
        session = initialize(client)
        legacy = client.post(
            "/mcp", json=rpc("tools/list"), headers=session_headers(session)
        ).json()
        assert legacy["result"]["tools"] == anonymous["tools"]
        denied = modern(client, "tools/call", {"name": "alpha__traced", "arguments": {}})
        absent = modern(client, "tools/call", {"name": "alpha__nothing", "arguments": {}})
        assert denied.status_code == absent.status_code == 400
        assert denied.json()["error"] == {"code": -32602, "message": "Unknown tool: alpha__traced"}


def test_a_scope_that_would_allow_the_call_gets_the_same_403_as_the_handshake_era() -> None:
    with TestClient(_app(POLICY), base_url=BASE) as client:
        auth = {"authorization": "Bearer oauth:carol:"}
        response = modern(
            client, "tools/call", {"name": "alpha__traced", "arguments": {}}, headers=auth
        )
        assert response.status_code == 403
        assert (
            response.headers["www-authenticate"]
            == 'Bearer error="insufficient_scope", scope="notes.write"'
        )
        assert response.json()["error"]["code"] == -32600
        scoped = {"authorization": "Bearer oauth:carol:notes.write"}
        allowed = modern(
            client, "tools/call", {"name": "alpha__traced", "arguments": {}}, headers=scoped
        )
        assert allowed.status_code == 200


def test_results_are_typed_and_name_the_server_next_to_their_own_meta(client: TestClient) -> None:
    echoed = modern(client, "tools/call", {"name": "alpha__echo", "arguments": {"text": "hi"}})
    result = echoed.json()["result"]
    assert result["resultType"] == "complete"
    assert result["structuredContent"]["echo"] == {"text": "hi"}
    assert result["_meta"] == {"io.modelcontextprotocol/serverInfo": SERVER_INFO}
    traced = modern(client, "tools/call", {"name": "alpha__traced", "arguments": {}}).json()[
        "result"
    ]
    assert traced["_meta"] == {
        "com.example/trace": "t-1",
        "io.modelcontextprotocol/serverInfo": SERVER_INFO,
    }


def test_an_unknown_tool_is_invalid_params_400(client: TestClient) -> None:
    response = modern(client, "tools/call", {"name": "alpha__nothing", "arguments": {}})
    assert response.status_code == 400
    assert response.json()["error"] == {"code": -32602, "message": "Unknown tool: alpha__nothing"}


# --- mirrored tool arguments (x-mcp-header) ----------------------------------------------


def _routed(client: TestClient, arguments: dict[str, Any], **params: str) -> Any:
    headers = {f"mcp-param-{token}": value for token, value in params.items()}
    return modern(
        client, "tools/call", {"name": "alpha__routed", "arguments": arguments}, headers=headers
    )


@pytest.mark.parametrize(
    ("arguments", "headers", "status"),
    [
        ({"region": "eu-west"}, {"region": "eu-west"}, 200),
        ({"region": "eu-west"}, {}, 400),  # the argument is there, its header is not
        ({}, {"region": "eu-west"}, 400),  # a header for an absent argument
        ({"region": "eu-west"}, {"region": "us-east"}, 400),
        ({"region": "Zürich"}, {"region": "=?base64?WsO8cmljaA==?="}, 200),
        ({"region": "Zürich"}, {"region": "=?base64?WsO8cmljaA?="}, 400),  # bad padding
        ({"region": "eu"}, {"region": "=?base64?ZX!!?="}, 400),  # not base64 at all
        ({"shard": 42}, {"shard": "42"}, 200),
        ({"shard": 42}, {"shard": "42.0"}, 200),  # integers compare as numbers
        ({"shard": 42}, {"shard": "42.5"}, 400),
        ({"shard": 42}, {"shard": "4e1"}, 400),
        ({"shard": 42}, {"shard": "-042.00"}, 400),
        ({"shard": -42}, {"shard": "-042.00"}, 200),
        ({"shard": 0}, {"shard": "-0"}, 200),
        # Beyond any float, and more digits than `int` reads: compared, never converted.
        ({"shard": 10**400}, {"shard": "1" + "0" * 400}, 200),
        ({"shard": 10**400}, {"shard": "1" + "0" * 399}, 400),
        ({"shard": 3}, {"shard": "9" * 4301}, 400),
        ({"flag": True}, {"flag": "true"}, 200),
        ({"flag": True}, {"flag": "True"}, 400),
        ({"note": "x"}, {}, 200),  # not mirrored
        ({"place": {"zone": "eu"}}, {"zone": "eu"}, 200),
        # The tool is given a stringified object decoded: it is mirrored like the object.
        ({"place": '{"zone": "evil"}'}, {}, 400),
        ({"place": '{"zone": "eu"}'}, {"zone": "us"}, 400),
        ({"place": '{"zone": "eu"}'}, {"zone": "eu"}, 200),
        ({"shard": "42"}, {"shard": "42.0"}, 200),
        # Numbers as clients print them: Python writes 1e20 as "1e+20"; a string with a
        # space travels base64-wrapped, and the tool is given the integer it decodes to.
        ({"shard": 1e20}, {"shard": "1e+20"}, 200),
        # Past 2**53 a whole float is not the integer it prints as: 1e23 is stored as
        # 99999999999999991611392. The header names the float as the client prints it.
        ({"shard": 1e23}, {"shard": "1e+23"}, 200),
        ({"shard": 1.2345678901234567e25}, {"shard": "1.2345678901234567e+25"}, 200),
        ({"shard": 1e23}, {"shard": "1e+22"}, 400),
        ({"shard": 42.0}, {"shard": "42"}, 200),
        ({"shard": 42.0}, {"shard": "0x2a"}, 400),
        ({"shard": 420}, {"shard": "4.2e2"}, 200),
        ({"shard": 420}, {"shard": "4.2e1"}, 400),
        ({"shard": " 5"}, {"shard": "=?base64?IDU=?="}, 200),
    ],
)
def test_mirrored_arguments_must_match_their_headers(
    client: TestClient, arguments: dict[str, Any], headers: dict[str, str], status: int
) -> None:
    response = _routed(client, arguments, **headers)
    assert response.status_code == status, response.text
    if status == 400:
        assert response.json()["error"]["code"] == -32020


def test_a_mirrored_argument_hidden_in_stringified_json_is_named(client: TestClient) -> None:
    # A client mirrors the arguments as it sends them, so it sends no header for a value
    # inside a string; the tool would be given that value, so the call is refused, and
    # the client is told how to send it.
    response = _routed(client, {"place": '{"zone": "eu"}'})
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert message.startswith("Mcp-Param-Zone is missing: the argument it mirrors arrived")
    assert "send place as JSON itself" in message


def test_a_misannotated_schema_is_not_checked(client: TestClient) -> None:
    params = {"name": "alpha__misannotated", "arguments": {"rows": ["a"]}}
    assert modern(client, "tools/call", params, headers={"mcp-param-row": "b"}).status_code == 200


def test_header_checks_never_reveal_a_tool_the_caller_may_not_call() -> None:
    with TestClient(_app(POLICY), base_url=BASE) as client:
        params = {"name": "alpha__secret", "arguments": {"region": "eu"}}
        response = modern(client, "tools/call", params, headers={"mcp-param-region": "us"})
        assert response.json()["error"] == {
            "code": -32602,
            "message": "Unknown tool: alpha__secret",
        }


# --- audit -------------------------------------------------------------------------------


def test_calls_are_audited_without_a_session(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit", max_segment_bytes=1 << 20, max_segments=4)
    with TestClient(_app(audit=audit), base_url=BASE) as client:
        modern(client, "tools/call", {"name": "alpha__echo", "arguments": {"text": "x"}})
        session = initialize(client)
        client.post(
            "/mcp",
            json=rpc("tools/call", {"name": "alpha__echo", "arguments": {"text": "x"}}),
            headers=session_headers(session),
        )
    calls = [r for r in read_records(tmp_path / "audit") if r["event"] == "tool_call"]
    assert [("session" in r, r["decision"], r["outcome"]) for r in calls] == [
        (False, "allowed", "ok"),
        (True, "allowed", "ok"),
    ]
    assert calls[0]["args_digest"] == calls[1]["args_digest"]


# --- properties --------------------------------------------------------------------------


@given(st.text(max_size=40))
def test_every_value_the_sdk_mirrors_decodes_to_itself(value: str) -> None:
    # The SDK client's encoder is the oracle: whatever it sends, we read back exactly.
    # (Lone surrogates cannot be sent as UTF-8, so the SDK never mirrors them.)
    if any(0xD800 <= ord(char) <= 0xDFFF for char in value):
        return
    assert decode_mirrored_value(encode_header_value(value)) == value


@given(
    st.integers() | st.integers(min_value=-(10**500), max_value=10**500),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=0, max_value=3),
)
def test_an_integer_header_reads_as_the_number_it_writes(
    number: int, zeros: int, fraction: int
) -> None:
    sign, digits = ("-", str(-number)) if number < 0 else ("", str(number))
    written = sign + "0" * zeros + digits + ("." + "0" * fraction if fraction else "")
    assert _canonical_integer(written) == str(number)


NUMBER = r"[-+]?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]{1,4})?"


@given(
    st.from_regex(r"[ \t]?-?[0-9]{1,30}(\.[0-9]{1,5})?([eE][-+]?[0-9]{1,4})?[ \t]?", fullmatch=True)
    | st.text(max_size=12)
)
def test_a_header_is_an_integer_exactly_when_its_decimal_value_is_one(text: str) -> None:
    # Decimal is the oracle: it reads every number as written, exponent included.
    stripped = text.strip(" \t\r\n")
    expected = None
    if re.fullmatch(NUMBER, stripped):
        value = Decimal(stripped)
        if value == value.to_integral_value():
            written = format(value.to_integral_value(), "f")
            expected = "0" if written.lstrip("-") == "0" else written
    assert _canonical_integer(text) == expected


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("1e+20", "100000000000000000000"),  # how Python prints 1e20
        ("1e21", "1000000000000000000000"),  # how JavaScript prints 1e21
        (" 5", "5"),  # a value with a space travels base64-wrapped, and reads back so
        ("+7", "7"),
        ("1.5e1", "15"),
        ("-0.0e5", "0"),
        ("15e-1", None),
        ("1e99999", None),  # an exponent no argument can have
        ("0x10", None),
        ("", None),
    ],
)
def test_integer_header_examples(written: str, expected: str | None) -> None:
    assert _canonical_integer(written) == expected


@given(st.binary(max_size=30))
def test_only_canonical_base64_of_utf8_decodes(raw: bytes) -> None:
    wrapped = f"=?base64?{base64.b64encode(raw).decode()}?="
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        assert decode_mirrored_value(wrapped) is None
    else:
        assert decode_mirrored_value(wrapped) == text
    if raw:
        unpadded = wrapped.replace("=?=", "?=").replace("==?=", "?=")
        if unpadded != wrapped:
            assert decode_mirrored_value(unpadded) is None


@given(st.text(max_size=20))
def test_header_values_outside_printable_ascii_never_decode(value: str) -> None:
    if not all(" " <= char <= "~" for char in value):
        assert decode_mirrored_value(value) is None


_versions = st.sampled_from([*sorted(HANDSHAKE_ERA_VERSIONS), VERSION, "2099-01-01", ""]) | st.text(
    max_size=12
)


@given(st.lists(_versions, max_size=3), st.booleans())
def test_the_era_follows_the_version_header(values: list[str], has_session: bool) -> None:
    chosen = is_modern_request(values, has_session=has_session)
    if not values or (len(values) == 1 and values[0] in HANDSHAKE_ERA_VERSIONS):
        assert chosen is False
    elif VERSION in values:
        assert chosen is True  # a stateless revision is never a handshake session's
    else:
        assert chosen is (not has_session)


_odd = st.text(max_size=12) | st.sampled_from(["", VERSION, "2025-11-25", "=?base64?Pz8=?="])
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _odd,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_odd, inner, max_size=3),
    max_leaves=8,
)
_meta_values = st.fixed_dictionaries(
    {},
    optional={
        "io.modelcontextprotocol/protocolVersion": _odd | _json,
        "io.modelcontextprotocol/clientCapabilities": _json | st.just({"elicitation": {"url": {}}}),
        "io.modelcontextprotocol/clientInfo": _json,
    },
)
_stateless_params = st.fixed_dictionaries(
    {"_meta": _meta_values | _json},
    optional={
        "name": st.sampled_from(["alpha__echo", "alpha__routed", "list_tools"]) | _odd,
        "arguments": st.dictionaries(st.sampled_from(["text", "region", "shard"]), _json),
        "cursor": _odd,
        "inputResponses": _json,
    },
)
_stateless_methods = (
    st.sampled_from(["server/discover", "tools/list", "tools/call", "initialize", "ping"]) | _odd
)
_header_values = _odd.filter(lambda v: v.isascii() and v.isprintable())


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=_stateless_methods,
    params=_stateless_params | _json,
    request_id=st.integers() | _odd | st.none(),
    headers=st.dictionaries(
        st.sampled_from(["mcp-protocol-version", "mcp-method", "mcp-name", "mcp-param-region"]),
        _header_values,
    ),
)
def test_arbitrary_stateless_requests_never_fail_or_open_a_session(
    client: TestClient, method: str, params: Any, request_id: Any, headers: dict[str, str]
) -> None:
    # A handshake-era version header sends the request down the session path, where a
    # successful initialize is meant to open a session: that is not a stateless request.
    assume(headers.get("mcp-protocol-version") not in HANDSHAKE_ERA_VERSIONS)
    body = rpc(method, params, request_id)
    sent = {**HEADERS, "mcp-protocol-version": VERSION, **headers}
    response = client.post("/mcp", content=json.dumps(body), headers=sent)
    assert response.status_code in (200, 202, 400, 404)
    assert "mcp-session-id" not in response.headers
    if response.status_code != 202:
        reply = response.json()
        if "result" in reply:
            assert reply["result"]["resultType"] in ("complete", "input_required")
        else:
            assert reply["error"]["code"] in (-32700, -32600, -32601, -32602, -32020, -32022)


_extra_fields = st.dictionaries(
    (st.sampled_from(["_meta", "resultType", "isError", "structuredContent", "x"]) | _odd).filter(
        lambda key: key != "content"  # a result without content is a plugin fault
    ),
    _json,
    max_size=4,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(extra=_extra_fields)
def test_every_result_is_completed_once_whatever_its_fields(
    client: TestClient, extra: dict[str, Any]
) -> None:
    SHAPED[0] = {"content": [{"type": "text", "text": "x"}], **extra}
    response = modern(client, "tools/call", {"name": "alpha__shaped", "arguments": {}})
    assert response.status_code == 200
    text = response.text
    # Valid JSON with no key written twice, whichever way the result was completed.
    result = json.loads(text, object_pairs_hook=_unique)["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == SERVER_INFO
    structured = extra.get("structuredContent")
    if (
        not isinstance(extra.get("isError", False), bool)
        or not (structured is None or isinstance(structured, dict))
        or not isinstance(extra.get("_meta", {}), dict)
    ):
        # No tool result a client could read: the plugin's fault, answered as such.
        assert result["structuredContent"]["code"] == "internal_error"
        return
    own = extra.get("_meta")
    if isinstance(own, dict):
        for key, value in own.items():
            if key != "io.modelcontextprotocol/serverInfo":
                assert result["_meta"][key] == value
    for key, value in extra.items():
        if key not in ("_meta", "resultType"):
            assert result[key] == value


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), keys
    return dict(pairs)


_ABSENT_FIELD = object()
_PLAIN_NAME = "alpha__echo"
_WRAPPED_NAME = "=?base64?" + base64.b64encode(_PLAIN_NAME.encode()).decode() + "?="


def _expected_refusal(
    meta: dict[str, Any], versions: list[str], methods: list[str], names: list[str]
) -> tuple[int, int, str | None] | None:
    """What the documented checks, in their documented order, make of one `tools/call`
    of `alpha__echo`: (status, code, message) of the refusal, or None when it runs."""
    if len(versions) != 1:
        return (400, -32020, "Malformed MCP-Protocol-Version header")
    version = meta.get("io.modelcontextprotocol/protocolVersion", _ABSENT_FIELD)
    capabilities = meta.get("io.modelcontextprotocol/clientCapabilities", _ABSENT_FIELD)
    if version is _ABSENT_FIELD or capabilities is _ABSENT_FIELD:
        if versions != [VERSION]:
            return (400, -32022, None)  # a revision the server cannot read is named first
        return (400, -32602, None)  # the message names both required fields
    if versions != [version]:
        return (400, -32020, "MCP-Protocol-Version does not match the request's protocol version")
    if methods != ["tools/call"]:
        return (400, -32020, "Mcp-Method does not match the request's method")
    if names not in ([_PLAIN_NAME], [_WRAPPED_NAME]):
        return (400, -32020, "Mcp-Name does not match the request's name")
    if version != VERSION:
        if not isinstance(version, str):
            return (400, -32602, "The protocol version is no string")
        return (400, -32022, None)
    if not isinstance(capabilities, dict):
        return (400, -32602, "The client capabilities are no object")
    return None


def _field(*values: Any) -> st.SearchStrategy[Any]:
    return st.sampled_from([_ABSENT_FIELD, *values])


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    version=_field(VERSION, "2099-01-01", 7, None),
    capabilities=_field({}, {"elicitation": {"url": {}}}, [], None, "x"),
    versions=st.lists(st.sampled_from([VERSION, "2099-01-01"]), min_size=1, max_size=2),
    methods=st.lists(st.sampled_from(["tools/call", "tools/list"]), max_size=2),
    names=st.lists(
        st.sampled_from([_PLAIN_NAME, _WRAPPED_NAME, "alpha__traced", "=?base64?bad?="]),
        max_size=2,
    ),
)
def test_envelope_and_routing_headers_are_judged_in_the_documented_order(
    client: TestClient,
    version: Any,
    capabilities: Any,
    versions: list[str],
    methods: list[str],
    names: list[str],
) -> None:
    fields = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }
    meta = {key: value for key, value in fields.items() if value is not _ABSENT_FIELD}
    params = {"name": _PLAIN_NAME, "arguments": {"text": "hi"}, "_meta": meta}
    sent = [*HEADERS.items()]
    sent += [("mcp-protocol-version", value) for value in versions]
    sent += [("mcp-method", value) for value in methods]
    sent += [("mcp-name", value) for value in names]
    response = client.post("/mcp", json=rpc("tools/call", params, 7), headers=sent)
    expected = _expected_refusal(meta, versions, methods, names)
    reply = response.json()
    if expected is None:
        assert response.status_code == 200
        assert reply["result"]["resultType"] == "complete"
        return
    status, code, message = expected
    assert (response.status_code, reply["error"]["code"]) == (status, code)
    if message is not None:
        assert reply["error"]["message"] == message
