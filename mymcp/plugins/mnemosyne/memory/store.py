"""The files under the memory root: the record file format, no-follow access, bounded
candidate walks, inotify change notification, the root's mutation lock and atomic,
durable writes with their temp-file hygiene.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import stat
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

from anyio import from_thread

from mymcp._safefile import create_private_directories, create_private_directory
from mymcp._strictjson import StrictJsonError, load_strict_json

from .model import (
    CONTENT_MAX,
    LABEL_MAX,
    LIFECYCLE_STATES,
    MAX_DIRECTORY_DEPTH,
    MEMORY_KINDS,
    NAMESPACE_KINDS,
    ORIGINS,
    RECORD_SUFFIX,
    RECORDED_VIA,
    REVISION_MAX,
    TITLE_MAX,
    Collection,
    ErrorCode,
    Lifecycle,
    MemoryOperationError,
    MemoryRecord,
    MemoryRecordV1,
    MemoryRecordV2,
    Namespace,
    Provenance,
    RelativePath,
    Scope,
    candidate_limit_exceeded,
    is_identifier,
    is_legacy_id,
    is_memory_id,
    is_timestamp,
    kind_requires_occurred_at,
    normalize_bounded_text,
    normalize_language,
    normalize_tags,
    parse_scope,
)

# -- record files: strict decoding and the one canonical serialiser ------------------------

MAX_RECORD_BYTES = 64 * 1024
# A v2 record nests two levels deep; far deeper JSON is no record and only costs walks.
MAX_RECORD_DEPTH = 8

_V1_REQUIRED = frozenset({"schema_version", "id", "content"})
_V1_ALLOWED = _V1_REQUIRED | {"title", "tags"}
_V2_REQUIRED = frozenset(
    {
        "schema_version",
        "id",
        "scope",
        "namespace",
        "collection",
        "kind",
        "language",
        "title",
        "content",
        "tags",
        "provenance",
        "lifecycle",
        "created_at",
        "updated_at",
    }
)
_V2_ALLOWED = _V2_REQUIRED | {"occurred_at"}


class SkipReason(StrEnum):
    """Why discovery passed over a file; the only detail ever logged about it."""

    SYMLINK = "symlink"
    TOO_DEEP = "too_deep"
    UNREADABLE = "unreadable"
    OVERSIZED = "oversized"
    INVALID_ENCODING = "invalid_encoding"
    INVALID_JSON = "invalid_json"
    INVALID_RECORD = "invalid_record"
    PATH_MISMATCH = "path_mismatch"
    UNSAFE_PERMISSIONS = "unsafe_permissions"
    NOT_A_DIRECTORY = "not_a_directory"  # a file where a namespace or collection would be
    NOT_A_FILE = "not_a_file"  # a directory named as a record file is


class RecordRejected(ValueError):
    """A file's bytes are not a valid record; ``reason`` says which layer failed."""

    def __init__(self, reason: SkipReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


class _Invalid(Exception):
    """Internal short-circuit for the first failed field check."""


def _require(condition: bool) -> None:
    if not condition:
        raise _Invalid


def _exact_int(value: object, minimum: int, maximum: int) -> int:
    # bool is an int subclass, and 2.0 is not an integer token: both are rejected.
    if type(value) is not int or not minimum <= value <= maximum:
        raise _Invalid
    return value


def _text(value: object, maximum: int) -> str:
    text = normalize_bounded_text(value, maximum)
    if text is None:
        raise _Invalid
    return text


def _optional_text(value: object, maximum: int) -> str | None:
    return None if value is None else _text(value, maximum)


def _object(value: object, keys: frozenset[str]) -> dict[str, Any]:
    if type(value) is not dict or value.keys() != keys:
        raise _Invalid
    return value


def _parse_v1(body: dict[str, Any]) -> MemoryRecordV1:
    _require(_V1_REQUIRED <= body.keys() <= _V1_ALLOWED)
    _require(is_legacy_id(body["id"]))
    tags = None
    if "tags" in body:
        tags = normalize_tags(body["tags"], minimum=1)
        _require(tags is not None)
    return MemoryRecordV1(
        id=body["id"],
        content=_text(body["content"], CONTENT_MAX),
        title=_optional_text(body.get("title"), TITLE_MAX),
        tags=tags,
    )


def _parse_v2(body: dict[str, Any]) -> MemoryRecordV2:
    _require(_V2_REQUIRED <= body.keys() <= _V2_ALLOWED)
    _require(is_memory_id(body["id"]))
    scope = parse_scope(body["scope"])
    if scope is None:
        raise _Invalid
    ns = _object(body["namespace"], frozenset({"kind", "id", "label"}))
    _require(ns["kind"] in NAMESPACE_KINDS[scope] and is_identifier(ns["id"]))
    namespace = Namespace(ns["kind"], ns["id"], _optional_text(ns["label"], LABEL_MAX))
    collection = None
    if body["collection"] is not None:
        col = _object(body["collection"], frozenset({"id", "label"}))
        _require(is_identifier(col["id"]))
        collection = Collection(col["id"], _optional_text(col["label"], LABEL_MAX))
    kind = body["kind"]
    _require(type(kind) is str and kind in MEMORY_KINDS[scope])
    # Stored languages are already normalised strings; null is only a request-side spelling.
    language = body["language"]
    _require(type(language) is str and normalize_language(language) == language)
    tags = normalize_tags(body["tags"], minimum=0)
    if tags is None:
        raise _Invalid
    prov = _object(body["provenance"], frozenset({"origin", "recorded_via"}))
    _require(prov["origin"] in ORIGINS and prov["recorded_via"] in RECORDED_VIA)
    life = _object(body["lifecycle"], frozenset({"state", "revision"}))
    _require(life["state"] in LIFECYCLE_STATES)
    revision = _exact_int(life["revision"], 1, REVISION_MAX)
    created, updated = body["created_at"], body["updated_at"]
    # The strict form sorts chronologically as text, so string comparison is exact.
    _require(is_timestamp(created) and is_timestamp(updated) and updated >= created)
    occurred = body.get("occurred_at")
    _require(("occurred_at" in body) == kind_requires_occurred_at(kind))
    _require(occurred is None or is_timestamp(occurred))
    return MemoryRecordV2(
        id=body["id"],
        scope=scope,
        namespace=namespace,
        collection=collection,
        kind=kind,
        language=language,
        title=_optional_text(body["title"], TITLE_MAX),
        content=_text(body["content"], CONTENT_MAX),
        tags=tags,
        provenance=Provenance(prov["origin"], prov["recorded_via"]),
        lifecycle=Lifecycle(life["state"], revision),
        created_at=created,
        updated_at=updated,
        occurred_at=occurred,
    )


def parse_record(data: bytes) -> MemoryRecord:
    """Decode one record file, raising :class:`RecordRejected` with the failing layer.

    Text fields are normalised on the way in, so a hand-edited file with stray CRLF or
    surrounding blanks still reads; the serialiser then writes the canonical form.
    """
    if len(data) > MAX_RECORD_BYTES:
        raise RecordRejected(SkipReason.OVERSIZED)
    if data.startswith(b"\xef\xbb\xbf"):
        raise RecordRejected(SkipReason.INVALID_ENCODING)
    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        raise RecordRejected(SkipReason.INVALID_ENCODING) from None
    try:
        body = load_strict_json(text, max_depth=MAX_RECORD_DEPTH)
    except StrictJsonError:
        raise RecordRejected(SkipReason.INVALID_JSON) from None
    try:
        _require(type(body) is dict)
        version = body.get("schema_version")
        if type(version) is int and version == 1:
            return _parse_v1(body)
        if type(version) is int and version == 2:
            return _parse_v2(body)
        raise _Invalid
    except _Invalid:
        raise RecordRejected(SkipReason.INVALID_RECORD) from None


def serialize_record(record: MemoryRecordV2) -> bytes:
    """The canonical file bytes of a record, refused unless they read back identically."""
    data = (json.dumps(record.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        again = parse_record(data)
    except RecordRejected as exc:
        raise ValueError("record does not serialise to a valid file") from exc
    if again != record or len(data) > MAX_RECORD_BYTES:
        raise ValueError("record is not in canonical form")
    return data


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
    is not a readable directory makes the source unavailable.
    """
    try:
        return os.open(root, _DIRECTORY_FLAGS)
    except FileNotFoundError:
        return None
    except OSError:
        raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None


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


def file_id(parts: RelativePath) -> str:
    """A short, stable name for the file at root-relative ``parts`` that reveals nothing
    of the path: logs use it, and `mymcp memory check` prints it next to the path."""
    return hashlib.sha256("/".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def log_skip(parts: RelativePath, reason: SkipReason) -> None:
    """Report a passed-over entry by scope, file id and reason: logs stay content-free."""
    _store_log.warning(
        "skipped scope=%s file=%s reason=%s", parts[0] if parts else "-", file_id(parts), reason
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


def _is_the_lock_file(root: Path, fd: int) -> bool:
    """Whether ``fd`` is still the file named as the root's lock file."""
    try:
        named = os.lstat(root / LOCK_FILE_NAME)
    except OSError:
        return False
    held = os.fstat(fd)
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


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
                if _is_the_lock_file(root, fd):
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


# -- inotify change notification -----------------------------------------------------------

# <sys/inotify.h>
IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_CLOSE_WRITE = 0x00000008
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ISDIR = 0x40000000
IN_ONLYDIR = 0x01000000
IN_EXCL_UNLINK = 0x04000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

# Everything that can change what a directory lists or what a listed file holds.
# IN_ATTRIB covers chmod (readability) and utime; atime updates from our own reads do
# not raise it. IN_EXCL_UNLINK: an unlinked file still held open elsewhere is gone for us.
WATCH_MASK = (
    IN_CREATE
    | IN_DELETE
    | IN_MODIFY
    | IN_CLOSE_WRITE
    | IN_MOVED_FROM
    | IN_MOVED_TO
    | IN_ATTRIB
    | IN_DELETE_SELF
    | IN_MOVE_SELF
    | IN_ONLYDIR
    | IN_EXCL_UNLINK
)

_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_SIZE = 64 * 1024
# Events that say something happened to a watched directory as a whole, or to the queue.
_RESCAN_MASK = IN_Q_OVERFLOW | IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | IN_ISDIR


@dataclass(slots=True)
class Changes:
    """What one drain of the event queue saw.

    ``entries`` are the (watched directory parts, entry name) pairs named by events about
    non-directory entries; ``rescan`` is set when some event cannot be attributed to one
    such entry, so only a full walk can tell what changed.
    """

    rescan: bool = False
    entries: set[tuple[RelativePath, str]] = field(default_factory=set)


# statfs f_type of local filesystems, where every change goes through this kernel and
# so raises inotify events. Anything else (NFS, SMB, FUSE, 9p, Ceph, ...) can change
# behind our back: the index then always walks.
_LOCAL_FILESYSTEMS = frozenset(
    {
        0xEF53,  # ext2/3/4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0x858458F6,  # ramfs
        0x794C7630,  # overlayfs
        0x2FC12FC1,  # zfs
        0xF2F52010,  # f2fs
        0xCA451A4E,  # bcachefs
        0x52654973,  # reiserfs
        0x3153464A,  # jfs
        0x4D44,  # vfat
        0x2011BAB0,  # exfat
        0x5346544E,  # ntfs
        0x7366746E,  # ntfs3
        0x482B,  # hfsplus
    }
)


@functools.cache
def load_libc() -> Any | None:
    """libc through ctypes with the inotify entry points typed, or None where unusable."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # here, not at import time: only a built index needs it

        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1.argtypes = [ctypes.c_int]
        libc.inotify_init1.restype = ctypes.c_int
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_add_watch.restype = ctypes.c_int
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.inotify_rm_watch.restype = ctypes.c_int
        libc.fstatfs.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fstatfs.restype = ctypes.c_int
    except (ImportError, OSError, AttributeError):
        return None
    return libc


class Watcher:
    """One inotify instance watching the directories of one memory root.

    Callers serialise all use (the index does, under its lock). ``watch`` arms a
    directory from an open descriptor, ``drain`` consumes the queue and reports which
    entries the events named (or that a walk is needed). The descriptor is closed by
    :meth:`close` or, at the latest, when the watcher is garbage collected.
    """

    def __init__(self, libc: Any, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        # Watch descriptor -> root-relative parts of the directory it was placed on.
        self._watches: dict[int, RelativePath] = {}
        self._local_devices: dict[int, bool] = {}
        self._finalizer = weakref.finalize(self, _close, fd)
        self.broken = False

    @classmethod
    def create(cls) -> Watcher | None:
        """A new watcher, or None where inotify is unavailable."""
        libc = load_libc()
        if libc is None:
            return None
        try:
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except Exception:  # a libc without the entry point: no fast path
            return None
        if fd < 0:  # EMFILE (max_user_instances), ENOSYS, ...
            return None
        return cls(libc, fd)

    def close(self) -> None:
        self.broken = True
        self._watches.clear()
        self._finalizer()

    def watch(self, dir_fd: int, parts: RelativePath = ()) -> bool:
        """Watch the directory open as ``dir_fd`` (at ``parts`` under the root); False when
        it cannot be (walk each call).

        The watch is placed through ``/proc/self/fd``: the magic link names exactly the
        directory we opened without following symlinks, so no lookup by path can be raced
        into watching something else. (That is also why inotify's don't-follow flag is
        not set here: it would watch the magic link itself.) Watching a directory twice
        returns the same descriptor, so re-arming after each walk is cheap.
        """
        if self.broken:
            return False
        try:
            device = os.fstat(dir_fd).st_dev
        except OSError:
            return False
        local = self._local_devices.get(device)
        if local is None:
            local = self._local_devices[device] = self._is_local(dir_fd)
        if not local:
            return False
        path = f"/proc/self/fd/{dir_fd}".encode()
        wd = self._libc.inotify_add_watch(self._fd, path, WATCH_MASK)
        if wd < 0:
            # ENOSPC (max_user_watches), ENOENT (no /proc), EACCES, ...: not armed.
            return False
        # Re-watching a directory returns the same descriptor; the latest parts win.
        self._watches[wd] = parts
        return True

    def drain(self) -> Changes | None:
        """Consume every queued event; None when there was none.

        Watches the kernel dropped (IN_IGNORED) or that followed a directory elsewhere
        (IN_MOVE_SELF) are forgotten so the next walk re-arms what it visits. A read
        failure other than "nothing queued" marks the watcher broken (and asks for a
        rescan).
        """
        if self.broken:
            return Changes(rescan=True)
        changes: Changes | None = None
        while True:
            try:
                data = os.read(self._fd, _READ_SIZE)
            except BlockingIOError:
                return changes
            except InterruptedError:
                continue
            except OSError:
                self.broken = True
                return Changes(rescan=True)
            if not data:
                return changes
            if changes is None:
                changes = Changes()
            self._collect(data, changes)

    def _collect(self, data: bytes, changes: Changes) -> None:
        offset, size = 0, _EVENT.size
        watches = self._watches
        while offset + size <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            name = data[offset + size : offset + size + length].rstrip(b"\0")
            offset += size + length
            if mask & IN_IGNORED:
                watches.pop(wd, None)
            elif mask & (IN_MOVE_SELF | IN_DELETE_SELF) and wd in watches:
                # The kernel sends IN_IGNORED after a deletion; a moved directory keeps
                # its watch wherever it went, so drop it ourselves.
                del watches[wd]
                self._libc.inotify_rm_watch(self._fd, wd)
            parts = watches.get(wd)
            if mask & _RESCAN_MASK or parts is None or not name:
                # The queue, a watch or a directory as a whole changed (or an event about
                # the directory itself, e.g. its permissions): only a walk can tell.
                changes.rescan = True
            else:
                changes.entries.add((parts, os.fsdecode(name)))

    def _is_local(self, dir_fd: int) -> bool:
        # struct statfs starts with f_type (a C long on every Linux ABI that matters; on
        # others the value read is garbage, which is "not local": the safe answer).
        import ctypes

        buffer = ctypes.create_string_buffer(256)
        if self._libc.fstatfs(dir_fd, buffer) != 0:
            return False
        f_type = ctypes.c_long.from_buffer(buffer).value & 0xFFFFFFFF
        return f_type in _LOCAL_FILESYSTEMS


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
