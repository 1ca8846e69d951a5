"""Strict decoders shared by every authentication source: base64url and bounded JSON.

Everything here is deliberately unforgiving. A value is accepted only in its one canonical
spelling, so two different strings can never mean the same credential, key or claim set.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import NoReturn

__all__ = [
    "MAX_JSON_DEPTH",
    "StrictJsonError",
    "b64url_decode",
    "b64url_encode",
    "is_printable_ascii",
    "loads_strict_json",
]

MAX_JSON_DEPTH = 64

_B64URL = re.compile(r"[A-Za-z0-9_-]*")


def b64url_encode(data: bytes) -> str:
    """Unpadded base64url (RFC 7515 section 2)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes | None:
    """Decode unpadded base64url, or return None unless `text` is the canonical spelling.

    Padding, whitespace, the `+/` alphabet, impossible lengths and non-zero trailing bits
    are all refused: re-encoding the result must give back exactly `text`.
    """
    if not text.isascii() or _B64URL.fullmatch(text) is None or len(text) % 4 == 1:
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    if b64url_encode(data) != text:
        return None
    return data


def is_printable_ascii(text: str, *, max_length: int) -> bool:
    """True for 1..max_length characters in the printable ASCII range (space excluded)."""
    return 0 < len(text) <= max_length and all("!" <= ch <= "~" for ch in text)


class StrictJsonError(ValueError):
    """The bytes are not one strict JSON document; the reason is never shown to clients."""


def _reject_constant(_name: str) -> NoReturn:
    raise StrictJsonError("non-finite number")


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, value in pairs:
        if key in result:
            raise StrictJsonError("duplicate key")
        result[key] = value
    return result


def _check_depth(document: object, max_depth: int) -> None:
    pending: list[tuple[object, int]] = [(document, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            children: list[object] = list(value.values())
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise StrictJsonError("nesting too deep")
        pending.extend((child, depth + 1) for child in children)


def loads_strict_json(data: bytes, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> object:
    """Parse strict UTF-8 JSON of at most `max_bytes`.

    Refuses duplicate object keys, NaN/Infinity, nesting deeper than `max_depth`, a byte
    order mark and anything that is not valid UTF-8.
    """
    if len(data) > max_bytes:
        raise StrictJsonError("too large")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise StrictJsonError("invalid utf-8") from None
    try:
        document: object = json.loads(
            text, object_pairs_hook=_unique_object, parse_constant=_reject_constant
        )
    except RecursionError:
        raise StrictJsonError("nesting too deep") from None
    except ValueError as exc:  # JSONDecodeError and our own StrictJsonError
        raise StrictJsonError("invalid json") from exc
    _check_depth(document, max_depth)
    return document
