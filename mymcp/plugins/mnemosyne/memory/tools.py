"""The memory tools as callers see them: each tool's published definition, the hand
validation of its arguments into a typed request, and the one outcome and log path
every call ends in.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Final

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
    MemoryReference,
    Namespace,
    Scope,
    V2Reference,
    error_payload,
    is_identifier,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_bounded_text,
    normalize_language,
    normalize_tags,
    normalize_text,
    parse_reference,
    parse_scope,
)

# -- outcomes and the terminal log event ---------------------------------------------------

# Only these keys may appear in a terminal event, and only with integer, boolean or
# vocabulary values; selector values, ids, text and paths have no slot to leak into.
_ALLOWED_KEYS = frozenset(
    {
        "scope",
        "schema_version",
        "namespace",
        "collection",
        "tags",
        "cursor",
        "results",
        "count",
        "total",
        "page",
        "field",
    }
)
_PRESENCE = frozenset({"present", "absent", "all", "collectionless", "exact"})

LogFields = dict[str, int | bool | str]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A JSON-ready tool result and whether the transport must flag it as an error."""

    payload: dict[str, Any]
    is_error: bool


def success(payload: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(payload, is_error=False)


def failure(error: MemoryOperationError, *, retrieval: bool = False) -> ToolOutcome:
    return ToolOutcome(error.payload(retrieval=retrieval), is_error=True)


def internal_failure() -> ToolOutcome:
    return ToolOutcome(error_payload(ErrorCode.INTERNAL_ERROR), is_error=True)


def _render(value: int | bool | str, allowed_words: frozenset[str]) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value if value in allowed_words else None


def emit_terminal_event(
    logger: logging.Logger,
    event: str,
    outcome: str,
    *,
    code: ErrorCode | None = None,
    fields: LogFields | None = None,
    vocabulary: frozenset[str] = frozenset(),
) -> None:
    """Log ``event=<tool> outcome=<status> [code=<code>] key=value...`` at INFO.

    String values outside ``vocabulary`` (scope names, field names) and the presence
    words are dropped rather than logged, so a bug upstream cannot leak a value here.
    """
    parts = [f"event={event}", f"outcome={outcome}"]
    if code is not None:
        parts.append(f"code={code.value}")
    allowed_words = _PRESENCE | vocabulary
    for key, value in (fields or {}).items():
        if key not in _ALLOWED_KEYS:
            continue
        rendered = _render(value, allowed_words)
        if rendered is not None:
            parts.append(f"{key}={rendered}")
    logger.info(" ".join(parts))


# -- mutation arguments --------------------------------------------------------------------

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


# -- schema fragments ----------------------------------------------------------------------

# llama.cpp expands a bounded string into one grammar repetition per allowed character,
# so long bounds blow up grammar size. The longest bound we publish is the recall query
# (1000); content (server limit 4000) and cursors (4096) publish no maxLength at all.
MAX_PUBLISHED_LENGTH: Final = 1000

IDENTIFIER_PATTERN: Final = "^[a-z0-9]([a-z0-9_-]{0,62}[a-z0-9])?$"
MEMORY_ID_PATTERN: Final = "^mem_[0-9a-f]{32}$"
LEGACY_ID_PATTERN: Final = "^[A-Za-z0-9._-]{1,100}$"
# The server trims and lowercases before its strict check, so either case is shown here.
LANGUAGE_PATTERN: Final = "^[A-Za-z]{2,8}(-[A-Za-z0-9]{1,8})*$"
TIMESTAMP_PATTERN: Final = "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z$"

# What each scope is for; shown wherever a caller picks a scope.
SCOPE_DESCRIPTIONS: Final[Mapping[Scope, str]] = MappingProxyType(
    {
        Scope.SELF: "lasting facts about the user themself",
        Scope.RELATIONSHIP: "people, groups and relationships in the user's life",
        Scope.PREFERENCE: "the user's likes, dislikes and default choices, by domain",
        Scope.PRACTICE: "habits, routines and ways of working the user follows, by domain",
        Scope.PROJECT: "decisions, constraints, state, events and open questions of a project",
        Scope.KNOWLEDGE: "facts and explanations about a topic the user wants kept at hand",
        Scope.AGENT: (
            "user-approved operating refinements for one named AI agent (not facts about the user)"
        ),
    }
)

CONSENT_NOTE: Final = (
    "This tool changes stored memory. Call it only after the user has seen and approved "
    "these exact arguments; the server relies on the client's per-call approval and "
    "never treats any argument as consent. Never store secrets, credentials or "
    "sensitive personal identifiers."
)


def _ordered_union(groups: Iterable[tuple[str, ...]]) -> tuple[str, ...]:
    seen: dict[str, None] = {}
    for group in groups:
        seen.update(dict.fromkeys(group))
    return tuple(seen)


def all_namespace_kinds() -> tuple[str, ...]:
    """Every namespace kind, in first-appearance order over the scopes."""
    return _ordered_union(NAMESPACE_KINDS[scope] for scope in Scope)


def all_memory_kinds() -> tuple[str, ...]:
    """Every memory kind, in first-appearance order over the scopes."""
    return _ordered_union(MEMORY_KINDS[scope] for scope in Scope)


def scope_list_text() -> str:
    """``self: ...; relationship: ...`` for every scope, in published order."""
    return "; ".join(f"{scope.value}: {SCOPE_DESCRIPTIONS[scope]}" for scope in Scope)


def guidance_text(scope: Scope) -> str:
    """The writing guidance of every kind allowed in ``scope``."""
    return " ".join(f"{kind}: {KIND_GUIDANCE[(scope, kind)]}" for kind in MEMORY_KINDS[scope])


def scope_enum_property(lead: str) -> dict[str, Any]:
    """A required-looking ``scope`` string enum whose description explains each scope."""
    return {
        "type": "string",
        "enum": [scope.value for scope in Scope],
        "description": f"{lead} Scopes: {scope_list_text()}.",
    }


def identifier(description: str) -> dict[str, Any]:
    """A namespace or collection id: 1-64 of a-z and 0-9, with - or _ only inside."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": IDENTIFIER_PATTERN,
        "description": description,
    }


def nullable(schema: Mapping[str, Any], description: str) -> dict[str, Any]:
    """``schema`` or JSON null, as a oneOf that grammar converters understand."""
    return {"oneOf": [dict(schema), {"type": "null"}], "description": description}


def tags_property(*, minimum: int, description: str) -> dict[str, Any]:
    """``minimum``-10 unique tags of 1-50 characters each."""
    return {
        "type": "array",
        "items": {"type": "string", "minLength": 1, "maxLength": 50},
        "minItems": minimum,
        "maxItems": 10,
        "uniqueItems": True,
        "description": description,
    }


def _reference_scope() -> dict[str, Any]:
    return {
        "type": "string",
        "description": "The scope the memory lives in.",
        "oneOf": [
            {"const": scope.value, "description": SCOPE_DESCRIPTIONS[scope]} for scope in Scope
        ],
    }


def v2_reference(description: str) -> dict[str, Any]:
    """The exact canonical reference returned by recall, list and inspect."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "schema_version": {"type": "integer", "const": 2},
            "scope": _reference_scope(),
            "namespace_id": identifier("Namespace id of the memory."),
            "collection_id": nullable(
                identifier("Collection id."), "Collection id, or null when it has none."
            ),
            "id": {
                "type": "string",
                "pattern": MEMORY_ID_PATTERN,
                "description": "Memory id: mem_ followed by 32 lowercase hex digits.",
            },
        },
        "required": ["schema_version", "scope", "namespace_id", "collection_id", "id"],
        "additionalProperties": False,
    }


