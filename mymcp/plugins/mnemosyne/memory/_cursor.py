"""Process-bound, HMAC-authenticated list cursors (contract 5.6)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mymcp._strictjson import StrictJsonError, load_strict_json

from .model import ErrorCode, MemoryOperationError

__all__ = ["CURSOR_MAX", "CursorCodec", "CursorState", "SnapshotItem"]

CURSOR_MAX = 4096
PAGE_SIZE_MAX = 100
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
