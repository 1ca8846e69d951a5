from __future__ import annotations

import socket
import threading

import httpx
import pytest

from mymcp.auth import _discovery
from mymcp.auth._discovery import (
    default_http_client,
    discover_jwks_uri,
    fetch_bounded,
    metadata_urls,
)
from mymcp.config import is_issuer
from mymcp.errors import DiscoveryError
from tests.auth.helpers import ISSUER, JWKS_URI, FakeIssuer


@pytest.mark.parametrize(
    "issuer",
    [
        "https://idp.example.com",
        "https://idp.example.com/",
        "https://idp.example.com:443/realms/dev",
        "https://tenant.eu.auth0.com/",
        "https://login.microsoftonline.com/0a1b-22/v2.0",
        "https://a-b.example.com/x/y",
        "https://1.example.com",
    ],
)
def test_valid_issuers(issuer: str) -> None:
    assert is_issuer(issuer)


@pytest.mark.parametrize(
    "issuer",
    [
        "http://idp.example.com",
        "HTTPS://idp.example.com",
        "https://IdP.example.com",
        "https://user@idp.example.com",
        "https://idp.example.com?x=1",
        "https://idp.example.com/?",
        "https://idp.example.com#f",
        "https://idp.example.com/%41",
        "https://idp.example.com:8443",
        "https://idp.example.com:0443",
        "https://idp.example.com:",
        "https://[::1]",
        "https://127.0.0.1",
        "https://localhost",
        "https://auth.localhost",
        "https://intranet",
        "https://-idp.example.com",
        "https://idp-.example.com",
        "https://idp..example.com",
        "https://idp.example.com.",
        "https://" + "a" * 64 + ".example.com",
        "https://idp.exämple.com",
        "https://idp.example.com/realms/",
        "https://idp.example.com//x",
        "https://idp.example.com/./x",
        "https://idp.example.com/a/..",
        "https://idp.example.com/a b",
        "https://idp.example.com/a\\b",
        "https://",
        "",
    ],
)
def test_invalid_issuers(issuer: str) -> None:
    assert not is_issuer(issuer)


def test_metadata_urls() -> None:
    assert metadata_urls("https://idp.example.com/realms/dev") == (
        "https://idp.example.com/.well-known/oauth-authorization-server/realms/dev",
        "https://idp.example.com/realms/dev/.well-known/openid-configuration",
    )
    assert metadata_urls("https://t.auth0.com/") == (
        "https://t.auth0.com/.well-known/oauth-authorization-server",
        "https://t.auth0.com/.well-known/openid-configuration",
    )


def client(idp: FakeIssuer) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(idp.handle))


def test_rfc8414_first() -> None:
    idp = FakeIssuer()
    assert discover_jwks_uri(client(idp), ISSUER) == JWKS_URI
    assert len(idp.requests) == 1


def test_openid_configuration_fallback() -> None:
    idp = FakeIssuer(rfc8414=False)
    assert discover_jwks_uri(client(idp), ISSUER) == JWKS_URI
    assert [u.split("/.well-known/")[1] for u in idp.requests] == [
        "oauth-authorization-server/realms/dev",
        "openid-configuration",
    ]


def test_fallback_when_first_document_is_for_another_issuer() -> None:
    idp = FakeIssuer()
    first = metadata_urls(ISSUER)[0]
    idp.overrides[first] = (200, {"issuer": "https://x.example.com"})
    assert discover_jwks_uri(client(idp), ISSUER) == JWKS_URI


def test_no_metadata_anywhere() -> None:
    idp = FakeIssuer(rfc8414=False, openid=False)
    with pytest.raises(DiscoveryError) as info:
        discover_jwks_uri(client(idp), ISSUER)
    assert info.value.code == "metadata_unavailable"


def test_when_neither_document_serves_the_error_says_what_each_answered() -> None:
    idp = FakeIssuer()
    first, second = metadata_urls(ISSUER)
    idp.overrides[first] = (200, {"issuer": "https://x.example.com", "jwks_uri": JWKS_URI})
    idp.overrides[second] = (404, {})
    with pytest.raises(DiscoveryError) as info:
        discover_jwks_uri(client(idp), ISSUER)
    assert info.value.code == "metadata_unavailable"
    assert info.value.location.source == second
    assert info.value.detail is not None
    assert info.value.detail.startswith("HTTP 404")
    # The value found is named beside the one expected: a trailing slash shows.
    assert (
        f'before it, {first}: its issuer is "https://x.example.com", not exactly "{ISSUER}"'
    ) in info.value.detail


@pytest.mark.parametrize(
    "jwks_uri",
    [
        "http://idp.mymcp.test/jwks",
        "https://other.mymcp.test/jwks",
        "https://idp.mymcp.test:8443/jwks",
        "https://IDP.mymcp.test/jwks",
        "https://u@idp.mymcp.test/jwks",
        "https://idp.mymcp.test/jwks#x",
        "https://idp.mymcp.test/%6awks",
        42,
    ],
)
def test_jwks_uri_must_stay_on_the_issuer_host(jwks_uri: object) -> None:
    idp = FakeIssuer()
    body = {"issuer": ISSUER, "jwks_uri": jwks_uri}
    for url in metadata_urls(ISSUER):
        idp.overrides[url] = (200, body)
    with pytest.raises(DiscoveryError) as info:
        discover_jwks_uri(client(idp), ISSUER)
    assert info.value.code == "metadata_invalid"
    assert info.value.detail is not None
    found = f'"{jwks_uri}"' if isinstance(jwks_uri, str) else str(jwks_uri)
    assert f"jwks_uri is {found}, not an https URL" in info.value.detail


