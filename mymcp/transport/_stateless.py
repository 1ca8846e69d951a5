"""The stateless MCP era (revision 2026-07-28): every request stands alone.

There is no `initialize` and no session. Each request carries, in `params._meta`, its
protocol version, the client's capabilities for this request and (optionally) the
client's identity. Over HTTP the version, the method and the tool name are mirrored in
headers so that intermediaries can route without parsing bodies; the server checks
that headers and body agree, because a proxy acting on one and this server on the
other would be acting on two different requests. Every result says what kind it is
(`resultType`) and names the server; lists say how long they may be cached and by whom.

Calls are governed exactly as in the handshake era: the same dispatcher decides policy,
step-up, argument validation, approval and audit. Only the wording differs. Where the
handshake era answers a call that waits for approval with error -32042, this era
answers an `InputRequiredResult` carrying the same URL-mode elicitation (to clients
that declare URL elicitation in the request's capabilities); the client's retry after
the person approved — or simply the identical call — runs it once. An approval made in
this era is bound to the principal, the tool and the canonical arguments, with no
session. A retry waits for the decision only while its client is still there: once the
connection is gone nobody would receive the result, so the call is not run and the
approval is left for the next identical call.

Nothing here knows about HTTP: the HTTP endpoint passes the mirrored headers and a way
to notice that the client went away, and sends each reply with the status
`http_status` maps its error code to; the stdio transport passes neither.
"""

from __future__ import annotations

import base64
import binascii
import enum
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import anyio

from mymcp.auth import Principal
from mymcp.plugin import structured_result
from mymcp.runtime import BoundTool
from mymcp.transport._arguments import decode_stringified_arguments
from mymcp.transport._dispatch import (
    AwaitingApproval,
    Caller,
    CallOutcome,
    CallRefused,
    Dispatcher,
    StepUpRequired,
    declares_url_elicitation,
)
from mymcp.transport._exchange import encode_json
from mymcp.transport._jsonrpc import (
    ErrorCode,
    Request,
    error_response,
    result_response,
)
from mymcp.transport._versions import (
    ADVERTISED_VERSIONS,
    HANDSHAKE_ERA_VERSIONS,
    MODERN_PROTOCOL_VERSIONS,
)

__all__ = [
    "APPROVAL_INPUT_KEY",
    "LIST_TTL_MS",
    "ClientGone",
    "MirroredHeaders",
    "StatelessAnswer",
    "StatelessEra",
    "carries_stateless_envelope",
    "decode_mirrored_value",
    "http_status",
]

PROTOCOL_VERSION_KEY: Final = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY: Final = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY: Final = "io.modelcontextprotocol/serverInfo"
APPROVAL_INPUT_KEY: Final = "approval"
"""The key of the approval elicitation in `inputRequests` (and of its response)."""
LIST_TTL_MS: Final = 300_000
"""How long clients may reuse `server/discover` and `tools/list`. The tool surface is
frozen for the life of the process; only a restart (with a changed configuration)
changes it, and five minutes bounds how long a client keeps a stale list after one."""
APPROVAL_WAIT_SECONDS: Final = 45.0
"""How long a retry that says the person went to the approval page waits for their
decision before asking again. Below the 60 s request timeout of common clients."""
_APPROVAL_POLL_SECONDS: Final = 0.2
MAX_WAITS_PER_PRINCIPAL: Final = 8
MAX_WAITS: Final = 32
"""How many retries may wait for a person's decision at once, per principal and in all.
A waiting retry holds one of the server's places for requests being answered; without
a bound, one client retrying a call many times over would hold them all, and every
other caller would be told the server is busy. A retry beyond the bound is answered at
once with the tool result that asks the agent to repeat the call once the person has
decided: asking the same question again would make the client ask its user again at
once, round after round, until it gives up on the call."""
_log = logging.getLogger("mcp")

ClientGone = Callable[[], Awaitable[None]]
"""Returns once the client that sent the request has gone (its connection closed)."""


class _Wait(enum.Enum):
    """How a retry's wait for a person's decision ended."""

    DECIDED = "decided"
    TIMED_OUT = "timed_out"
    ABANDONED = "abandoned"  # the client went away first


