"""Definitions of the tools that change one existing memory: revise, archive, restore, forget."""

from __future__ import annotations

from typing import Any

from mymcp.plugins.mnemosyne.tools._common import (
    CONSENT_NOTE,
    expected_revision_property,
    nullable,
    tags_property,
    v2_reference,
)

__all__ = [
    "archive_definition",
    "forget_definition",
    "restore_definition",
    "revise_definition",
]

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
