"""Fixtures for the memory-domain tests: record bodies, file placement and a service."""

from __future__ import annotations

import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    LOCK_FILE_NAME,
    CursorCodec,
    IndexedRecord,
    MemoryIndex,
    MemoryService,
    Scope,
    records,
    store,
)
from mymcp.plugins.mnemosyne.memory import index as index_module

# Files written by the tests are backdated so the index may trust their stamps at once.
SETTLED_AGE_NS = 3600 * 1_000_000_000

RecordFactory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _v2(
    *,
    scope: str = "project",
    namespace: str = "mnemosyne",
    namespace_kind: str | None = None,
    collection: str | None = None,
    kind: str | None = None,
    memory_id: str | None = None,
    title: str | None = "A title",
    content: str = "Some content.",
    tags: list[str] | None = None,
    state: str = "active",
    revision: int = 1,
    **extra: Any,
) -> dict[str, Any]:
    default_kinds = {
        "self": ("aspect", "attribute"),
        "relationship": ("person", "summary"),
        "preference": ("domain", "preference"),
        "practice": ("domain", "practice"),
        "project": ("project", "decision"),
        "knowledge": ("topic", "reference"),
        "agent": ("agent", "policy"),
    }
    ns_kind, default_kind = default_kinds[scope]
    body: dict[str, Any] = {
        "schema_version": 2,
        "id": memory_id or "mem_" + uuid.uuid4().hex,
        "scope": scope,
        "namespace": {"kind": namespace_kind or ns_kind, "id": namespace, "label": None},
        "collection": None if collection is None else {"id": collection, "label": None},
        "kind": kind or default_kind,
        "language": "en",
        "title": title,
        "content": content,
        "tags": [] if tags is None else tags,
        "provenance": {"origin": "explicit_user_statement", "recorded_via": "memory_remember"},
        "lifecycle": {"state": state, "revision": revision},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    body.update(extra)
    return body


def _v1(
    memory_id: str = "legacy-one", content: str = "Legacy content.", **extra: Any
) -> dict[str, Any]:
    return {"schema_version": 1, "id": memory_id, "content": content, **extra}


def settle(path: Path) -> None:
    """Backdate a file's mtime; its stamp counts as settled once its ctime is old too
    (see `an_hour_later`)."""
    old = time.time_ns() - SETTLED_AGE_NS
    os.utime(path, ns=(old, old), follow_symlinks=False)


@pytest.fixture(scope="session", autouse=True)
def private_umask() -> Iterator[None]:
    """Files the tests write by hand are the user's own and writable by nobody else,
    whatever the umask the suite runs under (0002 would make every one group-writable,
    which the index skips)."""
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


@pytest.fixture
def an_hour_later(monkeypatch: pytest.MonkeyPatch) -> None:
    """The index judges stamps an hour from now: files the test wrote (and `settle`d)
    have both times safely in the past, as files written long ago do. Without it, a file
    written just now is too fresh to trust by its ctime, however old its mtime."""
    monkeypatch.setattr(index_module, "_now_ns", lambda: time.time_ns() + SETTLED_AGE_NS)


def v2_path(root: Path, body: dict[str, Any]) -> Path:
    parts = [body["scope"], body["namespace"]["id"]]
    if body["collection"] is not None:
        parts.append(body["collection"]["id"])
    return root.joinpath(*parts, body["id"] + ".json")


def _write(root: Path) -> Writer:
    def write(
        body: dict[str, Any] | bytes | str,
        where: str | None = None,
        *,
        settled: bool = True,
    ) -> Path:
        if where is None:
            assert isinstance(body, dict)
            path = v2_path(root, body)
        else:
            path = root / where
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(body, dict):
            data = (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode()
        elif isinstance(body, str):
            data = body.encode()
        else:
            data = body
        path.write_bytes(data)
        if settled:
            settle(path)
        return path

    return write


@pytest.fixture
def v2() -> RecordFactory:
    return _v2


@pytest.fixture
def v1() -> RecordFactory:
    return _v1


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A memory root that exists (tests about a missing root use tmp_path directly)."""
    path = tmp_path / "memory"
    path.mkdir()
    return path


@pytest.fixture
def write(root: Path) -> Writer:
    return _write(root)


@pytest.fixture
def codec() -> CursorCodec:
    return CursorCodec.generate()


@pytest.fixture
def service(root: Path, codec: CursorCodec) -> MemoryService:
    return MemoryService(lambda: root, 10_000, codec)


@dataclass(frozen=True)
class Scanned:
    """What a test sees of one selection: its records, candidate count and revision."""

    records: list[IndexedRecord]
    candidates: int
    revision: int

    @property
    def ids(self) -> set[str]:
        return {item.record.id for item in self.records}


def scan(
    index: MemoryIndex,
    scope: Scope = Scope.PROJECT,
    container: tuple[str, ...] = (),
    *,
    recursive: bool = True,
    candidate_limit: int = 10_000,
    include_legacy: bool = True,
) -> Scanned:
    """Make a selection current and read its records, as the services do."""
    selection = index.refresh(
        scope, container, recursive=recursive, candidate_limit=candidate_limit
    )
    records = list(index.records(selection, include_legacy=include_legacy))
    return Scanned(records, selection.candidates, selection.revision)


def remember_args(**overrides: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "scope": "project",
        "namespace": {"kind": "project", "id": "mnemosyne", "label": "Mnemosyne"},
        "collection": {"id": "decisions", "label": "Decisions"},
        "kind": "decision",
        "language": "en",
        "title": "Remember consent boundary",
        "content": "Durable memory requires approval for each exact tool call.",
        "tags": ["architecture", "consent"],
        "origin": "user_approved_proposal",
    }
    args.update(overrides)
    return args


def tree_snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every entry under ``root`` (mode and bytes), without the lock file."""
    if not root.exists():
        return {}
    entries: dict[str, tuple[int, bytes | None]] = {}
    for path in sorted(root.rglob("*")):
        if path.name == LOCK_FILE_NAME:
            continue
        info = path.lstat()
        data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
        entries[str(path.relative_to(root))] = (info.st_mode, data)
    return entries


@pytest.fixture
def walks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts full stat walks; patches and the inotify fast path never call them."""
    calls: list[int] = []
    real = index_module.walk_candidates

    def counting(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        real(*args, **kwargs)

    monkeypatch.setattr(index_module, "walk_candidates", counting)
    return calls


@pytest.fixture
def count_reads(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"read": 0, "parse": 0}
    real_read, real_parse = store.read_candidate, records.parse_record

    def counting_read(*args: Any) -> Any:
        counts["read"] += 1
        return real_read(*args)

    def counting_parse(data: bytes) -> Any:
        counts["parse"] += 1
        return real_parse(data)

    monkeypatch.setattr(store, "read_candidate", counting_read)
    monkeypatch.setattr(records, "parse_record", counting_parse)
    return counts
