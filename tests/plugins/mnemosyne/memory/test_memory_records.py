"""Strict parsing of v1/v2 record files and the canonical serialiser."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    MemoryRecordV1,
    MemoryRecordV2,
    RecordRejected,
    Scope,
    SkipReason,
    parse_record,
    serialize_record,
)

RecordFactory = Callable[..., dict[str, Any]]


def _bytes(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False).encode()


def _reason(data: bytes) -> SkipReason:
    with pytest.raises(RecordRejected) as caught:
        parse_record(data)
    return caught.value.reason


def test_v1_minimal_and_full(v1: RecordFactory) -> None:
    record = parse_record(_bytes(v1()))
    assert record == MemoryRecordV1(id="legacy-one", content="Legacy content.")
    full = parse_record(_bytes(v1(title=" Rainy ", tags=["a  b", "c"], content="x\r\ny ")))
    assert full == MemoryRecordV1(id="legacy-one", content="x\ny", title="Rainy", tags=("a b", "c"))
    assert full.public_json() == {
        "schema_version": 1,
        "id": "legacy-one",
        "title": "Rainy",
        "content": "x\ny",
        "tags": ["a b", "c"],
    }


@pytest.mark.parametrize(
    "change",
    [
        {"id": "bad id"},
        {"id": "x" * 101},
        {"content": "   "},
        {"content": "x" * 4001},
        {"title": "t" * 201},
        {"title": ""},
        {"tags": []},
        {"tags": ["a", "A"]},
        {"tags": ["x"] * 11},
        {"tags": "a"},
        {"extra": 1},
        {"schema_version": True},
        {"schema_version": 1.0},
    ],
)
def test_v1_invalid(v1: RecordFactory, change: dict[str, Any]) -> None:
    assert _reason(_bytes({**v1(), **change})) is SkipReason.INVALID_RECORD


def test_v2_parses_every_field(v2: RecordFactory) -> None:
    body = v2(collection="decisions", tags=["architecture"], title=None)
    record = parse_record(_bytes(body))
    assert isinstance(record, MemoryRecordV2)
    assert record.scope is Scope.PROJECT
    assert record.collection_id == "decisions"
    assert record.to_json() == body


def test_v2_event_needs_occurred_at(v2: RecordFactory) -> None:
    event = v2(kind="event", occurred_at="2026-01-01T00:00:00Z")
    record = parse_record(_bytes(event))
    assert isinstance(record, MemoryRecordV2)
    assert record.occurred_at == "2026-01-01T00:00:00Z"
    missing = v2(kind="event")
    assert _reason(_bytes(missing)) is SkipReason.INVALID_RECORD
    extra = v2(kind="decision", occurred_at="2026-01-01T00:00:00Z")
    assert _reason(_bytes(extra)) is SkipReason.INVALID_RECORD


def _nested(body: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(body))
    target = copy
    keys = path.split(".")
    for key in keys[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[keys[-1]]
    else:
        target[keys[-1]] = value
    return copy


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("id", "mem_" + "A" * 32),
        ("id", "legacy"),
        ("scope", "work"),
        ("namespace.kind", "topic"),
        ("namespace.id", "Bad"),
        ("namespace.label", "l" * 101),
        ("namespace.extra", None),
        ("namespace.label", _DELETE),
        ("collection", {"id": "ok"}),
        ("collection", {"id": "-bad", "label": None}),
        ("kind", "reference_x"),
        ("kind", "persona"),
        ("language", None),
        ("language", "EN"),
        ("language", "e"),
        ("title", "t" * 201),
        ("content", ""),
        ("content", "c" * 4001),
        ("tags", ["x"] * 11),
        ("tags", ["dup", "DUP"]),
        ("provenance.origin", "guess"),
        ("provenance.recorded_via", "fax"),
        ("lifecycle.state", "deleted"),
        ("lifecycle.revision", 0),
        ("lifecycle.revision", True),
        ("lifecycle.revision", 1.0),
        ("lifecycle.revision", 2**53),  # a client could not send it back exactly
        ("created_at", "2026-01-01T00:00:00.1Z"),
        ("updated_at", "2025-12-31T23:59:59Z"),
        ("schema_version", 3),
        ("unknown", 1),
        ("tags", _DELETE),
    ],
)
def test_v2_invalid_fields(v2: RecordFactory, path: str, value: Any) -> None:
    assert _reason(_bytes(_nested(v2(), path, value))) is SkipReason.INVALID_RECORD


def test_encoding_and_json_reasons(v1: RecordFactory) -> None:
    good = _bytes(v1())
    assert _reason(b"\xef\xbb\xbf" + good) is SkipReason.INVALID_ENCODING
    assert _reason(b'{"schema_version": 1, "id": "a", "content": "\xff"}') is (
        SkipReason.INVALID_ENCODING
    )
    assert _reason(b"{not json") is SkipReason.INVALID_JSON
    assert _reason(b'{"schema_version": 1, "id": "a", "id": "b", "content": "x"}') is (
        SkipReason.INVALID_JSON
    )
    assert _reason(b'{"schema_version": 1, "id": "a", "content": "x", "n": NaN}') is (
        SkipReason.INVALID_JSON
    )
    assert _reason(b"[" * 5000 + b"]" * 5000) is SkipReason.INVALID_JSON
    assert _reason(b'{"a":' * 10 + b"1" + b"}" * 10) is SkipReason.INVALID_JSON
    assert _reason(b"[]") is SkipReason.INVALID_RECORD
    assert _reason(b'{"schema_version": 1, "id": "a", "content": "\\ud800"}') is (
        SkipReason.INVALID_RECORD
    )
    assert _reason(b" " * (64 * 1024 + 1)) is SkipReason.OVERSIZED


def test_serializer_is_canonical_and_round_trips(v2: RecordFactory) -> None:
    record = parse_record(_bytes(v2(title="Café ☕", tags=["ü"])))
    assert isinstance(record, MemoryRecordV2)
    data = serialize_record(record)
    assert data.endswith(b"}\n")
    assert b'\n  "id": ' in data
    assert "Café ☕".encode() in data  # ensure_ascii=False
    assert parse_record(data) == record
    assert serialize_record(parse_record(data)) == data  # type: ignore[arg-type]


def test_serializer_refuses_non_canonical_values(v2: RecordFactory) -> None:
    record = parse_record(_bytes(v2()))
    assert isinstance(record, MemoryRecordV2)
    from dataclasses import replace

    with pytest.raises(ValueError, match="canonical"):
        serialize_record(replace(record, content=" padded "))
    with pytest.raises(ValueError, match="valid file"):
        serialize_record(replace(record, kind="nonsense"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)


def _verdict(data: bytes) -> SkipReason | None:
    """None when the bytes parse; the skip reason otherwise. Any other exception escapes."""
    try:
        parse_record(data)
    except RecordRejected as exc:
        return exc.reason
    return None


@settings(max_examples=150)
@given(_json)
def test_arbitrary_json_only_parses_or_is_rejected(value: Any) -> None:
    assert _verdict(_bytes(value)) in (None, SkipReason.INVALID_RECORD, SkipReason.INVALID_JSON)


@settings(max_examples=150)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_only_parse_or_are_rejected(data: bytes) -> None:
    assert _verdict(data) is None or isinstance(_verdict(data), SkipReason)


@settings(max_examples=100)
@given(
    st.dictionaries(
        st.sampled_from(["schema_version", "id", "content", "title", "tags", "scope", "x"]),
        _json,
    )
)
def test_record_like_objects_never_escape_the_domain_errors(body: dict[str, Any]) -> None:
    for version in (1, 2):
        verdict = _verdict(_bytes({**body, "schema_version": version}))
        # Non-finite floats serialise to bare Infinity, which strict JSON refuses.
        assert verdict in (None, SkipReason.INVALID_RECORD, SkipReason.INVALID_JSON)
