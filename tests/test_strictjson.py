"""The one strict JSON decoder: every refusal reason, and round trips of plain JSON."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mymcp._strictjson import (
    StrictJsonError,
    StrictJsonReason,
    _load_message_exactly,
    compact_json_encoder,
    load_message_json,
    load_strict_json,
    nests_deeper_than,
)

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


# A number the decoder refuses is found by its hooks, which do not know where it is; the
# refusal must still name its line and column, whatever strings and numbers come before.
_MARKER = "@@unreadable@@"
tricky_text = st.text(max_size=10) | st.sampled_from(
    ["NaN", '"NaN"', "1e400", "\\", '\\"', "-Infinity", "\n\t", "[{", "\u2028"]
)
unreadable_numbers = st.sampled_from(
    [
        ("NaN", StrictJsonReason.NON_FINITE),
        ("Infinity", StrictJsonReason.NON_FINITE),
        ("-Infinity", StrictJsonReason.NON_FINITE),
        ("1e400", StrictJsonReason.NON_FINITE),
        ("-1.5E+309", StrictJsonReason.NON_FINITE),
        ("1" * 4301, StrictJsonReason.INVALID_JSON),  # past the integer digit limit
    ]
)
readable_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(tricky_text, inner, max_size=3),
    max_leaves=12,
)


@given(
    before=st.lists(readable_values, max_size=4),
    after=st.lists(readable_values | st.just(_MARKER), max_size=4),
    key=tricky_text,
    unreadable=unreadable_numbers,
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
)
def test_an_unreadable_number_is_named_with_its_line_and_column(
    before: list[object],
    after: list[object],
    key: str,
    unreadable: tuple[str, StrictJsonReason],
    indent: int | None,
    ascii_only: bool,
) -> None:
    token, reason = unreadable
    document = [*before, {key: _MARKER}, *after]
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    marker = json.dumps(_MARKER)
    assume(_MARKER not in json.dumps([before, key]))  # the first marker is the one placed
    index = text.index(marker)
    # Every marker becomes the token: only the first may be named.
    data = text.replace(marker, token).encode()
    with pytest.raises(StrictJsonError) as caught:
        load_strict_json(data)
    assert caught.value.reason is reason
    where = caught.value.location
    assert (where.line, where.column) == (
        text.count("\n", 0, index) + 1,
        index - text.rfind("\n", 0, index),
    )


# Request bodies are read by a compiled decoder first and by the standard library's only
# when it refuses; the two must never read one body differently.


def _reading(decode: object, data: bytes) -> tuple[str, object]:
    """What a decoder makes of `data`: its value written out exactly (so that `1` and
    `1.0`, `0.0` and `-0.0`, and key orders differ), or the reason it refuses."""
    try:
        value = decode(data)  # type: ignore[operator]
    except StrictJsonError as exc:
        return ("refused", exc.reason)
    return ("read", json.dumps(value))


def _same_reading(data: bytes) -> None:
    assert _reading(load_message_json, data) == _reading(
        lambda raw: _load_message_exactly(raw, 64), data
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(10**400), max_value=10**400)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=25,
)


@given(json_values, st.booleans(), st.sampled_from([None, 0, 2]))
def test_message_bodies_read_alike_by_both_decoders(
    value: object, ascii_only: bool, indent: int | None
) -> None:
    _same_reading(json.dumps(value, ensure_ascii=ascii_only, indent=indent).encode())


_escapes = st.integers(min_value=0, max_value=0xFFFF).map(lambda code: f"\\u{code:04x}")
_string_pieces = st.lists(st.sampled_from(["a", "\\n", '\\"', "\u00e9"]) | _escapes, max_size=6)


@given(_string_pieces, st.booleans())
def test_escapes_and_unpaired_surrogates_read_alike(pieces: list[str], as_key: bool) -> None:
    string = '"' + "".join(pieces) + '"'
    body = '{"k":' + string + "}" if not as_key else "{" + string + ":1}"
    _same_reading(body.encode())


_numbers = st.from_regex(
    r"-?(0|[1-9][0-9]{0,30}|[0-9]{1,5})(\.[0-9]{0,25})?([eE][-+]?[0-9]{1,4})?", fullmatch=True
)


@given(_numbers)
def test_numbers_read_alike(number: str) -> None:
    _same_reading(f'{{"id":{number},"n":[{number}]}}'.encode())


@given(st.binary(max_size=80))
def test_arbitrary_bytes_read_alike(data: bytes) -> None:
    _same_reading(data)


@given(json_values, st.data())
def test_damaged_bodies_read_alike(value: object, data: st.DataObject) -> None:
    body = bytearray(json.dumps({"jsonrpc": "2.0", "params": value}, ensure_ascii=False).encode())
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        position = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
        body[position] = data.draw(st.sampled_from(b'{}[],:"\\01-.eE tfn\xed\xa0\x80\xff\x00'))
    _same_reading(bytes(body))


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b'{"a":NaN}', StrictJsonReason.NON_FINITE),
        (b"[1e999]", StrictJsonReason.NON_FINITE),
        (b'["\\ud800"]', StrictJsonReason.INVALID_UTF8),
        (b'{"\\udc00":1}', StrictJsonReason.INVALID_UTF8),
        (b'"\xed\xa0\x80"', StrictJsonReason.INVALID_UTF8),
        (b"[" * 65 + b"]" * 65, StrictJsonReason.TOO_DEEP),
        (b"[" * 5000 + b"]" * 5000, StrictJsonReason.TOO_DEEP),
        (b"1" * 4301, StrictJsonReason.INVALID_JSON),
        (b"\xef\xbb\xbf{}", StrictJsonReason.INVALID_JSON),
        (b"[1,]", StrictJsonReason.INVALID_JSON),
    ],
)
def test_message_refusals_say_why(data: bytes, reason: StrictJsonReason) -> None:
    with pytest.raises(StrictJsonError) as caught:
        load_message_json(data)
    assert caught.value.reason is reason


def test_message_bodies_only_the_exact_decoder_reads_are_read() -> None:
    # A negative integer of 4,300 digits is within the standard library's limit, beyond
    # msgspec's: the body is still read, by the exact decoder.
    number = -int("1" * 4300)
    assert load_message_json(str(number).encode()) == number
    assert load_message_json(b'{"a":1,"a":2}') == {"a": 2}  # the last value, as the stdlib does
    assert load_message_json(b"[" * 64 + b"]" * 64) is not None


def _objects_nested(levels: int, key: str = "", inner: str = "{}") -> bytes:
    """`levels` objects, each the only member of the one around it, innermost `inner`."""
    text = inner
    for _ in range(levels - 1):
        text = "{" + json.dumps(key) + ":" + text + "}"
    return text.encode()


def test_the_shortest_body_that_nests_too_deeply_is_refused() -> None:
    # 65 objects take 322 bytes at the least: the length below which no body of objects
    # alone is counted for its depth.
    too_deep = _objects_nested(65)
    assert len(too_deep) == 322
    with pytest.raises(StrictJsonError) as caught:
        load_message_json(too_deep)
    assert caught.value.reason is StrictJsonReason.TOO_DEEP
    assert load_message_json(_objects_nested(64)) is not None


@given(
    levels=st.integers(min_value=60, max_value=70),
    key=st.text(max_size=2),
    inner=st.sampled_from(["{}", '{"a":1}', "[]", '"[{"', "{ }"]),
    spaces=st.booleans(),
)
def test_objects_nested_near_the_limit_are_judged_by_their_depth(
    levels: int, key: str, inner: str, spaces: bool
) -> None:
    body = _objects_nested(levels, key, inner)
    if spaces:
        body = body.replace(b":", b": ")
    deepest = levels - inner.startswith('"')  # a string innermost is no container
    if deepest > 64:
        with pytest.raises(StrictJsonError) as caught:
            load_message_json(body)
        assert caught.value.reason is StrictJsonReason.TOO_DEEP
    else:
        assert load_message_json(body) == json.loads(body)


@given(st.recursive(st.none() | st.integers() | st.text(), st.lists, max_leaves=5))
def test_a_byte_order_mark_before_a_document_is_named(value: object) -> None:
    data = b"\xef\xbb\xbf" + json.dumps(value).encode()
    with pytest.raises(StrictJsonError) as caught:
        load_strict_json(data)
    assert caught.value.reason is StrictJsonReason.INVALID_JSON
    assert caught.value.detail is not None
    assert "byte-order mark" in caught.value.detail
    assert (caught.value.location.line, caught.value.location.column) == (1, 1)


class _OwnList(list[object]):
    pass


class _OwnMapping(dict[str, object]):
    pass


@pytest.mark.parametrize(
    "wrap",
    [
        lambda inner: [inner],
        lambda inner: (inner,),
        lambda inner: _OwnList([inner]),
        lambda inner: {"a": inner},
        lambda inner: _OwnMapping(a=inner),
    ],
    ids=["list", "tuple", "own-list", "dict", "own-mapping"],
)
def test_nesting_is_counted_through_any_mapping_list_or_tuple_type(wrap: Any) -> None:
    # A plugin's data (a schema, a result) may hold its own container types.
    document: object = 0
    for _ in range(5):
        document = wrap(document)
    assert nests_deeper_than(document, 4)
    assert not nests_deeper_than(document, 5)


@given(value=plain_json, sort_keys=st.booleans())
def test_the_compact_encoder_writes_what_json_dumps_writes(value: Any, sort_keys: bool) -> None:
    encode = compact_json_encoder(sort_keys=sort_keys)
    expected = json.dumps(value, separators=(",", ":"), sort_keys=sort_keys, allow_nan=False)
    assert encode(value) == expected
    assert encode(value).isascii()


@pytest.mark.parametrize("sort_keys", [False, True])
def test_the_compact_encoder_refuses_what_no_json_holds(sort_keys: bool) -> None:
    encode = compact_json_encoder(sort_keys=sort_keys)
    for number in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="not JSON compliant"):
            encode({"a": [number]})
    with pytest.raises(TypeError, match="set is not JSON"):
        encode({"a": {1, 2}})
