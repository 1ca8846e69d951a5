"""The hostile-wire corpus against the real server: no 5xx, no traceback, still serving.

Lone surrogates (escaped and as raw bytes), deep nesting, huge numbers, odd Unicode in
every field, ids of every type and every method, inside and outside a session, sent as
raw HTTP to a real `mymcp` process. Then the arguments of every tool the real server
publishes, with every memory tool enabled over a private memory root: drawn from each
tool's own published schema (so that many calls get past validation into the tools),
mutated, stringified, or replaced by anything at all, on both protocol eras; and the
stateless era's envelope and mirrored headers, fuzzed on their own.
"""

from __future__ import annotations

import base64
import json
import re
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.server import RunningServer, make_sandbox, serve
from tests.transport.test_wire import _messages, _odd_text, _raw, _values

HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}

pytestmark = pytest.mark.slow

_raw_surrogates = st.sampled_from([b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xff"])


def _session(client: httpx.Client, url: str) -> dict[str, str]:
    opened = client.post(
        url,
        json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
        headers=HEADERS,
    )
    assert opened.status_code == 200
    return {
        **HEADERS,
        "mcp-session-id": opened.headers["mcp-session-id"],
        "mcp-protocol-version": "2025-11-25",
    }


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    message=_messages,
    depth=st.sampled_from([0, 0, 0, 1, 70, 2000]),
    in_session=st.booleans(),
    raw_bytes=st.none() | _raw_surrogates,
)
def test_the_real_server_answers_every_hostile_message_below_500(
    anonymous_server: RunningServer,
    message: dict[str, Any],
    depth: int,
    in_session: bool,
    raw_bytes: bytes | None,
) -> None:
    body = _raw(message, depth)
    if raw_bytes is not None:  # invalid UTF-8 inside the method name
        body = body.replace(b'"method": "', b'"method": "' + raw_bytes, 1)
    with httpx.Client(timeout=10) as client:
        headers = _session(client, anonymous_server.url) if in_session else HEADERS
        response = client.post(anonymous_server.url, content=body, headers=headers)
        assert response.status_code < 500, (response.status_code, response.text)
        if response.content:
            json.loads(response.content)  # every body is one JSON document
    assert anonymous_server.process.poll() is None
    assert not any("Traceback" in line for line in anonymous_server.output)


def test_an_h2c_upgrade_offered_on_the_first_request_is_declined_and_the_request_served(
    anonymous_server: RunningServer,
) -> None:
    # Java's HTTP client sends its first request to a plain-HTTP server this way.
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
        }
    ).encode()
    head = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{anonymous_server.port}\r\n"
        "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
        "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", anonymous_server.port), timeout=15) as client:
        client.sendall(head + body)
        received = b""
        while chunk := client.recv(65536):  # the server closes after its answer
            received += chunk
    status, _, rest = received.partition(b"\r\n")
    assert status == b"HTTP/1.1 200 OK"  # no 101: the upgrade is declined
    reply = json.loads(rest.partition(b"\r\n\r\n")[2])
    assert reply["result"]["protocolVersion"] == "2025-11-25"
    assert b"mcp-session-id" in rest.lower()


def test_the_server_logged_no_traceback_and_still_serves(anonymous_server: RunningServer) -> None:
    body = b'{"jsonrpc":"2.0","id":"\\ud800","method":"initialize","params":{}}'
    with httpx.Client(timeout=10) as client:
        refused = client.post(anonymous_server.url, content=body, headers=HEADERS)
        assert refused.status_code == 400
        assert "mcp-session-id" not in refused.headers
        health = client.get(anonymous_server.url.removesuffix("/mcp") + "/health")
        assert health.json() == {"status": "ok"}
    assert not any("Traceback" in line for line in anonymous_server.output)


# --- every published tool's arguments, and the stateless envelope --------------------------

MEMORY_GATES = {
    "MNEMOSYNE_MEMORY_REMEMBER_ENABLED": "true",
    "MNEMOSYNE_MEMORY_ARCHIVE_RESTORE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_REVISE_ENABLED": "true",
    "MNEMOSYNE_MEMORY_FORGET_ENABLED": "true",
}
STATELESS = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": STATELESS,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
SEED = {
    "scope": "project",
    "namespace": {"kind": "project", "id": "fuzz", "label": "Fuzz"},
    "collection": {"id": "notes", "label": "Notes"},
    "kind": "decision",
    "language": "en",
    "title": "A seeded memory",
    "content": "Fuzzed calls may revise, archive or forget this one.",
    "tags": ["seed"],
    "origin": "user_approved_proposal",
}
_FUZZ_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@dataclass
class MemoryServer:
    server: RunningServer
    http: httpx.Client
    session: dict[str, str]
    schemas: dict[str, Mapping[str, Any]]
    references: list[dict[str, Any]]


