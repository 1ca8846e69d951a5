"""MCP over stdio: one JSON-RPC message per line on stdin, replies on stdout.

For clients that spawn their servers (desktop apps, IDEs). The process serves the same
runtime, dispatcher, policy, approvals and audit as the HTTP endpoint, as the principal
`local`: whoever can start the process already is the local user, so there is nothing
to authenticate.

Both protocol eras work here too, chosen per message: a request whose params carry the
stateless `_meta` envelope is answered statelessly; `initialize` opens the one
handshake-era session this process has (a second one is refused), and later
handshake-era requests belong to it. Requests run concurrently and are answered as
they finish; `notifications/cancelled` drops one that is still running (its reply is
never sent; a plugin's synchronous handler cannot be stopped, so it runs on to its end
in the background, still counted against its tool kind's threads). At end of input the
requests still running get `DRAIN_SECONDS` to finish, the rest are dropped the same way,
and `serve` returns. The client closing stdin counts as the end of input even before
the lines it sent are all read: a client that stopped reading its replies leaves the
read loop waiting to write one, and it must still end within the same bound.

Lines are bounded (`MAX_LINE_BYTES`); a longer one is refused with an error and
skipped, and reading goes on with the next line. So are the requests running at once
(`MAX_REQUESTS`). Only replies are written to the sink:
logs go to stderr, and the launcher makes sure nothing else reaches stdout.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import select
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, Final

import anyio
from anyio import from_thread, to_thread
from anyio.abc import TaskGroup
from anyio.lowlevel import EventLoopToken, current_token
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from mymcp._strictjson import StrictJsonError, StrictJsonReason, load_message_json
from mymcp.auth import LOCAL, Principal
from mymcp.governance import AuditLog
from mymcp.transport._dispatch import Caller, Dispatcher, StepUpRequired, declares_url_elicitation
from mymcp.transport._exchange import MAX_BODY_BYTES, encode_json
from mymcp.transport._jsonrpc import (
    REQUEST_ID_IN_USE,
    ErrorCode,
    Notification,
    Request,
    cancelled_request_id,
    classify,
    encode_reply,
    error_response,
    log_cancelled,
    log_notification,
    log_response,
    parse_error,
    request_id_of,
)
from mymcp.transport._stateless import StatelessEra, carries_stateless_envelope
from mymcp.transport._versions import URL_ELICITATION_VERSIONS

__all__ = ["DRAIN_SECONDS", "MAX_LINE_BYTES", "MAX_REQUESTS", "StdioServer"]

_log = logging.getLogger("mcp")

MAX_LINE_BYTES: Final = MAX_BODY_BYTES
"""The longest message line read, as the HTTP endpoint bounds a body."""
DRAIN_SECONDS: Final = 10.0
"""How long requests still running at end of input may take to finish. A client that
closed its end usually stops reading soon after; one hung tool must not keep the process
alive for good."""
MAX_REQUESTS: Final = 128
"""How many requests may be running or waiting for their reply to be written at once, as
many as the HTTP endpoint answers. One more is refused at once, written before the next
line is read: a client that sends faster than it reads replies then waits for its own
replies to be read, instead of the process holding every request and reply it was sent."""
_HANGUP_POLL_SECONDS: Final = 0.5
_TOO_LONG: Final = object()


@dataclass(frozen=True, slots=True)
class _Session:
    """The handshake-era session of this process, once `initialize` opened it."""

    id: str
    url_elicitation: bool


class _LineReader:
    """Reads lines on a daemon thread and hands them to the event loop.

    A blocking read of stdin cannot be cancelled; on a daemon thread it never keeps
    the process from ending (anyio's worker threads would).
    """

    def __init__(self, source: BinaryIO, limit: int) -> None:
        self._source = source
        self._limit = limit

    def start(self) -> MemoryObjectReceiveStream[object]:
        send, receive = anyio.create_memory_object_stream[object](1)
        token = current_token()
        threading.Thread(
            target=self._pump, args=(send, token), name="mymcp-stdin", daemon=True
        ).start()
        return receive

    def _pump(self, send: MemoryObjectSendStream[object], token: EventLoopToken) -> None:
        # Reading ends at end of input, when the input breaks or when the loop is gone
        # (the server stopped); either way the loop learns the input is over.
        with contextlib.suppress(Exception):
            self._read_into(send, token)
        with contextlib.suppress(Exception):
            from_thread.run_sync(send.close, token=token)

    def _read_into(self, send: MemoryObjectSendStream[object], token: EventLoopToken) -> None:
        # Up to the limit's worth of message, then its line end, CR LF as well as LF.
        while line := self._readline(self._limit + 2):
            item: object = line
            if len(line) > self._limit and len(line.rstrip(b"\r\n")) > self._limit:
                item = _TOO_LONG
                while line and not line.endswith(b"\n"):  # skip the rest of it
                    line = self._readline(self._limit)
            from_thread.run(send.send, item, token=token)

    def _readline(self, size: int) -> bytes:
        """The next line, or its first `size` bytes; empty only at end of input.

        A client may hand over a pipe it made non-blocking. Reading it answers what has
        arrived so far, a piece of a line or nothing, which is no end of input: wait for
        more, as a blocking read would."""
        line = self._source.readline(size)
        while not line.endswith(b"\n") and len(line) < size and self._waits_for_more():
            more = self._source.readline(size - len(line))
            if not more:  # readable, yet nothing to read: the input has ended
                break
            line += more
        return line

    def _waits_for_more(self) -> bool:
        """On a non-blocking input, wait until it is readable (data, or its end) and
        answer True; on a blocking one a short read was the end of input: False."""
        try:
            descriptor = self._source.fileno()
            if os.get_blocking(descriptor):
                return False
        except (OSError, ValueError):  # no descriptor (a test's stream), or closed
            return False
        select.select([descriptor], [], [])
        return True


class StdioServer:
    """Serves one stdio connection (this process's stdin and stdout)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        stateless: StatelessEra,
        *,
        audit: AuditLog | None = None,
        principal: Principal = LOCAL,
        max_line_bytes: int = MAX_LINE_BYTES,
        drain_seconds: float = DRAIN_SECONDS,
        max_requests: int = MAX_REQUESTS,
    ) -> None:
        self._dispatcher = dispatcher
        self._max_requests = max_requests
        self._drain_seconds = drain_seconds
        self._stateless = stateless
        self._audit = audit
        self._principal = principal
        self._max_line = max_line_bytes
        self._session: _Session | None = None
        self._running: dict[str | int, anyio.CancelScope] = {}
        # Requests running or whose reply waits to be written: what the bound counts.
        self._unanswered = 0
        self._write_lock = anyio.Lock()
        self._sink: BinaryIO | None = None

    async def serve(self, source: BinaryIO, sink: BinaryIO) -> None:
        """Answer every message until the input ends, then give running requests a
        bounded while to finish."""
        self._sink = sink
        lines = _LineReader(source, self._max_line).start()
        try:
            async with anyio.create_task_group() as group, lines:
                watching = anyio.CancelScope()  # the hang-up watch, over at end of input
                group.start_soon(self._end_on_hangup, source, group.cancel_scope, watching)
                async for item in lines:
                    if item is _TOO_LONG:
                        await self._refuse(None, ErrorCode.INVALID_REQUEST, "Message too long")
                    elif isinstance(item, bytes):
                        await self._receive(item, group)
                watching.cancel()
                self._drain(group.cancel_scope)
        finally:
            if self._session is not None:
                self._record_session("session_close", self._session.id, reason="shutdown")

    def _drain(self, serving: anyio.CancelScope) -> None:
        """Give what is still running (and being written) the drain time, from now."""
        deadline = anyio.current_time() + self._drain_seconds
        serving.deadline = min(serving.deadline, deadline)

    async def _end_on_hangup(
        self, source: BinaryIO, serving: anyio.CancelScope, watching: anyio.CancelScope
    ) -> None:
        """Start the drain once the client has closed its end of the input, even though
        lines it sent are still unread: the read loop may be waiting to write a reply
        nobody reads, and would never reach the end of input by itself. (A pipe says so
        as a hang-up, a socket whose peer shut down its writing, as Node's child
        processes get, as a read hang-up; a file never does, and never needs to.)"""
        hangup = select.POLLHUP | getattr(select, "POLLRDHUP", 0)
        with watching:
            try:
                poller = select.poll()
                poller.register(source.fileno(), hangup)
            except (AttributeError, OSError, ValueError):  # no poll here, or no descriptor
                return
            while not any(events & hangup for _, events in poller.poll(0)):
                await anyio.sleep(_HANGUP_POLL_SECONDS)
            self._drain(serving)

    async def _receive(self, line: bytes, group: TaskGroup) -> None:
        line = line.rstrip(b"\r\n")
        if not line.strip():
            return
        try:
            decoded = load_message_json(line)
        except StrictJsonError as exc:
            if exc.reason is StrictJsonReason.TOO_DEEP:
                await self._refuse(None, ErrorCode.INVALID_REQUEST, "Message nests too deeply")
            else:
                await self._write(encode_json(parse_error(exc, line, "line")))
            return
        message = classify(decoded)
        if message is None:
            if isinstance(decoded, list):
                await self._refuse(None, ErrorCode.INVALID_REQUEST, "Batching is not supported")
            else:
                await self._refuse(request_id_of(decoded), ErrorCode.INVALID_REQUEST)
        elif isinstance(message, Notification):
            log_notification(message)
            if message.method == "notifications/cancelled":
                self._cancel(message.params)
        elif isinstance(message, Request):
            if message.id in self._running:
                await self._refuse(message.id, ErrorCode.INVALID_REQUEST, REQUEST_ID_IN_USE)
                return
            if self._unanswered >= self._max_requests:
                busy = f"Too many requests running (at most {self._max_requests}); retry later"
                await self._refuse(message.id, ErrorCode.INTERNAL_ERROR, busy)
                return
            scope = anyio.CancelScope()
            self._running[message.id] = scope
            self._unanswered += 1
            group.start_soon(self._run, message, scope)
        # A client's reply to a server request: this server sends none, so it is dropped.

    def _cancel(self, params: object) -> None:
        request_id = cancelled_request_id(params)
        scope = self._running.get(request_id) if request_id is not None else None
        if scope is not None:
            scope.cancel()

    async def _run(self, request: Request, scope: anyio.CancelScope) -> None:
        started = self._dispatcher.log_request(request)
        reply: dict[str, Any] | None = None
        try:
            try:
                with scope:  # what the client's cancellation of this request ends
                    reply = await self._answer(request)
            except anyio.get_cancelled_exc_class():
                # Serving stops (a signal, or the drain after end of input ran out)
                # with this request unanswered: it is never answered, but logged.
                log_cancelled(request, "server_stopping", started)
                raise
            finally:
                # The id is free again once answered: the client may read the reply and
                # reuse the id before the write below has returned.
                del self._running[request.id]
            if reply is None:  # cancelled by the client: never answered
                log_cancelled(request, "client_cancelled", started)
                return
            log_response(request, reply, started)
            # Written outside the request's own scope: a cancellation arriving now would
            # otherwise have to abandon a half-written line.
            await self._write(encode_reply(request, reply)[0])
        finally:
            # Counted until its reply is written: a reply waiting for a client that
            # does not read is held in memory as much as a running request is.
            self._unanswered -= 1

    async def _answer(self, request: Request) -> dict[str, Any]:
        if carries_stateless_envelope(request.params):
            answer = await self._stateless.answer(request, self._principal, None)
            return self._stateless.reply_of(request, answer)
        if request.method == "initialize":
            return self._initialize(request)
        session = self._session
        if session is None:
            if request.method == "ping":
                return self._dispatcher.ping(request)
            return error_response(
                request.id,
                ErrorCode.INVALID_REQUEST,
                "Send initialize first, or carry the stateless _meta envelope",
            )
        caller = Caller(self._principal, session.id, session.url_elicitation)
        reply = await self._dispatcher.dispatch(request, caller)
        if isinstance(reply, StepUpRequired):  # no scopes exist on stdio; kept total anyway
            return error_response(request.id, ErrorCode.INVALID_REQUEST, StepUpRequired.MESSAGE)
        return reply

    def _initialize(self, request: Request) -> dict[str, Any]:
        if self._session is not None:
            return error_response(
                request.id, ErrorCode.INVALID_REQUEST, "This process's session is already open"
            )
        reply, version = self._dispatcher.initialize(request)
        if version is not None:
            params = request.params  # initialize answered: params is an object
            url = version in URL_ELICITATION_VERSIONS and declares_url_elicitation(
                params.get("capabilities")
            )
            session = _Session(secrets.token_urlsafe(32), url)
            self._session = session
            self._record_session("session_open", session.id)
        return reply

    def _record_session(self, event: str, session_id: str, **fields: str) -> None:
        if self._audit is not None:
            tag = self._audit.session_tag(session_id)
            self._audit.append(event, principal=self._principal.name, session=tag, **fields)

    async def _refuse(
        self, request_id: str | int | None, code: ErrorCode, message: str | None = None
    ) -> None:
        # Fixed text and a parsed id: always encodable.
        await self._write(encode_json(error_response(request_id, code, message)))

    async def _write(self, body: bytes) -> None:
        """Write one line; a reader that went away is not an error of this request.

        A client that stops reading its replies fills the pipe, and the write waits for
        it. Stopping (a signal, or the drain after end of input) must not wait with it:
        the write is abandoned on its thread, and as that thread may still put the rest
        of the line in the pipe, nothing else is written after it.
        """
        async with self._write_lock:
            sink = self._sink
            if sink is None:
                return
            try:
                await to_thread.run_sync(_write_line, sink, body, abandon_on_cancel=True)
            except (OSError, ValueError) as exc:
                # Said once: every later reply is dropped with it, and the lines logging
                # them would otherwise read as delivered.
                self._sink = None
                reason = errno.errorcode.get(getattr(exc, "errno", None) or 0, "closed")
                _log.warning("output outcome=unwritable reason=%s", reason)
            except anyio.get_cancelled_exc_class():
                self._sink = None
                raise


def _write_line(sink: BinaryIO, body: bytes) -> None:
    """Write one whole line. An unbuffered stream writes as much as the pipe takes at
    once (a short count on a large reply, or None on a pipe another process made
    non-blocking): the rest follows, so that no reply is cut short or run into the
    next one."""
    data = memoryview(body + b"\n")
    while data:
        # Typed as int, but a raw file on a non-blocking pipe answers None when full.
        written: int | None = sink.write(data)
        if written is None:  # the pipe is full and will not wait: wait for it here
            select.select([], [sink], [])
            continue
        data = data[written:]
    sink.flush()
