"""Listing: selector validation, deterministic inventory order, paging and cursors."""

from __future__ import annotations

import hmac
import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ._cursor import PAGE_SIZE_MAX, CursorCodec, CursorState, SnapshotItem
from .index import IndexedRecord, MemoryIndex, ScanResult
from .model import (
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    Scope,
    is_identifier,
    parse_scope,
    reference_of,
)

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "CollectionMode",
    "ListRequest",
    "ListSelector",
    "parse_list_arguments",
    "run_list",
]

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


def _order_key(item: IndexedRecord) -> tuple[Any, ...]:
    record = item.record
    if isinstance(record, MemoryRecordV2):
        collection = record.collection_id
        # False sorts before True: collectionless records come first in a namespace.
        return (2, record.namespace.id, collection is not None, collection or "", record.id, "")
    return (1, "", False, "", record.id, "/".join(item.parts))


def _scan(index: MemoryIndex, selector: ListSelector, limit: int) -> ScanResult:
    if selector.namespace_id is None:
        container: tuple[str, ...] = ()
    elif selector.mode is CollectionMode.EXACT:
        assert selector.collection_id is not None
        container = (selector.namespace_id, selector.collection_id)
    else:
        container = (selector.namespace_id,)
    # Collectionless and exact-collection listings read one directory level only.
    recursive = selector.mode is CollectionMode.ALL
    return index.scan(
        selector.scope,
        container,
        recursive=recursive,
        candidate_limit=limit,
        include_legacy=selector.namespace_id is None,
    )


def _identity(item: IndexedRecord) -> str:
    reference = reference_of(item.record, item.scope).to_json()
    return json.dumps(reference, sort_keys=True, separators=(",", ":"))


def _snapshot_item(item: IndexedRecord) -> bytes:
    """The item's encoded part of the snapshot digest (see `CursorCodec.snapshot_fragment`)."""
    snapshot = SnapshotItem(_identity(item), "/".join(item.parts), item.digest.hex())
    return CursorCodec.snapshot_fragment(snapshot)


@dataclass(frozen=True, slots=True, eq=False)
class _Inventory:
    """The ordered selection of one scan result and its snapshot digest, built once.

    ``pieces`` maps each item (by object identity) to its sort key and snapshot entry,
    so the inventory of the next scan result reuses them for every unchanged record.
    """

    codec: CursorCodec
    items: tuple[IndexedRecord, ...]
    snapshot: str
    ambiguous_ids: frozenset[str]
    pieces: dict[int, tuple[IndexedRecord, tuple[Any, ...], bytes]]


def _inventory(
    codec: CursorCodec,
    records: Sequence[IndexedRecord],
    reuse: Mapping[int, tuple[IndexedRecord, tuple[Any, ...], bytes]],
) -> _Inventory:
    pieces: dict[int, tuple[IndexedRecord, tuple[Any, ...], bytes]] = {}
    for item in records:
        piece = reuse.get(id(item))
        if piece is None or piece[0] is not item:
            piece = (item, _order_key(item), _snapshot_item(item))
        pieces[id(item)] = piece
    ordered = sorted(pieces.values(), key=lambda piece: piece[1])
    snapshot = codec.snapshot_digest_of_fragments([piece[2] for piece in ordered])
    legacy = Counter(
        piece[0].record.id for piece in ordered if not isinstance(piece[0].record, MemoryRecordV2)
    )
    ambiguous = frozenset(identifier for identifier, count in legacy.items() if count > 1)
    return _Inventory(codec, tuple(piece[0] for piece in ordered), snapshot, ambiguous, pieces)


def _listed(index: MemoryIndex, scan: ScanResult, codec: CursorCodec) -> _Inventory:
    """The inventory of ``scan``: derived once per scan result, carried across changes."""

    def build(result: ScanResult) -> _Inventory:
        return _inventory(codec, result.records, {})

    def update(
        old: _Inventory, removed: Sequence[IndexedRecord], added: Sequence[IndexedRecord]
    ) -> _Inventory:
        if old.codec is not codec:
            return build(scan)
        gone = {id(item) for item in removed}
        kept = [item for item in old.items if id(item) not in gone]
        return _inventory(codec, [*kept, *added], old.pieces)

    inventory = index.derive(scan, "list", build, update)
    if inventory.codec is not codec:  # another codec's digests are no use here
        inventory = build(scan)
    return inventory


def _list_item(item: IndexedRecord, ambiguous: bool) -> dict[str, Any]:
    record = item.record
    body: dict[str, Any] = {
        "reference": reference_of(record, item.scope).to_json(),
        "title": record.title,
        "inspectability": "ambiguous" if ambiguous else "exact",
    }
    if isinstance(record, MemoryRecordV2):
        body["kind"] = record.kind
        body["lifecycle"] = {"state": record.lifecycle.state}
    return body


def run_list(
    index: MemoryIndex, request: ListRequest, *, candidate_limit: int, codec: CursorCodec
) -> dict[str, Any]:
    """Produce one page of the selected inventory, or fail without a partial inventory."""
    selector = request.selector
    selector_digest = codec.selector_digest(
        selector.scope.value, selector.namespace_id, selector.mode.value, selector.collection_id
    )
    state: CursorState | None = None
    if request.cursor is not None:
        state = codec.decode(request.cursor)
        if not _same(state.selector, selector_digest):
            raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
    inventory = _listed(index, _scan(index, selector, candidate_limit), codec)
    items, snapshot = inventory.items, inventory.snapshot
    offset, page_size = 0, request.page_size
    if state is not None:
        if not _same(state.snapshot, snapshot):
            raise MemoryOperationError(ErrorCode.STALE_CURSOR)
        if state.offset >= len(items):
            raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
        offset, page_size = state.offset, state.page_size
    ambiguous = inventory.ambiguous_ids
    page = items[offset : offset + page_size]
    memories = [
        _list_item(i, not isinstance(i.record, MemoryRecordV2) and i.record.id in ambiguous)
        for i in page
    ]
    next_offset = offset + page_size
    next_cursor = None
    if next_offset < len(items):
        next_cursor = codec.encode(CursorState(selector_digest, snapshot, next_offset, page_size))
    total = len(items)
    return {
        "status": "ok",
        "memories": memories,
        "page": {
            "number": offset // page_size + 1,
            "count": len(memories),
            "total_count": total,
            # An empty inventory is still one (empty) page.
            "total_pages": max(1, -(-total // page_size)),
            "truncated": next_cursor is not None,
            "next_cursor": next_cursor,
        },
    }


def _same(left: str, right: str) -> bool:
    return hmac.compare_digest(left, right)
