"""Durable writes: modes, symlinks, fingerprints, fsync failures, locking and clean logs."""

from __future__ import annotations

import json
import logging
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    LOCK_FILE_NAME,
    CursorCodec,
    ErrorCode,
    MemoryIndex,
    MemoryOperationError,
    MemoryService,
    MutationService,
    RecordWriter,
    file_digest,
    parse_record,
)

from .conftest import remember_args as shared_remember_args

REPO = Path(__file__).resolve().parents[4]


def remember_args(**overrides: Any) -> dict[str, Any]:
    defaults = {
        "title": "Consent boundary",
        "tags": ["consent"],
        "origin": "explicit_user_statement",
    }
    return shared_remember_args(**{**defaults, **overrides})


class Memory:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
        self.writes = MutationService(self.reads, 10_000)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        service = self.reads if tool == "inspect" else self.writes
        return dict(getattr(service, tool)(arguments).payload)

    def target(self, reference: dict[str, Any], revision: int) -> dict[str, Any]:
        return {"reference": reference, "expected_revision": revision}


def path_of(root: Path, reference: dict[str, Any]) -> Path:
    parts = [reference["scope"], reference["namespace_id"]]
    if reference["collection_id"]:
        parts.append(reference["collection_id"])
    return root.joinpath(*parts, reference["id"] + ".json")


@pytest.fixture
def memory(root: Path) -> Memory:
    return Memory(root)


@pytest.fixture
def reference(memory: Memory) -> dict[str, Any]:
    result = memory.call("remember", remember_args())
    assert result["status"] == "remembered"
    return dict(result["reference"])


@pytest.fixture(autouse=True)
def no_temp_files_left(tmp_path: Path) -> Iterator[None]:
    yield
    assert list(tmp_path.rglob("*.tmp")) == []


# --- modes and directories -----------------------------------------------------------------


def test_new_directories_and_files_are_private_even_with_an_open_umask(tmp_path: Path) -> None:
    root = tmp_path / "a" / "memory"
    previous = os.umask(0)
    try:
        result = Memory(root).call("remember", remember_args())
    finally:
        os.umask(previous)
    path = path_of(root, result["reference"])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    directory = path.parent
    while directory != tmp_path:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
        directory = directory.parent
    assert stat.S_IMODE((root / LOCK_FILE_NAME).stat().st_mode) == 0o600


def test_existing_directories_are_never_chmodded(root: Path) -> None:
    (root / "project" / "mnemosyne").mkdir(parents=True)
    os.chmod(root, 0o755)  # noqa: S103
    os.chmod(root / "project", 0o750)  # noqa: S103
    os.chmod(root / "project" / "mnemosyne", 0o711)  # noqa: S103
    Memory(root).call("remember", remember_args())
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "project").stat().st_mode) == 0o750
    assert stat.S_IMODE((root / "project" / "mnemosyne").stat().st_mode) == 0o711
    assert stat.S_IMODE((root / "project" / "mnemosyne" / "decisions").stat().st_mode) == 0o700


