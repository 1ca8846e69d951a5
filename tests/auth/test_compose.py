from __future__ import annotations

import logging
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from mymcp.auth import ANONYMOUS, AuthFailure, build_authenticator, create_token
from mymcp.config import AdapterDeclaration, AdapterRoute, AuthenticationSettings, ServerSettings
from mymcp.errors import HostAuthenticationCompositionError
from tests.auth.helpers import SERVER, FakeIssuer, bearer_route, oauth_settings, public_jwk, run

LOGGER = "mymcp.host.authentication"


def bearer(
    adapter_id: str = "local-client",
    *,
    enabled: bool = True,
    route: AdapterRoute | None = None,
    kind: str = "operator-bearer-v1",
) -> AdapterDeclaration:
    return AdapterDeclaration(adapter_id, kind, enabled, route or bearer_route())


def settings(
    *adapters: AdapterDeclaration,
    path: Path | None = None,
    anonymous: bool = False,
    issuer: str | None = None,
) -> AuthenticationSettings:
    return AuthenticationSettings(
        anonymous_enabled=anonymous,
        adapters=adapters,
        operator_bearer_verifier_path=path,
        oauth_issuer=issuer,
    )


@pytest.fixture
def verifier(tmp_path: Path) -> Path:
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o700)
    path = directory / "verifier.json"
    create_token(path, "alice")
    return path


@pytest.fixture
def idp(ec_key: ec.EllipticCurvePrivateKey) -> FakeIssuer:
    return FakeIssuer(keys=[public_jwk(ec_key, "ec")])


def failure_code(caplog: pytest.LogCaptureFixture, *args: object, **kwargs: object) -> str:
    caplog.set_level(logging.INFO, logger=LOGGER)
    with pytest.raises(HostAuthenticationCompositionError) as info:
        build_authenticator(*args, **kwargs)  # type: ignore[arg-type]
    code = info.value.code
    assert info.value.message.startswith("MyMCP ")
    assert "/" not in info.value.message
    assert caplog.messages[-1] == f"authentication_composition outcome=error code={code}"
    assert caplog.records[-1].levelno == logging.ERROR
    return code


def test_defaults_are_anonymous_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    auth = build_authenticator(AuthenticationSettings(), ServerSettings())
    assert run(auth.authenticate(["Bearer x"])) is AuthFailure.UNSUPPORTED
    assert auth.protected_resource_metadata is None
    assert run(auth.authenticate([])) is ANONYMOUS
    assert run(auth.authenticate(["Bearer x"])) is AuthFailure.UNSUPPORTED
    assert caplog.messages == ["authentication_composition outcome=loaded enabled=0"]


def test_operator_bearer_loads(caplog: pytest.LogCaptureFixture, verifier: Path) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    auth = build_authenticator(settings(bearer(), path=verifier), SERVER)
    assert auth._adapter is not None
    assert auth.challenge_headers(AuthFailure.REJECTED, token_presented=True) == {
        "WWW-Authenticate": "Bearer"
    }
    assert caplog.messages == ["authentication_composition outcome=loaded enabled=1"]


