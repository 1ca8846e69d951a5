"""Strict base64url: credentials, keys and token segments, and the opaque cursors the
server hands out for list pages.

Everything here is deliberately unforgiving. A value is accepted only in its one canonical
spelling, so two different strings can never mean the same credential, key, claim set or
cursor.
"""

from __future__ import annotations

import base64
import binascii
import re

__all__ = [
    "b64url_decode",
    "b64url_encode",
]

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
