"""The operator-bearer verifier file (format_version 1): read, validate, serialize.

The file holds digests only, never secrets. Reading goes through the one safe reader
with `private=True`, so the file must carry no group or world permission bits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from mymcp._base64url import (
    b64url_decode,
    b64url_encode,
)
from mymcp._safefile import SafeFileError, SafeFileReason, as_error, read_safe_file
from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.auth._principal import is_valid_subject
from mymcp.errors import NOWHERE, Location, VerifierSourceError

__all__ = [
    "MAX_CREDENTIALS",
    "MAX_VERIFIER_BYTES",
    "Credential",
    "VerifierSourceError",
    "check_verifier_path",
    "is_credential_id",
    "load_verifier",
    "parse_verifier",
    "serialize_verifier",
]

MAX_VERIFIER_BYTES = 16 * 1024
MAX_CREDENTIALS = 32
FORMAT_VERSION = 1

_ID = re.compile(r"[0-9a-f]{32}")
_FORBIDDEN_PATH_CHARACTERS = ("\x00", "~", "$", "%")


def _invalid(detail: str, where: Location = NOWHERE) -> VerifierSourceError:
    return VerifierSourceError("invalid_format", location=where, detail=detail)


@dataclass(frozen=True, slots=True)
class Credential:
    """One verifier record: a public id, the subject it authenticates, SHA-256 of the secret."""

    id: str
    subject: str
    digest: bytes


def is_credential_id(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and _ID.fullmatch(value) is not None


def check_verifier_path(path: Path) -> None:
    """Refuse relative paths, expansion characters and `.`/`..` components."""
    text = str(path)
    unsafe = VerifierSourceError(
        "unsafe_path",
        location=Location(source=text),
        detail="expected an absolute path without '~', '$', '%', NUL, '.' or '..'",
    )
    if not path.is_absolute() or any(ch in text for ch in _FORBIDDEN_PATH_CHARACTERS):
        raise unsafe
    if any(part in (".", "..") for part in re.split(r"[/\\]", text)):
        raise unsafe


def _parse_record(record: object, index: int) -> Credential:
    where = Location(key=f"credentials[{index}]")
    if not isinstance(record, dict) or set(record) != {"id", "subject", "digest"}:
        raise _invalid("expected exactly id, subject and digest", where)
    credential_id, subject, digest_text = record["id"], record["subject"], record["digest"]
    if not is_credential_id(credential_id):
        raise _invalid("id is not 32 lowercase hex characters", where)
    if not is_valid_subject(subject):
        raise _invalid("subject breaks the subject rules", where)
    digest = b64url_decode(digest_text) if isinstance(digest_text, str) else None
    if len(str(digest_text)) != 43 or digest is None or len(digest) != 32:
        raise _invalid("digest is not 43 base64url characters of a SHA-256", where)
    return Credential(id=credential_id, subject=subject, digest=digest)


def parse_verifier(data: bytes) -> tuple[Credential, ...]:
    """Validate the bytes of a verifier file and return its credentials in file order."""
    if len(data) > MAX_VERIFIER_BYTES:
        raise VerifierSourceError("too_large", detail=f"more than {MAX_VERIFIER_BYTES} bytes")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise VerifierSourceError("invalid_utf8") from None
    try:
        document = load_strict_json(data, max_bytes=MAX_VERIFIER_BYTES)
    except StrictJsonError as exc:
        # The decoder's complaint names no content (a byte-order mark, a missing comma).
        why = f"{exc.code}: {exc.detail}" if exc.detail else exc.code
        raise _invalid(f"not strict JSON ({why})", exc.location) from None
    if not isinstance(document, dict) or set(document) != {"format_version", "credentials"}:
        raise _invalid("expected an object of exactly format_version and credentials")
    version, records = document["format_version"], document["credentials"]
    if type(version) is not int or version != FORMAT_VERSION:
        raise _invalid(f"format_version must be {FORMAT_VERSION}")
    if not isinstance(records, list) or len(records) > MAX_CREDENTIALS:
        raise _invalid(f"credentials must be a list of at most {MAX_CREDENTIALS}")
    credentials = tuple(_parse_record(record, index) for index, record in enumerate(records))
    if len({credential.id for credential in credentials}) != len(credentials):
        raise _invalid("an id repeats")
    return credentials


def load_verifier(path: Path, *, allow_missing: bool = False) -> tuple[Credential, ...]:
    """Safely read and validate the verifier file.

    With `allow_missing`, an absent file (or absent directory) reads as no credentials;
    provisioning uses that to create the first credential. Startup never allows it.
    """
    check_verifier_path(path)
    try:
        data = read_safe_file(path, max_bytes=MAX_VERIFIER_BYTES, private=True)
    except SafeFileError as exc:
        if exc.reason is not SafeFileReason.MISSING:
            raise as_error(exc, VerifierSourceError) from None
        if allow_missing:
            return ()
        create = "`mymcp auth token create --subject NAME` creates the file"
        if exc.location.source != str(path):
            create = f"make the directory (mkdir -m 700 {path.parent}), then {create}"
        raise VerifierSourceError(
            "unreadable", location=exc.location, detail=f"no such file or directory; {create}"
        ) from None
    try:
        return parse_verifier(data)
    except VerifierSourceError as exc:
        exc.locate(Location(source=str(path)))
        raise


def serialize_verifier(credentials: Iterable[Credential]) -> bytes:
    """Render credentials as a canonical verifier file (stable order, trailing newline)."""
    records = [
        {"id": item.id, "subject": item.subject, "digest": b64url_encode(item.digest)}
        for item in credentials
    ]
    text = json.dumps(
        {"format_version": FORMAT_VERSION, "credentials": records},
        ensure_ascii=False,
        indent=2,
    )
    return (text + "\n").encode("utf-8")