@pytest.mark.parametrize("link", ["project", "project/mnemosyne", "project/mnemosyne/decisions"])
def test_symlinked_components_are_never_written_through(
    root: Path, tmp_path: Path, link: str
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(elsewhere, target_is_directory=True)
    result = Memory(root).call("remember", remember_args())
    assert (result["status"], result["code"]) == ("storage_error", "memory_source_unavailable")
    assert list(elsewhere.iterdir()) == []


def test_symlinked_record_file_is_not_a_target(memory: Memory, reference: dict[str, Any]) -> None:
    path = path_of(memory.root, reference)
    outside = memory.root.parent / "outside.json"
    path.rename(outside)
    path.symlink_to(outside)
    before = outside.read_bytes()
    result = memory.call("archive", memory.target(reference, 1))
    assert result["code"] == "not_found"
    assert outside.read_bytes() == before


def test_symlinked_lock_file_is_refused(root: Path, tmp_path: Path) -> None:
    (root / LOCK_FILE_NAME).symlink_to(tmp_path / "planted")
    result = Memory(root).call("remember", remember_args())
    assert result["code"] == "memory_source_unavailable"
    assert not (tmp_path / "planted").exists()
    assert not (root / "project").exists()


# --- fingerprints ----------------------------------------------------------------------------


def _edit_after_lookup(monkeypatch: pytest.MonkeyPatch, path: Path, new_content: str) -> None:
    """Hand-edit the file right after the mutation read it (same revision, new bytes)."""
    original = MemoryIndex.lookup

    def lookup(self: MemoryIndex, *args: Any, **kwargs: Any) -> Any:
        found = original(self, *args, **kwargs)
        body = json.loads(path.read_text())
        body["content"] = new_content
        path.write_text(json.dumps(body, indent=2, ensure_ascii=False) + "\n")
        return found

    monkeypatch.setattr(MemoryIndex, "lookup", lookup)


@pytest.mark.parametrize("tool", ["revise", "archive"])
def test_hand_edit_between_read_and_replace_is_a_write_conflict(
    memory: Memory, reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    path = path_of(memory.root, reference)
    _edit_after_lookup(monkeypatch, path, "Edited by hand meanwhile.")
    arguments = memory.target(reference, 1)
    if tool == "revise":
        arguments.update(
            namespace_label=None, collection_label=None, title=None, content="New.", tags=[]
        )
    result = memory.call(tool, arguments)
    assert (result["status"], result["code"]) == ("conflict", "write_conflict")
    assert json.loads(path.read_text())["content"] == "Edited by hand meanwhile."
    monkeypatch.undo()
    assert memory.call("inspect", {"reference": reference})["memory"]["content"] == (
        "Edited by hand meanwhile."
    )


def test_hand_edit_before_delete_is_a_write_conflict(
    memory: Memory, reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory.call("archive", memory.target(reference, 1))
    path = path_of(memory.root, reference)
    _edit_after_lookup(monkeypatch, path, "Edited before forget.")
    result = memory.call("forget", memory.target(reference, 2))
    assert (result["status"], result["code"]) == ("conflict", "write_conflict")
    assert path.exists()


def test_writer_refuses_a_stale_fingerprint(memory: Memory, reference: dict[str, Any]) -> None:
    path = path_of(memory.root, reference)
    data = path.read_bytes()
    index = memory.reads.current_index()
    parts = ("project", "mnemosyne", "decisions", path.name)
    with pytest.raises(MemoryOperationError) as caught:
        RecordWriter(index).replace(parts, file_digest(b"other bytes"), data)
    assert caught.value.code is ErrorCode.WRITE_CONFLICT
    with pytest.raises(MemoryOperationError) as caught:
        RecordWriter(index).create(parts, data)
    assert caught.value.code is ErrorCode.WRITE_CONFLICT
    with pytest.raises(MemoryOperationError) as caught:
        RecordWriter(index).delete(parts, file_digest(b"other bytes"))
    assert caught.value.code is ErrorCode.WRITE_CONFLICT
    assert path.read_bytes() == data


# --- fsync failures --------------------------------------------------------------------------


def _fail_fsync(monkeypatch: pytest.MonkeyPatch, *, directories: bool) -> None:
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode) == directories:
            raise OSError(5, "simulated I/O error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


@pytest.mark.parametrize(
    ("tool", "setup", "state"),
    [
        ("archive", [], "archived"),
        ("restore", ["archive"], "active"),
        ("revise", [], "active"),
    ],
)
def test_directory_fsync_failure_makes_a_replacement_uncertain(
    memory: Memory,
    reference: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tool: str,
    setup: list[str],
    state: str,
) -> None:
    revision = 1
    for step in setup:
        memory.call(step, memory.target(reference, revision))
        revision += 1
    arguments = memory.target(reference, revision)
    if tool == "revise":
        arguments.update(
            namespace_label=None, collection_label=None, title=None, content="Revised.", tags=[]
        )
    _fail_fsync(monkeypatch, directories=True)
    result = memory.call(tool, arguments)
    assert result == {
        "status": "uncertain",
        "code": "replacement_outcome_uncertain",
        "message": ErrorCode.REPLACEMENT_OUTCOME_UNCERTAIN.message,
    }
    monkeypatch.undo()
    # The replacement is visible; inspecting the same reference tells the truth.
    inspected = memory.call("inspect", {"reference": reference})["memory"]
    assert inspected["lifecycle"] == {"state": state, "revision": revision + 1}


def test_directory_fsync_failure_makes_a_deletion_uncertain(
    memory: Memory, reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory.call("archive", memory.target(reference, 1))
    _fail_fsync(monkeypatch, directories=True)
    result = memory.call("forget", memory.target(reference, 2))
    assert (result["status"], result["code"]) == ("uncertain", "deletion_outcome_uncertain")
    monkeypatch.undo()
    assert memory.call("inspect", {"reference": reference})["code"] == "not_found"


def test_directory_fsync_failure_on_create_is_reported_and_retry_finds_the_record(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    (memory.root / "project" / "mnemosyne" / "decisions").mkdir(parents=True)
    _fail_fsync(monkeypatch, directories=True)
    result = memory.call("remember", remember_args())
    assert (result["status"], result["code"]) == ("storage_error", "memory_source_unavailable")
    monkeypatch.undo()
    assert memory.call("remember", remember_args())["status"] == "already_exists"


def test_file_fsync_failure_publishes_nothing(
    memory: Memory, reference: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = path_of(memory.root, reference)
    before = path.read_bytes()
    _fail_fsync(monkeypatch, directories=False)
    result = memory.call("archive", memory.target(reference, 1))
    assert (result["status"], result["code"]) == ("storage_error", "memory_source_unavailable")
    created = memory.call("remember", remember_args(title="Never written"))
    assert created["code"] == "memory_source_unavailable"
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == [path.name]


# --- concurrency -----------------------------------------------------------------------------


def test_threads_never_lose_an_update(memory: Memory, reference: dict[str, Any]) -> None:
    successes: list[int] = []
    failures: list[dict[str, Any]] = []

    def worker(number: int) -> None:
        done = 0
        for _ in range(200):
            if done == 10:
                break
            current = memory.call("inspect", {"reference": reference})["memory"]
            result = memory.call(
                "revise",
                {
                    **memory.target(reference, current["lifecycle"]["revision"]),
                    "namespace_label": None,
                    "collection_label": None,
                    "title": None,
                    "content": f"thread {number} revision {done}",
                    "tags": [],
                },
            )
            if result["status"] == "revised":
                done += 1
            elif result.get("code") != "revision_conflict":
                failures.append(result)
                return
        successes.append(done)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    final = memory.call("inspect", {"reference": reference})["memory"]
    assert final["lifecycle"]["revision"] == 1 + sum(successes)
    assert sum(successes) == 40


WORKER = r"""
import json, sys
from pathlib import Path
from mymcp.plugins.mnemosyne.memory import CursorCodec, MemoryService, MutationService

root, number, wanted = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
reference = json.loads(sys.argv[4])
reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
writes = MutationService(reads, 10_000)
done = attempts = 0
print("ready", flush=True)
sys.stdin.readline()  # start together
while done < wanted and attempts < wanted * 200:
    attempts += 1
    inspected = reads.inspect({"reference": reference}).payload
    if inspected["status"] != "ok":
        print(json.dumps({"error": inspected}), flush=True)
        sys.exit(1)
    life = inspected["memory"]["lifecycle"]
    target = {"reference": reference, "expected_revision": life["revision"]}
    if number % 2:
        tool = writes.restore if life["state"] == "archived" else writes.archive
        result = tool(target).payload
    else:
        result = writes.revise({
            **target, "namespace_label": None, "collection_label": None, "title": None,
            "content": f"process {number} revision {done}", "tags": [],
        }).payload
    if result["status"] in ("archived", "restored", "revised"):
        done += 1
    elif result.get("code") != "revision_conflict":
        print(json.dumps({"error": result}), flush=True)
        sys.exit(1)
print(json.dumps({"done": done, "attempts": attempts}), flush=True)
"""


def test_processes_sharing_a_root_never_lose_an_update(
    memory: Memory, reference: dict[str, Any]
) -> None:
    wanted = 25
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(memory.root),
                str(n),
                str(wanted),
                json.dumps(reference),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=REPO,
        )
        for n in range(4)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    reports = []
    for worker in workers:
        out, _ = worker.communicate(timeout=60)
        reports.append(json.loads(out.strip().splitlines()[-1]))
        assert worker.returncode == 0, reports[-1]
    assert [report["done"] for report in reports] == [wanted] * 4
    path = path_of(memory.root, reference)
    record = parse_record(path.read_bytes())  # never torn: always a complete record
    assert record.lifecycle.revision == 1 + 4 * wanted  # type: ignore[union-attr]
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


# --- logging -------------------------------------------------------------------------------

MARKER = "zqxmarker"


def test_mutation_logs_are_one_content_free_event_per_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / f"{MARKER}-root"
    memory = Memory(root)
    caplog.set_level(logging.DEBUG)
    marked = remember_args(
        namespace={"kind": "project", "id": f"{MARKER}-ns", "label": f"{MARKER} label"},
        collection={"id": f"{MARKER}-col", "label": f"{MARKER} col"},
        title=f"{MARKER} title",
        content=f"{MARKER} content",
        tags=[f"{MARKER} tag"],
        language="en",
    )
    calls: list[tuple[str, dict[str, Any]]] = [("remember", marked), ("remember", marked)]
    created = memory.call("remember", {**marked, "title": f"{MARKER} second"})
    reference = created["reference"]
    revise = {
        **memory.target(reference, 1),
        "namespace_label": f"{MARKER} n",
        "collection_label": f"{MARKER} c",
        "title": None,
        "content": f"{MARKER} revised",
        "tags": [MARKER],
    }
    calls += [
        ("revise", revise),
        ("revise", revise),  # stale now
        ("archive", memory.target(reference, 2)),
        ("restore", memory.target(reference, 3)),
        ("archive", memory.target(reference, 4)),
        ("forget", memory.target(reference, 5)),
        ("forget", memory.target(reference, 5)),
        ("remember", {**marked, "content": f"{MARKER} password={MARKER}1234"}),
        ("remember", {**marked, "scope": MARKER}),
        ("revise", {**revise, "reference": {**reference, "id": MARKER}}),
    ]
    caplog.clear()
    for tool, arguments in calls:
        memory.call(tool, arguments)
    records = [r for r in caplog.records if r.name.startswith("mcp.memory_")]
    assert len(records) == len(calls)
    assert [r.name for r in records] == [f"mcp.memory_{tool}" for tool, _ in calls]
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert MARKER not in text
    assert str(tmp_path) not in text
    assert reference["id"] not in "\n".join(
        r.getMessage() for r in records if r.name != "mcp.memory_remember"
    )
    messages = [r.getMessage() for r in records]
    assert messages[0].startswith("event=memory_remember outcome=remembered ")
    assert "namespace_kind=project memory_kind=decision collection_present=true" in messages[0]
    assert "origin=explicit_user_statement memory_id=mem_" in messages[0]
    assert "lifecycle_state=active revision=1" in messages[0]
    assert messages[1].startswith("event=memory_remember outcome=already_exists")
    assert messages[2] == (
        "event=memory_revise outcome=revised schema_version=2 scope=project "
        "lifecycle_state=active revision=2"
    )
    assert messages[3] == (
        "event=memory_revise outcome=conflict code=revision_conflict schema_version=2 scope=project"
    )
    assert messages[7] == "event=memory_forget outcome=forgotten schema_version=2 scope=project"
    assert messages[9].startswith("event=memory_remember outcome=refused code=disallowed_content ")
    assert messages[9].endswith("field=content")
    assert messages[10] == (
        "event=memory_remember outcome=invalid_request code=invalid_scope field=scope "
        "reason=not_allowed"
    )
