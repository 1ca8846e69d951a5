"""Schema fragments shared by the Mnemosyne tool definitions.

Every fragment is built to stay convertible by llama.cpp's (and Ollama's) JSON-Schema
to grammar converter (decision D8): patterns are anchored with ``^``/``$``, use only
bracket classes, plain groups and counted repetition (no ``\\d``, ``\\s`` or ``(?:``),
and no ``maxLength`` exceeds `MAX_PUBLISHED_LENGTH`. The server validates every
argument by hand; these schemas guide clients and never replace that validation.

The scope, namespace-kind and memory-kind vocabularies and the writing guidance come
from the memory domain (`memory/_scopes.py`), so schemas cannot drift from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final

from mymcp.plugins.mnemosyne.memory import (
    KIND_GUIDANCE,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    Scope,
)

__all__ = [
    "CONSENT_NOTE",
    "IDENTIFIER_PATTERN",
    "LANGUAGE_PATTERN",
    "LEGACY_ID_PATTERN",
    "MAX_PUBLISHED_LENGTH",
    "MEMORY_ID_PATTERN",
    "SCOPE_DESCRIPTIONS",
    "TIMESTAMP_PATTERN",
    "all_memory_kinds",
    "all_namespace_kinds",
    "expected_revision_property",
    "guidance_text",
    "identifier",
    "nullable",
    "scope_enum_property",
    "scope_list_text",
    "tags_property",
    "v1_reference",
    "v2_reference",
]

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
