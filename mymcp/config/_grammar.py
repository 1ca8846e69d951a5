"""The grammars and bounds of configuration values."""

from __future__ import annotations

import keyword
import re
import unicodedata
from pathlib import Path
from typing import Final, TypeGuard

__all__ = [
    "BUNDLED_PLUGIN_ID",
    "MAX_AUTHENTICATION_ADAPTERS",
    "MAX_CONFIGURATION_BYTES",
    "MAX_SCOPE_LENGTH",
    "MAX_SESSION_LIFETIME_SECONDS",
    "MAX_SUBJECT_BYTES",
    "MAX_SUBJECT_CODE_POINTS",
    "OAUTH_JWT_ADAPTER_TYPE",
    "OPERATOR_BEARER_ADAPTER_TYPE",
    "SUPPORTED_SCHEMA_VERSIONS",
    "is_adapter_route_token",
    "is_issuer",
    "is_module_name",
    "is_safe_absolute_path",
    "is_scope_token",
    "is_valid_subject",
]

SUPPORTED_SCHEMA_VERSIONS: Final = range(1, 9)
MAX_CONFIGURATION_BYTES: Final = 65536
MAX_AUTHENTICATION_ADAPTERS: Final = 32
MAX_SESSION_LIFETIME_SECONDS: Final = 2_592_000
BUNDLED_PLUGIN_ID: Final = "mnemosyne"
OPERATOR_BEARER_ADAPTER_TYPE: Final = "operator-bearer-v1"
OAUTH_JWT_ADAPTER_TYPE: Final = "oauth-jwt-jwks-v1"
MAX_SUBJECT_CODE_POINTS: Final = 256
MAX_SUBJECT_BYTES: Final = 1024
MAX_SCOPE_LENGTH: Final = 128


def is_valid_subject(subject: object) -> TypeGuard[str]:
    """Apply the Authentication-v1 subject rules (authentication checks every subject it
    meets by them, and a policy names only subjects that can meet them).

    A subject is a string that is not blank after stripping, has at most 256 code points
    and 1024 UTF-8 bytes, is already NFC-normalized and contains no character from any
    Unicode "C" category (control, format, unassigned, private use, surrogate).
    """
    if not isinstance(subject, str):
        return False
    if not subject.strip() or len(subject) > MAX_SUBJECT_CODE_POINTS:
        return False
    if any(unicodedata.category(ch).startswith("C") for ch in subject):
        return False  # also rules out lone surrogates before we try to encode
    if len(subject.encode("utf-8")) > MAX_SUBJECT_BYTES:
        return False
    return unicodedata.is_normalized("NFC", subject)


def is_scope_token(value: object) -> TypeGuard[str]:
    """Whether authentication keeps `value` as one of a token's scopes (and so whether a
    policy may name it): an RFC 6749 scope token of 1-128 characters, that is printable
    ASCII other than space, double quote and backslash.
    """
    return (
        isinstance(value, str)
        and 0 < len(value) <= MAX_SCOPE_LENGTH
        and value.isascii()
        and value.isprintable()
        and not any(char in value for char in ' "\\')
    )


_ROUTE_TOKEN: Final = re.compile(r"[a-z][a-z0-9]*(?:[-_][a-z0-9]+)*")
_DNS_LABEL: Final = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_PATH_SEGMENT: Final = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@-]+")
_PATH_FORBIDDEN: Final = frozenset("\x00~$%")


def is_module_name(value: object) -> bool:
    """1-255 ASCII characters of dot-separated Python identifiers, none a keyword."""
    if not isinstance(value, str) or not 1 <= len(value) <= 255 or not value.isascii():
        return False
    return all(part.isidentifier() and not keyword.iskeyword(part) for part in value.split("."))


def is_safe_absolute_path(value: object) -> bool:
    """An absolute path with no NUL, `~`, `$` or `%` and no `.` or `..` component."""
    if not isinstance(value, str) or not value or _PATH_FORBIDDEN.intersection(value):
        return False
    if any(part in (".", "..") for part in re.split(r"[/\\]", value)):
        return False
    return Path(value).is_absolute()


def is_adapter_route_token(value: object) -> bool:
    """A route scheme or profile: a lowercase letter first, segments joined by `-` or `_`."""
    return isinstance(value, str) and len(value) <= 64 and bool(_ROUTE_TOKEN.fullmatch(value))


def _is_issuer_host(netloc: str) -> bool:
    host, colon, port = netloc.partition(":")
    if colon and port != "443":
        return False
    if "." not in host or host == "localhost" or host.endswith(".localhost"):
        return False
    labels = host.split(".")
    if not all(_DNS_LABEL.fullmatch(label) for label in labels):
        return False
    return not all(label.isdigit() for label in labels)


def is_issuer(value: object) -> bool:
    """A canonical `https` OAuth issuer under the host's strict grammar."""
    if not isinstance(value, str) or not value.startswith("https://"):
        return False
    if not all(0x21 <= ord(char) <= 0x7E for char in value):
        return False
    if any(char in value for char in "?#%[]"):
        return False
    netloc, slash, path = value[len("https://") :].partition("/")
    if "@" in netloc or netloc != netloc.lower() or not _is_issuer_host(netloc):
        return False
    if not slash or not path:
        return True  # no path, or exactly "/"
    # RFC 3986 path characters only: no backslash, quote or bracket that another URL
    # parser might read differently.
    return all(
        segment not in (".", "..") and _PATH_SEGMENT.fullmatch(segment) is not None
        for segment in path.split("/")
    )