def _post(
    stack: MemoryServer, body: bytes, headers: Mapping[str, str], request_id: object
) -> httpx.Response:
    """Send one request and check the reply is a well-formed JSON-RPC answer to it."""
    response = stack.http.post(stack.server.url, content=body, headers=dict(headers))
    assert response.status_code < 500, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/json", response.text
    reply = response.json()
    assert reply["jsonrpc"] == "2.0"
    assert reply["id"] in (request_id, None)
    assert ("result" in reply) != ("error" in reply), reply
    if "error" in reply:
        assert isinstance(reply["error"]["code"], int)
        assert isinstance(reply["error"]["message"], str)
        assert response.status_code in (200, 400, 404)
    else:
        assert response.status_code == 200
        assert isinstance(reply["result"], dict)
    return response


def _call_body(name: str, arguments: object, request_id: int, *, stateless: bool) -> bytes:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if stateless:
        params["_meta"] = META
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).replace("\\\\ud", "\\ud").encode()


def _mirrored(method: str, name: str | None = None) -> dict[str, str]:
    headers = {**HEADERS, "mcp-protocol-version": STATELESS, "mcp-method": method}
    if name is not None:
        plain = name.isascii() and name.isprintable() and not name.startswith("=?")
        encoded = base64.b64encode(name.encode("utf-8", "surrogatepass")).decode()
        headers["mcp-name"] = name if plain else f"=?base64?{encoded}?="
    return headers


@pytest.fixture(scope="module")
def memory_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MemoryServer]:
    sandbox = make_sandbox(tmp_path_factory.mktemp("memory-fuzz"))
    sandbox.write_config("schema_version = 1\n" + sandbox.server_table())
    with serve(sandbox, MEMORY_GATES) as server, httpx.Client(timeout=30) as http:
        stack = MemoryServer(server, http, {}, {}, [])
        stack.session = _session(http, server.url)
        listed = _post(stack, json.dumps(_list_message()).encode(), stack.session, 1)
        stack.schemas = {t["name"]: t["inputSchema"] for t in listed.json()["result"]["tools"]}
        assert {"memory_remember", "memory_forget", "memory_revise"} <= set(stack.schemas)
        for number in range(3):  # real records for fuzzed references to find
            seed = {**SEED, "title": f"Seeded memory {number}"}
            body = _call_body("memory_remember", seed, number, stateless=False)
            result = _post(stack, body, stack.session, number).json()["result"]
            stack.references.append(result["structuredContent"]["reference"])
        yield stack
    assert not any("Traceback" in line for line in server.output)


def _list_message() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def _pattern_text(pattern: str, low: int, high: int) -> st.SearchStrategy[str]:
    try:
        re.compile(pattern)
    except re.error:  # a JSON Schema pattern Python cannot read: any text
        return st.text(min_size=low, max_size=high)
    matching = st.from_regex(pattern, fullmatch=pattern.startswith("^"))
    return matching.filter(lambda text: low <= len(text) <= high)


