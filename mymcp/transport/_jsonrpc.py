"""JSON-RPC 2.0 envelope: message classification, error codes, response builders, and
the one way a reply is encoded and each request logged, whatever the transport."""

from __future__ import annotations

import enum
import logging
import re
import time
from collections.abc import Mapping
from typing import Any, NamedTuple

from mymcp._strictjson import StrictJsonError, StrictJsonReason
from mymcp.logs import direct_handler, new_failure_id
from mymcp.transport._exchange import encode_json

__all__ = [
    "ClientReply",
    "ErrorCode",
    "Notification",
    "REQUEST_ID_IN_USE",
    "Request",
    "RequestId",
    "cancelled_request_id",
    "classify",
    "encode_reply",
    "error_response",
    "log_cancelled",
    "log_notification",
    "log_request",
    "log_response",
    "result_response",
]

_log = logging.getLogger("mcp")
_LOGGER_NAME = _log.name
# Only protocol-shaped method names and ids are logged; anything else is client text.
_LOGGABLE_METHOD = re.compile(r"[A-Za-z0-9/_.-]*")
_LOGGABLE_ID = re.compile(r"[A-Za-z0-9_.-]*")
# What clients ask for on almost every line: known loggable, so no pattern is run.
_SERVED_METHODS = frozenset({"initialize", "ping", "tools/list", "tools/call", "server/discover"})
# The refusal of a request whose id another request of the same conversation still
# holds: a cancellation naming that id, and a client matching replies to requests,
# could not tell the two apart.
REQUEST_ID_IN_USE = "Request id in use: a request with this id is still being answered"

RequestId = str | int


class ErrorCode(enum.IntEnum):
    """The JSON-RPC codes MyMCP emits.

    -32042 and -32800 belong to the handshake era only; -32020 and -32022 to the
    stateless era only: a dual-era client reads them as "this server speaks the
    stateless revision", so the handshake wire never uses them.
    """

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    URL_ELICITATION_REQUIRED = -32042
    HEADER_MISMATCH = -32020
    UNSUPPORTED_PROTOCOL_VERSION = -32022
    # LSP's code, which the SDK's reference server also uses: the handshake era's HTTP
    # wire must end a request's exchange with a reply, even once its client withdrew it.
    REQUEST_CANCELLED = -32800


_MESSAGES = {
    ErrorCode.PARSE_ERROR: "Parse error",
    ErrorCode.INVALID_REQUEST: "Invalid Request",
    ErrorCode.METHOD_NOT_FOUND: "Method not found",
    ErrorCode.INVALID_PARAMS: "Invalid params",
    ErrorCode.INTERNAL_ERROR: "Internal error",
    ErrorCode.URL_ELICITATION_REQUIRED: "URL elicitation required",
    ErrorCode.HEADER_MISMATCH: "Header mismatch",
    ErrorCode.UNSUPPORTED_PROTOCOL_VERSION: "Unsupported protocol version",
    ErrorCode.REQUEST_CANCELLED: "Request cancelled",
}


# The messages are named tuples rather than frozen dataclasses: one is built for every
# request, and a frozen dataclass costs several times as much to build.


class Request(NamedTuple):
    id: RequestId
    method: str
    params: Any


class Notification(NamedTuple):
    method: str
    params: Any


class ClientReply(NamedTuple):
    """A response the client sends back to a server-initiated request (an error response
    may carry a null id, when the request it answers could not be read)."""

    id: RequestId | None


Message = Request | Notification | ClientReply


def _is_id(value: object) -> bool:
    # JSON-RPC ids are strings or integers here; bool is an int subclass but not an id.
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def classify(body: object) -> Message | None:
    """The message a decoded body holds, or None when it is no valid JSON-RPC message.

    `params` is passed through untouched: whether it must be an object is a per-method
    rule (-32602), not an envelope rule (-32600).
    """
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return None
    method = body.get("method")
    if method is not None:
        if not isinstance(method, str) or "result" in body or "error" in body:
            return None
        if "id" not in body:
            return Notification(method, body.get("params"))
        if not _is_id(body["id"]):
            return None
        return Request(body["id"], method, body.get("params"))
    if "id" not in body or ("result" in body) == ("error" in body):
        return None
    if _is_id(body["id"]) or (body["id"] is None and "error" in body):
        return ClientReply(body["id"])
    return None


def cancelled_request_id(params: object) -> RequestId | None:
    """The request a `notifications/cancelled` withdraws, when its params name one."""
    candidate = params.get("requestId") if isinstance(params, Mapping) else None
    return candidate if _is_id(candidate) else None


def request_id_of(body: object) -> RequestId | None:
    """The id to echo in an error for an invalid request, when one can be read."""
    if isinstance(body, dict):
        candidate = body.get("id")
        if isinstance(candidate, str | int) and _is_id(candidate):
            return candidate
    return None


