"""Turn the raw `Authorization` header values of one request into routable evidence.

The rules are the reference's, kept byte-exact:

* no header at all is "no evidence"; more than one header is `malformed`;
* the value must split on a single ASCII space into exactly two non-empty parts, so
  tabs, doubled spaces and leading or trailing spaces are all `malformed`;
* the scheme must be an HTTP token and is lowercased (ASCII only, so no Unicode case
  folding can turn an odd scheme into a known one);
* the payload is carried as text but must be 1-8192 bytes once encoded as UTF-8.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from mymcp.auth._principal import AuthFailure

__all__ = [
    "AUTHORIZATION_SOURCE",
    "MAX_PAYLOAD_BYTES",
    "Evidence",
    "extract_evidence",
    "offers_bearer_token",
]

AUTHORIZATION_SOURCE = "authorization"
MAX_PAYLOAD_BYTES = 8192

# RFC 9110 token characters; the scheme is compared after ASCII lowercasing.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_SCHEME_END = re.compile(r"[ \t]")


@dataclass(frozen=True, slots=True)
class Evidence:
    """One credential presented in the `Authorization` header."""

    scheme: str
    """Lowercased; header evidence never names a profile."""
    payload: str


def extract_evidence(authorization_values: Sequence[str]) -> Evidence | AuthFailure | None:
    """Return the evidence, `None` when there is none, or `AuthFailure.MALFORMED`."""
    if isinstance(authorization_values, str):  # a bare string is a caller bug, not one value
        return AuthFailure.MALFORMED
    if len(authorization_values) == 0:
        return None
    if len(authorization_values) > 1:
        return AuthFailure.MALFORMED
    value: object = authorization_values[0]
    if not isinstance(value, str):
        return AuthFailure.MALFORMED
    parts = value.split(" ")
    if len(parts) != 2:
        return AuthFailure.MALFORMED
    scheme, payload = parts
    if not payload or _TOKEN.fullmatch(scheme) is None:
        return AuthFailure.MALFORMED
    try:
        size = len(payload.encode("utf-8"))
    except UnicodeEncodeError:
        return AuthFailure.MALFORMED
    if size > MAX_PAYLOAD_BYTES:
        return AuthFailure.MALFORMED
    return Evidence(scheme=scheme.lower(), payload=payload)


def offers_bearer_token(authorization_values: Sequence[str]) -> bool:
    """Whether any value names the Bearer scheme, however badly it is formed after that.

    A refusal calls a token invalid only when the client sent a bearer token: a `Basic`
    or `DPoP` credential, even a malformed one, is no bearer token to judge, and the
    client is told only how to authenticate.
    """
    for value in authorization_values:
        scheme = _SCHEME_END.split(value.lstrip(" \t"), maxsplit=1)[0]
        if scheme.isascii() and scheme.lower() == "bearer":
            return True
    return False
