"""The audit as the console shows it: recent records, filtered, and the chain's verdict.

Reading walks the segment files and verifying hashes every record, so both run in a
worker thread. Records queued in memory are committed first, so that what a person just
did in the console is already on the page.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from mymcp._escaping import escape_invisible
from mymcp.errors import AuditError
from mymcp.governance import AuditLog, VerifyResult, read_records, verify_audit

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "AuditFilter", "AuditPage", "load_audit", "readable"]

DEFAULT_LIMIT: Final = 200
MAX_LIMIT: Final = 1000
_MAX_FILTER_CHARS: Final = 200
_COLUMNS: Final = frozenset(
    {"seq", "time", "event", "principal", "tool", "decision", "outcome", "duration_ms"}
    | {"prev", "hash"}
)
_SHORTENED: Final = frozenset({"session", "args_digest", "last_hash"})


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Exact-match filters (empty: any) and how many of the newest matches to show."""

    event: str = ""
    tool: str = ""
    principal: str = ""
    limit: int = DEFAULT_LIMIT

    @classmethod
    def from_query(cls, query: Mapping[str, str]) -> AuditFilter:
        def text(name: str) -> str:
            return query.get(name, "").strip()[:_MAX_FILTER_CHARS]

        limit = query.get("limit", "")
        digits = limit.isascii() and limit.isdigit() and len(limit) <= 6
        number = int(limit) if digits else DEFAULT_LIMIT
        return cls(text("event"), text("tool"), text("principal"), max(1, min(number, MAX_LIMIT)))

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
    events: tuple[str, ...]
    """Every event name present, for the filter's choices."""
    verify: VerifyResult
    commit_failed: bool = False


def load_audit(audit: AuditLog, wanted: AuditFilter) -> AuditPage:
    """Blocking: commit what is queued, read every record, keep the newest matches.

    A log that cannot be read (its directory removed or replaced while the server runs)
    shows no records; the chain check says what is wrong with it, as `verify` would.
    """
    commit_failed = False
    try:
        audit.commit()
    except AuditError:
        commit_failed = True
    newest: deque[Mapping[str, Any]] = deque(maxlen=wanted.limit)
    events: set[str] = set()
    scanned = matched = 0
    try:
        for record in read_records(audit.directory):
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
    verified = verify_audit(audit.directory)
    return AuditPage(
        tuple(reversed(newest)), matched, scanned, tuple(sorted(events)), verified, commit_failed
    )


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
