"""Discovery and the revalidated in-process index."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    CursorCodec,
    MemoryIndex,
    MemoryOperationError,
    MemoryService,
    MutationService,
    Scope,
    SkipReason,
    parse_record,
    store,
)
from mymcp.plugins.mnemosyne.memory import index as index_module

from .conftest import remember_args, scan

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _scan(index: MemoryIndex, scope: Scope = Scope.PROJECT, limit: int = 10_000) -> set[str]:
    return scan(index, scope, candidate_limit=limit).ids


@pytest.fixture(params=[True, False], ids=["inotify", "stat-walk"])
def watch(request: pytest.FixtureRequest) -> bool:
    """Run a test against the change-notification fast path and the plain stat walk."""
    if request.param and not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux only")
    return bool(request.param)


def _new(root: Path, watch: bool) -> MemoryIndex:
    index = MemoryIndex(root, watch=watch)
    assert index.watching is watch
    return index


def _skips(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Skip lines with the file id replaced by `<file>` (it is checked on its own)."""
    lines = [r.getMessage() for r in caplog.records if r.name == "mymcp.memory.store"]
    assert all(re.search(r" file=[0-9a-f]{12} ", line) for line in lines), lines
    return [re.sub(r" file=[0-9a-f]{12} ", " file=<file> ", line) for line in lines]


def test_every_invalid_reason_is_skipped_and_logged_without_detail(
    root: Path,
    write: Writer,
    v1: Factory,
    v2: Factory,
    caplog: pytest.LogCaptureFixture,
    watch: bool,
) -> None:
    good = v2()
    write(good)
    write(v1(), "project/legacy/ok.json")
    write(b"\xff\xfe", "project/x/encoding.json")
    write("{nope", "project/x/json.json")
    write({"schema_version": 1}, "project/x/record.json")
    write(b" " * (64 * 1024 + 1), "project/x/big.json")
    write(v2(namespace="other"), "project/wrong/" + good["id"][:-1] + "0.json")
    write(v1(memory_id="deep"), "project/a/b/c/d/e/deep.json")
    write(v1(memory_id="fine-depth"), "project/a/b/c/d/fine.json")
    write("ignored", "project/notes.txt")
    fifo = root / "project" / "x" / "pipe.json"
    os.mkfifo(fifo)
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    index = _new(root, watch)
    assert _scan(index) == {good["id"], "legacy-one", "fine-depth"}
    reasons = sorted(m.split("reason=")[1] for m in _skips(caplog))
    assert reasons == sorted(
        [
            "invalid_encoding",
            "invalid_json",
            "invalid_record",
            "oversized",
            "path_mismatch",
            "too_deep",
            "unreadable",
        ]
    )
    assert all(m.startswith("skipped scope=project file=<file> reason=") for m in _skips(caplog))


def test_a_broken_file_is_logged_once_per_change(
    root: Path, write: Writer, v1: Factory, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    broken = write("{nope", "project/x/broken.json")
    (root / "project" / "link.json").symlink_to(broken)
    write(v1(memory_id="deep"), "project/a/b/c/d/e/deep.json")
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    index = _new(root, watch)
    for _ in range(3):  # unchanged files: one line each, however often they are walked
        _scan(index)
    first = _skips(caplog)
    assert sorted(first) == [
        "skipped scope=project file=<file> reason=invalid_json",
        "skipped scope=project file=<file> reason=symlink",
        "skipped scope=project file=<file> reason=too_deep",
    ]
    ids = {r.getMessage().split(" ")[2] for r in caplog.records}
    assert "file=" + index.file_id(("project", "x", "broken.json")) in ids
    # A change to the broken file is news again, even if it stays broken.
    write(b"\xff", "project/x/broken.json")
    _scan(index)
    assert _skips(caplog)[len(first) :] == [
        "skipped scope=project file=<file> reason=invalid_encoding"
    ]
    # Gone and back: reported again.
    (root / "project" / "link.json").unlink()
    _scan(index)
    (root / "project" / "link.json").symlink_to(broken)
    _scan(index)
    assert _skips(caplog)[-1] == "skipped scope=project file=<file> reason=symlink"
    assert len(_skips(caplog)) == len(first) + 2


def test_symlinked_files_and_directories_are_skipped(
    root: Path, write: Writer, v1: Factory, v2: Factory, tmp_path: Path,
    caplog: pytest.LogCaptureFixture, watch: bool,
) -> None:  # fmt: skip
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(v1(memory_id="outside")))
    real = write(v1(memory_id="real"), "project/real.json")
    (root / "project" / "linked.json").symlink_to(real)
    (root / "project" / "linkdir").symlink_to(outside, target_is_directory=True)
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    assert _scan(_new(root, watch)) == {"real"}
    assert sorted(_skips(caplog)) == ["skipped scope=project file=<file> reason=symlink"] * 2