@pytest.mark.parametrize(
    "body",
    [
        b'{"issuer": "https://idp.mymcp.test/realms/dev", "issuer": "x", "jwks_uri": "x"}',
        b"[]",
        b'{"issuer": "https://idp.mymcp.test/realms/dev/", "jwks_uri": "https://idp.mymcp.test/j"}',
    ],
)
def test_metadata_document_rules(body: bytes) -> None:
    idp = FakeIssuer()
    for url in metadata_urls(ISSUER):
        idp.overrides[url] = (200, body)
    with pytest.raises(DiscoveryError) as info:
        discover_jwks_uri(client(idp), ISSUER)
    assert info.value.code == "metadata_invalid"


def fetch(response: httpx.Response, max_bytes: int = 100) -> bytes:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return response

    with httpx.Client(transport=httpx.MockTransport(handler), follow_redirects=True) as c:
        body = fetch_bounded(c, "https://idp.mymcp.test/x", max_bytes=max_bytes, kind="jwks")
    assert seen[0].headers["accept"] == "application/json"
    assert seen[0].headers["user-agent"] == "MyMCP/oauth-jwt-jwks-v1"
    return body


def fetch_code(response: httpx.Response, max_bytes: int = 100) -> str:
    with pytest.raises(DiscoveryError) as info:
        fetch(response, max_bytes)
    return info.value.code


def test_fetch_accepts_only_200() -> None:
    assert fetch(httpx.Response(200, content=b"{}")) == b"{}"
    assert fetch_code(httpx.Response(204)) == "jwks_unavailable"
    assert fetch_code(httpx.Response(500, content=b"{}")) == "jwks_unavailable"


def test_fetch_refuses_redirects_even_if_the_client_would_follow() -> None:
    moved = httpx.Response(302, headers={"location": "https://idp.mymcp.test/y"})
    assert fetch_code(moved) == "jwks_unavailable"


def test_fetch_bounds_the_body() -> None:
    assert fetch(httpx.Response(200, content=b"x" * 100)) == b"x" * 100
    assert fetch_code(httpx.Response(200, content=b"x" * 101)) == "jwks_invalid"
    streamed = httpx.Response(200, content=iter([b"x" * 60, b"x" * 60]))
    assert fetch_code(streamed) == "jwks_invalid"


def test_fetch_gives_up_at_its_deadline_however_slowly_the_body_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each read of a body sent a byte at a time takes a second of a fake clock.
    clock = iter(range(1000))
    monkeypatch.setattr(_discovery.time, "monotonic", lambda: float(next(clock)))
    trickle = httpx.Response(200, content=iter([b" "] * 30 + [b"{}"]))
    with pytest.raises(DiscoveryError) as info:
        fetch(trickle)
    assert info.value.code == "jwks_unavailable"
    assert "no complete answer within 10 s" in str(info.value)
    assert next(clock) <= 13  # it stopped reading at the deadline, not at the end


def test_fetch_gives_up_at_its_deadline_while_the_response_head_trickles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that sends part of its response head and then nothing more, within each
    read's timeout, is cut off at the fetch's deadline, not at the read timeout."""
    monkeypatch.setattr(_discovery, "FETCH_DEADLINE_SECONDS", 0.5)  # reads may wait 1 s
    release = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def trickle() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Ty")
            release.wait(60)

    server = threading.Thread(target=trickle, daemon=True)
    server.start()
    limits = httpx.Limits(max_keepalive_connections=0)
    try:
        with (
            httpx.Client(trust_env=False, limits=limits) as c,
            pytest.raises(DiscoveryError) as info,
        ):
            fetch_bounded(c, f"http://127.0.0.1:{port}/jwks", max_bytes=100, kind="jwks")
    finally:
        release.set()
        server.join(10)
        listener.close()
    assert info.value.code == "jwks_unavailable"
    assert "no complete answer within 0.5 s" in str(info.value)


def test_fetch_refuses_compressed_bodies() -> None:
    compressed = iter([b"{}"])
    response = httpx.Response(200, content=compressed, headers={"content-encoding": "gzip"})
    assert fetch_code(response) == "jwks_invalid"


def test_transport_errors_are_unavailable() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(handler)) as c, pytest.raises(DiscoveryError):
        fetch_bounded(c, "https://idp.mymcp.test/x", max_bytes=10, kind="metadata")


def test_default_client_policy() -> None:
    import ssl

    with default_http_client(ssl.create_default_context()) as c:
        assert c.follow_redirects is False
        assert c.trust_env is False
        assert c.timeout.connect == 10.0


@pytest.mark.slow
def test_a_provider_silent_for_more_than_half_the_deadline_is_still_heard() -> None:
    """An identity provider that takes six of its ten seconds to start answering (a cold
    start) is within the deadline, and its answer is read."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    answered = threading.Event()

    def slow() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            # Silent past half the deadline (the old read timeout), then the answer.
            answered.wait(_discovery.FETCH_DEADLINE_SECONDS * 0.6)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    server = threading.Thread(target=slow, daemon=True)
    server.start()
    limits = httpx.Limits(max_keepalive_connections=0)
    try:
        with httpx.Client(trust_env=False, limits=limits) as c:
            body = fetch_bounded(c, f"http://127.0.0.1:{port}/jwks", max_bytes=100, kind="jwks")
    finally:
        answered.set()
        server.join(10)
        listener.close()
    assert body == b"{}"
