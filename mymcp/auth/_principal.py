"""Who a request runs as: the anonymous principal or a registered one, and why not."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from mymcp._base64url import b64url_encode
from mymcp.config import MAX_SUBJECT_BYTES, MAX_SUBJECT_CODE_POINTS, is_valid_subject

__all__ = [
    "ANONYMOUS",
    "CONSOLE",
    "LOCAL",
    "Identity",
    "MAX_SUBJECT_BYTES",
    "MAX_SUBJECT_CODE_POINTS",
    "AuthFailure",
    "Principal",
    "is_valid_subject",
    "registered_principal",
]


class AuthFailure(enum.StrEnum):
    """Why a request was not authenticated. Every value becomes an empty-body HTTP 401."""

    AMBIGUOUS = "ambiguous"
    MALFORMED = "malformed"
    NO_EVIDENCE = "no_evidence"
    REJECTED = "rejected"
    UNSUPPORTED = "unsupported"


@dataclass(frozen=True, slots=True)
class Identity:
    """What an authentication adapter proved about a credential.

    `subject` is the adapter-local subject that sessions are bound to (for OAuth a hash of
    issuer and `sub`); `name` is how policy rules and the audit refer to the caller
    (`operator:<subject>`, `oauth:<sub>`); `scopes` are the OAuth scopes the token carries.
    """

    subject: str
    name: str
    scopes: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Principal:
    """The identity a request is served as.

    `principal_id` is the stable key sessions are bound to. It is `anonymous` for the
    anonymous principal and `registered:<adapter-id>:<unpadded base64url(subject)>`
    otherwise; adapter ids cannot contain `:`, so the encoding is injective. `name` and
    `scopes` are what governance sees: `anonymous`, `operator:<subject>`, `oauth:<sub>`,
    `local` (stdio) or `console` (a person in the console), and the token's OAuth scopes.
    """

    kind: Literal["anonymous", "registered", "local", "console"]
    adapter_id: str | None
    subject: str | None
    principal_id: str
    name: str = "anonymous"
    scopes: frozenset[str] = frozenset()


ANONYMOUS = Principal(kind="anonymous", adapter_id=None, subject=None, principal_id="anonymous")
CONSOLE = Principal(
    kind="console", adapter_id=None, subject=None, principal_id="console", name="console"
)
"""A person acting in the console: audited under this name, never subject to policy."""
LOCAL = Principal(kind="local", adapter_id=None, subject=None, principal_id="local", name="local")
"""The user who started `mymcp stdio`: the one client of a stdio server."""


def registered_principal(adapter_id: str, identity: Identity | str) -> Principal:
    """Build the registered principal for an adapter-local subject that passed the rules.

    A bare subject string is named `operator:<subject>` and carries no scopes.
    """
    if isinstance(identity, str):
        identity = Identity(identity, f"operator:{identity}")
    subject = identity.subject
    if not is_valid_subject(subject):
        raise ValueError("subject does not satisfy the Authentication-v1 rules")
    encoded = b64url_encode(subject.encode("utf-8"))
    return Principal(
        kind="registered",
        adapter_id=adapter_id,
        subject=subject,
        principal_id=f"registered:{adapter_id}:{encoded}",
        name=identity.name,
        scopes=identity.scopes,
    )
