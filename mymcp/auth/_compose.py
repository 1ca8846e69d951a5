"""Startup composition: turn authentication settings into one immutable Authenticator.

Checks run in a fixed order, and the first failure ends composition with a
`HostAuthenticationCompositionError` carrying one stable code (and, for the operator's
terminal, the key path and cause):

1. every enabled adapter has a composer and its settings table (`adapter_type_unavailable`);
2. routes: source `authorization`; operator bearer on `(authorization, bearer)` with no
   profile (`route_invalid`); OAuth likewise (`oauth_route_invalid`);
3. at most one adapter is enabled, since every enabled one answers the bearer route
   (`route_collision`);
4. enabled OAuth requires anonymous access to be off (`anonymous_access_enabled`);
5. sources: the verifier file (`verifier_source`); for OAuth the issuer grammar
   (`oauth_configuration`), the loopback resource (`oauth_resource`) and discovery plus
   JWKS (`oauth_validation_source`).

Disabled adapters are never composed, and their sources are never read.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path

import httpx

from mymcp.auth._discovery import (
    HttpClientFactory,
    default_http_client,
    discover_jwks_uri,
    fetch_bounded,
)
from mymcp.auth._evidence import AUTHORIZATION_SOURCE
from mymcp.auth._jwks import MAX_JWKS_BYTES, VerificationKey, parse_jwks
from mymcp.auth._oauth import OAUTH_JWT_TYPE, Clock, OAuthJwtAdapter
from mymcp.auth._operator_bearer import OPERATOR_BEARER_TYPE, OperatorBearerAdapter
from mymcp.auth._router import (
    BEARER_SCHEME,
    AuthenticationAdapter,
    Authenticator,
    OAuthChallenge,
    RoutedAdapter,
)
from mymcp.auth._verifier_file import VerifierSourceError, load_verifier
from mymcp.config import AdapterDeclaration, AuthenticationSettings, ServerSettings, is_issuer
from mymcp.errors import DiscoveryError, HostAuthenticationCompositionError, Location

__all__ = ["build_authenticator", "derive_resource"]

_LOG = logging.getLogger("mymcp.host.authentication")
_BEARER_ROUTE = (AUTHORIZATION_SOURCE, BEARER_SCHEME, None)


def _failure(
    code: str, detail: str | None = None, location: Location | None = None
) -> HostAuthenticationCompositionError:
    return HostAuthenticationCompositionError(code, location=location or Location(), detail=detail)


def derive_resource(server: ServerSettings) -> tuple[str, str]:
    """(resource URL, protected-resource metadata URL) from the loopback binding only."""
    address, port = server.address, server.port
    unusable = _failure("oauth_resource", f"{address!r} port {port!r} is not a loopback binding")
    if not isinstance(address, str) or "%" in address:
        raise unusable
    if type(port) is not int or not 1 <= port <= 65535:
        raise unusable
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise unusable from None
    if not ip.is_loopback:
        raise unusable
    host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    origin = f"http://{host}:{port}"
    return f"{origin}/mcp", f"{origin}/.well-known/oauth-protected-resource/mcp"


def _route(declaration: AdapterDeclaration) -> tuple[str, str, str | None]:
    route = declaration.route
    return (route.source, route.scheme, route.profile)


def _check_declarations(
    settings: AuthenticationSettings, enabled: list[tuple[int, AdapterDeclaration]]
) -> None:
    """Checks in a fixed order, so that one configuration always fails with the same
    code: types first (a typo in a type is the likeliest fault, and it makes the rest
    meaningless), then routes, collisions and anonymity."""
    required = {
        OPERATOR_BEARER_TYPE: settings.operator_bearer_verifier_path,
        OAUTH_JWT_TYPE: settings.oauth_issuer,
    }
    for index, declaration in enabled:
        if declaration.type not in required or required[declaration.type] is None:
            # A name MyMCP has never had is most likely a typo; a real type is missing
            # its settings table (or the schema predates it).
            problem = (
                f"no adapter of type {declaration.type!r} can be enabled under this schema"
                if declaration.type in required
                else f"{declaration.type!r} is no adapter type"
            )
            raise _failure(
                "adapter_type_unavailable",
                f"{problem}; the types are {OPERATOR_BEARER_TYPE} (schema 4+) and "
                f"{OAUTH_JWT_TYPE} (schema 5+), each with its settings table",
                Location(key=f"authentication.adapters[{index}].type"),
            )
    for index, declaration in enabled:
        if _route(declaration) != _BEARER_ROUTE:
            code = "oauth_route_invalid" if declaration.type == OAUTH_JWT_TYPE else "route_invalid"
            raise _failure(
                code,
                'an enabled adapter answers route { source = "authorization", scheme = '
                '"bearer" } without a profile',
                Location(key=f"authentication.adapters[{index}].route"),
            )
    if len(enabled) > 1:
        raise _failure(
            "route_collision",
            "only one adapter can be enabled: every enabled adapter answers the bearer route",
            Location(key=f"authentication.adapters[{enabled[1][0]}].enabled"),
        )
    uses_oauth = any(declaration.type == OAUTH_JWT_TYPE for _, declaration in enabled)
    if uses_oauth and settings.anonymous_enabled:
        raise _failure(
            "anonymous_access_enabled",
            "set anonymous_enabled = false when OAuth is enabled",
            Location(key="authentication.anonymous_enabled"),
        )


def _operator_bearer(path: Path) -> OperatorBearerAdapter:
    try:
        return OperatorBearerAdapter(load_verifier(path))
    except VerifierSourceError as exc:
        raise _failure("verifier_source", f"{exc.code}: {exc.detail}", exc.location) from None


def _fetch_keys(
    client: httpx.Client, jwks_uri: str, *, refresh: bool = False
) -> Mapping[str, VerificationKey]:
    body = fetch_bounded(client, jwks_uri, max_bytes=MAX_JWKS_BYTES, kind="jwks")
    try:
        return parse_jwks(body, quiet=refresh)
    except DiscoveryError as exc:
        exc.locate(Location(source=jwks_uri))
        raise


def _refetch_keys(factory: HttpClientFactory, jwks_uri: str) -> Mapping[str, VerificationKey]:
    # A fresh context per fetch session: system store plus SSL_CERT_FILE/SSL_CERT_DIR.
    with factory(ssl.create_default_context()) as client:
        return _fetch_keys(client, jwks_uri, refresh=True)


def _oauth(
    issuer: str, server: ServerSettings, factory: HttpClientFactory, clock: Clock | None
) -> tuple[OAuthJwtAdapter, OAuthChallenge]:
    if not is_issuer(issuer):
        raise _failure("oauth_configuration", f"{issuer!r} is not a canonical https issuer")
    resource, metadata_url = derive_resource(server)
    try:
        with factory(ssl.create_default_context()) as client:
            jwks_uri = discover_jwks_uri(client, issuer)
            keys = _fetch_keys(client, jwks_uri)
    except DiscoveryError as exc:
        detail = f"{exc.code}: {exc.detail}" if exc.detail else exc.code
        raise _failure("oauth_validation_source", detail, exc.location) from None
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise _failure("oauth_validation_source", detail, Location(source=issuer)) from None
    adapter = OAuthJwtAdapter(
        issuer=issuer,
        audience=resource,
        keys=keys,
        fetch_keys=lambda: _refetch_keys(factory, jwks_uri),
        clock=clock,
    )
    return adapter, OAuthChallenge(metadata_url=metadata_url, resource=resource, issuer=issuer)


def _compose(
    settings: AuthenticationSettings,
    server: ServerSettings,
    factory: HttpClientFactory,
    clock: Clock | None,
) -> Authenticator:
    enabled = [
        (i, declaration) for i, declaration in enumerate(settings.adapters) if declaration.enabled
    ]
    _check_declarations(settings, enabled)
    if not enabled:
        return Authenticator(adapter=None, anonymous_enabled=settings.anonymous_enabled)
    ((_, declaration),) = enabled
    challenge: OAuthChallenge | None = None
    verifier_path, issuer = settings.operator_bearer_verifier_path, settings.oauth_issuer
    adapter: AuthenticationAdapter
    if declaration.type == OPERATOR_BEARER_TYPE and verifier_path is not None:
        adapter = _operator_bearer(verifier_path)
    elif declaration.type == OAUTH_JWT_TYPE and issuer is not None:
        adapter, challenge = _oauth(issuer, server, factory, clock)
    else:  # unreachable after _check_declarations; kept so the code fails closed
        raise _failure("adapter_type_unavailable")
    return Authenticator(
        adapter=RoutedAdapter(declaration.id, adapter),
        anonymous_enabled=settings.anonymous_enabled,
        oauth=challenge,
    )


def build_authenticator(
    settings: AuthenticationSettings,
    server: ServerSettings,
    *,
    http_client_factory: HttpClientFactory | None = None,
    clock: Clock | None = None,
) -> Authenticator:
    """Compose the process's Authenticator once, at startup (blocking; may fetch over HTTPS).

    `http_client_factory` receives the verified TLS context MyMCP built and returns the
    `httpx.Client` to use; tests inject transports through it. `clock` replaces wall and
    monotonic time for tests. Raises HostAuthenticationCompositionError on any failure.
    """
    factory = http_client_factory if http_client_factory is not None else default_http_client
    try:
        authenticator = _compose(settings, server, factory, clock)
    except HostAuthenticationCompositionError as exc:
        _LOG.error("authentication_composition outcome=error code=%s", exc.code)
        raise
    enabled = sum(1 for declaration in settings.adapters if declaration.enabled)
    _LOG.info("authentication_composition outcome=loaded enabled=%d", enabled)
    return authenticator
