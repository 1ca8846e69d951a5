"""The mutation lock: bounded waits that end in a clear, retryable memory_busy, and
reads that never wait for it."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mymcp.plugins.mnemosyne.memory import (
    LOCK_FILE_NAME,
    CursorCodec,
    ErrorCode,
    MemoryOperationError,
    MemoryService,
    MutationService,
    root_lock,
)
from mymcp.plugins.mnemosyne.memory import store as store_module

from .conftest import remember_args, tree_snapshot

REFERENCE = {
    "schema_version": 2,
    "scope": "project",
    "namespace_id": "mnemosyne",
    "collection_id": None,
    "id": "mem_0123456789abcdef0123456789abcdef",
}

HOLDER = r"""
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # hold until the parent closes our stdin
"""


@pytest.fixture
def held_elsewhere(root: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process (a second server, stopped or slow) holds the root's lock."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root / LOCK_FILE_NAME)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline() == "held\n"
    yield holder
    if holder.stdin is not None and not holder.stdin.closed:
        holder.stdin.close()
    holder.wait(timeout=30)
    holder.stdout.close()


def test_a_lock_held_by_another_process_gives_memory_busy(
    root: Path, held_elsewhere: subprocess.Popen[str]
) -> None:
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000, lock_timeout=0.05)
    before = tree_snapshot(root)
    payload = writes.remember(remember_args()).payload
    assert payload["status"] == "storage_error"
    assert payload["code"] == "memory_busy"
    assert "retry" in payload["message"]
    assert tree_snapshot(root) == before
    # Reads never take the lock: they answer while it is held.
    assert reads.list({"scope": "project"}).payload["status"] == "ok"
    assert reads.recall({"query": "consent", "scope": "project"}).payload["status"] == "no_matches"
    # Once the other writer is gone, the same call succeeds.
    assert held_elsewhere.stdin is not None
    held_elsewhere.stdin.close()
    held_elsewhere.wait(timeout=30)
    assert writes.remember(remember_args()).payload["status"] == "remembered"


def test_the_wait_for_a_thread_of_this_process_is_bounded_too(root: Path) -> None:
    holding, release = threading.Event(), threading.Event()

    def hold() -> None:
        with root_lock(root):
            holding.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(timeout=30)
        with pytest.raises(MemoryOperationError) as caught, root_lock(root, timeout=0.02):
            pass
        assert caught.value.code is ErrorCode.MEMORY_BUSY
        # Reads do not wait for the writer thread either.
        reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
        assert reads.list({"scope": "project"}).payload["status"] == "ok"
    finally:
        release.set()
        holder.join(timeout=30)
    with root_lock(root, timeout=0):
        pass


def test_busy_is_a_storage_error_that_changed_nothing() -> None:
    error = MemoryOperationError(ErrorCode.MEMORY_BUSY)
    payload = error.payload()
    assert payload == {
        "status": "storage_error",
        "code": "memory_busy",
        "message": ErrorCode.MEMORY_BUSY.message,
    }
    assert "nothing was changed" in payload["message"]
    assert os.sep not in payload["message"]


def test_the_lock_wait_ends_at_the_deadline_the_request_arrived_with(
    root: Path, held_elsewhere: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A request that already spent its whole lock timeout queued for a worker thread
    # tries the lock once and answers at once; it never starts a wait of its own.
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000)  # the default 5 s lock timeout

    def no_waiting(seconds: float) -> None:
        raise AssertionError("waited for the lock past the request's deadline")

    monkeypatch.setattr(store_module.time, "sleep", no_waiting)
    before = tree_snapshot(root)
    arrived = time.monotonic() - writes.lock_timeout
    for payload in (
        writes.remember(remember_args(), deadline=arrived + writes.lock_timeout).payload,
        writes.archive(
            {"reference": REFERENCE, "expected_revision": 1},
            deadline=arrived + writes.lock_timeout,
        ).payload,
    ):
        assert (payload["status"], payload["code"]) == ("storage_error", "memory_busy")
    assert tree_snapshot(root) == before


def test_a_call_that_never_got_a_turn_is_refused_as_busy_and_logged(
    root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    reads = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    writes = MutationService(reads, 10_000)
    caplog.set_level("INFO", logger="mcp")
    before = tree_snapshot(root)
    outcome = writes.refuse_busy("memory_remember", remember_args())
    assert outcome.is_error
    assert outcome.payload == {
        "status": "storage_error",
        "code": "memory_busy",
        "message": ErrorCode.MEMORY_BUSY.message,
    }
    assert tree_snapshot(root) == before
    assert [r.getMessage() for r in caplog.records if r.name == "mcp.memory_remember"] == [
        "event=memory_remember outcome=storage_error code=memory_busy"
    ]


def test_a_waiter_whose_lock_file_was_swapped_locks_the_file_in_its_place(
    root: Path, held_elsewhere: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Someone removes the lock file while one writer holds it and another waits on it.
    # When the holder is done the waiter gets the removed file's lock, which keeps out no
    # one opening the new file: it must lock the new one before it writes.
    opened = threading.Event()
    real_open = store_module._open_lock_file

    def open_lock_file(at: Path) -> int:
        fd = real_open(at)
        opened.set()
        return fd

    monkeypatch.setattr(store_module, "_open_lock_file", open_lock_file)
    inside, leave = threading.Event(), threading.Event()

    def writer() -> None:
        with root_lock(root, timeout=30):
            inside.set()
            leave.wait(30)

    waiter = threading.Thread(target=writer)
    waiter.start()
    try:
        assert opened.wait(30)  # the waiter holds the old file open and polls its lock
        (root / LOCK_FILE_NAME).unlink()
        (root / LOCK_FILE_NAME).write_bytes(b"")  # another process's fresh lock file
        assert held_elsewhere.stdin is not None
        held_elsewhere.stdin.close()  # the holder is done: the old file's lock is free
        assert inside.wait(30)
        probe = os.open(root / LOCK_FILE_NAME, os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):  # the new file is the one held now
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(probe)
    finally:
        leave.set()
        waiter.join(30)


def _lock_is_free(root: Path) -> bool:
    probe = os.open(root / LOCK_FILE_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(probe)  # closing drops a lock the probe took
    return True


def test_a_remember_reads_a_cold_scope_before_it_takes_the_lock(
    root: Path, write: Any, v2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a whole scope takes seconds at a hundred thousand records; every other
    writer would wait that long for the lock. Only stamps are checked under it."""
    for number in range(20):
        write(v2(content=f"note {number}"))
    reads: list[bool] = []  # per file read from disk: was the lock free then?
    real_read = store_module.read_candidate

    def reading(*args: Any) -> Any:
        reads.append(_lock_is_free(root))
        return real_read(*args)

    monkeypatch.setattr(store_module, "read_candidate", reading)
    memory = MemoryService(lambda: root, 10_000, CursorCodec.generate())
    mutations = MutationService(memory, 10_000)
    remembered = mutations.remember(remember_args(content="the new one"))
    assert remembered.payload["status"] == "remembered", remembered.payload
    assert len(reads) == 20  # every existing record once, the new one never
    assert all(reads)
