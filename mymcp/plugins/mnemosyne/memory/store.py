"""The files under the memory root: no-follow access, bounded candidate walks, the root's
mutation lock and atomic, durable writes with their temp-file hygiene.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from anyio import from_thread

from mymcp._safefile import (
    create_private_directories,
    create_private_directory,
    names_open_file,
)

from .model import (
    MAX_DIRECTORY_DEPTH,
    RECORD_SUFFIX,
    ErrorCode,
    MemoryOperationError,
    RelativePath,
    Scope,
    candidate_limit_exceeded,
    is_identifier,
    is_memory_id,
)
from .records import MAX_RECORD_BYTES, SkipReason

# -- no-follow access below the root: directory handles and bounded reads ------------------

_DIRECTORY_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
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
    UNSAFE = "unsafe"  # a directory others may write to, or another user's


class UnreadableCandidate(Exception):
    """A candidate file could not be read safely; ``reason`` is the bounded skip reason."""

    def __init__(self, reason: SkipReason, stamp: FileStamp | None = None) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.stamp = stamp


def open_root(root: Path) -> int | None:
    """Open the memory root (the operator may point it through a symlink) or None if absent.

    Never creates anything: a missing root simply holds no records. A root that exists but
    is not a readable directory makes the source unavailable, and so does a symlink on its
    way that leads nowhere (a volume not mounted, a moved directory): its memories exist
    somewhere, and answering "none" would pass an empty backup or recall for the truth.
    """
    try:
        return os.open(root, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        if dangling_link_on(root) is not None:
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        return None
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None


def dangling_link_on(path: Path) -> Path | None:
    """`path` or the directory above it that is a symlink whose target does not exist,
    if one is. The first entry on the way up that is there at all decides: everything
    above it resolves, or it would not have been reached."""
    for step in (path, *path.parents):
        if os.path.lexists(step):
            return step if os.path.islink(step) and not os.path.exists(step) else None
    return None


def unsafe_permissions(info: os.stat_result) -> bool:
    """Whether a file or directory below the root is writable by group or others, or
    belongs to another user: then anyone else may have put its contents there, and it is
    neither read nor written through."""
    return bool(info.st_mode & 0o022) or info.st_uid != os.geteuid()


def open_child_directory(parent_fd: int, name: str) -> tuple[ChildState, int | None]:
    """Open ``name`` under ``parent_fd`` as a directory without following a symlink.

    A directory with unsafe permissions is not opened (``UNSAFE``).
    """
    try:
        fd = os.open(name, _DIRECTORY_FLAGS | os.O_NOFOLLOW, dir_fd=parent_fd)
    except FileNotFoundError:
        return ChildState.MISSING, None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            return ChildState.UNREADABLE, None
    else:
        return _checked_directory(fd)
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


def _checked_directory(fd: int) -> tuple[ChildState, int | None]:
    try:
        unsafe = unsafe_permissions(os.fstat(fd))
    except OSError:
        os.close(fd)
        return ChildState.UNREADABLE, None
    if unsafe:
        os.close(fd)
        return ChildState.UNSAFE, None
    return ChildState.DIRECTORY, fd


def close_quietly(fd: int | None) -> None:
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def read_at_most(fd: int, limit: int, chunk_size: int = _READ_CHUNK) -> bytes | None:
    """The rest of an open file, or None when it holds more than ``limit`` bytes.

    One byte past the bound is read, so a file that grew after its fstat is caught.
    """
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(chunk_size, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return None if total > limit else b"".join(chunks)


def write_private(fd: int, data: bytes) -> None:
    """Make a file this process just created private (mode 0600, whatever the umask
    did) and write all of ``data`` to it."""
    os.fchmod(fd, FILE_MODE)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_candidate(dir_fd: int, name: str, max_bytes: int) -> tuple[FileStamp, bytes]:
    """Read one regular file of at most ``max_bytes`` without following symlinks; one
    with unsafe permissions is not read.

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
        if unsafe_permissions(info):
            raise UnreadableCandidate(SkipReason.UNSAFE_PERMISSIONS, stamp)
        if info.st_size > max_bytes:
            raise UnreadableCandidate(SkipReason.OVERSIZED, stamp)
        data = read_at_most(fd, max_bytes)
        if data is None:
            raise UnreadableCandidate(SkipReason.OVERSIZED, stamp)
        return stamp, data
    except OSError:
        raise UnreadableCandidate(SkipReason.UNREADABLE) from None
    finally:
        os.close(fd)


# -- bounded candidate walks under a scope -------------------------------------------------

_store_log = logging.getLogger("mymcp.memory.store")


