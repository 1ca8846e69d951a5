"""The authenticator the transport calls once per request, before reading the body.

Every adapter type answers the `Authorization: Bearer` route and no two enabled adapters
may share a route, so at most one adapter is ever enabled: bearer evidence goes to it,
any other scheme is unsupported, and the adapter's answer is final. Failed evidence
never degrades to anonymous access.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from mymcp.auth._evidence import Evidence, extract_evidence
from mymcp.auth._principal import (
    ANONYMOUS,
    AuthFailure,
    Identity,
    Principal,
    is_valid_subject,
    registered_principal,
)

__all__ = [
    "BEARER_SCHEME",
    "AuthenticationAdapter",
    "Authenticator",
    "OAuthChallenge",
    "RoutedAdapter",
]


class AuthenticationAdapter(Protocol):
    """One composed adapter: maps a credential payload to the identity it proves."""

    async def authenticate(self, payload: str) -> Identity | AuthFailure: ...


@dataclass(frozen=True, slots=True)
class RoutedAdapter:
    """The enabled adapter and the id it is declared under (principals carry that id)."""

    adapter_id: str
    adapter: AuthenticationAdapter


BEARER_SCHEME: Final = "bearer"
_NO_ERROR_CODE: Final = frozenset({AuthFailure.NO_EVIDENCE, AuthFailure.UNSUPPORTED})


@dataclass(frozen=True, slots=True)
class OAuthChallenge:
    """What an enabled OAuth adapter publishes: the RFC 9728 document and where it lives."""

    metadata_url: str
    resource: str
    issuer: str
    scopes_supported: tuple[str, ...] = ()


class Authenticator:
    """Immutable per-process authentication front door, built once by `build_authenticator`."""

    __slots__ = ("_adapter", "_anonymous_enabled", "_oauth")

    _adapter: RoutedAdapter | None
    _anonymous_enabled: bool
    _oauth: OAuthChallenge | None

    def __init__(
        self,
        *,
        adapter: RoutedAdapter | None,
        anonymous_enabled: bool,
        oauth: OAuthChallenge | None = None,
    ) -> None:
        object.__setattr__(self, "_adapter", adapter)
        object.__setattr__(self, "_anonymous_enabled", anonymous_enabled)
        object.__setattr__(self, "_oauth", oauth)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Authenticator is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Authenticator is immutable")

    @property
    def anonymous_enabled(self) -> bool:
        return self._anonymous_enabled

    @property
    def protected_resource_metadata(self) -> dict[str, object] | None:
        """The RFC 9728 body (a fresh copy) when OAuth is enabled, else None."""
        if self._oauth is None:
            return None
        metadata: dict[str, object] = {
            "resource": self._oauth.resource,
            "authorization_servers": [self._oauth.issuer],
            "bearer_methods_supported": ["header"],
        }
        if self._oauth.scopes_supported:
            metadata["scopes_supported"] = list(self._oauth.scopes_supported)
        return metadata

    def with_scopes_supported(self, scopes: Iterable[str]) -> Authenticator:
        """The same authenticator, publishing `scopes` (sorted) in its RFC 9728 metadata.

        Policy decides which scopes matter, and policy is composed after authentication.
        """
        if self._oauth is None:
            return self
        oauth = dataclasses.replace(self._oauth, scopes_supported=tuple(sorted(set(scopes))))
        return Authenticator(
            adapter=self._adapter, anonymous_enabled=self._anonymous_enabled, oauth=oauth
        )

    async def authenticate(self, authorization_values: Sequence[str]) -> Principal | AuthFailure:
        """Authenticate one request from all of its raw `Authorization` header values."""
        evidence = extract_evidence(authorization_values)
        if evidence is None:
            return ANONYMOUS if self._anonymous_enabled else AuthFailure.NO_EVIDENCE
        if isinstance(evidence, AuthFailure):
            return evidence
        return await self._dispatch(evidence)

    async def _dispatch(self, evidence: Evidence) -> Principal | AuthFailure:
        routed = self._adapter
        if routed is None or evidence.scheme != BEARER_SCHEME:
            return AuthFailure.UNSUPPORTED
        try:
            outcome = await routed.adapter.authenticate(evidence.payload)
        except Exception:  # an adapter bug must fail closed, never open
            return AuthFailure.REJECTED
        if isinstance(outcome, AuthFailure):
            return outcome
        if not isinstance(outcome, Identity) or not is_valid_subject(outcome.subject):
            return AuthFailure.REJECTED
        return registered_principal(routed.adapter_id, outcome)

    def challenge_headers(self, failure: AuthFailure, *, token_presented: bool) -> dict[str, str]:
        """Headers for the empty 401 that answers `failure`.

        With an enabled OAuth adapter: `WWW-Authenticate: Bearer` naming the
        protected-resource metadata URL and, when policy names any, the scopes it grants
        with (`scope`, as published in `scopes_supported`), plus `error="invalid_token"`
        when the client
        actually sent a bearer token (`offers_bearer_token`), well formed or not. A
        credential in a scheme we do not take (`Basic`, `DPoP`), malformed or not,
        is no bearer token to call invalid: RFC 6750 answers it, like a request with no
        credential, with the bare challenge that tells the client how to authenticate.

        With operator bearer tokens, the bare `Bearer` challenge: a 401 must say which
        scheme it takes, and there is no authorization server whose metadata could be
        named (nor a token a client could fetch by itself, so no error code either).
        Without any adapter no credential can succeed, so nothing is offered.
        """
        if self._oauth is None:
            return {} if self._adapter is None else {"WWW-Authenticate": "Bearer"}
        value = f'Bearer resource_metadata="{self._oauth.metadata_url}"'
        if self._oauth.scopes_supported:
            # The scopes that let a token do anything here (those policy grants with),
            # which a client asks its authorization server for before any call.
            value += f', scope="{" ".join(self._oauth.scopes_supported)}"'
        if token_presented and failure not in _NO_ERROR_CODE:
            value += ', error="invalid_token"'
        return {"WWW-Authenticate": value}

    def step_up_headers(self, scopes: Iterable[str]) -> dict[str, str]:
        """Headers for the 403 that asks an OAuth client to get a token with more scopes.

        `scope` lists every scope the retried call needs (the ones the token already had
        that policy names, plus the missing ones), so a client asking its authorization
        server for exactly these does not lose what it had.
        """
        value = f'Bearer error="insufficient_scope", scope="{" ".join(sorted(set(scopes)))}"'
        if self._oauth is not None:
            value += f', resource_metadata="{self._oauth.metadata_url}"'
        return {"WWW-Authenticate": value}
