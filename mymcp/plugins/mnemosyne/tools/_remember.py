"""Definition of memory_remember: a flat object plus one complete oneOf branch per scope.

The flat top level serves clients that drop schema composition; the per-scope branches
narrow namespace kind and memory kind and carry only that scope's writing guidance.
Each branch is complete (all properties, closed), because grammar converters such as
llama.cpp build the grammar from the oneOf branches alone.
"""

from __future__ import annotations

from typing import Any

from mymcp.plugins.mnemosyne.memory import (
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    Scope,
    kind_requires_occurred_at,
)
from mymcp.plugins.mnemosyne.tools._common import (
    CONSENT_NOTE,
    LANGUAGE_PATTERN,
    SCOPE_DESCRIPTIONS,
    TIMESTAMP_PATTERN,
    all_memory_kinds,
    all_namespace_kinds,
    guidance_text,
    identifier,
    nullable,
    scope_enum_property,
    tags_property,
)

__all__ = ["REMEMBER_REQUIRED", "remember_definition"]

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
