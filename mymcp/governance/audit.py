"""The security audit: a hash-chained, bounded, content-free JSON Lines log.

Layout of the audit directory (mode 0700):

- `segment-<n>.jsonl` numbered segments, one record per line, each line the canonical
  JSON (sorted keys, no spaces, ASCII) of one record;
- `HEAD`: `<seq> <hash>` of the newest record, replaced after every write, so that
  records cut off the end of the log are noticed;
- `audit.key`: 32 random bytes (mode 0600) keying the digests of arguments and session
  ids, so the log can show that two calls had the same arguments without holding them;
- `audit.lock`: the `flock` that lets several processes share one directory.

Every record carries `seq` (monotonic across segments), `time` (RFC 3339 UTC, ms),
`event`, `prev` (the previous record's hash; 64 zeros for the very first) and `hash`
(SHA-256 of the canonical JSON of the record without `hash`). A line is that canonical
JSON with `hash` appended as the last member, so each record is serialised once. A new
segment starts when
the current one would pass `max_segment_bytes`; its first record chains to the last
record of the segment before. When more than `max_segments` exist the oldest is removed,
and a `segment_removed` record naming it and its last hash keeps the chain explainable.

Writes are batched: `append` only queues a record (the caller's hot path), and `commit`
writes and fsyncs everything queued, under the directory lock, reading the chain's tail
from disk each time so two processes never fork it. A background thread commits at
least once a second; callers that must not proceed before their record is durable (a
tool that changes something) call `commit` themselves. A crash can leave at most a torn
last line; the next writer leaves it in place, starts a new segment and records
`audit_recovered`, and `verify` reports the torn line as such.

What the chain proves: a record edited, inserted, removed or moved after it was written
is detected by `verify`, and so is a cut-off end while `HEAD` is intact. It does not
stop someone who can write the directory from rewriting the whole chain and `HEAD`
consistently: to pin history, keep the `verify` output (it prints the head hash)
somewhere that person cannot reach.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import hmac
import json
import logging
import math
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from mymcp._safefile import SafeFileError, read_safe_file
from mymcp.errors import AuditError

__all__ = [
    "GENESIS_HASH",
    "AuditLog",
    "AuditRecord",
    "VerifyResult",
    "canonical_json",
    "read_records",
    "record_hash",
    "verify_audit",
]

_log = logging.getLogger("mymcp.audit")

GENESIS_HASH: Final = "0" * 64
KEY_FILE: Final = "audit.key"
LOCK_FILE: Final = "audit.lock"
HEAD_FILE: Final = "HEAD"
_SEGMENT: Final = re.compile(r"segment-([0-9]{6,12})\.jsonl")
_TAIL_WINDOW: Final = 65536
FLUSH_INTERVAL_SECONDS: Final = 1.0
MAX_PENDING: Final = 65536
_WAKE_AT: Final = 1024
_SESSION_TAGS: Final = 4096

AuditRecord = dict[str, Any]


_CANONICAL: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def canonical_json(value: object) -> bytes:
    """The one serialisation hashed and written: sorted keys, no spaces, ASCII only.

    ASCII escapes make it total over everything the JSON parser accepted, lone
    surrogates included. (One encoder, built once: `json.dumps` with options builds a
    new one per call, which costs more than the encoding of a small record.)
    """
    return _CANONICAL.encode(value).encode("ascii")


_encode_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _canonical_record(record: Mapping[str, Any]) -> bytes:
    """`canonical_json` of a record, faster for the flat records the audit writes.

    Strings, integers, finite floats, None and booleans are written exactly as the canonical encoder
    writes them (the C string escaper it uses, sorted keys); a record holding anything
    else takes the general encoder. A test checks the two agree on generated records.
    """
    parts = []
    for key in sorted(record):
        value = record[key]
        if isinstance(value, str):
            text = _encode_string(value)
        elif value is None:
            text = "null"
        elif value is True or value is False:
            text = "true" if value else "false"
        elif type(value) is int:
            text = str(value)
        elif type(value) is float and math.isfinite(value):
            text = float.__repr__(value)
        else:
            return canonical_json(record)
        parts.append(f"{_encode_string(key)}:{text}")
    return ("{" + ",".join(parts) + "}").encode("ascii")


def record_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of `record` without its `hash` member."""
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(canonical_json(body)).hexdigest()


