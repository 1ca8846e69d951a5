"""A real HTTPS identity provider on loopback, reachable as `https://idp.mymcp.test`.

The OAuth issuer grammar forbids IP literals, `localhost` and ports other than 443, so
the issuer keeps its public name: a private test CA signs a certificate for
`idp.mymcp.test`, and the `http_client_factory` handed to `build_authenticator` routes
`idp.mymcp.test:443` (and nothing else) to the issuer's loopback port while TLS SNI and
hostname verification still use the public name. The production code builds its TLS
context from the system trust store, so the test points `SSL_CERT_FILE` at the CA.

Used by the discovery tests in `tests/auth/test_oauth_tls.py` and the end-to-end tests,
with helpers to publish JWKs and mint (or forge) compact JWS access tokens.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID

from tests.auth import helpers as auth_helpers

__all__ = [
    "HOSTNAME",
    "ISSUER",
    "LocalIssuer",
    "PrivateKey",
    "access_claims",
    "b64url",
    "forge_hs256",
    "forge_unsigned",
    "issuer_client_factory",
    "mint",
    "public_jwk",
    "running_issuer",
    "self_signed_ca",
]

HOSTNAME = "idp.mymcp.test"
ISSUER = f"https://{HOSTNAME}/realms/e2e"
LOOPBACK = "127.0.0.1"

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    public_key: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
    ca_name: str = "MyMCP e2e test CA",
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(ca_name))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(HOSTNAME)]), critical=False
        )
    return builder.sign(signer, hashes.SHA256())


def self_signed_ca(common_name: str) -> x509.Certificate:
    """A throwaway CA certificate that signs nothing the issuer serves (an untrusted CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return _certificate(common_name, key.public_key(), key, ca=True, ca_name=common_name)


def public_jwk(private_key: PrivateKey, kid: str) -> dict[str, object]:
    """The public JWK an identity provider would publish for `private_key`."""
    return auth_helpers.public_jwk(private_key, kid, use="sig")


def access_claims(audience: str, **overrides: object) -> dict[str, object]:
    """Claims of a fresh access token for `audience` (wall clock; `None` drops a claim)."""
    now = int(time.time())
    claims: dict[str, object] = {
        "iss": ISSUER,
        "aud": audience,
        "sub": "alice@example.test",
        "iat": now - 5,
        "exp": now + 600,
        "client_id": "e2e-client",
        "jti": b64url(now.to_bytes(8, "big")),
    }
    claims.update(overrides)
    return {key: value for key, value in claims.items() if value is not None}


def mint(private_key: PrivateKey, *, alg: str, kid: str, claims: Mapping[str, object]) -> str:
    """A properly signed compact JWS access token."""
    return jwt.encode(
        dict(claims), private_key, algorithm=alg, headers={"kid": kid, "typ": "at+jwt"}
    )


def _signing_input(header: Mapping[str, object], claims: Mapping[str, object]) -> str:
    def encode(document: Mapping[str, object]) -> str:
        return b64url(json.dumps(document, separators=(",", ":")).encode())

    return f"{encode(header)}.{encode(claims)}"


def forge_unsigned(kid: str, claims: Mapping[str, object]) -> str:
    """An `alg: none` token (empty signature), as an attacker would send it."""
    return _signing_input({"alg": "none", "kid": kid, "typ": "at+jwt"}, claims) + "."


def forge_hs256(private_key: PrivateKey, kid: str, claims: Mapping[str, object]) -> str:
    """The algorithm-confusion attack: HS256 keyed with the issuer's public key PEM."""
    secret = private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    signing_input = _signing_input({"alg": "HS256", "kid": kid, "typ": "at+jwt"}, claims)
    signature = hmac.new(secret, signing_input.encode("ascii"), hashlib.sha256).digest()
    return f"{signing_input}.{b64url(signature)}"


@dataclass
class LocalIssuer:
    """State of the running identity provider; tests edit `keys` to rotate."""

    port: int
    ca_file: Path
    issuer: str = ISSUER
    keys: list[dict[str, object]] = field(default_factory=list)
    # (path, Host, User-Agent, Accept) of every request, in order.
    seen: list[tuple[str, str, str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def jwks_path(self) -> str:
        return f"{urlsplit(self.issuer).path}/certs"

    def paths(self) -> list[str]:
        with self.lock:
            return [path for path, *_ in self.seen]

    def publish(self, jwk: dict[str, object]) -> None:
        with self.lock:
            self.keys.append(jwk)

    def jwks_fetches(self) -> int:
        return self.paths().count(self.jwks_path)


def _write_tls_material(directory: Path) -> tuple[Path, Path]:
    """(CA certificate file, server key+certificate chain file)."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("MyMCP e2e test CA", ca_key.public_key(), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _certificate(HOSTNAME, server_key.public_key(), ca_key, ca=False)
    ca_file = directory / "e2e-ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    chain = directory / "e2e-idp.pem"
    chain.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + server_cert.public_bytes(serialization.Encoding.PEM)
    )
    return ca_file, chain


@contextmanager
def running_issuer(
    directory: Path,
    keys: list[dict[str, object]],
    *,
    issuer: str = ISSUER,
    openid_only: bool = False,
) -> Iterator[LocalIssuer]:
    """Serve issuer metadata and a JWKS over TLS on 127.0.0.1 until the block ends.

    Metadata is at the RFC 8414 path, or with `openid_only` only at the OpenID Connect
    path (the RFC 8414 one answers 404), so discovery's fallback can be tested.
    """
    ca_file, chain = _write_tls_material(directory)
    state = LocalIssuer(port=0, ca_file=ca_file, issuer=issuer, keys=list(keys))
    issuer_path = urlsplit(issuer).path
    metadata_path = (
        f"{issuer_path}/.well-known/openid-configuration"
        if openid_only
        else f"/.well-known/oauth-authorization-server{issuer_path}"
    )

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            headers = self.headers
            with state.lock:
                state.seen.append(
                    (
                        self.path,
                        headers.get("Host", ""),
                        headers.get("User-Agent", ""),
                        headers.get("Accept", ""),
                    )
                )
                snapshot = list(state.keys)
            body: object
            if self.path == metadata_path:
                body = {"issuer": issuer, "jwks_uri": f"https://{HOSTNAME}{state.jwks_path}"}
            elif self.path == state.jwks_path:
                body = {"keys": snapshot}
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(chain)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    state.port = int(server.server_address[1])
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _LoopbackTransport(httpx.HTTPTransport):
    """Connects `idp.mymcp.test:443` to the issuer's loopback port; nothing else."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        super().__init__(verify=context)
        self._port = port

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != HOSTNAME or request.url.port not in (None, 443):
            raise httpx.ConnectError("only the test issuer is reachable", request=request)
        request.url = request.url.copy_with(host=LOOPBACK, port=self._port)
        request.extensions = {**request.extensions, "sni_hostname": HOSTNAME}
        return super().handle_request(request)


def issuer_client_factory(issuer: LocalIssuer) -> Callable[[ssl.SSLContext], httpx.Client]:
    """An `HttpClientFactory` that keeps MyMCP's verified TLS context and reroutes the host."""

    def build(context: ssl.SSLContext) -> httpx.Client:
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert context.check_hostname
        return httpx.Client(
            transport=_LoopbackTransport(issuer.port, context),
            trust_env=False,
            follow_redirects=False,
        )

    return build
