"""The Streamable-HTTP `/mcp` endpoint: era, authentication, hygiene, then dispatch.

Each request picks its protocol era by its `MCP-Protocol-Version` header: none or a
handshake revision is the handshake era (sessions opened by `initialize`); anything
else is the stateless era (`_stateless.py`), which keeps nothing between requests.
Both share authentication, hygiene, the governed dispatcher and the audit.

Every rejection happens as early as it can: origin and host first (in the application,
for every route), then the method, then authentication (before the body is read; every
method the endpoint has is authenticated, so the stateless era's 405 for GET and DELETE
comes after it), then headers and body bounds, then the JSON-RPC envelope, and only
then sessions and dispatch. A reply is encoded before anything is committed for it:
`initialize` creates its session only once the reply's bytes exist.
"""

from __future__ import annotations

import logging
from asyncio import Task, current_task
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Protocol

import anyio
from starlette.types import Receive, Send

from mymcp._strictjson import StrictJsonError, StrictJsonReason, load_message_json
from mymcp.auth import AuthFailure, Principal, offers_bearer_token
from mymcp.governance import Governance
from mymcp.runtime import HostRuntime
from mymcp.transport._dispatch import Caller, Dispatcher, StepUpRequired, declares_url_elicitation
from mymcp.transport._exchange import (
    MALFORMED,
    MAX_BODY_BYTES,
    ConnectionWatch,
    IncompleteBody,
    RequestHeaders,
    read_body,
    send_empty,
    send_encoded,
    send_json,
    single_ascii,
    until_disconnected,
)
from mymcp.transport._hygiene import (
    accepts_event_stream,
    accepts_mcp_post,
    is_json_content_type,
    loopback_origins,
)
from mymcp.transport._jsonrpc import (
    REQUEST_ID_IN_USE,
    ClientReply,
    ErrorCode,
    Message,
    Notification,
    Request,
    RequestId,
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
from mymcp.transport._sessions import Session, SessionStore, is_session_id_shape
from mymcp.transport._stateless import StatelessEra, carries_stateless_envelope, http_status
from mymcp.transport._versions import (
    ADVERTISED_VERSIONS,
    MODERN_PROTOCOL_VERSIONS,
    NEGOTIABLE_VERSIONS,
    URL_ELICITATION_VERSIONS,
    is_modern_request,
)

__all__ = [
    "MAX_BODY_BYTES",
    "McpEndpoint",
    "RequestAuthenticator",
    "TransportOptions",
    "answer_stopping",
]

# GET is answered (a session's checks, then 405: this server sends no messages of its
# own) but never served, so no 405 lists it as allowed.
_ALLOW = "POST, DELETE"
_ALLOW_STATELESS = "POST"
_MALFORMED_VERSION = "Malformed MCP-Protocol-Version header"
_COMPRESSED_BODY = "Content-Encoding is not supported: send the request body uncompressed"
_TRANSFER_CODED_BODY = (
    "Transfer-Encoding other than chunked is not supported: send the request body "
    "uncompressed, chunked or with a Content-Length"
)


def _codings_are(fields: tuple[str, ...], allowed: tuple[str, ...]) -> bool:
    """Whether the comma-separated codings of `fields` (Content-Encoding or
    Transfer-Encoding) are all among `allowed` (lowercase; "" for an empty member)."""
    named = (coding.strip().lower() for field in fields for coding in field.split(","))
    return all(coding in allowed for coding in named)


_log = logging.getLogger("mcp")


class RequestAuthenticator(Protocol):
    """What the endpoint needs from authentication (see `mymcp.auth`)."""

    async def authenticate(
        self, authorization_values: Sequence[str]
    ) -> Principal | AuthFailure: ...

    def challenge_headers(
        self, failure: AuthFailure, *, token_presented: bool
    ) -> dict[str, str]: ...

    def step_up_headers(self, scopes: frozenset[str]) -> dict[str, str]: ...


@dataclass(frozen=True, slots=True)
class TransportOptions:
    address: str = "127.0.0.1"
    port: int = 8000
    strict_protocol_version: bool = True
    origins: frozenset[str] = field(default=frozenset())
    hosts: frozenset[str] = field(default=frozenset())

    @classmethod
    def for_binding(cls, address: str, port: int, *, strict: bool = True) -> TransportOptions:
        origins, hosts = loopback_origins(address, port)
        return cls(address, port, strict, origins, hosts)

    @property
    def origin(self) -> str:
        """This server's own origin, `http://<address>:<port>` (where the console is)."""
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def trusts(self, headers: RequestHeaders) -> bool:
        """The one Host/Origin rule for every route (DNS-rebinding protection): at most
        one of each, an Origin only if it is this server's own, a Host only if it names
        this server's own loopback authority."""
        if len(headers.origin) > 1 or len(headers.host) > 1:
            return False
        if headers.origin and headers.origin[0] not in self.origins:
            return False
        return not headers.host or headers.host[0].lower() in self.hosts


class McpEndpoint:
    """The MCP endpoint behind the application: one immutable runtime at `/mcp`."""

    def __init__(
        self,
        runtime: HostRuntime,
        authenticator: RequestAuthenticator,
        sessions: SessionStore,
        options: TransportOptions,
        governance: Governance | None = None,
    ) -> None:
        self._runtime = runtime
        self._authenticator = authenticator
        self._sessions = sessions
        self._options = options
        self._dispatcher = Dispatcher(runtime, governance, console_origin=options.origin)
        self._stateless = StatelessEra(self._dispatcher)
        self._audit = governance.audit if governance is not None else None
        # The tasks answering handshake-era requests, by session and request id: what a
        # session's `notifications/cancelled` can withdraw (only its own requests), and
        # what its DELETE withdraws. A withdrawn task is also in `_withdrawn`, with why,
        # which tells its cancellation from a stopping server's.
        self._running: dict[tuple[str, RequestId], Task[Any]] = {}
        self._withdrawn: dict[Task[Any], str] = {}

    async def handle(
        self,
        method: str,
        headers: RequestHeaders,
        receive: Receive,
        send: Send,
        connection: ConnectionWatch | None = None,
    ) -> None:
        """Answer one request whose Host and Origin the application already trusted
        (`connection`, when the server gives one, ends stateless requests its client
        closed)."""
        if method not in ("POST", "GET", "DELETE"):
            await send_empty(send, 405, {"allow": _ALLOW})
            return
        # Every method the endpoint has is authenticated before anything else is said
        # about the request, in both eras.
        outcome = await self._authenticator.authenticate(headers.authorization)
        if not isinstance(outcome, Principal):
            if self._audit is not None:
                self._audit.append_rate_limited("auth_failure", outcome.value)
            challenge = self._authenticator.challenge_headers(
                outcome, token_presented=offers_bearer_token(headers.authorization)
            )
            await send_empty(send, 401, challenge)
            return
        stateless = is_modern_request(headers.version, has_session=bool(headers.session))
        if stateless and method != "POST":
            # The stateless era has no server stream to GET and no session to DELETE.
            await send_empty(send, 405, {"allow": _ALLOW_STATELESS})
            return
        if stateless:
            await self._stateless_post(headers, outcome, receive, send, connection)
        elif method == "POST":
            await self._post(headers, outcome, receive, send)
        else:
            await self._get_or_delete(method, headers, outcome, send)

    async def _session_for(
        self, headers: RequestHeaders, principal_id: str, send: Send
    ) -> Session | None:
        """The request's live session, or None after answering 400/404 for it."""
        session_id = single_ascii(headers.session)
        if session_id is None:
            await send_json(send, 400, _transport_error("Missing MCP-Session-Id header"))
            return None
        if session_id is MALFORMED or not is_session_id_shape(session_id):
            await send_json(send, 400, _transport_error("Malformed MCP-Session-Id header"))
            return None
        session = self._sessions.lookup(session_id, principal_id, self._runtime.generation)
        if session is None:
            await send_json(send, 404, _transport_error("Session not found"))
            return None
        version = single_ascii(headers.version)
        if version is MALFORMED:
            await send_json(send, 400, _transport_error(_MALFORMED_VERSION))
            return None
        if version is not None and version != session.protocol_version:
            # A version this server speaks, but not the one this session negotiated, is a
            # client mixing sessions up, not an unsupported revision: say which it is.
            problem = (
                "MCP-Protocol-Version does not match the version negotiated for this session"
                if version in NEGOTIABLE_VERSIONS
                else "Unsupported MCP-Protocol-Version"
            )
            await send_json(send, 400, _transport_error(problem))
            return None
        if version is None and self._options.strict_protocol_version:
            await send_json(send, 400, _transport_error("Missing MCP-Protocol-Version header"))
            return None
        return session

    async def _get_or_delete(
        self, method: str, headers: RequestHeaders, principal: Principal, send: Send
    ) -> None:
        principal_id = principal.principal_id
        if await self._session_for(headers, principal_id, send) is None:
            return
        session_id = headers.session[0]
        if method == "DELETE":
            # The store's `on_end` records the close.
            self._sessions.terminate(session_id, principal_id, self._runtime.generation)
            # Its client is done with the session: nobody waits for its running calls.
            for (running_session, _), task in list(self._running.items()):
                if running_session == session_id:
                    self._withdraw_task(task, "session_deleted")
            await send_empty(send, 204)
            return
        if not accepts_event_stream(headers.accept):
            await send_json(send, 406, _transport_error("Not Acceptable"))
            return
        # No server-initiated messages exist yet, so there is no stream to open.
        await send_empty(send, 405, {"allow": _ALLOW})

    async def _read_message(
        self, headers: RequestHeaders, receive: Receive, send: Send
    ) -> Message | None:
        """The POST body's one JSON-RPC message, or None after answering 4xx for it."""
        content_type = headers.content_type[0] if len(headers.content_type) == 1 else None
        if not is_json_content_type(content_type):
            await send_json(send, 415, _transport_error("Content-Type must be application/json"))
            return None
        if not accepts_mcp_post(headers.accept):
            await send_json(send, 406, _transport_error("Not Acceptable"))
            return None
        if headers.transfer_encoding and not _codings_are(
            headers.transfer_encoding, ("", "chunked")
        ):
            # The HTTP layer undoes only the chunked framing: a body still gzipped (say)
            # would read as text it is not. HTTP answers a transfer coding a server does
            # not implement with 501.
            await send_json(send, 501, _transport_error(_TRANSFER_CODED_BODY))
            return None
        if headers.content_encoding and not _codings_are(
            headers.content_encoding, ("", "identity")
        ):
            # A compressed body would otherwise read as text that is no UTF-8.
            refusal = _transport_error(_COMPRESSED_BODY)
            await send_json(send, 415, refusal, {"accept-encoding": "identity"})
            return None
        try:
            body = await read_body(headers, receive)
        except IncompleteBody:
            _log.info("request_abandoned reason=incomplete_body")
            return None  # nobody is left to answer
        if body is None:
            await send_json(send, 413, _transport_error("Request body too large"))
            return None
        try:
            decoded = load_message_json(body)
        except StrictJsonError as exc:
            await send_json(send, 400, _undecodable(exc, body))
            return None
        message = classify(decoded)
        if message is None:
            reply = error_response(request_id_of(decoded), ErrorCode.INVALID_REQUEST)
            if isinstance(decoded, list):
                reply = error_response(None, ErrorCode.INVALID_REQUEST, "Batching is not supported")
            await send_json(send, 400, reply)
        return message

    async def _post(
        self, headers: RequestHeaders, principal: Principal, receive: Receive, send: Send
    ) -> None:
        message = await self._read_message(headers, receive, send)
        if message is None:
            return
        if isinstance(message, Request) and message.method == "initialize":
            await self._initialize(message, headers, principal, send)
            return
        if (
            not headers.session
            and not headers.version
            and not isinstance(message, ClientReply)
            and carries_stateless_envelope(message.params)
        ):
            # A stateless-era request that lost its version header on the way (a proxy, a
            # hand-written client): without the header it reads as a handshake request
            # missing its session, and saying so would mislead.
            await send_json(send, 400, _transport_error(_VERSION_HEADER_MISSING))
            return
        session = await self._session_for(headers, principal.principal_id, send)
        if session is None:
            return
        if isinstance(message, Notification | ClientReply):
            if isinstance(message, Notification):
                log_notification(message)
                if message.method == "notifications/cancelled":
                    self._withdraw(session.id, message.params)
            await send_empty(send, 202)
            return
        key = (session.id, message.id)
        running = self._running
        if key in running:
            refusal = error_response(message.id, ErrorCode.INVALID_REQUEST, REQUEST_ID_IN_USE)
            await send_json(send, 400, refusal)
            return
        started = self._dispatcher.log_request(message)
        caller = Caller(principal, session.id, session.url_elicitation)
        task = current_task()
        assert task is not None  # uvicorn answers each request in a task of its own
        running[key] = task
        try:
            answer = await self._dispatcher.dispatch(message, caller)
        except anyio.get_cancelled_exc_class():
            reason = self._withdrawn.get(task)
            if reason is not None:
                # The cancellation did its work; taken back, so the reply below is sent.
                task.uncancel()
                # Its client no longer waits for it, but this wire ends a request's
                # exchange only with a reply, so it gets the one a withdrawn request has.
                log_cancelled(message, reason, started)
                reply = error_response(message.id, ErrorCode.REQUEST_CANCELLED)
                await send_json(send, 200, reply)
                return
            log_cancelled(message, "server_stopping", started)
            await answer_stopping(send, message.id)
            raise
        finally:
            del running[key]
            if self._withdrawn:
                self._withdrawn.pop(task, None)
        if isinstance(answer, StepUpRequired):
            await self._refuse_scope(message, answer.scopes, started, send)
            return
        log_response(message, answer, started)
        await send_encoded(send, 200, encode_reply(message, answer)[0])

    def _withdraw(self, session_id: str, params: object) -> None:
        """Cancel the session's request that a `notifications/cancelled` names, if it is
        still running (an unknown or finished one is ignored, as the protocol says)."""
        request_id = cancelled_request_id(params)
        task = self._running.get((session_id, request_id)) if request_id is not None else None
        if task is not None:
            self._withdraw_task(task, "client_cancelled")

    def _withdraw_task(self, task: Task[Any], reason: str) -> None:
        """Cancel a running request's task once (`reason`, a fixed word, is logged)."""
        if task not in self._withdrawn:
            self._withdrawn[task] = reason
            task.cancel()

    async def _refuse_scope(
        self, request: Request, scopes: frozenset[str], started: float, send: Send
    ) -> None:
        """403 with the challenge naming the scopes a retried call needs (both eras)."""
        refusal = error_response(request.id, ErrorCode.INVALID_REQUEST, StepUpRequired.MESSAGE)
        log_response(request, refusal, started)
        await send_json(send, 403, refusal, self._authenticator.step_up_headers(scopes))

    async def _stateless_post(
        self,
        headers: RequestHeaders,
        principal: Principal,
        receive: Receive,
        send: Send,
        connection: ConnectionWatch | None,
    ) -> None:
        """A stateless-era POST: one self-contained request, never a session."""
        version = headers.version
        stated = len(version) == 1 and version[0] in MODERN_PROTOCOL_VERSIONS
        message = await self._read_message(headers, receive, send)
        if message is None:
            return
        if not stated and single_ascii(version) is MALFORMED:
            # Repeated, or not a visible-ASCII token: which era it meant cannot be read
            # from it, so it is answered as the broken header it is, naming the request
            # it came with (an error names its request whenever the id can be read).
            request_id = message.id if isinstance(message, Request) else None
            reply = error_response(request_id, ErrorCode.HEADER_MISMATCH, _MALFORMED_VERSION)
            await send_json(send, 400, reply)
            return
        if isinstance(message, ClientReply):
            refusal = "Clients send no responses in this protocol revision"
            await send_json(send, 400, _transport_error(refusal))
            return
        if not isinstance(message, Request):
            # The revision defines no client notifications over HTTP: accepted, dropped.
            if stated:
                log_notification(message)
                await send_empty(send, 202)
            else:
                data = {"supported": list(ADVERTISED_VERSIONS), "requested": ", ".join(version)}
                reply = error_response(None, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, None, data)
                await send_json(send, 400, reply)
            return
        started = self._dispatcher.log_request(message)
        # Closing the connection is how this era's client cancels a request. Where the
        # server says so (its connection watch), that cancels a wait for a person's
        # approval too; elsewhere the wait looks for the close itself.
        client_gone = None if connection is not None else partial(until_disconnected, receive)
        task = current_task()
        assert task is not None  # uvicorn answers each request in a task of its own
        if connection is not None:
            if connection.closed:  # its client left before the request began
                log_cancelled(message, "connection_closed", started)
                return
            connection.add(task)
        try:
            answer = await self._stateless.answer(message, principal, headers, client_gone)
        except anyio.get_cancelled_exc_class():
            if connection is not None and connection.closed:
                task.uncancel()  # the cancellation did its work
                log_cancelled(message, "connection_closed", started)
                return  # nobody is left to answer
            log_cancelled(message, "server_stopping", started)
            await answer_stopping(send, message.id)
            raise
        finally:
            if connection is not None:
                connection.discard(task)
        if isinstance(answer, StepUpRequired):
            await self._refuse_scope(message, answer.scopes, started, send)
            return
        log_response(message, answer, started)
        body, encodable = encode_reply(message, answer)
        result = answer.get("result")
        if encodable and result is not None and "resultType" not in result:
            # A result left without the two fields every result carries: their bytes
            # follow its last member (it has one), inside the closing braces.
            body, status = body[:-2] + self._stateless.completion, 200
        else:
            status = http_status(answer) if encodable else 200
        await send_encoded(send, status, body)

    async def _initialize(
        self, request: Request, headers: RequestHeaders, principal: Principal, send: Send
    ) -> None:
        if headers.session:
            await send_json(send, 400, _transport_error("initialize must not carry a session"))
            return
        if single_ascii(headers.version) is MALFORMED:
            await send_json(send, 400, _transport_error(_MALFORMED_VERSION))
            return
        started = self._dispatcher.log_request(request)
        reply, version = self._dispatcher.initialize(request)
        log_response(request, reply, started)
        body, encodable = encode_reply(request, reply)
        if version is None or not encodable:
            await send_encoded(send, 200, body)
            return
        # The reply's bytes exist, so nothing after this point can fail on its content:
        # only now is the session created.
        session = self._sessions.create(
            principal.principal_id,
            self._runtime.generation,
            version,
            url_elicitation=version in URL_ELICITATION_VERSIONS
            and declares_url_elicitation(_capabilities(request.params)),
            principal=principal.name,
        )
        if self._audit is not None:
            tag = self._audit.session_tag(session.id)
            self._audit.append("session_open", principal=principal.name, session=tag)
        await send_encoded(send, 200, body, {"mcp-session-id": session.id})


_STOPPING = "The server is stopping"


async def answer_stopping(send: Send, request_id: str | int | None) -> None:
    """Tell the client that a stopping server gave up on its request (only a stop
    cancels one: its grace for running requests is over). Sent even so: the cancellation
    would otherwise stop this reply too."""
    reply = error_response(request_id, ErrorCode.INTERNAL_ERROR, _STOPPING)
    with anyio.CancelScope(shield=True):
        await send_json(send, 503, reply, {"connection": "close"})


def _capabilities(params: object) -> object:
    return params.get("capabilities") if isinstance(params, Mapping) else None


_VERSION_HEADER_MISSING: Final = (
    "Missing MCP-Protocol-Version header: the request carries the stateless _meta "
    f"envelope, which needs MCP-Protocol-Version: {MODERN_PROTOCOL_VERSIONS[-1]} beside it "
    "(without a session, only initialize opens the handshake era)"
)


def _transport_error(message: str) -> dict[str, Any]:
    return error_response(None, ErrorCode.INVALID_REQUEST, message)


def _undecodable(failure: StrictJsonError, body: bytes) -> dict[str, Any]:
    if failure.reason is StrictJsonReason.TOO_DEEP:
        return _transport_error("Request nests too deeply")
    return parse_error(failure, body)
