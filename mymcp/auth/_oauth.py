"""`oauth-jwt-jwks-v1`: validate JWT access tokens from one issuer (resource server only).

Validation order: compact-JWS shape, JOSE header, key lookup, signature, payload JSON,
required claims, issuer and audience, times, subject. An unknown kid refetches the JWKS
at most once per 60 s, and only for a token whose still-unverified claims would pass, so
junk tokens cannot use up the budget a real key rotation needs; while a download runs,
only a few more such requests wait for it and the rest are rejected at once. Shape,
header-JSON and missing-claim problems are `malformed`; everything else is `rejected`.
The signature is checked before the payload is trusted.

Scopes come from `scope` (space-separated, RFC 8693/9068, or a list) or, in a token
without one, from `scp` (a string or a list, as several providers send it). Entries
that are not RFC 6749 scope tokens are ignored, and at most 64 are kept: scopes only
ever add permissions through policy rules, so dropping a malformed one can only take
access away, never grant it.

Claims required: `iss`, `aud`, `sub`, `exp`, `iat`. `client_id` and `jti` are neither
required nor inspected: MyMCP keeps no replay cache and no per-client policy, and several
common providers omit them from user access tokens (Keycloak has no `client_id`,
Microsoft Entra uses `appid`/`uti`), so demanding them would only break interoperability.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol, TypeGuard

from anyio import to_thread
from jwt.algorithms import Algorithm, ECAlgorithm, OKPAlgorithm, RSAAlgorithm, RSAPSSAlgorithm

from mymcp._base64url import (
    b64url_decode,
    b64url_encode,
)
from mymcp._escaping import is_visible_ascii
from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.auth._evidence import MAX_PAYLOAD_BYTES
from mymcp.auth._jwks import MAX_KID_LENGTH, VerificationKey
from mymcp.auth._principal import AuthFailure, Identity, is_valid_subject

# The scope-token rule lives with the configuration grammar, so a policy can name only
# scopes that authentication keeps.
from mymcp.config import is_scope_token
from mymcp.errors import DiscoveryError

__all__ = [
    "CLOCK_SKEW_SECONDS",
    "MAX_REFETCH_WAITERS",
    "OAUTH_JWT_TYPE",
    "REFETCH_INTERVAL_SECONDS",
    "Clock",
    "OAuthJwtAdapter",
    "SystemClock",
    "is_scope_token",
    "project_subject",
    "token_scopes",
]

OAUTH_JWT_TYPE = "oauth-jwt-jwks-v1"
CLOCK_SKEW_SECONDS = 30
REFETCH_INTERVAL_SECONDS = 60.0
# A request waiting for a key download holds one of the server's few request slots for as
# long as the download takes (up to 15 s from a slow issuer), and a token that gets this
# far needs no secret, only the public issuer and audience. So only a handful may wait;
# the rest are refused at once, as a token naming an unknown key is, and cannot crowd out
# requests whose keys are already known.
MAX_REFETCH_WAITERS = 4
# How long a downloaded key set is trusted without another look: a key the provider has
# withdrawn (perhaps because it leaked) stops being accepted within this long, even when
# no token ever names a new key id.
KEY_SET_MAX_AGE_SECONDS = 900.0
REQUIRED_CLAIMS = ("iss", "aud", "sub", "exp", "iat")
ACCEPTED_TYPES = frozenset({"jwt", "at+jwt", "application/at+jwt"})  # media types: no case

_VERIFIERS: dict[str, Algorithm] = {
    "RS256": RSAAlgorithm(RSAAlgorithm.SHA256),
    "PS256": RSAPSSAlgorithm(RSAPSSAlgorithm.SHA256),
    "ES256": ECAlgorithm(ECAlgorithm.SHA256),
    "EdDSA": OKPAlgorithm(),
}

KeyFetcher = Callable[[], Mapping[str, VerificationKey]]
"""Fetches and parses the JWKS again (blocking); raises DiscoveryError on failure."""


class Clock(Protocol):
    def time(self) -> float: ...
    def monotonic(self) -> float: ...


class SystemClock:
    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()


def project_subject(issuer: str, sub: str) -> str:
    """Adapter-local subject: `oauth-jwt-v1:` + b64url(SHA-256(issuer ‖ 0x00 ‖ sub))."""
    digest = hashlib.sha256(issuer.encode("utf-8") + b"\x00" + sub.encode("utf-8")).digest()
    return f"oauth-jwt-v1:{b64url_encode(digest)}"


# The same logger as the start's authentication lines: downloads while serving are
# the same concern.
_log = logging.getLogger("mymcp.host.authentication")

MAX_SCOPES = 64


def token_scopes(claims: Mapping[str, object]) -> frozenset[str] | None:
    """The scopes a token carries, from `scope` or, when it has no `scope` (a string or a
    list), from `scp`; malformed entries are ignored. None when there are more than
    `MAX_SCOPES` different ones: the token is then refused, not cut short, since leaving a
    scope out could lift a policy rule that denies it.

    One claim, not both: a token carrying both states its scopes twice, and taking their
    union would grant more than either says. `scope` is the standard claim (RFC 9068).
    """
    value = claims.get("scope")
    if not isinstance(value, str | list):  # a list too, as some providers send it
        value = claims.get("scp")
    raw: list[object] = []
    if isinstance(value, str):
        raw = list(value.split(" "))
    elif isinstance(value, list):
        raw = value
    scopes = frozenset(item for item in raw if is_scope_token(item))
    return scopes if len(scopes) <= MAX_SCOPES else None


def _split_compact(token: str) -> tuple[bytes, bytes, bytes, bytes] | None:
    """(header, payload, signature, signing input) of a compact JWS, or None."""
    if not token.isascii():
        return None
    segments = token.split(".")
    # No bound of their own: the whole credential is already at most MAX_PAYLOAD_BYTES,
    # and a payload may take most of it (identity providers put many group claims there).
    if len(segments) != 3 or not all(segments):
        return None
    header, payload, signature = (b64url_decode(s) for s in segments)
    if header is None or payload is None or signature is None:
        return None
    return header, payload, signature, f"{segments[0]}.{segments[1]}".encode("ascii")


def _json_object(data: bytes) -> dict[str, object] | None:
    try:
        document = load_strict_json(data, max_bytes=MAX_PAYLOAD_BYTES)
    except StrictJsonError:
        return None
    return document if isinstance(document, dict) else None


def _header_failure(header: Mapping[str, object]) -> AuthFailure | None:
    """Check alg, typ, crit and kid; other JOSE members (jku, x5u, jwk, ...) are ignored."""
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in _VERIFIERS or "crit" in header:
        return AuthFailure.REJECTED  # we implement no extensions, so any `crit` is unknown
    typ = header.get("typ")
    if "typ" in header and not (isinstance(typ, str) and typ.lower() in ACCEPTED_TYPES):
        return AuthFailure.REJECTED
    kid = header.get("kid")
    if not isinstance(kid, str) or not (len(kid) <= MAX_KID_LENGTH and is_visible_ascii(kid)):
        return AuthFailure.REJECTED
    return None


def _is_timestamp(value: object) -> TypeGuard[int]:
    return type(value) is int and value >= 0


class OAuthJwtAdapter:
    """Validates bearer JWTs for one issuer and one audience (the loopback resource URL)."""

    def __init__(
        self,
        *,
        issuer: str,
        audience: str,
        keys: Mapping[str, VerificationKey],
        fetch_keys: KeyFetcher,
        clock: Clock | None = None,
    ) -> None:
        self._issuer = issuer
        self._audience = audience
        self._keys = keys
        self._fetch_keys = fetch_keys
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = asyncio.Lock()
        self._last_refetch: float | None = None
        self._refetch_callers = 0  # the request downloading and those waiting for it
        # The keys given were downloaded just now, by whoever built this adapter.
        self._keys_since = self._clock.monotonic()

    async def _refetched_key(
        self, kid: str, replacing: VerificationKey | None = None
    ) -> VerificationKey | None:
        """Download the key set again for `kid`, unknown or (`replacing`) known under key
        material the signature did not match, at most once per 60 s; the key then under
        `kid`, if another one than `replacing`.

        While a download runs, at most `MAX_REFETCH_WAITERS` further requests wait for it;
        any more get None at once, as when the refetch window has not elapsed.
        """
        if self._refetch_callers > MAX_REFETCH_WAITERS:
            return None
        self._refetch_callers += 1
        try:
            async with self._lock:
                key = self._keys.get(kid)  # a download meanwhile may have brought it
                if key is None or key is replacing:
                    await self._download()
                    key = self._keys.get(kid)
                return None if key is replacing else key
        finally:
            self._refetch_callers -= 1

    async def _refresh_if_old(self) -> None:
        """Download the key set again once it is older than `KEY_SET_MAX_AGE_SECONDS`,
        unless a download is under way: requests meanwhile go on with the keys known.

        The request that finds it old waits for the download. When that fails (the
        provider is down), the next such look is a whole age later, not a minute: one
        request in a quarter of an hour may wait for an unreachable provider, not one in
        every minute of the outage.
        """
        if self._lock.locked():
            return
        async with self._lock:
            # A download the once-a-minute budget held back (one for an unknown key id
            # just before) is no attempt: the set stays old, and a request after the
            # minute tries again, so a withdrawn key still goes within the age.
            old = self._clock.monotonic() - self._keys_since >= KEY_SET_MAX_AGE_SECONDS
            if old and await self._download():
                self._keys_since = max(self._keys_since, self._clock.monotonic())

    async def _download(self) -> bool:
        """Download the key set, unless one was tried less than a minute ago; whether it
        was tried (failing or not)."""
        now = self._clock.monotonic()
        if self._last_refetch is not None and now - self._last_refetch < REFETCH_INTERVAL_SECONDS:
            return False
        self._last_refetch = now
        try:
            # Given up on, not waited for, when the request is cancelled (the server is
            # stopping): the download has its own deadline and ends by itself.
            fetched = await to_thread.run_sync(self._fetch_keys, abandon_on_cancel=True)
        except DiscoveryError as exc:
            # Keep serving with the keys already trusted, but say so: a rotation that
            # cannot be fetched otherwise shows only as tokens refused with 401.
            _log.warning("jwks_refresh outcome=error code=%s", exc.code)
            return True
        self._keys = fetched
        self._keys_since = self._clock.monotonic()
        _log.info("jwks_refresh outcome=loaded keys=%d", len(fetched))
        return True

    async def authenticate(self, payload: str) -> Identity | AuthFailure:
        parts = _split_compact(payload)
        if parts is None:
            return AuthFailure.MALFORMED
        header_bytes, claims_bytes, signature, signing_input = parts
        header = _json_object(header_bytes)
        if header is None:
            return AuthFailure.MALFORMED
        failure = _header_failure(header)
        if failure is not None:
            return failure
        alg, kid = str(header["alg"]), str(header["kid"])
        if self._clock.monotonic() - self._keys_since >= KEY_SET_MAX_AGE_SECONDS:
            await self._refresh_if_old()
        key = self._keys.get(kid)
        if key is None:
            # Only a token whose (still unverified) claims would pass may spend the refetch
            # budget, so junk tokens with made-up kids cannot hold back a key rotation.
            if self._unverified_claims_fail(claims_bytes):
                return AuthFailure.REJECTED
            key = await self._refetched_key(kid)
        if key is None or alg not in key.algorithms:
            return AuthFailure.REJECTED
        if not _VERIFIERS[alg].verify(signing_input, key.key, signature):
            # The provider may have put new key material under a key id it used before:
            # looked up once more (within the same budget), or every new token is refused
            # until a restart.
            if self._unverified_claims_fail(claims_bytes):
                return AuthFailure.REJECTED
            key = await self._refetched_key(kid, replacing=key)
            if key is None or alg not in key.algorithms:
                return AuthFailure.REJECTED
            if not _VERIFIERS[alg].verify(signing_input, key.key, signature):
                return AuthFailure.REJECTED
        claims = _json_object(claims_bytes)
        if claims is None or any(name not in claims for name in REQUIRED_CLAIMS):
            return AuthFailure.MALFORMED
        return self._check_claims(claims)

    def _unverified_claims_fail(self, claims_bytes: bytes) -> bool:
        claims = _json_object(claims_bytes)
        if claims is None or any(name not in claims for name in REQUIRED_CLAIMS):
            return True
        return isinstance(self._check_claims(claims), AuthFailure)

    def _check_claims(self, claims: Mapping[str, object]) -> Identity | AuthFailure:
        if claims["iss"] != self._issuer:
            return AuthFailure.REJECTED
        audience = claims["aud"]
        if isinstance(audience, list):
            if not audience or not all(isinstance(item, str) for item in audience):
                return AuthFailure.REJECTED
            if self._audience not in audience:
                return AuthFailure.REJECTED
        elif audience != self._audience:
            return AuthFailure.REJECTED
        expires, issued = claims["exp"], claims["iat"]
        not_before = claims.get("nbf", 0)
        if not _is_timestamp(expires) or not _is_timestamp(issued):
            return AuthFailure.REJECTED
        if not _is_timestamp(not_before):
            return AuthFailure.REJECTED
        now = self._clock.time()
        if now - expires > CLOCK_SKEW_SECONDS or issued - now > CLOCK_SKEW_SECONDS:
            return AuthFailure.REJECTED
        if expires <= issued or not_before - now > CLOCK_SKEW_SECONDS:
            return AuthFailure.REJECTED
        subject = claims["sub"]
        scopes = token_scopes(claims)
        if not is_valid_subject(subject) or scopes is None:
            return AuthFailure.REJECTED
        return Identity(project_subject(self._issuer, subject), f"oauth:{subject}", scopes)
