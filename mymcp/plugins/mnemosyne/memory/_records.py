"""The immutable memory record values (legacy v1 and canonical v2) and their JSON forms."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._scopes import Scope

__all__ = [
    "LIFECYCLE_STATES",
    "ORIGINS",
    "PUBLIC_ORIGINS",
    "RECORDED_VIA",
    "Collection",
    "Lifecycle",
    "MemoryRecord",
    "MemoryRecordV1",
    "MemoryRecordV2",
    "Namespace",
    "Provenance",
]

ORIGINS = ("explicit_user_statement", "user_approved_proposal", "manual", "import")
PUBLIC_ORIGINS = ORIGINS[:2]
RECORDED_VIA = ("memory_remember", "filesystem", "migration", "import")
LIFECYCLE_STATES = ("active", "archived")


@dataclass(frozen=True, slots=True)
class Namespace:
    """The container a canonical memory belongs to inside its scope."""

    kind: str
    id: str
    label: str | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "label": self.label}


@dataclass(frozen=True, slots=True)
class Collection:
    """An optional sub-container inside a namespace."""

    id: str
    label: str | None

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "label": self.label}


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a memory came from and which path recorded it."""

    origin: str
    recorded_via: str

    def to_json(self) -> dict[str, Any]:
        return {"origin": self.origin, "recorded_via": self.recorded_via}


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """Active or archived, plus the revision counter used for optimistic concurrency."""

    state: str
    revision: int

    @property
    def archived(self) -> bool:
        return self.state == "archived"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "revision": self.revision}


@dataclass(frozen=True, slots=True)
class MemoryRecordV1:
    """A read-only legacy record; its scope comes from where the file lives, not its body."""

    id: str
    content: str
    title: str | None = None
    tags: tuple[str, ...] | None = None

    schema_version = 1

    def to_json(self) -> dict[str, Any]:
        """The file form: optional members appear only when the record has them."""
        body: dict[str, Any] = {"schema_version": 1, "id": self.id}
        if self.title is not None:
            body["title"] = self.title
        body["content"] = self.content
        if self.tags is not None:
            body["tags"] = list(self.tags)
        return body

    def public_json(self) -> dict[str, Any]:
        """What inspection shows: every field v1 can represent, absent ones as null/empty."""
        return {
            "schema_version": 1,
            "id": self.id,
            "title": self.title,
            "content": self.content,
            "tags": list(self.tags or ()),
        }

    @property
    def all_tags(self) -> tuple[str, ...]:
        return self.tags or ()


@dataclass(frozen=True, slots=True)
class MemoryRecordV2:
    """A canonical, self-describing record whose identity fields also determine its path."""

    id: str
    scope: Scope
    namespace: Namespace
    collection: Collection | None
    kind: str
    language: str
    title: str | None
    content: str
    tags: tuple[str, ...]
    provenance: Provenance
    lifecycle: Lifecycle
    created_at: str
    updated_at: str
    occurred_at: str | None = None

    schema_version = 2

    @property
    def collection_id(self) -> str | None:
        return None if self.collection is None else self.collection.id

    @property
    def all_tags(self) -> tuple[str, ...]:
        return self.tags

    def to_json(self) -> dict[str, Any]:
        """The canonical member order used both on disk and in inspection results."""
        body: dict[str, Any] = {
            "schema_version": 2,
            "id": self.id,
            "scope": self.scope.value,
            "namespace": self.namespace.to_json(),
            "collection": None if self.collection is None else self.collection.to_json(),
            "kind": self.kind,
            "language": self.language,
            "title": self.title,
            "content": self.content,
            "tags": list(self.tags),
            "provenance": self.provenance.to_json(),
            "lifecycle": self.lifecycle.to_json(),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        # Non-events never gain an invented null occurrence time.
        if self.occurred_at is not None:
            body["occurred_at"] = self.occurred_at
        return body

    def public_json(self) -> dict[str, Any]:
        return self.to_json()


MemoryRecord = MemoryRecordV1 | MemoryRecordV2
