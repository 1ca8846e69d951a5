"""The one safe reader for every small file MyMCP trusts (config, verifier, manifests, settings),
the one atomic writer of the private files it keeps (verifier, console state, index
snapshot, audit key), and the one maker of the directories it keeps them in.

Rules: the immediate parent directory and the file are opened without following
symlinks, the file is read relative to the directory descriptor, the owner and the
permission bits of both are checked, reads are bounded, and the file's identity is checked
before and after the read.
A refusal names its reason, the path at fault (the file or its directory) and, for the
operator's terminal, what to do; `as_error` turns it into a caller's error type, which is
the only place a reason becomes a code.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import TypeVar

from mymcp.errors import Location, MyMCPError

__all__ = [
    "SafeFileError",
    "SafeFileReason",
    "as_error",
    "create_private_directories",
    "create_private_directory",
    "create_private_file",
    "names_open_file",
    "read_safe_file",
    "replace_private_file",
]

_CHUNK = 16384


class SafeFileReason(enum.StrEnum):
    MISSING = "missing"
    UNSAFE_PATH = "unsafe_path"
    NOT_REGULAR = "not_regular"
    UNSAFE_PERMISSIONS = "unsafe_permissions"
    UNREADABLE = "unreadable"
    TOO_LARGE = "too_large"
    CHANGED = "source_changed"


_DETAILS: dict[SafeFileReason, str] = {
    SafeFileReason.MISSING: "no such file or directory",
    SafeFileReason.UNSAFE_PATH: "a symlink, or a path component that is not a directory",
    SafeFileReason.NOT_REGULAR: "not a regular file",
    SafeFileReason.UNSAFE_PERMISSIONS: "writable by group or others, or owned by another user",
    SafeFileReason.UNREADABLE: "cannot be read",
    SafeFileReason.TOO_LARGE: "larger than allowed",
    SafeFileReason.CHANGED: "changed while it was being read; try again",
}


class SafeFileError(MyMCPError):
    """A trusted file could not be read safely: `reason` says why, `location` where."""

    def __init__(self, reason: SafeFileReason, path: Path, detail: str | None = None) -> None:
        super().__init__(
            reason.value,
            "MyMCP could not read a trusted file safely",
            location=Location(source=str(path)),
            detail=detail or _DETAILS[reason],
        )
        self.reason = reason


_Error = TypeVar("_Error", bound=MyMCPError)


def as_error(failure: SafeFileError, error_type: type[_Error], prefix: str = "") -> _Error:
    """`failure` in the vocabulary of `error_type`: the code is `prefix` plus the reason
    (a missing file counts as `unreadable`); where and what carry over unchanged."""
    reason = (
        SafeFileReason.UNREADABLE if failure.reason is SafeFileReason.MISSING else failure.reason
    )
    return error_type(prefix + reason.value, location=failure.location, detail=failure.detail)


def _identity(st: os.stat_result) -> tuple[int, int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode)


# The owner a user namespace shows for a file whose owner has no id inside it.
_OVERFLOW_UID = 65534


def _check_owner(st: os.stat_result, path: Path) -> None:
    # Whoever owns a file or directory can chmod it and rewrite it whatever its mode bits
    # say, so a trusted one must be ours. Root may own it too: root could change it anyway.
    me = os.geteuid()
    if st.st_uid in (me, 0):
        return
    if stat.S_ISDIR(st.st_mode):
        what, risk = "directory", "who could replace the files in it"
    else:
        what, risk = "file", "who could rewrite it"
    if me == 0 and st.st_uid == _OVERFLOW_UID:
        remedy = (
            "that uid is nobody, or a user outside this user namespace (root, seen from a "
            "rootless container): keep it where the user MyMCP runs as owns it"
        )
    elif me == 0:
        # Handing a user's own file to root would lock that user out of it, so running
        # MyMCP as its owner comes first.
        remedy = (
            f"run MyMCP as its owner (uid {st.st_uid}), or, if only root should change it, "
            f"give it to root: chown 0 {path}"
        )
    else:
        remedy = f"it must belong to you (uid {me}) or root: as root, run: chown {me} {path}"
    detail = (
        f"the {what} is owned by another user (uid {st.st_uid}), {risk} whatever its mode; "
        + remedy
    )
    raise SafeFileError(SafeFileReason.UNSAFE_PERMISSIONS, path, detail)


def _check_permissions(st: os.stat_result, path: Path, *, private: bool) -> None:
    if os.name != "posix":
        return
    _check_owner(st, path)
    forbidden = 0o077 if private else 0o022
    if st.st_mode & forbidden:
        mode = stat.S_IMODE(st.st_mode)
        if stat.S_ISDIR(st.st_mode):
            detail = f"the directory is writable by group or others (mode {mode:04o}); "
            detail += f"run: chmod go-w {path}"
        elif private:
            detail = (
                f"the file must be private, but group or others have access (mode "
                f"{mode:04o}); run: chmod 600 {path}"
            )
        else:
            detail = f"the file is writable by group or others (mode {mode:04o}); "
            detail += f"run: chmod go-w {path}"
        raise SafeFileError(SafeFileReason.UNSAFE_PERMISSIONS, path, detail)


def _open_parent(path: Path) -> int:
    parent = path.parent
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(parent, flags)
    except FileNotFoundError:
        # Named by the file asked for, not by its directory: an operator reading the
        # directory's path alone would take it for the file's.
        detail = f"the directory it would be in, {parent}, does not exist"
        raise SafeFileError(SafeFileReason.MISSING, path, detail) from None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            detail = "the directory is a symlink, or a component of its path is not a directory"
            raise SafeFileError(SafeFileReason.UNSAFE_PATH, parent, detail) from None
        raise SafeFileError(SafeFileReason.UNREADABLE, parent, exc.strerror) from None


def read_safe_file(path: Path, *, max_bytes: int, private: bool = False) -> bytes:
    """Read at most `max_bytes` from `path` under the safe-source rules.

    `private=True` demands a file with no group or world bits at all (credential files);
    otherwise group- or world-writable files are refused. The parent directory must never
    be group- or world-writable, and neither it nor the file may be owned by anyone but
    the effective user or root (`UNSAFE_PERMISSIONS` too). Raises `SafeFileError`, with
    `MISSING` when the file or its directory does not exist (callers decide whether that
    means defaults).
    """
    dir_fd = _open_parent(path)
    try:
        dir_stat = os.fstat(dir_fd)
        if not stat.S_ISDIR(dir_stat.st_mode):
            raise SafeFileError(SafeFileReason.UNSAFE_PATH, path.parent)
        _check_permissions(dir_stat, path.parent, private=False)
        try:
            before = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            raise SafeFileError(SafeFileReason.MISSING, path) from None
        except OSError as exc:
            raise SafeFileError(SafeFileReason.UNREADABLE, path, exc.strerror) from None
        if stat.S_ISLNK(before.st_mode):
            detail = "the file is a symlink; point to the real file instead"
            raise SafeFileError(SafeFileReason.UNSAFE_PATH, path, detail)
        if not stat.S_ISREG(before.st_mode):
            raise SafeFileError(SafeFileReason.NOT_REGULAR, path)
        _check_permissions(before, path, private=private)
        return _read_opened(dir_fd, path, before, max_bytes, private=private)
    finally:
        os.close(dir_fd)


def _read_opened(
    dir_fd: int, path: Path, before: os.stat_result, max_bytes: int, *, private: bool
) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path.name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise SafeFileError(SafeFileReason.CHANGED, path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SafeFileError(SafeFileReason.UNSAFE_PATH, path) from None
        if exc.errno == errno.EISDIR:
            raise SafeFileError(SafeFileReason.NOT_REGULAR, path) from None
        raise SafeFileError(SafeFileReason.UNREADABLE, path, exc.strerror) from None
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
            raise SafeFileError(SafeFileReason.CHANGED, path)
        if not stat.S_ISREG(opened.st_mode):
            raise SafeFileError(SafeFileReason.NOT_REGULAR, path)
        _check_permissions(opened, path, private=private)  # a chmod between stat and open
        if opened.st_size > max_bytes:
            detail = f"{opened.st_size} bytes; at most {max_bytes} are read"
            raise SafeFileError(SafeFileReason.TOO_LARGE, path, detail)
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(_CHUNK, max_bytes + 1 - total))
            except OSError as exc:
                raise SafeFileError(SafeFileReason.UNREADABLE, path, exc.strerror) from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:  # the size checked above was within bounds: it grew
                raise SafeFileError(SafeFileReason.CHANGED, path)
        after = os.fstat(fd)
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if _identity(after) != _identity(opened) or len(data) != opened.st_size:
        raise SafeFileError(SafeFileReason.CHANGED, path)
    try:
        again = os.stat(path.name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        raise SafeFileError(SafeFileReason.CHANGED, path) from None
    if (again.st_dev, again.st_ino) != (opened.st_dev, opened.st_ino):
        raise SafeFileError(SafeFileReason.CHANGED, path)
    return data


_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def replace_private_file(dir_fd: int, name: str, data: bytes, *, durable: bool = True) -> None:
    """Replace `name` in the directory `dir_fd` with a private file (mode 0600, whatever
    the umask) holding `data`, atomically: a reader sees the old file or the new one,
    never part of either, and a symlink at `name` is replaced, never followed.

    The data goes to `.<name>.<pid>.<random>.tmp` first, which is removed again when
    anything fails (the pid lets an owner sweep what a killed process left). `durable`
    fsyncs the file before the rename and the directory after it; a cache that can be
    rebuilt skips both.
    """
    _put_private_file(dir_fd, name, data, durable=durable, replace=True)


def create_private_file(dir_fd: int, name: str, data: bytes) -> None:
    """Create `name` in `dir_fd` as a private file holding `data`, durably, unless
    something already exists at that name (then FileExistsError, and nothing changes).

    Atomic like `replace_private_file`: a process that finds the file finds all of it,
    never the empty or half-written file that creating it in place would show to a
    second process starting at the same moment.
    """
    _put_private_file(dir_fd, name, data, durable=True, replace=False)


def _put_private_file(dir_fd: int, name: str, data: bytes, *, durable: bool, replace: bool) -> None:
    temporary = f".{name}.{os.getpid()}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temporary, _CREATE_FLAGS, 0o600, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            # A hard link is never made over an existing name, unlike a rename.
            os.link(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            os.unlink(temporary, dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise
    if durable:
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
            os.fsync(dir_fd)


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def create_private_directory(parent_fd: int, name: str) -> int | None:
    """Create the directory `name` in `parent_fd` with mode 0700 exactly, whatever the
    umask, and return a descriptor on it; None when something already exists at that
    name (it is left as it is).
    """
    try:
        os.mkdir(name, 0o700, dir_fd=parent_fd)
    except FileExistsError:
        return None
    fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        # The umask may have narrowed the mode (0277 leaves 0500, which not even we could
        # write to); the directory is new and ours, so its mode is set exactly.
        os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        os.fsync(parent_fd)  # so that the new entry itself survives a crash
    return fd


def create_private_directories(path: Path) -> None:
    """Create `path` and every missing directory above it, each private (mode 0700,
    whatever the umask): `Path.mkdir(mode=..., parents=True)` gives the mode to the last
    one only and leaves the others to the umask.

    Directories that already exist are the user's and keep their mode; the existing
    ones may be reached through symlinks, the new ones never are. A directory another
    process makes meanwhile is used as it is. Raises OSError naming the path at fault
    (NotADirectoryError when a file is in the way).
    """
    missing: list[str] = []
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        missing.append(existing.name)
        existing = existing.parent
    fd = os.open(existing, _DIRECTORY_FLAGS)
    try:
        for name in reversed(missing):
            child = create_private_directory(fd, name)
            if child is None:
                child = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=fd)
            parent, fd = fd, child
            os.close(parent)
    finally:
        os.close(fd)


def names_open_file(path: Path, fd: int) -> bool:
    """Whether `path` (not followed) still names the file open as `fd`: a lock file that
    was removed or replaced since it was opened is no longer the one others lock."""
    try:
        named = os.lstat(path)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)
