"""The persisted index snapshot: a head start that never overrides the files.

A snapshot is only used where a fresh stat of a file matches its saved stamp. Edits made
while no server ran are seen on the first call; a snapshot that is corrupt, of another
root, of another format or inconsistent inside is ignored and replaced; writers working
during a load, and two processes saving at once, never leave a wrong answer behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import weakref
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    ErrorCode,
    MemoryIndex,
    MemoryOperationError,
    MemoryService,
    MutationService,
    Scope,
    file_id,
    file_key,
)
from mymcp.plugins.mnemosyne.memory import index as index_module
from mymcp.plugins.mnemosyne.memory import snapshot as snapshot_module

from .conftest import scan

# The files of a snapshot's root were written long before the restart that loads it.
pytestmark = pytest.mark.usefixtures("an_hour_later")

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "mymcp"


def _fill(write: Writer, v1: Factory, v2: Factory, count: int = 12) -> None:
    for number in range(count):
        write(v2(namespace=f"ns{number % 3}", content=f"note number {number} about kiwis"))
    write(v1(memory_id="legacy-a"), "project/old/a.json")
    write(b"{broken", "project/old/broken.json")


def _saved(root: Path, cache: Path) -> MemoryIndex:
    index = MemoryIndex(root, snapshot_directory=cache)
    scan(index)
    assert index.save()
    return index


def _state(index: MemoryIndex) -> tuple[set[str], list[str], int]:
    """What the services would show: ids, recall order for a query, listed count."""
    everything = scan(index)
    ranked = [
        item.record.id for item, _ in index.recall(Scope.PROJECT, "kiwis note", frozenset(), 5)
    ]
    selection = index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    listed = index.inventory(selection, include_legacy=True).count
    return everything.ids, ranked, listed


State = tuple[set[str], list[str], int]


@pytest.fixture
def expected(root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory) -> State:
    """A filled root whose snapshot was just saved, and what the services show of it."""
    _fill(write, v1, v2)
    return _state(_saved(root, cache))


@pytest.fixture
def index(root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory) -> MemoryIndex:
    """A filled root and an index (keeping its snapshot in the cache) that walked it."""
    _fill(write, v1, v2)
    walked = MemoryIndex(root, snapshot_directory=cache)
    scan(walked)
    return walked


def test_a_matching_snapshot_spares_every_read(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, count_reads: dict[str, int]
) -> None:
    _fill(write, v1, v2)
    first = _saved(root, cache)
    expected = _state(first)
    path = snapshot_module.snapshot_path(cache, root)
    assert path.is_file()
    assert path.stat().st_mode & 0o777 == 0o600
    before = dict(count_reads)
    warm = MemoryIndex(root, snapshot_directory=cache)
    warm.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    # Every file was stat'ed, none re-read: the saved stamps all matched.
    assert count_reads == before
    assert len(warm) == len(first)
    assert _state(warm) == expected


def test_edits_made_while_no_server_ran_are_seen_on_the_first_call(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, count_reads: dict[str, int]
) -> None:
    _fill(write, v1, v2)
    body = v2(namespace="ns0", content="a rare pomegranate")
    path = write(body)
    _saved(root, cache)
    # While "down": an edit of the same size, an addition, a deletion, a repaired file.
    edited = {**body, "content": "a rare pomegranatE"}
    write(edited)
    added = v2(namespace="ns1", content="a rare quince")
    write(added)
    deleted = next(p for p in (root / "project" / "ns2").glob("*.json"))
    deleted.unlink()
    write(v1(memory_id="fixed"), "project/old/broken.json")
    before = dict(count_reads)
    warm = MemoryIndex(root, snapshot_directory=cache)
    warm.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    # Only the changed files were read again (edited, added, repaired).
    assert count_reads["read"] - before["read"] == 3
    ids, _, listed = _state(warm)
    fresh_ids, _, fresh_listed = _state(MemoryIndex(root, watch=False))
    assert ids == fresh_ids
    assert listed == fresh_listed
    assert {body["id"], added["id"], "fixed"} <= ids
    assert deleted.stem not in ids
    found = warm.recall(Scope.PROJECT, "pomegranate", frozenset(), 5)
    assert [item.record.content for item, _ in found] == ["a rare pomegranatE"]
    assert path.exists()


@pytest.mark.parametrize(
    "damage",
    ["flip-payload", "flip-header", "truncate", "empty", "garbage", "magic"],
)
def test_a_corrupt_snapshot_is_ignored_and_replaced(
    root: Path,
    expected: State,
    cache: Path,
    count_reads: dict[str, int],
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = snapshot_module.snapshot_path(cache, root)
    data = bytearray(path.read_bytes())
    if damage == "flip-payload":
        data[-20] ^= 0xFF
    elif damage == "flip-header":
        data[len(snapshot_module.MAGIC) + 8] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    elif damage == "garbage":
        data = bytearray(os.urandom(4096))
    else:
        data[0:5] = b"XXXXX"
    path.write_bytes(bytes(data))
    before = dict(count_reads)
    caplog.set_level("INFO", logger="mymcp.memory.index")
    index = MemoryIndex(root, snapshot_directory=cache)
    index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    assert count_reads["read"] - before["read"] == len(index)  # rebuilt from the files
    assert _state(index) == expected
    if damage != "empty":
        assert "index_snapshot outcome=ignored" in caplog.text
    # The next save replaces it with a good one.
    assert index.save()
    again = dict(count_reads)
    warm = MemoryIndex(root, snapshot_directory=cache)
    warm.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    assert count_reads == again
    assert _state(warm) == expected


def _rewrite(
    path: Path, change: Callable[[dict[str, Any], bytes], tuple[dict[str, Any], bytes]]
) -> None:
    """Edit a snapshot's header or payload and give it a valid checksum again."""
    data = path.read_bytes()
    header, payload = snapshot_module.parse_container(data)
    header, payload = change(header, payload)
    header["checksum"] = zlib.crc32(payload)
    encoded = json.dumps(header).encode()
    path.write_bytes(
        snapshot_module.MAGIC + snapshot_module.HEADER.pack(len(encoded)) + encoded + payload
    )


