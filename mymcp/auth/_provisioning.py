"""Operator-bearer provisioning: create, list and revoke credentials offline.

The verifier file only ever holds digests. Each change rewrites the complete file
atomically: a private temporary file in the same directory is written and fsynced,
renamed over the old file, and the directory is fsynced. Changes reach a running server
only when it restarts (nothing is hot-reloaded).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from mymcp._safefile import replace_private_file
from mymcp.auth._operator_bearer import format_token, new_secret, secret_digest
from mymcp.auth._principal import is_valid_subject
from mymcp.auth._verifier_file import (
    MAX_CREDENTIALS,
    MAX_VERIFIER_BYTES,
    Credential,
    VerifierSourceError,
    check_verifier_path,
    is_credential_id,
    load_verifier,
    serialize_verifier,
)
from mymcp.errors import CredentialProvisioningError, Location

__all__ = ["CredentialProvisioningError", "create_token", "list_credentials", "revoke_token"]


@contextlib.contextmanager
def _locked_directory(path: Path) -> Iterator[int]:
    """Open the verifier's parent without following links, check it, lock it exclusively."""
    try:
        check_verifier_path(path)
    except VerifierSourceError as exc:
        raise CredentialProvisioningError.of_source(exc) from None
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        dir_fd = os.open(path.parent, flags)
    except OSError as exc:
        raise CredentialProvisioningError(
            "unsafe_directory",
            location=Location(source=str(path.parent)),
            detail=f"{exc.strerror}; the directory must exist and must not be a symlink",
        ) from None
    try:
        info = os.fstat(dir_fd)
        if not stat.S_ISDIR(info.st_mode) or (os.name == "posix" and info.st_mode & 0o022):
            raise CredentialProvisioningError(
                "unsafe_directory",
                location=Location(source=str(path.parent)),
                detail=f"writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})",
            )
        if sys.platform != "win32":
            import fcntl

            fcntl.flock(dir_fd, fcntl.LOCK_EX)  # serializes concurrent CLI invocations
        yield dir_fd
    finally:
        os.close(dir_fd)  # closing also drops the lock


def _read_existing(path: Path) -> tuple[Credential, ...]:
    try:
        return load_verifier(path, allow_missing=True)
    except VerifierSourceError as exc:
        raise CredentialProvisioningError.of_source(exc) from None


def _write_atomically(dir_fd: int, name: str, data: bytes) -> None:
    try:
        replace_private_file(dir_fd, name, data)
    except OSError:
        raise CredentialProvisioningError("write_failed") from None


def _store(dir_fd: int, path: Path, credentials: tuple[Credential, ...]) -> None:
    data = serialize_verifier(credentials)
    if len(data) > MAX_VERIFIER_BYTES:
        raise CredentialProvisioningError("verifier_too_large")
    _write_atomically(dir_fd, path.name, data)


def create_token(verifier_path: Path, subject: str) -> tuple[str, str]:
    """Add a new credential for `subject` and return `(token, credential_id)`.

    The token is the only copy of the secret: show it once and never store it. The
    verifier file is created with mode 0600 if absent; existing credentials are kept.
    """
    if not is_valid_subject(subject):
        raise CredentialProvisioningError(
            "invalid_subject",
            detail=(
                "a subject is 1 to 256 characters of visible text, NFC-normalized, with "
                f"no control, format or private-use characters (got {subject[:80]!r})"
            ),
        )
    with _locked_directory(verifier_path) as dir_fd:
        existing = _read_existing(verifier_path)
        if len(existing) >= MAX_CREDENTIALS:
            raise CredentialProvisioningError("credential_limit_exceeded")
        taken = {credential.id for credential in existing}
        credential_id = secrets.token_hex(16)
        while credential_id in taken:  # pragma: no cover - 128 random bits
            credential_id = secrets.token_hex(16)
        secret = new_secret()
        added = Credential(id=credential_id, subject=subject, digest=secret_digest(secret))
        _store(dir_fd, verifier_path, (*existing, added))
    return format_token(credential_id, secret), credential_id


def list_credentials(verifier_path: Path) -> list[tuple[str, str]]:
    """Return `(credential_id, subject)` pairs in file order; an absent file lists nothing."""
    try:
        credentials = load_verifier(verifier_path, allow_missing=True)
    except VerifierSourceError as exc:
        raise CredentialProvisioningError.of_source(exc) from None
    return [(credential.id, credential.subject) for credential in credentials]


def revoke_token(verifier_path: Path, credential_id: str) -> bool:
    """Remove one credential; return False when no credential has that id."""
    if not is_credential_id(credential_id):
        return False
    with _locked_directory(verifier_path) as dir_fd:
        existing = _read_existing(verifier_path)
        remaining = tuple(item for item in existing if item.id != credential_id)
        if len(remaining) == len(existing):
            return False
        _store(dir_fd, verifier_path, remaining)
    return True
