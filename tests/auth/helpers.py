"""Shared helpers for the authentication tests: keys, JWT minting, a fake issuer, a clock."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from mymcp.config import (
    AdapterDeclaration,
    AdapterRoute,
    AuthenticationSettings,
    ServerSettings,
)

T = TypeVar("T")

ISSUER = "https://idp.mymcp.test/realms/dev"
AUDIENCE = "http://127.0.0.1:8000/mcp"
METADATA_URL = "http://127.0.0.1:8000/.well-known/oauth-protected-resource/mcp"
JWKS_URI = "https://idp.mymcp.test/realms/dev/jwks"
NOW = 1_800_000_000
SERVER = ServerSettings(address="127.0.0.1", port=8000)

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def run(awaitable: Awaitable[T]) -> T:
    async def _wrap() -> T:
        return await awaitable

    return asyncio.run(_wrap())


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def public_jwk(private_key: PrivateKey, kid: str, **extra: object) -> dict[str, object]:
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        body = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        body = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        body = OKPAlgorithm.to_jwk(public, as_dict=True)
    body = {k: v for k, v in body.items() if k not in ("key_ops",)}
    body["kid"] = kid
    body.update(extra)
    return body


def claims(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "iat": NOW - 10,
        "exp": NOW + 3600,
    }
    base.update(overrides)
    return {k: v for k, v in base.items() if v is not None}


def mint(
    private_key: PrivateKey,
    *,
    alg: str,
    kid: str,
    payload: Mapping[str, object] | None = None,
    headers: Mapping[str, object] | None = None,
) -> str:
    """A signed compact JWS; `headers` may add or override JOSE header members."""
    header = {"kid": kid, "typ": "at+jwt", **(headers or {})}
    body = dict(payload if payload is not None else claims())
    return jwt.encode(body, private_key, algorithm=alg, headers=header)


def raw_jws(header: Mapping[str, object], payload: Mapping[str, object], signature: bytes) -> str:
    def encode(document: Mapping[str, object]) -> str:
        return b64(json.dumps(document).encode())

    return f"{encode(header)}.{encode(payload)}.{b64(signature)}"


@dataclass
class FakeClock:
    wall: float = float(NOW)
    mono: float = 1000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono


@dataclass
class FakeIssuer:
    """An in-memory identity provider served through httpx.MockTransport."""

    issuer: str = ISSUER
    jwks_uri: str = JWKS_URI
    keys: list[dict[str, object]] = field(default_factory=list)
    rfc8414: bool = True
    openid: bool = True
    requests: list[str] = field(default_factory=list)
    overrides: dict[str, tuple[int, object]] = field(default_factory=dict)

    def metadata(self) -> dict[str, object]:
        return {"issuer": self.issuer, "jwks_uri": self.jwks_uri}

    def handle(self, request: httpx.Request) -> httpx.Response:
        url = str(request.url)
        self.requests.append(url)
        if url in self.overrides:
            status, body = self.overrides[url]
            if isinstance(body, bytes):
                return httpx.Response(status, content=body)
            return httpx.Response(status, json=body)
        host_root = "https://idp.mymcp.test"
        if url == f"{host_root}/.well-known/oauth-authorization-server/realms/dev" and self.rfc8414:
            return httpx.Response(200, json=self.metadata())
        if url == f"{self.issuer}/.well-known/openid-configuration" and self.openid:
            return httpx.Response(200, json=self.metadata())
        if url == self.jwks_uri:
            return httpx.Response(200, json={"keys": self.keys})
        return httpx.Response(404)

    def count(self, url: str) -> int:
        return sum(1 for seen in self.requests if seen == url)

    def factory(self) -> Callable[[ssl.SSLContext], httpx.Client]:
        def build(context: ssl.SSLContext) -> httpx.Client:
            assert isinstance(context, ssl.SSLContext)
            assert context.verify_mode == ssl.CERT_REQUIRED
            assert context.check_hostname
            return httpx.Client(transport=httpx.MockTransport(self.handle))

        return build


def bearer_route() -> AdapterRoute:
    return AdapterRoute(source="authorization", scheme="bearer")


def oauth_settings(issuer: str = ISSUER, **overrides: Any) -> AuthenticationSettings:
    adapter = AdapterDeclaration(
        id="local-oauth", type="oauth-jwt-jwks-v1", enabled=True, route=bearer_route()
    )
    values: dict[str, Any] = {
        "anonymous_enabled": False,
        "adapters": (adapter,),
        "oauth_issuer": issuer,
    }
    values.update(overrides)
    return AuthenticationSettings(**values)
