"""JSON-RPC method handling for MCP 2025-11-25: initialize, ping, tools/list, tools/call."""

from __future__ import annotations

import base64
import binascii
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar

from mymcp import SERVER_NAME
from mymcp.plugin import structured_result
from mymcp.runtime import BoundTool, HostRuntime
from mymcp.transport._arguments import decode_stringified_arguments
from mymcp.transport._instructions import SERVER_INSTRUCTIONS
from mymcp.transport._jsonrpc import ErrorCode, Request, error_response, result_response
from mymcp.transport._versions import negotiate_version

__all__ = ["OTHER_TOOL_THREADS", "READ_ONLY_TOOL_THREADS", "Dispatcher"]

_log = logging.getLogger("mymcp.transport.tools")

TOOLS_PAGE_SIZE = 100
# Synchronous handlers run on worker threads, read-only tools and all others under
# separate limits: writers waiting on a lock hold their threads, and must never be able
# to take every thread a read needs.
READ_ONLY_TOOL_THREADS = 32
OTHER_TOOL_THREADS = 16


def new_failure_id() -> str:
    """An opaque id tying one logged failure to the reply the client got."""
    return secrets.token_hex(6)


def _internal_failure(failure_id: str) -> dict[str, Any]:
    return {
        "status": "internal_error",
        "code": "internal_error",
        "message": "The tool failed unexpectedly; nothing about the failure is shown here.",
        "request_id": failure_id,
    }


class _WorkerLimits:
    """One pair of thread limiters per event loop (anyio's own default limiter is kept the
    same way), so a limiter is never shared between loops."""

    def __init__(self, read_only: int, other: int) -> None:
        self._sizes = {True: read_only, False: other}
        self._limiters: dict[bool, RunVar[CapacityLimiter]] = {
            True: RunVar("mymcp_read_only_tool_threads"),
            False: RunVar("mymcp_other_tool_threads"),
        }

    def for_tool(self, tool: BoundTool) -> CapacityLimiter:
        read_only = tool.effects.read_only
        holder = self._limiters[read_only]
        try:
            return holder.get()
        except LookupError:
            limiter = CapacityLimiter(self._sizes[read_only])
            holder.set(limiter)
            return limiter


class Dispatcher:
    """Answers JSON-RPC requests against one immutable HostRuntime."""

    def __init__(
        self,
        runtime: HostRuntime,
        *,
        instructions: str | None = SERVER_INSTRUCTIONS,
        read_only_threads: int = READ_ONLY_TOOL_THREADS,
        other_threads: int = OTHER_TOOL_THREADS,
    ) -> None:
        self._runtime = runtime
        self._server_info = {"name": SERVER_NAME, "version": runtime.server_version}
        self._instructions = instructions
        self._tool_pages = self._paginate()
        self._workers = _WorkerLimits(read_only_threads, other_threads)

    def _paginate(self) -> tuple[tuple[dict[str, Any], ...], ...]:
        tools = [tool.published() for tool in self._runtime.registry]
        return tuple(
            tuple(tools[start : start + TOOLS_PAGE_SIZE])
            for start in range(0, max(len(tools), 1), TOOLS_PAGE_SIZE)
        )

    def initialize(self, request: Request) -> tuple[dict[str, Any], str | None]:
        """The initialize reply and the negotiated version (None when it is an error)."""
        params = request.params
        if not isinstance(params, dict):  # decoded JSON: objects are dicts
            return error_response(request.id, ErrorCode.INVALID_PARAMS), None
        version = negotiate_version(params.get("protocolVersion"))
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": dict(self._server_info),
        }
        if self._instructions:
            result["instructions"] = self._instructions
        return result_response(request.id, result), version

    async def dispatch(self, request: Request) -> dict[str, Any]:
        """The reply to any request but initialize."""
        if request.method == "ping":
            return result_response(request.id, {})
        if request.method == "tools/list":
            return self._tools_list(request)
        if request.method == "tools/call":
            return await self._tools_call(request)
        if request.method == "initialize":
            # Inside a session a second initialize is not part of the lifecycle.
            return error_response(request.id, ErrorCode.INVALID_REQUEST)
        return error_response(request.id, ErrorCode.METHOD_NOT_FOUND)

    def _cursor(self, page: int) -> str:
        raw = f"{self._runtime.generation}:{page}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    def _page_of(self, cursor: object) -> int | None:
        if not isinstance(cursor, str) or len(cursor) > 256:
            return None
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        generation, _, page = raw.rpartition(":")
        if generation != self._runtime.generation or not page.isdigit():
            return None
        number = int(page)
        return number if 0 < number < len(self._tool_pages) else None

    def _tools_list(self, request: Request) -> dict[str, Any]:
        params = request.params
        if params is not None and not isinstance(params, dict):
            return error_response(request.id, ErrorCode.INVALID_PARAMS)
        page = 0
        if params is not None and params.get("cursor") is not None:
            found = self._page_of(params["cursor"])
            if found is None:
                return error_response(request.id, ErrorCode.INVALID_PARAMS, "Invalid cursor")
            page = found
        result: dict[str, Any] = {"tools": list(self._tool_pages[page])}
        if page + 1 < len(self._tool_pages):
            result["nextCursor"] = self._cursor(page + 1)
        return result_response(request.id, result)

    async def _tools_call(self, request: Request) -> dict[str, Any]:
        params = request.params
        if not isinstance(params, dict):
            return error_response(request.id, ErrorCode.INVALID_PARAMS)
        name = params.get("name")
        arguments = params.get("arguments", {})
        if arguments is None:
            arguments = {}
        if not isinstance(name, str) or not isinstance(arguments, dict):
            return error_response(request.id, ErrorCode.INVALID_PARAMS)
        tool = self._runtime.registry.get(name)
        if tool is None:
            shown = name if len(name) <= 128 and name.isprintable() else "<invalid name>"
            return error_response(request.id, ErrorCode.INVALID_PARAMS, f"Unknown tool: {shown}")
        arguments = decode_stringified_arguments(arguments, tool.input_schema)
        violation = tool.validator.check(arguments)
        if violation is not None:
            # Answered before the handler runs: the plugin only ever sees arguments its
            # published schema admits, and checks only what a schema cannot express.
            refusal = structured_result(violation.payload(), is_error=True)
            return result_response(request.id, refusal)
        return result_response(request.id, await self._run(tool, arguments))

    async def _run(self, tool: BoundTool, arguments: dict[str, Any]) -> Mapping[str, Any]:
        try:
            if tool.is_async:
                outcome = await tool.handler(arguments)  # type: ignore[misc]
            else:
                limiter = self._workers.for_tool(tool)
                outcome = await to_thread.run_sync(tool.handler, arguments, limiter=limiter)
        except Exception as exc:
            # Exception text may carry user content or paths: log the type only.
            return self._failure(tool, type(exc).__name__, exc)
        if not isinstance(outcome, Mapping) or not isinstance(outcome.get("content"), list):
            return self._failure(tool, "invalid_result", None)
        return dict(outcome)

    def _failure(self, tool: BoundTool, error_type: str, exc: Exception | None) -> dict[str, Any]:
        failure_id = new_failure_id()
        _log.error(
            "tool_failure request_id=%s tool=%s error_type=%s",
            failure_id,
            tool.name,
            error_type,
            exc_info=exc if _log.isEnabledFor(logging.DEBUG) else None,
        )
        return structured_result(_internal_failure(failure_id), is_error=True)
