"""Definitions of the three read-only tools: memory_recall, memory_list, memory_inspect."""

from __future__ import annotations

from typing import Any

from mymcp.plugins.mnemosyne.tools._common import (
    identifier,
    nullable,
    scope_enum_property,
    tags_property,
    v1_reference,
    v2_reference,
)

__all__ = ["inspect_definition", "list_definition", "recall_definition"]


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
