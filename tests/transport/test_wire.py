"""Hostile bytes on the wire: surrogates, deep nesting, huge numbers, unencodable results.

No request may get a 5xx or leave a session behind, and every reply is one JSON encoding
that cannot fail on anything the request parser accepted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from mymcp.app import PROTECTED_RESOURCE_PATH, create_app
from mymcp.config import HostConfiguration, McpSettings, ServerSettings
from mymcp.runtime import BoundTool, compose_runtime
from mymcp.transport import SERVER_INSTRUCTIONS, HostApplication, JsonDocument, TransportOptions
from mymcp.transport._results import MAX_RESULT_BYTES, MAX_RESULT_VALUES, checked_result
from tests.synthetic import contribution, external_bindings, tool
from tests.transport.conftest import BASE, HEADERS, NamedBearer, initialize, rpc, session_headers

SURROGATE_ID = b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}'
RAW_SURROGATE_ID = b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"ping"}'
PING = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":'


def _initialize_body(client_name: str) -> bytes:
    params = {"protocolVersion": "2025-11-25", "capabilities": {}}
    params["clientInfo"] = {"name": client_name, "version": "1"}
    return json.dumps(rpc("initialize", params)).encode()


def _only_session_still_works(client: TestClient, session: str) -> bool:
    response = client.post("/mcp", json=rpc("ping"), headers=session_headers(session))
    return response.status_code == 200


@pytest.mark.parametrize(
    "body", [SURROGATE_ID, RAW_SURROGATE_ID, b'{"jsonrpc":"2.0","id":"\\ud800"}']
)
def test_lone_surrogate_in_an_id_is_a_parse_error_not_a_500(client, body: bytes) -> None:
    session = initialize(client)
    response = client.post("/mcp", content=body, headers=session_headers(session))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    assert response.json()["id"] is None


@pytest.mark.parametrize(
    "body",
    [
        _initialize_body("\\ud800").replace(b"\\\\ud800", b"\\ud800"),
        _initialize_body("x").replace(b'"x"', b'"\xed\xa0\x80"'),
        _initialize_body("\\udfff tail").replace(b"\\\\udfff", b"\\udfff"),
    ],
)
def test_initialize_with_a_lone_surrogate_leaves_no_session(make_client, body: bytes) -> None:
    # With room for one session, a session left behind would evict the one that exists.
    client = make_client(session_limit=1)
    session = initialize(client)
    response = client.post("/mcp", content=body, headers=HEADERS)
    assert response.status_code == 400
    assert "mcp-session-id" not in response.headers
    assert _only_session_still_works(client, session)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (
            SURROGATE_ID,
            "a string escapes an unpaired surrogate (\\ud800-\\udfff), which is no text",
        ),
        (RAW_SURROGATE_ID, "the body is not valid UTF-8 text"),
        (b'{"jsonrpc":"2.0","id":1,"method":"\xff"}', "the body is not valid UTF-8 text"),
        # Valid JSON that holds a number no reader here takes.
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":' + b"7" * 4301 + b"}}",
            "an integer has more than 4300 digits, more than this server reads",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e400}}',
            "a number is not finite (NaN, Infinity, or beyond the range of a double)",
        ),
        (
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":NaN}}',
            "a number is not finite (NaN, Infinity, or beyond the range of a double)",
        ),
    ],
)
def test_the_parse_error_says_which_kind_of_text_was_refused(
    client, body: bytes, problem: str
) -> None:
    session = initialize(client)
    response = client.post("/mcp", content=body, headers=session_headers(session))
    assert response.json()["error"]["message"] == f"Parse error: {problem}"


def test_paired_surrogate_escapes_are_ordinary_text(client) -> None:
    session = initialize(client)
    body = b'{"jsonrpc":"2.0","id":"\\ud83d\\ude00","method":"ping"}'
    response = client.post("/mcp", content=body, headers=session_headers(session))
    assert response.status_code == 200
    assert response.json()["id"] == "\U0001f600"
    assert response.content.isascii()  # one encoding for every reply: escaped ASCII


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (PING + b"[" * 100 + b"]" * 100 + b"}", -32600),
        (PING + b"[" * 5000 + b"]" * 5000 + b"}", -32600),
        (PING + b"1e999}", -32700),
        (PING + b"NaN}", -32700),
        (PING + b"-Infinity}", -32700),
        (b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}', -32700),
    ],
)
def test_deep_or_non_finite_bodies_are_refused_before_dispatch(client, body, code) -> None:
    session = initialize(client)
    response = client.post("/mcp", content=body, headers=session_headers(session))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == code


def test_large_integers_and_moderate_nesting_are_served(client) -> None:
    session = initialize(client)
    big = 10**300
    nested: Any = "leaf"
    for _ in range(50):
        nested = [nested]
    response = client.post(
        "/mcp",
        json=rpc("tools/call", {"name": "alpha__echo", "arguments": {}}, request_id=big),
        headers=session_headers(session),
    )
    assert response.status_code == 200
    assert response.json()["id"] == big
    deep = client.post("/mcp", json=rpc("ping", {"x": nested}), headers=session_headers(session))
    assert deep.status_code == 200


# --- replies that cannot be encoded ----------------------------------------------------


def _result_tool(result: Any) -> Any:
    def handler(arguments: dict[str, Any]) -> Any:
        return result

    return handler


@pytest.fixture
def result_client() -> Iterator[Callable[..., TestClient]]:
    clients: list[TestClient] = []

    def make(result: Any, plugin_id: str = "alpha") -> TestClient:
        odd = contribution(plugin_id, tool(plugin_id, "odd", _result_tool(result)))
        bindings = [(t.capability, "alpha__odd") for t in odd.tools]
        runtime = compose_runtime([odd], bindings, server_version="0.1.0")
        app = create_app(runtime, authenticator=NamedBearer())
        client = TestClient(app, base_url=BASE)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


UNENCODABLE_RESULTS = [
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": math.nan}},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"s": {1, 2}}},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"b": b"bytes"}},
    # A plugin can make a lone surrogate from a file name decoded with surrogateescape.
    # Its escape is JSON syntax, but no text: clients refuse the whole reply for it.
    {"content": [{"type": "text", "text": "name-\udcff"}]},
]
# Encodable, but not as the JSON the plugin meant: these keys become text, so the first
# object would name member "1" twice.
NON_TEXT_KEY_RESULTS = [
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {1: "a", "1": "b"}},
    {"content": [{"type": "text", "text": "x"}], "structuredContent": {"l": [{None: 0}]}},
]


def _nested(levels: int) -> dict[str, Any]:
    """A result whose structured content makes it `levels` deep in all."""
    inner: dict[str, Any] = {}
    for _ in range(levels - 2):
        inner = {"a": inner}
    return {"content": [{"type": "text", "text": "x"}], "structuredContent": inner}


# Encodable, but deeper than clients read (the Python SDK stops near 200 levels): the
# host allows what it allows a request, 64 levels.
TOO_DEEP_RESULTS = [_nested(65), _nested(200)]


def _call_odd(client: TestClient) -> tuple[str, Any]:
    """A session, and the reply to its call of `alpha__odd` (request id 7)."""
    session = initialize(client)
    call = rpc("tools/call", {"name": "alpha__odd", "arguments": {}}, request_id=7)
    return session, client.post("/mcp", json=call, headers=session_headers(session))


@pytest.mark.parametrize("result", UNENCODABLE_RESULTS + NON_TEXT_KEY_RESULTS + TOO_DEEP_RESULTS)
def test_an_unencodable_plugin_result_is_that_call_s_internal_error(
    result_client, result: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client = result_client(result)
    session, response = _call_odd(client)
    assert response.status_code == 200
    answer = response.json()["result"]
    assert answer["isError"] is True
    assert answer["structuredContent"]["code"] == "internal_error"
    assert b"udcff" not in response.content
    # The result's log line names the request id the client was given.
    request_id = answer["structuredContent"]["request_id"]
    (line,) = [r.getMessage() for r in caplog.records if "tool_failure" in r.getMessage()]
    reason = "not_json" if result in UNENCODABLE_RESULTS else "key_not_text_or_too_deep"
    assert line == (
        f"tool_failure request_id={request_id} tool=alpha__odd error_type=invalid_result "
        f"reason={reason}"
    )
    assert _only_session_still_works(client, session)


class _FailingMapping(Mapping[str, Any]):
    """A plugin's own mapping type whose reading raises (by default a RuntimeError)."""

    def __init__(self, raises: type[BaseException] = RuntimeError) -> None:
        self._raises = raises

    def __getitem__(self, key: str) -> Any:
        raise self._raises("the plugin's object broke")

    def __iter__(self) -> Iterator[str]:
        raise self._raises("the plugin's object broke")

    def __len__(self) -> int:
        return 1


