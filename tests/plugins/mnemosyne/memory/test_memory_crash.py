"""Crash safety: a writer process SIGKILLed at varied points never leaves a torn record.

A child process loops remember/revise on a temporary root and reports each step of a
write (its ``os`` write, sync, link, replace... calls are wrapped to print a line) and
each finished operation on a pipe. The parent waits for a bounded number of those lines (no sleeps),
kills the child with SIGKILL, and then checks the tree: every ``*.json`` file is a
complete, canonical record at its own path; list, recall and inspect show exactly those
records and never a temporary file, whether the temp file is a real leftover of the
killed write or one planted by the test. Leftover temp files hold a record's full text,
so a freshly started index sweeps them (the writer lock is free once the writer died),
and ``forget`` removes every one beside the record it deletes.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    Lifecycle,
    MemoryRecordV2,
    MemoryService,
    Namespace,
    Provenance,
    Scope,
    V2Reference,
    parse_record,
    reference_of,
    reference_parts,
    serialize_record,
)

REPO = Path(__file__).resolve().parents[4]
ROUNDS = 15
LINE_TIMEOUT = 20.0
LEFTOVER_WORD = "zqxleftover"

CHILD = r"""
import functools, json, os, sys
from pathlib import Path
from mymcp.plugins.mnemosyne.memory import CursorCodec, MemoryService, MutationService

def reporting(call):
    # One progress line after each step of a write, so the parent can kill the child
    # right after any of them: temp written, temp synced, linked, replaced, unlinked...
    @functools.wraps(call)
    def step(*args, **kwargs):
        result = call(*args, **kwargs)
        print("step", flush=True)
        return result
    return step

for name in ("mkdir", "write", "fsync", "link", "replace", "unlink"):
    setattr(os, name, reporting(getattr(os, name)))

root, round_number = Path(sys.argv[1]), int(sys.argv[2])
reads = MemoryService(lambda: root, 100_000, CursorCodec.generate())
writes = MutationService(reads, 100_000)
print("ready", flush=True)
note = 0
while True:
    note += 1
    # A new namespace each round and a new collection every other note, so kills also
    # land while directories are being created.
    collection = None if note % 2 else {"id": f"c{note}", "label": None}
    result = writes.remember({
        "scope": "project",
        "namespace": {"kind": "project", "id": f"round{round_number}", "label": None},
        "collection": collection,
        "kind": "decision",
        "language": "en",
        "title": f"crash note {note}",
        "content": f"crash round {round_number} note {note} " + "padding " * 200,
        "tags": ["crash"],
        "origin": "explicit_user_statement",
    }).payload
    if result["status"] != "remembered":
        print("error " + json.dumps(result), flush=True)
        sys.exit(1)
    print("remembered", flush=True)
    target = {"reference": result["reference"], "expected_revision": 1}
    for step in range(3):
        result = writes.revise({
            **target,
            "namespace_label": f"Round {step}",
            "collection_label": None if collection is None else f"Label {step}",
            "title": f"crash note {note} revision {step}",
            "content": f"crash round {round_number} note {note} step {step} " + "more " * 300,
            "tags": ["crash", f"step {step}"],
        }).payload
        if result["status"] != "revised":
            print("error " + json.dumps(result), flush=True)
            sys.exit(1)
        target["expected_revision"] += 1
        print("revised", flush=True)
"""


def _wait_for_lines(process: subprocess.Popen[bytes], wanted: int) -> list[str]:
    """Read until ``wanted`` complete lines arrived (bounded by a deadline, no sleeps)."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    buffer = b""
    deadline = time.monotonic() + LINE_TIMEOUT
    while buffer.count(b"\n") < wanted:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"child stalled after {len(buffer.splitlines())} lines"
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        assert chunk, f"child exited early: {buffer.decode()!r}"
        buffer += chunk
    lines = buffer.decode().splitlines()
    assert not any(line.startswith("error") for line in lines), lines
    return lines


def _plant_leftover(root: Path, directory: Path) -> str:
    """A temp file named like the writer's, holding a valid record no one may list."""
    memory_id = "mem_" + uuid.uuid4().hex
    scope, namespace, *collection = directory.relative_to(root).parts
    record = MemoryRecordV2(
        id=memory_id,
        scope=Scope(scope),
        namespace=Namespace("project", namespace, None),
        collection=None,
        kind="decision",
        language="en",
        title=f"{LEFTOVER_WORD} title",
        content=f"{LEFTOVER_WORD} crash content",
        tags=("crash",),
        provenance=Provenance("explicit_user_statement", "memory_remember"),
        lifecycle=Lifecycle("active", 1),
        created_at="2026-01-01T00:00:00Z",
        updated_at="2026-01-01T00:00:00Z",
    )
    assert not collection  # planted in a collectionless namespace directory
    (directory / f".{memory_id}.{uuid.uuid4().hex[:16]}.tmp").write_bytes(serialize_record(record))
    return memory_id


