"""Smoke test at scale: 100,000 records in one scope work with the default settings.

The records are written straight to disk (the format the plugin writes), then read,
listed, searched, added to and restarted from the index snapshot, with a hand edit and
a deletion made while no service ran. Marked slow; it stays in the default run.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    CANDIDATE_LIMIT_DEFAULT,
    CursorCodec,
    MemoryService,
    MutationService,
    Scope,
)

RECORDS = 100_000
NAMESPACES = ("atlas", "beacon", "cinder", "delta")
MARKERS = {"mem_" + "a" * 32: "quokka", "mem_" + "b" * 32: "pangolin", "mem_" + "c" * 32: "axolotl"}


def _write_records(root: Path) -> dict[str, Path]:
    """Write the records as canonical files, backdated so their stamps are trusted."""
    rng = random.Random(2026)
    words = [f"{a}{b}{c}" for a in "bdfgklmnprst" for b in "aeiou" for c in "lmnrst"][:300]
    settled = time.time_ns() - 3600 * 1_000_000_000
    paths: dict[str, Path] = {}
    directories = {ns: root / "project" / ns for ns in NAMESPACES}
    for directory in directories.values():
        directory.mkdir(parents=True)
    ids = [f"mem_{number:032x}" for number in range(RECORDS)] + list(MARKERS)
    for number, memory_id in enumerate(ids):
        namespace = NAMESPACES[number % len(NAMESPACES)]
        content = MARKERS.get(memory_id) or " ".join(rng.choices(words, k=rng.randint(8, 40)))
        body: dict[str, Any] = {
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
            "provenance": {"origin": "explicit_user_statement", "recorded_via": "import"},
            "lifecycle": {"state": "active", "revision": 1},
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
        path = directories[namespace] / f"{memory_id}.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, (json.dumps(body, indent=2, ensure_ascii=False) + "\n").encode())
        finally:
            os.close(fd)
        os.utime(path, ns=(settled, settled))
        if memory_id in MARKERS:
            paths[memory_id] = path
    return paths


def _service(root: Path, cache: Path) -> MemoryService:
    return MemoryService(
        lambda: root,
        CANDIDATE_LIMIT_DEFAULT,
        CursorCodec.generate(),
        snapshot_directory=lambda: cache,
    )


def _first_hit(service: MemoryService, query: str) -> str | None:
    payload = service.recall({"query": query, "scope": "project"}).payload
    assert payload["status"] in ("ok", "no_matches"), payload
    return payload["memories"][0]["id"] if payload["memories"] else None


@pytest.mark.slow
@pytest.mark.usefixtures("an_hour_later")  # the records were written long before
def test_a_hundred_thousand_records_in_one_scope(
    tmp_path: Path, count_reads: dict[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "memory"
    cache = tmp_path / "cache"
    markers = _write_records(root)
    total = RECORDS + len(MARKERS)

    first = _service(root, cache)
    for memory_id, word in MARKERS.items():
        assert _first_hit(first, word) == memory_id
    page = first.list({"scope": "project", "page_size": 100}).payload
    assert page["page"]["total_count"] == total
    following = first.list({"scope": "project", "cursor": page["page"]["next_cursor"]}).payload
    assert following["page"]["number"] == 2
    assert {m["reference"]["id"] for m in page["memories"]}.isdisjoint(
        m["reference"]["id"] for m in following["memories"]
    )
    narrowed = first.list({"scope": "project", "namespace_id": "beacon"}).payload
    # Every fourth record, and one of the markers, lives in the second namespace.
    assert narrowed["page"]["total_count"] == RECORDS // len(NAMESPACES) + 1

    writes = MutationService(first, CANDIDATE_LIMIT_DEFAULT)
    remembered = writes.remember(
        {
            "scope": "project",
            "namespace": {"kind": "project", "id": "delta", "label": None},
            "collection": None,
            "kind": "decision",
            "language": "en",
            "title": "Scale",
            "content": "The wombat decision survives a restart.",
            "tags": ["scale"],
            "origin": "explicit_user_statement",
        }
    ).payload
    assert remembered["status"] == "remembered"
    assert _first_hit(first, "wombat") == remembered["reference"]["id"]
    assert first.current_index().save()

    # While no service runs: one marker edited by hand, another deleted.
    edited = markers["mem_" + "a" * 32]
    edited.write_text(edited.read_text().replace('"quokka"', '"quokka numbat"'))
    markers["mem_" + "b" * 32].unlink()

    caplog.set_level(logging.INFO, logger="mymcp.memory.index")
    second = _service(root, cache)
    before = count_reads["read"]
    index = second.current_index()
    index.refresh(Scope.PROJECT, recursive=True, candidate_limit=CANDIDATE_LIMIT_DEFAULT)
    # Started from the snapshot: every row it saved came back, and of the files only the
    # one edited by hand was read again.
    assert f"index_snapshot outcome=loaded rows={total + 1} " in caplog.text
    assert count_reads["read"] - before == 1
    assert _first_hit(second, "numbat") == "mem_" + "a" * 32
    assert _first_hit(second, "pangolin") is None
    assert _first_hit(second, "wombat") == remembered["reference"]["id"]
    listed = second.list({"scope": "project", "page_size": 1}).payload
    assert listed["page"]["total_count"] == total  # one deleted, one remembered
    assert len(index) == total
    selection = index.refresh(
        Scope.PROJECT, recursive=True, candidate_limit=CANDIDATE_LIMIT_DEFAULT
    )
    assert selection.candidates == total
