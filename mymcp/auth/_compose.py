"""Startup composition: turn authentication settings into one immutable Authenticator.

Checks run in a fixed order, and the first failure ends composition with a
`HostAuthenticationCompositionError` carrying one stable code:

1. every enabled adapter has a composer and its settings table (`adapter_type_unavailable`);
2. routes: source `authorization`; operator bearer on `(authorization, bearer)` with no
   profile (`route_invalid`); OAuth likewise (`oauth_route_invalid`);
3. no two enabled adapters share a route (`route_collision`);
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
    DiscoveryError,
    HttpClientFactory,
    default_http_client,
    discover_jwks_uri,
    fetch_bounded,
)
from mymcp.auth._evidence import AUTHORIZATION_SOURCE, RouteKey
from mymcp.auth._jwks import MAX_JWKS_BYTES, VerificationKey, parse_jwks
from mymcp.auth._oauth import OAUTH_JWT_TYPE, Clock, OAuthJwtAdapter
from mymcp.auth._operator_bearer import OPERATOR_BEARER_TYPE, OperatorBearerAdapter
from mymcp.auth._router import AuthenticationAdapter, Authenticator, OAuthChallenge, RoutedAdapter
from mymcp.auth._verifier_file import VerifierSourceError, load_verifier
from mymcp.config import AdapterDeclaration, AuthenticationSettings, ServerSettings, is_issuer
from mymcp.errors import HostAuthenticationCompositionError

__all__ = ["build_authenticator", "derive_resource"]

_LOG = logging.getLogger("mymcp.host.authentication")
_BEARER_ROUTE: RouteKey = (AUTHORIZATION_SOURCE, "bearer", None)

_MESSAGES = {
    "adapter_type_unavailable": "MyMCP authentication adapter type is unavailable",
    "verifier_source": "MyMCP operator bearer verifier source is unusable",
    "route_invalid": "MyMCP authentication adapter route is invalid",
    "oauth_route_invalid": "MyMCP OAuth adapter route must be the bearer authorization route",
    "oauth_validation_source": "MyMCP OAuth issuer metadata or keys are unavailable or invalid",
    "oauth_resource": "MyMCP OAuth protected resource cannot be derived from the binding",
    "oauth_configuration": "MyMCP OAuth issuer configuration is invalid",
    "anonymous_access_enabled": "MyMCP OAuth requires anonymous access to be disabled",
    "route_collision": "MyMCP authentication adapter routes collide",
}


class _Failure(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def derive_resource(server: ServerSettings) -> tuple[str, str]:
    """(resource URL, protected-resource metadata URL) from the loopback binding only."""
    address, port = server.address, server.port
    if not isinstance(address, str) or "%" in address:
        raise _Failure("oauth_resource")
    if type(port) is not int or not 1 <= port <= 65535:
        raise _Failure("oauth_resource")
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise _Failure("oauth_resource") from None
    if not ip.is_loopback:
        raise _Failure("oauth_resource")
    host = f"[{ip.compressed}]" if ip.version == 6 else ip.compressed
    origin = f"http://{host}:{port}"
    return f"{origin}/mcp", f"{origin}/.well-known/oauth-protected-resource/mcp"


def _route(declaration: AdapterDeclaration) -> RouteKey:
    route = declaration.route
    return (route.source, route.scheme, route.profile)


def _check_declarations(
    settings: AuthenticationSettings, enabled: list[AdapterDeclaration]
) -> None:
    required = {
        OPERATOR_BEARER_TYPE: settings.operator_bearer_verifier_path,
        OAUTH_JWT_TYPE: settings.oauth_issuer,
    }
    for declaration in enabled:
        if declaration.type not in required or required[declaration.type] is None:
            raise _Failure("adapter_type_unavailable")
    for declaration in enabled:
        route = _route(declaration)
        if declaration.type == OAUTH_JWT_TYPE and route != _BEARER_ROUTE:
            raise _Failure("oauth_route_invalid")
        if route != _BEARER_ROUTE:
            raise _Failure("route_invalid")
    routes = [_route(declaration) for declaration in enabled]
    if len(set(routes)) != len(routes):
        raise _Failure("route_collision")
    uses_oauth = any(declaration.type == OAUTH_JWT_TYPE for declaration in enabled)
    if uses_oauth and settings.anonymous_enabled:
        raise _Failure("anonymous_access_enabled")


def _operator_bearer(path: Path) -> OperatorBearerAdapter:
    try:
        return OperatorBearerAdapter(load_verifier(path))
    except VerifierSourceError:
        raise _Failure("verifier_source") from None


def _fetch_keys(client: httpx.Client, jwks_uri: str) -> Mapping[str, VerificationKey]:
    return parse_jwks(fetch_bounded(client, jwks_uri, max_bytes=MAX_JWKS_BYTES, kind="jwks"))


def _refetch_keys(factory: HttpClientFactory, jwks_uri: str) -> Mapping[str, VerificationKey]:
    # A fresh context per fetch session: system store plus SSL_CERT_FILE/SSL_CERT_DIR.
    with factory(ssl.create_default_context()) as client:
        return _fetch_keys(client, jwks_uri)


def _oauth(
    issuer: str, server: ServerSettings, factory: HttpClientFactory, clock: Clock | None
) -> tuple[OAuthJwtAdapter, OAuthChallenge]:
    if not is_issuer(issuer):
        raise _Failure("oauth_configuration")
    resource, metadata_url = derive_resource(server)
    try:
        with factory(ssl.create_default_context()) as client:
            jwks_uri = discover_jwks_uri(client, issuer)
            keys = _fetch_keys(client, jwks_uri)
    except (DiscoveryError, httpx.HTTPError, ssl.SSLError, OSError):
        raise _Failure("oauth_validation_source") from None
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
    enabled = [declaration for declaration in settings.adapters if declaration.enabled]
    _check_declarations(settings, enabled)
    routes: dict[RouteKey, RoutedAdapter] = {}
    challenge: OAuthChallenge | None = None
    verifier_path, issuer = settings.operator_bearer_verifier_path, settings.oauth_issuer
    for declaration in enabled:
        adapter: AuthenticationAdapter
        if declaration.type == OPERATOR_BEARER_TYPE and verifier_path is not None:
            adapter = _operator_bearer(verifier_path)
        elif declaration.type == OAUTH_JWT_TYPE and issuer is not None:
            adapter, challenge = _oauth(issuer, server, factory, clock)
        else:  # unreachable after _check_declarations; kept so the code fails closed
            raise _Failure("adapter_type_unavailable")
        routes[_route(declaration)] = RoutedAdapter(declaration.id, adapter)
    return Authenticator(
        routes=routes, anonymous_enabled=settings.anonymous_enabled, oauth=challenge
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
    except _Failure as failure:
        _LOG.error("authentication_composition outcome=error code=%s", failure.code)
        raise HostAuthenticationCompositionError(failure.code, _MESSAGES[failure.code]) from None
    _LOG.info(
        "authentication_composition outcome=loaded enabled=%d",
        authenticator.enabled_adapter_count,
    )
    return authenticator
