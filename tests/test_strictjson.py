"""The one strict JSON decoder: every refusal reason, and round trips of plain JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp._strictjson import StrictJsonError, StrictJsonReason, load_strict_json

plain_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"a":1,"a":2}', StrictJsonReason.DUPLICATE_KEY),
        (b'{"a":{"b":1,"b":1}}', StrictJsonReason.DUPLICATE_KEY),
        (b'{"a":NaN}', StrictJsonReason.NON_FINITE),
        (b'{"a":-Infinity}', StrictJsonReason.NON_FINITE),
        (b"[1e999]", StrictJsonReason.NON_FINITE),
        (b"\xef\xbb\xbf{}", StrictJsonReason.INVALID_JSON),
        (b"\xff", StrictJsonReason.INVALID_UTF8),
        (b"{", StrictJsonReason.INVALID_JSON),
        (b"[" * 65 + b"]" * 65, StrictJsonReason.TOO_DEEP),
        (b"[" * 5000 + b"]" * 5000, StrictJsonReason.TOO_DEEP),
    ],
)
def test_refusals_say_why(data: bytes, reason: StrictJsonReason) -> None:
    with pytest.raises(StrictJsonError) as caught:
        load_strict_json(data)
    assert caught.value.reason is reason


def test_size_and_depth_bounds() -> None:
    assert load_strict_json(b"[" * 64 + b"]" * 64) is not None
    assert load_strict_json('{"a": [1]}', max_depth=2) == {"a": [1]}
    with pytest.raises(StrictJsonError) as deep:
        load_strict_json('{"a": [1]}', max_depth=1)
    assert deep.value.reason is StrictJsonReason.TOO_DEEP
    with pytest.raises(StrictJsonError) as large:
        load_strict_json(b"[1]", max_bytes=2)
    assert large.value.reason is StrictJsonReason.TOO_LARGE


@given(plain_json)
def test_plain_json_round_trips(value: object) -> None:
    assert load_strict_json(json.dumps(value).encode()) == value


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_raise_anything_else(data: bytes) -> None:
    reason = None
    try:
        load_strict_json(data)
    except StrictJsonError as exc:
        reason = exc.reason
    assert reason is None or isinstance(reason, StrictJsonReason)
