"""`operator-bearer-v1`: locally provisioned bearer tokens checked against stored digests.

Token grammar: `mymcp1.<id>.<secret>` where `id` is 32 lowercase hex characters and
`secret` is 43 unpadded base64url characters that decode canonically to 32 random
bytes. A token that breaks the grammar is `malformed`; a well-formed token that does not
match a stored digest is `rejected`.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass

from mymcp._base64url import b64url_decode, b64url_encode
from mymcp.auth._principal import AuthFailure, Identity
from mymcp.auth._verifier_file import Credential

__all__ = [
    "OPERATOR_BEARER_TYPE",
    "OperatorBearerAdapter",
    "ParsedToken",
    "format_token",
    "new_secret",
    "parse_token",
    "secret_digest",
]

OPERATOR_BEARER_TYPE = "operator-bearer-v1"
FORMAT_TAG = "mymcp1"
SECRET_BYTES = 32

_TOKEN = re.compile(r"mymcp1\.([0-9a-f]{32})\.([A-Za-z0-9_-]{43})")
# Compared against for unknown ids so both paths do the same hashing and comparison.
_DUMMY_DIGEST = hashlib.sha256(b"mymcp operator-bearer-v1 unknown id").digest()


@dataclass(frozen=True, slots=True)
class ParsedToken:
    credential_id: str
    secret: bytes


def parse_token(payload: str) -> ParsedToken | None:
    """Apply the token grammar; `None` means malformed."""
    if not payload.isascii():
        return None
    match = _TOKEN.fullmatch(payload)
    if match is None:
        return None
    secret = b64url_decode(match.group(2))
    if secret is None or len(secret) != SECRET_BYTES:
        return None
    return ParsedToken(credential_id=match.group(1), secret=secret)


def secret_digest(secret: bytes) -> bytes:
    """SHA-256 of the decoded secret; a 256-bit random secret needs no salt or KDF."""
    return hashlib.sha256(secret).digest()


def new_secret() -> bytes:
    return secrets.token_bytes(SECRET_BYTES)


def format_token(credential_id: str, secret: bytes) -> str:
    return f"{FORMAT_TAG}.{credential_id}.{b64url_encode(secret)}"


class OperatorBearerAdapter:
    """Verifies operator tokens against a snapshot of the verifier file taken at startup."""

    __slots__ = ("_credentials",)

    def __init__(self, credentials: Iterable[Credential]) -> None:
        self._credentials: dict[str, Credential] = {item.id: item for item in credentials}

    async def authenticate(self, payload: str) -> Identity | AuthFailure:
        outcome = self.verify(payload)
        if isinstance(outcome, AuthFailure):
            return outcome
        return Identity(outcome, f"operator:{outcome}")

    def verify(self, payload: str) -> str | AuthFailure:
        token = parse_token(payload)
        if token is None:
            return AuthFailure.MALFORMED
        record = self._credentials.get(token.credential_id)
        expected = record.digest if record is not None else _DUMMY_DIGEST
        matches = hmac.compare_digest(secret_digest(token.secret), expected)
        if record is None or not matches:
            return AuthFailure.REJECTED
        return record.subject
