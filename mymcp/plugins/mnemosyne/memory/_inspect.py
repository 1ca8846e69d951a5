"""Exact inspection: one reference in, one complete user-visible record out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .index import IndexedRecord, MemoryIndex
from .model import (
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryReference,
    V1Reference,
    V2Reference,
    parse_reference,
    reference_parts,
)

__all__ = ["parse_inspect_arguments", "run_inspect"]


def parse_inspect_arguments(arguments: Mapping[str, Any]) -> MemoryReference:
    """Accept exactly ``{"reference": <v1 or v2 reference>}``."""
    if not isinstance(arguments, Mapping) or arguments.keys() != {"reference"}:
        raise MemoryOperationError(ErrorCode.INVALID_REFERENCE)
    reference = parse_reference(arguments["reference"])
    if reference is None:
        raise MemoryOperationError(ErrorCode.INVALID_REFERENCE)
    return reference


def _find_v2(index: MemoryIndex, reference: V2Reference) -> IndexedRecord:
    # The reference determines the path, so this is a single lookup, never a scan.
    found = index.lookup(reference_parts(reference), reference.scope)
    if found is None or not isinstance(found.record, MemoryRecordV2):
        raise MemoryOperationError(ErrorCode.NOT_FOUND)
    return found


def _find_v1(index: MemoryIndex, reference: V1Reference, candidate_limit: int) -> IndexedRecord:
    # Legacy ids are not tied to a path, so the whole scope has to be searched.
    scan = index.scan(
        reference.scope, (), recursive=True, candidate_limit=candidate_limit, include_legacy=True
    )
    matches = [
        item
        for item in scan.records
        if not isinstance(item.record, MemoryRecordV2) and item.record.id == reference.id
    ]
    if not matches:
        raise MemoryOperationError(ErrorCode.NOT_FOUND)
    if len(matches) > 1:
        raise MemoryOperationError(ErrorCode.AMBIGUOUS_REFERENCE)
    return matches[0]


def run_inspect(
    index: MemoryIndex, reference: MemoryReference, *, candidate_limit: int
) -> dict[str, Any]:
    """Return ``{status: ok, memory: {reference, ...record}}``; archived records included."""
    if isinstance(reference, V2Reference):
        found = _find_v2(index, reference)
    else:
        found = _find_v1(index, reference, candidate_limit)
    memory: dict[str, Any] = {"reference": reference.to_json()}
    memory.update(found.record.public_json())
    return {"status": "ok", "memory": memory}
