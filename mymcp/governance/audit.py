"""The security audit: a hash-chained, bounded, content-free JSON Lines log.

Every record carries `seq` (monotonic across segments), `time` (RFC 3339 UTC, ms),
`event`, `prev` (the previous record's hash; 64 zeros for the very first) and `hash`
(SHA-256 of the canonical JSON of the record without `hash`); `audit_format` has the
files and the exact line layout. A new segment starts when the current one would pass
`max_segment_bytes`; its first record chains to the last record of the segment before.
When more than `max_segments` exist, a `segment_removed` record naming the oldest and
its last hash is written and fsync'd, and only then is that segment removed. Only the
segments up to the one being written count, and only those holding a complete line:
files named like later ones are not the writer's, a fragment without a line ending holds
no history, and neither ever makes it remove history.

Writes are batched: appending only queues a record (the caller's hot path), and
`commit` encodes, hashes, writes and fsyncs everything queued, under the directory's
exclusive lock. A background thread commits at least once a second; callers that must
not proceed before their record is durable (a tool that changes something) call
`commit` themselves. Records of one kind are prepared once as a `RecordShape`, so the
hot path queues a tuple of a few values and the writer fills them in.

Where the chain ends is read from disk whenever another process may have written since
this one did, and compared with `HEAD`. A crash can leave a torn last line, and an edit
lines that are no records: the next writer leaves them in place, starts a new segment
numbering on from the last record, and records `audit_recovered`. A log
that ends before the record `HEAD` names (records cut off, or `HEAD` replaced or
removed) is not continued silently: the writer first records `audit_head_mismatch`,
which `verify` reports as a break for as long as the record is kept.

What the chain proves: a record edited, inserted, removed or moved after it was written
is detected by `verify`, and so is a cut-off end. It does not stop someone who can write
the directory from rewriting the whole chain and `HEAD` consistently: to pin history,
keep the `verify` output (it prints the head hash) somewhere that person cannot reach.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mymcp._safefile import names_open_file
from mymcp.errors import AuditError
from mymcp.governance.audit_format import (
    GENESIS_HASH,
    HEAD_FILE,
    KEY_FILE,
    LOCK_FILE,
    TAIL_WINDOW,
    RecordShape,
    Tail,
    canonical_json,
    canonical_record,
    find_record,
    first_record,
    fsync_directory,
    last_record,
    open_lock,
    open_private,
    open_segment,
    prepare_directory,
    read_head,
    read_tail,
    record_line,
    segment_name,
    segments,
    timestamp,
    write_head,
)

__all__ = ["FLUSH_INTERVAL_SECONDS", "MAX_PENDING", "AuditLog", "canonical_json"]

_log = logging.getLogger("mymcp.audit")

FLUSH_INTERVAL_SECONDS: Final = 1.0
MAX_PENDING: Final = 65536
# The writer wakes before its second is up only when the queue is half full: waking it
# sooner during a burst would have it take the interpreter from the requests it records,
# and read-only calls' records may wait up to a second anyway.
_WAKE_AT: Final = MAX_PENDING // 2
_SESSION_TAGS: Final = 4096
_RATE_WINDOW_SECONDS: Final = 1.0
_MILLISECONDS: Final = tuple(f".{number:03d}Z" for number in range(1000))

# A queued record: when it happened, its shape (None: a one-off record whose members
# are all in the payload) and the values of its varying members.
_Entry = tuple[float, RecordShape | None, Any]


@dataclass(frozen=True, slots=True)
class _Known:
    """The chain's end as this process left it, and the identities of the files that
    prove nobody else wrote since (the newest segment's inode and size, `HEAD`'s inode)."""

    tail: Tail
    segment: tuple[int, int, int]
    head: tuple[int, int]


# Opening the lock file again after it was replaced, this many times at most in a row.
_LOCK_ATTEMPTS: Final = 8


class AuditLog:
    """Appends records to one audit directory; safe to share between threads and processes."""

    def __init__(
        self,
        directory: Path,
        *,
        max_segment_bytes: int,
        max_segments: int,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        # A key missing beside existing records was lost or removed: the new one cannot
        # tie later digests to earlier ones, and the log must say so.
        replaced = (
            directory.is_dir()
            and not os.path.lexists(directory / KEY_FILE)
            and bool(segments(directory))
        )
        key = prepare_directory(directory)
        self.directory = directory
        # Keyed once: every digest copies these instead of setting up HMAC again.
        self._arguments_mac = hmac.new(key, b"arguments\x00", hashlib.sha256)
        self._session_mac = hmac.new(key, b"session\x00", hashlib.sha256)
        self._no_arguments = self._mac(self._arguments_mac, b"{}")
        self._session_tags: dict[str, str] = {}
        self._max_segment_bytes = max_segment_bytes
        self._max_segments = max_segments
        self._clock = clock
        self._monotonic = monotonic
        # A deque's append is atomic: the request path queues without taking a lock.
        self._pending: deque[_Entry] = deque()
        self._lock = threading.RLock()  # the dropped count and the rate-limit windows
        self._dropped = 0
        self._windows: dict[tuple[str, str], tuple[float, int]] = {}
        self._commit_lock = threading.Lock()
        self._failed_at: float | None = None  # when the last commit failed, if it did
        self._wake = threading.Event()
        self._stopping = False
        self._flusher: threading.Thread | None = None
        self._known: _Known | None = None
        self._lock_fd = open_lock(directory)
        try:
            self._start_head()
        except OSError:
            os.close(self._lock_fd)
            raise AuditError("audit_unavailable", "MyMCP audit log cannot be written") from None
        if replaced:
            _log.warning("audit outcome=key_replaced")
            self.append("audit_key_replaced")

    def _lock_exclusively(self) -> None:
        """Take the directory's lock, as the file `audit.lock` is now. Every process that
        shares the directory must lock the same file: one whose lock file was removed
        or replaced since it opened it (someone tidying up, or the directory moved aside
        and made again) would otherwise hold a lock nobody else takes, and write beside
        the others into one chain. Raises OSError when no lock file can be opened."""
        for _ in range(_LOCK_ATTEMPTS):
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            if names_open_file(self.directory / LOCK_FILE, self._lock_fd):
                return
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            try:
                fresh = open_lock(self.directory)
            except AuditError as exc:
                raise OSError(exc.code) from None
            os.close(self._lock_fd)
            self._lock_fd = fresh
        raise OSError("the audit lock file keeps changing")

    def _start_head(self) -> None:
        """A new log gets `HEAD = 0 <genesis>` before its first record, so that from then
        on a missing `HEAD` always means someone removed it."""
        self._lock_exclusively()
        try:
            if not segments(self.directory) and not os.path.lexists(self.directory / HEAD_FILE):
                write_head(self.directory, 0, GENESIS_HASH)
                fsync_directory(self.directory)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- what callers record ---------------------------------------------------------

    @staticmethod
    def _mac(keyed: hmac.HMAC, data: bytes) -> str:
        mac = keyed.copy()
        mac.update(data)
        return mac.hexdigest()

    def digest(self, value: object) -> str:
        """Keyed digest of a JSON value (tool arguments): equal values, equal digests.

        HMAC-SHA-256 under the install's key of `arguments\\0` followed by the canonical
        JSON of the value (the prefix keeps these digests apart from session tags).
        """
        if type(value) is dict and not value:
            return self._no_arguments
        try:
            data = canonical_json(value)
        except (ValueError, TypeError, RecursionError):
            return "unhashable"
        return self._mac(self._arguments_mac, data)

    def session_tag(self, session_id: str) -> str:
        """Keyed hash of a session id: records of one session group without the id.

        Remembered per session id (a bounded map, cleared when full): a session's
        requests all need the same tag.
        """
        tag = self._session_tags.get(session_id)
        if tag is None:
            data = session_id.encode("utf-8", "surrogatepass")
            tag = self._mac(self._session_mac, data)[:32]
            if len(self._session_tags) >= _SESSION_TAGS:
                self._session_tags.clear()
            self._session_tags[session_id] = tag
        return tag

    def _enqueue(self, entry: _Entry) -> None:
        """Queue one record, never blocking: when the disk does not keep up and the
        queue is full, the record is only counted (`audit_dropped`)."""
        pending = self._pending
        if len(pending) < MAX_PENDING:
            pending.append(entry)
            if len(pending) >= _WAKE_AT and not self._wake.is_set():
                self._wake.set()
            return
        with self._lock:
            self._dropped += 1

    def append(self, event: str, **fields: Any) -> None:
        """Queue one record; it is written by the next `commit` (at most a second away)."""
        self._enqueue((self._clock(), None, {"event": event, **fields}))

    def append_shaped(self, shape: RecordShape, values: tuple[Any, ...]) -> None:
        """Queue one record of a prepared shape, `values` in its varying members' order."""
        self._enqueue((self._clock(), shape, values))

    def append_rate_limited(self, event: str, reason: str, **fields: Any) -> None:
        """At most one record per second per event and reason. The others are counted,
        and once the second is over one `<event>_suppressed` record says how many there
        were (at the next commit: within about a second, and at `close`)."""
        now = self._monotonic()
        key = (event, reason)
        with self._lock:
            window = self._windows.get(key)
            if window is not None and now - window[0] < _RATE_WINDOW_SECONDS:
                self._windows[key] = (window[0], window[1] + 1)
                return
            if window is not None:
                self._close_window(key, window[1])
            self._windows[key] = (now, 0)
            self._enqueue((self._clock(), None, {"event": event, "reason": reason, **fields}))

    def _close_window(self, key: tuple[str, str], count: int) -> None:
        if count:
            event, reason = key
            record = {"event": f"{event}_suppressed", "reason": reason, "count": count}
            self._enqueue((self._clock(), None, record))

    def _close_windows(self, final: bool) -> None:
        """Under `_lock`: count what every window that is over suppressed."""
        now = self._monotonic()
        for key, (start, count) in list(self._windows.items()):
            if final or now - start >= _RATE_WINDOW_SECONDS:
                self._close_window(key, count)
                del self._windows[key]

    # -- writing ---------------------------------------------------------------------

    def commit(self, *, final: bool = False) -> None:
        """Write and fsync everything queued. Blocking I/O: call it off the event loop.

        Raises AuditError when the records cannot be written. Records whose lines
        reached the file stay written (they are not queued again, which would duplicate
        them); the others stay queued for the next commit.
        """
        with self._commit_lock:
            with self._lock:
                self._close_windows(final)
                dropped, self._dropped = self._dropped, 0
            pending = self._pending
            batch = [pending.popleft() for _ in range(len(pending))]
            if not batch and not dropped:
                return
            try:
                self._lock_exclusively()
            except OSError:
                self._failed_at = self._monotonic()
                pending.extendleft(reversed(batch))
                with self._lock:
                    self._dropped += dropped
                raise AuditError("audit_unavailable", "MyMCP audit log cannot be written") from None
            writer: _ChainWriter | None = None
            leading = 0
            removed: list[int] = []
            # What the writer records of its own (a recovery, a mismatch, drops) goes
            # ahead of the queued records, so it takes a time no later than theirs: by
            # `seq` or by `time`, a reader sees the same order.
            moment = self._clock()
            if batch:
                moment = min(moment, batch[0][0])
            try:
                writer = self._writer(moment)
                if dropped:
                    writer.add(moment, None, {"event": "audit_dropped", "count": dropped})
                leading = writer.added
                writer.add_all(batch)
                removed = writer.finish(self._max_segments, self._clock())
                self._known = self._write_head(writer)
                self._failed_at = None
            except OSError:
                self._failed_at = self._monotonic()
                self._known = None  # read the tail from disk next time
                written = writer.written if writer is not None else 0
                pending.extendleft(reversed(batch[max(0, written - leading) :]))
                if dropped and written < leading:
                    with self._lock:
                        self._dropped += dropped
                raise AuditError("audit_unavailable", "MyMCP audit log cannot be written") from None
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        for number in removed:
            _log.info("audit segment_removed segment=%d", number)

    def refusing(self) -> bool:
        """Whether the last commit failed less than a flush interval ago. A call whose
        record must be durable before it runs is then refused at once: trying for each
        call would encode the whole queued backlog again for every write that fails,
        while the background writer already retries each interval."""
        failed = self._failed_at
        return failed is not None and self._monotonic() - failed < FLUSH_INTERVAL_SECONDS

    def _writer(self, now: float) -> _ChainWriter:
        """A writer continuing the chain, under the exclusive lock: from where this
        process left it if nobody wrote since, otherwise from the tail on disk, checked
        against `HEAD`, recording what it found first (at `now`)."""
        known = self._known
        if known is not None and self._unchanged(known):
            return _ChainWriter(self.directory, known.tail, self._max_segment_bytes)
        tail = read_tail(self.directory)
        writer = _ChainWriter(self.directory, tail, self._max_segment_bytes)
        if tail.torn:
            writer.new_segment()
            writer.add(now, None, {"event": "audit_recovered", "torn_segment": tail.segment})
        head = read_head(self.directory)
        if self._head_disagrees(tail, head):
            writer.add(
                now,
                None,
                {
                    "event": "audit_head_mismatch",
                    "head_seq": head[0] if head else None,
                    "head_hash": head[1] if head else None,
                },
            )
            _log.error("audit outcome=error code=audit_head_mismatch")
        return writer

    def _unchanged(self, known: _Known) -> bool:
        try:
            segment = os.stat(self.directory / segment_name(known.tail.segment))
            head = os.stat(self.directory / HEAD_FILE)
        except FileNotFoundError:
            return False
        if (segment.st_dev, segment.st_ino, segment.st_size) != known.segment:
            return False
        if (head.st_dev, head.st_ino) != known.head:
            return False
        return not os.path.lexists(self.directory / segment_name(known.tail.segment + 1))

    def _head_disagrees(self, tail: Tail, head: tuple[int, str] | None) -> bool:
        """Whether the log does not reach the record `HEAD` names. `HEAD` may lag the
        tail (a crash between writing records and replacing `HEAD`), never lead it."""
        if head is None:
            return True
        if head == (tail.seq, tail.hash):
            return False
        if head == (0, GENESIS_HASH):  # a crash before the first HEAD was replaced
            found = segments(self.directory)
            return not found or found[0][0] != 1
        if head[0] > tail.seq:
            return True
        record = find_record(self.directory, head[0])
        if record is None:
            # Retention removed it while `HEAD` lagged: a lag all the same, as
            # `mymcp audit verify` reads it (which also proves each removal was
            # recorded). Only a record missing after the log's start was taken away.
            first = first_record(self.directory, 0)
            return first is None or head[0] >= int(first["seq"])
        return bool(record["hash"] != head[1])

    def _write_head(self, writer: _ChainWriter) -> _Known:
        head = write_head(self.directory, writer.seq, writer.hash)
        fsync_directory(self.directory)  # the new segments, the removals and HEAD's rename
        segment = os.stat(self.directory / segment_name(writer.segment))
        tail = Tail(writer.segment, writer.size, writer.seq, writer.hash, False)
        return _Known(
            tail, (segment.st_dev, segment.st_ino, segment.st_size), (head.st_dev, head.st_ino)
        )

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> None:
        """Start the background thread that commits queued records every second."""
        if self._flusher is not None:
            return
        self._stopping = False
        self._flusher = threading.Thread(target=self._flush_loop, name="mymcp-audit", daemon=True)
        self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stopping:
            self._wake.wait(FLUSH_INTERVAL_SECONDS)
            self._wake.clear()
            try:
                self.commit()
            except AuditError as exc:
                _log.error("audit outcome=error code=%s", exc.code)

    def close(self) -> None:
        """Stop the background thread and commit what is queued (suppressed counts too).

        Called as the process stops, where a failure can only be reported: records that
        cannot be written then (a full disk) are lost, and an error line says so.
        """
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            self._stopping = True
            self._wake.set()
            flusher.join()
        try:
            self.commit(final=True)
        except AuditError as exc:
            _log.error("audit outcome=error code=%s at=close lost=%d", exc.code, len(self._pending))
        finally:
            os.close(self._lock_fd)