class _ReadableOnce(dict[str, Any]):
    """A plugin's dict that breaks after its first reading (a cache its own thread
    changes, say): every way of reading it counts."""

    def __init__(self, data: dict[str, Any], reads: int = 1) -> None:
        super().__init__(data)
        self.reads_left = reads

    def _read(self) -> None:
        if self.reads_left <= 0:
            raise RuntimeError("the plugin's object broke")
        self.reads_left -= 1

    def items(self) -> Any:
        self._read()
        return super().items()

    def keys(self) -> Any:
        self._read()
        return super().keys()

    def values(self) -> Any:
        self._read()
        return super().values()

    def __iter__(self) -> Iterator[str]:
        self._read()
        return super().__iter__()


def _text_result(**extra: Any) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "x"}], **extra}


@pytest.mark.parametrize(
    "result",
    [
        _FailingMapping(),
        _text_result(structuredContent=_FailingMapping()),
        _ReadableOnce(_text_result(), reads=0),
        _text_result(structuredContent=_ReadableOnce({"a": 1}, reads=0)),
        # What no tool should raise, as a handler's own SystemExit is answered too.
        _text_result(structuredContent=_FailingMapping(SystemExit)),
        _text_result(structuredContent=_FailingMapping(KeyboardInterrupt)),
    ],
    ids=["mapping", "mapping-inside", "dict", "dict-inside", "system-exit", "interrupt"],
)
def test_a_result_that_fails_when_read_is_that_call_s_internal_error(
    result_client, result: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Not a 500 without the request's id and without the call's outcome in the log.
    client = result_client(result)
    session, response = _call_odd(client)
    assert response.status_code == 200
    reply = response.json()
    assert reply["id"] == 7
    answer = reply["result"]
    assert answer["structuredContent"]["code"] == "internal_error"
    request_id = answer["structuredContent"]["request_id"]
    (line,) = [r.getMessage() for r in caplog.records if "tool_failure" in r.getMessage()]
    assert line == (
        f"tool_failure request_id={request_id} tool=alpha__odd error_type=invalid_result "
        "reason=result_unreadable"
    )
    assert "broke" not in response.text
    assert _only_session_still_works(client, session)


def test_a_result_is_read_once_and_what_was_checked_is_what_is_sent(result_client) -> None:
    # A plugin's object that changes (or breaks) after the host read it cannot reach the
    # reply: the reply is built from the copy that was checked.
    structured = _ReadableOnce({"a": 1, "nested": {"b": [1, 2]}})
    client = result_client(_text_result(structuredContent=structured))
    _, response = _call_odd(client)
    assert response.status_code == 200
    answer = response.json()["result"]
    assert "isError" not in answer
    assert answer["structuredContent"] == {"a": 1, "nested": {"b": [1, 2]}}


def _bound_tool() -> BoundTool:
    plugin = contribution("alpha", tool("alpha", "odd"))
    runtime = compose_runtime([plugin], external_bindings(plugin), server_version="0.1.0")
    found = runtime.registry.get("alpha__odd")
    assert found is not None
    return found


class _PluginList(list[Any]):
    """A list type of a plugin's own (a YAML library's sequence, say)."""


def test_a_plugin_s_own_list_and_tuple_types_are_copied_and_checked_like_lists() -> None:
    bound = _bound_tool()
    inner = {"n": 1}
    result = {"content": _PluginList([{"type": "text", "text": "x"}]), "structuredContent": {}}
    result["structuredContent"] = {"rows": _PluginList([inner]), "pair": (1, 2)}
    copied = checked_result(bound, result)
    assert isinstance(copied, dict)
    assert type(copied["content"]) is list
    assert copied["structuredContent"] == {"rows": [{"n": 1}], "pair": [1, 2]}
    assert copied["structuredContent"]["rows"][0] is not inner  # the plugin's own dict stays
    duplicate = {"content": [{"type": "text", "text": "x"}], "structuredContent": {}}
    duplicate["structuredContent"] = {"rows": _PluginList([{1: "a", "1": "b"}])}
    assert checked_result(bound, duplicate) == "key_not_text_or_too_deep"
    deep: Any = {"type": "text", "text": "x"}
    for _ in range(70):
        deep = _PluginList([deep])
    assert checked_result(bound, {"content": [], "structuredContent": {"d": deep}}) == (
        "key_not_text_or_too_deep"
    )


def test_a_result_may_hold_as_many_values_and_bytes_as_the_bounds_and_no_more() -> None:
    bound = _bound_tool()
    # The root's two members, `content`, its block's two members and `structuredContent`
    # are six values; the list fills the rest.
    values = {"content": [{"type": "text", "text": "x"}], "structuredContent": {"v": []}}
    values["structuredContent"]["v"] = [0] * (MAX_RESULT_VALUES - 6)
    assert isinstance(checked_result(bound, values), dict)
    values["structuredContent"]["v"].append(0)
    assert checked_result(bound, values) == "result_too_large"
    empty = {"content": [{"type": "text", "text": ""}]}
    text = "x" * (MAX_RESULT_BYTES - len(json.dumps(empty, separators=(",", ":"))))
    assert isinstance(checked_result(bound, {"content": [{"type": "text", "text": text}]}), dict)
    longer = {"content": [{"type": "text", "text": text + "x"}]}
    assert checked_result(bound, longer) == "result_too_large"
    # Escapes count as sent: a control character takes six bytes.
    escaped = {"content": [{"type": "text", "text": "\x01" * (len(text) // 6 + 1)}]}
    assert checked_result(bound, escaped) == "result_too_large"


def test_a_result_beyond_the_bounds_is_that_call_s_internal_error(
    result_client, caplog: pytest.LogCaptureFixture
) -> None:
    blocks = [{"type": "text", "text": "x"}] * MAX_RESULT_VALUES
    client = result_client({"content": blocks})
    session, response = _call_odd(client)
    answer = response.json()["result"]
    assert answer["structuredContent"]["code"] == "internal_error"
    (line,) = [r.getMessage() for r in caplog.records if "tool_failure" in r.getMessage()]
    assert line.endswith("error_type=invalid_result reason=result_too_large")
    assert _only_session_still_works(client, session)


@pytest.mark.parametrize("result", UNENCODABLE_RESULTS)
def test_a_reply_that_still_cannot_be_encoded_is_an_internal_error_for_that_request(
    result_client, result: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # The bundled memory tools' results are spared the plugins' encoding check: should
    # one ever hold such a value, encoding the reply refuses it.
    client = result_client(result, plugin_id="mnemosyne")
    session, response = _call_odd(client)
    assert response.status_code == 200
    reply = response.json()
    request_id = reply["error"]["data"]["request_id"]
    assert reply == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32603, "message": "Internal error", "data": {"request_id": request_id}},
    }
    assert b"udcff" not in response.content
    (line,) = [r.getMessage() for r in caplog.records if "reply_unencodable" in r.getMessage()]
    assert line.startswith(f"reply_unencodable request_id={request_id} id=7 method=tools/call")
    assert _only_session_still_works(client, session)


@pytest.mark.parametrize(
    "text",
    ["emoji \U0001f600 and \U0010ffff", "a backslash before ud800: \\ud800", "\\\\udfff"],
)
def test_paired_surrogates_and_backslashes_in_a_tool_result_reach_the_client(
    result_client, text: str
) -> None:
    client = result_client({"content": [{"type": "text", "text": text}]})
    session = initialize(client)
    call = rpc("tools/call", {"name": "alpha__odd", "arguments": {}})
    response = client.post("/mcp", json=call, headers=session_headers(session))
    assert response.json()["result"]["content"] == [{"type": "text", "text": text}]
    assert response.content.isascii()


def test_initialize_reply_is_encoded_before_its_session_exists(make_client, monkeypatch) -> None:
    from mymcp.transport import _dispatch

    client = make_client(session_limit=1)
    session = initialize(client)
    original = _dispatch.Dispatcher.initialize

    def unencodable(self: Any, request: Any) -> Any:
        reply, version = original(self, request)
        reply["result"]["serverInfo"]["odd"] = math.inf
        return reply, version

    monkeypatch.setattr(_dispatch.Dispatcher, "initialize", unencodable)
    response = client.post("/mcp", content=_initialize_body("c"), headers=HEADERS)
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32603
    assert "mcp-session-id" not in response.headers
    assert _only_session_still_works(client, session)


# --- fuzz: odd text in every field, ids of every type, every method ---------------------

_odd_text = st.text(
    alphabet=st.characters(codec=None, exclude_categories=()), max_size=12
) | st.sampled_from(
    ["\\ud800", "\\udfff", "\\ud83d\\ude00", "\u202e", "\ufeff", "\x00", "\U0010ffff"]
)
_ids = (
    st.integers(-(10**30), 10**30)
    | _odd_text
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(), max_size=2)
)
_methods = (
    st.sampled_from(
        [
            "initialize",
            "ping",
            "tools/list",
            "tools/call",
            "notifications/initialized",
            "server/discover",
        ]
    )
    | _odd_text
)
_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**40), 10**40)
    | st.floats(allow_nan=False)
    | _odd_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_odd_text, inner, max_size=3),
    max_leaves=10,
)
_tool_params = st.fixed_dictionaries(
    {"name": st.sampled_from(["alpha__echo", "list_tools", "alpha__explode"]) | _odd_text},
    optional={
        "arguments": st.dictionaries(
            st.sampled_from(["tags", "count", "text"]) | _odd_text, _values, max_size=3
        )
    },
)
_messages = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0"), "method": _methods},
    optional={"id": _ids, "params": _values | _tool_params},
)