def result_response(request_id: RequestId, result: Mapping[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(
    request_id: RequestId | None,
    code: ErrorCode,
    message: str | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    error: dict[str, Any] = {"code": int(code), "message": message or _MESSAGES[code]}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def parse_error(failure: StrictJsonError, data: bytes, what: str = "body") -> dict[str, Any]:
    """The -32700 answer to a message (`what`: an HTTP body, a stdio line) that could not
    be decoded, saying what the client must fix where that can be told (never quoting
    the message)."""
    problem = failure.diagnostic.detail
    if failure.reason is StrictJsonReason.INVALID_UTF8:
        # The decoder refuses two things alike: bytes that are no UTF-8, and valid text
        # whose string escapes an unpaired surrogate. The client fixes different things.
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            problem = f"the {what} is not valid UTF-8 text"
        else:
            problem = "a string escapes an unpaired surrogate (\\ud800-\\udfff), which is no text"
    elif failure.reason is StrictJsonReason.NON_FINITE:
        problem = "a number is not finite (NaN, Infinity, or beyond the range of a double)"
    message = "Parse error" if problem is None else f"Parse error: {problem}"
    return error_response(None, ErrorCode.PARSE_ERROR, message)


def encode_reply(request: Request, reply: Mapping[str, Any]) -> tuple[bytes, bool]:
    """The reply's bytes and whether they are that reply: one that cannot be JSON (a
    plugin result holding NaN or a non-JSON object) becomes an internal error instead,
    carrying the id of its log line so that an operator can find it."""
    try:
        return encode_json(reply), True
    except (TypeError, ValueError, RecursionError) as exc:
        failure_id = new_failure_id()
        _log.error(
            "reply_unencodable request_id=%s id=%s method=%s error_type=%s",
            failure_id,
            _loggable_id(request.id),
            _loggable_method(request.method),
            type(exc).__name__,
        )
        failure = {"request_id": failure_id}
        return encode_json(
            error_response(request.id, ErrorCode.INTERNAL_ERROR, None, failure)
        ), False


def _loggable_method(method: str) -> str:
    if method in _SERVED_METHODS or (len(method) <= 64 and _LOGGABLE_METHOD.fullmatch(method)):
        return method
    return "<other>"


def _loggable_id(request_id: object) -> str:
    text = str(request_id)
    # An integer id is digits: loggable as it is, without the pattern (the common case).
    if len(text) <= 64 and (type(request_id) is int or _LOGGABLE_ID.fullmatch(text)):
        return text
    return "<opaque>"


# Formatters read a record's own attributes, so the fields a request line leaves out are
# set on each one, to neutral values.
_NEUTRAL_FIELDS: dict[str, object] = dict.fromkeys(
    ("exc_info", "exc_text", "stack_info", "funcName", "thread", "threadName", "process")
)
_NEUTRAL_FIELDS.update(pathname="", filename="", module="", lineno=0, processName=None)


class _RequestLine(logging.LogRecord):
    """The record of a request or response line, where one is needed (see `_write`):
    built without what a standard record looks up and no log line shows (the calling
    source file and line, thread and process names). Handlers see an ordinary record."""

    def __init__(self, level: int, message: str, args: tuple[object, ...]) -> None:
        created = time.time()
        self.__dict__.update(_NEUTRAL_FIELDS)
        self.name = _LOGGER_NAME
        self.msg = message
        self.args = args
        self.levelno = level
        self.levelname = logging.getLevelName(level)
        self.created = created
        self.msecs = int((created - int(created)) * 1000) + 0.0
        self.relativeCreated = (created - logging._startTime) * 1000  # type: ignore[attr-defined]


def _write(level: int, message: str, *args: object) -> None:
    if _log.isEnabledFor(level):
        handler = direct_handler(_log, level)
        if handler is not None:
            handler.write_line(_LOGGER_NAME, level, message % args)
        else:
            _log.handle(_RequestLine(level, message, args))


def log_notification(notification: Notification) -> None:
    _write(logging.DEBUG, "notification method=%s", _loggable_method(notification.method))


def log_request(request: Request, tool: str | None = None) -> float:
    """Log the request line (with the public tool name of a `tools/call`, when the caller
    knows it is a tool it serves); returns when it started, for its response line."""
    request_id, method = _loggable_id(request.id), _loggable_method(request.method)
    if tool is None:
        _write(logging.INFO, "request id=%s method=%s", request_id, method)
    else:
        _write(logging.INFO, "request id=%s method=%s tool=%s", request_id, method, tool)
    return time.perf_counter()


def log_response(request: Request, reply: Mapping[str, Any], started: float) -> None:
    duration = (time.perf_counter() - started) * 1000
    error = reply.get("error")
    request_id, method = _loggable_id(request.id), _loggable_method(request.method)
    if isinstance(error, dict):
        _write(
            logging.WARNING,
            "response id=%s method=%s outcome=error code=%s duration_ms=%.2f",
            request_id,
            method,
            error.get("code"),
            duration,
        )
    else:
        _write(
            logging.INFO,
            "response id=%s method=%s outcome=ok duration_ms=%.2f",
            request_id,
            method,
            duration,
        )


def log_cancelled(request: Request, reason: str, started: float) -> None:
    """The response line of a request its client withdrew, or that a stopping server
    gave up on (`reason` is a fixed word)."""
    _write(
        logging.INFO,
        "response id=%s method=%s outcome=cancelled reason=%s duration_ms=%.2f",
        _loggable_id(request.id),
        _loggable_method(request.method),
        reason,
        (time.perf_counter() - started) * 1000,
    )
