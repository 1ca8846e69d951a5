"""Hand validation of mutation tool arguments into typed requests (no I/O here)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from .model import (
    CONTENT_MAX,
    LABEL_MAX,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    PUBLIC_ORIGINS,
    TITLE_MAX,
    Collection,
    ErrorCode,
    MemoryOperationError,
    Namespace,
    Scope,
    V2Reference,
    is_identifier,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_bounded_text,
    normalize_language,
    normalize_tags,
    parse_reference,
    parse_scope,
)

__all__ = [
    "RememberRequest",
    "ReviseRequest",
    "parse_lifecycle_arguments",
    "parse_remember_arguments",
    "parse_revise_arguments",
    "tag_fields",
]

_REMEMBER_REQUIRED: Final = frozenset(
    {"scope", "namespace", "collection", "kind", "language", "title", "content", "tags", "origin"}
)
_REMEMBER_ALLOWED: Final = _REMEMBER_REQUIRED | {"occurred_at"}
_REVISE_REQUIRED: Final = frozenset(
    {"reference", "expected_revision", "namespace_label", "title", "content", "tags"}
)
_REVISE_ALLOWED: Final = _REVISE_REQUIRED | {"collection_label"}
_LIFECYCLE_KEYS: Final = frozenset({"reference", "expected_revision"})
_NAMESPACE_KEYS: Final = frozenset({"kind", "id", "label"})
_COLLECTION_KEYS: Final = frozenset({"id", "label"})


def _invalid(code: ErrorCode) -> MemoryOperationError:
    return MemoryOperationError(code)


# -- argument parsing -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RememberRequest:
    scope: Scope
    namespace: Namespace
    collection: Collection | None
    kind: str
    language: str
    title: str | None
    content: str
    tags: tuple[str, ...]
    origin: str
    occurred_at: str | None


def _optional_text(value: object, maximum: int, code: ErrorCode) -> str | None:
    if value is None:
        return None
    text = normalize_bounded_text(value, maximum)
    if text is None:
        raise _invalid(code)
    return text


def _required_text(value: object, maximum: int, code: ErrorCode) -> str:
    text = normalize_bounded_text(value, maximum)
    if text is None:
        raise _invalid(code)
    return text


def _tags(value: object) -> tuple[str, ...]:
    tags = normalize_tags(value, minimum=0)
    if tags is None:
        raise _invalid(ErrorCode.INVALID_RECORD)
    return tags


def _parse_namespace(value: object, scope: Scope) -> Namespace:
    code = ErrorCode.INVALID_NAMESPACE
    if type(value) is not dict or value.keys() != _NAMESPACE_KEYS:
        raise _invalid(code)
    kind, identifier = value["kind"], value["id"]
    if type(kind) is not str or kind not in NAMESPACE_KINDS[scope] or not is_identifier(identifier):
        raise _invalid(code)
    return Namespace(kind, identifier, _optional_text(value["label"], LABEL_MAX, code))


def _parse_collection(value: object) -> Collection | None:
    if value is None:
        return None
    code = ErrorCode.INVALID_COLLECTION
    if type(value) is not dict or value.keys() != _COLLECTION_KEYS:
        raise _invalid(code)
    if not is_identifier(value["id"]):
        raise _invalid(code)
    return Collection(value["id"], _optional_text(value["label"], LABEL_MAX, code))


def parse_remember_arguments(arguments: object) -> RememberRequest:
    """Validate and normalise the nine required fields plus the event-only occurred_at."""
    if type(arguments) is not dict or not arguments.keys() >= _REMEMBER_REQUIRED:
        raise _invalid(ErrorCode.INVALID_RECORD)
    if not arguments.keys() <= _REMEMBER_ALLOWED:
        raise _invalid(ErrorCode.INVALID_RECORD)
    scope = parse_scope(arguments["scope"])
    if scope is None:
        raise _invalid(ErrorCode.INVALID_SCOPE)
    namespace = _parse_namespace(arguments["namespace"], scope)
    collection = _parse_collection(arguments["collection"])
    kind = arguments["kind"]
    if type(kind) is not str or kind not in MEMORY_KINDS[scope]:
        raise _invalid(ErrorCode.INVALID_KIND)
    language = normalize_language(arguments["language"])
    if language is None:
        raise _invalid(ErrorCode.INVALID_RECORD)
    title = _optional_text(arguments["title"], TITLE_MAX, ErrorCode.INVALID_RECORD)
    content = _required_text(arguments["content"], CONTENT_MAX, ErrorCode.INVALID_RECORD)
    tags = _tags(arguments["tags"])
    occurred_at = arguments.get("occurred_at")
    if kind_requires_occurred_at(kind):
        if not is_timestamp(occurred_at):
            raise _invalid(ErrorCode.INVALID_RECORD)
    elif "occurred_at" in arguments:
        raise _invalid(ErrorCode.INVALID_RECORD)
    origin = arguments["origin"]
    if type(origin) is not str or origin not in PUBLIC_ORIGINS:
        raise _invalid(ErrorCode.INVALID_ORIGIN)
    return RememberRequest(
        scope, namespace, collection, kind, language, title, content, tags, origin, occurred_at
    )


def _parse_target(arguments: object) -> tuple[V2Reference, int]:
    """The canonical reference and positive expected revision every change names."""
    if type(arguments) is not dict:
        raise _invalid(ErrorCode.INVALID_REFERENCE)
    reference = parse_reference(arguments.get("reference"))
    if not isinstance(reference, V2Reference):  # legacy records are read-only
        raise _invalid(ErrorCode.INVALID_REFERENCE)
    revision = arguments.get("expected_revision")
    if type(revision) is not int or revision < 1:
        raise _invalid(ErrorCode.INVALID_EXPECTED_REVISION)
    return reference, revision


def parse_lifecycle_arguments(arguments: object) -> tuple[V2Reference, int]:
    """Exactly ``{reference, expected_revision}`` for archive, restore and forget."""
    reference, revision = _parse_target(arguments)
    assert type(arguments) is dict  # checked by _parse_target
    if arguments.keys() != _LIFECYCLE_KEYS:
        # The request is anything but the exact reference-plus-revision shape.
        raise _invalid(ErrorCode.INVALID_REFERENCE)
    return reference, revision


@dataclass(frozen=True, slots=True)
class ReviseRequest:
    reference: V2Reference
    expected_revision: int
    namespace_label: str | None
    collection_label: str | None
    title: str | None
    content: str
    tags: tuple[str, ...]


def parse_revise_arguments(arguments: object) -> ReviseRequest:
    """The complete replacement of a record's mutable text."""
    reference, revision = _parse_target(arguments)
    assert type(arguments) is dict
    if not _REVISE_REQUIRED <= arguments.keys() <= _REVISE_ALLOWED:
        raise _invalid(ErrorCode.INVALID_RECORD)
    namespace_label = _optional_text(
        arguments["namespace_label"], LABEL_MAX, ErrorCode.INVALID_RECORD
    )
    if reference.collection_id is None:
        # No collection to label: the member may be omitted or explicitly null only.
        if arguments.get("collection_label") is not None:
            raise _invalid(ErrorCode.INVALID_COLLECTION)
        collection_label = None
    else:
        if "collection_label" not in arguments:
            raise _invalid(ErrorCode.INVALID_COLLECTION)
        collection_label = _optional_text(
            arguments["collection_label"], LABEL_MAX, ErrorCode.INVALID_COLLECTION
        )
    title = _optional_text(arguments["title"], TITLE_MAX, ErrorCode.INVALID_RECORD)
    content = _required_text(arguments["content"], CONTENT_MAX, ErrorCode.INVALID_RECORD)
    tags = _tags(arguments["tags"])
    return ReviseRequest(
        reference, revision, namespace_label, collection_label, title, content, tags
    )


def tag_fields(field: str, tags: tuple[str, ...]) -> Iterator[tuple[str, str | None]]:
    for tag in tags:
        yield field, tag
