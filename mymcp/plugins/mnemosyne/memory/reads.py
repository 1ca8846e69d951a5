"""The read service: recall, inspection and listing over the index of the current root.

Raw tool arguments come in (`tools` parses them), JSON-ready outcomes go out. Reads
never create the root and never take the mutation lock, so a writer that waits for the
lock never holds up a read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mymcp._base64url import b64url_decode, b64url_encode
from mymcp._strictjson import StrictJsonError, load_strict_json

from .analysis import FUNCTION_WORDS, word_patterns
from .index import IndexedRecord, ListedRow, MemoryIndex
from .model import (
    ErrorCode,
    MemoryOperationError,
    MemoryRecordV2,
    MemoryReference,
    V1Reference,
    V2Reference,
    checked_candidate_limit,
    reference_of,
    reference_parts,
    tag_key,
)
from .search import Hit
from .tools import (
    INSPECT,
    LIST,
    PAGE_SIZE_MAX,
    RECALL,
    CollectionMode,
    ListRequest,
    LogFields,
    RecallRequest,
    ToolOutcome,
    run_tool,
)

RECALL_LIMIT: Final = 5
# Roots only change when the operator's environment does; a few indexes cover tests and
# reconfiguration without letting abandoned roots pin memory forever.
_MAX_INDEXES = 4


class MemoryService:
    """Recall, list and inspect over one lazily resolved memory root.

    Build one per process: it owns the per-root indexes that spare unchanged files from
    being re-read. The root resolver runs on every call and may raise; that reports the
    source as unavailable. ``snapshot_directory`` (resolved once per new index) is where
    index snapshots are kept; None keeps none. Without ``sweep_temps`` its walks leave
    the temp files of interrupted writes where they are (and take no root lock), so that
    reading the root changes nothing in it.
    """

    def __init__(
        self,
        root_resolver: Callable[[], Path],
        candidate_limit: int,
        cursor_codec: CursorCodec,
        *,
        snapshot_directory: Callable[[], Path | None] | None = None,
        sweep_temps: bool = True,
    ) -> None:
        self._resolve_root = root_resolver
        self._sweep_temps = sweep_temps
        self._candidate_limit = checked_candidate_limit(candidate_limit)
        self._codec = cursor_codec
        self._snapshot_directory = snapshot_directory
        self._indexes: OrderedDict[str, MemoryIndex] = OrderedDict()
        self._indexes_lock = threading.Lock()
        # Compile the text analyser now, at startup, so no call pays for it.
        word_patterns()

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
                snapshots = None
                if self._snapshot_directory is not None:
                    try:
                        snapshots = self._snapshot_directory()
                    except Exception:  # no cache directory: run without a snapshot
                        snapshots = None
                index = self._indexes[key] = MemoryIndex(
                    root, snapshot_directory=snapshots, sweep_temps=self._sweep_temps
                )
                while len(self._indexes) > _MAX_INDEXES:
                    self._indexes.popitem(last=False)[1].close()
            else:
                self._indexes.move_to_end(key)
            return index

    def close(self) -> None:
        """Settle and close every index this service opened (a stopping server: the
        process's last references to them may go before its exit handlers run)."""
        with self._indexes_lock:
            indexes = list(self._indexes.values())
        for index in indexes:
            index.close()

    def recall(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Rank up to five active records in one scope (optionally one namespace)."""
        return run_tool(RECALL, arguments, self._recall)

    def inspect(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one exact record by its versioned reference."""
        return run_tool(INSPECT, arguments, self._inspect)

    def list(self, arguments: Mapping[str, Any]) -> ToolOutcome:
        """Return one deterministic page of the selected inventory, without content."""
        return run_tool(LIST, arguments, self._list)

    # -- recall ---------------------------------------------------------------------------

    def _recall(self, request: RecallRequest, fields: LogFields) -> dict[str, Any]:
        fields.update(
            scope=request.scope.value,
            namespace="present" if request.namespace_id else "absent",
            tags=len(request.tags),
        )
        index = self.current_index()
        # Ranking statistics cover the whole scope, so the whole scope is made current.
        # With a namespace, the namespace is the selection the candidate limit bounds: a
        # scope past the limit then ranks by what is known of it, the namespace current.
        try:
            index.refresh(request.scope, recursive=True, candidate_limit=self._candidate_limit)
        except MemoryOperationError as exc:
            if request.namespace_id is None or exc.code is not ErrorCode.CANDIDATE_LIMIT_EXCEEDED:
                raise
        if request.namespace_id is not None:
            index.refresh(
                request.scope,
                (request.namespace_id,),
                recursive=True,
                candidate_limit=self._candidate_limit,
            )
        tag_keys = frozenset(tag_key(tag) for tag in request.tags)
        found = index.recall(
            request.scope, request.query, tag_keys, RECALL_LIMIT, request.namespace_id
        )
        # A record that shares nothing with the query but function words (and no tag) is
        # not relevant to it: "nothing relevant" is what no_matches promises.
        memories = [
            _recalled(item, hit)
            for item, hit in found
            if hit.matched_tag_keys or not hit.matched_terms <= FUNCTION_WORDS
        ]
        fields["results"] = len(memories)
        return {"status": "ok" if memories else "no_matches", "memories": memories}

    # -- inspect --------------------------------------------------------------------------

    def _inspect(self, reference: MemoryReference, fields: LogFields) -> dict[str, Any]:
        fields.update(schema_version=reference.schema_version, scope=reference.scope.value)
        index = self.current_index()
        if isinstance(reference, V2Reference):
            # The reference determines the path: a single lookup, never a walk.
            found = index.lookup(reference_parts(reference), reference.scope)
            if found is None or not isinstance(found.record, MemoryRecordV2):
                raise MemoryOperationError(ErrorCode.NOT_FOUND)
        else:
            # Legacy ids are not tied to a path, so the whole scope must be current.
            index.refresh(reference.scope, recursive=True, candidate_limit=self._candidate_limit)
            matches = index.legacy(reference.scope, reference.id)
            if not matches:
                raise MemoryOperationError(ErrorCode.NOT_FOUND)
            if len(matches) > 1:
                raise MemoryOperationError(ErrorCode.AMBIGUOUS_REFERENCE)
            found = matches[0]
        memory: dict[str, Any] = {"reference": reference.to_json()}
        memory.update(found.record.public_json())
        return {"status": "ok", "memory": memory}

    # -- list -----------------------------------------------------------------------------

    def _list(self, request: ListRequest, fields: LogFields) -> dict[str, Any]:
        selector = request.selector
        fields.update(
            scope=selector.scope.value,
            namespace="present" if selector.namespace_id else "absent",
            cursor="present" if request.cursor else "absent",
        )
        if selector.namespace_id is not None:
            fields["collection"] = selector.mode.value
        codec = self._codec
        selector_digest = codec.selector_digest(
            selector.scope.value, selector.namespace_id, selector.mode.value, selector.collection_id
        )
        state: CursorState | None = None
        if request.cursor is not None:
            state = codec.decode(request.cursor)
            if not hmac.compare_digest(state.selector, selector_digest):
                raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
        container: tuple[str, ...] = ()
        if selector.namespace_id is not None:
            container = (selector.namespace_id,)
            if selector.mode is CollectionMode.EXACT:
                assert selector.collection_id is not None
                container += (selector.collection_id,)
        index = self.current_index()
        # Collectionless and exact-collection listings read one directory level only.
        selection = index.refresh(
            selector.scope,
            container,
            recursive=selector.mode is CollectionMode.ALL,
            candidate_limit=self._candidate_limit,
        )
        inventory = index.inventory(selection, include_legacy=selector.namespace_id is None)
        snapshot = codec.snapshot_digest(inventory.count, inventory.checksum)
        total = inventory.count
        offset, page_size = 0, request.page_size
        if state is not None:
            if not hmac.compare_digest(state.snapshot, snapshot):
                raise MemoryOperationError(ErrorCode.STALE_CURSOR)
            if state.offset >= total:
                raise MemoryOperationError(ErrorCode.INVALID_CURSOR)
            offset, page_size = state.offset, state.page_size
        ambiguous = inventory.ambiguous
        memories = [_listed(row, ambiguous) for row in inventory.page(offset, page_size)]
        next_offset = offset + page_size
        next_cursor = None
        if next_offset < total:
            next_cursor = codec.encode(
                CursorState(selector_digest, snapshot, next_offset, page_size)
            )
        fields.update(count=len(memories), total=total, page=offset // page_size + 1)
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


def _recalled(item: IndexedRecord, hit: Hit) -> dict[str, Any]:
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


def _listed(row: ListedRow, ambiguous: frozenset[str]) -> dict[str, Any]:
    if row.legacy_id is not None:
        reference = V1Reference(row.scope, row.legacy_id).to_json()
    else:
        parts = row.parts
        collection = parts[2] if len(parts) == 4 else None
        reference = V2Reference.json_of(row.scope.value, parts[1], collection, row.id)
    body: dict[str, Any] = {
        "reference": reference,
        "title": row.title,
        "inspectability": "ambiguous" if row.legacy_id in ambiguous else "exact",
    }
    if row.legacy_id is None:
        body["kind"] = row.kind
        body["lifecycle"] = {"state": "archived" if row.archived else "active"}
    return body


# -- list cursors: process-bound and HMAC-authenticated -------------------------------------

CURSOR_MAX = 4096
_KEY_BYTES = 32
_PAYLOAD_KEYS = frozenset({"v", "p", "s", "d", "o", "z"})
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")

# Distinct labels keep one HMAC's output from ever being valid as another's.
_SELECTOR_LABEL = b"mnemosyne/memory_list/selector/v1\x00"
_SNAPSHOT_LABEL = b"mnemosyne/memory_list/snapshot/v2\x00"
_CURSOR_LABEL = b"mnemosyne/memory_list/cursor/v1\x00"
# What a shared codec's key and instance id are derived from the shared key with.
_SHARED_KEY_LABEL = b"mnemosyne/memory_list/shared-key/v1\x00"
_SHARED_INSTANCE_LABEL = b"mnemosyne/memory_list/shared-instance/v1\x00"


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a cursor carries: selector and snapshot digests, next offset and page size."""

    selector: str
    snapshot: str
    offset: int
    page_size: int


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _invalid() -> MemoryOperationError:
    return MemoryOperationError(ErrorCode.INVALID_CURSOR)


class CursorCodec:
    """Signs and checks list cursors with a key and an instance id.

    ``generate()`` makes a codec of this process alone: another process, or this one
    after a restart, finds its cursors stale. ``shared(key_source)`` derives both from a
    key every process of the user keeps (the memory file key in the cache directory),
    read at the first cursor: then processes behind one address (a balancer) accept
    each other's cursors, and a restart keeps them, for as long as the listing is
    unchanged (every cursor is signed with the listing's state).
    """

    __slots__ = ("_instance", "_key", "_key_source", "_lock")

    def __init__(self, key: bytes, instance_id: str) -> None:
        if len(key) != _KEY_BYTES or _HEX32.match(instance_id) is None:
            raise ValueError("cursor key must be 32 bytes and instance id 32 lowercase hex")
        self._key = key
        self._instance = instance_id
        self._key_source: Callable[[], bytes] | None = None
        self._lock = threading.Lock()

    @classmethod
    def generate(cls) -> CursorCodec:
        return cls(secrets.token_bytes(_KEY_BYTES), uuid.uuid4().hex)

    @classmethod
    def shared(cls, key_source: Callable[[], bytes]) -> CursorCodec:
        """A codec derived from the key `key_source` gives, asked for at first use (not
        at startup: a check that starts nothing creates no key file)."""
        codec = cls(bytes(_KEY_BYTES), "0" * 32)  # stand-ins until the first cursor
        codec._key_source = key_source
        return codec

    def _material(self) -> tuple[bytes, str]:
        if self._key_source is not None:
            with self._lock:
                source = self._key_source
                if source is not None:
                    shared = source()
                    self._key = hmac.new(shared, _SHARED_KEY_LABEL, hashlib.sha256).digest()
                    instance = hmac.new(shared, _SHARED_INSTANCE_LABEL, hashlib.sha256)
                    self._instance = instance.hexdigest()[:32]
                    self._key_source = None
        return self._key, self._instance

    @property
    def instance_id(self) -> str:
        return self._material()[1]

    def __repr__(self) -> str:  # never show the key
        return "CursorCodec(<process key>)"

    def _mac(self, label: bytes, payload: bytes) -> bytes:
        return hmac.new(self._material()[0], label + payload, hashlib.sha256).digest()

    def selector_digest(
        self, scope: str, namespace_id: str | None, collection_mode: str, collection_id: str | None
    ) -> str:
        body = _canonical([scope, namespace_id, collection_mode, collection_id])
        return self._mac(_SELECTOR_LABEL, body).hex()

    def snapshot_digest(self, count: int, checksum: int) -> str:
        """The signed state of one listing: how many records, and their checksum.

        The checksum (`MemoryIndex.inventory`) changes with any listed record's path or
        bytes, so a cursor over a changed listing no longer matches and is stale.
        """
        body = count.to_bytes(8, "big") + checksum.to_bytes(16, "big")
        return self._mac(_SNAPSHOT_LABEL, body).hex()

    def encode(self, state: CursorState) -> str:
        payload = _canonical(
            {
                "v": 1,
                "p": self.instance_id,
                "s": state.selector,
                "d": state.snapshot,
                "o": state.offset,
                "z": state.page_size,
            }
        )
        token = b64url_encode(payload) + "." + b64url_encode(self._mac(_CURSOR_LABEL, payload))
        if len(token) > CURSOR_MAX:
            raise ValueError("cursor too long")
        return token

    def decode(self, token: str) -> CursorState:
        """Verify a cursor issued with this codec's key.

        Raises ``stale_cursor`` for a cursor of another key (another process's, or one
        from before a restart, for a codec of one process) and ``invalid_cursor`` for
        anything malformed or not signed with this key.
        """
        if len(token) > CURSOR_MAX or token.count(".") != 1:
            raise _invalid()
        encoded_payload, encoded_mac = token.split(".")
        payload = b64url_decode(encoded_payload)
        mac = b64url_decode(encoded_mac)
        if payload is None or mac is None:
            raise _invalid()
        body = self._parse_payload(payload)
        if body["p"] != self.instance_id:
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
