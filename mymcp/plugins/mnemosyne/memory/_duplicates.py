"""Duplicate detection for remember: the identity key of a record and its index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .index import IndexedRecord, ScanResult
from .model import MemoryRecordV2, RelativePath, tag_key

__all__ = ["DuplicateMap", "duplicate_key", "duplicate_map", "patched_duplicate_map"]


def duplicate_key(record: MemoryRecordV2) -> tuple[Any, ...]:
    # Scope, namespace id and collection id are fixed by the scanned location.
    return (
        record.namespace.kind,
        record.kind,
        record.occurred_at,
        record.title,
        record.content,
        tuple(sorted(tag_key(tag) for tag in record.tags)),
    )


# duplicate key -> the records holding it, by location (usually exactly one).
DuplicateMap = dict[tuple[Any, ...], dict[RelativePath, MemoryRecordV2]]


def duplicate_map(scan: ScanResult) -> DuplicateMap:
    """Every canonical record of a scan result under its duplicate key."""
    holders: DuplicateMap = {}
    for item in scan.records:
        if isinstance(item.record, MemoryRecordV2):
            holders.setdefault(duplicate_key(item.record), {})[item.parts] = item.record
    return holders


def patched_duplicate_map(
    old: DuplicateMap, removed: Sequence[IndexedRecord], added: Sequence[IndexedRecord]
) -> DuplicateMap:
    """``old`` with the records that left and joined the scan result; ``old`` is kept."""
    holders = dict(old)
    copied: set[tuple[Any, ...]] = set()

    def bucket(key: tuple[Any, ...]) -> dict[RelativePath, MemoryRecordV2]:
        if key not in copied:
            copied.add(key)
            holders[key] = dict(holders.get(key, ()))
        return holders[key]

    for item in removed:
        if isinstance(item.record, MemoryRecordV2):
            key = duplicate_key(item.record)
            if key in holders:
                held = bucket(key)
                if held.get(item.parts) is item.record:
                    del held[item.parts]
                if not held:
                    del holders[key]
                    copied.discard(key)
    for item in added:
        if isinstance(item.record, MemoryRecordV2):
            bucket(duplicate_key(item.record))[item.parts] = item.record
    return holders
