"""Atomic, durable record writes under the memory root (contract 5.7, decision D10).

The caller holds the root's mutation lock (`_locking.root_lock`) around every call here.
All access below the root is descriptor-relative and never follows a symlink, so a
symlinked scope, namespace or collection directory is refused rather than written
through. Directories are created lazily with mode 0700 and existing ones are never
chmodded. Record bytes always reach the disk through a private 0600 temp file that is
fsynced before it is published, and the directory is fsynced after every publication.

Each operation also keeps the process's read index coherent: a successful write is
handed to `MemoryIndex.note_written`, anything whose outcome is unknown is invalidated.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
from pathlib import Path
from typing import Final

from ._filesystem import ChildState, FileStamp, UnreadableCandidate, close_quietly
from ._filesystem import open_child_directory as _open_child
from ._filesystem import read_candidate as _read_candidate
from ._index import MemoryIndex
from ._record_format import MAX_RECORD_BYTES
from .model import RECORD_SUFFIX, ErrorCode, MemoryOperationError, RelativePath

__all__ = [
    "DIRECTORY_MODE",
    "FILE_MODE",
    "RecordWriter",
    "ensure_root",
    "file_digest",
]

DIRECTORY_MODE: Final = 0o700
FILE_MODE: Final = 0o600
_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_ATTEMPTS: Final = 16


def _error(code: ErrorCode) -> MemoryOperationError:
    return MemoryOperationError(code)


def file_digest(data: bytes) -> bytes:
    """The fingerprint compared before a replace or delete (SHA-256 of the file bytes)."""
    return hashlib.sha256(data).digest()


def _make_private_directory(parent_fd: int, name: str) -> int | None:
    """Create ``name`` with mode 0700 under ``parent_fd``; None if it appeared meanwhile."""
    try:
        os.mkdir(name, DIRECTORY_MODE, dir_fd=parent_fd)
    except FileExistsError:
        return None
    fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        # The umask may have narrowed the mode; this directory is ours, so set it exactly.
        os.fchmod(fd, DIRECTORY_MODE)
        os.fsync(parent_fd)  # make the new entry itself durable
    except BaseException:
        os.close(fd)
        raise
    return fd


def ensure_root(root: Path) -> None:
    """Create the memory root and any missing ancestors (mode 0700) if it does not exist.

    The root and its ancestors are the operator's choice and may be reached through
    symlinks; only what lies below the root is held to the no-symlink rule.
    """
    if not root.is_absolute():
        raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    missing: list[str] = []
    existing = root
    try:
        while not os.path.isdir(existing):
            if os.path.lexists(existing) or existing.parent == existing:
                # Something that is not a directory (or a dangling link) is in the way.
                raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
            missing.append(existing.name)
            existing = existing.parent
        if not missing:
            return
        fd = os.open(existing, _DIRECTORY_FLAGS)
        try:
            for name in reversed(missing):
                child = _make_private_directory(fd, name)
                if child is None:
                    state, child = _open_child(fd, name)
                    if state is not ChildState.DIRECTORY or child is None:
                        raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
                os.close(fd)
                fd = child
        finally:
            close_quietly(fd)
    except MemoryOperationError:
        raise
    except OSError:
        raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None


def _open_directories(root: Path, names: RelativePath, *, create: bool) -> int:
    """Open ``root/names...`` step by step without following symlinks below the root.

    Missing steps are created (0700) when ``create``; otherwise a missing step means the
    record vanished since it was read, which is a write conflict.
    """
    try:
        fd = os.open(root, _DIRECTORY_FLAGS)
    except OSError:
        raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    try:
        for name in names:
            state, child = _open_child(fd, name)
            if state is ChildState.MISSING:
                if not create:
                    raise _error(ErrorCode.WRITE_CONFLICT)
                child = _make_private_directory(fd, name)
                if child is None:  # created concurrently by hand: open what is there now
                    state, child = _open_child(fd, name)
            if child is None:
                # A symlink, a non-directory or an unreadable entry: never written through.
                raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
            os.close(fd)
            fd = child
    except MemoryOperationError:
        close_quietly(fd)
        raise
    except OSError:
        close_quietly(fd)
        raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    return fd


def _unlink_quietly(dir_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=dir_fd)


def _write_temp(dir_fd: int, final_name: str, data: bytes) -> str:
    """Write ``data`` to a fresh private temp file beside the target and fsync it."""
    stem = final_name.removesuffix(RECORD_SUFFIX)
    for _ in range(_TEMP_ATTEMPTS):
        name = f".{stem}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(name, _TEMP_FLAGS, FILE_MODE, dir_fd=dir_fd)
        except FileExistsError:
            continue
        except OSError:
            raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        try:
            try:
                os.fchmod(fd, FILE_MODE)
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            _unlink_quietly(dir_fd, name)
            raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        return name
    raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)


def _digest_on_disk(dir_fd: int, name: str) -> bytes | None:
    try:
        _, data = _read_candidate(dir_fd, name, MAX_RECORD_BYTES)
    except UnreadableCandidate:
        return None
    return file_digest(data)


def _stamp(dir_fd: int, name: str) -> FileStamp | None:
    try:
        return FileStamp.of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except OSError:
        return None


class RecordWriter:
    """Create, replace and delete canonical record files of one indexed root."""

    def __init__(self, index: MemoryIndex) -> None:
        self._index = index
        self._root = index.root

    def _remember_written(self, dir_fd: int, parts: RelativePath, data: bytes) -> None:
        stamp = _stamp(dir_fd, parts[-1])
        if stamp is None:
            self._index.invalidate(parts)
        else:
            self._index.note_written(parts, stamp, data)

    def create(self, parts: RelativePath, data: bytes) -> None:
        """Publish a new record file exclusively; ``write_conflict`` if the name exists."""
        dir_fd = _open_directories(self._root, parts[:-1], create=True)
        try:
            name = parts[-1]
            temp = _write_temp(dir_fd, name, data)
            try:
                try:
                    os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    raise _error(ErrorCode.WRITE_CONFLICT) from None
                except OSError:
                    raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                try:
                    os.fsync(dir_fd)
                except OSError:
                    # The record is linked but may not survive a crash; a retry finds it
                    # as a duplicate, so the caller is told the source misbehaved.
                    self._index.invalidate(parts)
                    raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            finally:
                _unlink_quietly(dir_fd, temp)
            self._remember_written(dir_fd, parts, data)
        finally:
            os.close(dir_fd)

    def replace(self, parts: RelativePath, expected_digest: bytes, data: bytes) -> None:
        """Atomically replace a record whose bytes still hash to ``expected_digest``."""
        dir_fd = _open_directories(self._root, parts[:-1], create=False)
        try:
            name = parts[-1]
            temp = _write_temp(dir_fd, name, data)
            replaced = False
            try:
                if _digest_on_disk(dir_fd, name) != expected_digest:
                    self._index.invalidate(parts)
                    raise _error(ErrorCode.WRITE_CONFLICT)
                try:
                    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except OSError:
                    raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                replaced = True
            finally:
                if not replaced:
                    _unlink_quietly(dir_fd, temp)
            try:
                os.fsync(dir_fd)
            except OSError:
                self._index.invalidate(parts)
                raise _error(ErrorCode.REPLACEMENT_OUTCOME_UNCERTAIN) from None
            self._remember_written(dir_fd, parts, data)
        finally:
            os.close(dir_fd)

    def delete(self, parts: RelativePath, expected_digest: bytes) -> None:
        """Unlink a record whose bytes still hash to ``expected_digest``; no tombstone."""
        dir_fd = _open_directories(self._root, parts[:-1], create=False)
        try:
            name = parts[-1]
            if _digest_on_disk(dir_fd, name) != expected_digest:
                self._index.invalidate(parts)
                raise _error(ErrorCode.WRITE_CONFLICT)
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                self._index.invalidate(parts)
                raise _error(ErrorCode.WRITE_CONFLICT) from None
            except OSError:
                raise _error(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            self._index.invalidate(parts)
            try:
                os.fsync(dir_fd)
            except OSError:
                raise _error(ErrorCode.DELETION_OUTCOME_UNCERTAIN) from None
        finally:
            os.close(dir_fd)
