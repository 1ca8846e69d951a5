"""The memory record file: strict decoding of one file's bytes, and the one canonical
serialiser every write goes through."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from mymcp._strictjson import StrictJsonError, load_strict_json

from .model import (
    CONTENT_MAX,
    LABEL_MAX,
    LIFECYCLE_STATES,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    ORIGINS,
    RECORDED_VIA,
    REVISION_MAX,
    TITLE_MAX,
    Collection,
    Lifecycle,
    MemoryRecord,
    MemoryRecordV1,
    MemoryRecordV2,
    Namespace,
    Provenance,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_bounded_text,
    normalize_language,
    normalize_tags,
    parse_scope,
)

MAX_RECORD_BYTES = 64 * 1024
# A v2 record nests two levels deep; far deeper JSON is no record and only costs walks.
MAX_RECORD_DEPTH = 8

_V1_REQUIRED = frozenset({"schema_version", "id", "content"})
_V1_ALLOWED = _V1_REQUIRED | {"title", "tags"}
_V2_REQUIRED = frozenset(
    {
        "schema_version",
        "id",
        "scope",
        "namespace",
        "collection",
        "kind",
        "language",
        "title",
        "content",
        "tags",
        "provenance",
        "lifecycle",
        "created_at",
        "updated_at",
    }
)
_V2_ALLOWED = _V2_REQUIRED | {"occurred_at"}


class SkipReason(StrEnum):
    """Why discovery passed over a file; the only detail ever logged about it."""

    SYMLINK = "symlink"
    TOO_DEEP = "too_deep"
    UNREADABLE = "unreadable"
    OVERSIZED = "oversized"
    INVALID_ENCODING = "invalid_encoding"
    INVALID_JSON = "invalid_json"
    INVALID_RECORD = "invalid_record"
    PATH_MISMATCH = "path_mismatch"
    UNSAFE_PERMISSIONS = "unsafe_permissions"
    NOT_A_DIRECTORY = "not_a_directory"  # a file where a namespace or collection would be
    NOT_A_FILE = "not_a_file"  # a directory named as a record file is


class RecordRejected(ValueError):
    """A file's bytes are not a valid record; ``reason`` says which layer failed."""

    def __init__(self, reason: SkipReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class _Invalid(Exception):
    """Internal short-circuit for the first failed field check."""


def _require(condition: bool) -> None:
    if not condition:
        raise _Invalid


def _exact_int(value: object, minimum: int, maximum: int) -> int:
    # bool is an int subclass, and 2.0 is not an integer token: both are rejected.
    if type(value) is not int or not minimum <= value <= maximum:
        raise _Invalid
    return value


def _text(value: object, maximum: int) -> str:
    text = normalize_bounded_text(value, maximum)
    if text is None:
        raise _Invalid
    return text


def _optional_text(value: object, maximum: int) -> str | None:
    return None if value is None else _text(value, maximum)


def _object(value: object, keys: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict or value.keys() != keys:
        raise _Invalid
    return value


def _parse_v1(body: dict[str, Any]) -> MemoryRecordV1:
    _require(_V1_REQUIRED <= body.keys() <= _V1_ALLOWED)
    _require(is_legacy_id(body["id"]))
    tags = None
    if "tags" in body:
        tags = normalize_tags(body["tags"], minimum=1)
        _require(tags is not None)
    return MemoryRecordV1(
        id=body["id"],
        content=_text(body["content"], CONTENT_MAX),
        title=_optional_text(body.get("title"), TITLE_MAX),
        tags=tags,
    )


def _parse_v2(body: dict[str, Any]) -> MemoryRecordV2:
    _require(_V2_REQUIRED <= body.keys() <= _V2_ALLOWED)
    _require(is_memory_id(body["id"]))
    scope = parse_scope(body["scope"])
    if scope is None:
        raise _Invalid
    ns = _object(body["namespace"], frozenset({"kind", "id", "label"}))
    _require(ns["kind"] in NAMESPACE_KINDS[scope] and is_identifier(ns["id"]))
    namespace = Namespace(ns["kind"], ns["id"], _optional_text(ns["label"], LABEL_MAX))
    collection = None
    if body["collection"] is not None:
        col = _object(body["collection"], frozenset({"id", "label"}))
        _require(is_identifier(col["id"]))
        collection = Collection(col["id"], _optional_text(col["label"], LABEL_MAX))
    kind = body["kind"]
    _require(type(kind) is str and kind in MEMORY_KINDS[scope])
    # Stored languages are already normalised strings; null is only a request-side spelling.
    language = body["language"]
    _require(type(language) is str and normalize_language(language) == language)
    tags = normalize_tags(body["tags"], minimum=0)
    if tags is None:
        raise _Invalid
    prov = _object(body["provenance"], frozenset({"origin", "recorded_via"}))
    _require(prov["origin"] in ORIGINS and prov["recorded_via"] in RECORDED_VIA)
    life = _object(body["lifecycle"], frozenset({"state", "revision"}))
    _require(life["state"] in LIFECYCLE_STATES)
    revision = _exact_int(life["revision"], 1, REVISION_MAX)
    created, updated = body["created_at"], body["updated_at"]
    # The strict form sorts chronologically as text, so string comparison is exact.
    _require(is_timestamp(created) and is_timestamp(updated) and updated >= created)
    occurred = body.get("occurred_at")
    _require(("occurred_at" in body) == kind_requires_occurred_at(kind))
    _require(occurred is None or is_timestamp(occurred))
    return MemoryRecordV2(
        id=body["id"],
        scope=scope,
        namespace=namespace,
        collection=collection,
        kind=kind,
        language=language,
        title=_optional_text(body["title"], TITLE_MAX),
        content=_text(body["content"], CONTENT_MAX),
        tags=tags,
        provenance=Provenance(prov["origin"], prov["recorded_via"]),
        lifecycle=Lifecycle(life["state"], revision),
        created_at=created,
        updated_at=updated,
        occurred_at=occurred,
    )


def parse_record(data: bytes) -> MemoryRecord:
    """Decode one record file, raising :class:`RecordRejected` with the failing layer.

    Text fields are normalised on the way in, so a hand-edited file with stray CRLF or
    surrounding blanks still reads; the serialiser then writes the canonical form.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise RecordRejected(SkipReason.OVERSIZED)
    if data.startswith(b"\xef\xbb\xbf"):
        raise RecordRejected(SkipReason.INVALID_ENCODING)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise RecordRejected(SkipReason.INVALID_ENCODING) from None
    try:
        body = load_strict_json(text, max_depth=MAX_RECORD_DEPTH)
    except StrictJsonError:
        raise RecordRejected(SkipReason.INVALID_JSON) from None
    try:
        _require(type(body) is dict)
        version = body.get("schema_version")
        if type(version) is int and version == 1:
            return _parse_v1(body)
        if type(version) is int and version == 2:
            return _parse_v2(body)
        raise _Invalid
    except _Invalid:
        raise RecordRejected(SkipReason.INVALID_RECORD) from None


def serialize_record(record: MemoryRecordV2) -> bytes:
    """The canonical file bytes of a record, refused unless they read back identically."""
    data = (json.dumps(record.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        again = parse_record(data)
    except RecordRejected as exc:
        raise ValueError("record does not serialise to a valid file") from exc
    if again != record or len(data) > MAX_RECORD_BYTES:
        raise ValueError("record is not in canonical form")
    return data
