"""The mutation service: remember, revise, archive, restore and forget.

Raw tool arguments come in, JSON-ready outcomes go out. Each operation reads its
arguments through its tool's declared readers (`tools`), applies the content policy
where text is supplied, and only then touches the filesystem, always inside the root's
mutation lock. Any refusal or error leaves the memory tree unchanged (the lock file
aside). Every call ends with exactly one content-free log event on
``mcp.memory_<tool>``.
"""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import partial
from typing import Any, Protocol

from .index import IndexedRecord, MemoryIndex, duplicate_hash
from .model import (
    ORIGINS,
    PUBLIC_ORIGINS,
    REVISION_MAX,
    ErrorCode,
    Lifecycle,
    MemoryOperationError,
    MemoryRecordV2,
    Provenance,
    V2Reference,
    candidate_limit_exceeded,
    checked_candidate_limit,
    is_memory_id,
    reference_parts,
    utc_now_seconds,
)
from .policy import enforce_content_policy
from .records import serialize_record
from .store import LOCK_TIMEOUT_SECONDS, RecordWriter, ensure_root, probe_directories, root_lock
from .tools import (
    ARCHIVE,
    FORGET,
    REMEMBER,
    RESTORE,
    REVISE,
    TOOLS,
    ChangeRequest,
    LogFields,
    RememberRequest,
    ReviseRequest,
    ToolOutcome,
    run_tool,
    tag_fields,
)


class IndexProvider(Protocol):
    """Whatever hands out the read index of the current root (the read `MemoryService`)."""

    def current_index(self) -> MemoryIndex: ...


def new_memory_id() -> str:
    """A fresh canonical id: ``mem_`` and the 32 hex digits of a random UUID."""
    return "mem_" + uuid.uuid4().hex


# -- the service ----------------------------------------------------------------------


def _busy(_request: object, _fields: LogFields) -> dict[str, Any]:
    raise MemoryOperationError(ErrorCode.MEMORY_BUSY)


def _result(status: str, record: MemoryRecordV2) -> dict[str, Any]:
    return {
        "status": status,
        "reference": _reference(record).to_json(),
        "lifecycle": record.lifecycle.to_json(),
    }


def _reference(record: MemoryRecordV2) -> V2Reference:
    return V2Reference(record.scope, record.namespace.id, record.collection_id, record.id)