def v1_reference(description: str) -> dict[str, Any]:
    """A legacy reference: scope plus the legacy id."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "schema_version": {"type": "integer", "const": 1},
            "scope": _reference_scope(),
            "id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                "pattern": LEGACY_ID_PATTERN,
                "description": "Legacy id: 1-100 ASCII letters, digits, dots, _ or -.",
            },
        },
        "required": ["schema_version", "scope", "id"],
        "additionalProperties": False,
    }


def expected_revision_property() -> dict[str, Any]:
    return {
        "type": "integer",
        "minimum": 1,
        "description": (
            "The lifecycle revision shown by memory_inspect just before this call; a "
            "different current revision fails with revision_conflict."
        ),
    }


# -- read tool definitions -----------------------------------------------------------------


def recall_definition() -> dict[str, Any]:
    return {
        "title": "Recall memory",
        "description": (
            "Find the user's stored memories that are relevant to a free-text query inside "
            "exactly one scope, optionally narrowed to one namespace and boosted by tags. "
            "Returns at most five memories ranked by relevance, each with an inspect-ready "
            "reference, title, content, tags and the matched terms and tags; nothing "
            "relevant gives status no_matches. Archived memories are never recalled. "
            "Read-only: nothing is created or changed. Use memory_list for a complete "
            "inventory and memory_inspect for one exact memory."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 1000,
                    "description": "What to look for, in plain words (not blank).",
                },
                "scope": scope_enum_property("The one scope to search."),
                "namespace_id": identifier(
                    "Optional: search only this namespace. Legacy (version-1) memories "
                    "have no namespace and are then left out."
                ),
                "tags": tags_property(
                    minimum=1,
                    description=(
                        "Optional: 1-10 unique tags; memories carrying one of them rank higher."
                    ),
                ),
            },
            "required": ["query", "scope"],
            "additionalProperties": False,
        },
    }


def list_definition() -> dict[str, Any]:
    # Deliberately flat (D8): no top-level oneOf. The valid combinations are stated in
    # text and enforced by the server.
    return {
        "title": "List memory",
        "description": (
            "Inventory every valid memory in one scope, or in one namespace or collection "
            "of it, in a fixed order and in pages, without content, query or ranking. "
            "Items carry the reference, title and inspectability, plus kind and lifecycle "
            "state for canonical memories; archived memories are included. Accepted "
            "argument combinations: (1) scope [+ page_size]; (2) scope + namespace_id "
            "[+ collection_id] [+ page_size]; (3) scope + cursor; (4) scope + namespace_id "
            "+ cursor [+ collection_id]. To continue, repeat the same selector with the "
            "returned next_cursor and leave out page_size. A cursor only works in the "
            "server process that issued it; after stale_cursor or invalid_cursor start a "
            "fresh listing. Read-only."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "scope": scope_enum_property("The one scope to list."),
                "namespace_id": identifier(
                    "Optional: list only this namespace (canonical memories only)."
                ),
                "collection_id": nullable(
                    identifier("List only this exact collection."),
                    (
                        "Only together with namespace_id. Leave it out for the whole "
                        "namespace, send JSON null for memories outside any collection, or "
                        'a collection id for that one collection (the string "null" is an '
                        "ordinary id)."
                    ),
                ),
                "page_size": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 50,
                    "description": "Items per page, 1-100 (default 50); first page only.",
                },
                "cursor": {
                    "type": "string",
                    "minLength": 1,
                    "description": (
                        "The opaque next_cursor of the previous page, sent unchanged with "
                        "the same selector and without page_size."
                    ),
                },
            },
            "required": ["scope"],
            "additionalProperties": False,
        },
    }


def inspect_definition() -> dict[str, Any]:
    return {
        "title": "Inspect memory",
        "description": (
            "Return one exact memory in full, selected by the versioned reference another "
            "memory tool returned, passed unchanged. Canonical memories come with namespace, "
            "collection, kind, language, title, content, tags, provenance, lifecycle state "
            "and revision, and timestamps; archived memories are shown too. Legacy "
            "memories show only id, title, content and tags. Inspect right before "
            "proposing any change so the user can review the current record and revision. "
            "Read-only."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "reference": {
                    "description": "The reference of the memory to show.",
                    "oneOf": [
                        v2_reference("A canonical (version-2) memory reference."),
                        v1_reference("A legacy (version-1) memory reference."),
                    ],
                },
            },
            "required": ["reference"],
            "additionalProperties": False,
        },
    }


# -- memory_remember definition ------------------------------------------------------------

REMEMBER_REQUIRED = (
    "scope",
    "namespace",
    "collection",
    "kind",
    "language",
    "title",
    "content",
    "tags",
    "origin",
)
_ORIGINS = ("explicit_user_statement", "user_approved_proposal")


def _namespace(kinds: tuple[str, ...]) -> dict[str, Any]:
    return {
        "type": "object",
        "description": "The container inside the scope, such as one project, person or topic.",
        "properties": {
            "kind": {"type": "string", "enum": list(kinds), "description": "Namespace kind."},
            "id": identifier("Stable namespace id; it becomes a directory name."),
            "label": nullable(
                {"type": "string", "minLength": 1, "maxLength": 100},
                "Human-readable namespace name, or null.",
            ),
        },
        "required": ["kind", "id", "label"],
        "additionalProperties": False,
    }


def _collection() -> dict[str, Any]:
    return nullable(
        {
            "type": "object",
            "properties": {
                "id": identifier("Collection id; it becomes a directory name."),
                "label": nullable(
                    {"type": "string", "minLength": 1, "maxLength": 100},
                    "Human-readable collection name, or null.",
                ),
            },
            "required": ["id", "label"],
            "additionalProperties": False,
        },
        "An optional grouping inside the namespace ({id, label}), or null for none.",
    )


def _common_properties() -> dict[str, Any]:
    """Properties whose schema does not depend on the scope."""
    return {
        "collection": _collection(),
        "language": nullable(
            {"type": "string", "minLength": 1, "maxLength": 35, "pattern": LANGUAGE_PATTERN},
            "Language tag of the text such as en or pt-br, or null when unknown.",
        ),
        "title": nullable(
            {"type": "string", "minLength": 1, "maxLength": 200},
            "A short title of at most 200 characters, or null.",
        ),
        "content": {
            "type": "string",
            "minLength": 1,
            "description": (
                "The memory itself, written to stand on its own (not blank; the server "
                "accepts at most 4000 characters)."
            ),
        },
        "tags": tags_property(
            minimum=0, description="0-10 unique tags of 1-50 characters (may be empty)."
        ),
        "origin": {
            "type": "string",
            "enum": list(_ORIGINS),
            "description": (
                "explicit_user_statement when the user stated it directly; "
                "user_approved_proposal when the user approved a memory you proposed. "
                "Origin is provenance, not consent."
            ),
        },
    }


def _occurred_at() -> dict[str, Any]:
    return {
        "type": "string",
        "pattern": TIMESTAMP_PATTERN,
        "description": (
            "Only for kind event, and required there: when it happened, as UTC "
            "YYYY-MM-DDTHH:MM:SSZ. Every other kind must leave it out."
        ),
    }


def _undescribed(schema: Any) -> Any:
    """``schema`` without descriptions.

    Branches repeat the flat properties, whose descriptions already explain them; only
    the scope-specific text is kept in a branch, which keeps the definition compact.
    """
    if isinstance(schema, list):
        return [_undescribed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key == "properties":
            result[key] = {name: _undescribed(item) for name, item in value.items()}
        elif key in ("enum", "required", "const"):
            result[key] = value
        else:
            result[key] = _undescribed(value)
    return result


def _branch(scope: Scope) -> dict[str, Any]:
    kinds = MEMORY_KINDS[scope]
    properties: dict[str, Any] = {
        "scope": {"type": "string", "const": scope.value},
        "namespace": _undescribed(_namespace(NAMESPACE_KINDS[scope])),
        "kind": {
            "type": "string",
            "enum": list(kinds),
            "description": f"Memory kind. {guidance_text(scope)}",
        },
        **_undescribed(_common_properties()),
    }
    branch: dict[str, Any] = {
        "type": "object",
        "title": f"{scope.value} memory",
        "description": f"{scope.value}: {SCOPE_DESCRIPTIONS[scope]}.",
        "properties": properties,
        "required": list(REMEMBER_REQUIRED),
        "additionalProperties": False,
    }
    timed = [kind for kind in kinds if kind_requires_occurred_at(kind)]
    if timed:
        properties["occurred_at"] = _undescribed(_occurred_at())
        condition = {"const": timed[0]} if len(timed) == 1 else {"enum": timed}
        branch["if"] = {"properties": {"kind": condition}, "required": ["kind"]}
        branch["then"] = {"required": ["occurred_at"]}
        branch["else"] = {"not": {"required": ["occurred_at"]}}
    return branch


def _grouped_guidance() -> str:
    return " ".join(f"[{scope.value}] {guidance_text(scope)}" for scope in Scope)


def remember_definition() -> dict[str, Any]:
    properties: dict[str, Any] = {
        "scope": scope_enum_property("The scope the new memory belongs to."),
        "namespace": _namespace(all_namespace_kinds()),
        "kind": {
            "type": "string",
            "enum": list(all_memory_kinds()),
            "description": (
                "Memory kind; each scope allows only its own kinds. Guidance by scope: "
                f"{_grouped_guidance()}"
            ),
        },
        **_common_properties(),
        "occurred_at": _occurred_at(),
    }
    allowed = "; ".join(
        f"{scope.value}: namespace kind {'/'.join(NAMESPACE_KINDS[scope])}, "
        f"memory kind {'/'.join(MEMORY_KINDS[scope])}"
        for scope in Scope
    )
    return {
        "title": "Remember memory",
        "description": (
            "Store one new user-approved memory as a canonical record and return its "
            "reference and lifecycle (status remembered; an identical active or archived "
            "memory gives already_exists or existing_archived and writes nothing). Nine "
            "fields are always required, with null where allowed; occurred_at is added "
            f"only for events. Allowed combinations: {allowed}. {CONSENT_NOTE}"
        ),
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": list(REMEMBER_REQUIRED),
            "additionalProperties": False,
            "oneOf": [_branch(scope) for scope in Scope],
        },
    }


# -- change tool definitions ---------------------------------------------------------------

_REFERENCE_HINT = (
    "The exact canonical (version-2) reference of the memory, as memory_inspect shows it."
)


def revise_definition() -> dict[str, Any]:
    return {
        "title": "Revise memory",
        "description": (
            "Replace the user-editable text of one canonical memory as a whole: namespace "
            "label, collection label, title, content and tags. Identity, scope, kind, "
            "language, provenance, lifecycle state and occurrence time never change, and "
            "labels never move the record. Inspect first and pass its revision as "
            "expected_revision; the result is revised (revision + 1) or already_current "
            "when nothing would change. On replacement_outcome_uncertain, inspect the same "
            f"reference before any retry. {CONSENT_NOTE}"
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "reference": v2_reference(_REFERENCE_HINT),
                "expected_revision": expected_revision_property(),
                "namespace_label": nullable(
                    {"type": "string", "minLength": 1, "maxLength": 100},
                    "New namespace label, or null to clear it.",
                ),
                "collection_label": nullable(
                    {"type": "string", "minLength": 1, "maxLength": 100},
                    (
                        "New collection label, or null to clear it. Required when "
                        "reference.collection_id is not null; may be left out otherwise."
                    ),
                ),
                "title": nullable(
                    {"type": "string", "minLength": 1, "maxLength": 200},
                    "New title, or null for none.",
                ),
                "content": {
                    "type": "string",
                    "minLength": 1,
                    "description": (
                        "New complete content (not blank; the server accepts at most 4000 "
                        "characters)."
                    ),
                },
                "tags": tags_property(
                    minimum=0, description="New complete tag list: 0-10 unique tags."
                ),
            },
            "required": [
                "reference",
                "expected_revision",
                "namespace_label",
                "title",
                "content",
                "tags",
            ],
            "additionalProperties": False,
        },
    }


def _lifecycle_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "reference": v2_reference(_REFERENCE_HINT),
            "expected_revision": expected_revision_property(),
        },
        "required": ["reference", "expected_revision"],
        "additionalProperties": False,
    }


def archive_definition() -> dict[str, Any]:
    return {
        "title": "Archive memory",
        "description": (
            "Archive one active canonical memory: it stays stored and inspectable but is "
            "no longer recalled. Inspect first and pass its revision as expected_revision; "
            "the result is archived (revision + 1) or already_archived. memory_restore "
            "reverses it. On replacement_outcome_uncertain, inspect the same reference "
            f"before any retry. {CONSENT_NOTE}"
        ),
        "inputSchema": _lifecycle_schema(),
    }


def restore_definition() -> dict[str, Any]:
    return {
        "title": "Restore memory",
        "description": (
            "Make one archived canonical memory active again so recall finds it. Inspect "
            "first and pass its revision as expected_revision; the result is restored "
            "(revision + 1) or already_active. On replacement_outcome_uncertain, inspect "
            f"the same reference before any retry. {CONSENT_NOTE}"
        ),
        "inputSchema": _lifecycle_schema(),
    }


def forget_definition() -> dict[str, Any]:
    return {
        "title": "Forget memory",
        "description": (
            "Permanently delete one archived canonical memory file; it cannot be restored "
            "afterwards and no copy is kept. Only archived memories can be forgotten "
            "(an active one gives not_archived): archive it first, then inspect and pass "
            "its current revision as expected_revision. A second call gives not_found. On "
            "deletion_outcome_uncertain, inspect the same reference before any retry. "
            f"{CONSENT_NOTE}"
        ),
        "inputSchema": _lifecycle_schema(),
    }


QUERY_MAX = 1000


_RECALL_KEYS = frozenset({"query", "scope", "namespace_id", "tags"})


@dataclass(frozen=True, slots=True)
class RecallRequest:
    """Validated recall arguments."""

    scope: Scope
    query: str
    namespace_id: str | None
    tags: tuple[str, ...]


def parse_recall_arguments(arguments: Mapping[str, Any]) -> RecallRequest:
    """Validate raw tool arguments by hand; the first failing field decides the code."""
    if not isinstance(arguments, Mapping) or not arguments.keys() <= _RECALL_KEYS:
        raise MemoryOperationError(ErrorCode.INVALID_QUERY)
    query = arguments.get("query")
    if type(query) is not str or len(query) > QUERY_MAX or not normalize_text(query):
        raise MemoryOperationError(ErrorCode.INVALID_QUERY)
    scope = parse_scope(arguments.get("scope"))
    if scope is None:
        raise MemoryOperationError(ErrorCode.INVALID_SCOPE)
    namespace_id = arguments.get("namespace_id")
    if "namespace_id" in arguments and not is_identifier(namespace_id):
        raise MemoryOperationError(ErrorCode.INVALID_NAMESPACE)
    tags: tuple[str, ...] = ()
    if "tags" in arguments:
        parsed = normalize_tags(arguments["tags"], minimum=1)
        if parsed is None:
            raise MemoryOperationError(ErrorCode.INVALID_TAGS)
        tags = parsed
    return RecallRequest(scope, normalize_text(query), namespace_id, tags)


DEFAULT_PAGE_SIZE = 50


_LIST_KEYS = frozenset({"scope", "namespace_id", "collection_id", "page_size", "cursor"})


class CollectionMode(StrEnum):
    """How a namespace listing treats collections (decided by presence and JSON type)."""

    ALL = "all"  # collection_id omitted
    COLLECTIONLESS = "collectionless"  # collection_id is JSON null
    EXACT = "exact"  # collection_id is a string


@dataclass(frozen=True, slots=True)
class ListSelector:
    """Which records a listing covers; a cursor is only valid for the same selector."""

    scope: Scope
    namespace_id: str | None
    mode: CollectionMode
    collection_id: str | None


@dataclass(frozen=True, slots=True)
class ListRequest:
    """Validated listing arguments: an initial page or a continuation."""

    selector: ListSelector
    page_size: int
    cursor: str | None


def parse_list_arguments(arguments: Mapping[str, Any]) -> ListRequest:
    """Validate raw arguments and enforce the four accepted combinations."""
    if not isinstance(arguments, Mapping) or not arguments.keys() <= _LIST_KEYS:
        raise MemoryOperationError(ErrorCode.INVALID_REQUEST)
    scope = parse_scope(arguments.get("scope"))
    if scope is None:
        raise MemoryOperationError(ErrorCode.INVALID_SCOPE)
    namespace_id = arguments.get("namespace_id")
    if "namespace_id" in arguments and not is_identifier(namespace_id):
        raise MemoryOperationError(ErrorCode.INVALID_NAMESPACE)
    mode, collection_id = CollectionMode.ALL, None
    if "collection_id" in arguments:
        if namespace_id is None:
            # A collection only means something inside a namespace.
            raise MemoryOperationError(ErrorCode.INVALID_REQUEST)
        collection_id = arguments["collection_id"]
        if collection_id is None:
            mode = CollectionMode.COLLECTIONLESS
        elif is_identifier(collection_id):
            mode = CollectionMode.EXACT
        else:
            raise MemoryOperationError(ErrorCode.INVALID_COLLECTION)
    page_size = DEFAULT_PAGE_SIZE
    if "page_size" in arguments:
        page_size = arguments["page_size"]
        if type(page_size) is not int or not 1 <= page_size <= PAGE_SIZE_MAX:
            raise MemoryOperationError(ErrorCode.INVALID_PAGE_SIZE)
    cursor = None
    if "cursor" in arguments:
        cursor = arguments["cursor"]
        # A continuation keeps the page size the cursor was issued with.
        if type(cursor) is not str or not cursor or "page_size" in arguments:
            raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
    selector = ListSelector(scope, namespace_id, mode, collection_id)
    return ListRequest(selector, page_size, cursor)


def parse_inspect_arguments(arguments: Mapping[str, Any]) -> MemoryReference:
    """Accept exactly ``{"reference": <v1 or v2 reference>}``."""
    if not isinstance(arguments, Mapping) or arguments.keys() != {"reference"}:
        raise MemoryOperationError(ErrorCode.INVALID_REFERENCE)
    reference = parse_reference(arguments["reference"])
    if reference is None:
        raise MemoryOperationError(ErrorCode.INVALID_REFERENCE)
    return reference


# Shared kind names (summary, reference) mean different things per scope, so guidance is
# keyed by the pair rather than by the kind alone.
KIND_GUIDANCE: Mapping[tuple[Scope, str], str] = MappingProxyType(
    {
        (Scope.SELF, "attribute"): (
            "A lasting fact about the user, such as a trait, circumstance or ability, "
            "stated in the third person."
        ),
        (Scope.RELATIONSHIP, "perspective"): (
            "How the user sees or relates to this person or group, phrased as the "
            "user's own view rather than a verdict."
        ),
        (Scope.RELATIONSHIP, "summary"): (
            "A short overview of who this person or group is to the user and what "
            "matters when they come up."
        ),
        (Scope.PREFERENCE, "preference"): (
            "One like, dislike or default choice of the user in this domain, with "
            "the situation it applies to."
        ),
        (Scope.PRACTICE, "practice"): (
            "A habit, routine or way of working the user follows in this domain, "
            "described so it can be repeated."
        ),
        (Scope.PROJECT, "decision"): (
            "A choice that was settled for the project, with the reason it was made."
        ),
        (Scope.PROJECT, "constraint"): (
            "A limit the project must respect, such as a rule, budget, deadline or "
            "compatibility requirement."
        ),
        (Scope.PROJECT, "state"): (
            "Where the project currently stands; revise it when the situation moves on."
        ),
        (Scope.PROJECT, "event"): (
            "Something that happened in the project at a known instant, recorded "
            "together with its occurrence time."
        ),
        (Scope.PROJECT, "question"): (
            "An open question the project still has to answer, worded so the answer "
            "can be recognised later."
        ),
        (Scope.PROJECT, "reference"): (
            "A pointer to a resource the project relies on, with what it is for."
        ),
        (Scope.PROJECT, "summary"): (
            "A condensed overview of the project or one of its areas for quick orientation."
        ),
        (Scope.KNOWLEDGE, "reference"): (
            "A fact or source about the topic that the user wants kept at hand, "
            "with its origin when known."
        ),
        (Scope.KNOWLEDGE, "summary"): (
            "A distilled explanation of the topic in the user's preferred depth."
        ),
        (Scope.AGENT, "persona"): (
            "How this agent should present itself: tone, voice and manner approved by the user."
        ),
        (Scope.AGENT, "policy"): (
            "A rule this agent must follow in its work, stated as an instruction."
        ),
        (Scope.AGENT, "checklist"): (
            "An ordered list of steps this agent should walk through for a recurring task."
        ),
        (Scope.AGENT, "failure_mode"): (
            "A mistake this agent has made before, with how to notice it and avoid it."
        ),
    }
)


PAGE_SIZE_MAX = 100


# -- the registry --------------------------------------------------------------------------

_BUILDERS: Final[Mapping[str, Callable[[], dict[str, Any]]]] = MappingProxyType(
    {
        "memory_recall": recall_definition,
        "memory_list": list_definition,
        "memory_inspect": inspect_definition,
        "memory_archive": archive_definition,
        "memory_restore": restore_definition,
        "memory_remember": remember_definition,
        "memory_revise": revise_definition,
        "memory_forget": forget_definition,
    }
)
_DEFINITIONS: Final[Mapping[str, dict[str, Any]]] = MappingProxyType(
    {name: build() for name, build in _BUILDERS.items()}
)

TOOL_NAMES: Final[tuple[str, ...]] = tuple(_DEFINITIONS)
"""Every memory tool, in registry order."""


def tool_definition(name: str) -> dict[str, Any]:
    """A fresh copy of one tool's definition; KeyError for an unknown name."""
    return copy.deepcopy(_DEFINITIONS[name])


def tool_definitions() -> dict[str, dict[str, Any]]:
    """Fresh copies of every definition, in registry order."""
    return {name: tool_definition(name) for name in TOOL_NAMES}
