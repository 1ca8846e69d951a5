"""A real HTTPS identity provider on loopback, reachable as `https://idp.mymcp.test`.

The OAuth issuer grammar forbids IP literals, `localhost` and ports other than 443, so
the issuer keeps its public name: a private test CA signs a certificate for
`idp.mymcp.test`, and the `http_client_factory` handed to `build_authenticator` routes
`idp.mymcp.test:443` (and nothing else) to the issuer's loopback port while TLS SNI and
hostname verification still use the public name. The production code builds its TLS
context from the system trust store, so the test points `SSL_CERT_FILE` at the CA.

The same approach as `tests/auth/test_oauth_tls.py`, factored out for the end-to-end
tests, plus helpers to publish JWKs and mint (or forge) compact JWS access tokens.
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

import httpx
import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

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
]

HOSTNAME = "idp.mymcp.test"
ISSUER = f"https://{HOSTNAME}/realms/e2e"
METADATA_PATH = "/.well-known/oauth-authorization-server/realms/e2e"  # RFC 8414 insertion
JWKS_PATH = "/realms/e2e/protocol/certs"
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
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name("MyMCP e2e test CA"))
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


def public_jwk(private_key: PrivateKey, kid: str) -> dict[str, object]:
    """The public JWK an identity provider would publish for `private_key`."""
    public = private_key.public_key()
    if isinstance(public, rsa.RSAPublicKey):
        body = RSAAlgorithm.to_jwk(public, as_dict=True)
    elif isinstance(public, ec.EllipticCurvePublicKey):
        body = ECAlgorithm.to_jwk(public, as_dict=True)
    else:
        body = OKPAlgorithm.to_jwk(public, as_dict=True)
    body = {key: value for key, value in body.items() if key != "key_ops"}
    return {**body, "kid": kid, "use": "sig"}


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
    keys: list[dict[str, object]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def publish(self, jwk: dict[str, object]) -> None:
        with self.lock:
            self.keys.append(jwk)

    def jwks_fetches(self) -> int:
        with self.lock:
            return self.requests.count(JWKS_PATH)


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
def running_issuer(directory: Path, keys: list[dict[str, object]]) -> Iterator[LocalIssuer]:
    """Serve RFC 8414 metadata and a JWKS over TLS on 127.0.0.1 until the block ends."""
    ca_file, chain = _write_tls_material(directory)
    state = LocalIssuer(port=0, ca_file=ca_file, keys=list(keys))

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with state.lock:
                state.requests.append(self.path)
                snapshot = list(state.keys)
            body: object
            if self.path == METADATA_PATH:
                body = {"issuer": ISSUER, "jwks_uri": f"https://{HOSTNAME}{JWKS_PATH}"}
            elif self.path == JWKS_PATH:
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