class MutationService:
    """The five memory mutations over the same index the read service uses.

    ``indexes`` supplies the index of the current root on every call (normally the
    process's `MemoryService`), so reads see writes at once and both always agree on
    the root. ``candidate_limit`` bounds remember's container scan and is the most a
    scope may hold before remember refuses; ``clock`` returns the strict UTC-second
    timestamp used for created_at/updated_at; ``lock_timeout`` is how long a mutation
    may wait, from the moment its request arrived, for the root lock before answering
    ``memory_busy``.

    Each mutation takes an optional ``deadline`` (a `time.monotonic` value): the caller
    that queued the request before it ran passes its arrival plus `lock_timeout`, so the
    time spent waiting for a worker counts too. Past the deadline the lock is tried once.
    """

    def __init__(
        self,
        indexes: IndexProvider,
        candidate_limit: int,
        *,
        clock: Callable[[], str] = utc_now_seconds,
        id_factory: Callable[[], str] = new_memory_id,
        lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    ) -> None:
        self._indexes = indexes
        self._candidate_limit = checked_candidate_limit(candidate_limit)
        self._clock = clock
        self._new_id = id_factory
        self._lock_timeout = lock_timeout

    @property
    def lock_timeout(self) -> float:
        return self._lock_timeout

    # -- public operations -----------------------------------------------------------

    def remember(
        self,
        arguments: Mapping[str, Any],
        *,
        dry_run: bool = False,
        deadline: float | None = None,
    ) -> ToolOutcome:
        """Create one canonical record, or report the identical one that already exists.

        With ``dry_run`` every check runs (arguments, content policy, duplicates, the
        candidate limit) but nothing is written, not even the root: a record that would
        be created answers ``would_remember`` with the reference it would get.
        """
        if dry_run:
            return run_tool(REMEMBER, arguments, self._rehearse)
        return run_tool(REMEMBER, arguments, partial(self._remember, deadline=deadline))

    def import_record(self, arguments: Mapping[str, Any], *, dry_run: bool = False) -> ToolOutcome:
        """Remember one record of an export, as `remember` does, except for where it came
        from: it keeps the origin it was exported with, whichever of the four (a memory
        written by hand is `manual`), and is recorded as imported."""
        origin = arguments.get("origin")
        checked = arguments
        if origin in ORIGINS and origin not in PUBLIC_ORIGINS:
            # The argument check admits only the origins an agent may claim; here the
            # origin is the record's own, and any the record format allows is kept.
            checked = {**arguments, "origin": PUBLIC_ORIGINS[0]}
        provenance = Provenance(origin, "import") if origin in ORIGINS else None
        return run_tool(
            REMEMBER, checked, partial(self._remember, dry_run=dry_run, provenance=provenance)
        )

    def revise(self, arguments: Mapping[str, Any], *, deadline: float | None = None) -> ToolOutcome:
        """Replace the mutable text of one record as a whole (revision + 1)."""
        return run_tool(REVISE, arguments, partial(self._revise, deadline=deadline))

    def archive(
        self, arguments: Mapping[str, Any], *, deadline: float | None = None
    ) -> ToolOutcome:
        """Move an active record to archived (excluded from recall, still inspectable)."""
        return run_tool(ARCHIVE, arguments, partial(self._archive, deadline=deadline))

    def restore(
        self, arguments: Mapping[str, Any], *, deadline: float | None = None
    ) -> ToolOutcome:
        """Move an archived record back to active."""
        return run_tool(RESTORE, arguments, partial(self._restore, deadline=deadline))

    def forget(self, arguments: Mapping[str, Any], *, deadline: float | None = None) -> ToolOutcome:
        """Physically delete one archived record at its current revision."""
        return run_tool(FORGET, arguments, partial(self._forget, deadline=deadline))

    def refuse_busy(self, name: str, arguments: Mapping[str, Any]) -> ToolOutcome:
        """The answer to a call of tool ``name`` that waited out its lock timeout before
        it could even start: ``memory_busy`` (retryable, nothing changed), logged like
        every outcome. Only the arguments are checked; nothing else runs."""
        return run_tool(TOOLS[name], arguments, _busy)

    # -- operations on validated requests --------------------------------------------

    def _remember(
        self,
        request: RememberRequest,
        fields: LogFields,
        dry_run: bool = False,
        deadline: float | None = None,
        provenance: Provenance | None = None,
    ) -> dict[str, Any]:
        provenance = provenance or Provenance(request.origin, "memory_remember")
        fields.update(
            scope=request.scope.value,
            schema_version=2,
            namespace_kind=request.namespace.kind,
            memory_kind=request.kind,
            collection_present=request.collection is not None,
            origin=provenance.origin,
        )
        ns, col = request.namespace, request.collection
        enforce_content_policy(
            [
                ("namespace", ns.id),
                ("namespace", ns.label),
                ("collection", None if col is None else col.id),
                ("collection", None if col is None else col.label),
                ("title", request.title),
                ("content", request.content),
                *tag_fields("tags", request.tags),
            ]
        )
        index = self._indexes.current_index()
        if dry_run:
            payload = self._remember_locked(index, request, provenance, dry_run=True)
        else:
            ensure_root(index.root)
            # The scope is made current before the lock is taken too: a cold one is read
            # whole (seconds, at a hundred thousand records), and every other writer
            # would wait for that. Under the lock, only what changed since is looked at.
            index.refresh(request.scope, recursive=True, candidate_limit=self._candidate_limit)
            with root_lock(index.root, self._wait(deadline)):
                payload = self._remember_locked(index, request, provenance)
        fields["memory_id"] = payload["reference"]["id"]
        return payload

    def _rehearse(self, request: RememberRequest, fields: LogFields) -> dict[str, Any]:
        return self._remember(request, fields, dry_run=True)

    def _revise(
        self, request: ReviseRequest, fields: LogFields, *, deadline: float | None
    ) -> dict[str, Any]:
        fields.update(schema_version=2, scope=request.reference.scope.value)
        enforce_content_policy(
            [
                ("namespace_label", request.namespace_label),
                ("collection_label", request.collection_label),
                ("title", request.title),
                ("content", request.content),
                *tag_fields("tags", request.tags),
            ]
        )

        def change(record: MemoryRecordV2) -> MemoryRecordV2 | None:
            namespace = dataclasses.replace(record.namespace, label=request.namespace_label)
            collection = record.collection
            if collection is not None:
                collection = dataclasses.replace(collection, label=request.collection_label)
            revised = dataclasses.replace(
                record,
                namespace=namespace,
                collection=collection,
                title=request.title,
                content=request.content,
                tags=request.tags,
            )
            return None if revised == record else revised

        return self._change(
            request.reference,
            request.expected_revision,
            change,
            ("revised", "already_current"),
            deadline,
        )

    def _archive(
        self, request: ChangeRequest, fields: LogFields, *, deadline: float | None
    ) -> dict[str, Any]:
        statuses = ("archived", "already_archived")
        return self._transition(request, fields, "archived", statuses, deadline)

    def _restore(
        self, request: ChangeRequest, fields: LogFields, *, deadline: float | None
    ) -> dict[str, Any]:
        statuses = ("restored", "already_active")
        return self._transition(request, fields, "active", statuses, deadline)

    def _forget(
        self, request: ChangeRequest, fields: LogFields, *, deadline: float | None
    ) -> dict[str, Any]:
        reference = request.reference
        fields.update(schema_version=2, scope=reference.scope.value)
        index = self._indexes.current_index()
        with self._locked_existing(index, deadline):
            found, record = self._current(index, reference, request.expected_revision)
            if not record.lifecycle.archived:
                raise MemoryOperationError(ErrorCode.NOT_ARCHIVED)
            RecordWriter(index).delete(found.parts, found.digest)
            index.drop_snapshot()  # it holds the title and words; rewritten without them
        return {"status": "forgotten", "reference": reference.to_json()}

    def _transition(
        self,
        request: ChangeRequest,
        fields: LogFields,
        target: str,
        statuses: tuple[str, str],
        deadline: float | None,
    ) -> dict[str, Any]:
        fields.update(schema_version=2, scope=request.reference.scope.value)

        def change(record: MemoryRecordV2) -> MemoryRecordV2 | None:
            if record.lifecycle.state == target:
                return None
            return dataclasses.replace(
                record, lifecycle=Lifecycle(target, record.lifecycle.revision)
            )

        return self._change(
            request.reference, request.expected_revision, change, statuses, deadline
        )

    # -- internals -------------------------------------------------------------------

    def _wait(self, deadline: float | None) -> float:
        """How long the root lock may still be waited for (0: one attempt)."""
        if deadline is None:
            return self._lock_timeout
        return max(0.0, deadline - time.monotonic())

    def _locked_existing(
        self, index: MemoryIndex, deadline: float | None
    ) -> AbstractContextManager[None]:
        """The root lock, or not_found at once when there is no root to change at all."""
        if not os.path.lexists(index.root):
            raise MemoryOperationError(ErrorCode.NOT_FOUND)
        return root_lock(index.root, self._wait(deadline))

    def _current(
        self, index: MemoryIndex, reference: V2Reference, expected: int
    ) -> tuple[IndexedRecord, MemoryRecordV2]:
        found = index.lookup(reference_parts(reference), reference.scope)
        if found is None or not isinstance(found.record, MemoryRecordV2):
            raise MemoryOperationError(ErrorCode.NOT_FOUND)
        # A stale revision conflicts before any state or no-op decision.
        if found.record.lifecycle.revision != expected:
            raise MemoryOperationError(ErrorCode.REVISION_CONFLICT)
        return found, found.record

    def _change(
        self,
        reference: V2Reference,
        expected: int,
        change: Callable[[MemoryRecordV2], MemoryRecordV2 | None],
        statuses: tuple[str, str],
        deadline: float | None,
    ) -> dict[str, Any]:
        """Lock, re-read, check the revision, apply ``change`` and replace the file.

        ``change`` returns None when the record already has the requested state; that
        idempotent outcome writes nothing and keeps revision and timestamps.
        """
        index = self._indexes.current_index()
        with self._locked_existing(index, deadline):
            found, record = self._current(index, reference, expected)
            updated = change(record)
            if updated is None:
                return _result(statuses[1], record)
            if record.lifecycle.revision >= REVISION_MAX:
                # The next revision could not be read back: the record stays as it is.
                raise MemoryOperationError(ErrorCode.INVALID_RECORD)
            updated = dataclasses.replace(
                updated,
                lifecycle=Lifecycle(updated.lifecycle.state, record.lifecycle.revision + 1),
                # Never move updated_at backwards, even if the clock does.
                updated_at=max(self._clock(), record.updated_at),
            )
            RecordWriter(index).replace(found.parts, found.digest, serialize_record(updated))
        return _result(statuses[0], updated)

    def _remember_locked(
        self,
        index: MemoryIndex,
        request: RememberRequest,
        provenance: Provenance,
        *,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        container: tuple[str, ...] = (request.namespace.id,)
        if request.collection is not None:
            container += (request.collection.id,)
        # The whole scope, not just the container: the quota below counts the scope, and
        # files added by hand anywhere in it count too. With change notification this is
        # a check of queued events when nothing changed.
        scope = index.refresh(request.scope, recursive=True, candidate_limit=self._candidate_limit)
        now = self._clock()
        record = MemoryRecordV2(
            id=self._new_id(),
            scope=request.scope,
            namespace=request.namespace,
            collection=request.collection,
            kind=request.kind,
            language=request.language,
            title=request.title,
            content=request.content,
            tags=request.tags,
            provenance=provenance,
            lifecycle=Lifecycle("active", 1),
            created_at=now,
            updated_at=now,
            occurred_at=request.occurred_at,
        )
        # The index keeps every container's duplicate keys, so detection is one lookup
        # however many records the container holds.
        duplicates = index.duplicates((request.scope.value, *container), record)
        if duplicates:
            existing = min(
                (item.record for item in duplicates if isinstance(item.record, MemoryRecordV2)),
                key=lambda existing: (existing.lifecycle.archived, existing.id),
            )
            status = "existing_archived" if existing.lifecycle.archived else "already_exists"
            return _result(status, existing)
        # A quota: remember never grows a scope past the limit every scope-wide read
        # enforces, so the tool cannot make the scope unreadable.
        if scope.candidates >= self._candidate_limit:
            raise candidate_limit_exceeded(self._candidate_limit, adding=True)
        if not is_memory_id(record.id):
            raise MemoryOperationError(ErrorCode.INTERNAL_ERROR)
        parts = reference_parts(_reference(record))
        if dry_run:
            probe_directories(index.root, parts[:-1])
            # A rehearsal of many (an import) must know when two would be the same memory:
            # only the first would be remembered, the second found.
            return {
                **_result("would_remember", record),
                "identity": duplicate_hash((request.scope.value, *container), record),
            }
        RecordWriter(index).create(parts, serialize_record(record))
        return _result("remembered", record)