def _line(body: bytes, digest: str) -> bytes:
    """The written line: the canonical body with `hash` appended as its last member."""
    return body[:-1] + b',"hash":"' + digest.encode("ascii") + b'"}\n'


def _timestamp(seconds: float) -> str:
    whole = int(seconds // 1)
    milliseconds = int((seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{milliseconds:03d}Z"


def _segment_name(number: int) -> str:
    return f"segment-{number:06d}.jsonl"


def _segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of `directory`, oldest first."""
    found = []
    for entry in os.scandir(directory):
        match = _SEGMENT.fullmatch(entry.name)
        if match is not None and entry.is_file(follow_symlinks=False):
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


@dataclass(frozen=True, slots=True)
class _Tail:
    segment: int
    size: int
    seq: int
    hash: str
    torn: bool


def _read_tail(directory: Path) -> _Tail:
    """Where the chain ends on disk: the newest complete record of the newest segment."""
    segments = _segments(directory)
    torn = False
    for number, path in reversed(segments):
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - _TAIL_WINDOW))
            window = handle.read()
        if window and not window.endswith(b"\n"):
            torn = torn or number == segments[-1][0]
            window = window[: window.rfind(b"\n") + 1]
        lines = window.rstrip(b"\n").split(b"\n") if window.strip() else []
        if lines:
            try:
                last = json.loads(lines[-1])
                seq, digest = int(last["seq"]), str(last["hash"])
            except (ValueError, KeyError, TypeError):
                # The end of the chain is unreadable: continue from nothing and let
                # `verify` point at the broken line.
                seq, digest = 0, GENESIS_HASH
            newest = segments[-1]
            return _Tail(newest[0], newest[1].stat().st_size, seq, digest, torn)
    if segments:
        newest = segments[-1]
        return _Tail(newest[0], newest[1].stat().st_size, 0, GENESIS_HASH, torn)
    return _Tail(1, 0, 0, GENESIS_HASH, False)


def _open_private(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _prepare_directory(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(directory)
    except OSError:
        raise AuditError("audit_unavailable", "MyMCP audit directory cannot be created") from None
    if not stat.S_ISDIR(info.st_mode):
        raise AuditError("audit_unavailable", "MyMCP audit directory is not a directory")
    if info.st_mode & 0o022:
        raise AuditError("audit_unavailable", "MyMCP audit directory is group- or world-writable")


def _load_key(directory: Path) -> bytes:
    path = directory / KEY_FILE
    try:
        fd = _open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    except OSError:
        raise AuditError("audit_unavailable", "MyMCP audit key cannot be created") from None
    else:
        try:
            os.write(fd, secrets.token_bytes(32))
            os.fsync(fd)
        finally:
            os.close(fd)
    try:
        key = read_safe_file(path, max_bytes=64, private=True)
    except SafeFileError:
        raise AuditError(
            "audit_unavailable", "MyMCP audit key is unreadable or not private (mode 0600)"
        ) from None
    if len(key) != 32:
        raise AuditError("audit_unavailable", "MyMCP audit key is not 32 bytes")
    return key


class AuditLog:
    """Appends records to one audit directory; safe to share between threads and processes."""

    def __init__(
        self,
        directory: Path,
        *,
        max_segment_bytes: int,
        max_segments: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _prepare_directory(directory)
        self.directory = directory
        key = _load_key(directory)
        # Keyed once: every digest copies these instead of setting up HMAC again.
        self._arguments_mac = hmac.new(key, b"arguments\x00", hashlib.sha256)
        self._session_mac = hmac.new(key, b"session\x00", hashlib.sha256)
        self._session_tags: dict[str, str] = {}
        self._max_segment_bytes = max_segment_bytes
        self._max_segments = max_segments
        self._clock = clock
        self._pending: list[tuple[float, AuditRecord]] = []
        self._pending_lock = threading.Lock()
        self._dropped = 0
        self._commit_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self._flusher: threading.Thread | None = None
        self._rate: dict[str, tuple[float, int]] = {}
        try:
            self._lock_fd = _open_private(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
        except OSError:
            raise AuditError("audit_unavailable", "MyMCP audit lock cannot be opened") from None

    # -- what callers record ---------------------------------------------------------

    def digest(self, value: object) -> str:
        """Keyed digest of a JSON value (tool arguments): equal values, equal digests."""
        try:
            data = canonical_json(value)
        except (ValueError, TypeError, RecursionError):
            return "unhashable"
        mac = self._arguments_mac.copy()
        mac.update(data)
        return mac.hexdigest()

    def session_tag(self, session_id: str) -> str:
        """Keyed hash of a session id: records of one session group without the id.

        Remembered per session id (a bounded map, cleared when full): a session's
        requests all need the same tag.
        """
        tag = self._session_tags.get(session_id)
        if tag is None:
            mac = self._session_mac.copy()
            mac.update(session_id.encode("utf-8", "surrogatepass"))
            tag = mac.hexdigest()[:32]
            if len(self._session_tags) >= _SESSION_TAGS:
                self._session_tags.clear()
            self._session_tags[session_id] = tag
        return tag

    def append(self, event: str, **fields: Any) -> None:
        """Queue one record; it is written by the next `commit` (at most a second away)."""
        entry = (self._clock(), {"event": event, **fields})
        with self._pending_lock:
            if len(self._pending) >= MAX_PENDING:
                self._dropped += 1  # the disk is not keeping up or is failing: never block
                return
            self._pending.append(entry)
            wake = len(self._pending) >= _WAKE_AT
        if wake:
            self._wake.set()

    def append_rate_limited(self, event: str, reason: str, **fields: Any) -> None:
        """At most one record per second per reason; the record counts what it stood for."""
        now = self._clock()
        last, suppressed = self._rate.get(reason, (float("-inf"), 0))
        if now - last < 1.0:
            self._rate[reason] = (last, suppressed + 1)
            return
        self._rate[reason] = (now, 0)
        self.append(event, reason=reason, suppressed=suppressed, **fields)

    # -- writing ---------------------------------------------------------------------

    def commit(self) -> None:
        """Write and fsync everything queued. Blocking I/O: call it off the event loop.

        Raises AuditError when the records cannot be written; they stay queued.
        """
        with self._commit_lock:
            with self._pending_lock:
                if not self._pending and not self._dropped:
                    return
                batch, self._pending = self._pending, []
                dropped, self._dropped = self._dropped, 0
            try:
                self._write(batch, dropped)
            except OSError:
                with self._pending_lock:
                    self._pending[:0] = batch
                    self._dropped += dropped
                raise AuditError("audit_unavailable", "MyMCP audit log cannot be written") from None

    def _write(self, batch: list[tuple[float, AuditRecord]], dropped: int) -> None:
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            tail = _read_tail(self.directory)
            writer = _ChainWriter(self.directory, tail, self._max_segment_bytes)
            if tail.torn:
                writer.new_segment()
                writer.add(
                    self._clock(), {"event": "audit_recovered", "torn_segment": tail.segment}
                )
            if dropped:
                writer.add(self._clock(), {"event": "audit_dropped", "count": dropped})
            for moment, record in batch:
                writer.add(moment, record)
            removed = writer.finish(self._max_segments, self._clock())
            self._write_head(writer.seq, writer.hash)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        for number in removed:
            _log.info("audit segment_removed segment=%d", number)

    def _write_head(self, seq: int, digest: str) -> None:
        temporary = self.directory / f".{HEAD_FILE}.{os.getpid()}.tmp"
        fd = _open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            os.write(fd, f"{seq} {digest}\n".encode())
        finally:
            os.close(fd)
        os.replace(temporary, self.directory / HEAD_FILE)

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
        """Stop the background thread and commit what is queued."""
        flusher, self._flusher = self._flusher, None
        if flusher is not None:
            self._stopping = True
            self._wake.set()
            flusher.join()
        try:
            self.commit()
        finally:
            os.close(self._lock_fd)


class _ChainWriter:
    """Extends the chain from `tail` under the directory lock, rotating as needed."""

    def __init__(self, directory: Path, tail: _Tail, max_segment_bytes: int) -> None:
        self._directory = directory
        self._max = max_segment_bytes
        self.segment = tail.segment
        self.size = tail.size
        self.seq = tail.seq
        self.hash = tail.hash
        self._chunks: dict[int, list[bytes]] = {}
        self._created: list[int] = []
        self._second = -1  # the records of one second share their time's prefix
        self._prefix = ""

    def _time(self, moment: float) -> str:
        whole = int(moment // 1)
        if whole != self._second:
            self._second, self._prefix = whole, _timestamp(whole)[:-5]
        return f"{self._prefix}.{int((moment - whole) * 1000):03d}Z"

    def new_segment(self) -> None:
        self.segment += 1
        self.size = 0
        self._created.append(self.segment)

    def add(self, moment: float, fields: AuditRecord) -> None:
        record = {"seq": self.seq + 1, "time": self._time(moment), **fields, "prev": self.hash}
        body = _canonical_record(record)
        digest = hashlib.sha256(body).hexdigest()
        line = _line(body, digest)
        if self.size and self.size + len(line) > self._max:
            self.new_segment()
        self._chunks.setdefault(self.segment, []).append(line)
        self.size += len(line)
        self.seq += 1
        self.hash = digest

    def _flush(self) -> None:
        for number, lines in self._chunks.items():
            path = self._directory / _segment_name(number)
            fd = _open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            try:
                data = b"".join(lines)
                while data:
                    written = os.write(fd, data)
                    data = data[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
        self._chunks.clear()
        if self._created:
            self._created.clear()
            _fsync_directory(self._directory)

    def finish(self, max_segments: int, moment: float) -> list[int]:
        """Write everything, then drop the oldest segments beyond `max_segments`."""
        self._flush()
        removed: list[int] = []
        segments = _segments(self._directory)
        while len(segments) > max_segments:
            (number, path), (_, successor) = segments[0], segments[1]
            first = _first_record(successor)
            path.unlink()
            removed.append(number)
            segments.pop(0)
            last_seq = int(first["seq"]) - 1 if first else self.seq
            last_hash = str(first["prev"]) if first else self.hash
            self.add(
                moment,
                {
                    "event": "segment_removed",
                    "segment": number,
                    "last_seq": last_seq,
                    "last_hash": last_hash,
                },
            )
            self._flush()
            segments = _segments(self._directory)
        if removed:
            _fsync_directory(self._directory)
        return removed


def _first_record(path: Path) -> AuditRecord | None:
    with open(path, "rb") as handle:
        line = handle.readline(_TAIL_WINDOW)
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and "seq" in record and "prev" in record else None


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse directory fsync; the data is synced
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


# -- reading and verifying ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """What `verify_audit` found: `problem` is None when the chain is intact."""

    records: int
    segments: int
    head_hash: str
    problem: str | None = None
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.problem is None


def _parse_line(line: bytes) -> AuditRecord | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if not isinstance(record.get("seq"), int) or not isinstance(record.get("hash"), str):
        return None
    return record if isinstance(record.get("prev"), str) else None


def _read_head(directory: Path) -> tuple[int, str] | None:
    try:
        text = (directory / HEAD_FILE).read_text("ascii").strip()
        seq, digest = text.split(" ")
        return int(seq), digest
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def verify_audit(directory: Path) -> VerifyResult:
    """Walk every segment and check each record's hash, `prev` and `seq`, then `HEAD`."""
    segments = _segments(directory)
    if not segments:
        return VerifyResult(0, 0, GENESIS_HASH)
    head = _read_head(directory)
    count, seq, digest = 0, 0, GENESIS_HASH
    unexplained_start: tuple[int, int, str] | None = None  # (segment, first seq, its prev)
    removed: dict[object, tuple[object, object]] = {}
    torn: list[int] = []
    recovered: set[int] = set()
    for position, (number, path) in enumerate(segments):
        data = path.read_bytes()
        lines = data.split(b"\n")
        ends_torn = bool(lines[-1])
        if not ends_torn:
            lines.pop()
        for index, line in enumerate(lines, start=1):
            where = f"{path.name} line {index}"
            if ends_torn and index == len(lines):
                torn.append(number)
                break
            record = _parse_line(line)
            if record is None:
                return VerifyResult(count, len(segments), digest, f"{where}: not a valid record")
            if record_hash(record) != record["hash"]:
                return VerifyResult(
                    count, len(segments), digest, f"{where}: hash does not match its content"
                )
            if count == 0 and position == 0 and index == 1 and number != 1:
                unexplained_start = (number, record["seq"], record["prev"])
            elif record["prev"] != digest:
                return VerifyResult(
                    count, len(segments), digest, f"{where}: prev does not match the record before"
                )
            elif record["seq"] != seq + 1:
                return VerifyResult(
                    count, len(segments), digest, f"{where}: seq {record['seq']} follows {seq}"
                )
            if head is not None and record["seq"] == head[0] and record["hash"] != head[1]:
                return VerifyResult(
                    count, len(segments), digest, f"{where}: does not match {HEAD_FILE}"
                )
            if record.get("event") == "segment_removed":
                removed[record.get("segment", -1)] = (
                    record.get("last_seq"),
                    record.get("last_hash"),
                )
            if record.get("event") == "audit_recovered":
                recovered.add(record.get("torn_segment", -1))
            count += 1
            seq, digest = record["seq"], record["hash"]
    problem = _explain_start(unexplained_start, removed)
    if problem is None:
        problem = _check_torn(torn, recovered, segments[-1][0])
    if problem is None:
        problem = _check_head(head, seq)
    notes = tuple(f"torn final line in {_segment_name(n)} (a crash during a write)" for n in torn)
    return VerifyResult(count, len(segments), digest, problem, notes)


def _explain_start(
    start: tuple[int, int, str] | None, removed: Mapping[object, tuple[object, object]]
) -> str | None:
    if start is None:
        return None
    number, first_seq, prev = start
    if removed.get(number - 1) == (first_seq - 1, prev):
        return None
    return (
        f"{_segment_name(number)} line 1: earlier segments are missing and no "
        "segment_removed record explains it"
    )


def _check_torn(torn: list[int], recovered: set[int], newest: int) -> str | None:
    for number in torn:
        if number != newest and number not in recovered:
            return f"{_segment_name(number)}: torn line in the middle of the log"
    return None


def _check_head(head: tuple[int, str] | None, seq: int) -> str | None:
    if head is None:
        return f"{HEAD_FILE} is missing or unreadable"
    if head[0] > seq:
        return f"records after seq {seq} are missing ({HEAD_FILE} names seq {head[0]})"
    return None


def read_records(directory: Path) -> Iterator[AuditRecord]:
    """Every readable record, oldest first (torn or broken lines are skipped)."""
    for _, path in _segments(directory):
        with open(path, "rb") as handle:
            for line in handle:
                if line.endswith(b"\n"):
                    record = _parse_line(line)
                    if record is not None:
                        yield record
