"""Real HTTPS on loopback: a local issuer with a test CA, reached as `idp.mymcp.test`.

The issuer grammar forbids IP literals and requires port 443, so the client keeps the URL
`https://idp.mymcp.test/...` (TLS SNI and hostname verification use that name) while an
injected transport connects to the server's real port on 127.0.0.1. The production code
builds its TLS context from the system store; SSL_CERT_FILE points it at the test CA.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from mymcp.auth import Principal, build_authenticator
from mymcp.errors import HostAuthenticationCompositionError
from tests.auth.helpers import ISSUER, SERVER, FakeClock, mint, oauth_settings, public_jwk, run
from tests.e2e.auth_issuer import (
    HOSTNAME,
    LocalIssuer,
    issuer_client_factory,
    running_issuer,
    self_signed_ca,
)


@pytest.fixture
def issuer(tmp_path: Path, ec_key: ec.EllipticCurvePrivateKey) -> Iterator[LocalIssuer]:
    # Only the OpenID Connect document exists, so discovery must fall back to it.
    with running_issuer(
        tmp_path, [public_jwk(ec_key, "k1")], issuer=ISSUER, openid_only=True
    ) as state:
        yield state


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
        oauth_settings(), SERVER, http_client_factory=issuer_client_factory(issuer), clock=clock
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

    issuer.publish(public_jwk(ed_key, "k2"))  # the provider rotates in a new key
    rotated = run(auth.authenticate([f"Bearer {mint(ed_key, alg='EdDSA', kid='k2')}"]))
    assert isinstance(rotated, Principal)
    assert issuer.jwks_fetches() == 2


def test_untrusted_certificate_fails_composition(
    issuer: LocalIssuer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    other_file = tmp_path / "other.pem"
    other_file.write_bytes(self_signed_ca("Other CA").public_bytes(serialization.Encoding.PEM))
    monkeypatch.setenv("SSL_CERT_FILE", str(other_file))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    with pytest.raises(HostAuthenticationCompositionError) as info:
        build_authenticator(
            oauth_settings(), SERVER, http_client_factory=issuer_client_factory(issuer)
        )
    assert info.value.code == "oauth_validation_source"
    assert issuer.seen == []  # the handshake failed before any request was made
