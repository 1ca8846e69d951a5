"""The index's derived views against a brute-force re-read, under any mix of changes.

A hypothesis state machine mixes hand edits (new, changed, broken and deleted files,
settled or written within the current timestamp tick, and same-size rewrites that put
the old mtime back), tool writes (remember, revise, archive, restore, forget), restarts
from the saved snapshot and reads. After every read, what the long-lived services
answer must equal what a brand-new service answers after reading every file afresh,
and the listing must equal the records found by parsing the tree directly. Runs with
change notification and with the plain stat walk.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    MemoryIndex,
    MemoryRecordV2,
    MemoryService,
    MutationService,
    RecordRejected,
    Scope,
    parse_record,
    reference_of,
)
from mymcp.plugins.mnemosyne.memory import index as index_module

from .conftest import settle

WORDS = ("kiwi", "plum", "fig", "lime", "pear", "sloe", "date", "yuzu")
# Each four-letter word and the next one: a swap that keeps every file's size.
_FOUR = [word for word in WORDS if len(word) == 4]
_ROTATED = {a.encode(): b.encode() for a, b in zip(_FOUR, [*_FOUR[1:], _FOUR[0]], strict=True)}
_SAME_LENGTH = re.compile(rb"\b(" + b"|".join(_ROTATED) + rb")\b")
NAMESPACES = ("alpha", "beta")
TEXT = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)


def _body(namespace: str, memory_id: str, content: str, **extra: Any) -> dict[str, Any]:
    body = {
        "schema_version": 2,
        "id": memory_id,
        "scope": "project",
        "namespace": {"kind": "project", "id": namespace, "label": None},
        "collection": None,
        "kind": "decision",
        "language": "en",
        "title": None,
        "content": content,
        "tags": [],
        "provenance": {"origin": "explicit_user_statement", "recorded_via": "filesystem"},
        "lifecycle": {"state": "active", "revision": 1},
        "created_at": "2026-01-01T00:00:00Z",
        "updated_at": "2026-01-01T00:00:00Z",
    }
    body.update(extra)
    return body


class MemoryMachine(RuleBasedStateMachine):
    """One memory root, long-lived services over it, and a tree we change in every way."""

    watch = True

    @initialize()
    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="mymcp-machine-"))
        self.root = self.tmp / "memory"
        self.root.mkdir()
        self.cache = self.tmp / "cache"
        if not self.watch:
            self._create = index_module.Watcher.create
            index_module.Watcher.create = classmethod(lambda cls: None)  # type: ignore[assignment]
        self._start_services()

    def _start_services(self) -> None:
        """Long-lived services over the root, starting from the snapshot when there is one."""
        self.reads = MemoryService(
            lambda: self.root, 10_000, CursorCodec.generate(), snapshot_directory=lambda: self.cache
        )
        self.writes = MutationService(self.reads, 10_000)
        self.reads.list({"scope": "project"})

    def teardown(self) -> None:
        if not self.watch:
            index_module.Watcher.create = self._create  # type: ignore[method-assign]
        if hasattr(self, "reads"):
            # Saved now, its index has nothing left to save later, when the tree is gone.
            self.reads.current_index().save()
        if hasattr(self, "tmp"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    # -- what is on disk ------------------------------------------------------------------

    def _files(self) -> list[Path]:
        """Every record file, in the order first seen (file names hold random ids, and
        hypothesis needs the same steps to draw the same file on every replay)."""
        order = self.__dict__.setdefault("_order", {})
        files = sorted(self.root.rglob("*.json"))
        for path in files:
            order.setdefault(path, len(order))
        return sorted(files, key=order.__getitem__)

    def _on_disk(self) -> dict[str, Any]:
        """Reference JSON -> record, for every valid record file (a brute-force re-read)."""
        found: dict[str, Any] = {}
        for path in self._files():
            try:
                record = parse_record(path.read_bytes())
            except RecordRejected:
                continue
            parts = path.relative_to(self.root).parts
            reference = reference_of(record, Scope.PROJECT).to_json()
            if isinstance(record, MemoryRecordV2):
                expected = ("project", record.namespace.id, f"{record.id}.json")
                if parts != expected:
                    continue  # a canonical record away from its own path is skipped
            found[json.dumps(reference, sort_keys=True) + "|" + "/".join(parts)] = record
        return found

    def _write(self, path: Path, data: bytes, settled: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        if settled:
            settle(path)

    # -- hand changes ---------------------------------------------------------------------

    @rule(namespace=st.sampled_from(NAMESPACES), content=TEXT, settled=st.booleans())
    def hand_write_record(self, namespace: str, content: str, settled: bool) -> None:
        memory_id = "mem_" + uuid.uuid4().hex
        body = _body(namespace, memory_id, content)
        data = (json.dumps(body, indent=2) + "\n").encode()
        self._write(self.root / "project" / namespace / f"{memory_id}.json", data, settled)

    @rule(content=TEXT, settled=st.booleans())
    def hand_write_legacy(self, content: str, settled: bool) -> None:
        name = f"legacy-{uuid.uuid4().hex[:6]}"
        data = json.dumps({"schema_version": 1, "id": name, "content": content}).encode()
        self._write(self.root / "project" / "old" / f"{name}.json", data, settled)

    @rule(data=st.data(), content=TEXT, settled=st.booleans())
    def hand_edit(self, data: st.DataObject, content: str, settled: bool) -> None:
        files = self._files()
        if not files:
            return
        path = data.draw(st.sampled_from(files))
        try:
            body = json.loads(path.read_bytes())
        except ValueError:
            body = None
        if not isinstance(body, dict) or "content" not in body:
            return
        body["content"] = content
        self._write(path, json.dumps(body, indent=2).encode(), settled)

    @rule(data=st.data())
    def hand_edit_keeping_size_and_mtime(self, data: st.DataObject) -> None:
        """Words swapped for others of the same length, and the old mtime put back (as
        cp -p or rsync -t do): only ctime and the bytes tell."""
        files = self._files()
        if not files:
            return
        path = data.draw(st.sampled_from(files))
        before = path.stat()
        text = path.read_bytes()
        edited = _SAME_LENGTH.sub(lambda word: _ROTATED[word.group()], text)
        if edited == text:
            return
        path.write_bytes(edited)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))

    @rule()
    def restart_from_the_snapshot(self) -> None:
        """Save the index, and carry on with new services that load it."""
        assert self.reads.current_index().save()
        self.reads.current_index().close()
        self._start_services()

    @rule(data=st.data())
    def hand_break(self, data: st.DataObject) -> None:
        files = self._files()
        if files:
            self._write(data.draw(st.sampled_from(files)), b"{not json", settled=True)

    @rule(data=st.data())
    def hand_delete(self, data: st.DataObject) -> None:
        files = self._files()
        if files:
            data.draw(st.sampled_from(files)).unlink()

    # -- tool writes ----------------------------------------------------------------------

    @rule(namespace=st.sampled_from(NAMESPACES), content=TEXT)
    def remember(self, namespace: str, content: str) -> None:
        payload = self.writes.remember(
            {
                "scope": "project",
                "namespace": {"kind": "project", "id": namespace, "label": None},
                "collection": None,
                "kind": "decision",
                "language": "en",
                "title": None,
                "content": content,
                "tags": [],
                "origin": "explicit_user_statement",
            }
        ).payload
        assert payload["status"] in ("remembered", "already_exists", "existing_archived"), payload

    @rule(data=st.data(), action=st.sampled_from(["revise", "archive", "restore", "forget"]))
    def change(self, data: st.DataObject, action: str) -> None:
        canonical = [r for r in self._on_disk().values() if isinstance(r, MemoryRecordV2)]
        if not canonical:
            return
        record = data.draw(st.sampled_from(canonical))
        reference = reference_of(record, Scope.PROJECT).to_json()
        arguments: dict[str, Any] = {
            "reference": reference,
            "expected_revision": record.lifecycle.revision,
        }
        if action == "revise":
            arguments.update(
                namespace_label=None,
                title=None,
                content=data.draw(TEXT),
                tags=[],
            )
        payload = getattr(self.writes, action)(arguments).payload
        assert payload.get("code") not in ("internal_error", "write_conflict"), payload

    # -- reads against a brute-force re-read ------------------------------------------------

    def _fresh(self) -> MemoryService:
        return MemoryService(lambda: self.root, 10_000, CursorCodec.generate())

    @rule(query=TEXT, namespace=st.none() | st.sampled_from(NAMESPACES))
    def recall(self, query: str, namespace: str | None) -> None:
        arguments: dict[str, Any] = {"query": query, "scope": "project"}
        if namespace is not None:
            arguments["namespace_id"] = namespace
        live = self.reads.recall(arguments).payload
        fresh = self._fresh().recall(arguments).payload
        assert live == fresh
        on_disk = {record.id: record for record in self._on_disk().values()}
        for item in live["memories"]:
            record = on_disk[item["id"]]
            assert item["content"] == record.content
            assert not (isinstance(record, MemoryRecordV2) and record.lifecycle.archived)

    @invariant()
    def listing_matches_the_files(self) -> None:
        if not hasattr(self, "reads"):
            return
        live = _all_pages(self.reads)
        assert live == _all_pages(self._fresh())
        listed = sorted(json.dumps(item["reference"], sort_keys=True) for item in live)
        expected = sorted(key.split("|")[0] for key in self._on_disk())
        assert listed == expected
        # The state list cursors sign (count and checksum) of every selection, too.
        live_index = self.reads.current_index()
        fresh_index = MemoryIndex(self.root, watch=False)
        for container, recursive in [
            ((), True),
            *(((ns,), r) for ns in NAMESPACES for r in (True, False)),
        ]:
            states = []
            for index in (live_index, fresh_index):
                selection = index.refresh(
                    Scope.PROJECT, container, recursive=recursive, candidate_limit=10_000
                )
                inventory = index.inventory(selection, include_legacy=not container)
                states.append((inventory.count, inventory.checksum, inventory.ambiguous))
            assert states[0] == states[1]


def _all_pages(service: MemoryService) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    payload = service.list({"scope": "project", "page_size": 7}).payload
    while True:
        assert payload["status"] == "ok", payload
        items += payload["memories"]
        cursor = payload["page"]["next_cursor"]
        if cursor is None:
            return items
        payload = service.list({"scope": "project", "cursor": cursor}).payload


class StatWalkMachine(MemoryMachine):
    watch = False


SETTINGS = settings(
    max_examples=25,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux only")
def test_with_change_notification() -> None:
    MemoryMachine.TestCase.settings = SETTINGS
    MemoryMachine.TestCase().runTest()


def test_with_the_stat_walk() -> None:
    StatWalkMachine.TestCase.settings = SETTINGS
    StatWalkMachine.TestCase().runTest()
