"""The one safe reader for every small file MyMCP trusts (config, verifier, manifests, settings).

Rules (D14): the immediate parent directory and the file are opened without following
symlinks, the file is read relative to the directory descriptor, permission bits are
checked, reads are bounded, and the file's identity is checked before and after the read.
Callers map the neutral `SafeFileReason` onto their own stable error vocabulary.
"""

from __future__ import annotations

import enum
import errno
import os
import stat
from pathlib import Path

from mymcp.errors import MyMCPError

__all__ = ["SafeFileError", "SafeFileReason", "read_safe_file"]

_CHUNK = 16384


class SafeFileReason(enum.StrEnum):
    MISSING = "missing"
    UNSAFE_PATH = "unsafe_path"
    NOT_REGULAR = "not_regular"
    UNSAFE_PERMISSIONS = "unsafe_permissions"
    UNREADABLE = "unreadable"
    TOO_LARGE = "too_large"
    CHANGED = "source_changed"


class SafeFileError(MyMCPError):
    """A trusted file could not be read safely; `reason` says why, never where."""

    def __init__(self, reason: SafeFileReason) -> None:
        super().__init__(reason.value, "MyMCP could not read a trusted file safely")
        self.reason = reason


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


def _check_permissions(st: os.stat_result, *, private: bool) -> None:
    if os.name != "posix":
        return
    forbidden = 0o077 if private else 0o022
    if st.st_mode & forbidden:
        raise SafeFileError(SafeFileReason.UNSAFE_PERMISSIONS)


def _open_parent(parent: Path) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(parent, flags)
    except FileNotFoundError:
        raise SafeFileError(SafeFileReason.MISSING) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise SafeFileError(SafeFileReason.UNSAFE_PATH) from None
        raise SafeFileError(SafeFileReason.UNREADABLE) from None


def read_safe_file(path: Path, *, max_bytes: int, private: bool = False) -> bytes:
    """Read at most `max_bytes` from `path` under the safe-source rules.

    `private=True` demands a file with no group or world bits at all (credential files);
    otherwise group- or world-writable files are refused. The parent directory must never
    be group- or world-writable. Raises `SafeFileError`, with `MISSING` when the file or
    its directory does not exist (callers decide whether that means defaults).
    """
    dir_fd = _open_parent(path.parent)
    try:
        dir_stat = os.fstat(dir_fd)
        if not stat.S_ISDIR(dir_stat.st_mode):
            raise SafeFileError(SafeFileReason.UNSAFE_PATH)
        _check_permissions(dir_stat, private=False)
        try:
            before = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise SafeFileError(SafeFileReason.MISSING) from None
        except OSError:
            raise SafeFileError(SafeFileReason.UNREADABLE) from None
        if stat.S_ISLNK(before.st_mode):
            raise SafeFileError(SafeFileReason.UNSAFE_PATH)
        if not stat.S_ISREG(before.st_mode):
            raise SafeFileError(SafeFileReason.NOT_REGULAR)
        _check_permissions(before, private=private)
        return _read_opened(dir_fd, path.name, before, max_bytes, private=private)
    finally:
        os.close(dir_fd)


def _read_opened(
    dir_fd: int, name: str, before: os.stat_result, max_bytes: int, *, private: bool
) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise SafeFileError(SafeFileReason.CHANGED) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SafeFileError(SafeFileReason.UNSAFE_PATH) from None
        if exc.errno == errno.EISDIR:
            raise SafeFileError(SafeFileReason.NOT_REGULAR) from None
        raise SafeFileError(SafeFileReason.UNREADABLE) from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise SafeFileError(SafeFileReason.CHANGED)
        if not stat.S_ISREG(opened.st_mode):
            raise SafeFileError(SafeFileReason.NOT_REGULAR)
        _check_permissions(opened, private=private)  # a chmod between stat and open
        if opened.st_size > max_bytes:
            raise SafeFileError(SafeFileReason.TOO_LARGE)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            except OSError:
                raise SafeFileError(SafeFileReason.UNREADABLE) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the size checked above was within bounds: it grew
                raise SafeFileError(SafeFileReason.CHANGED)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if _identity(after) != _identity(opened) or len(data) != opened.st_size:
        raise SafeFileError(SafeFileReason.CHANGED)
    try:
        again = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        raise SafeFileError(SafeFileReason.CHANGED) from None
    if (again.st_dev, again.st_ino) != (opened.st_dev, opened.st_ino):
        raise SafeFileError(SafeFileReason.CHANGED)
    return data
