"""The mutation lock of one memory root: a thread lock plus an OS-level advisory lock.

Every mutation of a root runs inside `root_lock`, so read-check-write sequences never
interleave (decision D10). Threads of one process first serialise on an in-process lock
keyed by the root's absolute path; the process then takes an exclusive ``flock`` on
``<root>/.mnemosyne.lock``, which serialises every MyMCP process sharing the root. The
lock file is created with mode 0600, never follows a symlink, holds no data and is never
a record candidate (it does not end in ``.json``). It is left in place on release:
removing it would let two processes lock different inodes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from .model import ErrorCode, MemoryOperationError

__all__ = ["LOCK_FILE_NAME", "root_lock"]

LOCK_FILE_NAME: Final = ".mnemosyne.lock"
_LOCK_FLAGS: Final = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK

_registry_lock = threading.Lock()
_thread_locks: dict[str, threading.Lock] = {}


def _thread_lock(root: Path) -> threading.Lock:
    key = os.path.abspath(root)
    with _registry_lock:
        lock = _thread_locks.get(key)
        if lock is None:
            lock = _thread_locks[key] = threading.Lock()
        return lock


def _open_lock_file(root: Path) -> int:
    try:
        root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    try:
        fd = os.open(LOCK_FILE_NAME, _LOCK_FLAGS, 0o600, dir_fd=root_fd)
    except OSError:
        # ELOOP (a planted symlink) included: the lock must be our own regular file.
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    finally:
        os.close(root_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def root_lock(root: Path) -> Iterator[None]:
    """Hold the exclusive mutation lock of ``root`` (which must exist) for the block.

    Blocks until the lock is free. Raises ``memory_source_unavailable`` when the root or
    its lock file cannot be opened or locked.
    """
    with _thread_lock(root):
        fd = _open_lock_file(root)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
