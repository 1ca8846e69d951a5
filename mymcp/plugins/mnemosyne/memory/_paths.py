"""Deterministic record locations under the memory root and the path-agreement rule."""

from __future__ import annotations

from ._records import MemoryRecord, MemoryRecordV2
from ._references import V2Reference

__all__ = [
    "MAX_DIRECTORY_DEPTH",
    "RECORD_SUFFIX",
    "RelativePath",
    "location_agrees",
    "reference_parts",
]

RECORD_SUFFIX = ".json"
# Directories allowed between a scope directory and a record file.
MAX_DIRECTORY_DEPTH = 4

# Path components from the memory root: (scope, ..., file name). Tuples, never strings,
# so no caller can smuggle a separator or ".." into a lookup.
RelativePath = tuple[str, ...]


def reference_parts(reference: V2Reference) -> RelativePath:
    """``(scope, namespace, [collection,] <id>.json)`` for a canonical reference."""
    middle: tuple[str, ...] = (reference.namespace_id,)
    if reference.collection_id is not None:
        middle += (reference.collection_id,)
    return (reference.scope.value, *middle, reference.id + RECORD_SUFFIX)


def location_agrees(parts: RelativePath, record: MemoryRecord) -> bool:
    """Whether a record may live at ``parts``.

    Canonical records must sit exactly at the path their identity determines. Legacy
    records have no identity-derived path, so any location inside a scope is theirs.
    """
    if not isinstance(record, MemoryRecordV2):
        return True
    expected = reference_parts(
        V2Reference(record.scope, record.namespace.id, record.collection_id, record.id)
    )
    return parts == expected