def _records_on_disk(root: Path) -> dict[str, dict[str, Any]]:
    """Reference JSON -> public record of every ``*.json`` file; each must be complete."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.json")):
        data = path.read_bytes()
        record = parse_record(data)  # raises on a torn or partial file
        assert isinstance(record, MemoryRecordV2)
        assert serialize_record(record) == data, path  # complete and canonical
        reference = reference_of(record, record.scope)
        assert isinstance(reference, V2Reference)
        assert reference_parts(reference) == path.relative_to(root).parts
        found[json.dumps(reference.to_json(), sort_keys=True)] = record.public_json()
    return found


def _listed(service: MemoryService) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    payload = service.list({"scope": "project", "page_size": 100}).payload
    while True:
        assert payload["status"] == "ok", payload
        items += payload["memories"]
        cursor = payload["page"]["next_cursor"]
        if cursor is None:
            return items
        payload = service.list({"scope": "project", "cursor": cursor}).payload


def _check_tree(root: Path, services: list[MemoryService], leftovers: list[str]) -> None:
    on_disk = _records_on_disk(root)
    for service in services:
        listed = _listed(service)
        keys = [json.dumps(item["reference"], sort_keys=True) for item in listed]
        assert sorted(keys) == sorted(on_disk), "listing differs from the files on disk"
        listed_ids = {item["reference"]["id"] for item in listed}
        assert not listed_ids & set(leftovers)
        for item in listed:
            inspected = service.inspect({"reference": item["reference"]}).payload
            assert inspected["status"] == "ok", inspected
            key = json.dumps(item["reference"], sort_keys=True)
            assert inspected["memory"] == {"reference": item["reference"], **on_disk[key]}
        recalled = service.recall({"query": "crash note", "scope": "project"}).payload
        assert recalled["status"] == ("ok" if on_disk else "no_matches"), recalled
        assert len(recalled["memories"]) == min(5, len(on_disk))
        assert {m["id"] for m in recalled["memories"]} <= listed_ids
        hidden = service.recall({"query": LEFTOVER_WORD, "scope": "project"}).payload
        assert hidden == {"status": "no_matches", "memories": []}


def test_sigkilled_writer_never_leaves_a_torn_or_listed_temp_file(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    # One service lives across every round (its index must follow the other process's
    # writes); another is fresh each round.
    long_lived = MemoryService(lambda: root, 100_000, CursorCodec.generate())
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    leftovers: list[str] = []
    for number in range(ROUNDS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(number)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=environment,
            cwd=REPO,
        )
        try:
            # "ready" plus 0..60 progress lines: kills land after every step of
            # remember and revise (directory creation, temp write and sync, link,
            # replace, directory sync, temp removal) in some round.
            _wait_for_lines(child, 1 + (number * 17) % 61)
        finally:
            child.kill()
            child.wait(timeout=LINE_TIMEOUT)
            assert child.stdout is not None
            child.stdout.close()
        namespace_directory = root / "project" / f"round{number}"
        if namespace_directory.is_dir():
            leftovers.append(_plant_leftover(root, namespace_directory))
        assert not leftovers or list(root.rglob(".*.tmp"))
        fresh = MemoryService(lambda: root, 100_000, CursorCodec.generate())
        _check_tree(root, [long_lived, fresh], leftovers)
        # The fresh index swept every temp file at its start: the writer was dead.
        assert list(root.rglob(".*.tmp")) == []
    # The kills really interrupted work: records exist, and temp files were planted.
    assert len(_records_on_disk(root)) >= ROUNDS // 2
    assert len(leftovers) >= ROUNDS // 2


def test_forget_removes_every_file_holding_the_record_text(tmp_path: Path) -> None:
    root = tmp_path / "memory"
    # It walked before the writer ran and nothing walks again before forget: only forget
    # can remove the temp file planted below.
    reads = MemoryService(lambda: root, 100_000, CursorCodec.generate())
    reads.list({"scope": "project"})
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root), "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=environment,
        cwd=REPO,
    )
    try:
        lines = _wait_for_lines(child, 40)  # the first note is remembered and revised
    finally:
        child.kill()
        child.wait(timeout=LINE_TIMEOUT)
        assert child.stdout is not None
        child.stdout.close()
    assert "remembered" in lines
    from mymcp.plugins.mnemosyne.memory import MutationService

    writes = MutationService(reads, 100_000)
    directory = root / "project" / "round0"
    (path,) = [p for p in directory.glob("*.json")][:1]
    record = parse_record(path.read_bytes())
    assert isinstance(record, MemoryRecordV2)
    # Whatever the kill left, a revision interrupted right before its rename leaves the
    # record's text in a temp file beside it.
    (directory / f".{record.id}.{uuid.uuid4().hex[:16]}.tmp").write_bytes(path.read_bytes())
    text = json.dumps(record.content, ensure_ascii=False)[1:-1]  # as the file spells it
    reference = reference_of(record, record.scope).to_json()
    archived = writes.archive(
        {"reference": reference, "expected_revision": record.lifecycle.revision}
    ).payload
    assert archived["status"] == "archived", archived
    forgotten = writes.forget(
        {"reference": reference, "expected_revision": archived["lifecycle"]["revision"]}
    ).payload
    assert forgotten["status"] == "forgotten", forgotten
    holding = [p for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]
    assert holding == []
    assert list(directory.glob(f".{record.id}.*")) == []
