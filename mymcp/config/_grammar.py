"""The grammars and bounds of configuration values."""

from __future__ import annotations

import keyword
import re
import unicodedata
from pathlib import Path
from typing import Final, TypeGuard

from mymcp._escaping import is_visible_ascii

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
    "issuer_problem",
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


def is_issuer(value: object) -> bool:
    """A canonical `https` OAuth issuer under the host's strict grammar."""
    return issuer_problem(value) is None


def _issuer_host_problem(netloc: str) -> str | None:
    host, colon, port = netloc.partition(":")
    if colon and port != "443":
        return "the port must be absent or 443"
    if not host:
        return "the issuer needs a host after 'https://'"
    if "." not in host:
        return "the host needs a dot (a DNS name, not localhost or an IP)"
    if host == "localhost" or host.endswith(".localhost"):
        return "the host must not be localhost or a name under .localhost"
    labels = host.split(".")
    if not all(_DNS_LABEL.fullmatch(label) for label in labels):
        return (
            "the host's labels must be 1-63 letters, digits or '-', not starting or ending "
            "with '-' (no empty label, no trailing dot)"
        )
    if all(label.isdigit() for label in labels):
        return "the host must be a DNS name, not an IP address"
    return None


def _issuer_path_problem(path: str) -> str | None:
    segments = path.split("/")
    for index, segment in enumerate(segments):
        if not segment:
            if index == len(segments) - 1:
                return "the path must not end with '/' (only a lone '/' may follow the host)"
            return "the path must not contain '//' (an empty segment)"
        if segment in (".", ".."):
            return "the path must not contain '.' or '..' segments"
        if _PATH_SEGMENT.fullmatch(segment) is None:
            return (
                "the path may hold only letters, digits and the characters "
                "- . _ ~ ! $ & ' ( ) * + , ; = : @"
            )
    return None


def issuer_problem(value: object) -> str | None:
    """The first issuer rule `value` breaks, in words for the operator, or None for an
    issuer (the one grammar: `is_issuer` asks this).

    The rules are checked from the left of the URL to its right (scheme, characters
    anywhere, user info, host and port, path), so when several are broken the answer
    names the one the operator reads first. No backslash, quote or bracket is allowed in
    the path, which another URL parser might read differently.
    """
    if not isinstance(value, str):
        return "the issuer must be a string"
    if not value.startswith("https://"):
        return "the issuer must start with 'https://' (lowercase)"
    if not is_visible_ascii(value):
        return "the issuer must be printable ASCII without spaces"
    if "?" in value:
        return "the issuer must not have a query ('?')"
    if "#" in value:
        return "the issuer must not have a fragment ('#'), not even an empty one"
    if "%" in value:
        return "the issuer must not contain '%' (no percent-encoding)"
    if "[" in value or "]" in value:
        return "the issuer must not contain '[' or ']' (no IPv6 literal)"
    netloc, slash, path = value[len("https://") :].partition("/")
    if "@" in netloc:
        return "the issuer must not have user information ('user@') before the host"
    if netloc != netloc.lower():
        return "the host must be lowercase"
    problem = _issuer_host_problem(netloc)
    if problem is not None or not slash or not path:
        return problem  # no path, or exactly "/", is fine
    return _issuer_path_problem(path)
