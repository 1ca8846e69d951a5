"""The audit directory on disk: canonical lines, segment files, `HEAD`, key and lock.

Layout of the audit directory (mode 0700, owned by the user running MyMCP):

- `segment-<n>.jsonl` numbered segments, one record per line;
- `HEAD`: `<seq> <hash>` of the newest record, replaced (and fsync'd) after every write,
  so that records cut off the end of the log are noticed; `0 <64 zeros>` before the
  first record;
- `audit.key`: 32 random bytes (mode 0600) keying the digests of arguments and session
  ids, so the log can show that two calls had the same arguments without holding them;
- `audit.lock`: the `flock` writers take exclusively and `verify` takes shared.

A line is the canonical JSON (sorted keys, no spaces, ASCII escapes) of the record
without `hash`, with `,"hash":"<sha256 of those bytes>"` inserted before its closing
brace, then a newline. There is exactly one valid line for a record, and `verify`
demands it byte for byte.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import operator
import os
import re
import secrets
import stat
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

from mymcp._safefile import (
    SafeFileError,
    SafeFileReason,
    create_private_directories,
    create_private_file,
    read_safe_file,
)
from mymcp._strictjson import compact_json_encoder
from mymcp.errors import AuditError, Location

__all__ = [
    "GENESIS_HASH",
    "HEAD_FILE",
    "NUMBER",
    "WORD",
    "AuditRecord",
    "RecordShape",
    "canonical_json",
    "check_audit_directory",
    "record_hash",
]

GENESIS_HASH: Final = "0" * 64
KEY_FILE: Final = "audit.key"
LOCK_FILE: Final = "audit.lock"
HEAD_FILE: Final = "HEAD"
_SEGMENT: Final = re.compile(r"segment-([0-9]{6,12})\.jsonl")
TAIL_WINDOW: Final = 65536
_CHAIN_MEMBERS: Final = ("prev", "seq", "time")

AuditRecord = dict[str, Any]


_encode_string: Callable[[str], str] = json.encoder.encode_basestring_ascii
_encode_canonical = compact_json_encoder(sort_keys=True)


def canonical_json(value: object) -> bytes:
    """The one serialisation hashed and written: sorted keys, no spaces, ASCII only.

    ASCII escapes make it total over everything the JSON parser accepted, lone
    surrogates included. Raises TypeError, ValueError or RecursionError for values no
    JSON document holds.
    """
    return _encode_canonical(value).encode("ascii")


def _encode_member(value: Any) -> str:
    """The canonical text of one member's value (the flat values records hold, fast)."""
    kind = type(value)
    if kind is str:
        return _encode_string(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    if kind is int:
        return int.__repr__(value)
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    return _encode_canonical(value)


def canonical_record(record: Mapping[str, Any]) -> bytes:
    """`canonical_json` of a record (a test checks the two agree on generated records)."""
    members = [f"{_encode_string(key)}:{_encode_member(record[key])}" for key in sorted(record)]
    return ("{" + ",".join(members) + "}").encode("ascii")


def record_hash(record: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of `record` without its `hash` member."""
    body = {key: value for key, value in record.items() if key != "hash"}
    return hashlib.sha256(canonical_record(body)).hexdigest()


def record_line(body: bytes, digest: str) -> bytes:
    """The written line: the canonical body with `hash` added as its last member."""
    return body[:-1] + b',"hash":"' + digest.encode("ascii") + b'"}\n'


WORD: Final = "word"
"""A varying member whose value is a str of ASCII letters, digits and `_` only (a digest,
an id, a code): written between quotes as it is."""
NUMBER: Final = "number"
"""A varying member whose value is an int or a finite float: written as `repr` writes it."""


class RecordShape:
    """One kind of record prepared once: the members that never change (event,
    principal, session, tool) are encoded in advance, in their sorted places, around
    slots for the members that vary per record and for the chain's `prev`, `seq`, `time`.

    Encoding a record is then one string format (plus an escaping encoding for each
    varying member not declared a `WORD` or a `NUMBER` in `kinds`), and gives exactly
    `canonical_record` of the same members (a test checks it). A value that is not of
    its declared kind would be written wrongly, and `verify` would report the line.
    """

    __slots__ = ("_escaped", "_format", "_in_place", "_order")

    def __init__(
        self,
        event: str,
        fixed: Mapping[str, Any],
        varying: tuple[str, ...],
        kinds: Mapping[str, str] | None = None,
    ) -> None:
        members = {"event": event, **fixed}
        clash = (set(members) | set(_CHAIN_MEMBERS)) & set(varying)
        if clash or set(members) & set(_CHAIN_MEMBERS) or len(set(varying)) != len(varying):
            raise ValueError("a member is named twice")
        kinds = kinds or {}
        positions = {name: index for index, name in enumerate((*varying, *_CHAIN_MEMBERS))}
        # The chain's members are written in place (hex, an integer, ASCII time), and so
        # are words and numbers; any other varying member arrives encoded.
        slots = {"prev": '"%s"', "seq": "%d", "time": '"%s"', WORD: '"%s"', NUMBER: "%r"}
        parts, order = [], []
        for name in sorted({*members, *positions}):
            key = _encode_string(name).replace("%", "%%")
            if name in members:
                parts.append(f"{key}:" + _encode_member(members[name]).replace("%", "%%"))
            else:
                parts.append(f"{key}:" + slots.get(kinds.get(name, name), "%s"))
                order.append(positions[name])
        self._format = "{" + ",".join(parts) + "}"
        self._escaped = tuple(i for i, name in enumerate(varying) if name not in kinds)
        # When nothing needs escaping and the slots come in the order the values are
        # given (the dispatcher's shapes), a record is the format applied to the values as
        # they are: half the work of reordering them.
        self._in_place = not self._escaped and order == sorted(order)
        # The chain's three members are always slots, so there are at least two.
        self._order: Callable[[Sequence[object]], tuple[object, ...]] = operator.itemgetter(*order)

    def encode(self, values: tuple[Any, ...], prev: str, seq: int, moment: str) -> bytes:
        """The canonical body of this record with `values` in the varying members."""
        if self._in_place:
            return (self._format % (*values, prev, seq, moment)).encode("ascii")
        texts = [*values, prev, seq, moment]
        for index in self._escaped:
            texts[index] = _encode_member(texts[index])
        return (self._format % self._order(texts)).encode("ascii")


def timestamp(seconds: float) -> str:
    """RFC 3339 UTC with milliseconds."""
    whole = int(seconds // 1)
    milliseconds = int((seconds - whole) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{milliseconds:03d}Z"


def segment_name(number: int) -> str:
    return f"segment-{number:06d}.jsonl"


def segment_number(name: str) -> int | None:
    """The number of the segment file called `name`, or None when the writer would not
    have given it that name (`segment-0000001.jsonl` is not segment 1: two names for
    one number would let one file stand in for another)."""
    match = _SEGMENT.fullmatch(name)
    if match is None or segment_name(int(match.group(1))) != name:
        return None
    return int(match.group(1))


def segments(directory: Path) -> list[tuple[int, Path]]:
    """The segment files of `directory`, oldest first."""
    found = []
    for entry in os.scandir(directory):
        number = segment_number(entry.name)
        if number is not None and entry.is_file(follow_symlinks=False):
            found.append((number, Path(entry.path)))
    return sorted(found)


def misplaced_segments(directory: Path) -> list[str]:
    """Names of segments that are no regular file (a link, a directory, a FIFO): the
    writer never makes one, so each is tampering, and is never read."""
    return sorted(
        entry.name
        for entry in os.scandir(directory)
        if segment_number(entry.name) is not None and not entry.is_file(follow_symlinks=False)
    )


def parse_record(line: bytes) -> AuditRecord | None:
    """A decoded record with an integer `seq` and string `hash` and `prev`, or None."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    if type(record.get("seq")) is not int or not isinstance(record.get("hash"), str):
        return None
    return record if isinstance(record.get("prev"), str) else None


_HEAD_BYTES: Final = 128  # a sequence number and a hash take under 100


def read_head(directory: Path) -> tuple[int, str] | None:
    """`HEAD` as (seq, hash), or None when it is missing or not of that form (also when
    it is a link, a FIFO or anything but a small regular file: never followed, waited
    on or read whole)."""
    try:
        data = read_safe_file(directory / HEAD_FILE, max_bytes=_HEAD_BYTES, private=False)
        text = data.decode("ascii")
    except (SafeFileError, UnicodeDecodeError):
        return None
    parts = text.removesuffix("\n").split(" ")
    if len(parts) != 2 or not parts[0].isdigit() or not re.fullmatch("[0-9a-f]{64}", parts[1]):
        return None
    return int(parts[0]), parts[1]


@dataclass(frozen=True, slots=True)
class Tail:
    """Where the chain ends on disk: the newest segment (its number and size) and the
    newest complete record in any segment; `torn` when the newest segment ends in
    anything but a record: a partial line (a crash during a write) or lines that do not
    read as records (an edit)."""

    segment: int
    size: int
    seq: int
    hash: str
    torn: bool


def read_tail(directory: Path) -> Tail:
    found = segments(directory)
    # A write that failed (a full disk) may have created the next segment and written
    # nothing to it: the chain ends in the newest segment that holds anything, which
    # the writer then continues (or, when its end is torn, moves past).
    while len(found) > 1 and found[-1][1].stat().st_size == 0:
        found.pop()
    if not found:
        return Tail(1, 0, 0, GENESIS_HASH, False)
    newest, newest_path = found[-1]
    size = newest_path.stat().st_size
    torn = False
    # The newest readable record ends the chain, and the writer continues its numbers
    # and hashes after it, so that they never start over. Anything after it in the
    # newest segment (a partial line from a crash, or lines an edit left that do not
    # read as records) is left where it is for `verify` to point at, and the writer
    # moves on to a new segment.
    for number, path in reversed(found):
        last, anything_after = _end_of_segment(path)
        torn = torn or (number == newest and anything_after)
        if last is not None:
            return Tail(newest, size, last["seq"], last["hash"], torn)
    return Tail(newest, size, 0, GENESIS_HASH, torn)


MAX_LINE_BYTES: Final = TAIL_WINDOW
"""Far beyond any record the writer writes: a longer line is no record, and is read past
in pieces instead of being held whole (a segment edited by hand may hold anything)."""


def segment_lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """The lines of an open segment, each with its newline (a torn last line without
    one), or None for a line longer than `MAX_LINE_BYTES`."""
    while line := handle.readline(MAX_LINE_BYTES + 1):
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = handle.readline(MAX_LINE_BYTES)
        yield None


def complete_records(path: Path) -> Iterator[AuditRecord]:
    """The records of one segment's complete lines, oldest first (nothing once the
    segment has been removed)."""
    with suppress(FileNotFoundError), open_segment(path) as handle:
        for line in segment_lines(handle):
            if line is not None and line.endswith(b"\n"):
                record = parse_record(line)
                if record is not None:
                    yield record


def find_record(directory: Path, seq: int) -> AuditRecord | None:
    """The record numbered `seq`, searched from the newest segment back (rarely needed:
    only when `HEAD` lags the tail after a crash)."""
    for _, path in reversed(segments(directory)):
        for record in complete_records(path):
            if record["seq"] == seq:
                return record
            if record["seq"] > seq:
                break  # this segment starts after it: look in the one before
    return None


def first_record(directory: Path, after: int) -> AuditRecord | None:
    """The first complete record of the segments numbered above `after`."""
    for number, path in segments(directory):
        if number > after:
            for record in complete_records(path):
                return record
    return None


def last_record(path: Path) -> AuditRecord | None:
    """The last complete record of one segment."""
    return _end_of_segment(path)[0]


def _end_of_segment(path: Path) -> tuple[AuditRecord | None, bool]:
    """The last complete record of one segment, and whether anything follows it (a last
    line cut short, or lines that read as no record)."""
    anything_after = False
    with open_segment(path) as handle:
        for line in _lines_from_the_end(handle):
            record = None if line is None else parse_record(line)
            if record is not None:
                return record, anything_after
            anything_after = True
    return None, anything_after


def _lines_from_the_end(handle: BinaryIO) -> Iterator[bytes | None]:
    """The lines of an open segment, last first, each without its newline; None for one
    that cannot be a record: a last line cut short (no newline after it), or one longer
    than any record, which is passed over without being held whole. Read backwards a
    window at a time, so that the end of the chain is found however much follows it."""
    position = os.fstat(handle.fileno()).st_size
    # The end part of the line that begins further back, and what that line is: the
    # segment's last line with no newline after it ("cut"), a line ("whole"), or one
    # already longer than a record ("long").
    tail, kind = b"", "cut"
    while position > 0:
        start = max(0, position - TAIL_WINDOW)
        handle.seek(start)
        pieces = handle.read(position - start).split(b"\n")
        position = start
        if len(pieces) > 1:  # the line `tail` ends begins in this window
            ended = pieces.pop() + tail
            if kind == "whole":
                yield ended if len(ended) <= MAX_LINE_BYTES else None
            elif ended or kind == "long":  # a cut last line (an empty one is none)
                yield None
            for piece in reversed(pieces[1:]):
                yield piece if len(piece) <= MAX_LINE_BYTES else None
            tail, kind = pieces[0], "whole"
        elif kind != "long":
            tail = pieces[0] + tail
        if len(tail) > MAX_LINE_BYTES and kind != "long":
            tail, kind = b"", "long"
    if kind == "whole":
        yield tail if len(tail) <= MAX_LINE_BYTES else None  # the segment's first line
    elif tail or kind == "long":
        yield None


def open_segment(path: Path) -> BinaryIO:
    """An audit file opened for reading with the writer's care (`open_private`): a link
    or a FIFO put in a segment's place is refused (OSError), never followed or waited on."""
    return os.fdopen(open_private(path, os.O_RDONLY), "rb")


def open_private(path: Path, flags: int) -> int:
    """An audit file, opened for the writer: never through a link, and only when it is
    a regular file (a FIFO planted under a segment's name would block every write, and
    the writer holds the audit lock while it waits). Raises OSError otherwise."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_head(directory: Path, seq: int, digest: str) -> os.stat_result:
    """Replace `HEAD` durably (the caller fsyncs the directory); its new identity."""
    temporary = directory / f".{HEAD_FILE}.{os.getpid()}.tmp"
    fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            os.write(fd, f"{seq} {digest}\n".encode())
            os.fsync(fd)
            identity = os.fstat(fd)
        finally:
            os.close(fd)
        os.replace(temporary, directory / HEAD_FILE)
    except OSError:
        with suppress(OSError):  # a full disk: leave no temp file behind
            temporary.unlink()
        raise
    return identity


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    except OSError as exc:  # some filesystems refuse directory fsync; the data is synced
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


# -- the directory and its key -------------------------------------------------------------


def _unusable(directory: Path, message: str, detail: str | None) -> AuditError:
    # The path is for the operator's terminal: `str()` of the error; logs take the code.
    return AuditError(
        "audit_unavailable", message, location=Location(source=str(directory)), detail=detail
    )


def _check_private_directory(directory: Path) -> None:
    """The audit directory must be a real directory of this user that no one else can
    enter: the records name who called what, and the key must stay private."""
    try:
        info = os.lstat(directory)
    except OSError as exc:
        raise _unusable(directory, "MyMCP audit directory cannot be used", exc.strerror) from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise _unusable(
            directory, "MyMCP audit directory is not a directory", "a symlink or another file"
        )
    if info.st_uid != os.geteuid():
        raise _unusable(
            directory,
            "MyMCP audit directory belongs to another user",
            f"owned by uid {info.st_uid}, not {os.geteuid()}",
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        raise _unusable(
            directory,
            "MyMCP audit directory is not private",
            f"mode {mode:04o}, expected 0700; run: chmod 700 {directory}",
        )


_KEY_READS: Final = 3


def _read_key(directory: Path) -> bytes:
    path = directory / KEY_FILE
    for attempt in range(1, _KEY_READS + 1):
        try:
            key = read_safe_file(path, max_bytes=64, private=True)
            break
        except SafeFileError as failure:
            # A key another process has just linked into place changes once more as its
            # temporary name is removed (its link count and ctime move): read it again.
            if failure.reason is SafeFileReason.CHANGED and attempt < _KEY_READS:
                continue
            raise _unusable(
                path, "MyMCP audit key is unreadable or not private", str(failure.detail)
            ) from None
    if len(key) != 32:
        raise _unusable(path, "MyMCP audit key is not 32 bytes", f"it has {len(key)} bytes")
    return key


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def prepare_directory(directory: Path) -> bytes:
    """Create the directory (0700) and key (0600) if needed, check both, and return the
    key. Raises AuditError (`audit_unavailable`) naming the path and the cause."""
    try:
        create_private_directories(directory)
    except OSError as exc:
        raise _unusable(
            directory, "MyMCP audit directory cannot be created", exc.strerror
        ) from None
    _check_private_directory(directory)
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # Only when there is none: creating writes a temp file first, which a full
            # disk refuses, and a server must be able to start on a full disk.
            if not _exists(dir_fd, KEY_FILE):
                create_private_file(dir_fd, KEY_FILE, secrets.token_bytes(32))
        finally:
            os.close(dir_fd)
    except FileExistsError:
        pass  # this or another process made it before: it is read below
    except OSError as exc:
        raise _unusable(
            directory / KEY_FILE, "MyMCP audit key cannot be created", exc.strerror
        ) from None
    return _read_key(directory)


def check_audit_directory(directory: Path) -> bool:
    """What the server's start would find, without creating anything: True when the
    directory exists (and it and its key are usable), False when the start will create
    it. Raises AuditError as the start would."""
    if not os.path.lexists(directory):
        ancestor = directory.parent
        while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir() or not os.access(ancestor, os.W_OK | os.X_OK):
            raise _unusable(
                directory,
                "MyMCP audit directory cannot be created",
                f"{ancestor} is not a directory this user can write",
            )
        return False
    _check_private_directory(directory)
    if os.path.lexists(directory / KEY_FILE):
        _read_key(directory)
    return True


# -- the lock --------------------------------------------------------------------------------


def open_lock(directory: Path) -> int:
    try:
        return open_private(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        raise _unusable(
            directory / LOCK_FILE, "MyMCP audit lock cannot be opened", exc.strerror
        ) from None


@contextmanager
def shared_lock(directory: Path) -> Iterator[None]:
    """Hold the directory's lock shared (writers wait until it is released). A
    directory without a lock file (a copy) is read without one."""
    try:
        # Not blocking on the open: a FIFO put in the lock file's place would wait for a
        # writer forever. Anything but a regular file is no lock; it is read without one.
        fd = os.open(
            directory / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        )
    except OSError:
        yield
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)  # closing releases the lock
