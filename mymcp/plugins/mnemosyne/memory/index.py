"""The in-process record index of one memory root, revalidated against the files each call.

Files stay the source of truth (decision D9). A call either proves that nothing under
the selection changed since its last complete walk, or walks again:

* Fast path (Linux): every directory a walk opens is watched with inotify before it is
  listed (``_watch``). While no event has been queued since that walk, the directories
  and the files in them are as the walk left them, so its result is returned without
  touching the disk. The kernel queues an event before the changing system call
  returns, so an edit made before a call is always seen by that call.
* Patch (Linux): events that each name one non-directory entry of a watched directory
  (a file written, added, removed or renamed, by hand or by this process's own writer)
  are applied to every proven selection that covers that directory: only the named
  entries are re-stat'ed, re-read when their stamp changed and re-parsed when their
  bytes changed. The selection keeps its proof, so such a change costs O(changed files)
  rather than a walk.
* Stat walk (everywhere, and whenever the proof is missing: an event that names no
  single entry (queue overflow, dropped or moved watch, unknown watch, a subdirectory
  created, removed or renamed, a watched directory's own attributes), a directory that
  could not be watched, a root that changed identity, a multiply linked file, a network
  filesystem, a named entry that could not be examined): list the selected directories
  and stat each candidate; a file is only re-read when its stamp changed, and only
  re-parsed when its bytes changed.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import stat
import struct
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from . import store
from .model import (
    RECORD_SUFFIX,
    ErrorCode,
    MemoryOperationError,
    MemoryRecord,
    MemoryRecordV2,
    RelativePath,
    Scope,
    location_agrees,
)
from .search import RankCandidate, RecordTerms
from .store import (
    MAX_RECORD_BYTES,
    DirectoryHook,
    FileStamp,
    RecordRejected,
    SkipReason,
    UnreadableCandidate,
    WalkStats,
    close_quietly,
    log_skip,
    open_container,
    walk_candidates,
)

# -- the index -----------------------------------------------------------------------------

# A stamp only proves "unchanged" once the file's mtime is safely older than the moment we
# read it; otherwise a same-size rewrite within one timestamp tick would go unnoticed.
# Two seconds covers the coarsest common filesystem clocks.
_SETTLE_NS = 2_000_000_000
# Selections whose last scan result is kept for reuse (namespaces, collections, scopes).
_MAX_REMEMBERED = 64
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _Entry:
    stamp: FileStamp
    trusted: bool
    digest: bytes | None
    outcome: IndexedRecord | SkipReason


class MemoryIndex:
    """Cached parse results for one memory root, keyed by root-relative path parts.

    ``watch`` (default) uses inotify change notification where available to skip walks
    while nothing changed and to patch results when single files changed; ``watch=False``
    always walks. The inotify descriptor is closed by :meth:`close` or when the index is
    garbage collected.
    """

    def __init__(self, root: Path, *, watch: bool = True) -> None:
        self.root = root
        self._entries: dict[RelativePath, _Entry] = {}
        # The last walk per selection, patched by change events and reused while current.
        self._views: dict[Selection, SelectionView] = {}
        # (name, selection) -> (the result a value was built for, the value).
        self._derived: dict[tuple[str, object], tuple[ScanResult, object]] = {}
        # selection -> (previous result, patched result, records removed, records added)
        # of the latest patch, so derived values can follow it without a full diff.
        self._deltas: dict[
            object,
            tuple[ScanResult, ScanResult, tuple[IndexedRecord, ...], tuple[IndexedRecord, ...]],
        ] = {}
        self._lock = threading.Lock()
        self._watcher = Watcher.create() if watch else None
        # Bumped on every change that only a walk can account for; a result is served
        # without a walk only while the generation its fully watched walk started in is
        # still current.
        self._generation = 0
        self._watched: dict[Selection, int] = {}
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
        """Forget whatever is cached for one file; the next call walks and reads it afresh."""
        with self._lock:
            self._entries.pop(parts, None)
            self._generation += 1

    def note_written(self, parts: RelativePath, stamp: FileStamp, data: bytes) -> None:
        """Record bytes this process just wrote, so the next call need not re-parse them.

        The entry stays untrusted: the next call re-reads the file once and compares
        digests, which still notices a concurrent hand edit. With change notification the
        write's own events make the next call examine exactly this file; without it every
        call walks anyway, so no walk is forced here.
        """
        with self._lock:
            self._entries.pop(parts, None)
            self._entries[parts] = self._evaluate(parts, stamp, data, trusted=False)
            if self._watcher is None:
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
        members: dict[RelativePath, Outcome] = {}
        selected: dict[RelativePath, IndexedRecord] = {}
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
                    members[parts] = SkipReason.UNREADABLE
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
                members[parts] = outcome
                if isinstance(outcome, SkipReason):
                    stats.skip(outcome)
                elif include_legacy or isinstance(outcome.record, MemoryRecordV2):
                    selected[parts] = outcome

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
            result = ScanResult(tuple(selected.values()), stats.candidates, stats.skipped, key)
            if armed[0] and generation == self._generation:
                self._watched[key] = generation
            else:
                self._watched.pop(key, None)
            # While nothing changed, hand back the very same result object: consumers
            # (the recall ranker, listing, duplicate detection) key their derived state on
            # its identity.
            previous = self._views.get(key)
            if previous is not None and previous.result == result:
                result = previous.result
            elif previous is None and len(self._views) >= _MAX_REMEMBERED:
                self._views.clear()
                self._derived.clear()
                self._deltas.clear()
                self._watched = {key: self._watched[key]} if key in self._watched else {}
            self._deltas.pop(key, None)
            self._views[key] = SelectionView(
                key, members, selected, stats.links, stats.skipped, result
            )
            return result

    def _unchanged(self, key: Selection) -> ScanResult | None:
        """The current result of ``key`` when no walk is needed to know it.

        Queued events are consumed first: those naming single entries patch every proven
        selection, anything else withdraws every proof.
        """
        watcher = self._watcher
        if watcher is None:
            return None
        # The root itself may be reached through a symlink the operator re-pointed, which
        # raises no event in the old tree: the root must still be the directory we watch.
        try:
            info = os.stat(self.root)
        except OSError:
            identity = None
        else:
            identity = (info.st_dev, info.st_ino)
        changes = watcher.drain()
        if identity is None or identity != self._root_identity:
            self._generation += 1
            if watcher.broken:
                self._drop_watcher()
            return None
        if changes is not None:
            if watcher.broken:
                self._drop_watcher()
                return None
            if changes.rescan or not self._patch(changes):
                self._generation += 1
                return None
        view = self._views.get(key)
        if view is None or self._watched.get(key) != self._generation:
            return None
        return view.result

    def _patch(self, changes: Changes) -> bool:
        """Apply events naming single entries to every proven selection covering them.

        False when some entry cannot be accounted for without a walk (then nothing is
        guaranteed about the views and the caller withdraws every proof).
        """
        generation = self._generation
        proven = [view for key, view in self._views.items() if self._watched.get(key) == generation]
        if not proven:
            return True
        wanted: dict[RelativePath, list[str]] = {}
        for directory, name in changes.entries:
            depth = len(directory)
            covered = False
            for view in proven:
                prefix = view.key[0]
                if view.covers(directory):
                    covered = True
                elif depth < len(prefix) and prefix[:depth] == directory and prefix[depth] == name:
                    return False  # the selection's own container (or an ancestor) changed
            if covered:
                wanted.setdefault(directory, []).append(name)
        if not wanted:
            return True
        examined: list[tuple[RelativePath, object]] = []
        for directory, names in wanted.items():
            states = self._examine(directory, names)
            if states is None:
                return False
            examined.extend(states)
        for view in proven:
            removed: list[IndexedRecord] = []
            added: list[IndexedRecord] = []
            before = (len(view.members), view.skipped)
            for parts, state in examined:
                if view.covers(parts[:-1]):
                    fresh = view.apply(parts, state, removed)
                    if fresh is not None:
                        added.append(fresh)
            if not removed and not added and before == (len(view.members), view.skipped):
                continue
            previous = view.result
            view.result = ScanResult(
                tuple(view.selected.values()), len(view.members), view.skipped, view.key
            )
            self._deltas[view.key] = (previous, view.result, tuple(removed), tuple(added))
        return True

    def _examine(
        self, directory: RelativePath, names: list[str]
    ) -> list[tuple[RelativePath, object]] | None:
        """The current state of each named entry of one directory; None if a walk must."""
        if not directory:
            return []  # the root holds scope directories only, never candidates
        fd: int | None = None
        try:
            scope = Scope(directory[0])
            fd = store.open_root(self.root)
            for name in directory:
                if fd is None:
                    return None
                _state, child = store.open_child_directory(fd, name)
                close_quietly(fd)
                fd = child
            if fd is None:
                return None
            states: list[tuple[RelativePath, object]] = []
            for name in names:
                parts = (*directory, name)
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    self._entries.pop(parts, None)
                    states.append((parts, None))
                    continue
                except OSError:
                    return None
                if stat.S_ISDIR(info.st_mode):
                    return None  # its own (queued or imminent) event asks for a walk
                if stat.S_ISLNK(info.st_mode):
                    self._entries.pop(parts, None)
                    log_skip(scope, SkipReason.SYMLINK)
                    states.append((parts, LINK))
                elif not name.endswith(RECORD_SUFFIX):
                    states.append((parts, None))
                elif info.st_nlink != 1:
                    return None  # hard links are only ever served by walks
                else:
                    outcome = self._load(fd, parts, info)
                    if isinstance(outcome, SkipReason):
                        log_skip(scope, outcome)
                    states.append((parts, outcome))
            return states
        except (MemoryOperationError, ValueError):
            return None
        finally:
            close_quietly(fd)

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
            if watcher is None or not watcher.watch(fd, parts):
                armed[0] = False

        return on_directory

    def _drop_watcher(self) -> None:
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        self._watched.clear()
        self._generation += 1

    def derive(
        self,
        result: ScanResult,
        name: str,
        build: Callable[[ScanResult], _T],
        update: Callable[[_T, Sequence[IndexedRecord], Sequence[IndexedRecord]], _T] | None = None,
    ) -> _T:
        """``build(result)``, computed once per scan result object and reused after that.

        Because ``scan`` returns the identical object while a selection is unchanged,
        per-call consumers (recall's eligible-candidate list) are built only after a file
        changed. With ``update``, a value built for an earlier result of the same
        selection is carried forward instead: ``update(old value, removed, added)`` gets
        the records that left and joined the result (by object identity) and must return
        a new value without changing the old one.
        """
        selection = result.selection
        slot_key = (name, id(result) if selection is None else selection)
        with self._lock:
            slot = self._derived.get(slot_key)
            if slot is not None and slot[0] is result:
                return cast(_T, slot[1])
            delta = self._deltas.get(selection) if selection is not None else None
        if slot is not None and update is not None and selection is not None:
            removed: Sequence[IndexedRecord]
            added: Sequence[IndexedRecord]
            if delta is not None and delta[0] is slot[0] and delta[1] is result:
                removed, added = delta[2], delta[3]
            else:
                removed, added = difference(slot[0].records, result.records)
            value = update(cast(_T, slot[1]), removed, added)
        else:
            value = build(result)
        with self._lock:
            if len(self._derived) >= _MAX_REMEMBERED * 4:
                self._derived.clear()
            self._derived[slot_key] = (result, value)
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
                    self._entries.pop(parts, None)
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
            stamp, data = store.read_candidate(fd, parts[-1], MAX_RECORD_BYTES)
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
        return _Entry(stamp, trusted, digest, interpret(parts, data, digest))

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


# -- scan results and selection views ------------------------------------------------------

# (directory prefix, recursive, include legacy records)
Selection = tuple[RelativePath, bool, bool]


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
class ScanResult:
    """Valid selected records (unordered), plus bounded counts for logging.

    Equality compares the record tuples element by element, identity first, so an
    unchanged walk is recognised in one C-level pass.
    """

    records: tuple[IndexedRecord, ...]
    candidates: int = 0
    skipped: int = 0
    # The selection this result describes (None for a result that is not kept); values
    # derived from an earlier result of the same selection may be patched, not rebuilt.
    selection: object = field(default=None, compare=False)


# Marks a symlinked entry in an examined directory (counted as a skip, never read).
LINK = object()
Outcome = IndexedRecord | SkipReason


@dataclass(slots=True, eq=False)
class SelectionView:
    """What the last complete walk of one selection found, kept current by patches.

    ``members`` holds the outcome of every candidate file, ``selected`` the members that
    make up the result, ``links`` the symlinked entries counted as skips.
    """

    key: Selection
    members: dict[RelativePath, Outcome]
    selected: dict[RelativePath, IndexedRecord]
    links: set[RelativePath]
    skipped: int
    result: ScanResult

    def covers(self, directory: RelativePath) -> bool:
        """Whether the walk of this selection listed ``directory``."""
        prefix, recursive, _ = self.key
        if recursive:
            return directory[: len(prefix)] == prefix
        return directory == prefix

    def apply(
        self, parts: RelativePath, state: object, removed: list[IndexedRecord]
    ) -> IndexedRecord | None:
        """Put the examined entry ``parts`` in ``state``; returns a record newly selected.

        ``state`` is None (absent or not a candidate), ``LINK`` or the file's outcome.
        A record that leaves the result is appended to ``removed``.
        """
        _, recursive, include_legacy = self.key
        members, selected = self.members, self.selected
        skipped = self.skipped
        old = members.pop(parts, None)
        if isinstance(old, SkipReason):
            skipped -= 1
        if parts in self.links:
            self.links.discard(parts)
            skipped -= 1
        before = selected.get(parts)
        after: IndexedRecord | None = None
        if state is LINK:
            if recursive or parts[-1].endswith(RECORD_SUFFIX):
                self.links.add(parts)
                skipped += 1
        elif isinstance(state, SkipReason):
            members[parts] = state
            skipped += 1
        elif isinstance(state, IndexedRecord):
            members[parts] = state
            if include_legacy or isinstance(state.record, MemoryRecordV2):
                after = state
        if after is None:
            selected.pop(parts, None)
        else:
            selected[parts] = after  # an existing key keeps its position
        if before is not None and before is not after:
            removed.append(before)
        self.skipped = skipped
        return after if after is not before else None


def difference(
    old: tuple[IndexedRecord, ...], new: tuple[IndexedRecord, ...]
) -> tuple[list[IndexedRecord], list[IndexedRecord]]:
    """Records of ``old`` missing from ``new`` and the reverse, by object identity."""
    before = {id(item): item for item in old}
    after = {id(item): item for item in new}
    removed = [item for key, item in before.items() if key not in after]
    added = [item for key, item in after.items() if key not in before]
    return removed, added


def interpret(parts: RelativePath, data: bytes, digest: bytes) -> IndexedRecord | SkipReason:
    scope = Scope(parts[0])
    parse: Callable[[bytes], MemoryRecord] = store.parse_record
    try:
        record = parse(data)
    except RecordRejected as exc:
        return exc.reason
    if not location_agrees(parts, record):
        return SkipReason.PATH_MISMATCH
    relative = "/".join(parts[1:])
    # Ranking terms are extracted on the first recall that needs them, not here.
    candidate = RankCandidate(record.id, relative, record=record)
    return IndexedRecord(parts, scope, record, digest, candidate)


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
IN_DONT_FOLLOW = 0x02000000
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

    @property
    def fileno(self) -> int:
        return self._fd

    @property
    def watch_count(self) -> int:
        return len(self._watches)

    def close(self) -> None:
        self.broken = True
        self._watches.clear()
        self._finalizer()

    def watch(self, dir_fd: int, parts: RelativePath = ()) -> bool:
        """Watch the directory open as ``dir_fd`` (at ``parts`` under the root); False when
        it cannot be (walk each call).

        The watch is placed through ``/proc/self/fd``: the magic link names exactly the
        directory we opened without following symlinks, so no lookup by path can be raced
        into watching something else. (That is also why IN_DONT_FOLLOW is not set here: it
        would watch the magic link itself.) Watching a directory twice returns the same
        descriptor, so re-arming after each walk is cheap.
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
