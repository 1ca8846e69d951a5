"""The console's view of memory: every read and change goes through the memory tools.

The console never opens memory files itself. It runs `memory_list`, `memory_inspect`,
`memory_recall` and the lifecycle tools through the dispatcher as the `console`
principal, so what a person does here is validated exactly like an agent's call and is
recorded in the audit under `console`. A tool that is switched off does not exist, and
neither does the console button that would run it.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlencode

__all__ = [
    "ANY_COLLECTION",
    "LIFECYCLE_ACTIONS",
    "Containers",
    "MemoryBrowser",
    "Outcome",
    "Selector",
    "ToolCall",
    "reference_from_query",
    "reference_query",
]

ToolCall = Callable[[str, dict[str, Any]], Awaitable[Mapping[str, Any] | None]]
"""Runs one tool as the console principal; None when no tool has that name."""

PAGE_SIZE: Final = 50
CONTAINER_PAGE_SIZE: Final = 100
MAX_CONTAINER_PAGES: Final = 20
MAX_QUERY_VALUE: Final = 4096


class _AnyCollection(enum.Enum):
    ANY = "any"


ANY_COLLECTION: Final = _AnyCollection.ANY
"""A namespace's records in every collection and outside any (not the same as None)."""

LIFECYCLE_ACTIONS: Final[Mapping[str, str]] = {
    "archive": "memory_archive",
    "restore": "memory_restore",
    "forget": "memory_forget",
}
"""Console action -> the tool it runs."""

_HTTP_STATUSES: Final[Mapping[str, int]] = {
    "invalid_request": 400,  # malformed input: a value the tool or its schema refuses
    "not_found": 404,
    "conflict": 409,  # a stale revision or cursor, a record in the wrong state
    # The server's own trouble, not the request's: the memory cannot be read or written
    # now, or a change's outcome is not known.
    "storage_error": 503,
    "retrieval_error": 503,
    "internal_error": 500,
    "uncertain": 500,
}
"""A failed tool result's `status` -> the HTTP status of the page that shows it."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool's structured result; `ok` is False for a tool error or a missing tool."""

    ok: bool
    payload: Mapping[str, Any]

    @property
    def status(self) -> str:
        return str(self.payload.get("status", ""))

    @property
    def code(self) -> str:
        return str(self.payload.get("code") or self.payload.get("status") or "error")

    @property
    def message(self) -> str:
        return str(self.payload.get("message", ""))

    def http_status(self, otherwise: int) -> int:
        """The HTTP status of a page showing this outcome: 200 when it succeeded; for a
        tool error, 400 for malformed input, 404 for a record that does not exist, 409
        only for a real conflict, 500 or 503 for the server's own trouble; `otherwise`
        for any other refusal."""
        if self.ok:
            return 200
        return _HTTP_STATUSES.get(self.status, otherwise)


_UNAVAILABLE: Final = Outcome(
    False,
    {
        "status": "unavailable",
        "code": "tool_unavailable",
        "message": "That memory tool is switched off on this server.",
    },
)


@dataclass(frozen=True, slots=True)
class Selector:
    """Which records a listing shows: a scope, or a namespace, or one collection of it
    (`collection` None: the records outside any collection)."""

    scope: str
    namespace: str | None = None
    collection: str | _AnyCollection | None = ANY_COLLECTION

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {"scope": self.scope}
        if self.namespace is not None:
            arguments["namespace_id"] = self.namespace
            if self.collection is not ANY_COLLECTION:
                arguments["collection_id"] = self.collection
        return arguments


@dataclass(frozen=True, slots=True)
class Containers:
    """Namespaces of a scope, or collections of a namespace, as listing found them."""

    counts: tuple[tuple[str, int], ...] = ()
    """Each name, sorted, with how many records it holds."""
    outside: int = 0
    """Records outside any namespace (legacy) or outside any collection."""
    complete: bool = True
    error: Outcome | None = None


def reference_from_query(query: Mapping[str, str]) -> dict[str, Any] | None:
    """The memory reference a record URL names, or None when the URL names none.

    `scope` and `id` always; `namespace` (and `collection`, absent for none) for a
    canonical record, none of them for a legacy one. Values are validated by the tools.
    """
    scope, memory_id = query.get("scope"), query.get("id")
    if not scope or not memory_id or any(len(v) > MAX_QUERY_VALUE for v in query.values()):
        return None
    namespace = query.get("namespace")
    if namespace is None:
        return {"schema_version": 1, "scope": scope, "id": memory_id}
    return {
        "schema_version": 2,
        "scope": scope,
        "namespace_id": namespace,
        "collection_id": query.get("collection") or None,
        "id": memory_id,
    }


