"""Real HTTPS on loopback: a local issuer with a test CA, reached as `idp.mymcp.test`.

The issuer grammar forbids IP literals and requires port 443, so the client keeps the URL
`https://idp.mymcp.test/...` (TLS SNI and hostname verification use that name) while an
injected transport connects to the server's real port on 127.0.0.1. The production code
builds its TLS context from the system store; SSL_CERT_FILE points it at the test CA.
"""

from __future__ import annotations

import datetime
import json
import ssl
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from mymcp.auth import Principal, build_authenticator
from mymcp.errors import HostAuthenticationCompositionError
from tests.auth.helpers import ISSUER, SERVER, FakeClock, mint, oauth_settings, public_jwk, run

HOSTNAME = "idp.mymcp.test"
LOOPBACK = "127.0.0.1"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(
    subject: str,
    issuer: str,
    public_key: ec.EllipticCurvePublicKey,
    signer: ec.EllipticCurvePrivateKey,
    *,
    ca: bool,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
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


@dataclass
class LocalIssuer:
    port: int
    ca_file: Path
    keys: list[dict[str, object]] = field(default_factory=list)
    seen: list[tuple[str, str, str, str]] = field(default_factory=list)


@pytest.fixture
def issuer(tmp_path: Path, ec_key: ec.EllipticCurvePrivateKey) -> Iterator[LocalIssuer]:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = _certificate("MyMCP test CA", "MyMCP test CA", ca_key.public_key(), ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = _certificate(HOSTNAME, "MyMCP test CA", server_key.public_key(), ca_key, ca=False)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    chain = tmp_path / "server.pem"
    chain.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        + server_cert.public_bytes(serialization.Encoding.PEM)
    )
    state = LocalIssuer(port=0, ca_file=ca_file, keys=[public_jwk(ec_key, "k1")])

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.seen.append(
                (
                    self.path,
                    self.headers.get("Host", ""),
                    self.headers.get("User-Agent", ""),
                    self.headers.get("Accept", ""),
                )
            )
            if self.path == "/realms/dev/.well-known/openid-configuration":
                body: object = {
                    "issuer": ISSUER,
                    "jwks_uri": f"https://{HOSTNAME}/realms/dev/certs",
                }
            elif self.path == "/realms/dev/certs":
                body = {"keys": state.keys}
            else:  # no RFC 8414 document: discovery must fall back to OpenID Connect
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
    state.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class LoopbackTransport(httpx.HTTPTransport):
    """Connects `idp.mymcp.test:443` to the test server's loopback port; nothing else."""

    def __init__(self, port: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._port = port

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host != HOSTNAME or request.url.port not in (None, 443):
            raise httpx.ConnectError("only the test issuer is reachable", request=request)
        request.url = request.url.copy_with(host=LOOPBACK, port=self._port)
        request.extensions = {**request.extensions, "sni_hostname": HOSTNAME}
        return super().handle_request(request)


def factory(port: int) -> Callable[[ssl.SSLContext], httpx.Client]:
    def build(context: ssl.SSLContext) -> httpx.Client:
        transport = LoopbackTransport(port, verify=context)
        return httpx.Client(transport=transport, trust_env=False, follow_redirects=False)

    return build


def test_discovery_validation_and_rotation_over_real_tls(
    issuer: LocalIssuer,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    ec_key: ec.EllipticCurvePrivateKey,
    ed_key: ed25519.Ed25519PrivateKey,
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(issuer.ca_file))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))  # nothing from the host's store
    clock = FakeClock()
    auth = build_authenticator(
        oauth_settings(), SERVER, http_client_factory=factory(issuer.port), clock=clock
    )
    assert [path for path, *_ in issuer.seen] == [
        "/.well-known/oauth-authorization-server/realms/dev",
        "/realms/dev/.well-known/openid-configuration",
        "/realms/dev/certs",
    ]
    assert all(host == HOSTNAME for _, host, _, _ in issuer.seen)
    assert all(agent == "MyMCP/oauth-jwt-jwks-v1" for _, _, agent, _ in issuer.seen)
    assert all(accept == "application/json" for *_, accept in issuer.seen)

    principal = run(auth.authenticate([f"Bearer {mint(ec_key, alg='ES256', kid='k1')}"]))
    assert isinstance(principal, Principal)

    issuer.keys.append(public_jwk(ed_key, "k2"))  # the provider rotates in a new key
    rotated = run(auth.authenticate([f"Bearer {mint(ed_key, alg='EdDSA', kid='k2')}"]))
    assert isinstance(rotated, Principal)
    assert [path for path, *_ in issuer.seen].count("/realms/dev/certs") == 2


def test_untrusted_certificate_fails_composition(
    issuer: LocalIssuer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other_ca = ec.generate_private_key(ec.SECP256R1())
    cert = _certificate("Other CA", "Other CA", other_ca.public_key(), other_ca, ca=True)
    other_file = tmp_path / "other.pem"
    other_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    monkeypatch.setenv("SSL_CERT_FILE", str(other_file))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    with pytest.raises(HostAuthenticationCompositionError) as info:
        build_authenticator(oauth_settings(), SERVER, http_client_factory=factory(issuer.port))
    assert info.value.code == "oauth_validation_source"
    assert issuer.seen == []  # the handshake failed before any request was made
