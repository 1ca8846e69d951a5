"""The root ASGI application: lifespan, one Host/Origin rule for every route, routing to
the MCP endpoint, the small JSON documents and mounted sub-applications (the console),
and the guard that turns any exception into one log line and a bare 500 (and a request a
stopping server gives up on into a 503).

It is plain ASGI rather than a framework router: the MCP endpoint is the hot path, and
each layer a framework adds (routing by pattern, two exception middlewares wrapping
every `send`) costs measurable throughput at loopback speeds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mymcp.logs import new_failure_id
from mymcp.transport._endpoint import McpEndpoint, TransportOptions, answer_stopping
from mymcp.transport._exchange import (
    CONNECTION_WATCH,
    encode_json,
    read_headers,
    send_empty,
    send_encoded,
)
from mymcp.transport._jsonrpc import ErrorCode, error_response

__all__ = ["MCP_PATH", "HostApplication", "JsonDocument"]

MCP_PATH = "/mcp"
_DOCUMENT_METHODS = ("GET", "HEAD")
_log = logging.getLogger("mcp")


class JsonDocument:
    """A fixed JSON body served at one path to GET (and HEAD)."""

    __slots__ = ("_body", "_headers")

    def __init__(self, content: Mapping[str, Any], headers: Mapping[str, str] | None = None):
        self._body = encode_json(content)
        self._headers = dict(headers or {})

    async def answer(self, method: str, send: Send) -> None:
        if method not in _DOCUMENT_METHODS:
            await send_empty(send, 405, {"allow": ", ".join(_DOCUMENT_METHODS)})
        elif method == "HEAD":
            # The very headers GET sends, Content-Length included (a HEAD reply may carry a
            # length only if it is the one GET would send), and no body.
            await send_encoded(_without_body(send), 200, self._body, self._headers)
        else:
            await send_encoded(send, 200, self._body, self._headers)


def _without_body(send: Send) -> Send:
    """`send`, with every body chunk emptied and the response headers left alone."""

    async def headers_only(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return headers_only


# Where OAuth clients look for an authorization server of the resource's origin (client
# registration, the token and authorization endpoints), besides `/.well-known/`.
_AUTHORIZATION_SERVER_PATHS: Final = frozenset({"/register", "/token", "/authorize"})
_METADATA_PREFIX: Final = "/.well-known/oauth-protected-resource/"


class HostApplication:
    """The ASGI app uvicorn serves: `/mcp` plus fixed JSON documents such as `/health`.

    Without an endpoint (the console a stdio process serves), `/mcp` does not exist.
    """

    def __init__(
        self,
        endpoint: McpEndpoint | None,
        options: TransportOptions,
        documents: Mapping[str, JsonDocument],
        *,
        mounts: Mapping[str, ASGIApp] | None = None,
        on_startup: Sequence[Callable[[], None]] = (),
        on_shutdown: Sequence[Callable[[], None]] = (),
    ) -> None:
        self._endpoint = endpoint
        self._options = options
        self._documents = dict(documents)
        # A mount answers its exact prefix and everything below it (`/console`, `/console/…`).
        self._mounts = tuple((prefix, app) for prefix, app in (mounts or {}).items())
        self._on_startup = tuple(on_startup)
        self._on_shutdown = tuple(on_shutdown)
        # Says which server it is, so that a client sent here under another name or
        # port (or a server started on a port its configuration does not name) learns why.
        refusal = f"Forbidden: the Host and Origin headers must name this server, {options.origin}"
        self._forbidden = encode_json(error_response(None, ErrorCode.INVALID_REQUEST, refusal))
        # A client pointed at a path near the endpoint (`/mcp/`, `/sse`) reports only the
        # status; the body says where the endpoint is, for the person reading its error.
        self._not_found = encode_json(
            error_response(
                None, ErrorCode.METHOD_NOT_FOUND, f"Not Found: the MCP endpoint is {MCP_PATH}"
            )
        )
        # Clients that meet a 401 look for an OAuth authorization server here and read any
        # error body as OAuth's (a string `error`): say in that shape that there is none,
        # and where to turn instead.
        metadata = next((path for path in documents if path.startswith(_METADATA_PREFIX)), None)
        instead = (
            f"its protected-resource metadata at {metadata} names the one to use"
            if metadata is not None
            else "use the bearer token its operator gave you, if it asks for one"
        )
        self._no_authorization_server = encode_json(
            {
                "error": "invalid_request",
                "error_description": "This MCP server runs no OAuth authorization server of "
                f"its own: {instead}",
            }
        )
        # The console that `mymcp stdio` serves for its approvals has no MCP endpoint.
        self._console_only = encode_json(
            error_response(
                None,
                ErrorCode.METHOD_NOT_FOUND,
                "Not Found: this process serves only the console; its MCP client speaks "
                "to it over stdio",
            )
        )
        self._hostless = encode_json(
            error_response(
                None, ErrorCode.INVALID_REQUEST, "An HTTP/1.1 request needs a Host header"
            )
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._guarded(scope, receive, send)
        elif kind == "lifespan":
            await self._lifespan(receive, send)
        else:  # websockets and anything newer: this server speaks plain HTTP only
            await send({"type": "websocket.close", "code": 1003})

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        try:
            await self._route(scope, receive, tracked)
        except anyio.get_cancelled_exc_class():
            # Only a stopping server cancels a request (its grace for running requests
            # is over): the client is told so in the protocol's words, and the request
            # ends here rather than as an error of the application.
            _log.info("request_cancelled reason=server_stopping")
            if not started:  # cancelled before the endpoint knew the request's id
                await answer_stopping(send, None)
        except Exception as exc:
            # One content-free line per failure: exception text and tracebacks can carry
            # request content and install paths. The id is in the reply too, so an
            # operator can match a client's report to this line.
            failure_id = new_failure_id()
            _log.error(
                "request_failed request_id=%s error_type=%s",
                failure_id,
                type(exc).__name__,
                exc_info=exc if _log.isEnabledFor(logging.DEBUG) else None,
            )
            if not started:
                message = f"Internal error (request {failure_id})"
                data = {"request_id": failure_id}
                body = error_response(None, ErrorCode.INTERNAL_ERROR, message, data)
                await send_encoded(send, 500, encode_json(body), {"connection": "close"})

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"]
        if path != MCP_PATH:
            for prefix, app in self._mounts:
                # A mounted application applies the same Host/Origin rule itself, so that
                # its refusals carry its own page and security headers.
                if path == prefix or path.startswith(prefix + "/"):
                    await app(scope, receive, send)
                    return
        headers = read_headers(scope)
        if not headers.host and scope.get("http_version") != "1.0":
            # HTTP/1.1 requires a Host on every request; one without it is broken, not
            # merely untrusted. (HTTP/1.0 had no Host, and loopback tools still speak it.)
            await send_encoded(send, 400, self._hostless)
            return
        if not self._options.trusts(headers):
            await send_encoded(send, 403, self._forbidden)
            return
        if path == MCP_PATH and self._endpoint is not None:
            watch = scope.get(CONNECTION_WATCH)
            await self._endpoint.handle(scope["method"], headers, receive, send, watch)
            return
        document = self._documents.get(path)
        if document is None:
            await send_encoded(send, 404, self._unserved(path))
        else:
            await document.answer(scope["method"], send)

    def _unserved(self, path: str) -> bytes:
        """The 404 body for a path this server does not serve, for whoever asks there."""
        if path == MCP_PATH:
            return self._console_only
        if path.startswith("/.well-known/") or path in _AUTHORIZATION_SERVER_PATHS:
            return self._no_authorization_server
        return self._not_found

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for start in self._on_startup:
                    start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for stop in self._on_shutdown:
                    stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
