"""Listing: selector validation, deterministic inventory order, paging and cursors."""

from __future__ import annotations

import hmac
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ._cursor import PAGE_SIZE_MAX, CursorCodec, CursorState, SnapshotItem
from ._errors import ErrorCode, MemoryOperationError
from ._identifiers import is_identifier
from ._index import IndexedRecord, MemoryIndex
from ._records import MemoryRecordV2
from ._references import reference_of
from ._scopes import Scope, parse_scope

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


def _scan(index: MemoryIndex, selector: ListSelector, limit: int) -> list[IndexedRecord]:
    if selector.namespace_id is None:
        container: tuple[str, ...] = ()
    elif selector.mode is CollectionMode.EXACT:
        assert selector.collection_id is not None
        container = (selector.namespace_id, selector.collection_id)
    else:
        container = (selector.namespace_id,)
    # Collectionless and exact-collection listings read one directory level only.
    recursive = selector.mode is CollectionMode.ALL
    scan = index.scan(
        selector.scope,
        container,
        recursive=recursive,
        candidate_limit=limit,
        include_legacy=selector.namespace_id is None,
    )
    return sorted(scan.records, key=_order_key)


def _identity(item: IndexedRecord) -> str:
    reference = reference_of(item.record, item.scope).to_json()
    return json.dumps(reference, sort_keys=True, separators=(",", ":"))


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
    items = _scan(index, selector, candidate_limit)
    snapshot = codec.snapshot_digest(
        [SnapshotItem(_identity(i), "/".join(i.parts), i.digest.hex()) for i in items]
    )
    offset, page_size = 0, request.page_size
    if state is not None:
        if not _same(state.snapshot, snapshot):
            raise MemoryOperationError(ErrorCode.STALE_CURSOR)
        if state.offset >= len(items):
            raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
        offset, page_size = state.offset, state.page_size
    legacy_ids = Counter(i.record.id for i in items if not isinstance(i.record, MemoryRecordV2))
    page = items[offset : offset + page_size]
    memories = [
        _list_item(i, not isinstance(i.record, MemoryRecordV2) and legacy_ids[i.record.id] > 1)
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
