"""JSON-RPC 2.0 envelope: message classification, error codes and response builders."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ClientReply",
    "ErrorCode",
    "Notification",
    "Request",
    "classify",
    "error_response",
    "result_response",
]

RequestId = str | int


class ErrorCode(enum.IntEnum):
    """The JSON-RPC codes MyMCP emits.

    -32042 belongs to the handshake era only; -32020 and -32022 to the stateless era
    only: a dual-era client reads them as "this server speaks the stateless revision",
    so the handshake wire never uses them.
    """

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    URL_ELICITATION_REQUIRED = -32042
    HEADER_MISMATCH = -32020
    UNSUPPORTED_PROTOCOL_VERSION = -32022


_MESSAGES = {
    ErrorCode.PARSE_ERROR: "Parse error",
    ErrorCode.INVALID_REQUEST: "Invalid Request",
    ErrorCode.METHOD_NOT_FOUND: "Method not found",
    ErrorCode.INVALID_PARAMS: "Invalid params",
    ErrorCode.INTERNAL_ERROR: "Internal error",
    ErrorCode.URL_ELICITATION_REQUIRED: "URL elicitation required",
    ErrorCode.HEADER_MISMATCH: "Header mismatch",
    ErrorCode.UNSUPPORTED_PROTOCOL_VERSION: "Unsupported protocol version",
}


@dataclass(frozen=True, slots=True)
class Request:
    id: RequestId
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class Notification:
    method: str
    params: Any


@dataclass(frozen=True, slots=True)
class ClientReply:
    """A response the client sends back to a server-initiated request."""

    id: RequestId


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
    if "id" in body and _is_id(body["id"]) and (("result" in body) != ("error" in body)):
        return ClientReply(body["id"])
    return None


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
