"""Issuer grammar, authorization-server discovery and bounded HTTPS fetches.

Discovery asks RFC 8414 first (`/.well-known/oauth-authorization-server` inserted before
the issuer path) and then OpenID Connect (`<issuer>/.well-known/openid-configuration`).
Only `issuer` and `jwks_uri` are read from the metadata; the issuer must match exactly
and the JWKS must live on the issuer's own host.

Every fetch: TLS verified against the system trust store (which honours SSL_CERT_FILE and
SSL_CERT_DIR), no environment proxies, no redirects, HTTP 200 only, identity encoding,
`Accept: application/json`, a fixed User-Agent, a bounded body and a 10 s deadline for
the whole answer, its head included.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx

from mymcp._strictjson import StrictJsonError, load_strict_json
from mymcp.errors import DiscoveryError, Location, shown

__all__ = [
    "FETCH_DEADLINE_SECONDS",
    "MAX_METADATA_BYTES",
    "USER_AGENT",
    "HttpClientFactory",
    "default_http_client",
    "discover_jwks_uri",
    "fetch_bounded",
    "metadata_urls",
]

USER_AGENT = "MyMCP/oauth-jwt-jwks-v1"
FETCH_DEADLINE_SECONDS = 10.0
MAX_METADATA_BYTES = 16 * 1024

HttpClientFactory = Callable[[ssl.SSLContext], httpx.Client]
"""Builds the client for one fetch session from the verified TLS context MyMCP made."""


def default_http_client(context: ssl.SSLContext) -> httpx.Client:
    return httpx.Client(
        verify=context,
        trust_env=False,
        follow_redirects=False,
        timeout=FETCH_DEADLINE_SECONDS,
        # Every fetch on a connection of its own, which its deadline can cut (`_Deadline`).
        limits=httpx.Limits(max_keepalive_connections=0),
    )


class _Deadline:
    """Cuts a fetch's connection once its deadline passes, wherever the fetch waits.

    httpx bounds each read, not a whole response, and its head is read before any body
    loop could look at the clock: a server sending its status line and headers a byte
    just inside each read's timeout would hold a fetch for days. A timer shuts the
    connection's socket instead (which wakes a read blocked on it), and the fetch then
    fails as past its deadline.
    """

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: notes each connection's socket as it is made."""
        if event not in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            return
        stream = info.get("return_value")
        found = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(found, socket.socket):
            with self._lock:
                self._sockets.append(found)
                if self.expired:
                    _shut(found)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for found in self._sockets:
                _shut(found)