def file_id(parts: RelativePath, key: bytes) -> str:
    """A short, stable name for the file at root-relative ``parts`` that reveals nothing
    of the path to whoever lacks ``key`` (this user's, see `snapshot.file_key`): logs use
    it, and `mymcp memory check` prints it next to the path. An unkeyed digest would not
    do: namespace ids and hand-made file names are words, and trying a list of words
    against it gives the path back."""
    path = "/".join(parts).encode("utf-8", "surrogateescape")
    return hmac.new(key, path, hashlib.sha256).hexdigest()[:12]


def log_skip(parts: RelativePath, reason: SkipReason, key: bytes) -> None:
    """Report a passed-over entry by scope, file id and reason: logs stay content-free."""
    _store_log.warning(
        "skipped scope=%s file=%s reason=%s",
        parts[0] if parts else "-",
        file_id(parts, key),
        reason,
    )


@dataclass(slots=True)
class WalkStats:
    """Counts gathered during one walk; also enforces the candidate bound.

    ``temps`` collects the writer's temporary files met on the way (directory parts,
    name), so they can be swept; ``skips`` the entries passed over that are not candidate
    files (links, directories too deep or unreadable), with their root-relative parts.
    The caller decides which of them are news worth a log line.
    """

    scope: Scope
    limit: int
    candidates: int = 0
    temps: list[tuple[RelativePath, str]] = field(default_factory=list)
    skips: list[tuple[RelativePath, SkipReason]] = field(default_factory=list)

    def skip(self, parts: RelativePath, reason: SkipReason) -> None:
        self.skips.append((parts, reason))


# Called once per candidate ``*.json`` entry that is not a symlink: the open parent
# directory handle (valid only during the call), the directory's root-relative parts,
# the entry name and its lstat result (None when even that failed).
CandidateVisitor = Callable[[int, RelativePath, str, "os.stat_result | None"], None]
# Called with every directory handle a walk opens (root and scope included), right after
# opening and before listing it, with its root-relative parts: the change watcher arms
# itself there, so nothing can change unseen between the listing and the watch.
DirectoryHook = Callable[[int, RelativePath], None]


def open_container(
    root: Path,
    parts: RelativePath,
    stats: WalkStats,
    on_directory: DirectoryHook | None = None,
) -> int | None:
    """Open ``root/parts...`` one no-follow step at a time.

    None when any step is missing, a symlink or a directory with unsafe permissions
    (skipped, and noted in ``stats``); a step that exists but is not a readable directory
    makes the whole source unavailable.
    """
    fd = open_root(root)
    if fd is not None and on_directory is not None:
        on_directory(fd, ())
    for depth, name in enumerate(parts, 1):
        if fd is None:
            return None
        state, child = open_child_directory(fd, name)
        close_quietly(fd)
        fd = child
        if fd is not None and on_directory is not None:
            on_directory(fd, parts[:depth])
        if state is ChildState.SYMLINK:
            stats.skip(parts[:depth], SkipReason.SYMLINK)
        elif state is ChildState.UNSAFE:
            stats.skip(parts[:depth], SkipReason.UNSAFE_PERMISSIONS)
        elif state in (ChildState.NOT_DIRECTORY, ChildState.UNREADABLE):
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    return fd


def walk_candidates(
    fd: int,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    *,
    recursive: bool,
    on_directory: DirectoryHook | None = None,
) -> None:
    """Visit candidate files under an open directory at ``depth`` below the scope.

    Raises ``candidate_limit_exceeded`` as soon as the bound is passed, so no partial
    view ever escapes. The top directory failing to list makes the source unavailable.
    A visitor rather than a generator: one call per file is markedly cheaper than
    resuming a chain of nested generators on large roots.
    """
    _walk(fd, prefix, depth, stats, visit, on_directory, recursive=recursive, top=True)


