"""The in-process index of one memory root: every record file's row, kept true to the files.

Files stay the source of truth. A call first makes the part of the tree it reads (its
*selection*: a scope, namespace or collection directory, recursive or one level) current:

* Proof (Linux): every directory a walk opens is watched with inotify before it is
  listed. While no event has been queued since a selection's last complete walk, its
  rows are as that walk left them; the kernel queues an event before the changing call
  returns, so an edit finished before a call is always seen by that call.
* Patch (Linux): events that each name one entry of a watched directory (a file
  written, added, removed or renamed, by hand or by our own writer) are applied to
  exactly those entries: re-stat, re-read when the stamp changed, re-parse when the
  bytes changed. The proofs stand, so such a change costs O(changed files).
* Hard links: a write through a record file's other name, in a directory we may not
  watch, raises no event here. A proof of a selection holding such files still stands,
  but each of them is re-stat'ed on every call it answers (and re-read when its stamp
  changed), up to 64 in a selection (256 in the root); a selection holding more is
  walked on every call.
* Walk (everywhere, and whenever a proof is missing: an event no single entry explains,
  a directory that could not be watched, a root that changed identity, more hard-linked
  files than are checked call by call, a network filesystem): list the selection and
  stat each ``*.json``; a file is re-read only when its stamp (identity, size, mtime,
  ctime) changed or is too fresh to trust, re-parsed only when its bytes changed; rows
  the walk no longer finds go.

All of it happens under the index's one lock, with one exception: the startup build's
walks (`refresh` with ``progress``) hand the lock over every 256 files, so calls about
other scopes are answered meanwhile; calls that need the scope being built wait for it.
Rows others put while the lock is handed over carry a walk mark at least as new as the
build's, so its final sweep of rows it did not meet keeps them.

Rows, and the invalidation contract of every cache. Each candidate file is one row in
compact columns (no Python object per record): its stamp, digest, state (skipped,
legacy, active or archived), title and kind. A row enters, changes or leaves only
through `_attach` and `_detach`, and each cache below is kept true by exactly the rule
given; nothing is keyed on object identity.

* Updated in `_attach` / `_detach` themselves: the per-directory counts and checksums
  behind list cursors, the duplicate map of remember, the legacy-id map and the BM25F
  postings (`TermIndex.add` / `remove`).
* The parsed-record cache (``_records``, at most 1,024): an entry goes in `_detach`,
  so a record is cached only while its row is unchanged.
* The per-scope list order: `_detach` deletes the row from it; `_attach` puts the row
  in the scope's pending set (``_unordered``), which `_ordered` merges in before any
  reader looks at the order. A pending row is never in the order and vice versa.
* Documents of one namespace (narrowed recall): keyed by ``revision``, which both
  `_attach` and `_detach` bump; rebuilt on first use after it moved.
* Per scope in `TermIndex` (its ``_Corpus``): per-term scores (``gains``) and per-record
  length norms (``norms``) are dropped by every add or remove in that scope; impact
  orders are patched by every add and remove, computed under the corpus averages of
  the moment they were built, and rebuilt once those averages drifted past a bound
  (scores over them stay exact: the drift is folded into the bounds).
* Proofs that a selection is current: keyed by ``epoch``, which counts the changes only
  a walk can account for (an event no single entry explains, a lost watch, a root that
  changed identity, a write without change notification).
* Skip reports (which files were logged as skipped): a row's report goes with the row;
  entries that are not rows are forgotten when a walk of their selection no longer
  meets them.

Snapshot. With a snapshot directory, copies of the columns (and the postings) are
taken under the lock and written by `snapshot` outside it: once changes pause, at the
latest a bounded time after the first unsaved one, and at exit. The first call loads
it. The snapshot never overrides the files: a loaded row is used only when a fresh stat
of its file matches the saved stamp, the first call's walk re-reads changed files and
drops missing ones, and a snapshot of another root, format or analysis, or one that
fails its checksum or any consistency check, is ignored and replaced.
"""

from __future__ import annotations

import atexit
import bisect
import contextlib
import hashlib
import logging
import os
import stat
import threading
import time
import weakref
from array import array
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import compress, groupby
from pathlib import Path
from typing import Any, Final, NamedTuple

from . import records, snapshot, store
from .analysis import ANALYSIS_VERSION, DocumentTerms, document_terms
from .model import (
    CANDIDATE_LIMIT_MAX,
    MEMORY_KINDS,
    RECORD_SUFFIX,
    ErrorCode,
    MemoryOperationError,
    MemoryRecord,
    MemoryRecordV2,
    RelativePath,
    Scope,
    candidate_limit_exceeded,
    location_agrees,
    tag_key,
)
from .records import MAX_RECORD_BYTES, RecordRejected, SkipReason
from .search import Hit, TermIndex
from .store import (
    FileStamp,
    UnreadableCandidate,
    WalkStats,
    close_quietly,
    file_id,
    is_temp_name,
    log_skip,
    open_container,
    walk_candidates,
)
from .watch import Changes, Watcher

_log = logging.getLogger("mymcp.memory.index")

# A stamp only proves "unchanged" once the file's last change (mtime or ctime) is safely
# older than the moment we read it; otherwise a same-size rewrite within one timestamp
# tick would go unnoticed. Two seconds covers the coarsest common filesystem clocks.
_SETTLE_NS: Final = 2_000_000_000
# The wall clock settledness is judged by (a name of its own, so tests can move it on).
_now_ns: Callable[[], int] = time.time_ns
_MAX_PROOFS: Final = 256
# Hard-linked record files checked on every call instead of walking their selection, at
# most so many in one selection and in the whole root; a selection holding more is
# walked on every call, as one whose links are not all known.
_MAX_LINKED: Final = 64
_MAX_LINKED_KNOWN: Final = 256
_MAX_CACHED_RECORDS: Final = 1024
# Seconds without a change before the snapshot is saved, at the least (it grows with the
# time a save takes), and how many such waits a steady stream of changes may defer it.
_SAVE_DELAY: Final = 2.0
_SAVE_SPAN: Final = 10
_SNAPSHOT_VERSIONS: Final = {"analysis": ANALYSIS_VERSION}

# Row states.
_FREE, _SKIPPED, _LEGACY, _ACTIVE, _ARCHIVED = 0, 1, 2, 3, 4
_RECORDS: Final = frozenset({_LEGACY, _ACTIVE, _ARCHIVED})
_SKIP_REASONS: Final = tuple(SkipReason)
_KINDS: Final = ("", *dict.fromkeys(k for kinds in MEMORY_KINDS.values() for k in kinds))
_KIND_CODES: Final = {kind: code for code, kind in enumerate(_KINDS)}
_SUM_MODULUS: Final = 1 << 128
# bytes.translate tables that turn the state column into masks for itertools.compress.
_FREE_MASK: Final = bytes(1 if code == _FREE else 0 for code in range(256))
_LIVE_MASK: Final = bytes(0 if code == _FREE else 1 for code in range(256))
_CANONICAL_MASK: Final = bytes(1 if code in (_ACTIVE, _ARCHIVED) else 0 for code in range(256))


@dataclass(frozen=True, slots=True)
class IndexedRecord:
    """A valid record at its location, with the digest of the file it was read from."""

    parts: RelativePath
    scope: Scope
    record: MemoryRecord
    digest: bytes


@dataclass(frozen=True, slots=True)
class Selection:
    """A validated part of the tree: ``prefix`` directory, recursive or one level deep."""

    scope: Scope
    prefix: RelativePath
    recursive: bool
    candidates: int
    revision: int


class ListedRow(NamedTuple):
    """What a listing shows of one record, without reading its file (a tuple: a page
    builds dozens)."""

    parts: RelativePath
    scope: Scope
    legacy_id: str | None  # None for canonical records
    title: str | None
    kind: str | None
    archived: bool

    @property
    def id(self) -> str:
        return (
            self.legacy_id if self.legacy_id is not None else self.parts[-1][: -len(RECORD_SUFFIX)]
        )


@dataclass(frozen=True, slots=True)
class Inventory:
    """The records of one selection in list order, with the state their cursors sign.

    ``count`` and ``checksum`` change whenever a listed record is added, removed,
    moved or changes a byte; ``ambiguous`` holds legacy ids listed more than once.
    """

    count: int
    checksum: int
    ambiguous: frozenset[str]
    _index: MemoryIndex = field(repr=False)
    _scope: str = field(repr=False)
    _start: int = field(repr=False)

    def page(self, offset: int, size: int) -> list[ListedRow]:
        return self._index._page(self._scope, self._start + offset, min(size, self.count - offset))