def _from_schema(schema: object, references: list[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """Values the schema admits, most of the time (patterns, bounds, enums, branches)."""
    if not isinstance(schema, Mapping):
        return _values
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    branches = schema.get("oneOf") or schema.get("anyOf")
    if branches:
        return st.one_of([_from_schema(branch, references) for branch in branches])
    kind = schema.get("type")
    if kind == "string":
        low, high = schema.get("minLength", 0), schema.get("maxLength", 60)
        if "pattern" in schema:
            return _pattern_text(schema["pattern"], low, high)
        return st.text(min_size=low, max_size=max(low, min(high, 60))) | _odd_text
    if kind == "integer":
        return st.integers(schema.get("minimum", -(10**6)), schema.get("maximum", 10**6))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        items = _from_schema(schema.get("items"), references)
        low = schema.get("minItems", 0)
        return st.lists(items, min_size=low, max_size=max(low, min(schema.get("maxItems", 4), 4)))
    if kind == "object":
        return _object_from_schema(schema, references)
    return _values


def _object_from_schema(
    schema: Mapping[str, Any], references: list[dict[str, Any]]
) -> st.SearchStrategy[dict[str, Any]]:
    properties = schema.get("properties", {})
    required = [name for name in schema.get("required", []) if name in properties]
    fields = {name: _field(name, inner, references) for name, inner in properties.items()}
    whole = st.fixed_dictionaries(
        {name: fields[name] for name in required},
        optional={name: value for name, value in fields.items() if name not in required},
    )
    return whole | st.fixed_dictionaries({}, optional=fields)  # or required ones missing


def _field(
    name: str, schema: Mapping[str, Any], references: list[dict[str, Any]]
) -> st.SearchStrategy[Any]:
    admitted = _from_schema(schema, references)
    if name == "reference":  # a memory that exists, so the mutation tools reach it
        admitted = st.sampled_from(references) | admitted
    if schema.get("type") in ("array", "object"):
        # Stringified JSON where the schema forbids strings: decoded one layer, or a
        # validation error, never a crash (also when it nests far too deep).
        stringified = admitted.map(json.dumps) | st.sampled_from(["[" * 5000, "{" * 70, "[1,"])
        return admitted | stringified
    return admitted


def _arguments(
    schema: Mapping[str, Any], references: list[dict[str, Any]]
) -> st.SearchStrategy[object]:
    admitted = _object_from_schema(schema, references)
    extra = st.dictionaries(_odd_text, _values, min_size=1, max_size=2)
    mutated = st.tuples(admitted, extra).map(lambda pair: {**pair[0], **pair[1]})
    anything = _values | st.dictionaries(_odd_text, _values, max_size=3)
    return st.one_of(admitted, admitted, mutated, anything)


@_FUZZ_SETTINGS
@given(data=st.data(), stateless=st.booleans())
def test_every_published_tool_answers_fuzzed_arguments_on_both_eras(
    memory_server: MemoryServer, data: st.DataObject, stateless: bool
) -> None:
    stack = memory_server
    name = data.draw(st.sampled_from(sorted(stack.schemas)), label="tool")
    arguments = data.draw(_arguments(stack.schemas[name], stack.references), label="arguments")
    body = _call_body(name, arguments, 7, stateless=stateless)
    headers = _mirrored("tools/call", name) if stateless else stack.session
    reply = _post(stack, body, headers, 7).json()
    if "error" in reply:
        # Only a body that escapes a lone surrogate (no text: refused before anything
        # reads it) or arguments that are no object are protocol errors; a call to a
        # published tool with an object is always answered with a tool result.
        code = reply["error"]["code"]
        assert code == -32700 or (code == -32602 and not isinstance(arguments, dict)), reply
        return
    assert reply["id"] == 7
    result = reply["result"]
    assert isinstance(result["content"], list)
    assert isinstance(result.get("isError", False), bool)
    if stateless:
        assert result["resultType"] == "complete"
    assert stack.server.process.poll() is None


_meta_values = st.fixed_dictionaries(
    {},
    optional={
        "io.modelcontextprotocol/protocolVersion": st.sampled_from([STATELESS, "2025-11-25"])
        | _values,
        "io.modelcontextprotocol/clientCapabilities": st.just({})
        | st.just({"elicitation": {"url": {}}})
        | _values,
        "io.modelcontextprotocol/clientInfo": _values,
        "io.modelcontextprotocol/logLevel": _values,
        "progressToken": _values,
    },
)
_header_values = st.none() | st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E))


@_FUZZ_SETTINGS
@given(
    data=st.data(),
    method=st.sampled_from(["tools/call", "tools/list", "server/discover", "ping"]) | _odd_text,
    meta=_meta_values | _values,
    version=st.sampled_from([STATELESS, STATELESS, "2025-11-25", "1999-01-01"]) | _header_values,
    mirror_method=st.booleans(),
    mirror_name=st.booleans(),
    params=st.dictionaries(st.text(max_size=8), _header_values.filter(bool), max_size=2),
)
def test_the_stateless_envelope_and_mirrored_headers_take_any_value(
    memory_server: MemoryServer,
    data: st.DataObject,
    method: str,
    meta: object,
    version: str | None,
    mirror_method: bool,
    mirror_name: bool,
    params: dict[str, str],
) -> None:
    stack = memory_server
    name = data.draw(st.sampled_from(sorted(stack.schemas)) | _odd_text, label="name")
    body_params: dict[str, Any] = {"_meta": meta}
    if method == "tools/call":
        body_params["name"] = name
        body_params["arguments"] = data.draw(
            st.sampled_from([{}, {"query": "x", "scope": "project"}]) | _values, label="args"
        )
    message = {"jsonrpc": "2.0", "id": "r-1", "method": method, "params": body_params}
    body = json.dumps(message).replace("\\\\ud", "\\ud").encode()
    headers = _mirrored(method if mirror_method else "tools/list", name if mirror_name else None)
    if version is None:
        del headers["mcp-protocol-version"]
    else:
        headers["mcp-protocol-version"] = version
    headers.update({f"mcp-param-{token}": value for token, value in params.items() if token})
    sent = {key: value for key, value in headers.items() if _is_header(key, value)}
    response = stack.http.post(stack.server.url, content=body, headers=sent)
    assert response.status_code < 500, (response.status_code, response.text)
    if response.content:  # 202 for what reads as a notification has none
        reply = response.json()
        assert reply["jsonrpc"] == "2.0"
        assert ("result" in reply) != ("error" in reply), reply
        if "result" in reply and "_meta" in body_params and response.status_code == 200:
            assert reply["id"] == "r-1"
    assert "mcp-session-id" not in response.headers  # nothing here opens a session
    assert stack.server.process.poll() is None


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_VALUE = re.compile(r"[ -~]*")


def _is_header(name: str, value: str) -> bool:
    """Whether it can be sent as it is: a token name and a printable ASCII value
    without surrounding space (which is not part of a value)."""
    return bool(_TOKEN.fullmatch(name) and _VALUE.fullmatch(value)) and value == value.strip()
