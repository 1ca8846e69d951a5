"""The inotify fast path of the memory index: nothing changed means no walk.

Every test checks two things: that an unchanged root is served without a walk, and that
each kind of hand change is seen by the very next call.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import MemoryIndex, MemoryOperationError, Scope, watch

from .conftest import scan

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")

Factory = Callable[..., dict[str, Any]]
Writer = Callable[..., Path]


def _ids(
    index: MemoryIndex, scope: Scope = Scope.PROJECT, namespace: str | None = None
) -> set[str]:
    container = () if namespace is None else (namespace,)
    return scan(index, scope, container).ids


def _armed(root: Path) -> MemoryIndex:
    index = MemoryIndex(root)
    assert index.watching
    return index


def _inotify_fds() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{name}") == "anon_inode:inotify"
    return count


def test_an_unchanged_root_is_served_without_walking(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="one"), "project/ns/one.json")
    index = _armed(root)
    first = scan(index, candidate_limit=10)
    assert len(walks) == 1
    for _ in range(3):
        again = scan(index, candidate_limit=10)
        assert again.revision == first.revision  # no row changed: the same generation
        assert again.ids == first.ids
    assert len(walks) == 1
    # The scope's proof covers the selections inside it; a namespace's does not cover
    # the scope around it.
    assert _ids(index, namespace="ns") == {"one"}
    assert len(walks) == 1
    other = _armed(root)
    assert _ids(other, namespace="ns") == {"one"}
    assert _ids(other, namespace="ns") == {"one"}
    assert len(walks) == 2
    assert _ids(other) == {"one"}
    assert len(walks) == 3
    # The candidate bound still fails the call when served from the fast path.
    with pytest.raises(MemoryOperationError) as caught:
        scan(index, candidate_limit=0)
    assert caught.value.code.value == "candidate_limit_exceeded"


def test_same_size_edit_within_the_same_mtime_tick_is_seen(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    path = write(v1(memory_id="aaaa"), "project/a.json")
    index = _armed(root)
    assert _ids(index) == {"aaaa"}
    assert _ids(index) == {"aaaa"}
    before = path.stat()
    write(v1(memory_id="bbbb"), "project/a.json", settled=False)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert _ids(index) == {"bbbb"}
    assert _ids(index) == {"bbbb"}
    # The edit's own events name the file: it is re-read without walking the root.
    assert len(walks) == 1


def test_record_in_a_namespace_created_after_arming_is_seen(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="old"), "project/ns/old.json")
    index = _armed(root)
    assert _ids(index) == {"old"}
    assert _ids(index) == {"old"}
    # Directory first (one event), file later: the file's own event must come from a
    # watch the walk placed on the new directory.
    (root / "project" / "fresh" / "coll").mkdir(parents=True)
    assert _ids(index) == {"old"}
    assert _ids(index) == {"old"}
    walked = len(walks)
    write(v1(memory_id="new"), "project/fresh/coll/new.json")
    assert _ids(index) == {"old", "new"}
    # Seen through the watch the walk placed on the new directory, without a walk.
    assert len(walks) == walked
    (root / "project" / "fresh" / "coll" / "new.json").write_text(json.dumps(v1(memory_id="newer")))
    assert _ids(index) == {"old", "newer"}


def test_renamed_and_deleted_directories_are_seen(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="moving"), "project/ns/deep/m.json")
    write(v1(memory_id="staying"), "project/other/s.json")
    index = _armed(root)
    assert _ids(index) == {"moving", "staying"}
    (root / "project" / "ns").rename(root / "project" / "renamed")
    assert _ids(index) == {"moving", "staying"}
    assert _ids(index, namespace="ns") == set()
    assert _ids(index, namespace="renamed") == {"moving"}
    # Moved out of the root: gone, and later writes inside it raise no stale hits.
    outside = root.parent / "outside"
    (root / "project" / "renamed").rename(outside)
    assert _ids(index) == {"staying"}
    walked = len(walks)
    (outside / "deep" / "m.json").write_text(json.dumps(v1(memory_id="elsewhere")))
    assert _ids(index) == {"staying"}
    assert len(walks) <= walked + 1
    shutil.rmtree(root / "project" / "other")
    assert _ids(index) == set()
    assert _ids(index) == set()


def test_root_deleted_and_recreated_is_seen(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="before"), "project/ns/b.json")
    index = _armed(root)
    assert _ids(index) == {"before"}
    shutil.rmtree(root)
    assert _ids(index) == set()
    root.mkdir()
    assert _ids(index) == set()
    write(v1(memory_id="after"), "project/ns/a.json")
    assert _ids(index) == {"after"}
    walked = len(walks)
    assert _ids(index) == {"after"}
    assert len(walks) == walked  # re-armed on the new root
    (root / "project" / "ns" / "a.json").unlink()
    assert _ids(index) == set()


def test_root_reached_through_a_repointed_symlink_is_seen(
    tmp_path: Path, v1: Factory, walks: list[int]
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for place, name in ((first, "one"), (second, "two")):
        (place / "project").mkdir(parents=True)
        (place / "project" / f"{name}.json").write_text(json.dumps(v1(memory_id=name)))
    link = tmp_path / "memory"
    link.symlink_to(first, target_is_directory=True)
    index = _armed(link)
    assert _ids(index) == {"one"}
    assert _ids(index) == {"one"}
    # Re-pointing the link changes nothing inside the watched tree: no event at all.
    temporary = tmp_path / "memory.new"
    temporary.symlink_to(second, target_is_directory=True)
    temporary.replace(link)
    assert _ids(index) == {"two"}
    assert _ids(index) == {"two"}
    (second / "project" / "two.json").unlink()
    assert _ids(index) == set()


def test_symlinks_swapped_in_are_still_skipped(
    root: Path, tmp_path: Path, write: Writer, v1: Factory
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps(v1(memory_id="secret")))
    real = write(v1(memory_id="real"), "project/ns/real.json")
    index = _armed(root)
    assert _ids(index) == {"real"}
    # A directory replaced by a symlink to somewhere else, and a file by a symlink.
    (root / "project" / "ns").rename(tmp_path / "parked")
    (root / "project" / "ns").symlink_to(outside, target_is_directory=True)
    assert _ids(index) == set()
    (root / "project" / "ns").unlink()
    (root / "project" / "ns").mkdir()
    (root / "project" / "ns" / "real.json").symlink_to(tmp_path / "parked" / real.name)
    assert _ids(index) == set()
    assert _ids(index) == set()
    # Writes through the link target are invisible to the watch and need not be seen.
    (tmp_path / "parked" / real.name).write_text(json.dumps(v1(memory_id="changed")))
    assert _ids(index) == set()


def test_hard_linked_records_are_checked_on_every_call_without_a_walk(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    path = write(v1(memory_id="linked"), "project/ns/l.json")
    write(v1(memory_id="plain"), "project/ns/p.json")
    other = tmp_path / "other.json"
    os.link(path, other)
    index = _armed(root)
    assert _ids(index) == {"linked", "plain"}
    # A write through the other name raises an event only in the other directory: the
    # file is looked at again on every call all the same, and only it.
    other.write_text(json.dumps(v1(memory_id="edited-elsewhere")))
    assert _ids(index) == {"edited-elsewhere", "plain"}
    assert _ids(index, namespace="ns") == {"edited-elsewhere", "plain"}
    other.write_text(json.dumps(v1(memory_id="again")))
    assert _ids(index, namespace="ns") == {"again", "plain"}
    assert len(walks) == 1
    # Once it has one name again, it is an ordinary file.
    other.unlink()
    assert _ids(index) == {"again", "plain"}
    assert index._linked == {}


def test_more_hard_linked_records_than_are_checked_call_by_call_are_walked(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    (tmp_path / "backup").mkdir()
    for number in range(65):  # a backup made of hard links (cp -al, rsync --link-dest)
        path = write(v1(memory_id=f"m{number}"), f"project/ns/m{number}.json")
        os.link(path, tmp_path / "backup" / path.name)
    index = _armed(root)
    assert len(_ids(index)) == 65
    (tmp_path / "backup" / "m7.json").write_text(json.dumps(v1(memory_id="edited-elsewhere")))
    assert "edited-elsewhere" in _ids(index)
    assert len(walks) == 2


def test_hard_links_in_one_selection_never_make_another_walk(
    root: Path, tmp_path: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    (tmp_path / "backup").mkdir()
    for number in range(65):
        path = write(v1(memory_id=f"m{number}"), f"project/ns/m{number}.json")
        os.link(path, tmp_path / "backup" / path.name)
    write(v1(memory_id="plain"), "project/other/p.json")
    index = _armed(root)
    assert len(_ids(index)) == 66
    before = len(walks)
    for _ in range(3):
        assert _ids(index, namespace="other") == {"plain"}
    assert len(walks) - before == 1  # its own first walk, then proven


def test_a_hard_link_made_while_the_startup_build_hands_its_lock_over_is_kept(
    root: Path, tmp_path: Path, write: Writer, v1: Factory
) -> None:
    for number in range(300):
        write(v1(memory_id=f"a{number:03d}"), f"project/ns/a{number:03d}.json")
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps(v1(memory_id="original")))
    index = _armed(root)
    linked: list[bool] = []

    def progress(examined: int) -> None:
        if not linked:
            linked.append(True)
            os.link(elsewhere, root / "project" / "ns" / "zz.json")
            # A call about another scope meanwhile applies the event for the new name.
            index.refresh(Scope.SELF, (), recursive=True, candidate_limit=10_000)

    index.refresh(Scope.PROJECT, (), recursive=True, candidate_limit=10_000, progress=progress)
    assert linked
    assert "original" in _ids(index)
    elsewhere.write_text(json.dumps(v1(memory_id="edited")))
    assert "edited" in _ids(index)


def test_watch_limit_failure_falls_back_to_walking(
    root: Path, write: Writer, v1: Factory, walks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    write(v1(memory_id="one"), "project/ns/one.json")
    index = _armed(root)
    watcher = index._watcher
    assert watcher is not None
    real_libc = watcher._libc

    class FullWatchTable:
        def __getattr__(self, name: str) -> Any:
            return getattr(real_libc, name)

        @staticmethod
        def inotify_add_watch(fd: int, path: bytes, mask: int) -> int:
            import ctypes

            ctypes.set_errno(errno.ENOSPC)
            return -1

    monkeypatch.setattr(watcher, "_libc", FullWatchTable())
    assert _ids(index) == {"one"}
    assert _ids(index) == {"one"}
    assert len(walks) == 2  # no proof, so every call walks
    write(v1(memory_id="two"), "project/ns/two.json")
    assert _ids(index) == {"one", "two"}
    monkeypatch.setattr(watcher, "_libc", real_libc)
    assert _ids(index) == {"one", "two"}  # walks and re-arms
    walked = len(walks)
    assert _ids(index) == {"one", "two"}
    assert len(walks) == walked


def test_queue_overflow_falls_back_to_walking(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip("event queue too long to overflow quickly")
    path = write(v1(memory_id="before"), "project/a.json")
    noise = [root / "project" / "x.txt", root / "project" / "y.txt"]
    for item in noise:
        item.write_text("x")
    index = _armed(root)
    assert _ids(index) == {"before"}
    # Alternate two files so the kernel cannot merge consecutive identical events.
    for number in range(limit + 2):
        os.utime(noise[number % 2])
    # Queued after the overflow marker, so this edit's own event is lost.
    path.write_text(json.dumps(v1(memory_id="after")))
    assert _ids(index) == {"after"}
    assert index.watching
    walked = len(walks)
    assert _ids(index) == {"after"}
    assert len(walks) == walked


def test_without_inotify_the_index_walks_every_call(
    root: Path, write: Writer, v1: Factory, walks: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch, "load_libc", lambda: None)  # non-Linux or ctypes failure
    write(v1(memory_id="one"), "project/one.json")
    index = MemoryIndex(root)
    assert not index.watching
    assert _ids(index) == {"one"}
    assert _ids(index) == {"one"}
    assert len(walks) == 2


def test_mutation_hooks_force_a_walk(
    root: Path, write: Writer, v1: Factory, walks: list[int]
) -> None:
    write(v1(memory_id="one"), "project/one.json")
    index = _armed(root)
    assert _ids(index) == {"one"}
    index.invalidate(("project", "one.json"))
    assert _ids(index) == {"one"}
    assert len(walks) == 2


def test_concurrent_scans_and_edits_settle_on_the_files(
    root: Path, write: Writer, v1: Factory
) -> None:
    index = _armed(root)
    errors: list[BaseException] = []
    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                _ids(index)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        for number in range(50):
            write(v1(memory_id=f"n{number}"), f"project/ns{number % 5}/{number}.json")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    assert not errors
    assert _ids(index) == {f"n{number}" for number in range(50)}


def test_inotify_descriptors_are_released(root: Path, write: Writer, v1: Factory) -> None:
    write(v1(), "project/ns/one.json")
    gc.collect()
    before, inotify_before = len(os.listdir("/proc/self/fd")), _inotify_fds()
    for _ in range(10):
        index = _armed(root)
        _ids(index)
        del index
    closed = _armed(root)
    _ids(closed)
    closed.close()
    assert not closed.watching
    assert _ids(closed) == {"legacy-one"}
    del closed
    gc.collect()
    assert _inotify_fds() == inotify_before
    assert len(os.listdir("/proc/self/fd")) == before


def test_nothing_is_loaded_or_opened_at_import() -> None:
    code = (
        "import os, sys\n"
        "import mymcp.plugins.mnemosyne.memory as memory\n"
        "from mymcp.plugins.mnemosyne.memory import watch\n"
        "from pathlib import Path\n"
        "fds = [str(p.readlink()) for p in Path('/proc/self/fd').iterdir() if p.exists()]\n"
        "print(any('inotify' in fd for fd in fds), 'ctypes' in sys.modules,\n"
        "      watch.load_libc.cache_info().currsize)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.split() == ["False", "False", "0"]