class _ChainWriter:
    """Extends the chain from `tail` under the directory lock, rotating as needed.

    `added` counts the lines added, `written` those whose every byte reached a file.
    """

    __slots__ = (
        "_created",
        "_directory",
        "_lines",
        "_max",
        "_prefix",
        "_second",
        "added",
        "hash",
        "segment",
        "seq",
        "size",
        "written",
    )

    def __init__(self, directory: Path, tail: Tail, max_segment_bytes: int) -> None:
        self._directory = directory
        self._max = max_segment_bytes
        self.segment = tail.segment
        self.size = tail.size
        self.seq = tail.seq
        self.hash = tail.hash
        self._lines: list[tuple[int, bytes]] = []
        self._created = tail.size == 0  # the segment's file may be new: its name needs an fsync
        self.added = 0
        self.written = 0
        self._second = -1  # the records of one second share their time's prefix
        self._prefix = ""

    def new_segment(self) -> None:
        self.segment += 1
        self.size = 0
        self._created = True

    def add(self, moment: float, shape: RecordShape | None, payload: Any) -> None:
        self.add_all([(moment, shape, payload)])

    def add_all(self, entries: list[_Entry]) -> None:
        """Chain each queued entry in order. One loop with the writer's state in locals:
        a busy server's every record passes through here."""
        seq, digest, size, segment = self.seq, self.hash, self.size, self.segment
        lines, limit, sha256 = self._lines, self._max, hashlib.sha256
        second, prefix = self._second, self._prefix
        for moment, shape, payload in entries:
            seq += 1
            # The records of one second share their time's prefix.
            whole, milliseconds = divmod(int(moment * 1000), 1000)
            if whole != second:
                second, prefix = whole, timestamp(whole)[:-5]
            moment_text = prefix + _MILLISECONDS[milliseconds]
            if shape is None:
                record = {"seq": seq, "time": moment_text, **payload, "prev": digest}
                body = canonical_record(record)
            else:
                body = shape.encode(payload, digest, seq, moment_text)
            digest = sha256(body).hexdigest()
            line = record_line(body, digest)
            if size and size + len(line) > limit:
                segment, size = segment + 1, 0
                self._created = True
            lines.append((segment, line))
            size += len(line)
        self.added += len(entries)
        self.seq, self.hash, self.size, self.segment = seq, digest, size, segment
        self._second, self._prefix = second, prefix

    def flush(self) -> None:
        """Append every added line to its segment and fsync it."""
        lines, start = self._lines, 0
        while start < len(lines):
            number = lines[start][0]
            end = start
            while end < len(lines) and lines[end][0] == number:
                end += 1
            self._append(number, [line for _, line in lines[start:end]])
            start = end
        lines.clear()
        if self._created:
            self._created = False
            fsync_directory(self._directory)

    def _append(self, number: int, lines: list[bytes]) -> None:
        data = memoryview(b"".join(lines))
        path = self._directory / segment_name(number)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        done = 0
        try:
            try:
                while done < len(data):
                    done += os.write(fd, data[done:])
            finally:
                # Lines that reached the file are written, whatever happens next.
                for line in lines:
                    if done < len(line):
                        break
                    done -= len(line)
                    self.written += 1
            os.fsync(fd)
        finally:
            os.close(fd)

    def finish(self, max_segments: int, moment: float) -> list[int]:
        """Write everything, then remove the oldest segments beyond `max_segments`, each
        only once the record of its removal is durable."""
        self.flush()
        removed: list[int] = []
        found = self._chain_segments()
        held: dict[Path, bool] = {}  # read once per segment, however many are removed
        while len(found) > max_segments and _with_history(found, held) > max_segments:
            number, path = found[0]
            last_seq, last_hash = self._end_of(number, path)
            self.add(
                moment,
                None,
                {
                    "event": "segment_removed",
                    "segment": number,
                    "last_seq": last_seq,
                    "last_hash": last_hash,
                },
            )
            self.flush()
            path.unlink()
            removed.append(number)
            found = self._chain_segments()
        return removed

    def _chain_segments(self) -> list[tuple[int, Path]]:
        """The segments up to the one being written. Files named like segments after it
        hold nothing of the chain (the writer never created them): counted, a few
        planted empty files would make it remove real history, each removal recorded as
        ordinary retention."""
        return [
            (number, path) for number, path in segments(self._directory) if number <= self.segment
        ]

    def _end_of(self, number: int, path: Path) -> tuple[int, str]:
        """Where the chain stood after segment `number`: its own last record, or (for a
        segment holding only a torn line) what the first record after it chains to."""
        last = last_record(path)
        if last is not None:
            return last["seq"], last["hash"]
        following = first_record(self._directory, number)
        if following is not None:
            return following["seq"] - 1, following["prev"]
        return self.seq, self.hash


def _with_history(found: list[tuple[int, Path]], held: dict[Path, bool]) -> int:
    """How many of these segments hold a complete line (`held` remembers what each was
    found to hold). One that holds none (a write interrupted before its first line
    ended) is no history and is not counted, or files planted to look like it would
    make retention remove real segments; it is removed once it is older than every
    segment kept."""
    count = 0
    for _, path in found:
        if path not in held:
            held[path] = _holds_a_line(path)
        count += held[path]
    return count


def _holds_a_line(path: Path) -> bool:
    """Whether a segment has a newline within its first `TAIL_WINDOW` bytes (every record
    the writer writes is far shorter: a longer first line is no record)."""
    with suppress(FileNotFoundError), open_segment(path) as handle:
        seen = 0
        while seen < TAIL_WINDOW and (chunk := handle.read(4096)):
            if b"\n" in chunk:
                return True
            seen += len(chunk)
    return False