def test_disabled_adapters_are_never_composed(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    disabled = (bearer(enabled=False), bearer("o", kind="oauth-jwt-jwks-v1", enabled=False))
    auth = build_authenticator(settings(*disabled, path=missing, issuer="not an issuer"), SERVER)
    assert run(auth.authenticate(["Bearer x"])) is AuthFailure.UNSUPPORTED
    assert run(auth.authenticate([])) is AuthFailure.NO_EVIDENCE


def _detail(*args: object) -> str:
    with pytest.raises(HostAuthenticationCompositionError) as info:
        build_authenticator(*args)  # type: ignore[arg-type]
    return info.value.detail or ""


def test_unknown_type(caplog: pytest.LogCaptureFixture, verifier: Path) -> None:
    adapter = bearer(kind="basic-v1")
    assert (
        failure_code(caplog, settings(adapter, path=verifier), SERVER) == "adapter_type_unavailable"
    )
    # Said as the likely typo it is, not as something the schema lacks.
    assert _detail(settings(adapter, path=verifier), SERVER).startswith(
        "'basic-v1' is no adapter type; the types are operator-bearer-v1"
    )


def test_schema_three_has_no_composer(caplog: pytest.LogCaptureFixture) -> None:
    assert failure_code(caplog, settings(bearer()), SERVER) == "adapter_type_unavailable"
    oauth = bearer(kind="oauth-jwt-jwks-v1")
    assert failure_code(caplog, settings(oauth), SERVER) == "adapter_type_unavailable"
    assert _detail(settings(oauth), SERVER).startswith(
        "no adapter of type 'oauth-jwt-jwks-v1' can be enabled under this schema;"
    )


@pytest.mark.parametrize(
    "route",
    [
        AdapterRoute("authorization", "token"),
        AdapterRoute("authorization", "bearer", "v1"),
        AdapterRoute("cookie", "bearer"),
    ],
)
def test_operator_bearer_route(
    caplog: pytest.LogCaptureFixture, verifier: Path, route: AdapterRoute
) -> None:
    declared = settings(bearer(route=route), path=verifier)
    assert failure_code(caplog, declared, SERVER) == "route_invalid"


def test_oauth_route(caplog: pytest.LogCaptureFixture) -> None:
    adapter = bearer(kind="oauth-jwt-jwks-v1", route=AdapterRoute("authorization", "bearer", "p"))
    declared = oauth_settings(adapters=(adapter,))
    assert failure_code(caplog, declared, SERVER) == "oauth_route_invalid"


def test_route_collision(caplog: pytest.LogCaptureFixture, verifier: Path) -> None:
    declared = settings(bearer("a"), bearer("b"), path=verifier)
    assert failure_code(caplog, declared, SERVER) == "route_collision"


def test_oauth_requires_anonymous_off(caplog: pytest.LogCaptureFixture, idp: FakeIssuer) -> None:
    declared = oauth_settings(anonymous_enabled=True)
    code = failure_code(caplog, declared, SERVER, http_client_factory=idp.factory())
    assert code == "anonymous_access_enabled"
    assert idp.requests == []


@pytest.mark.parametrize("mode", [0o644, None])
def test_verifier_source(
    caplog: pytest.LogCaptureFixture, verifier: Path, mode: int | None
) -> None:
    if mode is None:
        verifier.unlink()
    else:
        verifier.chmod(mode)
    assert failure_code(caplog, settings(bearer(), path=verifier), SERVER) == "verifier_source"


def test_oauth_configuration(caplog: pytest.LogCaptureFixture, idp: FakeIssuer) -> None:
    declared = oauth_settings(issuer="https://localhost/realms/dev")
    code = failure_code(caplog, declared, SERVER, http_client_factory=idp.factory())
    assert code == "oauth_configuration"
    assert idp.requests == []


@pytest.mark.parametrize(
    "server",
    [
        ServerSettings("10.0.0.1", 8000),
        ServerSettings("localhost", 8000),
        ServerSettings("::1%lo", 8000),
        ServerSettings("127.0.0.1", 0),
        ServerSettings("127.0.0.1", True),
    ],
)
def test_oauth_resource(
    caplog: pytest.LogCaptureFixture, idp: FakeIssuer, server: ServerSettings
) -> None:
    code = failure_code(caplog, oauth_settings(), server, http_client_factory=idp.factory())
    assert code == "oauth_resource"


@pytest.mark.parametrize(
    ("server", "resource"),
    [
        (ServerSettings("::1", 9000), "http://[::1]:9000/mcp"),
        (ServerSettings("0:0:0:0:0:0:0:1", 1), "http://[::1]:1/mcp"),
        (ServerSettings("127.1.2.3", 65535), "http://127.1.2.3:65535/mcp"),
    ],
)
def test_resource_is_derived_from_the_binding(
    idp: FakeIssuer, server: ServerSettings, resource: str
) -> None:
    auth = build_authenticator(oauth_settings(), server, http_client_factory=idp.factory())
    assert auth.protected_resource_metadata["resource"] == resource  # type: ignore[index]
    metadata_url = resource.removesuffix("/mcp") + "/.well-known/oauth-protected-resource/mcp"
    assert (
        metadata_url
        in auth.challenge_headers(AuthFailure.REJECTED, token_presented=False)["WWW-Authenticate"]
    )


@pytest.mark.parametrize("broken", ["metadata", "jwks", "transport"])
def test_oauth_validation_source(
    caplog: pytest.LogCaptureFixture, idp: FakeIssuer, broken: str
) -> None:
    if broken == "metadata":
        idp.rfc8414 = idp.openid = False
    elif broken == "jwks":
        idp.keys = []
    else:

        def factory(context: object) -> object:
            raise OSError("no network")

        code = failure_code(caplog, oauth_settings(), SERVER, http_client_factory=factory)
        assert code == "oauth_validation_source"
        return
    code = failure_code(caplog, oauth_settings(), SERVER, http_client_factory=idp.factory())
    assert code == "oauth_validation_source"
