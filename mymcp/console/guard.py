"""The HTTP rules every console request passes before any page sees it.

- **Host and Origin** follow the rules of `/mcp`: the Host must be this server's own
  loopback authority and an Origin, when sent, one of its loopback origins, so a page
  on another site (or a DNS name rebound to 127.0.0.1) gets 403. An HTTP/1.1 request
  without a Host is malformed rather than foreign, and gets 400 as on `/mcp`; an
  HTTP/1.0 one, which may lack it, still gets 403: the console answers only requests
  that name it.
- **State-changing requests** (every method but GET and HEAD) must come from this very
  origin. Browsers send `Origin: null` for a form post from a page whose referrer policy
  is `no-referrer`, which the console's own pages are; such a post is accepted only with
  the browser's `Sec-Fetch-Site: same-origin`, a header page scripts cannot set.
- **Every response** carries a strict Content-Security-Policy (scripts and styles only
  from `/console/static/`, nothing inline, no framing), `X-Frame-Options: DENY`,
  `Referrer-Policy: no-referrer`, `X-Content-Type-Options: nosniff` and
  `Cache-Control: no-store`, whatever produced it.
- **The router's own refusals** (a console path asked with a method it does not take)
  are answered with their status (405 and `Allow`), not treated as failures: any page
  could send such requests, and they must not fill the log with errors.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Final

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mymcp.logs import class_name

__all__ = ["SECURITY_HEADERS", "ConsoleGuard", "is_same_origin_post", "trusted_authority"]

_log = logging.getLogger("mymcp.console")

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS: Final[tuple[tuple[bytes, bytes], ...]] = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
)
_REPLACED: Final = frozenset(name for name, _ in SECURITY_HEADERS)
_OWN_HEADERS: Final = _REPLACED | {b"content-type", b"content-length"}
_SAFE_METHODS: Final = frozenset({"GET", "HEAD"})
_REFUSAL: Final = (
    b"<!doctype html><html lang=en><meta charset=utf-8><title>Forbidden</title>"
    b"<h1>Forbidden</h1><p>The MyMCP console answers only to pages of its own origin on "
    b"this machine's loopback address.</p></html>"
)
_HOSTLESS: Final = (
    b"<!doctype html><html lang=en><meta charset=utf-8><title>Bad Request</title>"
    b"<h1>Bad Request</h1><p>An HTTP/1.1 request needs a Host header.</p></html>"
)
_FAILURE: Final = (
    b"<!doctype html><html lang=en><meta charset=utf-8><title>Console failure</title>"
    b"<h1>Something went wrong</h1><p>The console could not show this page; the server "
    b"log names the kind of failure.</p></html>"
)


def trusted_authority(
    hosts: Sequence[str],
    origins: Sequence[str],
    allowed_hosts: frozenset[str],
    allowed_origins: frozenset[str],
) -> bool:
    """The `/mcp` rule, stricter in one point: the console needs exactly one Host."""
    if len(hosts) != 1 or len(origins) > 1:
        return False
    if origins and origins[0] not in allowed_origins:
        return False
    return hosts[0].lower() in allowed_hosts


def is_same_origin_post(host: str, origins: Sequence[str], fetch_site: Sequence[str]) -> bool:
    """Whether a state-changing request comes from a page of this origin."""
    if len(origins) != 1:
        return False
    if origins[0] == f"http://{host.lower()}":
        return True
    return origins[0] == "null" and list(fetch_site) == ["same-origin"]


def _values(scope: Scope, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in scope["headers"] if key == name]


class ConsoleGuard:
    """ASGI middleware in front of every console route."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str], origins: frozenset[str]) -> None:
        self._app = app
        self._hosts = hosts
        self._origins = origins

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        hosts, origins = _values(scope, b"host"), _values(scope, b"origin")
        if not hosts and scope.get("http_version") != "1.0":
            await _answer(send, 400, _HOSTLESS)
            return
        if scope["method"] in _SAFE_METHODS:
            allowed = trusted_authority(hosts, origins, self._hosts, self._origins)
        else:  # the Host as above, and an Origin that is exactly this page's
            allowed = trusted_authority(
                hosts, [], self._hosts, self._origins
            ) and is_same_origin_post(hosts[0], origins, _values(scope, b"sec-fetch-site"))
        if not allowed:
            await _refuse(send)
            return

        started = False

        async def send_secured(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                headers = [(k, v) for k, v in message.get("headers", []) if k not in _REPLACED]
                message = {**message, "headers": [*headers, *SECURITY_HEADERS]}
            await send(message)

        try:
            await self._app(scope, receive, send_secured)
        except HTTPException as exc:
            if not started:
                await _answer(send, exc.status_code, _status_page(exc.status_code), exc.headers)
        except Exception as exc:
            # Answered here, so that even a failure carries the security headers; the
            # exception text may hold memory content, so only its type is logged (and
            # only a plain identifier: a class's name is whatever its author chose).
            _log.error("console failure error_type=%s", class_name(type(exc)))
            if not started:
                await _answer(send, 500, _FAILURE)


async def _refuse(send: Send) -> None:
    await _answer(send, 403, _REFUSAL)


def _status_page(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Error"
    return (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>{status} {phrase}</title>"
        f"<h1>{status} {phrase}</h1><p>This MyMCP console page does not answer this kind "
        "of request.</p></html>"
    ).encode()


async def _answer(
    send: Send, status: int, body: bytes, extra: Mapping[str, str] | None = None
) -> None:
    """A fixed page; of `extra` (such as a 405's `Allow`) the security headers are kept ours."""
    kept = [
        (name.lower().encode("latin-1"), value.encode("latin-1"))
        for name, value in (extra or {}).items()
    ]
    headers = [
        (b"content-type", b"text/html; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        *((name, value) for name, value in kept if name not in _OWN_HEADERS),
        *SECURITY_HEADERS,
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