def test_a_directory_named_as_a_record_file_is_reported_not_read(
    root: Path, write: Writer, v1: Factory, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    write(v1(memory_id="real"), "project/real.json")
    # A canonical record file replaced by a directory (a copy gone wrong, say) is
    # reported, and what it holds is no record of this store.
    write(v1(memory_id="inside"), f"project/ns/mem_{'0' * 32}.json/inside.json")
    # Legacy records may sit in a directory of any name, one ending in .json too.
    write(v1(memory_id="legacy"), "project/notes.json/legacy.json")
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    index = _new(root, watch)
    assert _scan(index) == {"real", "legacy"}
    assert _skips(caplog) == ["skipped scope=project file=<file> reason=not_a_file"]
    # Looked up by its reference (an inspect), it is the same entry passed over for the
    # same reason: no second line, and under no other reason.
    parts = ("project", "ns", f"mem_{'0' * 32}.json")
    assert index.lookup(parts, Scope.PROJECT) is None
    assert _skips(caplog) == ["skipped scope=project file=<file> reason=not_a_file"]


def test_symlinked_scope_directory_is_skipped(
    root: Path, tmp_path: Path, v1: Factory, watch: bool
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.json").write_text(json.dumps(v1()))
    (root / "project").symlink_to(outside, target_is_directory=True)
    assert _scan(_new(root, watch)) == set()


def test_hand_edits_additions_and_deletions_show_on_the_next_call(
    root: Path, write: Writer, v1: Factory, watch: bool
) -> None:
    index = _new(root, watch)
    path = write(v1(memory_id="first", content="old"), "project/a.json")
    assert _scan(index) == {"first"}
    # Same size rewrite in place, kept "settled": only the stamp (ctime) reveals it.
    write(v1(memory_id="fir5t", content="old"), "project/a.json")
    assert _scan(index) == {"fir5t"}
    write(v1(memory_id="second"), "project/b.json")
    assert _scan(index) == {"fir5t", "second"}
    path.unlink()
    assert _scan(index) == {"second"}
    assert len(index) == 1  # the deleted file's row is gone too


def test_fresh_same_size_edit_is_seen_even_within_one_timestamp_tick(
    root: Path, write: Writer, v1: Factory, watch: bool
) -> None:
    index = _new(root, watch)
    path = write(v1(memory_id="aaaa"), "project/a.json", settled=False)
    assert _scan(index) == {"aaaa"}
    stat = path.stat()
    write(v1(memory_id="bbbb"), "project/a.json", settled=False)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _scan(index) == {"bbbb"}


@pytest.mark.usefixtures("an_hour_later")
def test_unchanged_files_are_not_reread(
    root: Path, write: Writer, v1: Factory, v2: Factory, count_reads: dict[str, int], watch: bool
) -> None:
    for number in range(5):
        write(v1(memory_id=f"legacy-{number}"), f"project/l/{number}.json")
        write(v2())
    write("{broken", "project/x/broken.json")
    index = _new(root, watch)
    first = _scan(index)
    assert len(first) == 10
    assert count_reads == {"read": 11, "parse": 11}
    assert _scan(index) == first
    assert count_reads == {"read": 11, "parse": 11}
    write(v1(memory_id="legacy-0", content="changed"), "project/l/0.json")
    assert _scan(index) == first
    assert count_reads == {"read": 12, "parse": 12}


def test_fresh_files_are_reread_but_not_reparsed(
    root: Path, write: Writer, v1: Factory, count_reads: dict[str, int], watch: bool
) -> None:
    path = write(v1(), "project/fresh.json", settled=False)
    index = _new(root, watch)
    _scan(index)
    _scan(index)
    # The stat walk cannot trust a stamp from the current timestamp tick; the watcher
    # proves the file unchanged without looking at it.
    assert count_reads == ({"read": 1, "parse": 1} if watch else {"read": 2, "parse": 1})
    path.write_bytes(path.read_bytes())  # rewritten, same bytes
    _scan(index)
    assert count_reads == ({"read": 2, "parse": 1} if watch else {"read": 3, "parse": 1})


def test_writer_hooks_keep_the_index_coherent(
    root: Path, write: Writer, v2: Factory, count_reads: dict[str, int], watch: bool
) -> None:
    body = v2()
    path = write(body)
    index = _new(root, watch)
    assert _scan(index) == {body["id"]}
    parts = tuple(path.relative_to(root).parts)
    index.invalidate(parts)
    assert len(index) == 0
    assert _scan(index) == {body["id"]}
    assert count_reads["read"] == 2
    data = path.read_bytes()
    index.note_written(parts, store.FileStamp.of(path.stat()), data)
    before = dict(count_reads)
    assert _scan(index) == {body["id"]}
    assert count_reads["parse"] == before["parse"]


def test_candidate_limit_fails_the_whole_scan(
    root: Path, write: Writer, v1: Factory, watch: bool
) -> None:
    for number in range(3):
        write(v1(memory_id=f"n{number}"), f"project/{number}.json")
    index = _new(root, watch)
    assert len(_scan(index, limit=3)) == 3
    with pytest.raises(MemoryOperationError) as caught:
        _scan(index, limit=2)
    assert caught.value.code.value == "candidate_limit_exceeded"


def test_missing_root_is_empty_and_never_created(tmp_path: Path, watch: bool) -> None:
    root = tmp_path / "absent" / "memory"
    index = _new(root, watch)
    assert _scan(index) == set()
    assert index.lookup(("project", "ns", "mem_" + "a" * 32 + ".json"), Scope.PROJECT) is None
    assert not root.exists()
    assert not root.parent.exists()


@pytest.mark.parametrize("kind", ["file", "scope-file"])
def test_non_directory_sources_are_unavailable(tmp_path: Path, kind: str, watch: bool) -> None:
    root = tmp_path / "memory"
    if kind == "file":
        root.write_text("x")
    else:
        root.mkdir()
        (root / "project").write_text("x")
    with pytest.raises(MemoryOperationError) as caught:
        _scan(_new(root, watch))
    assert caught.value.code.value == "memory_source_unavailable"


def test_unreadable_subdirectory_is_skipped(
    root: Path, write: Writer, v1: Factory, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions")
    write(v1(), "project/ok.json")
    locked = root / "project" / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        assert _scan(_new(root, watch)) == {"legacy-one"}
    finally:
        locked.chmod(0o700)


def test_lookup_is_exact_and_checks_the_path(root: Path, write: Writer, v2: Factory) -> None:
    body = v2(collection="c")
    path = write(body)
    index = MemoryIndex(root)
    parts = tuple(path.relative_to(root).parts)
    found = index.lookup(parts, Scope.PROJECT)
    assert found is not None
    assert found.record == parse_record(path.read_bytes())
    moved = root / "project" / "mnemosyne" / path.name
    path.rename(moved)
    assert index.lookup(parts, Scope.PROJECT) is None
    assert index.lookup(tuple(moved.relative_to(root).parts), Scope.PROJECT) is None


def test_reasons_enum_is_the_bounded_vocabulary() -> None:
    assert {r.value for r in SkipReason} == {
        "symlink", "too_deep", "unreadable", "oversized",
        "invalid_encoding", "invalid_json", "invalid_record", "path_mismatch",
        "unsafe_permissions", "not_a_directory", "not_a_file",
    }  # fmt: skip


def test_a_stamp_is_trusted_only_once_its_ctime_is_old_too(
    root: Path,
    write: Writer,
    v1: Factory,
    count_reads: dict[str, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # cp -p, rsync -t and some editors put an old mtime back on a file they just wrote;
    # ctime still says when it changed. A stamp read within the settle time of that
    # change is not trusted, since a same-size rewrite in the same clock tick would leave
    # the whole stamp as it was: the next walk reads the file again.
    path = write(v1(memory_id="aaaa"), "project/a.json")  # its mtime is an hour old
    changed = path.stat().st_ctime_ns
    now = [changed + 1_000_000_000]
    monkeypatch.setattr(index_module, "_now_ns", lambda: now[0])
    index = MemoryIndex(root, watch=False)
    assert _scan(index) == {"aaaa"}
    assert count_reads["read"] == 1
    assert _scan(index) == {"aaaa"}
    assert count_reads["read"] == 2  # not trusted yet
    now[0] = changed + 3_000_000_000
    assert _scan(index) == {"aaaa"}
    assert _scan(index) == {"aaaa"}
    assert count_reads["read"] == 3  # read once more, settled, then trusted


@pytest.mark.parametrize("mode", [0o666, 0o646, 0o620, 0o602])
def test_a_record_file_others_may_write_is_skipped_and_reported_once(
    root: Path,
    write: Writer,
    v2: Factory,
    caplog: pytest.LogCaptureFixture,
    watch: bool,
    mode: int,
) -> None:
    kept = v2(content="quince jelly")
    loose = v2(content="quince paste")
    write(kept)
    path = write(loose)
    os.chmod(path, mode)
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    index = _new(root, watch)
    assert _scan(index) == {kept["id"]}
    assert _scan(index) == {kept["id"]}
    found = index.recall(Scope.PROJECT, "quince", frozenset(), 5)
    assert [item.record.id for item, _ in found] == [kept["id"]]
    parts = ("project", "mnemosyne", f"{loose['id']}.json")
    assert _skips(caplog) == ["skipped scope=project file=<file> reason=unsafe_permissions"]
    assert f"file={index.file_id(parts)}" in caplog.text
    assert "quince" not in caplog.text
    assert [(p.parts, p.reason) for p in index.problems(Scope.PROJECT)] == [
        (parts, "unsafe_permissions")
    ]
    os.chmod(path, 0o600)  # repaired: served again
    assert _scan(index) == {kept["id"], loose["id"]}
    assert index.problems(Scope.PROJECT) == []


def test_a_directory_others_may_write_is_not_walked_read_or_written(
    root: Path, write: Writer, v2: Factory, caplog: pytest.LogCaptureFixture, watch: bool
) -> None:
    kept = v2(namespace="private")
    hidden = v2(namespace="shared", content="plum")
    write(kept)
    write(hidden)
    shared = root / "project" / "shared"
    os.chmod(shared, 0o777)  # noqa: S103 - the unsafe mode under test
    caplog.set_level(logging.WARNING, logger="mymcp.memory.store")
    index = _new(root, watch)
    assert _scan(index) == {kept["id"]}
    assert [(p.parts, p.reason) for p in index.problems(Scope.PROJECT)] == [
        (("project", "shared"), "unsafe_permissions")
    ]
    assert _skips(caplog) == ["skipped scope=project file=<file> reason=unsafe_permissions"]
    # Nor is it read through a lookup, listed alone, or written to.
    assert index.lookup(("project", "shared", f"{hidden['id']}.json"), Scope.PROJECT) is None
    selection = index.refresh(Scope.PROJECT, ("shared",), recursive=True, candidate_limit=10)
    assert selection.candidates == 0
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000)
    before = sorted(p.name for p in shared.iterdir())
    refused = writes.remember(
        remember_args(namespace={"kind": "project", "id": "shared", "label": None})
    ).payload
    assert (refused["status"], refused["code"]) == ("storage_error", "memory_source_unavailable")
    assert sorted(p.name for p in shared.iterdir()) == before


def test_files_of_another_user_are_skipped(
    root: Path, write: Writer, v1: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(v1(memory_id="theirs"), "project/theirs.json")
    owner = os.geteuid()
    index = MemoryIndex(root, watch=False)
    assert _scan(index) == {"theirs"}
    # As seen by another user, the scope directory (and everything in it) is not theirs.
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    assert _scan(index) == set()
    assert [(p.parts, p.reason) for p in index.problems(Scope.PROJECT)] == [
        (("project",), "unsafe_permissions")
    ]


def test_a_file_removed_between_the_listing_and_its_stat_is_no_skipped_file(
    root: Path, write: Callable[..., Path], v1: Callable[..., dict[str, Any]], caplog: Any
) -> None:
    # Another process forgets a record while this one walks: the name was listed, then
    # is gone. It is simply no file any more, not one to warn about as unreadable.
    files = {
        "a.json": write(v1(memory_id="first"), "project/ns/a.json"),
        "b.json": write(v1(memory_id="second"), "project/ns/b.json"),
    }
    kept: list[str] = []
    real = index_module.walk_candidates

    def walk_then_remove(*args: Any, **kwargs: Any) -> None:
        visit = args[4]

        def visiting(dir_fd: int, directory: Any, name: str, info: Any) -> None:
            visit(dir_fd, directory, name, info)
            if not kept:  # the first one looked at stays; the other, listed, goes
                kept.append(name)
                next(path for other, path in files.items() if other != name).unlink()

        real(*args[:4], visiting, *args[5:], **kwargs)

    index = MemoryIndex(root, watch=False)
    with caplog.at_level(logging.WARNING, logger="mymcp.memory.store"):
        original = index_module.walk_candidates
        index_module.walk_candidates = walk_then_remove  # type: ignore[assignment]
        try:
            found = scan(index).ids
        finally:
            index_module.walk_candidates = original  # type: ignore[assignment]
    assert found == {"first" if kept == ["a.json"] else "second"}
    assert not [r for r in caplog.records if "reason=unreadable" in r.getMessage()]
    assert index.problems(Scope.PROJECT) == []
