"""Reading the audit back: `verify_audit` walks the chain, `read_records` lists records.

`verify_audit` holds the directory's lock shared, so writers (which take it exclusive)
wait until it is done and it never sees a write half made or a segment half rotated.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mymcp.governance.audit_format import (
    GENESIS_HASH,
    HEAD_FILE,
    AuditRecord,
    canonical_record,
    complete_records,
    misplaced_segments,
    open_segment,
    parse_record,
    read_head,
    record_line,
    segment_lines,
    segment_name,
    segments,
    shared_lock,
)

__all__ = ["VerifiedPrefix", "VerifyResult", "read_records", "verify_audit"]


# A segment file's bytes, by a digest of them. Not its stat fields: a write through a
# shared memory mapping can change bytes without changing any time. A fast digest is a
# tenth of what checking every record's hash and link costs.
_Identity = bytes
_CHUNK = 1 << 20


def _identity(path: Path) -> _Identity | None:
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open_segment(path) as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    except OSError:
        return None
    return digest.digest()


@dataclass(frozen=True, slots=True)
class VerifiedPrefix:
    """How far one walk proved the chain: through its sealed segments (every one but
    the newest, which the writer still appends to), by a digest of their bytes then. A
    later walk of the same directory starts after them while each still has them."""

    files: tuple[tuple[int, _Identity], ...]
    walk: _Walk


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """What `verify_audit` found: `problem` is None when the chain is intact."""

    records: int
    segments: int
    head_hash: str
    problem: str | None = None
    notes: tuple[str, ...] = ()
    prefix: VerifiedPrefix | None = field(default=None, compare=False, repr=False)
    """What a later `verify_audit(directory, resume=…)` need not walk again."""

    @property
    def ok(self) -> bool:
        return self.problem is None


class _Broken(Exception):
    """The first problem found; ends the walk."""


@dataclass(slots=True)
class _Walk:
    """The state of one walk along the chain, oldest record first."""

    head: tuple[int, str] | None
    count: int = 0
    seq: int = 0
    digest: str = GENESIS_HASH
    # The first record, when the log does not start at the genesis: (where, its
    # segment, its seq, its prev), to be explained by a `segment_removed` record.
    start: tuple[str, int, int, str] | None = None
    removed: list[tuple[object, object, object]] = field(default_factory=list)
    torn: list[int] = field(default_factory=list)
    recovered: set[object] = field(default_factory=set)

    def copy(self) -> _Walk:
        return _Walk(
            self.head,
            self.count,
            self.seq,
            self.digest,
            self.start,
            list(self.removed),
            list(self.torn),
            set(self.recovered),
        )

    def line(self, number: int, where: str, line: bytes) -> None:
        record = parse_record(line)
        if record is None:
            raise _Broken(f"{where}: not a valid record")
        body = {key: value for key, value in record.items() if key != "hash"}
        try:
            canonical = canonical_record(body)
        except (TypeError, ValueError, RecursionError):
            raise _Broken(f"{where}: not a valid record") from None
        if hashlib.sha256(canonical).hexdigest() != record["hash"]:
            raise _Broken(f"{where}: hash does not match its content")
        if record_line(canonical, record["hash"]) != line + b"\n":
            raise _Broken(f"{where}: not written as the writer writes it (bytes were changed)")
        self._link(number, where, record)
        self._note(where, record)
        self.count += 1
        self.seq, self.digest = record["seq"], record["hash"]

    def _link(self, number: int, where: str, record: AuditRecord) -> None:
        if self.count == 0:
            if (record["seq"], record["prev"]) != (1, GENESIS_HASH):
                self.start = (where, number, record["seq"], record["prev"])
        elif record["prev"] != self.digest:
            raise _Broken(f"{where}: prev does not match the record before")
        elif record["seq"] != self.seq + 1:
            raise _Broken(f"{where}: seq {record['seq']} follows {self.seq}")
        head = self.head
        if head is not None and record["seq"] == head[0] and record["hash"] != head[1]:
            raise _Broken(f"{where}: does not match {HEAD_FILE}")

    def _note(self, where: str, record: AuditRecord) -> None:
        event = record.get("event")
        if event == "segment_removed":
            entry = (record.get("segment"), record.get("last_seq"), record.get("last_hash"))
            self.removed.append(entry)
        elif event == "audit_recovered":
            self.recovered.add(record.get("torn_segment"))
        elif event == "audit_head_mismatch":
            named = record.get("head_seq")
            found = f"{HEAD_FILE} named seq {named}" if named is not None else f"no {HEAD_FILE}"
            raise _Broken(
                f"{where}: when this record was written the log did not reach the record "
                f"{HEAD_FILE} named ({found}, the log ended at seq {self.seq}): records "
                "were removed or HEAD was changed"
            )

    def finish(self, newest: int) -> None:
        # The end first: when the newest segment is gone, so are the segment_removed
        # records that explain the start, and the missing end is what happened.
        if self.head is not None and self.head[0] > self.seq:
            raise _Broken(
                f"records after seq {self.seq} are missing ({HEAD_FILE} names seq {self.head[0]})"
            )
        if self.start is not None:
            where, number, first_seq, prev = self.start
            explained = any(
                isinstance(segment, int)
                and segment < number
                and (seq, digest) == (first_seq - 1, prev)
                for segment, seq, digest in self.removed
            )
            if not explained:
                raise _Broken(
                    f"{where}: earlier segments are missing and no segment_removed record "
                    "explains it"
                )
        for number in self.torn:
            if number != newest and number not in self.recovered:
                raise _Broken(f"{segment_name(number)}: torn line in the middle of the log")
        if self.head is None:
            raise _Broken(f"{HEAD_FILE} is missing or unreadable")

    def head_lag(self) -> str | None:
        """What to say when `HEAD` names a record before the last one (after `finish`).

        A note, never a break, because nothing bounds how far an honest writer leaves it
        behind: `HEAD` is replaced once per commit, after that commit's records (all that
        was queued, and however many segment_removed records retention needs), and a
        writer whose replacement fails (no room for the new file) keeps the records
        written and goes on committing; the next writer continues such a log without a
        word. `HEAD` set back by hand looks the same."""
        head = self.head
        if head is None or head[0] >= self.seq:
            return None
        first = self.seq - self.count + 1  # a whole walk's seqs run without a gap
        named = f"seq {head[0]}" if head[0] else "seq 0 (no record)"
        gone = ""
        if 0 < head[0] < first:
            gone = f", a record no longer in the log (it starts at seq {first})"
        beyond = min(self.seq - head[0], self.count)
        return (
            f"{HEAD_FILE} lags the log: it names {named}{gone}, the log ends at seq "
            f"{self.seq}, records beyond it: {beyond} (left by a crash or a "
            f"failed write between writing records and replacing {HEAD_FILE}, or by "
            f"{HEAD_FILE} set back by hand)"
        )


def verify_audit(directory: Path, *, resume: VerifiedPrefix | None = None) -> VerifyResult:
    """Walk every segment and check each line (byte for byte the writer's encoding of
    a record whose hash matches), each `prev` and `seq`, the start, and `HEAD`.

    With `resume`, an earlier result's `prefix`, the walk starts after the segments it
    proved, if each still holds the same bytes (compared by digest, which costs far less
    than checking every record) and `HEAD` names no record inside them; otherwise
    everything is walked again.
    """
    with shared_lock(directory):
        try:
            found = segments(directory)
            misplaced = misplaced_segments(directory)
        except OSError as exc:
            # Gone, or replaced by something that is no directory, while in use.
            problem = f"the audit directory cannot be read ({exc.strerror or 'unreadable'})"
            return VerifyResult(0, 0, GENESIS_HASH, problem)
        head = read_head(directory)
        if misplaced:
            problem = f"{misplaced[0]}: not a regular file (a link, directory or FIFO)"
            return VerifyResult(0, len(found), GENESIS_HASH, problem)
        fresh = head == (0, GENESIS_HASH) or (
            head is None and not os.path.lexists(directory / HEAD_FILE)
        )
        if not found and fresh:
            return VerifyResult(0, 0, GENESIS_HASH)
        files = [(number, _identity(path)) for number, path in found]
        walk, done = _resumed(resume, files, head)
        prefix = resume if done else None
        try:
            for position, (number, path) in enumerate(found[done:], start=done):
                _walk_segment(walk, number, path)
                sealed = files[: position + 1]
                if position + 1 < len(found) and all(i is not None for _, i in sealed):
                    proved = tuple((n, i) for n, i in sealed if i is not None)
                    prefix = VerifiedPrefix(proved, walk.copy())
            # As the writer does: the chain ends in the newest segment holding anything
            # (a write that failed on a full disk may have created an empty one after it).
            holding = [number for number, path in found if path.stat().st_size > 0]
            walk.finish(holding[-1] if holding else (found[-1][0] if found else 0))
        except _Broken as broken:
            return VerifyResult(walk.count, len(found), walk.digest, str(broken))
    notes = tuple(
        f"torn final line in {segment_name(n)} (a crash during a write)" for n in walk.torn
    )
    lag = walk.head_lag()
    if lag is not None:
        notes = (*notes, lag)
    return VerifyResult(walk.count, len(found), walk.digest, None, notes, prefix)


def _resumed(
    resume: VerifiedPrefix | None,
    files: list[tuple[int, _Identity | None]],
    head: tuple[int, str] | None,
) -> tuple[_Walk, int]:
    """Where a walk starts: after `resume`'s segments, when they are the first of `files`
    unchanged, and the newest is not among them; from the beginning otherwise. A `HEAD`
    naming a record inside them would have to be checked against it: walked again."""
    if resume is not None and len(resume.files) < len(files):
        proved = resume.walk
        unchanged = tuple(files[: len(resume.files)]) == resume.files
        head_after = head is None or head[0] > proved.seq or head == (proved.seq, proved.digest)
        if unchanged and head_after:
            walk = proved.copy()
            walk.head = head
            return walk, len(resume.files)
    return _Walk(head), 0


def _walk_segment(walk: _Walk, number: int, path: Path) -> None:
    try:
        handle = open_segment(path)
    except FileNotFoundError:
        raise _Broken(f"{path.name}: removed while it was being verified") from None
    except OSError:
        raise _Broken(f"{path.name}: no longer a regular file (a link or another kind)") from None
    with handle:
        for index, line in enumerate(segment_lines(handle), start=1):
            where = f"{path.name} line {index}"
            if line is None:
                raise _Broken(f"{where}: not a valid record (far too long)")
            if not line.endswith(b"\n"):  # only ever the last line
                walk.torn.append(number)
                break
            walk.line(number, where, line[:-1])


def read_records(directory: Path) -> Iterator[AuditRecord]:
    """Every readable record, oldest first (torn, broken or over-long lines are skipped,
    and so is a segment removed while it is read)."""
    for _, path in segments(directory):
        yield from complete_records(path)
