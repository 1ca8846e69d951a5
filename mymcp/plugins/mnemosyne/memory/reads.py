"""The read-side memory service: raw tool arguments in, JSON-ready outcomes out."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mymcp._strictjson import StrictJsonError, load_strict_json

from .index import IndexedRecord, MemoryIndex, ScanResult
from .model import (
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryReference,
    V1Reference,
    V2Reference,
    reference_of,
    reference_parts,
    tag_key,
)
from .search import Bm25Ranker, RankCandidate, RankedHit, RecallQuery
from .tools import (
    INSPECT,
    LIST,
    PAGE_SIZE_MAX,
    RECALL,
    CollectionMode,
    ListRequest,
    ListSelector,
    LogFields,
    RecallRequest,
    ToolOutcome,
    run_tool,
)

# -- _service: The read-side memory service: raw tool arguments in, JSON-ready outcomes out.

CANDIDATE_LIMIT_DEFAULT = 10_000
CANDIDATE_LIMIT_MAX = 1_000_000
# Roots only change when the operator's environment does; a few indexes cover tests and
# reconfiguration without letting abandoned roots pin memory forever.
_MAX_INDEXES = 4


class MemoryService:
    """Recall, list and inspect over one lazily resolved memory root.

    Build one per process: it owns the per-root indexes that spare unchanged files from
    being re-read. The root resolver runs on every call and may raise; that reports the
    source as unavailable. No read operation ever creates the root.
    """

    def __init__(
        self,
        root_resolver: Callable[[], Path],
        candidate_limit: int,
        cursor_codec: CursorCodec,
    ) -> None:
        if type(candidate_limit) is not int or not 1 <= candidate_limit <= CANDIDATE_LIMIT_MAX:
            raise ValueError("candidate_limit must be an integer from 1 to 1,000,000")
        self._resolve_root = root_resolver
        self._candidate_limit = candidate_limit
        self._codec = cursor_codec
        self._ranker = Bm25Ranker()
        self._indexes: OrderedDict[str, MemoryIndex] = OrderedDict()
        self._indexes_lock = threading.Lock()

    @property
    def candidate_limit(self) -> int:
        return self._candidate_limit

    def current_index(self) -> MemoryIndex:
        """The index of the root the resolver names right now (for writers to keep coherent)."""
        try:
            root = Path(os.path.abspath(self._resolve_root()))
        except Exception:  # a broken resolver is an unavailable source, never a crash
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        key = str(root)
        with self._indexes_lock:
            index = self._indexes.get(key)
            if index is None:
                index = self._indexes[key] = MemoryIndex(root)
                while len(self._indexes) > _MAX_INDEXES:
                    self._indexes.popitem(last=False)
            else:
                self._indexes.move_to_end(key)
            return index

    def recall(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Rank up to five active records in one scope (optionally one namespace)."""
        return run_tool(RECALL, arguments, self._recall)

    def inspect(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one exact record by its versioned reference."""
        return run_tool(INSPECT, arguments, self._inspect)

    def list(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one deterministic page of the selected inventory, without content."""
        return run_tool(LIST, arguments, self._list)

    def _recall(self, request: RecallRequest, fields: LogFields) -> dict[str, Any]:
        fields.update(
            scope=request.scope.value,
            namespace="present" if request.namespace_id else "absent",
            tags=len(request.tags),
        )
        payload = run_recall(
            self.current_index(),
            request,
            candidate_limit=self._candidate_limit,
            ranker=self._ranker,
        )
        fields["results"] = len(payload["memories"])
        return payload

    def _inspect(self, reference: MemoryReference, fields: LogFields) -> dict[str, Any]:
        fields.update(schema_version=reference.schema_version, scope=reference.scope.value)
        return run_inspect(self.current_index(), reference, candidate_limit=self._candidate_limit)

    def _list(self, request: ListRequest, fields: LogFields) -> dict[str, Any]:
        selector = request.selector
        fields.update(
            scope=selector.scope.value,
            namespace="present" if selector.namespace_id else "absent",
            cursor="present" if request.cursor else "absent",
        )
        if selector.namespace_id is not None:
            fields["collection"] = selector.mode.value
        payload = run_list(
            self.current_index(), request, candidate_limit=self._candidate_limit, codec=self._codec
        )
        page = payload["page"]
        fields.update(count=page["count"], total=page["total_count"], page=page["number"])
        return payload


# -- _recall: Recall: argument validation, ranking through the service's ranker and result items.

RECALL_LIMIT = 5


def run_recall(
    index: MemoryIndex,
    request: RecallRequest,
    *,
    candidate_limit: int,
    ranker: Bm25Ranker,
) -> dict[str, Any]:
    """Rank the selected, non-archived records and return at most five as result items."""
    container = () if request.namespace_id is None else (request.namespace_id,)
    scan = index.scan(
        request.scope,
        container,
        recursive=True,
        candidate_limit=candidate_limit,
        include_legacy=request.namespace_id is None,
    )
    eligible, candidates = index.derive(scan, "recall", _eligible)
    query = RecallQuery(request.query, frozenset(tag_key(t) for t in request.tags))
    hits = ranker(query, candidates, RECALL_LIMIT)[:RECALL_LIMIT]
    memories = [_result_item(eligible[hit.position], hit) for hit in hits]
    return {"status": "ok" if memories else "no_matches", "memories": memories}


def _eligible(
    scan: ScanResult,
) -> tuple[tuple[IndexedRecord, ...], tuple[RankCandidate, ...]]:
    """The non-archived records of a scan and their ranking candidates, position-aligned."""
    eligible = tuple(
        item
        for item in scan.records
        if not (isinstance(item.record, MemoryRecordV2) and item.record.lifecycle.archived)
    )
    return eligible, tuple(item.candidate for item in eligible)


def _result_item(item: IndexedRecord, hit: RankedHit) -> dict[str, Any]:
    record = item.record
    # Evidence uses the record's own tag spelling, in record order.
    matched_tags = [tag for tag in record.all_tags if tag_key(tag) in hit.matched_tag_keys]
    return {
        "reference": reference_of(record, item.scope).to_json(),
        "id": record.id,
        "scope": item.scope.value,
        "title": record.title,
        "content": record.content,
        "tags": list(record.all_tags),
        "match": {"terms": sorted(hit.matched_terms), "tags": matched_tags},
    }


# -- _inspect: Exact inspection: one reference in, one complete user-visible record out.


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


# -- _listing: Listing: selector validation, deterministic inventory order, paging and cursors.


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


# -- _cursor: Process-bound, HMAC-authenticated list cursors (contract 5.6).

CURSOR_MAX = 4096
_KEY_BYTES = 32
_PAYLOAD_KEYS = frozenset({"v", "p", "s", "d", "o", "z"})
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_B64URL = re.compile(r"[A-Za-z0-9_-]+\Z")

# Distinct labels keep one HMAC's output from ever being valid as another's.
_SELECTOR_LABEL = b"mnemosyne/memory_list/selector/v1\x00"
_SNAPSHOT_LABEL = b"mnemosyne/memory_list/snapshot/v1\x00"
_CURSOR_LABEL = b"mnemosyne/memory_list/cursor/v1\x00"


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a cursor carries: selector and snapshot digests, next offset and page size."""

    selector: str
    snapshot: str
    offset: int
    page_size: int


@dataclass(frozen=True, slots=True)
class SnapshotItem:
    """One listed record as the snapshot digest sees it."""

    identity: str
    relative_path: str
    sha256: str


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes | None:
    if _B64URL.match(text) is None or len(text) % 4 == 1:
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    # Only the one unpadded spelling we emit is accepted (no alternative trailing bits).
    return data if _b64encode(data) == text else None


def _invalid() -> MemoryOperationError:
    return MemoryOperationError(ErrorCode.INVALID_CURSOR)


class CursorCodec:
    """Signs and checks list cursors with a per-process key and instance id.

    Create one per process (``CursorCodec.generate()``) and share it; a restart makes
    every earlier cursor stale because neither value is persisted.
    """

    __slots__ = ("_instance", "_key")

    def __init__(self, key: bytes, instance_id: str) -> None:
        if len(key) != _KEY_BYTES or _HEX32.match(instance_id) is None:
            raise ValueError("cursor key must be 32 bytes and instance id 32 lowercase hex")
        self._key = key
        self._instance = instance_id

    @classmethod
    def generate(cls) -> CursorCodec:
        return cls(secrets.token_bytes(_KEY_BYTES), uuid.uuid4().hex)

    @property
    def instance_id(self) -> str:
        return self._instance

    def __repr__(self) -> str:  # never show the key
        return "CursorCodec(<process key>)"

    def _mac(self, label: bytes, payload: bytes) -> bytes:
        return hmac.new(self._key, label + payload, hashlib.sha256).digest()

    def selector_digest(
        self, scope: str, namespace_id: str | None, collection_mode: str, collection_id: str | None
    ) -> str:
        body = _canonical([scope, namespace_id, collection_mode, collection_id])
        return self._mac(_SELECTOR_LABEL, body).hex()

    def snapshot_digest(self, items: Sequence[SnapshotItem]) -> str:
        body = _canonical([[i.identity, i.relative_path, i.sha256] for i in items])
        return self._mac(_SNAPSHOT_LABEL, body).hex()

    @staticmethod
    def snapshot_fragment(item: SnapshotItem) -> bytes:
        """One item's part of the snapshot body; independent of the key, so cacheable."""
        return _canonical([item.identity, item.relative_path, item.sha256])

    def snapshot_digest_of_fragments(self, fragments: Sequence[bytes]) -> str:
        """``snapshot_digest`` of the items whose ``snapshot_fragment``s these are.

        The canonical encoding of a list is its items' encodings joined by commas in
        brackets, so the MAC input, and the digest, are byte for byte the same.
        """
        return self._mac(_SNAPSHOT_LABEL, b"[" + b",".join(fragments) + b"]").hex()

    def encode(self, state: CursorState) -> str:
        payload = _canonical(
            {
                "v": 1,
                "p": self._instance,
                "s": state.selector,
                "d": state.snapshot,
                "o": state.offset,
                "z": state.page_size,
            }
        )
        token = _b64encode(payload) + "." + _b64encode(self._mac(_CURSOR_LABEL, payload))
        if len(token) > CURSOR_MAX:
            raise ValueError("cursor too long")
        return token

    def decode(self, token: str) -> CursorState:
        """Verify a cursor issued by this process.

        Raises ``stale_cursor`` for another process's cursor and ``invalid_cursor`` for
        anything malformed or not signed with this process's key.
        """
        if len(token) > CURSOR_MAX or token.count(".") != 1:
            raise _invalid()
        encoded_payload, encoded_mac = token.split(".")
        payload = _b64decode(encoded_payload)
        mac = _b64decode(encoded_mac)
        if payload is None or mac is None:
            raise _invalid()
        body = self._parse_payload(payload)
        if body["p"] != self._instance:
            raise MemoryOperationError(ErrorCode.STALE_CURSOR)
        if not hmac.compare_digest(mac, self._mac(_CURSOR_LABEL, payload)):
            raise _invalid()
        return CursorState(body["s"], body["d"], body["o"], body["z"])

    @staticmethod
    def _parse_payload(payload: bytes) -> dict[str, Any]:
        try:
            body = load_strict_json(payload.decode("ascii"), max_depth=1)
        except (UnicodeDecodeError, StrictJsonError):
            raise _invalid() from None
        if type(body) is not dict or body.keys() != _PAYLOAD_KEYS or _canonical(body) != payload:
            raise _invalid()
        version, size, offset = body["v"], body["z"], body["o"]
        if not (type(version) is int and version == 1):
            raise _invalid()
        if not all(type(body[k]) is str for k in ("p", "s", "d")):
            raise _invalid()
        if _HEX32.match(body["p"]) is None:
            raise _invalid()
        if _HEX64.match(body["s"]) is None or _HEX64.match(body["d"]) is None:
            raise _invalid()
        if type(size) is not int or not 1 <= size <= PAGE_SIZE_MAX:
            raise _invalid()
        if type(offset) is not int or offset < 1 or offset % size:
            raise _invalid()
        return body
