"""Tool outcomes and the one content-free terminal log event each memory call emits."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from .model import ErrorCode, MemoryOperationError, error_payload

__all__ = [
    "LogFields",
    "ToolOutcome",
    "emit_terminal_event",
    "failure",
    "internal_failure",
    "success",
]

# Only these keys may appear in a terminal event, and only with integer, boolean or
# vocabulary values; selector values, ids, text and paths have no slot to leak into.
_ALLOWED_KEYS = frozenset(
    {
        "scope",
        "schema_version",
        "namespace",
        "collection",
        "tags",
        "cursor",
        "results",
        "count",
        "total",
        "page",
        "field",
    }
)
_PRESENCE = frozenset({"present", "absent", "all", "collectionless", "exact"})

LogFields = dict[str, int | bool | str]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """A JSON-ready tool result and whether the transport must flag it as an error."""

    payload: dict[str, Any]
    is_error: bool


def success(payload: dict[str, Any]) -> ToolOutcome:
    return ToolOutcome(payload, is_error=False)


def failure(error: MemoryOperationError, *, retrieval: bool = False) -> ToolOutcome:
    return ToolOutcome(error.payload(retrieval=retrieval), is_error=True)


def internal_failure() -> ToolOutcome:
    return ToolOutcome(error_payload(ErrorCode.INTERNAL_ERROR), is_error=True)


def _render(value: int | bool | str, allowed_words: frozenset[str]) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return value if value in allowed_words else None


def emit_terminal_event(
    logger: logging.Logger,
    event: str,
    outcome: str,
    *,
    code: ErrorCode | None = None,
    fields: LogFields | None = None,
    vocabulary: frozenset[str] = frozenset(),
) -> None:
    """Log ``event=<tool> outcome=<status> [code=<code>] key=value...`` at INFO.

    String values outside ``vocabulary`` (scope names, field names) and the presence
    words are dropped rather than logged, so a bug upstream cannot leak a value here.
    """
    parts = [f"event={event}", f"outcome={outcome}"]
    if code is not None:
        parts.append(f"code={code.value}")
    allowed_words = _PRESENCE | vocabulary
    for key, value in (fields or {}).items():
        if key not in _ALLOWED_KEYS:
            continue
        rendered = _render(value, allowed_words)
        if rendered is not None:
            parts.append(f"{key}={rendered}")
    logger.info(" ".join(parts))