def _shut(found: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        found.shutdown(socket.SHUT_RDWR)


def _split_https(text: str) -> SplitResult | None:
    """Common URL hygiene: visible ASCII, literal `https://`, no `%`, userinfo or fragment."""
    if not text.isascii() or any(ch <= " " or ch in "%\\\x7f" for ch in text):
        return None
    if not text.startswith("https://") or "#" in text:
        return None
    parts = urlsplit(text)
    if "@" in parts.netloc or parts.netloc != parts.netloc.lower() or "[" in parts.netloc:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname or ""
    if port not in (None, 443) or parts.netloc not in (host, f"{host}:443"):
        return None
    return parts


def is_valid_jwks_uri(uri: str, issuer: str) -> bool:
    parts = _split_https(uri)
    return parts is not None and parts.hostname == urlsplit(issuer).hostname


def metadata_urls(issuer: str) -> tuple[str, str]:
    """(RFC 8414 path-inserted URL, OpenID Connect appended URL) for a valid issuer."""
    parts = urlsplit(issuer)
    suffix = "" if parts.path in ("", "/") else parts.path
    rfc8414 = f"https://{parts.netloc}/.well-known/oauth-authorization-server{suffix}"
    openid = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    return rfc8414, openid


def _refused(kind: str, url: str, detail: str, unavailable: bool = False) -> DiscoveryError:
    code = f"{kind}_unavailable" if unavailable else f"{kind}_invalid"
    return DiscoveryError(code, location=Location(source=url), detail=detail)


def fetch_bounded(client: httpx.Client, url: str, *, max_bytes: int, kind: str) -> bytes:
    """GET `url` under the fetch rules; raises DiscoveryError(`<kind>_unavailable|invalid`)
    naming the URL and, for the operator's terminal, why."""
    with _Deadline(FETCH_DEADLINE_SECONDS) as cut:
        try:
            return _fetch(client, url, max_bytes=max_bytes, kind=kind, trace=cut.trace)
        except DiscoveryError:
            if not cut.expired:
                raise
    raise _past_deadline(kind, url)


def _past_deadline(kind: str, url: str) -> DiscoveryError:
    detail = f"no complete answer within {FETCH_DEADLINE_SECONDS:g} s"
    return _refused(kind, url, detail, unavailable=True)


def _fetch(
    client: httpx.Client,
    url: str,
    *,
    max_bytes: int,
    kind: str,
    trace: Callable[[str, dict[str, Any]], None],
) -> bytes:
    deadline = time.monotonic() + FETCH_DEADLINE_SECONDS
    headers = {
        "Accept": "application/json",
        "Accept-Encoding": "identity",
        "User-Agent": USER_AGENT,
    }
    try:
        request = client.build_request(
            "GET",
            url,
            headers=headers,
            # A slow provider may be silent for most of the deadline before it answers
            # (a cold start): a read may wait that long. What ends a slow answer is the
            # deadline, which cuts the connection (`_Deadline`); the longer read timeout
            # only bounds a client whose connection cannot be cut.
            timeout=httpx.Timeout(FETCH_DEADLINE_SECONDS, read=2 * FETCH_DEADLINE_SECONDS),
            extensions={"trace": trace},
        )
        response = client.send(request, stream=True, follow_redirects=False)
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        raise _refused(kind, url, f"{type(exc).__name__}: {exc}", unavailable=True) from None
    try:
        if response.status_code != 200:
            detail = f"HTTP {response.status_code}; only 200 is accepted, redirects included"
            raise _refused(kind, url, detail, unavailable=True)
        if response.headers.get("content-encoding", "identity").lower() != "identity":
            raise _refused(kind, url, "the body is compressed; identity encoding is required")
        declared = response.headers.get("content-length", "0")
        too_large = f"the body is larger than {max_bytes} bytes"
        # ASCII digits only (`str.isdigit` also admits "²", which `int` refuses), and few
        # enough for `int` to read at all.
        digits = declared.isascii() and declared.isdigit() and len(declared) <= 20
        if not digits or int(declared) > max_bytes:
            raise _refused(kind, url, too_large)
        body = bytearray()
        # Every read as it arrives (no chunk size: nothing is held back to fill one), so
        # the deadline is checked after each read and a body sent a byte at a time
        # cannot outlast it by more than one read's timeout.
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > max_bytes:
                raise _refused(kind, url, too_large)
            if time.monotonic() > deadline:
                raise _past_deadline(kind, url)
        return bytes(body)
    except (httpx.HTTPError, ssl.SSLError, OSError) as exc:
        raise _refused(kind, url, f"{type(exc).__name__}: {exc}", unavailable=True) from None
    finally:
        response.close()


def _jwks_uri_from(body: bytes, issuer: str, url: str) -> str:
    try:
        document = load_strict_json(body, max_bytes=MAX_METADATA_BYTES)
    except StrictJsonError as exc:
        why = f"{exc.code}: {exc.detail}" if exc.detail else exc.code
        raise _refused("metadata", url, f"not strict JSON ({why})") from None
    # The values found are named: a trailing slash or another host is the usual fault,
    # and invisible without them.
    if not isinstance(document, dict):
        raise _refused("metadata", url, "not a JSON object")
    found = document.get("issuer")
    if found != issuer:
        seen = "none" if found is None else shown(found)
        raise _refused("metadata", url, f"its issuer is {seen}, not exactly {shown(issuer)}")
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str) or not is_valid_jwks_uri(jwks_uri, issuer):
        seen = "missing" if jwks_uri is None else shown(jwks_uri)
        raise _refused(
            "metadata", url, f"jwks_uri is {seen}, not an https URL on the issuer's host"
        )
    return jwks_uri


def discover_jwks_uri(client: httpx.Client, issuer: str) -> str:
    """Find the issuer's JWKS URI: RFC 8414 metadata first, then OpenID Connect. When
    neither serves it, the error names the last URL and says what each one answered:
    the first may have failed for a reason the operator must fix (a timeout, a wrong
    `issuer`) while the second simply does not exist."""
    failures: list[DiscoveryError] = []
    for url in metadata_urls(issuer):
        try:
            body = fetch_bounded(client, url, max_bytes=MAX_METADATA_BYTES, kind="metadata")
            return _jwks_uri_from(body, issuer, url)
        except DiscoveryError as exc:
            failures.append(exc)
    *earlier, last = failures
    said = [f"{error.location.source}: {error.detail}" for error in earlier]
    detail = "; ".join([last.detail or last.message, *(f"before it, {line}" for line in said)])
    raise DiscoveryError(last.code, location=last.location, detail=detail)