def _walk(
    fd: int,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    on_directory: DirectoryHook | None,
    *,
    recursive: bool,
    top: bool,
) -> None:
    try:
        with os.scandir(fd) as iterator:
            entries = list(iterator)
    except OSError:
        if top:
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        stats.skip(prefix, SkipReason.UNREADABLE)
        return
    suffix, limit = RECORD_SUFFIX, stats.limit
    for entry in entries:
        name = entry.name
        if name.endswith(suffix):
            # Record-looking names need an lstat anyway; its mode answers the rest.
            try:
                info: os.stat_result | None = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since the listing (another process forgot it): no file
            except OSError:
                info = None
            if info is not None and stat.S_ISLNK(info.st_mode):
                stats.skip((*prefix, name), SkipReason.SYMLINK)
            elif info is not None and stat.S_ISDIR(info.st_mode):
                if recursive and is_memory_id(name[: -len(suffix)]):
                    # Named as a canonical record file is: a record replaced by a
                    # directory, reported rather than lost unseen. (Legacy records may sit
                    # in directories of any name, `notes.json` included: those are read.)
                    stats.skip((*prefix, name), SkipReason.NOT_A_FILE)
                elif recursive:
                    _descend(fd, name, prefix, depth + 1, stats, visit, on_directory)
            else:
                stats.candidates += 1
                if stats.candidates > limit:
                    raise candidate_limit_exceeded(limit)
                visit(fd, prefix, name, info)
            continue
        try:
            is_link = entry.is_symlink()
            is_dir = not is_link and entry.is_dir(follow_symlinks=False)
        except OSError:
            stats.skip((*prefix, name), SkipReason.UNREADABLE)
            continue
        if is_link:
            # A link's target is never examined, so in a one-level listing only links
            # that look like record files are worth reporting.
            if recursive:
                stats.skip((*prefix, name), SkipReason.SYMLINK)
        elif is_dir:
            if recursive:
                _descend(fd, name, prefix, depth + 1, stats, visit, on_directory)
        elif is_temp_name(name):
            stats.temps.append((prefix, name))
        elif recursive and len(prefix) <= 2 and is_identifier(name):
            # Where a namespace (or a collection) directory of that id would be: while it
            # is there, that container can be neither read nor written.
            stats.skip((*prefix, name), SkipReason.NOT_A_DIRECTORY)


def _descend(
    fd: int,
    name: str,
    prefix: RelativePath,
    depth: int,
    stats: WalkStats,
    visit: CandidateVisitor,
    on_directory: DirectoryHook | None,
) -> None:
    parts = (*prefix, name)
    if depth > MAX_DIRECTORY_DEPTH:
        stats.skip(parts, SkipReason.TOO_DEEP)
        return
    state, child = open_child_directory(fd, name)
    if child is None:
        if state is ChildState.SYMLINK:
            stats.skip(parts, SkipReason.SYMLINK)
        elif state is ChildState.UNSAFE:
            stats.skip(parts, SkipReason.UNSAFE_PERMISSIONS)
        elif state is not ChildState.MISSING:
            stats.skip(parts, SkipReason.UNREADABLE)
        return
    try:
        if on_directory is not None:
            on_directory(child, parts)
        _walk(child, parts, depth, stats, visit, on_directory, recursive=True, top=False)
    finally:
        close_quietly(child)