def _raw(message: dict[str, Any], depth: int) -> bytes:
    # json.dumps escapes every non-ASCII character; the escaped forms of lone surrogates
    # written as six characters above become real escapes here.
    text = json.dumps(message).replace("\\\\ud", "\\ud")
    return (("[" * depth) + text + ("]" * depth)).encode()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(message=_messages, depth=st.sampled_from([0, 0, 0, 1, 70]), in_session=st.booleans())
def test_fuzzed_messages_never_500_and_sessions_only_with_a_reply(
    make_client, message: dict[str, Any], depth: int, in_session: bool
) -> None:
    client = make_client(session_limit=1)
    session = initialize(client)
    headers = session_headers(session) if in_session else HEADERS
    response = client.post("/mcp", content=_raw(message, depth), headers=headers)
    assert response.status_code < 500
    if response.status_code == 200 and response.content:
        reply = response.json()
        assert isinstance(reply, dict)
    created = response.headers.get("mcp-session-id")
    if created is None:
        assert _only_session_still_works(client, session)
    else:
        assert response.status_code == 200
        assert "result" in response.json()


# --- version header, host checks, instructions ----------------------------------------


def test_a_supported_but_different_version_header_says_it_does_not_match(client) -> None:
    session = initialize(client)
    mismatch = client.post("/mcp", json=rpc("ping"), headers=session_headers(session, "2025-06-18"))
    assert mismatch.status_code == 400
    message = mismatch.json()["error"]["message"]
    assert message == "MCP-Protocol-Version does not match the version negotiated for this session"
    unknown = client.post("/mcp", json=rpc("ping"), headers=session_headers(session, "1999-01-01"))
    assert unknown.status_code == 400
    assert unknown.json()["error"]["message"] == "Unsupported MCP-Protocol-Version"