@dataclass(slots=True)
class Tally:
    """What one namespace (or a scope's legacy files, namespace "") holds, by state."""

    active: int = 0
    archived: int = 0
    legacy: int = 0
    skipped: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class Problem:
    """A file or directory the index passes over: root-relative parts and the reason.
    ``reason`` is a `SkipReason` value, or ``duplicate_id`` for legacy files that share
    an id within a scope (each becomes ambiguous to inspect)."""

    parts: RelativePath
    reason: str


class _Directory:
    """One directory walks have seen: its candidate files by name, and list aggregates."""

    __slots__ = (
        "candidates",
        "canonical",
        "canonical_sum",
        "legacy",
        "legacy_sum",
        "names",
        "parts",
        "temps",
    )

    def __init__(self, parts: RelativePath) -> None:
        self.parts = parts
        self.names: dict[str, int] = {}
        self.candidates = 0
        self.legacy = 0
        self.legacy_sum = 0
        self.canonical = 0
        self.canonical_sum = 0
        self.temps: set[str] = set()


def duplicate_hash(directory: RelativePath, record: MemoryRecordV2) -> int:
    """The identity of a canonical record for duplicate detection, within its directory.

    Same directory (scope, namespace, collection), namespace kind, kind, occurrence time,
    title, content and tags ignoring case and order: the same memory. Only a filter: a
    match is confirmed by comparing the records themselves.
    """
    fields = (
        *directory,
        record.namespace.kind,
        record.kind,
        record.occurred_at or "\x01",
        record.title if record.title is not None else "\x01",
        record.content,
        *sorted(tag_key(tag) for tag in record.tags),
    )
    text = "\x00".join(fields).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big", signed=True)


def _item_hash(parts: RelativePath, digest: bytes) -> int:
    """One listed record's share of a selection checksum (its path and file digest)."""
    text = "/".join(parts).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(digest + text, digest_size=16).digest(), "big")


# How long a background walk handing its lock over waits, at most, for a waiting caller
# to take it (one always does at once; this only bounds a surprise).
_HAND_OVER_SECONDS: Final = 1.0


