"""Shared by the audit tests: clocks, a log with small defaults, and line surgery."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from mymcp.governance import AuditLog
from mymcp.governance.audit_format import canonical_record, record_line, segment_name

REPO = Path(__file__).resolve().parents[2]


class Clock:
    """An injected clock: wall time (`clock=`) or monotonic time (`monotonic=`)."""

    def __init__(self, now: float = 1_764_547_200.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def open_log(directory: Path, **overrides: Any) -> AuditLog:
    options: dict[str, Any] = {"max_segment_bytes": 1 << 20, "max_segments": 16}
    options.update(overrides)
    return AuditLog(directory, **options)


def write(directory: Path, count: int, **overrides: Any) -> AuditLog:
    """`count` tool_call records, committed in uneven batches."""
    log = open_log(directory, **overrides)
    for index in range(count):
        log.append("tool_call", principal="anonymous", tool=f"tool_{index}", decision="allowed")
        if index % 7 == 0:
            log.commit()
    log.commit()
    return log


def forged(record: dict[str, Any]) -> bytes:
    """The line a writer would have written for `record`, its hash recomputed."""
    body = {key: value for key, value in record.items() if key != "hash"}
    canonical = canonical_record(body)
    return record_line(canonical, hashlib.sha256(canonical).hexdigest())


def segment_lines(directory: Path, number: int = 1) -> list[bytes]:
    return (directory / segment_name(number)).read_bytes().splitlines(keepends=True)


def rewrite(directory: Path, lines: list[bytes], number: int = 1) -> None:
    (directory / segment_name(number)).write_bytes(b"".join(lines))


def segment_numbers(directory: Path) -> list[int]:
    return sorted(int(path.name[8:-6]) for path in directory.glob("segment-*.jsonl"))