# The methods this era serves: their names are plain header values, so a header equal
# to one mirrors it. (A header equal to any other method may not: raw Latin-1, or text
# that only looks base64-wrapped, stands for something else.)
_SERVED_METHODS: Final = frozenset({"tools/call", "tools/list", "server/discover"})
# Methods whose `Mcp-Name` header mirrors a body parameter, and which parameter.
_NAME_BEARING: Final = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_BAD_REQUEST: Final = frozenset(
    {
        ErrorCode.PARSE_ERROR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_PARAMS,
        ErrorCode.HEADER_MISMATCH,
        ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
    }
)
_ABSENT: Final = object()
_DECLINED: Final = frozenset({"decline", "cancel"})
_ENVELOPE_MISSING: Final = (
    f"params._meta must be an object carrying {PROTOCOL_VERSION_KEY} and {CLIENT_CAPABILITIES_KEY}"
)
_APPROVAL_DECLINED: Final = {
    "status": "approval_declined",
    "code": "approval_declined",
    "message": (
        "The user declined to open the approval page, so the call was not run. Do not "
        "repeat it unless the user asks; the approval stays open in the MyMCP console "
        "until it expires."
    ),
}


def http_status(reply: Mapping[str, Any]) -> int:
    """The HTTP status of a stateless-era reply: the revision maps envelope, header and
    version errors to 400 and an unknown method to 404; everything else is 200."""
    error = reply.get("error")
    if not isinstance(error, dict):
        return 200
    code = error.get("code")
    if code == ErrorCode.METHOD_NOT_FOUND:
        return 404
    return 400 if code in _BAD_REQUEST else 200


def carries_stateless_envelope(params: object) -> bool:
    """Whether a message's params carry the stateless era's `_meta` (its protocol
    version): how a transport without headers (stdio) tells the eras apart."""
    meta = params.get("_meta") if isinstance(params, dict) else None  # decoded JSON
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


_SENTINEL: Final = re.compile(r"=\?base64\?(.*)\?=", re.DOTALL)
_PRINTABLE: Final = re.compile(r"[ -~]*")


def decode_mirrored_value(value: str) -> str | None:
    """The text a mirrored header value stands for, or None when it is malformed.

    Plain values must be printable ASCII (space included). A value that cannot be sent
    that way travels as `=?base64?<base64 of its UTF-8>?=`; only canonical base64 of
    valid UTF-8 decodes, so no two header values ever stand for the same text.
    """
    if not _PRINTABLE.fullmatch(value):
        return None
    wrapped = _SENTINEL.fullmatch(value)
    if wrapped is None:
        return value
    payload = wrapped.group(1)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        return None
    if base64.b64encode(raw).decode("ascii") != payload:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


class MirroredHeaders(Protocol):
    """The request headers that mirror body fields, each as every value sent (the HTTP
    endpoint's parsed headers are passed as they are: this is on every request's path)."""

    @property
    def version(self) -> Sequence[str]: ...

    @property
    def method(self) -> Sequence[str]: ...

    @property
    def name(self) -> Sequence[str]: ...

    @property
    def params(self) -> Sequence[tuple[str, str]]:
        """`Mcp-Param-<token>` headers as (lowercase token, value)."""
        ...


StatelessAnswer = dict[str, Any] | StepUpRequired
"""One JSON-RPC reply, or a call the token's scopes do not cover (HTTP answers 403).

A reply's result may still lack the two fields every final result carries
(`resultType` and the server's `_meta`). They are the same in every reply, so they are
encoded once: the HTTP endpoint replaces the two closing braces of such a reply's
encoding with `StatelessEra.completion` (the result is never empty, so the fields follow
its last member), and `StatelessEra.reply_of` gives the whole reply as a value. A result
that has `resultType` is complete.
"""


def _is_plainly(sent: Sequence[str], value: object) -> bool:
    """Whether a header that is never wrapped was sent once, as this value in printable
    ASCII (raw Latin-1 is no valid header text, however equal)."""
    return len(sent) == 1 and sent[0] == value and sent[0].isascii() and sent[0].isprintable()


