"""The one strict JSON decoder for every document MyMCP trusts.

Manifests, verifier files, OAuth metadata and JWKS, token claims, memory records and list
cursors all go through here: strict UTF-8, no duplicate object keys, no NaN or infinities
(neither literals nor overflowing numbers), bounded size and bounded nesting.
"""

from __future__ import annotations

import enum
import json
import math
from typing import Any, NoReturn

__all__ = ["DEFAULT_MAX_DEPTH", "StrictJsonError", "StrictJsonReason", "load_strict_json"]

DEFAULT_MAX_DEPTH = 64


class StrictJsonReason(enum.StrEnum):
    TOO_LARGE = "too_large"
    INVALID_UTF8 = "invalid_utf8"
    INVALID_JSON = "invalid_json"
    DUPLICATE_KEY = "duplicate_key"
    NON_FINITE = "non_finite"
    TOO_DEEP = "too_deep"


class StrictJsonError(ValueError):
    """The input is not one strict JSON document; carries no excerpt of it."""

    def __init__(self, reason: StrictJsonReason) -> None:
        super().__init__(reason.value)
        self.reason = reason


def _fail(reason: StrictJsonReason) -> NoReturn:
    raise StrictJsonError(reason)


def _reject_constant(_name: str) -> NoReturn:
    _fail(StrictJsonReason.NON_FINITE)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # e.g. 1e999 overflows to infinity
        _fail(StrictJsonReason.NON_FINITE)
    return value


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            _fail(StrictJsonReason.DUPLICATE_KEY)
        result[key] = value
    return result


def _depth_exceeds(document: object, limit: int) -> bool:
    # Iterative on purpose: the point is to bound depth, so recursion would defeat it.
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            children: list[object] = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            return True
        pending.extend((child, depth + 1) for child in children)
    return False


def load_strict_json(
    data: bytes | str, *, max_depth: int = DEFAULT_MAX_DEPTH, max_bytes: int | None = None
) -> Any:
    """Decode one strict JSON document, or raise `StrictJsonError` saying why not."""
    if max_bytes is not None and len(data) > max_bytes:
        _fail(StrictJsonReason.TOO_LARGE)
    if isinstance(data, bytes | bytearray):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            _fail(StrictJsonReason.INVALID_UTF8)
    else:
        text = data
    try:
        document = json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
        )
    except StrictJsonError:
        raise
    except RecursionError:
        _fail(StrictJsonReason.TOO_DEEP)
    except ValueError:  # JSONDecodeError
        _fail(StrictJsonReason.INVALID_JSON)
    if _depth_exceeds(document, max_depth):
        _fail(StrictJsonReason.TOO_DEEP)
    return document