def reference_query(reference: Mapping[str, Any]) -> str:
    """The query string of a record URL for `reference` (inverse of the above)."""
    pairs = [("scope", str(reference.get("scope", "")))]
    if reference.get("schema_version") == 2:
        pairs.append(("namespace", str(reference.get("namespace_id", ""))))
        if reference.get("collection_id") is not None:
            pairs.append(("collection", str(reference["collection_id"])))
    pairs.append(("id", str(reference.get("id", ""))))
    return urlencode(pairs)


class MemoryBrowser:
    """Memory as the console shows it, over whichever memory tools exist.

    Tools are named by their memory-plugin ids (`memory_list`, ...); `tools` maps each
    one that exists to its public name, under which it is run and audited.
    """

    def __init__(self, call: ToolCall, tools: Mapping[str, str], scopes: tuple[str, ...]) -> None:
        self._call = call
        self._tools = dict(tools)
        self._local = {public: local for local, public in self._tools.items()}
        self.scopes = scopes

    def can(self, tool: str) -> bool:
        return tool in self._tools

    def memory_tool(self, public_name: str) -> str | None:
        """The memory-plugin id of a public tool name, or None for any other tool."""
        return self._local.get(public_name)

    async def run(self, tool: str, arguments: dict[str, Any]) -> Outcome:
        public = self._tools.get(tool)
        if public is None:
            return _UNAVAILABLE
        result = await self._call(public, arguments)
        if result is None:
            return _UNAVAILABLE
        structured = result.get("structuredContent")
        payload = structured if isinstance(structured, Mapping) else {}
        return Outcome(not result.get("isError"), payload)

    async def page(self, selector: Selector, cursor: str | None) -> Outcome:
        """One page of records (50 per page); `cursor` continues a listing."""
        arguments = selector.arguments()
        if cursor:
            arguments["cursor"] = cursor
        else:
            arguments["page_size"] = PAGE_SIZE
        return await self.run("memory_list", arguments)

    async def containers(self, selector: Selector) -> Containers:
        """The namespaces of a scope (or the collections of a namespace) that hold records.

        Listing names no containers, so this walks the listing's references, at most
        `MAX_CONTAINER_PAGES` pages; `complete` says whether it saw every record.
        """
        counts: dict[str, int] = {}
        outside = 0
        cursor: str | None = None
        arguments = selector.arguments()
        for _ in range(MAX_CONTAINER_PAGES):
            request = dict(arguments)
            if cursor is None:
                request["page_size"] = CONTAINER_PAGE_SIZE
            else:
                request["cursor"] = cursor
            outcome = await self.run("memory_list", request)
            if not outcome.ok:
                return Containers(error=outcome)
            for item in outcome.payload.get("memories", []):
                reference = item.get("reference", {}) if isinstance(item, Mapping) else {}
                key = "namespace_id" if selector.namespace is None else "collection_id"
                name = reference.get(key)
                if isinstance(name, str):
                    counts[name] = counts.get(name, 0) + 1
                else:
                    outside += 1
            page = outcome.payload.get("page", {})
            cursor = page.get("next_cursor") if isinstance(page, Mapping) else None
            if not isinstance(cursor, str):
                return Containers(tuple(sorted(counts.items())), outside)
        return Containers(tuple(sorted(counts.items())), outside, complete=False)

    async def inspect(self, reference: object) -> Outcome:
        return await self.run("memory_inspect", {"reference": reference})

    async def recall(self, scope: str, query: str, namespace: str | None) -> Outcome:
        arguments: dict[str, Any] = {"scope": scope, "query": query}
        if namespace:
            arguments["namespace_id"] = namespace
        return await self.run("memory_recall", arguments)

    async def change(
        self, action: str, reference: Mapping[str, Any], expected_revision: int
    ) -> Outcome:
        """Archive, restore or forget one record, as a person in the console."""
        arguments = {"reference": dict(reference), "expected_revision": expected_revision}
        return await self.run(LIFECYCLE_ACTIONS[action], arguments)