# -- the mutation lock of one root ---------------------------------------------------------

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
        _log_unusable_lock()
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    finally:
        os.close(root_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            _log_unusable_lock()
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _log_unusable_lock() -> None:
    # The write's own log line says only that the source is unavailable; this one says
    # where to look (the checks name the file and what is there).
    _store_log.warning("root_lock outcome=unusable file=%s", LOCK_FILE_NAME)


# The mutation call a worker thread runs for, and whether it was withdrawn while the
# mutation waited for the lock (its client cancelled it): set by whoever runs mutations
# on worker threads, read where the waiting ends, so that a withdrawn call writes nothing.
WITHDRAWN: ContextVar[threading.Event | None] = ContextVar("mnemosyne_withdrawn", default=None)


def _withdrawn() -> bool:
    """Whether the call this thread works for was withdrawn: its event was set, or,
    on one of anyio's worker threads, the task waiting for it was cancelled (a stdio
    client's cancellation, or the call's time running out)."""
    event = WITHDRAWN.get()
    if event is not None and event.is_set():
        return True
    try:
        from_thread.check_cancelled()
    except RuntimeError:  # not an anyio worker thread (a command's own work)
        return False
    except BaseException:  # that task's cancellation, raised here to say so
        return True
    return False


LOCK_TIMEOUT_SECONDS: Final = 5.0
# Polling interval bounds while another process holds the lock: short at first so a
# brief holder costs little, capped so a long one is not polled in a tight loop.
_FIRST_POLL: Final = 0.001
_LAST_POLL: Final = 0.05


@contextlib.contextmanager
def root_lock(root: Path, timeout: float = LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold the exclusive mutation lock of ``root`` (which must exist) for the block.

    Waits at most ``timeout`` seconds (0: one attempt) for other threads and processes,
    then raises ``memory_busy``, a retryable refusal that changed nothing. Raises
    ``memory_source_unavailable`` when the root or its lock file cannot be opened.
    Reads never take this lock.
    """
    deadline = time.monotonic() + timeout
    thread_lock = _thread_lock(root)
    if not thread_lock.acquire(timeout=max(timeout, 0.0)):
        raise MemoryOperationError(ErrorCode.MEMORY_BUSY)
    try:
        fd = _open_lock_file(root)
        try:
            pause = _FIRST_POLL
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or _withdrawn():
                        raise MemoryOperationError(ErrorCode.MEMORY_BUSY) from None
                    time.sleep(min(pause, remaining))
                    pause = min(pause * 2, _LAST_POLL)
                    continue
                except OSError:
                    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                if names_open_file(root / LOCK_FILE_NAME, fd):
                    break
                if time.monotonic() >= deadline:  # swapped again and again: give up
                    raise MemoryOperationError(ErrorCode.MEMORY_BUSY)
                # The file was removed or replaced since it was opened (by hand, while
                # another writer held it): a lock on it keeps out no one who opens the
                # file now in its place, so that one is locked instead.
                replaced, fd = fd, -1
                os.close(replaced)
                fd = _open_lock_file(root)
            if _withdrawn():  # withdrawn while waiting: nothing is written (closing unlocks)
                raise MemoryOperationError(ErrorCode.MEMORY_BUSY)
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            if fd >= 0:  # -1 when reopening the swapped file failed
                os.close(fd)
    finally:
        thread_lock.release()


# -- atomic, durable writes ----------------------------------------------------------------

FILE_MODE: Final = 0o600
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMP_ATTEMPTS: Final = 16


def file_digest(data: bytes) -> bytes:
    """The fingerprint compared before a replace or delete (SHA-256 of the file bytes)."""
    return hashlib.sha256(data).digest()


def ensure_root(root: Path) -> None:
    """Create the memory root and any missing ancestors (mode 0700) if it does not exist.

    The root and its ancestors are the operator's choice and may be reached through
    symlinks; only what lies below the root is held to the no-symlink rule.
    """
    if not root.is_absolute():
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
    try:
        create_private_directories(root)
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None


def _open_directories(root: Path, names: RelativePath, *, create: bool) -> int:
    """Open ``root/names...`` step by step without following symlinks below the root.

    Missing steps are created (0700) when ``create``; otherwise a missing step means the
    record vanished since it was read, which is a write conflict.
    """
    try:
        fd = os.open(root, _DIRECTORY_FLAGS)
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    try:
        for name in names:
            state, child = open_child_directory(fd, name)
            if state is ChildState.MISSING:
                if not create:
                    raise MemoryOperationError(ErrorCode.WRITE_CONFLICT)
                child = create_private_directory(fd, name)
                if child is None:  # created concurrently by hand: open what is there now
                    state, child = open_child_directory(fd, name)
            if child is None:
                # A symlink, a non-directory or an unreadable entry: never written through.
                raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
            os.close(fd)
            fd = child
    except MemoryOperationError:
        close_quietly(fd)
        raise
    except OSError:
        close_quietly(fd)
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    return fd


def probe_directories(root: Path, names: RelativePath) -> None:
    """Raise as `_open_directories` would when creating ``root/names...``, without
    creating or changing anything: a rehearsed write must fail where the write would (a
    file, link or unreadable entry in its way), and pass where only steps are missing."""
    fd = open_root(root)
    if fd is None:
        if os.path.lexists(root):  # a link to nothing: no directory can be made there
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
        return  # the write would create the root and everything below it
    try:
        for name in names:
            state, child = open_child_directory(fd, name)
            if state is ChildState.MISSING:
                return
            if child is None:
                raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)
            os.close(fd)
            fd = child
    finally:
        close_quietly(fd)


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
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        try:
            try:
                write_private(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError:
            _unlink_quietly(dir_fd, name)
            raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
        return name
    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE)


def _remove_all_temps(dir_fd: int) -> None:
    """List the directory and remove every temp file in it (called under the lock)."""
    try:
        with os.scandir(dir_fd) as iterator:
            names = [entry.name for entry in iterator if is_temp_name(entry.name)]
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
    for name in names:
        _unlink_quietly(dir_fd, name)


def _digest_on_disk(dir_fd: int, name: str) -> bytes | None:
    try:
        _, data = read_candidate(dir_fd, name, MAX_RECORD_BYTES)
    except UnreadableCandidate:
        return None
    return file_digest(data)


def _stamp(dir_fd: int, name: str) -> FileStamp | None:
    try:
        return FileStamp.of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
    except OSError:
        return None


# The writer's temporary files: ``.<record stem>.<16 hex>.tmp`` beside the record. Only
# names of this exact shape are ever swept, never anything else in the tree.
_TEMP_NAME: Final = re.compile(r"\.mem_[0-9a-f]{32}\.[0-9a-f]{16}\.tmp\Z")


def is_temp_name(name: str) -> bool:
    """Whether ``name`` is one of the writer's temporary files."""
    return _TEMP_NAME.match(name) is not None


def sweep_temps(root: Path, entries: Iterable[tuple[RelativePath, str]]) -> int:
    """Remove the named temporary files left by interrupted writes; returns how many.

    Call only while holding the root lock: every writer of the root writes its temp files
    under that lock, so none of them can be in use. Missing files are ignored.
    """
    removed = 0
    by_directory: dict[RelativePath, list[str]] = {}
    for directory, name in entries:
        if is_temp_name(name):
            by_directory.setdefault(directory, []).append(name)
    for directory, names in by_directory.items():
        try:
            fd = _open_directories(root, directory, create=False)
        except MemoryOperationError:
            continue
        try:
            for name in names:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=fd)
                    removed += 1
        finally:
            os.close(fd)
    return removed


class IndexedRoot(Protocol):
    """The read index a writer keeps coherent: its root and its coherence hooks."""

    @property
    def root(self) -> Path: ...

    def invalidate(self, parts: RelativePath) -> None: ...

    def note_written(self, parts: RelativePath, stamp: FileStamp, data: bytes) -> None: ...

    def take_temps(self, directory: RelativePath) -> list[str]:
        """The temporary files the index saw in ``directory``; it forgets them."""
        ...


class RecordWriter:
    """Create, replace and delete canonical record files of one indexed root."""

    def __init__(self, index: IndexedRoot) -> None:
        self._index = index
        self._root = index.root

    def _sweep(self, dir_fd: int, directory: RelativePath) -> None:
        """Remove the temp files interrupted writes left in the directory written to."""
        for name in self._index.take_temps(directory):
            if is_temp_name(name):
                _unlink_quietly(dir_fd, name)

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
            self._sweep(dir_fd, parts[:-1])
            name = parts[-1]
            temp = _write_temp(dir_fd, name, data)
            try:
                try:
                    os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
                except FileExistsError:
                    raise MemoryOperationError(ErrorCode.WRITE_CONFLICT) from None
                except OSError:
                    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                try:
                    os.fsync(dir_fd)
                except OSError:
                    # The record is linked but may not survive a crash; a retry finds it
                    # as a duplicate, so the caller is told the source misbehaved.
                    self._index.invalidate(parts)
                    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            finally:
                _unlink_quietly(dir_fd, temp)
            self._remember_written(dir_fd, parts, data)
        finally:
            os.close(dir_fd)

    def replace(self, parts: RelativePath, expected_digest: bytes, data: bytes) -> None:
        """Atomically replace a record whose bytes still hash to ``expected_digest``."""
        dir_fd = _open_directories(self._root, parts[:-1], create=False)
        try:
            self._sweep(dir_fd, parts[:-1])
            name = parts[-1]
            temp = _write_temp(dir_fd, name, data)
            replaced = False
            try:
                if _digest_on_disk(dir_fd, name) != expected_digest:
                    self._index.invalidate(parts)
                    raise MemoryOperationError(ErrorCode.WRITE_CONFLICT)
                try:
                    os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
                except OSError:
                    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                replaced = True
            finally:
                if not replaced:
                    _unlink_quietly(dir_fd, temp)
            try:
                os.fsync(dir_fd)
            except OSError:
                self._index.invalidate(parts)
                raise MemoryOperationError(ErrorCode.REPLACEMENT_OUTCOME_UNCERTAIN) from None
            self._remember_written(dir_fd, parts, data)
        finally:
            os.close(dir_fd)

    def delete(self, parts: RelativePath, expected_digest: bytes) -> None:
        """Unlink a record whose bytes still hash to ``expected_digest``; no tombstone.

        Every temp file beside it goes too: an interrupted write of this record may have
        left its full text in one, and forgetting must leave no copy behind.
        """
        dir_fd = _open_directories(self._root, parts[:-1], create=False)
        try:
            self._sweep(dir_fd, parts[:-1])
            _remove_all_temps(dir_fd)
            name = parts[-1]
            if _digest_on_disk(dir_fd, name) != expected_digest:
                self._index.invalidate(parts)
                raise MemoryOperationError(ErrorCode.WRITE_CONFLICT)
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                self._index.invalidate(parts)
                raise MemoryOperationError(ErrorCode.WRITE_CONFLICT) from None
            except OSError:
                raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            self._index.invalidate(parts)
            try:
                os.fsync(dir_fd)
            except OSError:
                raise MemoryOperationError(ErrorCode.DELETION_OUTCOME_UNCERTAIN) from None
        finally:
            os.close(dir_fd)
