"""The in-process record index of one memory root, revalidated against the files each call.

Files stay the source of truth (decision D9). A call either proves that nothing under
the selection changed since its last complete walk, or walks again:

* Fast path (Linux): every directory a walk opens is watched with inotify before it is
  listed (``_watch``). While no event has been queued since that walk, the directories
  and the files in them are as the walk left them, so its result is returned without
  touching the disk. The kernel queues an event before the changing system call
  returns, so an edit made before a call is always seen by that call.
* Stat walk (everywhere, and whenever the proof is missing: any event, a queue
  overflow, a directory that could not be watched, a root that changed identity, a
  multiply linked file, a network filesystem): list the selected directories and stat
  each candidate; a file is only re-read when its stamp changed, and only re-parsed when
  its bytes changed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from . import _filesystem, _record_format
from ._discovery import DirectoryHook, WalkStats, log_skip, open_container, walk_candidates
from ._errors import ErrorCode, MemoryOperationError
from ._filesystem import FileStamp, UnreadableCandidate, close_quietly
from ._paths import RelativePath, location_agrees
from ._record_format import MAX_RECORD_BYTES, RecordRejected, SkipReason
from ._records import MemoryRecord, MemoryRecordV2
from ._scopes import Scope
from ._terms import RankCandidate, RecordTerms, extract_record_terms
from ._watch import Watcher

__all__ = ["IndexedRecord", "MemoryIndex", "ScanResult"]

# A stamp only proves "unchanged" once the file's mtime is safely older than the moment we
# read it; otherwise a same-size rewrite within one timestamp tick would go unnoticed.
# Two seconds covers the coarsest common filesystem clocks.
_SETTLE_NS = 2_000_000_000
# Selections whose last scan result is kept for reuse (namespaces, collections, scopes).
_MAX_REMEMBERED = 64
_T = TypeVar("_T")
_Selection = tuple[RelativePath, bool, bool]


@dataclass(frozen=True, slots=True)
class IndexedRecord:
    """A valid record at its location, with its file digest and cached recall terms."""

    parts: RelativePath
    scope: Scope
    record: MemoryRecord
    digest: bytes
    candidate: RankCandidate

    @property
    def terms(self) -> RecordTerms:
        return self.candidate.terms

    @property
    def scope_relative_path(self) -> str:
        return self.candidate.path


@dataclass(frozen=True, slots=True)
class _Entry:
    stamp: FileStamp
    trusted: bool
    digest: bytes | None
    outcome: IndexedRecord | SkipReason


@dataclass(frozen=True, slots=True)
class ScanResult:
    """Valid selected records (unordered), plus bounded counts for logging.

    Equality compares the record tuples element by element, identity first, so an
    unchanged walk is recognised in one C-level pass.
    """

    records: tuple[IndexedRecord, ...]
    candidates: int = 0
    skipped: int = 0


class MemoryIndex:
    """Cached parse results for one memory root, keyed by root-relative path parts.

    ``watch`` (default) uses inotify change notification where available to skip walks
    while nothing changed; ``watch=False`` always walks. The inotify descriptor is
    closed by :meth:`close` or when the index is garbage collected.
    """

    def __init__(self, root: Path, *, watch: bool = True) -> None:
        self.root = root
        self._entries: dict[RelativePath, _Entry] = {}
        # The last result per selection, reused while a fresh walk finds the same records.
        self._results: dict[_Selection, ScanResult] = {}
        self._derived: dict[tuple[str, int], tuple[ScanResult, object]] = {}
        self._lock = threading.Lock()
        self._watcher = Watcher.create() if watch else None
        # Bumped on every observed change; a result is served without a walk only while
        # the generation its fully watched walk started in is still current.
        self._generation = 0
        self._watched: dict[_Selection, int] = {}
        # (st_dev, st_ino) of the root directory as the last walk opened it.
        self._root_identity: tuple[int, int] | None = None

    @property
    def watching(self) -> bool:
        """Whether change notification is active (otherwise every call walks)."""
        return self._watcher is not None

    def close(self) -> None:
        """Release the change watcher; later calls walk every time."""
        with self._lock:
            self._drop_watcher()

    # -- coherence hooks for writers -------------------------------------------------

    def invalidate(self, parts: RelativePath) -> None:
        """Forget whatever is cached for one file; the next call reads it afresh."""
        with self._lock:
            self._entries.pop(parts, None)
            self._generation += 1

    def note_written(self, parts: RelativePath, stamp: FileStamp, data: bytes) -> None:
        """Record bytes this process just wrote, so the next call need not re-parse them.

        The entry stays untrusted: the next call re-reads the file once and compares
        digests, which still notices a concurrent hand edit.
        """
        with self._lock:
            self._entries.pop(parts, None)
            self._entries[parts] = self._evaluate(parts, stamp, data, trusted=False)
            self._generation += 1

    def cached_paths(self) -> frozenset[RelativePath]:
        with self._lock:
            return frozenset(self._entries)

    # -- reads -----------------------------------------------------------------------

    def scan(
        self,
        scope: Scope,
        container: tuple[str, ...] = (),
        *,
        recursive: bool,
        candidate_limit: int,
        include_legacy: bool,
    ) -> ScanResult:
        """Collect valid records under ``<root>/<scope>/<container...>``.

        A missing or symlinked container holds nothing; one that is not a readable
        directory makes the source unavailable. More ``*.json`` candidates than the
        limit fails the whole call instead of returning a partial view.
        """
        prefix = (scope.value, *container)
        key = (prefix, recursive, include_legacy)
        stats = WalkStats(scope, candidate_limit)
        records: list[IndexedRecord] = []
        append = records.append
        entries = self._entries
        with self._lock:
            unchanged = self._unchanged(key)
            if unchanged is not None:
                if unchanged.candidates > candidate_limit:
                    raise MemoryOperationError(ErrorCode.CANDIDATE_LIMIT_EXCEEDED)
                return unchanged
            generation = self._generation
            # Stays true only if every directory of this walk was watched before listing.
            armed = [self._watcher is not None]
            on_directory = self._arming_hook(armed) if armed[0] else None
            fd = open_container(self.root, prefix, scope, on_directory)
            if fd is None:
                return ScanResult(())

            def visit(dir_fd: int, parts: RelativePath, info: os.stat_result | None) -> None:
                if info is None:
                    stats.skip(SkipReason.UNREADABLE)
                    return
                if info.st_nlink != 1:
                    # A hard link's writes through another directory raise no event here.
                    armed[0] = False
                # Hot path: an unchanged, settled file is served from the cache after one
                # tuple comparison (the same fields as FileStamp, without building one).
                cached = entries.get(parts)
                if (
                    cached is not None
                    and cached.trusted
                    and cached.stamp
                    == (
                        info.st_dev,
                        info.st_ino,
                        info.st_size,
                        info.st_mtime_ns,
                        info.st_ctime_ns,
                    )
                ):
                    outcome = cached.outcome
                else:
                    outcome = self._load(dir_fd, parts, info)
                if isinstance(outcome, SkipReason):
                    stats.skip(outcome)
                elif include_legacy or isinstance(outcome.record, MemoryRecordV2):
                    append(outcome)

            try:
                walk_candidates(
                    fd,
                    prefix,
                    len(container),
                    stats,
                    visit,
                    recursive=recursive,
                    on_directory=on_directory,
                )
            finally:
                close_quietly(fd)
            self._prune(prefix, stats.seen, recursive)
            result = ScanResult(tuple(records), stats.candidates, stats.skipped)
            if armed[0] and generation == self._generation:
                self._watched[key] = generation
            else:
                self._watched.pop(key, None)
            # While nothing changed, hand back the very same result object: consumers
            # (the recall ranker) key their derived state on its identity.
            previous = self._results.get(key)
            if previous is not None and previous == result:
                return previous
            if previous is not None:
                stale = id(previous)
                for slot in [slot for slot in self._derived if slot[1] == stale]:
                    del self._derived[slot]
            elif len(self._results) >= _MAX_REMEMBERED:
                self._results.clear()
                self._derived.clear()
                self._watched = {key: self._watched[key]} if key in self._watched else {}
            self._results[key] = result
            return result

    def _unchanged(self, key: _Selection) -> ScanResult | None:
        """The last result of ``key`` when no change can have happened since its walk."""
        watcher = self._watcher
        if watcher is None:
            return None
        if watcher.drain():
            self._generation += 1
            if watcher.broken:
                self._drop_watcher()
            return None
        previous = self._results.get(key)
        if previous is None or self._watched.get(key) != self._generation:
            return None
        # The root itself may be reached through a symlink the operator re-pointed, which
        # raises no event in the old tree: the root must still be the directory we watch.
        try:
            info = os.stat(self.root)
        except OSError:
            return None
        if (info.st_dev, info.st_ino) != self._root_identity:
            return None
        return previous

    def _arming_hook(self, armed: list[bool]) -> DirectoryHook:
        def on_directory(fd: int, parts: RelativePath) -> None:
            if not parts:
                try:
                    info = os.fstat(fd)
                except OSError:
                    armed[0] = False
                    return
                identity = (info.st_dev, info.st_ino)
                if identity != self._root_identity:
                    if self._root_identity is not None:
                        # A different root directory: the old watches describe another
                        # tree, and results from it must not be reused (bumps generation).
                        self._drop_watcher()
                        self._watcher = Watcher.create()
                    self._root_identity = identity
            watcher = self._watcher
            if watcher is None or not watcher.watch(fd):
                armed[0] = False

        return on_directory

    def _drop_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._watched.clear()
        self._generation += 1

    def derive(self, result: ScanResult, name: str, build: Callable[[ScanResult], _T]) -> _T:
        """``build(result)``, computed once per scan result object and reused after that.

        Because ``scan`` returns the identical object while a selection is unchanged,
        per-call consumers (recall's eligible-candidate list) are built only after a file
        changed. Values for replaced results are dropped.
        """
        with self._lock:
            slot = self._derived.get((name, id(result)))
            if slot is not None and slot[0] is result:
                return cast(_T, slot[1])
        value = build(result)
        with self._lock:
            if len(self._derived) >= _MAX_REMEMBERED:
                self._derived.clear()
            self._derived[(name, id(result))] = (result, value)
        return value

    def lookup(self, parts: RelativePath, scope: Scope) -> IndexedRecord | None:
        """The valid record at exactly ``parts``, or None; no directory listing at all."""
        with self._lock:
            fd = open_container(self.root, parts[:-1], scope)
            if fd is None:
                return None
            try:
                try:
                    info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    self._entries.pop(parts, None)
                    return None
                except OSError:
                    raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
                if stat.S_ISLNK(info.st_mode):
                    log_skip(scope, SkipReason.SYMLINK)
                    return None
                outcome = self._load(fd, parts, info)
            finally:
                close_quietly(fd)
        if isinstance(outcome, SkipReason):
            log_skip(scope, outcome)
            return None
        return outcome

    # -- internals -------------------------------------------------------------------

    def _load(
        self, fd: int, parts: RelativePath, info: os.stat_result
    ) -> IndexedRecord | SkipReason:
        stamp = FileStamp.of(info)
        cached = self._entries.get(parts)
        if cached is not None and cached.trusted and cached.stamp == stamp:
            return cached.outcome
        started = time.time_ns()
        if stat.S_ISLNK(info.st_mode):
            return SkipReason.SYMLINK
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            reason = (
                SkipReason.UNREADABLE if not stat.S_ISREG(info.st_mode) else SkipReason.OVERSIZED
            )
            self._store(parts, _Entry(stamp, _settled(stamp, started), None, reason))
            return reason
        try:
            stamp, data = _filesystem.read_candidate(fd, parts[-1], MAX_RECORD_BYTES)
        except UnreadableCandidate as exc:
            if exc.stamp is not None:
                self._store(
                    parts, _Entry(exc.stamp, _settled(exc.stamp, started), None, exc.reason)
                )
            else:
                self._entries.pop(parts, None)
            return exc.reason
        entry = self._evaluate(
            parts, stamp, data, trusted=_settled(stamp, started), previous=cached
        )
        self._store(parts, entry)
        return entry.outcome

    def _evaluate(
        self,
        parts: RelativePath,
        stamp: FileStamp,
        data: bytes,
        *,
        trusted: bool,
        previous: _Entry | None = None,
    ) -> _Entry:
        digest = hashlib.sha256(data).digest()
        if previous is not None and previous.digest == digest:
            # Same bytes at the same path: the earlier verdict still holds, skip the parse.
            return _Entry(stamp, trusted, digest, previous.outcome)
        return _Entry(stamp, trusted, digest, _interpret(parts, data, digest))

    def _store(self, parts: RelativePath, entry: _Entry) -> None:
        self._entries[parts] = entry

    def _prune(self, prefix: RelativePath, seen: set[RelativePath], recursive: bool) -> None:
        """Drop cached files under the walked container that the walk no longer saw."""
        # Pruning only bounds memory: cached entries are never served without a fresh stat
        # of the same path. So when the cache is no larger than this walk, skip the sweep.
        if len(self._entries) <= len(seen):
            return
        size = len(prefix)

        def selected(parts: RelativePath) -> bool:
            if parts[:size] != prefix:
                return False
            return recursive or len(parts) == size + 1

        stale = [parts for parts in self._entries if selected(parts) and parts not in seen]
        for parts in stale:
            del self._entries[parts]


def _settled(stamp: FileStamp, read_started_ns: int) -> bool:
    return stamp.mtime_ns < read_started_ns - _SETTLE_NS


def _interpret(parts: RelativePath, data: bytes, digest: bytes) -> IndexedRecord | SkipReason:
    scope = Scope(parts[0])
    parse: Callable[[bytes], MemoryRecord] = _record_format.parse_record
    try:
        record = parse(data)
    except RecordRejected as exc:
        return exc.reason
    if not location_agrees(parts, record):
        return SkipReason.PATH_MISMATCH
    relative = "/".join(parts[1:])
    candidate = RankCandidate(record.id, relative, extract_record_terms(record, relative))
    return IndexedRecord(parts, scope, record, digest, candidate)