@pytest.mark.parametrize("mismatch", ["format", "analysis", "root", "inode"])
def test_a_foreign_snapshot_is_ignored(
    root: Path,
    expected: State,
    cache: Path,
    mismatch: str,
    count_reads: dict[str, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    path = snapshot_module.snapshot_path(cache, root)

    def change(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        if mismatch == "format":
            header["format"] = 99
        elif mismatch == "analysis":
            header["versions"]["analysis"] += 1
        elif mismatch == "root":
            header["root"] = "/somewhere/else"
        else:
            header["inode"] += 1
        return header, payload

    _rewrite(path, change)
    caplog.set_level("INFO", logger="mymcp.memory.index")
    before = dict(count_reads)
    index = MemoryIndex(root, snapshot_directory=cache)
    index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    assert count_reads["read"] - before["read"] == len(index)  # nothing was taken from it
    assert "index_snapshot outcome=ignored reason=foreign" in caplog.text
    assert _state(index) == expected


def test_a_snapshot_of_a_recreated_root_is_ignored(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, tmp_path: Path
) -> None:
    _fill(write, v1, v2)
    _saved(root, cache)
    # Same path, a different directory: its files are other files.
    moved = tmp_path / "moved"
    root.rename(moved)
    root.mkdir()
    write(v2(namespace="ns0", content="only this one"))
    index = MemoryIndex(root, snapshot_directory=cache)
    assert len(scan(index).ids) == 1
    shutil.rmtree(moved)


def test_the_snapshot_of_a_removed_root_is_foreign_not_corrupt(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, caplog: Any
) -> None:
    _fill(write, v1, v2)
    _saved(root, cache)
    shutil.rmtree(root)
    caplog.set_level("INFO")
    assert not scan(MemoryIndex(root, snapshot_directory=cache)).ids
    outcomes = [r.getMessage() for r in caplog.records if "index_snapshot" in r.getMessage()]
    assert "index_snapshot outcome=ignored reason=corrupt" not in outcomes
    assert all(r.levelname != "WARNING" for r in caplog.records if "index_snapshot" in r.msg)


@pytest.mark.parametrize("section", ["row_dir", "orders/project", "terms/term_ids", "states"])
def test_a_snapshot_that_disagrees_with_itself_is_ignored(
    root: Path, expected: State, cache: Path, section: str
) -> None:
    path = snapshot_module.snapshot_path(cache, root)

    def change(header: dict[str, Any], payload: bytes) -> tuple[dict[str, Any], bytes]:
        at = 0
        for name, _kind, length in header["sections"]:
            if name == section:
                # Every byte of the section becomes 0xFF: ids and states out of range.
                return header, payload[:at] + b"\xff" * length + payload[at + length :]
            at += length
        raise AssertionError(section)

    _rewrite(path, change)
    index = MemoryIndex(root, snapshot_directory=cache)
    assert _state(index) == expected


def test_a_snapshot_others_may_write_is_not_trusted(
    root: Path, expected: State, cache: Path, count_reads: dict[str, int]
) -> None:
    snapshot_module.snapshot_path(cache, root).chmod(0o666)
    before = dict(count_reads)
    index = MemoryIndex(root, snapshot_directory=cache)
    index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    assert count_reads["read"] - before["read"] == len(index)
    assert _state(index) == expected


def test_files_changed_while_the_snapshot_loads_are_seen(
    root: Path,
    cache: Path,
    write: Writer,
    v1: Factory,
    v2: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(write, v1, v2)
    body = v2(namespace="ns0", content="before the load")
    write(body)
    _saved(root, cache)
    real_restore = MemoryIndex._restore

    def restore_while_a_writer_works(*args: Any) -> None:
        real_restore(*args)
        # Another process writes between the snapshot load and the first walk.
        write({**body, "content": "written during the load"})
        write(v2(namespace="ns2", content="created during the load"))

    monkeypatch.setattr(MemoryIndex, "_restore", restore_while_a_writer_works)
    index = MemoryIndex(root, snapshot_directory=cache)
    contents = {item.record.content for item in scan(index).records}
    assert "written during the load" in contents
    assert "created during the load" in contents
    assert "before the load" not in contents


def test_two_writers_saving_at_once_never_leave_a_torn_snapshot(
    root: Path, expected: State, cache: Path
) -> None:
    first = MemoryIndex(root, snapshot_directory=cache)
    second = MemoryIndex(root, snapshot_directory=cache)
    scan(first)
    scan(second)
    go = threading.Event()
    failures: list[BaseException] = []

    def save_repeatedly(index: MemoryIndex) -> None:
        go.wait()
        try:
            for _ in range(15):
                assert index.save()
        except BaseException as exc:  # reported below
            failures.append(exc)

    savers = [threading.Thread(target=save_repeatedly, args=(i,)) for i in (first, second)]
    for saver in savers:
        saver.start()
    go.set()
    loads = 0
    while any(saver.is_alive() for saver in savers) or loads < 3:
        reader = MemoryIndex(root, snapshot_directory=cache)
        assert _state(reader) == expected
        loads += 1
    for saver in savers:
        saver.join()
    assert failures == []
    leftovers = [p.name for p in cache.iterdir() if p.name.endswith(".tmp")]
    assert leftovers == []


def test_the_service_keeps_its_snapshot_and_starts_warm(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, count_reads: dict[str, int]
) -> None:
    _fill(write, v1, v2)

    def service() -> MemoryService:
        return MemoryService(
            lambda: root, 10_000, CursorCodec.generate(), snapshot_directory=lambda: cache
        )

    first = service()
    answer = first.recall({"query": "kiwis", "scope": "project"}).payload
    assert answer["status"] == "ok"
    assert first.current_index().save()
    before = dict(count_reads)
    second = service()
    assert second.recall({"query": "kiwis", "scope": "project"}).payload == answer
    # Only the recalled records' files were read, for their content.
    assert count_reads["read"] - before["read"] == len(answer["memories"])


def test_forget_leaves_no_copy_of_the_record_in_the_cache(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory
) -> None:
    _fill(write, v1, v2)
    reads = MemoryService(
        lambda: root, 10_000, CursorCodec.generate(), snapshot_directory=lambda: cache
    )
    writes = MutationService(reads, 10_000)
    remembered = writes.remember(
        {
            "scope": "project",
            "namespace": {"kind": "project", "id": "ns0", "label": None},
            "collection": None,
            "kind": "decision",
            "language": "en",
            "title": "Quokka sightings",
            "content": "zqxforgotten quokkas were seen near the kiwis",
            "tags": ["zqxtag"],
            "origin": "explicit_user_statement",
        }
    ).payload
    assert remembered["status"] == "remembered", remembered
    index = reads.current_index()
    assert index.save()
    path = snapshot_module.snapshot_path(cache, root)
    traces = (b"quokka", b"zqxforgotten", b"zqxtag")
    assert all(trace in path.read_bytes().lower() for trace in traces)  # it held them
    # A save interrupted in a process that no longer runs left a full copy too.
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = path.with_name(f".{path.name}.{int(ended.stdout)}.1.tmp")
    stale.write_bytes(path.read_bytes())
    # A name whose "pid" `str.isdigit` admits but `int` refuses is no temp of a save.
    odd = path.with_name(f".{path.name}.\u00b2.1.tmp")
    odd.write_bytes(b"not a snapshot")
    _forget(writes, remembered["reference"])

    def holding() -> list[str]:
        return [
            p.name
            for p in cache.iterdir()
            if any(trace in p.read_bytes().lower() for trace in traces)
        ]

    assert holding() == []
    assert odd.read_bytes() == b"not a snapshot"
    # The next snapshot has every other record and no trace of the forgotten one.
    assert index.save()
    assert path.is_file()
    assert holding() == []
    assert _state(MemoryIndex(root, snapshot_directory=cache)) == _state(MemoryIndex(root))


def _remember(writes: MutationService, title: str, content: str, scope: str = "project") -> Any:
    namespace_kind, kind = {
        "project": ("project", "decision"),
        "knowledge": ("topic", "reference"),
    }[scope]
    remembered = writes.remember(
        {
            "scope": scope,
            "namespace": {"kind": namespace_kind, "id": "ns0", "label": None},
            "collection": None,
            "kind": kind,
            "language": "en",
            "title": title,
            "content": content,
            "tags": [],
            "origin": "explicit_user_statement",
        }
    ).payload
    assert remembered["status"] == "remembered", remembered
    return remembered


def _forget(writes: MutationService, reference: Any) -> None:
    """Archive, then forget, a memory just remembered (revision 1)."""
    archived = writes.archive({"reference": reference, "expected_revision": 1}).payload
    forgotten = writes.forget(
        {"reference": reference, "expected_revision": archived["lifecycle"]["revision"]}
    ).payload
    assert forgotten["status"] == "forgotten", forgotten


def _server(root: Path, cache: Path) -> tuple[MemoryService, MutationService]:
    """One server's reads and writes on `root`, keeping its snapshot in `cache`."""
    reads = MemoryService(
        lambda: root, 10_000, CursorCodec.generate(), snapshot_directory=lambda: cache
    )
    return reads, MutationService(reads, 10_000)


def test_a_forget_on_a_full_cache_disk_still_removes_the_copy(
    root: Path,
    cache: Path,
    write: Writer,
    v1: Factory,
    v2: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(write, v1, v2)
    index = _saved(root, cache)
    path = snapshot_module.snapshot_path(cache, root)
    assert path.is_file()

    def disk_full(directory: Path, forgotten_root: Path) -> str:
        raise OSError(28, "No space left on device")  # a write fails; an unlink does not

    monkeypatch.setattr(snapshot_module, "mark_forgotten", disk_full)
    with pytest.raises(MemoryOperationError) as caught:
        index.drop_snapshot()
    # Other processes could not be told, so the outcome is uncertain; this process's
    # copy is gone all the same.
    assert caught.value.code is ErrorCode.DELETION_OUTCOME_UNCERTAIN
    assert not path.exists()


def test_a_forget_whose_snapshot_cannot_be_removed_is_uncertain(
    root: Path,
    cache: Path,
    write: Writer,
    v1: Factory,
    v2: Factory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(write, v1, v2)
    index = _saved(root, cache)

    def unreadable(directory: Path, forgotten_root: Path) -> None:
        raise PermissionError(13, "Permission denied")  # a directory this user cannot open

    monkeypatch.setattr(snapshot_module, "remove_snapshot", unreadable)
    with pytest.raises(MemoryOperationError) as caught:
        index.drop_snapshot()
    assert caught.value.code is ErrorCode.DELETION_OUTCOME_UNCERTAIN


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_forget_where_no_snapshot_can_be_kept_is_certain(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, v2: Factory, where: str
) -> None:
    """No directory can be made there, so no snapshot can hold the record and no other
    process can save one: nothing is uncertain about the forget."""
    _fill(write, v1, v2)
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    cache = blocker if where == "a file" else blocker / "mymcp"
    index = MemoryIndex(root, snapshot_directory=cache)
    scan(index)
    index.drop_snapshot()  # no deletion_outcome_uncertain
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("watch", [True, False], ids=["watching", "walking"])
def test_a_record_forgotten_by_another_process_is_never_saved_again(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, watch: bool
) -> None:
    # Two servers share the root and the cache, as two processes on one machine do; the
    # second one knows the record, and saves after the first one forgot it.
    _fill(write, v1, v2)
    (reads_a, writes_a), (reads_b, writes_b) = _server(root, cache), _server(root, cache)
    for reads in (reads_a, reads_b):
        if not watch:
            reads.current_index()._drop_watcher()
    remembered = _remember(writes_a, "Zanzibarquux title", "zqxforgotten quokkas")
    recalled = reads_b.recall({"query": "zanzibarquux", "scope": "project"}).payload
    assert [m["title"] for m in recalled["memories"]] == ["Zanzibarquux title"]
    reference = remembered["reference"]
    archived = writes_a.archive({"reference": reference, "expected_revision": 1}).payload
    _remember(writes_b, "Unrelated", "something else entirely", scope="knowledge")
    forgotten = writes_a.forget(
        {"reference": reference, "expected_revision": archived["lifecycle"]["revision"]}
    ).payload
    assert forgotten["status"] == "forgotten", forgotten
    assert reads_b.current_index().save()  # B's timed save, or its save at exit
    path = snapshot_module.snapshot_path(cache, root)
    assert b"zanzibarquux" not in path.read_bytes().lower()
    assert b"unrelated" in path.read_bytes().lower()  # B's own change is kept
    # And a server started from it sees exactly the files.
    assert _state(MemoryIndex(root, snapshot_directory=cache)) == _state(MemoryIndex(root))


@pytest.mark.parametrize("leaving", ["exit_handler", "service_closed"])
def test_a_server_with_its_own_cache_drops_a_record_forgotten_meanwhile_when_it_leaves(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, v2: Factory, leaving: str
) -> None:
    # Two servers share the root but not the cache. B read the record, saved, and then
    # served nothing while A forgot it: when B leaves, its snapshot must not keep it.
    _fill(write, v1, v2)
    caches = tmp_path / "cache-a", tmp_path / "cache-b"
    (_, writes_a), (reads_b, _) = _server(root, caches[0]), _server(root, caches[1])
    remembered = _remember(writes_a, "Zanzibarquux title", "zqxforgotten quokkas")
    recalled = reads_b.recall({"query": "zanzibarquux", "scope": "project"}).payload
    assert [m["title"] for m in recalled["memories"]] == ["Zanzibarquux title"]
    index_b = reads_b.current_index()
    assert index_b.save()
    path_b = snapshot_module.snapshot_path(caches[1], root)
    assert b"zanzibarquux" in path_b.read_bytes().lower()
    _forget(writes_a, remembered["reference"])
    if leaving == "exit_handler":
        index_module._save_at_exit(weakref.ref(index_b))
    else:  # a stopping server closes its service: its index may be gone before exit
        reads_b.close()
    assert not path_b.exists() or b"zanzibarquux" not in path_b.read_bytes().lower()
    assert _state(MemoryIndex(root, snapshot_directory=caches[1])) == _state(MemoryIndex(root))


def test_every_spelling_of_the_root_keeps_one_snapshot(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, tmp_path: Path
) -> None:
    _fill(write, v1, v2)
    link = tmp_path / "through-a-link"
    link.symlink_to(root)
    assert snapshot_module.snapshot_path(cache, link) == snapshot_module.snapshot_path(cache, root)
    _saved(link, cache)
    assert _state(MemoryIndex(root, snapshot_directory=cache)) == _state(MemoryIndex(root))
    assert sorted(p.name for p in cache.iterdir()) == [
        "memory-file-key",  # the key of logged file ids: the walks met a broken file
        snapshot_module.snapshot_path(cache, root).name,
    ]


def test_the_first_save_of_a_process_deletes_the_snapshots_of_roots_that_are_gone(
    root: Path,
    cache: Path,
    write: Writer,
    v1: Factory,
    v2: Factory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(write, v1, v2)
    removed, recreated, kept = tmp_path / "removed", tmp_path / "recreated", tmp_path / "kept"
    for other in (removed, recreated, kept):
        shutil.copytree(root, other)
        _saved(other, cache).drop_snapshot()  # as a forget does: it leaves a mark
        _saved(other, cache)
    paths = {p: snapshot_module.snapshot_path(cache, p) for p in (removed, recreated, kept)}
    marks = {p: path.with_suffix(".forgotten") for p, path in paths.items()}
    assert all(path.is_file() for path in [*paths.values(), *marks.values()])
    # A file of the snapshot's name that is no snapshot, and a file of another name.
    unreadable = cache / f"memory-index-{'0' * 24}.bin"
    unreadable.write_bytes(b"not a snapshot")
    unreadable.chmod(0o600)
    stranger = cache / "notes.txt"
    stranger.write_text("kept")
    # An interrupted save of a removed root, by a process that no longer runs.
    ended = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    interrupted = paths[removed].with_name(f".{paths[removed].name}.{int(ended.stdout)}.1.tmp")
    interrupted.write_bytes(paths[removed].read_bytes())
    shutil.rmtree(removed)
    # Made again as another directory: made before the old one goes, so that the file
    # system cannot hand it the old one's inode number, which would make it the same root
    # to anyone comparing (and did, now and then, under load).
    fresh = tmp_path / "recreated-fresh"
    fresh.mkdir()
    shutil.rmtree(recreated)
    fresh.rename(recreated)
    # A later process: its first save prunes; later saves in it do not look again.
    monkeypatch.setattr(snapshot_module, "_PRUNED", set())
    _saved(root, cache)
    left = sorted(p.name for p in cache.iterdir())
    assert left == sorted(
        [
            snapshot_module.snapshot_path(cache, root).name,
            paths[kept].name,
            marks[kept].name,
            unreadable.name,
            stranger.name,
            "memory-file-key",  # the key of logged file ids: the walks met a broken file
        ]
    )


def test_a_save_that_raced_a_forget_in_another_process_is_removed(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory, monkeypatch: Any
) -> None:
    # B encodes rows holding the record, A forgets it and removes the snapshot, and only
    # then does B's write land: B sees the new mark after writing, and takes it back.
    _fill(write, v1, v2)
    index = MemoryIndex(root, snapshot_directory=cache)
    scan(index)
    written = snapshot_module.write_snapshot

    def write_after_a_forget(directory: Path, of: Path, data: bytes) -> None:
        snapshot_module.mark_forgotten(directory, of)  # another process's forget
        written(directory, of, data)

    monkeypatch.setattr(snapshot_module, "write_snapshot", write_after_a_forget)
    assert not index.save()
    assert not snapshot_module.snapshot_path(cache, root).exists()
    monkeypatch.setattr(snapshot_module, "write_snapshot", written)
    assert index.save()  # the next save reads the files again first, and stays
    assert snapshot_module.snapshot_path(cache, root).is_file()


class _WatchedLock:
    """A lock that reports when a thread other than the first holder asks for it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.contended = threading.Event()

    def __enter__(self) -> None:
        if not self._lock.acquire(blocking=False):
            self.contended.set()
            self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


def test_leaving_the_process_waits_for_a_save_running_in_the_background(
    root: Path, index: MemoryIndex, cache: Path, monkeypatch: Any
) -> None:
    lock = _WatchedLock()
    monkeypatch.setattr(snapshot_module, "SAVES", lock)
    writing, release = threading.Event(), threading.Event()
    events: list[str] = []
    real_write = snapshot_module.write_snapshot

    def held_write(*args: Any) -> None:
        writing.set()
        assert release.wait(30)
        real_write(*args)
        events.append("background save done")

    monkeypatch.setattr(snapshot_module, "write_snapshot", held_write)
    background = threading.Thread(target=index.save)
    background.start()
    assert writing.wait(30)

    def leave() -> None:
        index_module._save_at_exit(weakref.ref(index))
        events.append("exit handler done")

    leaving = threading.Thread(target=leave)
    leaving.start()
    # The exit handler asks for the save lock while the background save holds it ...
    assert lock.contended.wait(30)
    release.set()
    background.join(30)
    leaving.join(30)
    # ... and returns only once that save is complete, so the process never ends mid-write.
    # (It may save once more itself, when the watcher reported a change meanwhile: a busy
    # machine can deliver an event late. Either way, nothing ends after the handler.)
    assert events[0] == "background save done"
    assert events[-1] == "exit handler done"
    assert set(events[:-1]) == {"background save done"}
    assert _state(MemoryIndex(root, snapshot_directory=cache)) == _state(index)


def test_calls_go_on_while_a_snapshot_is_encoded_and_written(
    root: Path, index: MemoryIndex, cache: Path, monkeypatch: Any
) -> None:
    encoding, release = threading.Event(), threading.Event()
    real_encode = snapshot_module.encode

    def held_encode(*args: Any) -> bytes:
        encoding.set()
        assert release.wait(30)
        return real_encode(*args)

    monkeypatch.setattr(snapshot_module, "encode", held_encode)
    saver = threading.Thread(target=index.save)
    saver.start()
    try:
        assert encoding.wait(30)
        answered = threading.Event()

        def call() -> None:
            index.recall(Scope.PROJECT, "kiwis", frozenset(), 5)
            index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
            answered.set()

        caller = threading.Thread(target=call)
        caller.start()
        # The save is stuck encoding, and the index lock is free all the same.
        assert answered.wait(30)
        caller.join(30)
    finally:
        release.set()
        saver.join(30)
    assert _state(MemoryIndex(root, snapshot_directory=cache)) == _state(index)


@given(
    first=st.integers(0, 10**6),
    since_first=st.integers(0, 10**4),
    since_last=st.integers(0, 10**4),
    quiet=st.integers(1, 1000),
    spans=st.integers(1, 50),
)
def test_a_save_waits_for_changes_to_pause_but_never_past_its_bound(
    first: int, since_first: int, since_last: int, quiet: int, spans: int
) -> None:
    # Whole numbers of seconds keep the arithmetic exact.
    last = first + max(0, since_first - since_last)
    now = first + since_first
    span = spans * quiet
    wait = index_module.save_wait(now, first, last, quiet, span)
    assert wait >= 0
    assert now + wait <= max(now, first + span)  # never later than the bound
    if now - last < quiet and now - first < span:
        assert wait > 0  # changes still coming, bound not reached: not yet
    if wait > 0:
        assert now + wait <= last + quiet  # at most one quiet period after the last


def test_a_later_change_pushes_the_save_back(
    root: Path, index: MemoryIndex, cache: Path, monkeypatch: Any
) -> None:
    timers: list[float] = []
    monkeypatch.setattr(
        MemoryIndex, "_start_timer", lambda self, delay: timers.append(delay) or None
    )
    clock = [1000.0]
    monkeypatch.setattr(index_module.time, "monotonic", lambda: clock[0])
    saved: list[bool] = []
    monkeypatch.setattr(MemoryIndex, "save", lambda self: saved.append(True) or True)
    index._saving = None
    index._schedule_save()  # the first change of a burst starts the wait
    assert timers == [index_module._SAVE_DELAY]
    index._saving = threading.current_thread()  # type: ignore[assignment]
    clock[0] += 1.5
    index._schedule_save()  # another change while waiting: no second timer
    assert len(timers) == 1
    clock[0] += 0.5  # the timer fires 2 s after the first change, 0.5 s after the last
    index._save_later()
    assert saved == []
    assert timers[1] == pytest.approx(1.5)  # waits until 2 s after the last change
    index._saving = threading.current_thread()  # type: ignore[assignment]
    clock[0] += 1.5
    index._save_later()
    assert saved == [True]


def test_a_cache_directory_others_may_write_is_never_used(
    root: Path,
    expected: State,
    cache: Path,
    count_reads: dict[str, int],
    caplog: pytest.LogCaptureFixture,
) -> None:
    cache.chmod(0o777)
    caplog.set_level("INFO", logger="mymcp.memory.index")
    before = dict(count_reads)
    index = MemoryIndex(root, snapshot_directory=cache)
    index.refresh(Scope.PROJECT, recursive=True, candidate_limit=10_000)
    assert count_reads["read"] - before["read"] == len(index)  # nothing was taken from it
    assert "index_snapshot outcome=disabled reason=unsafe_directory" in caplog.text
    assert _state(index) == expected
    path = snapshot_module.snapshot_path(cache, root)
    written = path.stat().st_mtime_ns
    assert index.save() is False  # nor written
    assert path.stat().st_mtime_ns == written


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away takes root")
def test_a_cache_directory_of_another_user_is_never_used(
    root: Path, expected: State, cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    os.chown(cache, 65534, -1)  # nobody's
    caplog.set_level("INFO", logger="mymcp.memory.index")
    index = MemoryIndex(root, snapshot_directory=cache)
    assert _state(index) == expected
    assert "index_snapshot outcome=disabled reason=unsafe_directory" in caplog.text
    assert "outcome=loaded" not in caplog.text


def test_every_directory_a_save_creates_is_private(
    index: MemoryIndex, cache: Path, tmp_path: Path
) -> None:
    # The cache directory and the XDG_CACHE_HOME above it are both new (under the
    # suite's umask 022); the directory above them is the user's and keeps its mode.
    tmp_path.chmod(0o751)
    shutil.rmtree(cache.parent)  # made by the walk, for the key of logged file ids
    assert index.save()
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o751


def test_the_snapshot_is_created_exclusively_and_private_whatever_the_umask(
    root: Path, index: MemoryIndex, cache: Path, monkeypatch: Any
) -> None:
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def recording_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opened.append((os.fsdecode(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(snapshot_module.os, "open", recording_open)
    previous = os.umask(0o277)
    try:
        assert index.save()
        assert index.save()
    finally:
        os.umask(previous)
    path = snapshot_module.snapshot_path(cache, root)
    # Only this index's files: an index another test left behind may be collected, and
    # save its own snapshot, while this one runs.
    temps = [
        (name, flags)
        for name, flags in opened
        if name.endswith(".tmp") and os.path.basename(name).startswith(f".{path.name}.")
    ]
    assert len(temps) == 2
    assert temps[0][0] != temps[1][0]  # a fresh, unpredictable name every time
    for _, flags in temps:
        assert flags & os.O_EXCL
        assert flags & os.O_NOFOLLOW
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_snapshot_larger_than_the_bound_is_never_read(
    root: Path,
    expected: State,
    cache: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    saved = snapshot_module.snapshot_path(cache, root).stat()
    monkeypatch.setattr(snapshot_module, "MAX_SNAPSHOT_BYTES", saved.st_size - 1)
    read: list[int] = []
    real_read = os.read

    def recording_read(fd: int, size: int) -> bytes:
        if os.fstat(fd).st_ino == saved.st_ino:
            read.append(size)
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", recording_read)
    caplog.set_level("INFO", logger="mymcp.memory.index")
    index = MemoryIndex(root, snapshot_directory=cache)
    assert _state(index) == expected
    assert "index_snapshot outcome=ignored reason=too_large" in caplog.text
    assert read == []


# -- the key of logged file ids -----------------------------------------------------------


def test_logged_file_ids_are_keyed_and_shared_through_the_cache(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory
) -> None:
    _fill(write, v1, v2)
    parts = ("project", "old", "broken.json")
    first = MemoryIndex(root, snapshot_directory=cache)
    scan(first)  # logs the broken file, making the key
    key_file = cache / "memory-file-key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    kept = key_file.read_bytes()
    # Another index (another process, `mymcp memory check`) names the file alike.
    second = MemoryIndex(root, snapshot_directory=cache)
    assert first.file_id(parts) == second.file_id(parts) == file_id(parts, file_key(cache))
    assert key_file.read_bytes() == kept  # read, never made again
    # Nobody can try path words against it: the plain digest of the path is not the id.
    unkeyed = hashlib.sha256(b"project/old/broken.json").hexdigest()[:12]
    assert first.file_id(parts) != unkeyed
    assert first.file_id(parts) != first.file_id(("project", "old", "other.json"))


@pytest.mark.parametrize(
    "planted",
    [b"short", b"g" * 64, b"A" * 64, b"a" * 64 + b"\n", None, b"others may read"],
    ids=["short", "not-hex", "upper-case", "newline", "linked", "readable"],
)
def test_a_key_file_that_is_not_the_users_private_key_is_replaced(
    cache: Path, tmp_path: Path, planted: bytes | None
) -> None:
    """Every process reads the same file, so one that it cannot use is replaced: a
    process of its own key would name files as no other process does, for good."""
    cache.mkdir(parents=True, mode=0o700)
    key_file = cache / "memory-file-key"
    elsewhere = tmp_path / "elsewhere"
    if planted is None:
        elsewhere.write_bytes(b"a" * 64)
        key_file.symlink_to(elsewhere)
    elif planted == b"others may read":
        key_file.write_bytes(b"a" * 64)
        key_file.chmod(0o644)  # the key may have been read: a fresh one takes its place
    else:
        key_file.write_bytes(planted)
        key_file.chmod(0o600)
    key = file_key(cache)
    assert not key_file.is_symlink()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key == bytes.fromhex(key_file.read_text())
    assert key != bytes.fromhex("a" * 64)
    assert file_key(cache) == key  # read back by the next process alike
    if planted is None:
        assert elsewhere.read_bytes() == b"a" * 64  # a link's target is never written


def test_a_removed_key_is_made_again_and_used_by_a_running_index(
    root: Path, cache: Path, write: Writer, v1: Factory, v2: Factory
) -> None:
    _fill(write, v1, v2)
    index = MemoryIndex(root, snapshot_directory=cache)
    scan(index)
    parts = ("project", "old", "broken.json")
    before = index.file_id(parts)
    (cache / "memory-file-key").unlink()
    made_by_check = file_key(cache)  # as `mymcp memory check` makes it
    assert index.file_id(parts) == file_id(parts, made_by_check) != before
