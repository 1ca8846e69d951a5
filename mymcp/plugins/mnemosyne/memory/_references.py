"""Versioned structured references: the only way callers name one exact memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._identifiers import is_identifier, is_legacy_id, is_memory_id
from ._records import MemoryRecord, MemoryRecordV2
from ._scopes import Scope, parse_scope

__all__ = [
    "MemoryReference",
    "V1Reference",
    "V2Reference",
    "parse_reference",
    "reference_of",
]

_V1_KEYS = frozenset({"schema_version", "scope", "id"})
_V2_KEYS = frozenset({"schema_version", "scope", "namespace_id", "collection_id", "id"})


@dataclass(frozen=True, slots=True)
class V1Reference:
    """A legacy reference: scope plus a legacy id, which may be ambiguous on disk."""

    scope: Scope
    id: str

    schema_version = 1

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": 1, "scope": self.scope.value, "id": self.id}


@dataclass(frozen=True, slots=True)
class V2Reference:
    """A canonical reference; it determines exactly one file path."""

    scope: Scope
    namespace_id: str
    collection_id: str | None
    id: str

    schema_version = 2

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 2,
            "scope": self.scope.value,
            "namespace_id": self.namespace_id,
            "collection_id": self.collection_id,
            "id": self.id,
        }


MemoryReference = V1Reference | V2Reference


def parse_reference(value: object) -> MemoryReference | None:
    """Read a reference object exactly (no extra or missing members); None when invalid."""
    if type(value) is not dict:
        return None
    version = value.get("schema_version")
    if type(version) is not int:
        return None
    scope = parse_scope(value.get("scope"))
    if scope is None:
        return None
    if version == 1 and value.keys() == _V1_KEYS and is_legacy_id(value["id"]):
        return V1Reference(scope, value["id"])
    if version == 2 and value.keys() == _V2_KEYS:
        collection_id = value["collection_id"]
        if (
            is_identifier(value["namespace_id"])
            and (collection_id is None or is_identifier(collection_id))
            and is_memory_id(value["id"])
        ):
            return V2Reference(scope, value["namespace_id"], collection_id, value["id"])
    return None


def reference_of(record: MemoryRecord, scope: Scope) -> MemoryReference:
    """The reference of a record found in ``scope`` (v1 records take their directory's)."""
    if isinstance(record, MemoryRecordV2):
        return V2Reference(record.scope, record.namespace.id, record.collection_id, record.id)
    return V1Reference(scope, record.id)
