"""Raw ASGI request and response primitives for the MCP endpoint (no MCP semantics)."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from starlette.types import Receive, Scope, Send

from mymcp._escaping import is_visible_ascii
from mymcp._strictjson import compact_json_encoder, holds_lone_surrogate

__all__ = [
    "CONNECTION_WATCH",
    "MALFORMED",
    "MAX_BODY_BYTES",
    "ConnectionWatch",
    "IncompleteBody",
    "RequestHeaders",
    "encode_json",
    "read_body",
    "read_headers",
    "send_empty",
    "send_encoded",
    "send_json",
    "single_ascii",
    "until_disconnected",
]

MAX_BODY_BYTES = 1 << 20


class RequestHeaders:
    """The request headers this endpoint reads, collected in one pass over the raw list:
    each one every value sent, in order (none is the empty tuple).

    A plain object whose absent headers are the class's empty tuples: most requests
    carry few of them, and building a container per header per request would cost more
    than reading the headers does.
    """

    origin: tuple[str, ...] = ()
    host: tuple[str, ...] = ()
    authorization: tuple[str, ...] = ()
    accept: tuple[str, ...] = ()
    content_type: tuple[str, ...] = ()
    content_length: tuple[str, ...] = ()
    content_encoding: tuple[str, ...] = ()
    transfer_encoding: tuple[str, ...] = ()
    session: tuple[str, ...] = ()
    version: tuple[str, ...] = ()
    # The stateless era mirrors body fields into these; the server cross-checks them.
    method: tuple[str, ...] = ()
    name: tuple[str, ...] = ()
    params: tuple[tuple[str, str], ...] = ()
    """`Mcp-Param-<token>` headers as (lowercase token, value)."""


_PARAM_PREFIX = b"mcp-param-"
_HEADER_SLOTS = {
    b"origin": "origin",
    b"host": "host",
    b"authorization": "authorization",
    b"accept": "accept",
    b"content-type": "content_type",
    b"content-length": "content_length",
    b"content-encoding": "content_encoding",
    b"transfer-encoding": "transfer_encoding",
    b"mcp-session-id": "session",
    b"mcp-protocol-version": "version",
    b"mcp-method": "method",
    b"mcp-name": "name",
}


def read_headers(scope: Scope) -> RequestHeaders:
    """The headers this endpoint reads. Leading and trailing spaces and tabs are not part
    of a field value (RFC 9110), so they are dropped here, once, for every reader."""
    headers = RequestHeaders()
    found = headers.__dict__  # this object's own values, without attribute lookups
    for name, value in scope["headers"]:
        slot = _HEADER_SLOTS.get(name)
        if slot is not None:
            text = value.decode("latin-1").strip(" \t")
            found[slot] = (*found[slot], text) if slot in found else (text,)
        elif name.startswith(_PARAM_PREFIX):
            token = name[len(_PARAM_PREFIX) :].decode("latin-1")
            headers.params = (*headers.params, (token, value.decode("latin-1").strip(" \t")))
    return headers


class _Malformed(enum.Enum):
    """A header that is duplicated, empty or not visible ASCII."""

    HEADER = "malformed"


MALFORMED = _Malformed.HEADER


def single_ascii(values: Sequence[str]) -> str | _Malformed | None:
    """None when absent, the value when exactly one visible-ASCII value, else MALFORMED."""
    if not values:
        return None
    if len(values) > 1 or not is_visible_ascii(values[0]):
        return MALFORMED
    return values[0]


class IncompleteBody(Exception):
    """The client went away before its request's body was complete: no request at all,
    so nothing of it may run (a prefix of a call is not the call)."""


async def read_body(headers: RequestHeaders, receive: Receive) -> bytes | None:
    """The whole body, or None as soon as it is known to exceed the bound; raises
    `IncompleteBody` when the client disconnects before the end of it."""
    for declared in headers.content_length:
        # ASCII digits only (`str.isdigit` also admits "²", which `int` refuses), and few
        # enough for `int` to read at all.
        digits = declared.strip()
        readable = digits.isascii() and digits.isdigit() and len(digits) <= 20
        if not readable or int(digits) > MAX_BODY_BYTES:
            return None
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise IncompleteBody
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def until_disconnected(receive: Receive) -> None:
    """Return once the client has gone. Called after the whole body was read: the server
    then only ever sends `http.disconnect`, when the connection closes (or once the
    response is complete)."""
    while (await receive())["type"] != "http.disconnect":
        pass


# The scope key under which the HTTP connection layer gives each request its
# connection's watch. Another ASGI server gives none: requests then run to the end.
CONNECTION_WATCH: Final = "mymcp.connection"


class ConnectionWatch:
    """The tasks answering requests of one HTTP connection, cancelled when it closes:
    in the stateless era, closing a request's response stream is how a client cancels
    it. A request's task is registered only while it is being dispatched.

    A closed watch is also how such a request tells its client's withdrawal from a
    stopping server's cancellation. Registering a task in a set and cancelling it only
    if need be costs a request far less than a cancel scope around each would.
    """

    __slots__ = ("_tasks", "add", "closed", "discard")

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self.closed = False
        # Watching a request's task and no longer watching it are the set's own methods:
        # no call of ours on every request. Look at `closed` first: a request whose
        # client left before it began need not begin.
        self.add: Callable[[asyncio.Task[Any]], None] = self._tasks.add
        self.discard: Callable[[asyncio.Task[Any]], None] = self._tasks.discard

    def close(self) -> None:
        self.closed = True
        # A task watched after the close is cancelled at once, as if watched before it.
        self.add = _cancel
        tasks = tuple(self._tasks)
        self._tasks.clear()
        for task in tasks:
            task.cancel()


def _cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()


_encode_reply = compact_json_encoder(sort_keys=False)


def encode_json(payload: Mapping[str, Any]) -> bytes:
    """The one encoding of every JSON reply: pure ASCII, with `\\u` escapes.

    Raises TypeError, ValueError or RecursionError only for values no request can
    produce: a plugin result holding NaN, a non-JSON object, or a string that is no
    Unicode text (a lone surrogate, which a plugin can make from a file name). The
    escape of a lone surrogate is valid JSON syntax, but clients refuse the whole reply
    for it, so it is refused here, where the reply can still become a clear error.
    """
    text = _encode_reply(payload)
    # The encoder writes every surrogate as a lowercase escape: most replies hold none,
    # and are passed by one substring search.
    if "\\ud" in text and holds_lone_surrogate(text, payload):
        raise ValueError("a string holds a lone surrogate")
    return text.encode("ascii")


async def send_json(
    send: Send, status: int, payload: Mapping[str, Any], extra: Mapping[str, str] | None = None
) -> None:
    """Send a reply built from fixed text and parsed request values (always encodable)."""
    await send_encoded(send, status, encode_json(payload), extra)


async def send_encoded(
    send: Send, status: int, body: bytes, extra: Mapping[str, str] | None = None
) -> None:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def send_empty(send: Send, status: int, extra: Mapping[str, str] | None = None) -> None:
    headers = [(b"content-length", b"0")] if status != 204 else []
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b""})