@pytest.fixture
def documents_client() -> Iterator[TestClient]:
    alpha = contribution("alpha", tool("alpha", "one"))
    runtime = compose_runtime([alpha], external_bindings(alpha), server_version="0.1.0")
    config = HostConfiguration(
        server=ServerSettings("127.0.0.1", 8000), mcp=McpSettings(True, 1800, 28800)
    )
    metadata = {"resource": f"{BASE}/mcp", "authorization_servers": ["https://issuer.example"]}
    app = create_app(
        runtime,
        authenticator=NamedBearer(),
        configuration=config,
        protected_resource_metadata=metadata,
    )
    with TestClient(app, base_url=BASE) as client:
        yield client


@pytest.mark.parametrize("path", ["/health", "/version", PROTECTED_RESOURCE_PATH, "/mcp"])
@pytest.mark.parametrize(
    "headers",
    [
        {"host": "evil.example"},
        {"host": "evil.example:8000"},
        {"origin": "http://evil.example"},
        {"origin": "null"},
    ],
)
def test_every_route_applies_the_same_host_and_origin_rule(
    documents_client: TestClient, path: str, headers: dict[str, str]
) -> None:
    response = documents_client.get(path, headers={**HEADERS, **headers})
    assert response.status_code == 403
    # Which server this is, so that a client sent here under another name learns why.
    assert response.json()["error"]["message"] == (
        "Forbidden: the Host and Origin headers must name this server, http://127.0.0.1:8000"
    )


