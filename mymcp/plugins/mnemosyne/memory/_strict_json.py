"""Strict JSON decoding: no duplicate keys, no NaN/Infinity, bounded nesting depth."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "StrictJSONError", "load_strict_json"]

# A v2 record nests two levels deep; anything far beyond that is not a memory record and
# could only make later walks expensive.
MAX_JSON_DEPTH = 8


class StrictJSONError(ValueError):
    """The text is not strict JSON; carries no excerpt of the input."""


def _reject_constant(_name: str) -> Any:
    raise StrictJSONError("non-finite number")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJSONError("duplicate key")
        result[key] = value
    return result


def _depth_exceeds(value: Any, limit: int) -> bool:
    # Iterative on purpose: the point is to bound depth, so recursion would defeat it.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def load_strict_json(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Decode ``text`` strictly, raising :class:`StrictJSONError` on any deviation."""
    try:
        value = json.loads(text, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
    except StrictJSONError:
        raise
    except (ValueError, RecursionError) as exc:
        raise StrictJSONError("malformed JSON") from exc
    if _depth_exceeds(value, max_depth):
        raise StrictJSONError("nesting too deep")
    return value