def _mirrors_text(sent: str, value: object) -> bool:
    """Whether a header value stands for `value`: sent as it is (printable ASCII that
    does not look base64-wrapped), or wrapped."""
    if sent == value and sent.isascii() and sent.isprintable() and not sent.startswith("=?"):
        return True  # the common case, without decoding anything
    return decode_mirrored_value(sent) == value


@dataclass(frozen=True, slots=True)
class _ParamHeader:
    """A tool argument its schema asks clients to mirror as `Mcp-Param-<token>`."""

    path: tuple[str, ...]
    token: str  # lowercase: header names compare without case
    shown: str
    integer: bool


_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# A number as clients print one: sign, digits, fraction, and an exponent small enough
# that the integer it writes has no more digits than any argument can.
_DECIMAL: Final = re.compile(
    r"(?P<whole>[-+]?[0-9]+)(?:\.(?P<fraction>[0-9]+))?(?:[eE](?P<exponent>[-+]?[0-9]{1,4}))?"
)
# JSON Schema keywords whose values are schemas, by the shape of their value. Crossing
# any of them leaves the chain of `properties` that mirroring may follow.
_ONE_SCHEMA: Final = frozenset(
    {
        "items",
        "contains",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SCHEMA_LISTS: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SCHEMA_MAPS: Final = frozenset({"$defs", "definitions", "patternProperties", "dependentSchemas"})


def _schema_positions(root: object) -> Iterator[tuple[tuple[str, ...] | None, Mapping[str, Any]]]:
    """Every schema in `root` with its `properties` path (None once off that chain)."""
    stack: list[tuple[tuple[str, ...] | None, object]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, Mapping):
                for name, inner in value.items():
                    stack.append((None if path is None else (*path, str(name)), inner))
            elif keyword in _ONE_SCHEMA:
                stack.append((None, value))
            elif keyword in _SCHEMA_LISTS and isinstance(value, list):
                stack.extend((None, inner) for inner in value)
            elif keyword in _SCHEMA_MAPS and isinstance(value, Mapping):
                stack.extend((None, inner) for inner in value.values())


def _param_headers(schema: object) -> tuple[_ParamHeader, ...] | None:
    """The arguments a tool's input schema mirrors into headers, or None when an
    annotation is invalid (clients then drop the tool and mirror nothing)."""
    found: dict[str, _ParamHeader] = {}
    for path, node in _schema_positions(schema):
        if "x-mcp-header" not in node:
            continue
        token, kind = node["x-mcp-header"], node.get("type")
        if not path or not isinstance(token, str) or not _TOKEN.fullmatch(token):
            return None
        if kind not in ("string", "integer", "boolean") or token.lower() in found:
            return None
        found[token.lower()] = _ParamHeader(path, token.lower(), token, kind == "integer")
    return tuple(found.values())


def _argument_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> object:
    node: object = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _canonical_integer(text: str) -> str | None:
    """The shortest decimal of the integer a header value writes (`-042.0` is `-42`,
    ` 5` is `5`, `1e+20` is `100000000000000000000`), or None when it writes no integer.
    Clients write a number as their language prints it, exponent included. Kept as text:
    a header may hold more digits than `int` reads, and an integer argument may be
    beyond any float."""
    written = _DECIMAL.fullmatch(text.strip(" \t\r\n"))
    if written is None:
        return None
    whole, fraction, exponent = written.group("whole", "fraction", "exponent")
    negative = whole.startswith("-")
    digits = whole.lstrip("+-") + (fraction or "")
    # The value is int(digits) * 10 ** shift; an integer only if every digit below the
    # decimal point is zero.
    shift = int(exponent or "0") - len(fraction or "")
    if shift < 0:
        digits, dropped = digits[:shift], digits[shift:]
        if dropped.strip("0"):
            return None
    digits = digits.lstrip("0")
    if not digits:
        return "0"
    if shift > 0:
        digits += "0" * shift
    return "-" + digits if negative else digits


def _mirrors(header: _ParamHeader, value: object, text: str) -> bool:
    """Whether a decoded header value mirrors the argument value."""
    if isinstance(value, bool):
        return text == ("true" if value else "false")
    if header.integer and isinstance(value, float):
        # A whole number that arrived as a float (`42.0`, `1e23`) is the float nearest
        # to what it writes; the header, as the client's language prints that float
        # (`1e+23`), names the same one. Its exact integer (1e23 is 99999999999999991611392
        # as a float) is written by nobody.
        written = text.strip(" \t\r\n")
        return (
            value.is_integer()
            and _DECIMAL.fullmatch(written) is not None
            and float(written) == value
        )
    if header.integer and isinstance(value, int):
        # Integers compare as numbers, however the header writes them (`42`, `4.2e1`).
        # (Integers have at most as many digits as `str` writes.)
        return _canonical_integer(text) == str(value)
    if isinstance(value, str | int):
        return text == str(value)
    return False


def _approval_action(params: Mapping[str, Any]) -> str | None:
    """What the client says the person did with the approval elicitation, if anything."""
    responses = params.get("inputResponses")  # decoded JSON: objects are dicts
    response = responses.get(APPROVAL_INPUT_KEY) if isinstance(responses, dict) else None
    action = response.get("action") if isinstance(response, dict) else None
    return action if isinstance(action, str) else None


class StatelessEra:
    """Answers stateless-era requests through the shared governed dispatcher."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        approval_wait_seconds: float = APPROVAL_WAIT_SECONDS,
    ) -> None:
        self._dispatcher = dispatcher
        self._approval_wait = approval_wait_seconds
        self._waiting: dict[str, int] = {}  # principal id -> retries waiting for a decision
        self._meta = {SERVER_INFO_KEY: dispatcher.server_info}
        fixed = encode_json({"resultType": "complete", "_meta": self._meta})
        self.completion: Final = b"," + fixed[1:-1] + b"}}"
        """What ends the encoding of a reply whose result lacks its fixed fields."""
        # The tools whose schemas ask for mirrored arguments, and which: fixed with the
        # runtime. A tool with an invalid declaration mirrors nothing (clients drop it).
        self._param_headers = {
            tool.name: found
            for tool in dispatcher.tools
            if (found := _param_headers(tool.input_schema))
        }
        # The tools whose calls need no closer look at their headers: a client mirrors
        # their names in `Mcp-Name` as they are (not base64-wrapped), and no argument.
        self._plain_names = frozenset(
            tool.name
            for tool in dispatcher.tools
            if _mirrors_text(tool.name, tool.name) and tool.name not in self._param_headers
        )
        discover: dict[str, Any] = {
            "supportedVersions": list(ADVERTISED_VERSIONS),
            "capabilities": {"tools": {"listChanged": False}},
        }
        if dispatcher.instructions:
            discover["instructions"] = dispatcher.instructions
        # What the server says about itself is the same for everyone.
        self._discover = {**discover, "ttlMs": LIST_TTL_MS, "cacheScope": "public"}
        # A tool list filtered by policy must not be shared between callers.
        self._list_scope = "private" if dispatcher.listing_varies_by_caller else "public"

    async def answer(
        self,
        request: Request,
        principal: Principal,
        mirrored: MirroredHeaders | None,
        client_gone: ClientGone | None = None,
    ) -> StatelessAnswer:
        """The reply to one request (`mirrored` is None where no headers exist;
        `client_gone`, where the transport can tell, ends an approval wait early)."""
        params = request.params
        meta = params.get("_meta") if isinstance(params, dict) else None  # decoded JSON
        if not isinstance(meta, dict):
            return self._envelope_missing(request, mirrored)
        version = meta.get(PROTOCOL_VERSION_KEY)
        capabilities: Any = meta.get(CLIENT_CAPABILITIES_KEY)  # an object, checked next
        method = request.method
        key = _NAME_BEARING.get(method)
        named = params.get(key) if key is not None else None
        # The common case is decided by comparisons alone: a served version, capabilities,
        # and headers that are the body's values as they are, naming a published tool that
        # mirrors no argument. Anything else is looked at closely, check by check.
        plain = (
            version in MODERN_PROTOCOL_VERSIONS
            and isinstance(capabilities, dict)
            and (
                mirrored is None
                or (
                    mirrored.version == (version,)
                    and mirrored.method == (method,)
                    and method in _SERVED_METHODS  # whose names are plain header values
                    and (
                        named is None or (mirrored.name == (named,) and named in self._plain_names)
                    )
                )
            )
        )
        if not plain:
            refusal = self._envelope_refusal(request, params, meta, mirrored)
            if refusal is not None:
                return refusal
        url_elicitation = "elicitation" in capabilities and declares_url_elicitation(capabilities)
        caller = Caller(principal, None, url_elicitation)
        if method == "tools/call":
            if not plain and mirrored is not None and named in self._param_headers:
                # The headers mirror `named`, so it is a string. Only for a tool this
                # caller may call: checking others would reveal them.
                tool = self._dispatcher.visible_tool(caller, named)
                sent = params.get("arguments")
                mismatch = None
                if tool is not None:
                    # The tool is given its arguments with stringified JSON decoded one
                    # layer deep: those are the values the headers must mirror, or a value
                    # hidden in a string would reach the tool past every intermediary.
                    arguments = sent
                    if isinstance(sent, dict):
                        arguments = decode_stringified_arguments(sent, tool.input_schema)
                    mismatch = self._param_mismatch(tool, arguments, sent, mirrored.params)
                if mismatch is not None:
                    return self._error(request, ErrorCode.HEADER_MISMATCH, mismatch)
            # A retry saying the person declined never spends an approval, even one
            # they granted meanwhile: it stays open until it expires.
            if "inputResponses" in params and _approval_action(params) in _DECLINED:
                outcome = await self._dispatcher.call_tool(caller, params, spend_approval=False)
            else:
                outcome = await self._dispatcher.call_tool(caller, params)
            if isinstance(outcome, dict):  # a tool result: by far the most common answer
                # `_complete`'s common case, without its call on every tool call.
                if outcome and "_meta" not in outcome and "resultType" not in outcome:
                    return result_response(request.id, outcome)  # completed when encoded
                return self._complete(request, outcome)
            return await self._unfinished_call(request, params, caller, outcome, client_gone)
        if method == "tools/list":
            page = self._dispatcher.list_page(caller, params)
            if isinstance(page, CallRefused):
                return self._error(request, ErrorCode.INVALID_PARAMS, page.message)
            page["ttlMs"] = LIST_TTL_MS
            page["cacheScope"] = self._list_scope
            return self._complete(request, page)
        if method == "server/discover":
            return self._complete(request, dict(self._discover))
        # `initialize`, `ping`, `logging/setLevel`, subscriptions and every other method
        # do not exist in this era.
        return self._error(request, ErrorCode.METHOD_NOT_FOUND)

    def _envelope_refusal(
        self,
        request: Request,
        params: Mapping[str, Any],
        meta: Mapping[str, Any],
        mirrored: MirroredHeaders | None,
    ) -> dict[str, Any] | None:
        """The error for a request whose envelope or mirrored headers are wrong, or None
        when they are right after all, in the order the checks are documented."""
        version = meta.get(PROTOCOL_VERSION_KEY, _ABSENT)
        capabilities = meta.get(CLIENT_CAPABILITIES_KEY, _ABSENT)
        if version is _ABSENT or capabilities is _ABSENT:
            return self._envelope_missing(request, mirrored)
        if mirrored is not None:
            mismatch = self._header_mismatch(request, params, version, mirrored)
            if mismatch is not None:
                return self._error(request, ErrorCode.HEADER_MISMATCH, mismatch)
        if version not in MODERN_PROTOCOL_VERSIONS:
            if not isinstance(version, str):
                problem = "The protocol version is no string"
                return self._error(request, ErrorCode.INVALID_PARAMS, problem)
            return self._unsupported(request, version)
        if not isinstance(capabilities, dict):
            problem = "The client capabilities are no object"
            return self._error(request, ErrorCode.INVALID_PARAMS, problem)
        return None

    def _envelope_missing(
        self, request: Request, mirrored: MirroredHeaders | None
    ) -> dict[str, Any]:
        """The error for a request without the envelope's two required fields. When its
        `MCP-Protocol-Version` header names a revision this server does not serve, that
        is said first: the envelope is this revision's, and one the server cannot read
        may not carry it at all. The client learns which revisions to use instead."""
        stated = mirrored.version if mirrored is not None else ()
        requested = stated[0] if len(stated) == 1 else None
        if requested is not None and requested not in MODERN_PROTOCOL_VERSIONS:
            return self._unsupported(request, requested)
        return self._error(request, ErrorCode.INVALID_PARAMS, _ENVELOPE_MISSING)

    def _unsupported(self, request: Request, requested: str) -> dict[str, Any]:
        """The error for a revision this era does not serve. `supported` lists the
        handshake revisions too; when the one asked for is among them, the message says
        how to use it, or the error would seem to refuse what it lists."""
        data = {"supported": list(ADVERTISED_VERSIONS), "requested": requested}
        message = None
        if requested in HANDSHAKE_ERA_VERSIONS:
            message = f"{requested} is a handshake revision: open a session with initialize"
        return self._error(request, ErrorCode.UNSUPPORTED_PROTOCOL_VERSION, message, data)

    def _header_mismatch(
        self,
        request: Request,
        params: Mapping[str, Any],
        version: object,
        mirrored: MirroredHeaders,
    ) -> str | None:
        """Why the mirrored headers do not match the body, or None when they do."""
        # The version and the method are always plain header values, compared as sent:
        # only a name or an argument may travel base64-wrapped. A proxy that routes on a
        # wrapped method would read one method while this server ran another.
        if not _is_plainly(mirrored.version, version):
            return "MCP-Protocol-Version does not match the request's protocol version"
        if not _is_plainly(mirrored.method, request.method):
            return "Mcp-Method does not match the request's method"
        key = _NAME_BEARING.get(request.method)
        value = params.get(key) if key is not None else None
        if value is None:
            return None
        names = mirrored.name
        if len(names) != 1 or not _mirrors_text(names[0], value):
            return f"Mcp-Name does not match the request's {key}"
        return None

    def _param_mismatch(
        self,
        tool: BoundTool,
        arguments: object,
        as_sent: object,
        headers: Sequence[tuple[str, str]],
    ) -> str | None:
        """Why the `Mcp-Param-*` headers do not mirror the arguments (`as_sent`: before
        the stringified JSON in them was decoded), or None."""
        mirrored = self._param_headers.get(tool.name, ())
        values = arguments if isinstance(arguments, dict) else {}
        for header in mirrored:
            found = [value for token, value in headers if token == header.token]
            argument = _argument_at(values, header.path)
            shown = f"Mcp-Param-{header.shown}"
            if len(found) > 1:
                return f"{shown} appears more than once"
            if argument is None or isinstance(argument, list | dict):
                if found:
                    return f"{shown} is sent but the argument it mirrors is not"
                continue
            if not found:
                if isinstance(as_sent, dict) and _argument_at(as_sent, header.path) is None:
                    return (
                        f"{shown} is missing: the argument it mirrors arrived inside "
                        f"stringified JSON ({header.path[0]} is a string); send "
                        f"{header.path[0]} as JSON itself, so that the header mirrors it"
                    )
                return f"{shown} is missing"
            text = decode_mirrored_value(found[0])
            if text is None or not _mirrors(header, argument, text):
                return f"{shown} does not match its argument"
        return None

    async def _unfinished_call(
        self,
        request: Request,
        params: dict[str, Any],
        caller: Caller,
        outcome: CallOutcome,
        client_gone: ClientGone | None,
    ) -> StatelessAnswer:
        """The answer to a call that did not simply run: refused, short of scopes, or
        waiting for (or retried after) a person's approval."""
        dispatcher = self._dispatcher
        action = _approval_action(params)
        # The client says the person went to the approval page: one they were shown,
        # not one this very call opened (the one they saw was spent or ended meanwhile).
        visited = (
            isinstance(outcome, AwaitingApproval)
            and not outcome.opened
            and action == "accept"
            and caller.url_elicitation
        )
        crowded = visited and not self._may_wait(caller.principal.principal_id)
        if isinstance(outcome, AwaitingApproval) and visited and not crowded:
            # Wait for their decision.
            waited = await self._await_decision(
                outcome.approval_id, caller.principal.principal_id, client_gone
            )
            if waited is _Wait.DECIDED:
                # The same call again runs it (or reports the denial) exactly as an
                # identical repeated call would.
                outcome = await dispatcher.call_tool(caller, params)
            elif waited is _Wait.ABANDONED:
                # Nobody would receive the result: the approval stays unspent for the
                # client's next identical call, and this one is not run.
                _log.info("approval_wait outcome=abandoned tool=%s", outcome.tool)
        if isinstance(outcome, CallRefused):
            return self._error(request, ErrorCode.INVALID_PARAMS, outcome.message)
        if isinstance(outcome, StepUpRequired):
            return outcome
        if isinstance(outcome, AwaitingApproval):
            if action in _DECLINED:
                result = structured_result(
                    {**_APPROVAL_DECLINED, "approval_url": outcome.url}, is_error=True
                )
            elif caller.url_elicitation and not crowded:
                ask = {"method": "elicitation/create", "params": outcome.elicitation()}
                pending = {
                    "resultType": "input_required",
                    "inputRequests": {APPROVAL_INPUT_KEY: ask},
                }
                return result_response(request.id, {**pending, "_meta": self._meta})
            else:
                result = dispatcher.approval_required_result(outcome)
            return self._complete(request, result)
        return self._complete(request, outcome)  # the decided retry's own result

    def _may_wait(self, principal_id: str) -> bool:
        """Whether one more retry of this principal may wait for a decision now."""
        return (
            self._waiting.get(principal_id, 0) < MAX_WAITS_PER_PRINCIPAL
            and sum(self._waiting.values()) < MAX_WAITS
        )

    async def _await_decision(
        self, approval_id: str, principal_id: str, client_gone: ClientGone | None
    ) -> _Wait:
        """Wait (bounded) until a person decided that approval, or the client left."""
        self._waiting[principal_id] = self._waiting.get(principal_id, 0) + 1
        try:
            return await self._wait_for_decision(approval_id, client_gone)
        finally:
            self._waiting[principal_id] -= 1
            if not self._waiting[principal_id]:
                del self._waiting[principal_id]

    async def _wait_for_decision(self, approval_id: str, client_gone: ClientGone | None) -> _Wait:
        ended = _Wait.TIMED_OUT
        async with anyio.create_task_group() as waiting:

            async def watch() -> None:
                nonlocal ended
                assert client_gone is not None
                await client_gone()
                ended = _Wait.ABANDONED
                waiting.cancel_scope.cancel()

            if client_gone is not None:
                waiting.start_soon(watch)
            deadline = anyio.current_time() + self._approval_wait
            while self._dispatcher.approval_pending(approval_id):
                if anyio.current_time() >= deadline:
                    break
                await anyio.sleep(_APPROVAL_POLL_SECONDS)
            else:
                ended = _Wait.DECIDED
            waiting.cancel_scope.cancel()
        return ended

    def _complete(self, request: Request, result: dict[str, Any]) -> dict[str, Any]:
        """A final result's reply: typed, and naming the server (next to any `_meta` of
        its own).

        The two fields are the same bytes in every reply, so they are encoded once and
        appended to the reply's encoding (see `StatelessAnswer`). An empty result, or
        one with a `_meta` (or `resultType`) of its own, is completed in place instead,
        so no field is ever written twice: `result` is this request's own fresh dict
        (the dispatcher never hands out shared ones).
        """
        if not result or "_meta" in result or "resultType" in result:
            own = result.get("_meta")
            result["_meta"] = {**own, **self._meta} if isinstance(own, dict) else self._meta
            result["resultType"] = "complete"
        return result_response(request.id, result)

    def reply_of(self, request: Request, answer: StatelessAnswer) -> dict[str, Any]:
        """The whole reply as a JSON value (a call short of scopes is refused with an
        error, where HTTP answers 403)."""
        if isinstance(answer, StepUpRequired):
            return error_response(request.id, ErrorCode.INVALID_REQUEST, StepUpRequired.MESSAGE)
        result = answer.get("result")
        if result is None or "resultType" in result:
            return answer
        return {**answer, "result": {**result, "resultType": "complete", "_meta": self._meta}}

    @staticmethod
    def _error(
        request: Request,
        code: ErrorCode,
        message: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        return error_response(request.id, code, message, data)
