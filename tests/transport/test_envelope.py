"""Property tests for the JSON-RPC envelope, argument repair and Accept parsing."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.transport._arguments import decode_stringified_arguments
from mymcp.transport._hygiene import accepts_mcp_post
from mymcp.transport._jsonrpc import (
    ClientReply,
    Notification,
    Request,
    _loggable_id,
    _loggable_method,
    classify,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(json_values)
def test_classify_never_raises_and_only_accepts_2_0_objects(value) -> None:
    message = classify(value)
    if message is not None:
        assert isinstance(value, dict)
        assert value["jsonrpc"] == "2.0"


@given(
    st.one_of(st.integers(), st.text(max_size=10)), st.text(min_size=1, max_size=10), json_values
)
def test_requests_and_notifications(request_id, method, params) -> None:
    request = classify({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    assert request == Request(request_id, method, params)
    notification = classify({"jsonrpc": "2.0", "method": method})
    assert notification == Notification(method, None)


def test_ids_must_be_strings_or_integers() -> None:
    for bad in (None, True, 1.5, [], {}):
        assert classify({"jsonrpc": "2.0", "id": bad, "method": "ping"}) is None
    assert classify({"jsonrpc": "2.0", "id": 4, "result": {}}) == ClientReply(4)
    assert classify({"jsonrpc": "2.0", "id": 4, "result": {}, "error": {}}) is None


def test_an_error_response_may_carry_a_null_id_but_a_result_may_not() -> None:
    # A client answers a request it could not read with an error whose id is null.
    error = {"code": -32700, "message": "Parse error"}
    assert classify({"jsonrpc": "2.0", "id": None, "error": error}) == ClientReply(None)
    assert classify({"jsonrpc": "2.0", "id": None, "result": {}}) is None


scalar_schemas = st.sampled_from(
    [
        {"type": "integer"},
        {"type": "array"},
        {"type": "object"},
        {"type": "boolean"},
        {"type": ["array", "null"]},
        {"oneOf": [{"type": "object"}, {"type": "null"}]},
    ]
)


@given(scalar_schemas, json_values)
def test_one_layer_is_decoded_only_into_an_allowed_type(prop_schema, value) -> None:
    schema = {"type": "object", "properties": {"x": prop_schema}}
    repaired = decode_stringified_arguments({"x": json.dumps(value)}, schema)
    if repaired["x"] != json.dumps(value):
        assert repaired["x"] == value
        assert not isinstance(repaired["x"], str)


@given(json_values)
def test_strings_are_left_alone_where_the_schema_allows_them(value) -> None:
    schema = {"type": "object", "properties": {"x": {"type": ["string", "array"]}, "y": {}}}
    arguments = {"x": json.dumps(value), "y": json.dumps(value)}
    assert decode_stringified_arguments(arguments, schema) == arguments


@given(st.permutations(["application/json", "text/event-stream", "text/plain"]))
def test_accept_is_order_free(parts) -> None:
    assert accepts_mcp_post([", ".join(parts)])
    assert accepts_mcp_post(parts)


@pytest.mark.parametrize(
    ("accept", "admitted"),
    [
        ("application/json, text/event-stream", True),
        ("*/*", True),
        ("application/*;q=0.5, text/*", True),
        ("application/json;q=0, text/event-stream", False),
        # Parameter names are case-insensitive, and "0." is a quality of zero too.
        ("application/json;Q=0, text/event-stream", False),
        ("application/json;q=0., text/event-stream", False),
        ("application/json;q=0.000, text/event-stream", False),
        ("application/json;q=0.001, text/event-stream", True),
        # A type refused by name stays refused whatever wildcard also names it.
        ("*/*, application/json;q=0", False),
        ("text/event-stream;q=0, */*", False),
        ("text/*;q=0, text/event-stream, application/json", True),
        # A quality that is no quality is read as none.
        ("application/json;q=high, text/event-stream", True),
        ("application/json;charset=utf-8;q=1, text/event-stream;q=1.000", True),
        # A quoted parameter value may hold a comma or a semicolon: it is one value.
        ('application/json;foo="a,b";q=0, text/event-stream', False),
        ('application/json;foo="a;q=0", text/event-stream', True),
        ('application/json;foo="unterminated, text/event-stream', False),
    ],
)
def test_accept_qualities_follow_http(accept: str, admitted: bool) -> None:
    assert accepts_mcp_post([accept]) is admitted


@given(
    st.lists(st.sampled_from(["*/*", "application/*", "text/*", "text/event-stream"])),
    st.sampled_from(["q=0", "Q=0", "q=0.", "q=0.0", "q = 0"]),
)
def test_json_refused_by_name_is_refused_whatever_else_is_accepted(
    others: list[str], refusal: str
) -> None:
    accept = ", ".join([*others, f"application/json;{refusal}", "text/event-stream"])
    assert not accepts_mcp_post([accept])


@given(st.lists(st.text(max_size=60), max_size=3))
def test_any_accept_header_is_answered_yes_or_no(values: list[str]) -> None:
    assert accepts_mcp_post(values) in (True, False)


_LOGGABLE = re.compile(r"[A-Za-z0-9/_.-]{0,64}")


@given(st.integers() | st.text(max_size=70) | st.from_regex(r"[a-z0-9_./-]{0,70}", fullmatch=True))
def test_only_short_protocol_shaped_ids_and_methods_reach_the_log(value: int | str) -> None:
    # Anything else is client text, which stays out of the log whatever its type.
    text = str(value)
    shown = _loggable_id(value)
    assert shown == (text if _LOGGABLE.fullmatch(text) and "/" not in text else "<opaque>")
    if isinstance(value, str):
        assert _loggable_method(value) == (value if _LOGGABLE.fullmatch(value) else "<other>")