def _asgi_get(app: Any, path: str, http_version: str, headers: list[tuple[bytes, bytes]]) -> int:
    """The status `app` answers one bodiless GET with exactly these raw headers (no
    test client, since every one of them adds a Host)."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": http_version,
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8000),
        "client": ("127.0.0.1", 50000),
    }
    anyio.run(app, scope, receive, send)
    return int(sent[0]["status"])


@pytest.mark.parametrize("path", ["/health", "/version", PROTECTED_RESOURCE_PATH, "/mcp"])
def test_only_http_1_0_may_leave_out_the_host(documents_client: TestClient, path: str) -> None:
    app = documents_client.app
    assert _asgi_get(app, path, "1.1", []) == 400
    assert _asgi_get(app, path, "1.1", [(b"origin", BASE.encode())]) == 400
    # HTTP/1.0 had no Host header: such a request is answered as one naming this server.
    own = [(b"host", b"127.0.0.1:8000")]
    assert _asgi_get(app, path, "1.0", []) == _asgi_get(app, path, "1.0", own)
    assert _asgi_get(app, path, "1.1", own) != 403
    assert _asgi_get(app, path, "1.0", [(b"origin", b"http://evil.example")]) == 403


@pytest.mark.parametrize("path", ["/health", "/version", PROTECTED_RESOURCE_PATH])
def test_documents_answer_their_own_origin(documents_client: TestClient, path: str) -> None:
    own = {"origin": BASE, "host": "127.0.0.1:8000"}
    response = documents_client.get(path, headers=own)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    assert documents_client.post(path, headers=own).status_code == 405
    assert documents_client.head(path, headers=own).status_code == 200


@pytest.mark.parametrize("path", ["/health", "/version", PROTECTED_RESOURCE_PATH])
def test_head_on_a_document_sends_the_get_headers_without_the_body(
    documents_client: TestClient, path: str
) -> None:
    # A HEAD reply may carry Content-Length only if it is the length GET would send.
    got = documents_client.get(path)
    head = documents_client.head(path)
    assert head.status_code == 200
    assert head.content == b""
    assert int(head.headers["content-length"]) == len(got.content) > 0
    assert head.headers.multi_items() == got.headers.multi_items()


@pytest.mark.parametrize("path", ["/nope", "/mcp/", "/sse", "/MCP"])
def test_unknown_paths_are_404_naming_the_endpoint(documents_client: TestClient, path: str) -> None:
    for response in (documents_client.get(path), documents_client.post(path, json=rpc("ping"))):
        assert response.status_code == 404
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32601, "message": "Not Found: the MCP endpoint is /mcp"},
        }


@pytest.mark.parametrize(
    "path",
    [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
        "/.well-known/oauth-protected-resource",  # the metadata is at .../mcp
        "/register",
        "/token",
        "/authorize",
    ],
)
def test_where_oauth_clients_look_for_an_authorization_server_they_read_there_is_none(
    documents_client: TestClient, path: str
) -> None:
    # After a 401 (an operator token missing or wrong), clients look for one and read
    # any error body as OAuth's: a string `error`, saying what to send instead.
    for response in (documents_client.get(path), documents_client.post(path, json={})):
        assert response.status_code == 404
        assert response.json() == {
            "error": "invalid_request",
            # This server authenticates with OAuth: the metadata names its issuer.
            "error_description": "This MCP server runs no OAuth authorization server of its "
            "own: its protected-resource metadata at /.well-known/oauth-protected-resource/mcp "
            "names the one to use",
        }


def test_without_oauth_the_404_where_clients_look_for_it_points_at_the_operator() -> None:
    app = HostApplication(None, TransportOptions.for_binding("127.0.0.1", 8000), {})
    with TestClient(app, base_url=BASE) as plain:
        assert plain.get("/register").json()["error_description"] == (
            "This MCP server runs no OAuth authorization server of its own: use the bearer "
            "token its operator gave you, if it asks for one"
        )


def test_a_process_serving_only_the_console_says_so_at_the_mcp_path() -> None:
    # `mymcp stdio` serves its console on the usual port, where a client may look for /mcp.
    options = TransportOptions.for_binding("127.0.0.1", 8000)
    app = HostApplication(None, options, {"/health": JsonDocument({"status": "ok"})})
    with TestClient(app, base_url=BASE) as console_only:
        response = console_only.post("/mcp", json=rpc("ping"), headers=HEADERS)
        assert response.status_code == 404
        assert response.json()["error"] == {
            "code": -32601,
            "message": "Not Found: this process serves only the console; its MCP client "
            "speaks to it over stdio",
        }
        assert console_only.get("/health").json() == {"status": "ok"}


def test_initialize_returns_the_instructions(client) -> None:
    response = client.post("/mcp", content=_initialize_body("c"), headers=HEADERS)
    assert response.json()["result"]["instructions"] == SERVER_INSTRUCTIONS
