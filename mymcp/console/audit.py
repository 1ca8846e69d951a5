"""The audit as the console shows it: recent records, filtered, and the chain's verdict.

Reading walks segment files and verifying hashes records, so both run in a worker
thread. Records queued in memory are committed first, so that what a person just did in
the console is already on the page.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

from mymcp._escaping import escape_invisible
from mymcp.errors import AuditError
from mymcp.governance import AuditLog, AuditRecord, VerifiedPrefix, VerifyResult, verify_audit
from mymcp.governance.audit_format import complete_records, segments

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "MAX_SEARCHED",
    "AuditFilter",
    "AuditPage",
    "AuditView",
    "readable",
]

DEFAULT_LIMIT: Final = 200
MAX_LIMIT: Final = 1000
# How many records one view searches at most, newest first: the whole of a log at the
# default retention of records of common size; `mymcp audit show` reads any log whole.
MAX_SEARCHED: Final = 200_000
_MAX_FILTER_CHARS: Final = 200
_COLUMNS: Final = frozenset(
    {"seq", "time", "event", "principal", "tool", "decision", "outcome", "duration_ms"}
    | {"prev", "hash"}
)
_SHORTENED: Final = frozenset({"session", "args_digest", "last_hash"})


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Exact-match filters (empty: any), how many of the newest matches to show, and
    (`before`, a record's `seq`) where an older page starts."""

    event: str = ""
    tool: str = ""
    principal: str = ""
    limit: int = DEFAULT_LIMIT
    before: int | None = None

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> AuditFilter:
        def text(name: str) -> str:
            return query.get(name, "").strip()[:_MAX_FILTER_CHARS]

        limit = query.get("limit", "")
        digits = limit.isascii() and limit.isdigit() and len(limit) <= 6
        number = int(limit) if digits else DEFAULT_LIMIT
        before = query.get("before", "")
        start = int(before) if before.isascii() and before.isdigit() and len(before) <= 18 else None
        return cls(
            text("event"),
            text("tool"),
            text("principal"),
            max(1, min(number, MAX_LIMIT)),
            start,
        )

    def query(self, before: int | None) -> str:
        """The query string of these filters' page before record `before` (None: the
        newest page)."""
        fields = {"event": self.event, "tool": self.tool, "principal": self.principal}
        chosen = {name: value for name, value in fields.items() if value}
        chosen["limit"] = str(self.limit)
        if before is not None:
            chosen["before"] = str(before)
        return urlencode(chosen)

    def matches(self, record: Mapping[str, Any]) -> bool:
        return (
            (not self.event or record.get("event") == self.event)
            and (not self.tool or _names(record.get("tool"), self.tool))
            and (not self.principal or _names(record.get("principal"), self.principal))
        )


def _names(value: object, wanted: str) -> bool:
    """Whether a record's value is the one a person asked for, typed as it is or copied
    from the page, where its invisible characters are shown as escapes."""
    if value == wanted:
        return True
    return "\\" in wanted and isinstance(value, str) and escape_invisible(value) == wanted


@dataclass(frozen=True, slots=True)
class AuditPage:
    records: tuple[Mapping[str, Any], ...]
    """The newest matching records, newest first."""
    matched: int
    scanned: int
    """How many records were searched, newest first, until `matched` reached the limit."""
    truncated: bool
    """Whether the search stopped at `MAX_SEARCHED` records, older ones unsearched."""
    events: tuple[str, ...]
    """Every event name among the records searched, for the filter's choices."""
    verify: VerifyResult
    commit_failed: bool = False
    older: int | None = None
    """The `seq` an older page starts before, when more records may match there."""


class AuditView:
    """The audit as the console reads it, for one log; safe to use from worker threads.

    Both halves of a view would otherwise cost as much as the whole log, on every view:
    the chain check resumes after the segments the last check proved, as long as those
    files still hold the same bytes (compared by a digest, a tenth of the cost), and the
    records are searched from the newest back, until enough match or `MAX_SEARCHED`
    were read.
    """

    def __init__(self, audit: AuditLog) -> None:
        self._audit = audit
        self._lock = threading.Lock()
        self._proved: VerifiedPrefix | None = None

    def load(self, wanted: AuditFilter) -> AuditPage:
        """Blocking: commit what is queued, search the newest records, check the chain.

        A log that cannot be read (its directory removed or replaced while the server
        runs) shows no records; the chain check says what is wrong with it, as `verify`
        would.
        """
        commit_failed = False
        try:
            self._audit.commit()
        except AuditError:
            commit_failed = True
        newest: list[Mapping[str, Any]] = []
        last: object = None
        events: set[str] = set()
        scanned = matched = read = 0
        truncated = False
        older: object = None
        try:
            for record in _newest_first(self._audit.directory, wanted.before):
                if len(newest) == wanted.limit:
                    older = newest[-1].get("seq")
                    break
                seq = record.get("seq")
                if read == MAX_SEARCHED:
                    # The next page goes on from the last record searched, if any was.
                    truncated = True
                    older = last if scanned else None
                    break
                read += 1  # records passed over on the way count: reading is the cost
                if wanted.before is not None and not (isinstance(seq, int) and seq < wanted.before):
                    continue  # on a newer page
                last = seq
                scanned += 1
                event = record.get("event")
                if isinstance(event, str):
                    events.add(event)
                if wanted.matches(record):
                    matched += 1
                    newest.append(record)
        except OSError:
            newest.clear()
            scanned = matched = 0
            truncated = False
            older = None
        with self._lock:
            resume = self._proved
        verified = verify_audit(self._audit.directory, resume=resume)
        if verified.prefix is not None:
            with self._lock:
                self._proved = verified.prefix
        events_found = tuple(sorted(events))
        return AuditPage(
            tuple(newest),
            matched,
            scanned,
            truncated,
            events_found,
            verified,
            commit_failed,
            older if isinstance(older, int) else None,
        )


def _newest_first(directory: Path, before: int | None = None) -> Iterator[AuditRecord]:
    """Every readable record, newest first, reading one segment at a time. With `before`,
    a segment whose first record is not older than it holds only newer records (numbers
    grow through the log) and is passed over unread."""
    for _, path in reversed(segments(directory)):
        if before is not None:
            first = next(iter(complete_records(path)), None)
            if first is not None and isinstance(first["seq"], int) and first["seq"] >= before:
                continue
        yield from reversed(list(complete_records(path)))


def readable(record: Mapping[str, Any]) -> dict[str, str]:
    """The columns of one record's row; the remaining fields as `key=value` details."""
    decision = record.get("decision")
    result = "" if decision is None else str(decision)
    if "outcome" in record:
        result += f" -> {record['outcome']}"
        if "duration_ms" in record:
            result += f" ({record['duration_ms']} ms)"
    details = []
    for key in sorted(record):
        if key in _COLUMNS:
            continue
        value = record[key]
        shown = str(value)
        if key in _SHORTENED and isinstance(value, str) and len(value) > 12:
            shown = value[:12] + "…"
        details.append(f"{key}={shown}")
    return {
        "time": str(record.get("time", "")),
        "seq": str(record.get("seq", "")),
        "event": str(record.get("event", "")),
        "principal": "" if record.get("principal") is None else str(record["principal"]),
        "tool": "" if record.get("tool") is None else str(record["tool"]),
        "result": result,
        "details": "  ".join(details),
    }
