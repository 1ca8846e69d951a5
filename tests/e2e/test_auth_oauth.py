"""OAuth (`oauth-jwt-jwks-v1`) end to end: real uvicorn, real TLS discovery, real tokens.

The issuer must be `https://idp.mymcp.test` (the grammar forbids IPs, localhost and
ports other than 443), which a subprocess could not resolve. So this module runs the real
uvicorn server in-process, in a background thread, over an app built exactly as the
launcher builds it, except that `build_authenticator` gets an `http_client_factory` that
routes `idp.mymcp.test:443` to the loopback HTTPS issuer from `auth_issuer`. TLS is
verified by MyMCP's own context against the test CA named by `SSL_CERT_FILE`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import anyio
import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from mymcp.app import create_app
from mymcp.auth import build_authenticator
from mymcp.config import (
    AdapterDeclaration,
    AdapterRoute,
    AuthenticationSettings,
    HostConfiguration,
    McpSettings,
    ServerSettings,
)
from mymcp.host import build_runtime
from mymcp.plugins.mnemosyne import MnemosyneSettings, create_mnemosyne
from tests.e2e.auth_http import SDK_MODES, open_session, request_json, sdk_session, send
from tests.e2e.auth_issuer import (
    ISSUER,
    LocalIssuer,
    PrivateKey,
    access_claims,
    forge_hs256,
    forge_unsigned,
    issuer_client_factory,
    mint,
    public_jwk,
    running_issuer,
)
from tests.e2e.inprocess import serving
from tests.e2e.server import free_port


@dataclass
class OAuthStack:
    url: str
    base: str
    issuer: LocalIssuer
    rsa_key: rsa.RSAPrivateKey
    ec_key: ec.EllipticCurvePrivateKey
    ed_key: ed25519.Ed25519PrivateKey

    def claims(self, **overrides: object) -> dict[str, object]:
        return access_claims(self.url, **overrides)

    def token(self, key: PrivateKey | None = None, alg: str = "RS256", kid: str = "rsa-1") -> str:
        return mint(key or self.rsa_key, alg=alg, kid=kid, claims=self.claims())

    @property
    def metadata_url(self) -> str:
        return f"{self.base}/.well-known/oauth-protected-resource/mcp"


def _configuration(port: int) -> HostConfiguration:
    adapter = AdapterDeclaration(
        id="idp",
        type="oauth-jwt-jwks-v1",
        enabled=True,
        route=AdapterRoute(source="authorization", scheme="bearer"),
    )
    return HostConfiguration(
        schema_version=7,
        server=ServerSettings(address="127.0.0.1", port=port),
        authentication=AuthenticationSettings(
            anonymous_enabled=False, adapters=(adapter,), oauth_issuer=ISSUER
        ),
        mcp=McpSettings(
            strict_protocol_version=True,
            session_inactivity_timeout_seconds=1800,
            session_absolute_lifetime_seconds=28800,
        ),
        origin="loaded",
    )


@pytest.fixture(scope="module")
def oauth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OAuthStack]:
    root = tmp_path_factory.mktemp("oauth")
    home, certs = root / "home", root / "no-system-certs"
    home.mkdir(mode=0o700)
    certs.mkdir()
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    ed_key = ed25519.Ed25519PrivateKey.generate()
    keys = [
        public_jwk(rsa_key, "rsa-1"),
        public_jwk(ec_key, "ec-1"),
        public_jwk(ed_key, "ed-1"),
    ]
    with pytest.MonkeyPatch.context() as patch, running_issuer(root, keys) as issuer:
        patch.setenv("SSL_CERT_FILE", str(issuer.ca_file))
        patch.setenv("SSL_CERT_DIR", str(certs))  # only the test CA is trusted
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CONFIG_HOME", str(root / "xdg"))
        port = free_port()
        configuration = _configuration(port)
        mnemosyne = create_mnemosyne(MnemosyneSettings(), environ={"HOME": str(home)}, home=home)
        runtime = build_runtime(configuration, mnemosyne)
        authenticator = build_authenticator(
            configuration.authentication,
            configuration.server,
            http_client_factory=issuer_client_factory(issuer),
        )
        assert issuer.jwks_fetches() == 1
        app = create_app(
            runtime,
            authenticator=authenticator,
            configuration=configuration,
            protected_resource_metadata=authenticator.protected_resource_metadata,
        )
        with serving(app, port):
            base = f"http://127.0.0.1:{port}"
            yield OAuthStack(f"{base}/mcp", base, issuer, rsa_key, ec_key, ed_key)


def _bearer(token: str) -> list[str]:
    return [f"Bearer {token}"]


@pytest.mark.parametrize(("mode", "revision"), SDK_MODES)
def test_sdk_client_with_rs256_token(oauth: OAuthStack, mode: str, revision: str) -> None:
    outcome = anyio.run(functools.partial(sdk_session, oauth.url, oauth.token(), mode=mode))
    assert outcome.protocol_version == revision
    assert outcome.tool_names[0] == "list_tools"
    assert {"memory_recall", "memory_list", "memory_inspect"} <= set(outcome.tool_names)
    assert outcome.called.is_error is False
    assert outcome.called.structured_content["tools"] == outcome.tool_names


def test_raw_http_with_rs256_token(oauth: OAuthStack) -> None:
    token = oauth.token()
    with httpx.Client(timeout=10) as http:
        session = open_session(http, oauth.url, token)
        listed = send(
            http,
            "POST",
            oauth.url,
            authorization=_bearer(token),
            session=session,
            body=request_json("tools/list"),
        )
        assert listed.status_code == 200
        assert listed.json()["result"]["tools"][0]["name"] == "list_tools"
        other = send(http, "POST", oauth.url, authorization=_bearer(oauth.token()), session=session)
        assert other.status_code == 400  # initialize must not carry a session
        deleted = send(http, "DELETE", oauth.url, authorization=_bearer(token), session=session)
        assert deleted.status_code == 204


def test_protected_resource_metadata(oauth: OAuthStack) -> None:
    response = httpx.get(oauth.metadata_url, timeout=10)
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {
        "resource": oauth.url,
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
    }


def _assert_challenge(response: httpx.Response, expected: str, label: object) -> None:
    assert response.status_code == 401, label
    assert response.content == b"", label
    assert "mcp-session-id" not in response.headers, label
    assert response.headers.get_list("www-authenticate") == [expected], label


def test_missing_token_gets_challenge_without_error(oauth: OAuthStack) -> None:
    expected = f'Bearer resource_metadata="{oauth.metadata_url}"'
    with httpx.Client(timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            _assert_challenge(send(http, method, oauth.url), expected, method)


@pytest.mark.parametrize(
    ("credential", "invalid_token"),
    [
        ("Basic  YWxpY2U6c2VjcmV0", False),  # doubled space: malformed, and not a bearer
        ("DPoP", False),
        ("Bearer  token", True),  # a malformed bearer token is still a bearer token
        ("bEaReR", True),
    ],
)
def test_only_a_bearer_credential_is_called_an_invalid_token(
    oauth: OAuthStack, credential: str, invalid_token: bool
) -> None:
    expected = f'Bearer resource_metadata="{oauth.metadata_url}"'
    if invalid_token:
        expected += ', error="invalid_token"'
    with httpx.Client(timeout=10) as http:
        for method in ("POST", "GET", "DELETE"):
            reply = send(http, method, oauth.url, authorization=[credential])
            _assert_challenge(reply, expected, (credential, method))


def _invalid_tokens(oauth: OAuthStack) -> dict[str, str]:
    key = oauth.rsa_key
    return {
        "expired": mint(
            key, alg="RS256", kid="rsa-1", claims=oauth.claims(iat=1_600_000_000, exp=1_600_000_300)
        ),
        "wrong_audience": mint(
            key, alg="RS256", kid="rsa-1", claims=oauth.claims(aud="http://127.0.0.1:1/mcp")
        ),
        "wrong_issuer": mint(
            key, alg="RS256", kid="rsa-1", claims=oauth.claims(iss="https://idp.mymcp.test/other")
        ),
        "alg_none": forge_unsigned("rsa-1", oauth.claims()),
        "hs256_public_key": forge_hs256(key, "rsa-1", oauth.claims()),
        "wrong_key_for_kid": mint(oauth.ec_key, alg="ES256", kid="rsa-1", claims=oauth.claims()),
    }


@pytest.mark.parametrize(
    "case",
    [
        "expired",
        "wrong_audience",
        "wrong_issuer",
        "alg_none",
        "hs256_public_key",
        "wrong_key_for_kid",
    ],
)
def test_invalid_token_gets_invalid_token_challenge(oauth: OAuthStack, case: str) -> None:
    token = _invalid_tokens(oauth)[case]
    expected = f'Bearer resource_metadata="{oauth.metadata_url}", error="invalid_token"'
    with httpx.Client(timeout=10) as http:
        session = open_session(http, oauth.url, oauth.token())
        for method in ("POST", "GET", "DELETE"):
            fresh = send(http, method, oauth.url, authorization=_bearer(token))
            _assert_challenge(fresh, expected, (case, method))
            bound = send(http, method, oauth.url, authorization=_bearer(token), session=session)
            _assert_challenge(bound, expected, (case, method, "bound"))
        # The rejected DELETE did not end the session.
        alive = send(
            http,
            "POST",
            oauth.url,
            authorization=_bearer(oauth.token()),
            session=session,
            body=request_json("ping"),
        )
        assert alive.status_code == 200
        assert alive.json()["result"] == {}


@pytest.mark.parametrize(("alg", "kid"), [("ES256", "ec-1"), ("EdDSA", "ed-1")])
def test_ec_and_ed25519_tokens_accepted(oauth: OAuthStack, alg: str, kid: str) -> None:
    key: PrivateKey = oauth.ec_key if alg == "ES256" else oauth.ed_key
    token = oauth.token(key, alg=alg, kid=kid)
    outcome = anyio.run(sdk_session, oauth.url, token)
    assert outcome.called.is_error is False
    with httpx.Client(timeout=10) as http:
        assert open_session(http, oauth.url, token)


def test_key_rotation_without_restart(oauth: OAuthStack) -> None:
    """The IdP starts signing with a new key; MyMCP refetches the JWKS on the unknown kid."""
    fetches = oauth.issuer.jwks_fetches()
    new_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    oauth.issuer.publish(public_jwk(new_key, "rsa-2"))
    token = oauth.token(new_key, kid="rsa-2")
    outcome = anyio.run(sdk_session, oauth.url, token)
    assert outcome.called.is_error is False
    assert oauth.issuer.jwks_fetches() == fetches + 1
    with httpx.Client(timeout=10) as http:
        open_session(http, oauth.url, token)
        open_session(http, oauth.url, oauth.token())  # the old key is still published
    assert oauth.issuer.jwks_fetches() == fetches + 1  # known kids need no refetch
