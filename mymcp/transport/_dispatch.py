"""The governed tool surface both protocol eras serve, and the handshake era's methods.

`list_page` and `call_tool` are the one governed path: both read the caller's policy
view, so a tool the caller may not call is neither listed nor callable (and a call to
it is answered exactly like a call to a tool that does not exist); `call_tool` also
validates arguments, asks for exact-call approval and records every decision and
outcome in the audit. They return era-neutral outcomes; the handshake era's
`dispatch` (initialize, ping, tools/list, tools/call over JSON-RPC) and the stateless
era (`_stateless.py`) each render them on their own wire.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import logging
import math
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, NamedTuple

import anyio
from anyio import CapacityLimiter, WouldBlock, from_thread, to_thread
from anyio.lowlevel import RunVar, current_token

from mymcp import SERVER_NAME
from mymcp._base64url import b64url_decode, b64url_encode
from mymcp.auth import Principal
from mymcp.errors import AuditError
from mymcp.governance import (
    NUMBER,
    WORD,
    Approval,
    ApprovalState,
    Governance,
    Policy,
    PolicyView,
    RecordShape,
    rfc3339,
)
from mymcp.logs import class_name, new_failure_id
from mymcp.plugin import QualifiedCapabilityId, structured_result
from mymcp.runtime import HOST_ORIGIN, BoundTool, HostRuntime, ToolRegistry
from mymcp.transport._arguments import decode_stringified_arguments
from mymcp.transport._instructions import SERVER_INSTRUCTIONS
from mymcp.transport._jsonrpc import (
    ErrorCode,
    Request,
    error_response,
    log_request,
    result_response,
)
from mymcp.transport._results import checked_result
from mymcp.transport._versions import negotiate_version

__all__ = [
    "OTHER_TOOL_THREADS",
    "READ_ONLY_TOOL_THREADS",
    "AwaitingApproval",
    "CallOutcome",
    "CallRefused",
    "Caller",
    "Dispatcher",
    "StepUpRequired",
    "declares_url_elicitation",
]

_log = logging.getLogger("mymcp.transport.tools")

TOOLS_PAGE_SIZE = 100
# The varying members of the `tool_call` records of a call that runs (its decision,
# `allowed`, is fixed): a read-only call has one record, written with the next batch;
# any other call has its decision record, durable before it runs, and then its outcome
# record, paired by `call`.
_RAN: Final = ("args_digest", "duration_ms", "outcome")
_DECIDED: Final = ("args_digest", "call")
_FINISHED: Final = ("args_digest", "call", "duration_ms", "outcome")
# None of them needs escaping: digests and call ids are hex (or `unhashable`), outcomes
# pass `_outcome_code`, durations are finite floats.
_KINDS: Final = {"args_digest": WORD, "call": WORD, "duration_ms": NUMBER, "outcome": WORD}
# The outcome of a call cancelled before its tool answered (a synchronous handler may
# still finish its work on its thread; nobody receives its result).
_CANCELLED: Final = "cancelled"
# The outcome of a call whose handler failed, or whose result no client could read.
_INTERNAL_ERROR: Final = "internal_error"
# The decision on a `tools/call` whose params are no call at all (no name, arguments
# that are no object).
_INVALID_PARAMS: Final = "invalid_params"
_MAX_SHAPES: Final = 4096
_AUDIT_UNAVAILABLE = {
    "status": "internal_error",
    "code": "audit_unavailable",
    "message": (
        "The call was not run: the server could not record it in its security audit. "
        "Retry later; the operator has the details."
    ),
}
_IDENTIFIER_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
# Outcomes the host records on its own account (besides every `approval_…` code): an
# external plugin's error code equal to one is recorded as `tool_error` instead.
_HOST_OUTCOMES: Final = frozenset(
    {_CANCELLED, _INTERNAL_ERROR, "audit_unavailable", "invalid_arguments", "tool_error", "ok"}
)
_APPROVAL_REQUIRED_MESSAGE = (
    "Ask the user to open approval_url, review and approve this exact call, then repeat "
    "the identical call."
)
# An approval given in a session is that session's: a client that opens a new session for
# every call (as some command-line clients do) must be told, or it would repeat forever.
_IN_SESSION_NOTE = (
    " Repeat it in this same MCP session: a call from another session asks for a new approval."
)
_APPROVAL_ERROR = "A person must approve this exact call in the MyMCP console first"
_APPROVAL_ELICITATION_MESSAGE = (
    "MyMCP needs your approval before it runs {tool} with these exact arguments. Open the "
    "link, review the call and approve or deny it; then the agent repeats the same call."
)
_APPROVAL_REFUSALS: dict[ApprovalState, dict[str, str]] = {
    ApprovalState.DENIED: {
        "status": "approval_denied",
        "code": "approval_denied",
        "message": (
            "A person denied this exact call in the MyMCP console. Do not repeat it unless "
            "the user asks for it again; a repeated call asks for a new approval."
        ),
    },
    ApprovalState.EXPIRED: {
        "status": "approval_expired",
        "code": "approval_expired",
        "message": (
            "The approval for this exact call expired before it was used. Repeat the call "
            "to ask the user for a new approval."
        ),
    },
}
_APPROVAL_TOO_LARGE = {
    "status": "invalid_request",
    "code": "approval_arguments_too_large",
    "message": "The arguments are too large for a person to review and approve; send less.",
}
_APPROVAL_UNAVAILABLE = {
    "status": "approval_unavailable",
    "code": "approval_unavailable",
    "message": (
        "The call was not run: it needs a person's approval, and this server has no console "
        "where one could be given. The operator has the details."
    ),
}

# Synchronous handlers run on worker threads, read-only tools and all others under
# separate limits: writers waiting on a lock hold their threads, and must never be able
# to take every thread a read needs. Within each limit one plugin may hold at most half
# the places: a handler that hangs keeps its thread for good, and one plugin's hung
# tools must leave the others (the memory tools among them) places to run in.
READ_ONLY_TOOL_THREADS = 32
OTHER_TOOL_THREADS = 16


def _internal_failure(failure_id: str) -> dict[str, Any]:
    return {
        "status": "internal_error",
        "code": "internal_error",
        "message": "The tool failed unexpectedly; nothing about the failure is shown here.",
        "request_id": failure_id,
    }


class _WorkerLimits:
    """The thread places of each tool kind, and each plugin's share of them.

    The bundled memory plugin has places of its own, outside the ones external plugins
    share: however many plugins hang, the memory tools still run. Limiters are kept per
    event loop (as anyio keeps its own default limiter), so none is ever shared between
    loops.
    """

    def __init__(self, read_only: int, other: int) -> None:
        self._sizes: dict[bool, int] = {True: read_only, False: other}
        self._limiters: RunVar[dict[tuple[str, bool] | None, CapacityLimiter]] = RunVar(
            "mymcp_tool_threads"
        )

    def _limiter_for(self, key: tuple[str, bool] | None, size: float) -> CapacityLimiter:
        try:
            limiters = self._limiters.get()
        except LookupError:
            limiters = {}
            self._limiters.set(limiters)
        limiter = limiters.get(key)
        if limiter is None:
            limiter = limiters[key] = CapacityLimiter(size)
        return limiter

    def _unbounded(self) -> CapacityLimiter:
        return self._limiter_for(None, math.inf)

    def _places(self, tool: BoundTool) -> tuple[CapacityLimiter, ...]:
        """The limiters a call of the tool takes a place in: the bundled plugin's own
        places of its kind; or, for an external plugin, its share (at most half) of the
        places of its kind that every external plugin shares."""
        kind, size, plugin = tool.effects.read_only, self._sizes[tool.effects.read_only], ""
        if isinstance(tool.origin, QualifiedCapabilityId):
            plugin = tool.origin.plugin_id
        if tool.bundled:
            return (self._limiter_for((plugin, kind), size),)
        share = self._limiter_for((f"plugin {plugin}", kind), max(1, size // 2))
        return share, self._limiter_for(("external", kind), size)

    async def run(self, tool: BoundTool, arguments: dict[str, Any]) -> object:
        """Run a synchronous handler on a worker thread, in one of its plugin's places
        and one of its tool kind's.

        Cancelling the call (its client cancelled it, or the server is stopping) stops
        waiting for it at once. A thread cannot be stopped, though, so a handler already
        running keeps its places until it returns: cancelled calls never raise the number
        of threads past the limits, and a handler that never returns holds one place, not
        one per retry.
        """
        borrower = object()
        places = self._places(tool)
        taken: list[CapacityLimiter] = []
        try:
            for limiter in places:
                try:
                    # Without waiting when a place is free: anyio's own count below
                    # already gives other tasks their turn once.
                    limiter.acquire_on_behalf_of_nowait(borrower)
                except WouldBlock:
                    await limiter.acquire_on_behalf_of(borrower)
                taken.append(limiter)
        except BaseException:
            for limiter in taken:
                limiter.release_on_behalf_of(borrower)
            raise
        token, lock = current_token(), threading.Lock()
        phase = ["queued"]  # then "running" and "returned", or "abandoned" at any point

        def give_back() -> None:
            for limiter in places:
                limiter.release_on_behalf_of(borrower)

        def call() -> object:
            with lock:
                if phase[0] == "abandoned":  # cancelled before a thread took it
                    return None
                phase[0] = "running"
            try:
                return tool.handler(arguments)
            except Exception:
                raise
            except BaseException as exc:
                # GeneratorExit, SystemExit, KeyboardInterrupt or a class of the
                # plugin's own must not cross into the event loop as they are: a
                # GeneratorExit thrown into the awaiting coroutine breaks it for good.
                raise _RaisedBase(exc) from None
            finally:
                with lock:
                    abandoned, phase[0] = phase[0] == "abandoned", "returned"
                if abandoned:  # nobody waits for it: the places go back from here
                    with contextlib.suppress(Exception):  # unless the loop itself ended
                        from_thread.run_sync(give_back, token=token)

        try:
            # The places are counted above; anyio's own count must not hold calls back.
            outcome = await to_thread.run_sync(
                call, abandon_on_cancel=True, limiter=self._unbounded()
            )
        except BaseException:
            with lock:
                running, phase[0] = phase[0] == "running", "abandoned"
            if not running:
                give_back()
            raise
        give_back()
        return outcome


class _RaisedBase(Exception):
    """A synchronous handler raised a BaseException that is no Exception; carried back
    from its thread wrapped, as a failure of that call."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(type(raised).__name__)
        self.raised = raised


