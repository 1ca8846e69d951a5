"""No-follow filesystem access under the memory root: directory handles and bounded reads."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from enum import Enum
from pathlib import Path
from typing import NamedTuple

from ._record_format import SkipReason
from .model import ErrorCode, MemoryOperationError

__all__ = [
    "ChildState",
    "FileStamp",
    "UnreadableCandidate",
    "close_quietly",
    "open_child_directory",
    "open_root",
    "read_candidate",
]

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
# O_NONBLOCK keeps a FIFO named *.json from hanging the read; fstat then rejects it.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_CHUNK = 16 * 1024


class FileStamp(NamedTuple):
    """Identity, size and change times: when all are equal the bytes are assumed equal.

    A named tuple rather than a dataclass because one is built per file per call and
    compared with C-level tuple equality.
    """

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, result: os.stat_result) -> FileStamp:
        return cls(
            result.st_dev, result.st_ino, result.st_size, result.st_mtime_ns, result.st_ctime_ns
        )


class ChildState(Enum):
    """What a named entry under an open directory turned out to be."""

    DIRECTORY = "directory"
    MISSING = "missing"
    SYMLINK = "symlink"
    NOT_DIRECTORY = "not_directory"
    UNREADABLE = "unreadable"


class UnreadableCandidate(Exception):
    """A candidate file could not be read safely; ``reason`` is the bounded skip reason."""

    def __init__(self, reason: SkipReason, stamp: FileStamp | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.stamp = stamp


def _unavailable() -> MemoryOperationError:
    return MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)


def open_root(root: Path) -> int | None:
    """Open the memory root (the operator may point it through a symlink) or None if absent.

    Never creates anything: a missing root simply holds no records. A root that exists but
    is not a readable directory makes the source unavailable.
    """
    try:
        return os.open(root, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        return None
    except OSError:
        raise _unavailable() from None


def open_child_directory(parent_fd: int, name: str) -> tuple[ChildState, int | None]:
    """Open ``name`` under ``parent_fd`` as a directory without following a symlink."""
    try:
        return ChildState.DIRECTORY, os.open(
            name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd
        )
    except FileNotFoundError:
        return ChildState.MISSING, None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return ChildState.UNREADABLE, None
    # ELOOP and ENOTDIR are both possible for a symlink depending on the platform, so the
    # entry itself decides which of the two it was.
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return ChildState.MISSING, None
    except OSError:
        return ChildState.UNREADABLE, None
    if stat.S_ISLNK(info.st_mode):
        return ChildState.SYMLINK, None
    return ChildState.NOT_DIRECTORY, None


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def read_candidate(dir_fd: int, name: str, max_bytes: int) -> tuple[FileStamp, bytes]:
    """Read one regular file of at most ``max_bytes`` without following symlinks.

    The stamp comes from the open handle, so it describes exactly the bytes returned.
    """
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        reason = SkipReason.SYMLINK if exc.errno == errno.ELOOP else SkipReason.UNREADABLE
        raise UnreadableCandidate(reason) from None
    try:
        info = os.fstat(fd)
        stamp = FileStamp.of(info)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableCandidate(SkipReason.UNREADABLE, stamp)
        if info.st_size > max_bytes:
            raise UnreadableCandidate(SkipReason.OVERSIZED, stamp)
        chunks: list[bytes] = []
        total = 0
        # Read one byte past the bound so a file that grew after fstat is still caught.
        while total <= max_bytes:
            chunk = os.read(fd, min(_READ_CHUNK, max_bytes + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > max_bytes:
            raise UnreadableCandidate(SkipReason.OVERSIZED, stamp)
        return stamp, b"".join(chunks)
    except OSError:
        raise UnreadableCandidate(SkipReason.UNREADABLE) from None
    finally:
        os.close(fd)