class _IndexLock:
    """The index's reentrant lock, which a long background walk can hand to callers.

    Entering it uncontended is one non-blocking acquire; a caller that has to wait is
    counted, so `hand_over` knows when someone is waiting and lets them in first.
    """

    __slots__ = ("_lock", "_served", "_tally", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tally = threading.Lock()
        self._waiting = 0
        self._served = threading.Event()

    def condition(self) -> threading.Condition:
        """A condition over this lock (waiting on it releases the lock entirely)."""
        return threading.Condition(self._lock)

    def __enter__(self) -> None:
        if self._lock.acquire(blocking=False):
            return
        with self._tally:
            self._waiting += 1
        self._lock.acquire()
        with self._tally:
            self._waiting -= 1
        self._served.set()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def hand_over(self, between: Callable[[], None]) -> None:
        """Release the lock (which the caller holds once), run ``between`` and take the
        lock back, after a caller that was waiting for it had its turn."""
        waiting = self._waiting
        self._served.clear()
        self._lock.release()
        try:
            between()
            if waiting:
                self._served.wait(_HAND_OVER_SECONDS)
        finally:
            self._lock.acquire()


class MemoryIndex:
    """The rows and derived views of one memory root; see the module docstring.

    ``watch`` (default) uses inotify where available; ``watch=False`` always walks.
    ``snapshot_directory`` enables the persisted snapshot. ``sweep_temps=False`` leaves
    the temp files of interrupted writes alone (a reader that must change nothing).
    All methods are thread-safe.
    """

    def __init__(
        self,
        root: Path,
        *,
        watch: bool = True,
        snapshot_directory: Path | None = None,
        sweep_temps: bool = True,
    ) -> None:
        self.root = root
        self._sweeps_temps = sweep_temps
        self._lock = _IndexLock()
        # Scopes a background walk is building; calls that need one wait for it.
        self._building: set[str] = set()
        self._built = self._lock.condition()
        self._watcher = Watcher.create() if watch else None
        self._epoch = 0
        self._revision = 0
        self._proofs: dict[tuple[RelativePath, bool], int] = {}
        self._root_identity: tuple[int, int] | None = None
        self._empty_rows()
        self._walks = 0
        # Entries passed over that are not rows (links, directories too deep or
        # unreadable), by root-relative parts: each is logged when first met, and again
        # only after it was gone or changed its reason.
        self._entry_skips: dict[RelativePath, SkipReason] = {}
        # Skipped rows this process has logged (a restored snapshot knows others unread).
        self._reported: set[RelativePath] = set()
        # Persistence.
        self._snapshot_directory = snapshot_directory
        self._started = False
        self._unsaved = 0
        self._saving: threading.Timer | None = None
        self._first_change = self._last_change = 0.0
        self._save_seconds = 0.0
        # The forget mark this process's rows account for (see `snapshot.mark_forgotten`).
        self._forget_mark = ""

        if snapshot_directory is not None:
            atexit.register(_save_at_exit, weakref.ref(self))

    def _file_key(self) -> bytes:
        # Read again for every id (a small file, and ids are logged only as files
        # change): a key removed or replaced meanwhile is the new one here too at once.
        return snapshot.file_key(self._snapshot_directory)

    def file_id(self, parts: RelativePath) -> str:
        """The id this index's log lines name the file at ``parts`` by."""
        return file_id(parts, self._file_key())

    def _empty_rows(self) -> None:
        """No rows and empty derived views: a fresh index, or one whose snapshot failed."""
        self._terms = TermIndex()
        # Directories.
        self._directories: list[_Directory | None] = []
        self._directory_ids: dict[RelativePath, int] = {}
        # Rows, one slot each; freed slots are reused.
        self._free: list[int] = []
        self._row_dir = array("I")
        self._names: list[str | None] = []
        self._stamps = array("q")  # five per slot
        self._trusted = bytearray()
        self._digests = bytearray()  # 32 per slot
        self._states = bytearray()
        self._reasons = bytearray()
        self._titles: list[str | None] = []
        self._kinds = bytearray()
        self._duplicate_keys = array("q")
        self._marks = array("I")
        self._legacy_ids: dict[int, str] = {}
        # Derived views.
        self._orders: dict[str, array[int]] = {}
        self._unordered: dict[str, set[int]] = {}
        self._legacy_slots: dict[str, dict[str, set[int]]] = {}
        # Duplicate key -> a slot holding it; further holders (rare) in the second map.
        self._duplicates: dict[int, int] = {}
        self._duplicates_more: dict[int, list[int]] = {}
        self._records: OrderedDict[int, MemoryRecord] = OrderedDict()
        self._namespaces: dict[tuple[str, str], tuple[int, frozenset[int]]] = {}
        # Record files with another name as well (by root-relative parts), each with the
        # walk mark current when it was last met: a write through that other name raises
        # no event in the directories we watch.
        self._linked: dict[RelativePath, int] = {}
        self._revision += 1

    # -- properties -----------------------------------------------------------------------

    @property
    def watching(self) -> bool:
        """Whether change notification is active (otherwise every call walks)."""
        return self._watcher is not None

    @property
    def revision(self) -> int:
        """Bumped on every row change: the generation number derived values are keyed by."""
        return self._revision

    def __len__(self) -> int:
        """The number of rows (candidate files, valid or skipped)."""
        return len(self._states) - len(self._free)

    def close(self) -> None:
        """Settle the snapshot (see `settle`), then release the change watcher; later
        calls walk every time."""
        self.settle()
        with self._lock:
            self._drop_watcher()

    def settle(self) -> None:
        """Leave the snapshot true to the files, as a stopping server must: wait for a
        save running in the background (the process may end right after), apply what
        the watcher saw meanwhile (another process may have forgotten a record these
        rows hold), then save what is unsaved, or remove the snapshot when the rows
        cannot be brought up to date. A cache is never a reason to fail."""
        saving = self._saving
        if saving is not None:
            saving.cancel()
        with snapshot.SAVES:
            pass
        with contextlib.suppress(Exception):
            if not self.catch_up():
                self.drop_snapshot()  # it may hold a record deleted meanwhile
            elif self._unsaved:
                self.save()

    # -- making a selection current -------------------------------------------------------

    def refresh(
        self,
        scope: Scope,
        container: tuple[str, ...] = (),
        *,
        recursive: bool,
        candidate_limit: int,
        progress: Callable[[int], None] | None = None,
    ) -> Selection:
        """Make ``<root>/<scope>/<container...>`` current and return it as a selection.

        A missing or symlinked container holds nothing; one that is not a readable
        directory makes the source unavailable. More ``*.json`` candidates than the
        limit fails the whole call.

        ``progress`` makes this a background walk (the startup build): every 256 files
        it hears the number of candidates examined, outside the lock, and calls about
        other scopes that were waiting get their turn there; calls that need this scope
        wait until the walk is over. An exception it raises ends the walk and leaves the
        selection to be walked again.
        """
        prefix = (scope.value, *container)
        key = (prefix, recursive)
        with self._lock:
            self._start()
            while scope.value in self._building:
                self._built.wait()
            if self._proven(key):
                candidates = self._candidates(prefix, recursive)
                if candidates > candidate_limit:
                    raise candidate_limit_exceeded(candidate_limit)
                return Selection(scope, prefix, recursive, candidates, self._revision)
            if progress is None:
                candidates = self._walk(scope, prefix, recursive, candidate_limit)
            else:
                self._building.add(scope.value)
                try:
                    candidates = self._walk(scope, prefix, recursive, candidate_limit, progress)
                finally:
                    self._building.discard(scope.value)
                    self._built.notify_all()
            return Selection(scope, prefix, recursive, candidates, self._revision)

    def _walk(
        self,
        scope: Scope,
        prefix: RelativePath,
        recursive: bool,
        limit: int,
        progress: Callable[[int], None] | None = None,
    ) -> int:
        epoch = self._epoch
        armed = [self._watcher is not None]
        on_directory = self._arming_hook(armed) if armed[0] else None
        stats = WalkStats(scope, limit)
        try:
            fd = open_container(self.root, prefix, stats, on_directory)
        except MemoryOperationError:
            self._note_skips(stats)
            raise
        self._walks += 1
        mark = self._walks
        visited: set[int] = set()
        if fd is None:
            self._note_entry_skips(prefix, recursive, stats)
            self._prune(prefix, recursive, mark, visited)
            return 0
        marks, stamps, trusted = self._marks, self._stamps, self._trusted
        # The directory being listed: its parts object, id and name -> slot table.
        current: list[Any] = [None, -1, {}]
        linked: list[RelativePath] = []

        def visit(
            dir_fd: int, directory: RelativePath, name: str, info: os.stat_result | None
        ) -> None:
            if current[0] is not directory:
                directory_id = self._directory_id(directory)
                found = self._directories[directory_id]
                assert found is not None
                current[:] = [directory, directory_id, found.names]
                visited.add(directory_id)
            if info is not None:
                if info.st_nlink != 1:
                    # A hard link's writes through another directory raise no event here:
                    # such files are checked on every call the proof would answer.
                    linked.append((*directory, name))
                slot = current[2].get(name)
                # The common case, inlined: a settled file whose stamp did not change.
                if slot is not None and trusted[slot]:
                    at = 5 * slot
                    if (
                        stamps[at + 3] == info.st_mtime_ns
                        and stamps[at + 4] == info.st_ctime_ns
                        and stamps[at + 2] == info.st_size
                        and stamps[at + 1] == info.st_ino
                        and stamps[at] == info.st_dev
                    ):
                        marks[slot] = mark  # unchanged: a skipped file was reported already
                        return
            marks[self._visit(current[1], dir_fd, name, info)] = mark

        if progress is not None:
            examine, hand_over = visit, self._lock.hand_over

            def visit(
                dir_fd: int, directory: RelativePath, name: str, info: os.stat_result | None
            ) -> None:
                examine(dir_fd, directory, name, info)
                if not stats.candidates & 255:
                    examined = stats.candidates
                    hand_over(lambda: progress(examined))

        try:
            visited.add(self._directory_id(prefix))
            walk_candidates(
                fd,
                prefix,
                len(prefix) - 1,
                stats,
                visit,
                recursive=recursive,
                on_directory=on_directory,
            )
        finally:
            close_quietly(fd)
            self._note_entry_skips(prefix, recursive, stats)
        self._prune(prefix, recursive, mark, visited)
        for directory, name in stats.temps:
            self._directories_at(directory).temps.add(name)
        if not self._note_linked(prefix, recursive, linked, mark):
            armed[0] = False
        key = (prefix, recursive)
        if armed[0] and epoch == self._epoch:
            if len(self._proofs) >= _MAX_PROOFS:
                self._proofs.clear()
            self._proofs[key] = epoch
        else:
            self._proofs.pop(key, None)
        if stats.temps and self._sweeps_temps:
            self._sweep_temps(stats.temps)
        return stats.candidates

    def _note_entry_skips(self, prefix: RelativePath, recursive: bool, stats: WalkStats) -> None:
        """Log the entries this walk passed over that were not already known to be, and
        forget the known ones under the walked selection it no longer met."""
        met = {parts for parts, _ in stats.skips}
        size = len(prefix)
        known = self._entry_skips
        for parts in [p for p in known if p[:size] == prefix and (recursive or len(p) <= size + 1)]:
            if parts not in met:
                del known[parts]
        self._note_skips(stats)

    def _note_linked(
        self, prefix: RelativePath, recursive: bool, linked: list[RelativePath], mark: int
    ) -> bool:
        """Take the hard-linked files a walk (of `mark`) met in its selection as those it
        holds, keeping any a call met while the walk handed its lock over (they carry a
        newer mark, as rows do); False when the selection holds more than are checked
        call by call, or the root more than are kept track of."""
        known = self._linked
        stale = [p for p, seen in known.items() if seen < mark and _within(p, prefix, recursive)]
        for parts in stale:
            del known[parts]
        if len(linked) > _MAX_LINKED or len(known) + len(linked) > _MAX_LINKED_KNOWN:
            return False
        known.update(dict.fromkeys(linked, mark))
        return True

    def _linked_current(self, prefix: RelativePath, recursive: bool) -> bool:
        """Bring the hard-linked files of a proven selection up to date, as a walk would
        (a stat each, a read when one changed); False when a walk must."""
        wanted: dict[RelativePath, list[str]] = {}
        count = 0
        for parts in self._linked:
            if _within(parts, prefix, recursive):
                wanted.setdefault(parts[:-1], []).append(parts[-1])
                count += 1
        if count > _MAX_LINKED:
            return False
        return all(self._examine(directory, names) for directory, names in wanted.items())

    def _note_skips(self, stats: WalkStats) -> None:
        for parts, reason in stats.skips:
            self._note_skip(parts, reason)
        stats.skips.clear()

    def _note_skip(self, parts: RelativePath, reason: SkipReason) -> None:
        """Log an entry passed over, unless it was already known for the same reason."""
        if self._entry_skips.get(parts) is not reason:
            self._entry_skips[parts] = reason
            log_skip(parts, reason, self._file_key())

    def _sweep_temps(self, temps: list[tuple[RelativePath, str]]) -> None:
        """Remove the temp files a walk met, if no writer holds the root lock right now.

        Every writer creates and removes its temp files holding that lock, so any temp
        file seen while it is free belongs to an interrupted write (a killed process).
        When a writer is busy they stay known here, for the next walk or for that
        writer's next write to their directory.
        """
        try:
            with store.root_lock(self.root, timeout=0):
                removed = store.sweep_temps(self.root, temps)
        except MemoryOperationError:
            return
        for directory, name in temps:
            self._directories_at(directory).temps.discard(name)
        _log.info("temp_sweep outcome=removed count=%d", removed)

    def _prune(self, prefix: RelativePath, recursive: bool, mark: int, visited: set[int]) -> None:
        """Drop the rows under a walked selection that the walk did not find."""
        size = len(prefix)
        marks = self._marks
        for directory_id, directory in enumerate(self._directories):
            if directory is None:
                continue
            parts = directory.parts
            inside = parts[:size] == prefix and (recursive or len(parts) == size)
            if not inside:
                continue
            # Rows put since the walk began carry its mark or a later one: a walk that
            # handed the lock over meanwhile keeps what others wrote or patched then.
            for slot in [slot for slot in directory.names.values() if marks[slot] < mark]:
                self._remove(slot)
            if directory_id not in visited and not directory.names:
                self._directories[directory_id] = None
                del self._directory_ids[parts]

    def _candidates(self, prefix: RelativePath, recursive: bool) -> int:
        size = len(prefix)
        total = 0
        for directory in self._directories:
            if directory is not None:
                parts = directory.parts
                if parts[:size] == prefix and (recursive or len(parts) == size):
                    total += directory.candidates
        return total

    def _proven(self, key: tuple[RelativePath, bool]) -> bool:
        """Whether ``key`` is current without a walk (queued events are applied first)."""
        watcher = self._watcher
        if watcher is None:
            return False
        # The root may be reached through a symlink the operator re-pointed, which raises
        # no event in the old tree: the root must still be the directory we watch.
        try:
            info = os.stat(self.root)
        except OSError:
            identity = None
        else:
            identity = (info.st_dev, info.st_ino)
        changes = watcher.drain()
        if identity is None or identity != self._root_identity:
            self._epoch += 1
            if watcher.broken:
                self._drop_watcher()
            return False
        if changes is not None:
            if watcher.broken:
                self._drop_watcher()
                return False
            if changes.rescan or not self._patch(changes):
                self._epoch += 1
                return False
        # A recursive walk armed a watch on every directory below its prefix, so its proof
        # covers every selection inside it too: those directories it listed (anything
        # else under that name, a file or a link, is for a walk of its own to report).
        prefix, recursive = key
        proofs, epoch = self._proofs, self._epoch
        if proofs.get(key) != epoch:
            if prefix not in self._directory_ids:
                return False
            inner = len(prefix) if recursive else len(prefix) + 1
            if not any(proofs.get((prefix[:size], True)) == epoch for size in range(1, inner)):
                return False
        return not self._linked or self._linked_current(prefix, recursive)

    def _patch(self, changes: Changes) -> bool:
        """Apply events naming single entries; False when a walk must account for them."""
        wanted: dict[RelativePath, list[str]] = {}
        proven = [prefix for (prefix, _), epoch in self._proofs.items() if epoch == self._epoch]
        for directory, name in changes.entries:
            depth = len(directory)
            for prefix in proven:
                if depth < len(prefix) and prefix[:depth] == directory and prefix[depth] == name:
                    return False  # a selection's own container (or an ancestor) changed
            # Every event comes from a watch a walk placed, so its directory is ours.
            wanted.setdefault(directory, []).append(name)
        return all(self._examine(directory, names) for directory, names in wanted.items())

    def _examine(self, directory: RelativePath, names: list[str]) -> bool:
        """Bring the named entries of one directory up to date; False if a walk must."""
        if not directory:
            return True  # the root holds scope directories only, never candidates
        fd: int | None = None
        try:
            Scope(directory[0])  # a scope directory, or a walk decides what this is
            fd = store.open_root(self.root)
            for name in directory:
                if fd is None:
                    return False
                _state, child = store.open_child_directory(fd, name)
                close_quietly(fd)
                fd = child
            if fd is None:
                return False
            directory_id = self._directory_id(directory)
            entries = self._directories_at(directory)
            for name in names:
                try:
                    info = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    entries.temps.discard(name)
                    self._entry_skips.pop((*directory, name), None)
                    self._linked.pop((*directory, name), None)
                    self._remove_name(directory_id, name)
                    continue
                except OSError:
                    return False
                if stat.S_ISDIR(info.st_mode):
                    return False  # its own (queued or imminent) event asks for a walk
                if stat.S_ISLNK(info.st_mode):
                    self._linked.pop((*directory, name), None)
                    if name.endswith(RECORD_SUFFIX):
                        self._remove_name(directory_id, name)
                        self._note_skip((*directory, name), SkipReason.SYMLINK)
                elif not name.endswith(RECORD_SUFFIX):
                    if is_temp_name(name):
                        entries.temps.add(name)
                else:
                    parts = (*directory, name)
                    if info.st_nlink == 1:
                        self._linked.pop(parts, None)
                    elif parts not in self._linked:
                        if len(self._linked) >= _MAX_LINKED_KNOWN:
                            return False  # more than are kept track of: walks
                        self._linked[parts] = self._walks
                    self._entry_skips.pop(parts, None)
                    self._visit(directory_id, fd, name, info)
            return True
        except (MemoryOperationError, ValueError):
            return False
        finally:
            close_quietly(fd)

    def _arming_hook(self, armed: list[bool]) -> Callable[[int, RelativePath], None]:
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
                        # tree, and results from it must not be reused (bumps the epoch).
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
        self._proofs.clear()
        self._epoch += 1

    # -- rows -----------------------------------------------------------------------------

    def _directory_id(self, parts: RelativePath) -> int:
        found = self._directory_ids.get(parts)
        if found is None:
            found = self._directory_ids[parts] = len(self._directories)
            self._directories.append(_Directory(parts))
        return found

    def _directories_at(self, parts: RelativePath) -> _Directory:
        directory = self._directories[self._directory_id(parts)]
        assert directory is not None
        return directory

    def _allocate(self) -> int:
        if self._free:
            return self._free.pop()
        slot = len(self._states)
        self._row_dir.append(0)
        self._names.append(None)
        self._stamps.extend((0, 0, 0, 0, 0))
        self._trusted.append(0)
        self._digests.extend(bytes(32))
        self._states.append(_FREE)
        self._reasons.append(0)
        self._titles.append(None)
        self._kinds.append(0)
        self._duplicate_keys.append(0)
        self._marks.append(0)
        return slot

    def _digest_of(self, slot: int) -> bytes:
        return bytes(self._digests[32 * slot : 32 * slot + 32])

    def _parts_of(self, slot: int) -> RelativePath:
        directory = self._directories[self._row_dir[slot]]
        name = self._names[slot]
        assert directory is not None
        assert name is not None
        return (*directory.parts, name)

    def _visit(self, directory_id: int, fd: int, name: str, info: os.stat_result | None) -> int:
        """Bring the row of one candidate file up to date; returns its slot."""
        directory = self._directories[directory_id]
        assert directory is not None
        slot = directory.names.get(name)
        if info is not None and slot is not None and self._trusted[slot]:
            at = 5 * slot
            stamps = self._stamps
            if (
                stamps[at] == info.st_dev
                and stamps[at + 1] == info.st_ino
                and stamps[at + 2] == info.st_size
                and stamps[at + 3] == info.st_mtime_ns
                and stamps[at + 4] == info.st_ctime_ns
            ):
                return slot  # unchanged and settled: nothing to read
        started = _now_ns()
        if info is None:
            return self._put(directory_id, name, None, False, None, SkipReason.UNREADABLE)
        stamp = FileStamp.of(info)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_RECORD_BYTES:
            reason = SkipReason.OVERSIZED if stat.S_ISREG(info.st_mode) else SkipReason.UNREADABLE
            return self._put(directory_id, name, stamp, _settled(stamp, started), None, reason)
        try:
            stamp, data = store.read_candidate(fd, name, MAX_RECORD_BYTES)
        except UnreadableCandidate as exc:
            read_stamp = exc.stamp or stamp
            return self._put(
                directory_id, name, read_stamp, _settled(read_stamp, started), None, exc.reason
            )
        return self._accept(directory_id, name, stamp, _settled(stamp, started), data)

    def _accept(
        self, directory_id: int, name: str, stamp: FileStamp, trusted: bool, data: bytes
    ) -> int:
        """Record the bytes just read from a candidate file as its row."""
        directory = self._directories[directory_id]
        assert directory is not None
        digest = hashlib.sha256(data).digest()
        slot = directory.names.get(name)
        if slot is not None and self._states[slot] != _FREE and self._digest_of(slot) == digest:
            # Same bytes at the same path: the earlier verdict still holds, skip the parse.
            self._stamps[5 * slot : 5 * slot + 5] = array("q", stamp)
            self._trusted[slot] = trusted
            self._marks[slot] = self._walks
            return slot
        parts = (*directory.parts, name)
        try:
            record = records.parse_record(data)
        except RecordRejected as exc:
            return self._put(directory_id, name, stamp, trusted, digest, exc.reason)
        if not location_agrees(parts, record):
            return self._put(directory_id, name, stamp, trusted, digest, SkipReason.PATH_MISMATCH)
        return self._put(directory_id, name, stamp, trusted, digest, record)

    def _put(
        self,
        directory_id: int,
        name: str,
        stamp: FileStamp | None,
        trusted: bool,
        digest: bytes | None,
        outcome: MemoryRecord | SkipReason,
    ) -> int:
        """Replace the row at ``name`` with a new outcome (attaching it to every view)."""
        directory = self._directories[directory_id]
        assert directory is not None
        slot = directory.names.get(name)
        stamps = array("q", stamp or (0, 0, 0, 0, 0))
        reported = False
        if slot is None:
            slot = self._allocate()
            directory.names[name] = slot
            self._row_dir[slot] = directory_id
            self._names[slot] = name
        else:
            # The same verdict on the same stamp (a file too fresh to trust, looked at
            # again) is no change, so no second log line.
            reported = (
                isinstance(outcome, SkipReason)
                and self._states[slot] == _SKIPPED
                and _SKIP_REASONS[self._reasons[slot]] is outcome
                and self._stamps[5 * slot : 5 * slot + 5] == stamps
                and (*directory.parts, name) in self._reported
            )
            self._detach(slot)
        self._stamps[5 * slot : 5 * slot + 5] = stamps
        self._marks[slot] = self._walks  # current as of the latest walk (see `_prune`)
        self._trusted[slot] = bool(trusted and stamp is not None)
        self._digests[32 * slot : 32 * slot + 32] = digest or bytes(32)
        self._titles[slot] = None
        self._kinds[slot] = 0
        document = None
        if isinstance(outcome, SkipReason):
            self._states[slot] = _SKIPPED
            self._reasons[slot] = _SKIP_REASONS.index(outcome)
            # A row is put only when its file is new or changed: one line per change.
            parts = (*directory.parts, name)
            if not reported:
                log_skip(parts, outcome, self._file_key())
            self._reported.add(parts)
        else:
            self._titles[slot] = outcome.title
            if isinstance(outcome, MemoryRecordV2):
                self._states[slot] = _ARCHIVED if outcome.lifecycle.archived else _ACTIVE
                self._kinds[slot] = _KIND_CODES[outcome.kind]
                self._duplicate_keys[slot] = duplicate_hash(directory.parts, outcome)
            else:
                self._states[slot] = _LEGACY
                self._legacy_ids[slot] = outcome.id
            if self._states[slot] != _ARCHIVED:
                # Meta text: where the record lives in its scope. A canonical file name is
                # its random id, which nobody searches for; a legacy one may be words.
                where = directory.parts[1:]
                path = "/".join((*where, name) if self._states[slot] == _LEGACY else where)
                document = document_terms(outcome.title, path, outcome.all_tags, outcome.content)
            self._cache(slot, outcome)
        self._attach(slot, document)
        return slot

    def _remove_name(self, directory_id: int, name: str) -> None:
        directory = self._directories[directory_id]
        slot = None if directory is None else directory.names.get(name)
        if slot is not None:
            self._remove(slot)

    def _remove(self, slot: int) -> None:
        self._detach(slot)
        directory = self._directories[self._row_dir[slot]]
        name = self._names[slot]
        if directory is not None and name is not None:
            directory.names.pop(name, None)
            self._reported.discard((*directory.parts, name))
        self._states[slot] = _FREE
        self._names[slot] = None
        self._titles[slot] = None
        self._legacy_ids.pop(slot, None)
        self._free.append(slot)

    # -- the two places derived views change ------------------------------------------------

    def _attach(self, slot: int, document: DocumentTerms | None) -> None:
        """Add a filled row to every derived view (its state decides which)."""
        self._revision += 1
        self._unsaved += 1
        self._schedule_save()
        directory = self._directories[self._row_dir[slot]]
        assert directory is not None
        directory.candidates += 1
        state = self._states[slot]
        if state not in _RECORDS:
            return
        scope = directory.parts[0]
        share = _item_hash(self._parts_of(slot), self._digest_of(slot))
        if state == _LEGACY:
            directory.legacy += 1
            directory.legacy_sum = (directory.legacy_sum + share) % _SUM_MODULUS
            legacy_id = self._legacy_ids[slot]
            self._legacy_slots.setdefault(scope, {}).setdefault(legacy_id, set()).add(slot)
        else:
            directory.canonical += 1
            directory.canonical_sum = (directory.canonical_sum + share) % _SUM_MODULUS
            key = self._duplicate_keys[slot]
            if key in self._duplicates:
                self._duplicates_more.setdefault(key, []).append(slot)
            else:
                self._duplicates[key] = slot
        # The list order takes new rows in batches (see `_ordered`): a cold start adds
        # every row of a scope at once, and one sort is far cheaper than many inserts.
        self._unordered.setdefault(scope, set()).add(slot)
        if document is not None:
            self._terms.add(slot, scope, document)

    def _detach(self, slot: int) -> None:
        """Remove a row from every derived view (before it changes or goes)."""
        self._revision += 1
        self._unsaved += 1
        self._schedule_save()
        self._records.pop(slot, None)
        directory = self._directories[self._row_dir[slot]]
        assert directory is not None
        directory.candidates -= 1
        state = self._states[slot]
        if state not in _RECORDS:
            return
        scope = directory.parts[0]
        share = _item_hash(self._parts_of(slot), self._digest_of(slot))
        if state == _LEGACY:
            directory.legacy -= 1
            directory.legacy_sum = (directory.legacy_sum - share) % _SUM_MODULUS
            by_id = self._legacy_slots[scope]
            holders = by_id[self._legacy_ids[slot]]
            holders.discard(slot)
            if not holders:
                del by_id[self._legacy_ids[slot]]
        else:
            directory.canonical -= 1
            directory.canonical_sum = (directory.canonical_sum - share) % _SUM_MODULUS
            key = self._duplicate_keys[slot]
            more = self._duplicates_more.get(key)
            if self._duplicates[key] != slot:
                assert more is not None
                more.remove(slot)
            elif more:
                self._duplicates[key] = more.pop()
            else:
                del self._duplicates[key]
            if more is not None and not more:
                del self._duplicates_more[key]
        pending = self._unordered.get(scope)
        if pending is not None and slot in pending:
            pending.discard(slot)
        else:
            order = self._orders[scope]
            at = bisect.bisect_left(order, self._order_key(slot), key=self._order_key)
            del order[at]
        self._terms.remove(slot)

    def _order_key(self, slot: int) -> tuple[Any, ...]:
        """List order: legacy records by id then path, then canonical ones by namespace,
        collectionless before collected, collection and id."""
        directory = self._directories[self._row_dir[slot]]
        assert directory is not None
        parts = directory.parts
        name = self._names[slot]
        assert name is not None
        if self._states[slot] == _LEGACY:
            return (1, "", False, "", self._legacy_ids[slot], "/".join((*parts, name)))
        collection = parts[2] if len(parts) > 2 else None
        return (
            2,
            parts[1],
            collection is not None,
            collection or "",
            name[: -len(RECORD_SUFFIX)],
            "",
        )

    def _ordered(self, scope: str) -> array[int]:
        """The scope's records in list order, after taking in the rows added since."""
        order = self._orders.get(scope)
        if order is None:
            order = self._orders[scope] = array("I")
        pending = self._unordered.pop(scope, None)
        if pending:
            key = self._order_key
            if len(pending) <= 64:
                for slot in pending:
                    bisect.insort(order, slot, key=key)
            else:
                order = self._orders[scope] = array("I", sorted((*order, *pending), key=key))
        return order

    def _cache(self, slot: int, record: MemoryRecord) -> None:
        records = self._records
        records[slot] = record
        records.move_to_end(slot)
        if len(records) > _MAX_CACHED_RECORDS:
            records.popitem(last=False)

    # -- reading derived views ------------------------------------------------------------

    def records(self, selection: Selection, *, include_legacy: bool) -> Iterator[IndexedRecord]:
        """Every valid record of a selection (reads files not in the record cache)."""
        with self._lock:
            slots = list(self._selected(selection, include_legacy))
        for slot in slots:
            found = self.record(slot)
            if found is not None:
                yield found

    def _selected(self, selection: Selection, include_legacy: bool) -> Iterator[int]:
        prefix, size = selection.prefix, len(selection.prefix)
        for directory in self._directories:
            if directory is None:
                continue
            parts = directory.parts
            if parts[:size] == prefix and (selection.recursive or len(parts) == size):
                for slot in directory.names.values():
                    state = self._states[slot]
                    if state in (_ACTIVE, _ARCHIVED) or (state == _LEGACY and include_legacy):
                        yield slot

    def record(self, slot: int) -> IndexedRecord | None:
        """The record a row holds, from the cache or its file (None if it changed away)."""
        with self._lock:
            if self._states[slot] not in _RECORDS:
                return None
            parts = self._parts_of(slot)
            scope = Scope(parts[0])
            cached = self._records.get(slot)
            if cached is not None:
                self._records.move_to_end(slot)
                return IndexedRecord(parts, scope, cached, self._digest_of(slot))
            return self._read_row(parts, scope)

    def _read_row(self, parts: RelativePath, scope: Scope) -> IndexedRecord | None:
        """Read one indexed file again, updating its row if it changed meanwhile."""
        stats = WalkStats(scope, 0)
        try:
            fd = open_container(self.root, parts[:-1], stats)
        finally:
            self._note_skips(stats)
        if fd is None:
            return None
        try:
            try:
                info = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                self._remove_name(self._directory_id(parts[:-1]), parts[-1])
                return None
            except OSError:
                raise MemoryOperationError(ErrorCode.MEMORY_SOURCE_UNAVAILABLE) from None
            # Passed over as a walk passes them over, and logged under the walk's reason,
            # so that an entry a listing already reported is not reported again.
            skipped = (
                SkipReason.SYMLINK
                if stat.S_ISLNK(info.st_mode)
                else SkipReason.NOT_A_FILE
                if stat.S_ISDIR(info.st_mode)
                else None
            )
            if skipped is not None:
                self._remove_name(self._directory_id(parts[:-1]), parts[-1])
                self._note_skip(parts, skipped)
                return None
            directory_id = self._directory_id(parts[:-1])
            slot = self._visit(directory_id, fd, parts[-1], info)
            record = self._records.get(slot)
            if record is None and self._states[slot] in _RECORDS:
                # Unchanged and settled, so not re-read: read it now for its content.
                try:
                    stamp, data = store.read_candidate(fd, parts[-1], MAX_RECORD_BYTES)
                except UnreadableCandidate:
                    return None
                slot = self._accept(directory_id, parts[-1], stamp, bool(self._trusted[slot]), data)
                if self._states[slot] in _RECORDS:
                    record = records.parse_record(data)
                    self._cache(slot, record)
        finally:
            close_quietly(fd)
        if record is None:
            return None
        return IndexedRecord(parts, scope, record, self._digest_of(slot))

    def lookup(self, parts: RelativePath, scope: Scope) -> IndexedRecord | None:
        """The valid record at exactly ``parts``, or None; no directory listing at all."""
        with self._lock:
            self._start()
            return self._read_row(parts, scope)

    def inventory(self, selection: Selection, *, include_legacy: bool) -> Inventory:
        """The records of a selection in list order (one contiguous range of the scope's)."""
        with self._lock:
            scope = selection.scope.value
            order = self._ordered(scope)
            prefix = selection.prefix
            key = self._order_key
            if len(prefix) == 1:
                start = 0 if include_legacy else bisect.bisect_left(order, (2,), key=key)
                end = len(order)
            elif len(prefix) == 2 and selection.recursive:
                start = bisect.bisect_left(order, (2, prefix[1]), key=key)
                end = bisect.bisect_left(order, (2, prefix[1], 2), key=key)
            elif len(prefix) == 2:
                start = bisect.bisect_left(order, (2, prefix[1], False), key=key)
                end = bisect.bisect_left(order, (2, prefix[1], True), key=key)
            else:
                start = bisect.bisect_left(order, (2, prefix[1], True, prefix[2]), key=key)
                end = bisect.bisect_left(order, (2, prefix[1], True, prefix[2], "~"), key=key)
            count, checksum = 0, 0
            size = len(prefix)
            for directory in self._directories:
                if directory is None:
                    continue
                parts = directory.parts
                if parts[:size] == prefix and (selection.recursive or len(parts) == size):
                    count += directory.canonical
                    checksum += directory.canonical_sum
                    if include_legacy:
                        count += directory.legacy
                        checksum += directory.legacy_sum
            ambiguous: frozenset[str] = frozenset()
            if include_legacy:
                legacy = self._legacy_slots.get(scope, {})
                ambiguous = frozenset(i for i, holders in legacy.items() if len(holders) > 1)
            assert count == end - start, "the list order and the directory counts disagree"
            return Inventory(count, checksum % _SUM_MODULUS, ambiguous, self, scope, start)

    def _page(self, scope: str, start: int, size: int) -> list[ListedRow]:
        scope_value = Scope(scope)
        with self._lock:
            order = self._ordered(scope)
            states, legacy_ids, titles, kinds = (
                self._states,
                self._legacy_ids,
                self._titles,
                self._kinds,
            )
            return [
                ListedRow(
                    self._parts_of(slot),
                    scope_value,
                    legacy_ids.get(slot),
                    titles[slot],
                    _KINDS[kinds[slot]] or None,
                    states[slot] == _ARCHIVED,
                )
                for slot in order[start : start + max(size, 0)]
            ]

    def legacy(self, scope: Scope, legacy_id: str) -> list[IndexedRecord]:
        """The legacy records of a (current) scope with this id."""
        with self._lock:
            slots = sorted(self._legacy_slots.get(scope.value, {}).get(legacy_id, ()))
        found = [self.record(slot) for slot in slots]
        return [item for item in found if item is not None]

    def duplicates(self, directory: RelativePath, record: MemoryRecordV2) -> list[IndexedRecord]:
        """Canonical records in ``directory`` with the same identity as ``record``."""
        with self._lock:
            key = duplicate_hash(directory, record)
            first = self._duplicates.get(key)
            slots = [] if first is None else [first, *self._duplicates_more.get(key, ())]
        found = []
        for slot in slots:
            item = self.record(slot)
            if (
                item is not None
                and item.parts[:-1] == directory
                and isinstance(item.record, MemoryRecordV2)
                and _same_memory(item.record, record)
            ):
                found.append(item)
        return found

    def tally(self, scope: Scope) -> dict[str, Tally]:
        """Rows under a scope as the index last saw them, per namespace id (legacy files
        directly in the scope under ""): states and file bytes."""
        prefix = scope.value
        tallies: dict[str, Tally] = {}
        with self._lock:
            for directory in self._directories:
                if directory is None or directory.parts[0] != prefix:
                    continue
                namespace = directory.parts[1] if len(directory.parts) > 1 else ""
                tally = tallies.setdefault(namespace, Tally())
                for slot in directory.names.values():
                    state = self._states[slot]
                    tally.bytes += self._stamps[5 * slot + 2]
                    if state == _ACTIVE:
                        tally.active += 1
                    elif state == _ARCHIVED:
                        tally.archived += 1
                    elif state == _LEGACY:
                        tally.legacy += 1
                    elif state == _SKIPPED:
                        tally.skipped += 1
        return {name: tallies[name] for name in sorted(tallies)}

    def report_skipped(self, scope: Scope) -> int:
        """Log the skipped files of a scope this process has not logged yet (rows a
        restored snapshot brought in unread) and return how many files it skips."""
        skipped = 0
        with self._lock:
            for directory in self._directories:
                if directory is None or directory.parts[0] != scope.value:
                    continue
                for name, slot in directory.names.items():
                    if self._states[slot] != _SKIPPED:
                        continue
                    skipped += 1
                    parts = (*directory.parts, name)
                    if parts not in self._reported:
                        self._reported.add(parts)
                        log_skip(parts, _SKIP_REASONS[self._reasons[slot]], self._file_key())
            skipped += sum(1 for parts in self._entry_skips if parts[0] == scope.value)
        return skipped

    def problems(self, scope: Scope) -> list[Problem]:
        """Every file and directory under a scope the index passes over, as of its last
        look, and legacy ids held by more than one file; sorted by path."""
        prefix = scope.value
        found: list[Problem] = []
        with self._lock:
            for directory in self._directories:
                if directory is None or directory.parts[0] != prefix:
                    continue
                for name, slot in directory.names.items():
                    if self._states[slot] == _SKIPPED:
                        reason = _SKIP_REASONS[self._reasons[slot]]
                        found.append(Problem((*directory.parts, name), reason.value))
            found.extend(
                Problem(parts, reason.value)
                for parts, reason in self._entry_skips.items()
                if parts[0] == prefix
            )
            for slots in self._legacy_slots.get(prefix, {}).values():
                if len(slots) > 1:
                    found.extend(Problem(self._parts_of(slot), "duplicate_id") for slot in slots)
        return sorted(found, key=lambda problem: problem.parts)

    def recall(
        self,
        scope: Scope,
        text: str,
        tag_keys: frozenset[str],
        limit: int,
        namespace_id: str | None = None,
    ) -> list[tuple[IndexedRecord, Hit]]:
        """The best active records of a current scope, optionally of one namespace only."""
        with self._lock:
            eligible = None
            if namespace_id is not None:
                eligible = self._namespace_documents(scope.value, namespace_id)
            hits = self._terms.rank(scope.value, text, tag_keys, limit, self._tiebreak, eligible)
        results = []
        for hit in hits:
            found = self.record(hit.slot)
            if found is not None:
                results.append((found, hit))
        return results

    def _namespace_documents(self, scope: str, namespace_id: str) -> frozenset[int]:
        key = (scope, namespace_id)
        cached = self._namespaces.get(key)
        if cached is not None and cached[0] == self._revision:
            return cached[1]
        slots = frozenset(
            slot
            for directory in self._directories
            if directory is not None and directory.parts[:2] == key
            for slot in directory.names.values()
            if self._states[slot] == _ACTIVE
        )
        if len(self._namespaces) >= _MAX_PROOFS:
            self._namespaces.clear()
        self._namespaces[key] = (self._revision, slots)
        return slots

    def _tiebreak(self, slot: int) -> tuple[str, str]:
        parts = self._parts_of(slot)
        legacy = self._legacy_ids.get(slot)
        identifier = legacy if legacy is not None else parts[-1][: -len(RECORD_SUFFIX)]
        return "/".join(parts[1:]), identifier

    # -- coherence hooks for writers ------------------------------------------------------

    def invalidate(self, parts: RelativePath) -> None:
        """Forget one file's row; the next call walks and reads it afresh."""
        with self._lock:
            directory_id = self._directory_ids.get(parts[:-1])
            if directory_id is not None:
                self._remove_name(directory_id, parts[-1])
            self._epoch += 1

    def note_written(self, parts: RelativePath, stamp: FileStamp, data: bytes) -> None:
        """Take bytes this process just wrote as the file's row, visible at once.

        The row stays untrusted: the next look at the file re-reads it once and compares
        digests, which still notices a concurrent hand edit. With change notification the
        write's own events make the next call examine exactly this file; without it every
        call walks anyway.
        """
        with self._lock:
            self._accept(self._directory_id(parts[:-1]), parts[-1], stamp, False, data)
            if self._watcher is None:
                self._epoch += 1

    def take_temps(self, directory: RelativePath) -> list[str]:
        """The writer's temp files seen in ``directory``; they are forgotten here."""
        with self._lock:
            directory_id = self._directory_ids.get(directory)
            found = None if directory_id is None else self._directories[directory_id]
            if found is None:
                return []
            names = sorted(found.temps)
            found.temps.clear()
            return names

    # -- snapshot -------------------------------------------------------------------------

    def _start(self) -> None:
        """On the first call: load the snapshot, if there is a usable one."""
        if self._started:
            return
        self._started = True
        if self._snapshot_directory is not None:
            # Read before the snapshot: a forget after this is one the rows may miss.
            self._forget_mark = snapshot.read_forget_mark(self._snapshot_directory, self.root)
            self._load_snapshot(self._snapshot_directory)
            self._unsaved = 0
            if self._saving is not None:  # scheduled while loading: nothing new to save
                self._saving.cancel()
                self._saving = None

    def _load_snapshot(self, directory: Path) -> None:
        """Fill the empty index from its snapshot; any doubt leaves the index empty."""
        started = time.perf_counter()
        try:
            data = snapshot.read_snapshot(directory, self.root)
            if data is None:
                return
            self._restore(snapshot.decode(data, self.root, _SNAPSHOT_VERSIONS))
        except snapshot.SnapshotUnusable as exc:
            self._empty_rows()
            if exc.reason == "unsafe_directory":
                self._disable_snapshot(exc.reason)
            elif exc.reason == "foreign":
                _log.info("index_snapshot outcome=ignored reason=foreign")
            else:
                _log.warning("index_snapshot outcome=ignored reason=%s", exc.reason)
            return
        except (ValueError, KeyError, TypeError, IndexError, OverflowError, MemoryError):
            self._empty_rows()
            _log.warning("index_snapshot outcome=ignored reason=corrupt")
            return
        _log.info(
            "index_snapshot outcome=loaded rows=%d ms=%d",
            len(self),
            int((time.perf_counter() - started) * 1000),
        )

    def _disable_snapshot(self, reason: str) -> None:
        """Keep no snapshot from now on (the cache directory is not safe to use)."""
        self._snapshot_directory = None
        _log.warning("index_snapshot outcome=disabled reason=%s", reason)

    def _schedule_save(self) -> None:
        """Save the snapshot once changes pause, or at the latest a bounded time after the
        first unsaved one (see `save_wait`).

        A server is usually stopped by a signal, and one that kills the process runs no
        exit handler, so the snapshot is kept close behind the rows rather than written
        only at exit. The waits grow with the time a save takes, bounding its cost.
        """
        if self._snapshot_directory is None or not self._started:
            return
        now = time.monotonic()
        self._last_change = now
        if self._saving is None:
            self._first_change = now
            self._start_timer(self._save_quiet())

    def _save_quiet(self) -> float:
        return max(_SAVE_DELAY, 20 * self._save_seconds)

    def _start_timer(self, delay: float) -> None:
        timer = threading.Timer(delay, self._save_later)
        timer.daemon = True
        self._saving = timer
        timer.start()

    def _save_later(self) -> None:
        with self._lock:
            if self._saving is None or self._saving is not threading.current_thread():
                return  # cancelled, or replaced by a save that covered it
            quiet = self._save_quiet()
            wait = save_wait(
                time.monotonic(), self._first_change, self._last_change, quiet, _SAVE_SPAN * quiet
            )
            if wait > 0:
                self._start_timer(wait)
                return
            self._saving = None
        with contextlib.suppress(Exception):  # a cache that cannot be written is no error
            self.save()

    def save(self) -> bool:
        """Write the snapshot now (atomically); False when there is nowhere to write it.

        The columns are copied under the index lock; encoding and writing them happen
        outside it, so calls go on meanwhile.
        """
        if self._snapshot_directory is None:
            return False
        started = time.perf_counter()
        with snapshot.SAVES:
            with self._lock:
                directory = self._snapshot_directory
                if not self._started or directory is None:
                    return False
                if self._saving is not None:  # this save covers what the timer would
                    self._saving.cancel()
                    self._saving = None
                mark = snapshot.read_forget_mark(directory, self.root)
                if mark != self._forget_mark and not self._reread_after_forget(mark):
                    return False
                columns = self._columns()
                self._unsaved = 0
            try:
                data = snapshot.encode(self.root, _SNAPSHOT_VERSIONS, columns)
                del columns
                snapshot.write_snapshot(directory, self.root, data)
                if snapshot.read_forget_mark(directory, self.root) != mark:
                    # Another process forgot a record while this one encoded rows that
                    # may hold it; its removal may have come before this write.
                    snapshot.remove_snapshot(directory, self.root)
                    with self._lock:
                        self._unsaved += 1
                        self._schedule_save()
                    return False
            except snapshot.SnapshotUnusable as exc:
                self._disable_snapshot(exc.reason)
                return False
            except OSError:
                _log.warning("index_snapshot outcome=not_saved")
                with self._lock:
                    self._unsaved += 1  # the exit handler tries again
                return False
        self._save_seconds = time.perf_counter() - started
        _log.info("index_snapshot outcome=saved bytes=%d", len(data))
        return True

    def _reread_after_forget(self, mark: str) -> bool:
        """Another process forgot a record since these rows were last checked: walk
        every scope they hold again, so no forgotten text is saved (the caller holds the
        lock). False when a walk fails; nothing is saved then."""
        if not self._reread_held_scopes():
            return False
        self._forget_mark = mark
        return True

    def _reread_held_scopes(self) -> bool:
        """Walk every scope the rows hold again (the caller holds the lock); False, and a
        warning, when a walk fails."""
        scopes = {d.parts[0] for d in self._directories if d is not None and d.parts}
        try:
            for value in sorted(scopes):
                scope = Scope(value)
                self._walk(scope, (value,), True, CANDIDATE_LIMIT_MAX)
        except Exception:
            _log.warning("index_snapshot outcome=not_saved reason=reread_failed")
            return False
        return True

    def catch_up(self) -> bool:
        """Apply the changes the watcher saw since the rows were last used: a process
        that served nothing since another one deleted a record (forgot it, with its own
        cache directory) still holds that record's row, and must not save it. False
        when the rows could not be brought up to date; they must not be saved then."""
        with self._lock:
            if not self._started or self._watcher is None:
                return True
            epoch = self._epoch
            self._proven(((), True))  # drains the queued events and applies what it can
            if self._epoch == epoch:
                return True
            # Events that cannot be applied one by one: read the held scopes again.
            return self._reread_held_scopes()

    def drop_snapshot(self) -> None:
        """Delete the saved snapshot now; a fresh one follows shortly.

        The snapshot holds titles and indexed words, so after a record is forgotten no
        copy of them may stay on disk: the file (and any temp file of an interrupted
        save) goes at once, and the next save no longer has the record. A save already
        encoding holds `snapshot.SAVES`, so the removal waits for it and then removes
        what it wrote.

        Raises MemoryOperationError(deletion_outcome_uncertain) when it cannot be removed.
        """
        directory = self._snapshot_directory
        if directory is None:
            return
        with snapshot.SAVES:
            seen, mark = None, None
            with contextlib.suppress(OSError, snapshot.SnapshotUnusable):
                seen = snapshot.read_forget_mark(directory, self.root)
                # The mark first: a process whose save lands after the removal below
                # then sees it, and removes what it wrote.
                mark = snapshot.mark_forgotten(directory, self.root)
            try:
                # Whether or not the mark could be written (a full disk refuses a
                # write, not an unlink), this process's copy goes.
                snapshot.remove_snapshot(directory, self.root)
                removed = True
            except OSError:
                mark, removed = None, False
            with self._lock:
                if mark is not None and seen == self._forget_mark:
                    self._forget_mark = mark  # no other forget these rows may miss
                self._unsaved += 1
                self._schedule_save()
            if mark is None and not (removed and snapshot.closed_to_snapshots(directory)):
                # Other processes were not told (or the copy is still there): whether a
                # copy of the record is left in a cache is not known. Where no snapshot
                # can be written at all, there is no copy and nobody to tell.
                raise MemoryOperationError(ErrorCode.DELETION_OUTCOME_UNCERTAIN)

    def _columns(self) -> dict[str, Any]:
        """Copies of every column a snapshot holds, consistent because they are taken
        under the lock (the caller holds it); nothing here is encoded yet."""
        directories = self._directories
        live = [d for d in directories if d is not None]
        for scope in list(self._unordered):
            self._ordered(scope)
        legacy = sorted(self._legacy_ids)
        return {
            "directories": ["/".join(d.parts) if d is not None else None for d in directories],
            "directory_counts": array(
                "q", (v for d in live for v in (d.candidates, d.legacy, d.canonical))
            ),
            "directory_sums": [f"{d.legacy_sum:x}/{d.canonical_sum:x}" for d in live],
            "row_dir": self._row_dir[:],
            "names": list(self._names),
            "stamps": self._stamps[:],
            "trusted": bytes(self._trusted),
            "digests": bytes(self._digests),
            "states": bytes(self._states),
            "reasons": bytes(self._reasons),
            "titles": list(self._titles),
            "kinds": bytes(self._kinds),
            "duplicate_keys": self._duplicate_keys[:],
            "legacy_slots": array("I", legacy),
            "legacy_ids": [self._legacy_ids[slot] for slot in legacy],
            "orders": {scope: order[:] for scope, order in self._orders.items()},
            "terms": self._terms.export(),
        }

    def _restore(self, columns: dict[str, Any]) -> None:
        """Take a snapshot's columns as the rows and views of this (empty) index.

        Raises ValueError (or another lookup or type error) when they do not fit
        together; the caller then empties the index again.
        """
        directories: list[_Directory | None] = []
        counts: array[int] = columns["directory_counts"]
        sums: list[str | None] = columns["directory_sums"]
        live = 0
        for text in columns["directories"]:
            if text is None:
                directories.append(None)
                continue
            directory = _Directory(tuple(text.split("/")))
            directory.candidates, directory.legacy, directory.canonical = counts[
                3 * live : 3 * live + 3
            ]
            legacy_sum, canonical_sum = (sums[live] or "").split("/")
            directory.legacy_sum = int(legacy_sum, 16)
            directory.canonical_sum = int(canonical_sum, 16)
            live += 1
            directories.append(directory)
        if live != len(sums) or 3 * live != len(counts):
            raise ValueError("directory columns")
        row_dir: array[int] = _typed(columns["row_dir"], "I")
        names: list[str | None] = columns["names"]
        rows = len(row_dir)
        stamps: array[int] = _typed(columns["stamps"], "q")
        trusted = bytearray(columns["trusted"])
        digests = bytearray(columns["digests"])
        states = bytearray(columns["states"])
        reasons = bytearray(columns["reasons"])
        titles: list[str | None] = columns["titles"]
        kinds = bytearray(columns["kinds"])
        duplicate_keys: array[int] = _typed(columns["duplicate_keys"], "q")
        if not (
            len(names) == len(trusted) == len(states) == len(reasons) == len(titles) == rows
            and len(kinds) == len(duplicate_keys) == rows
            and len(stamps) == 5 * rows
            and len(digests) == 32 * rows
        ):
            raise ValueError("row columns")
        # Whole-column checks and table building run in C where they can; only rare rows
        # (legacy records, duplicate keys) take Python loops.
        if rows and (
            max(states) > _ARCHIVED
            or max(reasons) >= len(_SKIP_REASONS)
            or max(kinds) >= len(_KINDS)
            or max(row_dir) >= len(directories)
        ):
            raise ValueError("row values")
        legacy_ids = {
            slot: text
            for slot, text in zip(
                _typed(columns["legacy_slots"], "I"), columns["legacy_ids"], strict=True
            )
            if text is not None
        }
        live_rows = list(compress(range(rows), states.translate(_LIVE_MASK)))
        for directory_id, group in groupby(
            sorted(live_rows, key=row_dir.__getitem__), row_dir.__getitem__
        ):
            members = list(group)
            found = directories[directory_id]
            held = [names[slot] for slot in members]
            if found is None or None in held:
                raise ValueError("row")
            found.names = dict(zip(held, members, strict=True))  # type: ignore[arg-type]
            if len(found.names) != len(members):
                raise ValueError("names")
        canonical = list(compress(range(rows), states.translate(_CANONICAL_MASK)))
        duplicates: dict[int, int] = {}
        duplicates_more: dict[int, list[int]] = {}
        for slot in canonical:
            key = duplicate_keys[slot]
            if key in duplicates:
                duplicates_more.setdefault(key, []).append(slot)
            else:
                duplicates[key] = slot
        legacy_slots: dict[str, dict[str, set[int]]] = {}
        for slot, legacy_id in legacy_ids.items():
            found = directories[row_dir[slot]]
            if states[slot] != _LEGACY or found is None:
                raise ValueError("legacy row")
            legacy_slots.setdefault(found.parts[0], {}).setdefault(legacy_id, set()).add(slot)
        if states.count(_LEGACY) != len(legacy_ids):
            raise ValueError("legacy ids")
        orders: dict[str, array[int]] = {}
        for scope, order in columns["orders"].items():
            Scope(scope)
            orders[scope] = _typed(order, "I")
            if order and max(order) >= rows:
                raise ValueError("order")
        if sum(map(len, orders.values())) != len(canonical) + states.count(_LEGACY):
            raise ValueError("order size")
        terms = columns["terms"]
        if terms["count"] != states.count(_ACTIVE) + states.count(_LEGACY):
            raise ValueError("documents")
        term_index = TermIndex.restore(terms)
        # Everything fits: take it.
        self._directories = directories
        self._directory_ids = {d.parts: i for i, d in enumerate(directories) if d is not None}
        self._row_dir, self._names, self._stamps = row_dir, names, stamps
        self._trusted, self._digests, self._states = trusted, digests, states
        self._reasons, self._titles, self._kinds = reasons, titles, kinds
        self._duplicate_keys = duplicate_keys
        self._marks = array("I", bytes(4 * rows))
        self._legacy_ids = legacy_ids
        self._free = list(compress(range(rows), states.translate(_FREE_MASK)))
        self._duplicates, self._duplicates_more = duplicates, duplicates_more
        self._legacy_slots = legacy_slots
        self._orders = orders
        self._terms = term_index
        self._revision += 1


def _typed(column: object, typecode: str) -> array[Any]:
    """``column`` when it is an array of ``typecode``; ValueError otherwise."""
    if not isinstance(column, array) or column.typecode != typecode:
        raise ValueError("column type")
    return column


def save_wait(now: float, first: float, last: float, quiet: float, span: float) -> float:
    """Seconds until a snapshot save is due: ``quiet`` seconds after the ``last`` change,
    but never later than ``span`` seconds after the ``first`` unsaved one (0: due now).

    Changes that keep coming push the save back, up to the bound: under steady writes
    a snapshot is still written every ``span`` seconds.
    """
    due = min(last + quiet, first + span)
    return max(0.0, due - now)


def _same_memory(left: MemoryRecordV2, right: MemoryRecordV2) -> bool:
    return (
        left.namespace.kind == right.namespace.kind
        and left.kind == right.kind
        and left.occurred_at == right.occurred_at
        and left.title == right.title
        and left.content == right.content
        and sorted(tag_key(t) for t in left.tags) == sorted(tag_key(t) for t in right.tags)
    )


def _within(parts: RelativePath, prefix: RelativePath, recursive: bool) -> bool:
    """Whether the file at ``parts`` lies in the selection ``prefix`` (``recursive``: at
    any depth below it; otherwise directly in it)."""
    size = len(prefix)
    return parts[:size] == prefix and (recursive or len(parts) == size + 1)


def _settled(stamp: FileStamp | tuple[int, ...], read_started_ns: int) -> bool:
    # The later of mtime and ctime: a tool that restores an old mtime (cp -p, rsync -t,
    # an editor keeping times) cannot move ctime, which every write sets to now.
    return max(stamp[3], stamp[4]) < read_started_ns - _SETTLE_NS


def _save_at_exit(reference: weakref.ReferenceType[MemoryIndex]) -> None:
    index = reference()
    if index is not None:
        index.settle()