def _being_cancelled() -> bool:
    """Whether the running task has been asked to stop (a cancel scope around it was
    cancelled), as opposed to code it awaited raising a cancellation of its own."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def _type_name(exc: BaseException) -> str:
    return class_name(type(exc))


def declares_url_elicitation(capabilities: object) -> bool:
    """Whether client capabilities declare URL-mode elicitation (`elicitation.url`):
    only such a client is sent to the approval page by the protocol itself."""
    # Decoded JSON: objects are dicts.
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)


class Caller(NamedTuple):
    """Who sent a request, in which session (None in the stateless era and for the
    console), and whether its client declared URL-mode elicitation (at `initialize`,
    or in the request's own capabilities in the stateless era).

    A named tuple rather than a frozen dataclass, like the messages: one is built for
    every request."""

    principal: Principal
    session_id: str | None = None
    url_elicitation: bool = False


@dataclass(frozen=True, slots=True)
class StepUpRequired:
    """The call would be allowed with more OAuth scopes: the transport answers 403."""

    scopes: frozenset[str]

    MESSAGE: ClassVar[str] = "Insufficient scope: the access token needs more scopes for this call"


@dataclass(frozen=True, slots=True)
class CallRefused:
    """A protocol error (-32602): malformed params, or a tool this caller cannot see."""

    message: str | None = None


@dataclass(frozen=True, slots=True)
class AwaitingApproval:
    """The call waits for a person's approval of exactly this call in the console."""

    approval_id: str
    tool: str
    url: str
    expires_at: float
    in_session: bool = False
    """Asked in a handshake-era session, which alone can spend the approval."""
    opened: bool = False
    """This call opened the approval, so no person has been sent to its page yet."""

    def elicitation(self) -> dict[str, Any]:
        """The URL-mode elicitation that sends a person to the approval page (the
        handshake era adds its `elicitationId`; the stateless revision has none)."""
        return {
            "mode": "url",
            "url": self.url,
            "message": _APPROVAL_ELICITATION_MESSAGE.format(tool=self.tool),
        }


CallOutcome = dict[str, Any] | CallRefused | StepUpRequired | AwaitingApproval
"""What a governed `tools/call` comes to: a tool result (a dict), or a refusal, a scope
step-up, or a wait for approval, which each era words its own way."""


def _milliseconds_since(started: float) -> float:
    """Milliseconds since `perf_counter()` was `started`, to the microsecond (truncated:
    a third of what `round(..., 3)` costs, on every audited call)."""
    return int((time.perf_counter() - started) * 1_000_000) / 1000


def _outcome_code(result: Mapping[str, Any], trusted: bool) -> str:
    """`ok`, or the tool's own error code when it is a plain identifier, for the audit.

    An external plugin's code that the host writes itself (`cancelled`, `internal_error`,
    `audit_unavailable`, ...) is recorded as `tool_error`: the audit's reader must be able
    to trust that such an outcome is the host's account, not a plugin's claim."""
    if not result.get("isError"):
        return "ok"
    structured = result.get("structuredContent")
    code = structured.get("code") if isinstance(structured, Mapping) else None
    if not (isinstance(code, str) and 0 < len(code) <= 64 and set(code) <= _IDENTIFIER_CHARACTERS):
        return "tool_error"
    if trusted or (code not in _HOST_OUTCOMES and not code.startswith("approval_")):
        return code
    return "tool_error"


# The members of initialize's params, the type each must have, and its name in an error.
_INITIALIZE_MEMBERS: Final = (
    ("protocolVersion", str, "a string"),
    ("capabilities", dict, "an object"),
    ("clientInfo", dict, "an object"),
)


class Dispatcher:
    """Answers requests against one immutable HostRuntime, as governed."""

    def __init__(
        self,
        runtime: HostRuntime,
        governance: Governance | None = None,
        *,
        console_origin: str = "http://127.0.0.1:8000",
        approval_console: bool = True,
        read_only_threads: int = READ_ONLY_TOOL_THREADS,
        other_threads: int = OTHER_TOOL_THREADS,
    ) -> None:
        self._runtime = runtime
        governance = governance or Governance(Policy(None, runtime))
        self._policy = governance.policy
        self._audit = governance.audit
        self._approvals = governance.approvals
        self._console_origin = console_origin
        # False where no console serves this process's approvals (a stdio process whose
        # address was taken): calls that need one are refused instead of left waiting.
        self._approval_console = approval_console
        self._server_info = {"name": SERVER_NAME, "version": runtime.server_version}
        self._instructions: str | None = SERVER_INSTRUCTIONS
        self._workers = _WorkerLimits(read_only_threads, other_threads)
        self._call_prefix = secrets.token_hex(3)
        self._call_numbers = itertools.count(1)
        self._shapes: dict[tuple[str, str | None, str, tuple[str, ...]], RecordShape] = {}

    @property
    def server_info(self) -> dict[str, str]:
        return dict(self._server_info)

    @property
    def instructions(self) -> str | None:
        return self._instructions

    @property
    def tools(self) -> ToolRegistry:
        """Every tool of the runtime, whoever may call it."""
        return self._runtime.registry

    @property
    def listing_varies_by_caller(self) -> bool:
        """Whether policy makes the tool list depend on who asks."""
        return self._policy.restricts

    def log_request(self, request: Request) -> float:
        """Log a request line; a `tools/call` names its tool when this runtime serves it
        (any other name is client text and stays out of the log)."""
        tool = None
        if request.method == "tools/call":
            params = request.params
            name = params.get("name") if isinstance(params, Mapping) else None
            known = isinstance(name, str) and self._runtime.registry.get(name) is not None
            tool = name if known else "<unknown>"
        return log_request(request, tool)

    def initialize(self, request: Request) -> tuple[dict[str, Any], str | None]:
        """The initialize reply and the negotiated version (None when it is an error)."""
        params = request.params
        if not isinstance(params, dict):  # decoded JSON: objects are dicts
            return error_response(request.id, ErrorCode.INVALID_PARAMS), None
        # A member left out is tolerated, as clients older than the rule omit some; one
        # of the wrong type is refused, since a session opened on it would be misread.
        for member, kind, name in _INITIALIZE_MEMBERS:
            if member in params and not isinstance(params[member], kind):
                message = f"initialize params: {member} must be {name}"
                return error_response(request.id, ErrorCode.INVALID_PARAMS, message), None
        version = negotiate_version(params.get("protocolVersion"))
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": dict(self._server_info),
        }
        if self._instructions:
            result["instructions"] = self._instructions
        return result_response(request.id, result), version

    @staticmethod
    def ping(request: Request) -> dict[str, Any]:
        """`ping`'s reply: empty, when its params are absent or an object as for any
        method of this protocol."""
        if request.params is not None and not isinstance(request.params, dict):
            return error_response(request.id, ErrorCode.INVALID_PARAMS)
        return result_response(request.id, {})

    async def dispatch(self, request: Request, caller: Caller) -> dict[str, Any] | StepUpRequired:
        """The handshake era's reply to any request but initialize."""
        if request.method == "ping":
            return self.ping(request)
        if request.method == "tools/list":
            page = self.list_page(caller, request.params)
            if isinstance(page, CallRefused):
                return error_response(request.id, ErrorCode.INVALID_PARAMS, page.message)
            return result_response(request.id, page)
        if request.method == "tools/call":
            outcome = await self.call_tool(caller, request.params)
            if isinstance(outcome, CallRefused):
                return error_response(request.id, ErrorCode.INVALID_PARAMS, outcome.message)
            if isinstance(outcome, StepUpRequired):
                return outcome
            if isinstance(outcome, AwaitingApproval):
                if caller.url_elicitation:
                    elicitation = {**outcome.elicitation(), "elicitationId": outcome.approval_id}
                    data = {"elicitations": [elicitation]}
                    return error_response(
                        request.id, ErrorCode.URL_ELICITATION_REQUIRED, _APPROVAL_ERROR, data
                    )
                return result_response(request.id, self.approval_required_result(outcome))
            return result_response(request.id, outcome)
        if request.method == "initialize":
            # Inside a session a second initialize is not part of the lifecycle.
            return error_response(request.id, ErrorCode.INVALID_REQUEST)
        return error_response(request.id, ErrorCode.METHOD_NOT_FOUND)

    def _view(self, caller: Caller) -> PolicyView:
        principal = caller.principal
        return self._policy.view(principal.name, principal.scopes)

    def _cursor(self, page: int) -> str:
        return b64url_encode(f"{self._runtime.generation}:{page}".encode())

    def _page_of(self, cursor: object, pages: int) -> int | None:
        if not isinstance(cursor, str) or len(cursor) > 256:
            return None
        data = b64url_decode(cursor)
        if data is None or not data.isascii():
            return None
        generation, _, page = data.decode("ascii").rpartition(":")
        # ASCII digits only (`str.isdigit` also admits "²", which `int` refuses), and only
        # the one spelling this server hands out: no padding, no leading zeros.
        if generation != self._runtime.generation or not (page.isascii() and page.isdigit()):
            return None
        number = int(page)
        if not 0 < number < pages or cursor != self._cursor(number):
            return None
        return number

    def list_page(self, caller: Caller, params: object) -> dict[str, Any] | CallRefused:
        """One page of the tools this caller may call, in registry order (deterministic,
        and the same for every caller with the same principal and scopes)."""
        if params is not None and not isinstance(params, dict):
            return CallRefused()
        listing = self._view(caller).listing
        pages = max(1, -(-len(listing) // TOOLS_PAGE_SIZE))
        page = 0
        if params is not None and params.get("cursor") is not None:
            found = self._page_of(params["cursor"], pages)
            if found is None:
                return CallRefused("Invalid cursor")
            page = found
        start = page * TOOLS_PAGE_SIZE
        result: dict[str, Any] = {"tools": list(listing[start : start + TOOLS_PAGE_SIZE])}
        if page + 1 < pages:
            result["nextCursor"] = self._cursor(page + 1)
        return result

    def visible_tool(self, caller: Caller, name: object) -> BoundTool | None:
        """The tool `name` if this caller may call it (otherwise it does not exist)."""
        if not isinstance(name, str):
            return None
        tool = self._runtime.registry.get(name)
        return tool if tool is not None and self._view(caller).allows(name) else None

    def _record(self, caller: Caller, tool: str | None, **fields: Any) -> None:
        """Queue one `tool_call` audit record (no-op without an audit). Calls made
        outside any session (the stateless era, the console) carry no `session`."""
        if self._audit is None:
            return
        session = caller.session_id
        if session is not None:
            fields["session"] = self._audit.session_tag(session)
        self._audit.append("tool_call", principal=caller.principal.name, tool=tool, **fields)

    def _shape(self, caller: Caller, tool: str, varying: tuple[str, ...]) -> RecordShape:
        """The prepared `allowed` `tool_call` record of this principal, session and tool:
        their records differ only in `varying`, so the rest is encoded once (a bounded
        map)."""
        key = (caller.principal.name, caller.session_id, tool, varying)
        shape = self._shapes.get(key)
        if shape is None:
            assert self._audit is not None
            fixed = {"decision": "allowed", "principal": caller.principal.name, "tool": tool}
            if caller.session_id is not None:
                fixed["session"] = self._audit.session_tag(caller.session_id)
            shape = RecordShape("tool_call", fixed, varying, _KINDS)
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            self._shapes[key] = shape
        return shape

    async def call_tool(
        self, caller: Caller, params: object, *, spend_approval: bool = True
    ) -> CallOutcome:
        """The governed `tools/call`: policy, argument validation, approval, then the
        audited execution."""
        if not isinstance(params, dict):
            self._record(caller, None, decision=_INVALID_PARAMS)
            return CallRefused()
        name = params.get("name")
        arguments = params.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            # Refused before policy, but still a decision the audit must show. Only a
            # name that is a tool's is recorded: a client's free-form text never is.
            named = self._runtime.registry.get(name) if isinstance(name, str) else None
            known = named.name if named is not None else None
            digest = self._audit.digest(arguments) if self._audit is not None else None
            self._record(caller, known, args_digest=digest, decision=_INVALID_PARAMS)
            return CallRefused()
        tool = self._runtime.registry.get(name)
        view = self._view(caller)
        if tool is None or not view.allows(name):
            return self._refuse(caller, view, tool, name, arguments)
        arguments = decode_stringified_arguments(arguments, tool.input_schema)
        digest = self._audit.digest(arguments) if self._audit is not None else None
        violation = tool.validator.check(arguments)
        if violation is not None:
            # Answered before the handler runs: the plugin only ever sees arguments its
            # published schema admits, and checks only what a schema cannot express.
            code = violation.payload()["code"]
            self._record(caller, name, args_digest=digest, decision="allowed", outcome=code)
            return structured_result(violation.payload(), is_error=True)
        if self._approvals is not None and self._approvals.requires(name):
            if not self._approval_console:
                self._record(caller, name, args_digest=digest, decision="approval_unavailable")
                return structured_result(_APPROVAL_UNAVAILABLE, is_error=True)
            principal = caller.principal
            verdict = self._approvals.check(
                principal=principal.name,
                principal_id=principal.principal_id,
                session_id=caller.session_id or "",
                tool=name,
                arguments=arguments,
                args_digest=digest,
                spend=spend_approval,
            )
            if not verdict.run:
                return self._approval_outcome(
                    caller, name, digest, verdict.approval, opened=verdict.opened
                )
        return await self.execute(caller, tool, arguments, digest=digest, view=view)

    def approval_pending(self, approval_id: str) -> bool:
        """Whether that approval still waits for a person's decision."""
        if self._approvals is None:
            return False
        approval = self._approvals.get(approval_id)
        return approval is not None and approval.state is ApprovalState.PENDING

    def approval_required_result(self, waiting: AwaitingApproval) -> dict[str, Any]:
        """The tool result that asks the agent to send its user to the approval page:
        for clients that cannot open a URL themselves."""
        payload = {
            "status": "approval_required",
            "code": "approval_required",
            "approval_url": waiting.url,
            "expires_at": rfc3339(waiting.expires_at),
            "message": _APPROVAL_REQUIRED_MESSAGE
            + (_IN_SESSION_NOTE if waiting.in_session else ""),
        }
        return structured_result(payload, is_error=True)

    async def execute(
        self,
        caller: Caller,
        tool: BoundTool,
        arguments: dict[str, Any],
        *,
        digest: str | None = None,
        view: PolicyView | None = None,
    ) -> dict[str, Any]:
        """Run one call that may run, recording it: a call that changes something is on
        disk in the audit before it runs, and every outcome follows it there.

        The console runs people's actions through here too, as the `console` principal.
        """
        view = view or self._policy.view(caller.principal.name)
        audit = self._audit
        if audit is None:
            return (await self._run(tool, arguments, view))[0]
        if digest is None:
            digest = audit.digest(arguments)
        if tool.effects.read_only:
            started = time.perf_counter()
            try:
                result, code = await self._run(tool, arguments, view)
            except anyio.get_cancelled_exc_class():
                cancelled = (digest, _milliseconds_since(started), _CANCELLED)
                audit.append_shaped(self._shape(caller, tool.name, _RAN), cancelled)
                raise
            elapsed = _milliseconds_since(started)
            outcome = (digest, elapsed, code)
            audit.append_shaped(self._shape(caller, tool.name, _RAN), outcome)
            return result
        # Pairs the decision record with the outcome record: unique in this process, and
        # with the random prefix across restarts and processes sharing one audit.
        call = f"{self._call_prefix}{next(self._call_numbers):x}"
        audit.append_shaped(self._shape(caller, tool.name, _DECIDED), (digest, call))
        failure = "audit_unavailable" if audit.refusing() else None
        if failure is None:
            try:
                await to_thread.run_sync(audit.commit)
            except AuditError as exc:
                failure = exc.code
            except anyio.get_cancelled_exc_class():
                # Withdrawn while the decision was being made durable (the commit goes
                # on in its thread): the call never ran, and must not read as running.
                withdrawn = (digest, call, 0.0, _CANCELLED)
                audit.append_shaped(self._shape(caller, tool.name, _FINISHED), withdrawn)
                raise
        if failure is not None:
            _log.error("audit outcome=error code=%s tool=%s", failure, tool.name)
            # The decision record stays queued and reaches the log once it can be
            # written; its outcome must follow it, or the call would read as one that
            # ran and never finished.
            refused = (digest, call, 0.0, "audit_unavailable")
            audit.append_shaped(self._shape(caller, tool.name, _FINISHED), refused)
            return structured_result(_AUDIT_UNAVAILABLE, is_error=True)
        started = time.perf_counter()
        try:
            result, code = await self._run(tool, arguments, view)
        except anyio.get_cancelled_exc_class():
            # Cancelled by its client or a stop: nobody hears the result, but the
            # decision record above must not read as a call that never finished.
            unfinished = (digest, call, _milliseconds_since(started), _CANCELLED)
            audit.append_shaped(self._shape(caller, tool.name, _FINISHED), unfinished)
            raise
        elapsed = _milliseconds_since(started)
        finished = (digest, call, elapsed, code)
        audit.append_shaped(self._shape(caller, tool.name, _FINISHED), finished)
        return result

    def _approval_outcome(
        self,
        caller: Caller,
        name: str,
        digest: str | None,
        approval: Approval | None,
        *,
        opened: bool = False,
    ) -> CallOutcome:
        """The answer to a call that waits for, or was refused, a person's approval."""
        if approval is None:
            self._record(caller, name, args_digest=digest, decision="approval_too_large")
            return structured_result(_APPROVAL_TOO_LARGE, is_error=True)
        # Granted, and still unspent here only when the caller chose not to spend it.
        if approval.state in (ApprovalState.PENDING, ApprovalState.GRANTED):
            self._record(caller, name, args_digest=digest, decision="approval_required")
            url = f"{self._console_origin}/console/approvals/{approval.id}"
            in_session = caller.session_id is not None
            return AwaitingApproval(
                approval.id, name, url, approval.expires_at, in_session, opened=opened
            )
        refusal = _APPROVAL_REFUSALS[approval.state]
        self._record(caller, name, args_digest=digest, decision=refusal["code"])
        return structured_result(refusal, is_error=True)

    def _refuse(
        self,
        caller: Caller,
        view: PolicyView,
        tool: BoundTool | None,
        name: str,
        arguments: dict[str, Any],
    ) -> CallRefused | StepUpRequired:
        """A call to an absent tool, or one policy does not allow: both look absent,
        unless more OAuth scopes would allow it (then the client is told which)."""
        digest = self._audit.digest(arguments) if self._audit is not None else None
        if tool is not None:
            scopes = self._policy.step_up(view, name)
            if scopes:
                self._record(caller, name, args_digest=digest, decision="insufficient_scope")
                return StepUpRequired(scopes)
            self._record(caller, name, args_digest=digest, decision="denied")
        else:
            self._record(caller, None, args_digest=digest, decision="unknown_tool")
        shown = name if len(name) <= 128 and name.isprintable() else "<invalid name>"
        return CallRefused(f"Unknown tool: {shown}")

    async def _run(
        self, tool: BoundTool, arguments: dict[str, Any], view: PolicyView
    ) -> tuple[dict[str, Any], str]:
        """The tool's result and its outcome for the audit; a failing or misbehaving
        handler becomes a content-free error."""
        if tool.origin == HOST_ORIGIN:
            # `list_tools` names what this caller may call, so it is answered from the view.
            return dict(view.list_tools_result), "ok"
        try:
            if tool.is_async:
                outcome = await tool.handler(arguments)  # type: ignore[misc]
            else:
                outcome = await self._workers.run(tool, arguments)
        except _RaisedBase as exc:
            return self._failure(tool, _type_name(exc.raised), exc), _INTERNAL_ERROR
        except Exception as exc:
            # Exception text may carry user content or paths: log the type only.
            return self._failure(tool, _type_name(exc), exc), _INTERNAL_ERROR
        except BaseException as exc:
            # A handler may also raise what no tool should: SystemExit, its own
            # BaseException, a CancelledError nobody asked for. Only this request's own
            # cancellation (the server stopping, a cancelled stdio request) goes on up.
            if isinstance(exc, anyio.get_cancelled_exc_class()) and _being_cancelled():
                raise
            return self._failure(tool, _type_name(exc), exc), _INTERNAL_ERROR
        result = checked_result(tool, outcome)
        if isinstance(result, str):
            if inspect.iscoroutine(outcome):
                outcome.close()  # never run: no "never awaited" warning on stderr
            return self._failure(tool, "invalid_result", None, reason=result), _INTERNAL_ERROR
        return result, _outcome_code(result, tool.bundled)

    def _failure(
        self,
        tool: BoundTool,
        error_type: str,
        exc: BaseException | None,
        *,
        reason: str | None = None,
    ) -> dict[str, Any]:
        failure_id = new_failure_id()
        # `reason` is one of the result checks' fixed codes: it tells the plugin's author
        # what to fix without a word of the result itself.
        _log.error(
            "tool_failure request_id=%s tool=%s error_type=%s%s",
            failure_id,
            tool.name,
            error_type,
            "" if reason is None else f" reason={reason}",
            exc_info=exc if _log.isEnabledFor(logging.DEBUG) else None,
        )
        return structured_result(_internal_failure(failure_id), is_error=True)
